"""The token gate: a trial's token ids against the numpy reference decoder's, for the same model,
prompt and quantization class.

- `bit-exact`: every token is the reference's greedy choice.
- `quality-class`: the tokens differ, but at every position where the runtime's choice is not the
  reference's argmax (given the runtime's own prefix, teacher-forced through the reference), the
  two were a near-tie: the reference's logit gap between them is at most `tie` logit standard
  deviations. A different sample from the same quality class, not a worse one (the seed's words).
- `mismatch`: some choice was not a near-tie: a bug, a wrong conversion or a lossy format.

Prefill and decode are gated apart (the seed's split posture: "decode bit-exact, prefill
quality-class"): the prefill gate judges token 0, the one the prefill's last logits choose; the
decode gate judges tokens 1.., each against the reference given the same prefix, so a fork at
prefill does not make every later decode token count as wrong.

Pure: the caller supplies the reference tokens and a `score` function (teacher-forced reference
logits of a token sequence); ``runtimes/reference.py`` provides both.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

GateVerdict = Literal["bit-exact", "quality-class", "mismatch"]

# Near-tie tolerance in logit standard deviations, by how far the runtime's arithmetic is from the
# reference's: same weights in float32 (only accumulation order differs); the same quantized
# weights with other activation precision or kernels; a different quantizer of the same class.
TIE: dict[str, float] = {"same-weights": 0.05, "same-class": 0.5, "other-quantizer": 1.0}

Score = Callable[[Sequence[int]], np.ndarray]


@dataclass(frozen=True)
class Gate:
    prefill: GateVerdict
    decode: GateVerdict
    first_divergence: int | None  # first position where the tokens differ from the reference's
    worst_margin: float | None  # largest gap (logit sds) at a position where the runtime left the argmax
    positions_off: int  # positions where the runtime's token was not the reference's argmax

    @property
    def overall(self) -> GateVerdict:
        order = ("bit-exact", "quality-class", "mismatch")
        return max(self.prefill, self.decode, key=order.index)

    def label(self) -> str:
        if self.prefill == self.decode:
            return self.prefill
        return f"prefill {self.prefill}, decode {self.decode}"


def margins(logits: np.ndarray, tokens: Sequence[int]) -> np.ndarray:
    """Per position: (max logit - logit of the chosen token) / sd of that row's logits."""
    rows = np.asarray(logits, dtype=np.float64)
    chosen = rows[np.arange(len(tokens)), np.asarray(tokens)]
    sd = rows.std(axis=1)
    sd[sd == 0] = 1.0
    return np.asarray((rows.max(axis=1) - chosen) / sd)


def _verdict(m: np.ndarray, tie: float) -> GateVerdict:
    off = m > 0
    if not off.any():
        return "bit-exact"
    return "quality-class" if float(m[off].max()) <= tie else "mismatch"


def gate(tokens: Sequence[int], reference: Sequence[int], score: Score, tie: float) -> Gate:
    """Gate one trial's tokens. `score(tokens)` is only called when the tokens differ."""
    if not tokens:
        raise ValueError("no tokens to gate")
    first = next((i for i, (a, b) in enumerate(zip(tokens, reference, strict=False)) if a != b), None)
    if first is None and len(tokens) == len(reference):
        return Gate("bit-exact", "bit-exact", None, None, 0)
    if first is None:
        first = min(len(tokens), len(reference))
    m = margins(score(tokens), tokens)
    off = m > 0
    return Gate(
        prefill=_verdict(m[:1], tie), decode=_verdict(m[1:], tie), first_divergence=first,
        worst_margin=float(m[off].max()) if off.any() else 0.0, positions_off=int(off.sum()),
    )


__all__ = ["TIE", "Gate", "GateVerdict", "Score", "gate", "margins"]
