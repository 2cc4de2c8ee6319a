"""The token gate on made-up logits: bit-exact, quality-class at near-ties, mismatch; prefill and
decode judged apart."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest

from orchestrator.analysis.tokengate import Gate, gate, margins

VOCAB = 8


def logits_for(best: Sequence[int], gaps: dict[int, tuple[int, float]] | None = None) -> np.ndarray:
    """Rows where `best[i]` wins by a wide margin; gaps[i] = (runner-up, its gap in raw logits)."""
    rows = np.zeros((len(best), VOCAB))
    rows[np.arange(len(best)), list(best)] = 10.0
    for i, (tok, gap) in (gaps or {}).items():
        rows[i, tok] = 10.0 - gap
    return rows


def never(_: Sequence[int]) -> np.ndarray:
    raise AssertionError("identical tokens need no scoring")


def test_identical_tokens_are_bit_exact_without_scoring() -> None:
    g = gate([1, 2, 3], [1, 2, 3], never, tie=0.5)
    assert g == Gate("bit-exact", "bit-exact", None, None, 0) and g.overall == "bit-exact" and g.label() == "bit-exact"


def test_a_decode_fork_at_a_near_tie_is_quality_class() -> None:
    ref = [1, 2, 3, 4]
    ours = [1, 2, 5, 5]  # at 2 the runtime took 5, which the reference had 0.01 sd behind
    rows = logits_for([1, 2, 3, 5], {2: (5, 0.01)})
    sd = rows[2].std()
    rows[2, 5] = 10.0 - 0.01 * sd
    g = gate(ours, ref, lambda t: rows, tie=0.05)
    assert (g.prefill, g.decode, g.first_divergence, g.positions_off) == ("bit-exact", "quality-class", 2, 1)
    assert g.worst_margin == pytest.approx(0.01, rel=0.05)  # the sd moved a little with the runner-up
    assert g.label() == "prefill bit-exact, decode quality-class" and g.overall == "quality-class"


def test_a_wide_gap_is_a_mismatch() -> None:
    rows = logits_for([1, 2, 3])
    g = gate([1, 7, 3], [1, 2, 3], lambda t: rows, tie=0.5)
    assert g.decode == "mismatch" and g.prefill == "bit-exact" and g.first_divergence == 1


def test_prefill_fork_is_judged_apart_from_decode() -> None:
    """Token 0 forks at a near-tie; every later token is the reference's argmax given the runtime's
    own prefix (teacher-forced): the decode is still bit-exact."""
    rows = logits_for([4, 2, 2])
    rows[0, 6] = 10.0 - 0.001 * rows[0].std()
    g = gate([6, 2, 2], [4, 1, 1], lambda t: rows, tie=0.05)
    assert (g.prefill, g.decode) == ("quality-class", "bit-exact") and g.first_divergence == 0


def test_margins_are_in_logit_standard_deviations() -> None:
    rows = np.array([[0.0, 1.0, 2.0, 3.0]])
    assert margins(rows, [1])[0] == pytest.approx(2.0 / rows[0].std())
    assert margins(rows, [3])[0] == 0.0


def test_no_tokens_is_an_error() -> None:
    with pytest.raises(ValueError):
        gate([], [1], never, tie=0.5)
