"""The prompt every runtime is fed: the harness's `PromptMaker`, reproduced from the spec alone.

A spec without `prompt_ids` gets a SplitMix64 stream from `seed`, each id = next() % vocab
(``ios_harness/Sources/HarnessCore/PromptMaker.swift``). Adapters feed token ids, never text, so
every runtime sees exactly the prompt the raw loop sees.
"""

from __future__ import annotations

from orchestrator.protocol import TrialSpec

_MASK = (1 << 64) - 1


def prompt_ids(seed: int, count: int, vocab: int) -> list[int]:
    state = seed & _MASK  # Int64 bit pattern, as the Swift side reads a negative seed
    out: list[int] = []
    for _ in range(count):
        state = (state + 0x9E3779B97F4A7C15) & _MASK
        z = state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK
        z ^= z >> 31
        out.append(z % vocab)
    return out


def spec_prompt(spec: TrialSpec, vocab: int) -> list[int]:
    return list(spec.prompt_ids) if spec.prompt_ids is not None else prompt_ids(spec.seed, spec.prompt_tokens, vocab)


__all__ = ["prompt_ids", "spec_prompt"]
