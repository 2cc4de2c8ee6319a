"""The token gate's reference decoder: numpy decodes and teacher-forced scores of the model's own
weights, each computed once per model and sequence: what ``analysis.gating`` gates against."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from orchestrator.runtimes.prompt import prompt_ids
from orchestrator.runtimes.reference import Weights, greedy, score


@dataclass
class _Reference:
    weights: Weights
    prompt: list[int]
    tokens: list[int]
    scored: dict[tuple[int, ...], np.ndarray]


class Gater:
    """Reference decodes and teacher-forced scores, each computed once per model and sequence."""

    def __init__(self) -> None:
        self._refs: dict[tuple[str, int, int, int, int], _Reference] = {}

    def reference(self, model: str, seed: int, prompt_tokens: int, decode_tokens: int, chunk: int) -> _Reference:
        key = (model, seed, prompt_tokens, decode_tokens, chunk)
        if key not in self._refs:
            w = Weights(model)
            prompt = prompt_ids(seed, prompt_tokens, w.shape.vocab)
            tokens = greedy(w, prompt, decode_tokens, 1).token_ids
            self._refs[key] = _Reference(w, prompt, tokens, {})
        return self._refs[key]

    def scores(self, ref: _Reference, seq: Sequence[int]) -> np.ndarray:
        """The reference's teacher-forced logits along `seq` (the gate's near-tie margins come from them)."""
        k = tuple(seq)
        if k not in ref.scored:
            ref.scored[k] = score(ref.weights, ref.prompt, list(seq))
        return ref.scored[k]
