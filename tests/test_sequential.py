"""Group-sequential looks with futility stops."""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt
import pytest

from orchestrator.analysis import ArmSample, LookDecision, due_look, look
from orchestrator.config.plan import DecisionRule, SequentialLooks

SEQ_RULE = DecisionRule(sequential=SequentialLooks(), estimator="median")  # looks 12/20/30/40, alpha 0.02, futility


def simulate_abba(
    rng: np.random.Generator, reps: int, n_blocks: int, gap: float, sigma: float = 0.06
) -> tuple[npt.NDArray[np.bool_], npt.NDArray[np.float64], npt.NDArray[np.int64]]:
    """The notes' noise model (AR(1) 0.3, -5% drift, 5% of launches throttled 25%), ABBA/BAAB blocks."""
    n, phi = 4 * n_blocks, 0.3
    cand_first = rng.random(reps) < 0.5
    is_cand = np.tile(np.array([False, True, True, False]), n_blocks)[None, :] ^ cand_first[:, None]
    innov = rng.normal(0.0, sigma * math.sqrt(1 - phi**2), (reps, n))
    e = np.empty((reps, n))
    e[:, 0] = rng.normal(0.0, sigma, reps)
    for t in range(1, n):
        e[:, t] = phi * e[:, t - 1] + innov[:, t]
    log_y = math.log(50.0) + np.log1p(-0.05 * np.arange(n) / (n - 1))[None, :] + e + is_cand * math.log1p(gap)
    log_y += math.log1p(-0.25) * (rng.random((reps, n)) < 0.05)
    return is_cand, np.exp(log_y), np.repeat(np.arange(n_blocks), 4)


def run_sequential(
    is_cand: npt.NDArray[np.bool_], y: npt.NDArray[np.float64], blocks: npt.NDArray[np.int64], r: int
) -> LookDecision:
    """Take the looks in order on the first n/2 ABBA blocks until one stops; return the stopping one."""
    assert SEQ_RULE.sequential is not None
    decision: LookDecision | None = None
    for i, n in enumerate(SEQ_RULE.sequential.looks):
        keep = blocks < n // 2
        c = is_cand[r] & keep
        bl = ~is_cand[r] & keep
        decision = look(
            ArmSample("base", y[r][bl], blocks[bl]), ArmSample("cand", y[r][c], blocks[c]), SEQ_RULE, i, seed=r
        )
        assert decision.n_per_arm == n
        if decision.action != "continue":
            return decision
    raise AssertionError(f"no stop by the last look: {decision}")


def test_big_effect_stops_at_look_0_as_decided() -> None:
    is_cand, y, blocks = simulate_abba(np.random.default_rng(1), 30, 20, gap=0.20)
    stops = [run_sequential(is_cand, y, blocks, r) for r in range(30)]
    at_0 = [s for s in stops if s.look == 0 and s.action == "decided"]
    assert len(at_0) >= 27
    assert all(s.comparison.verdict == "faster" for s in at_0)
    assert all(s.comparison.alpha == 0.02 for s in stops)


def test_null_effect_is_often_futile_and_rarely_decided() -> None:
    reps = 200
    is_cand, y, blocks = simulate_abba(np.random.default_rng(2), reps, 20, gap=0.0)
    stops = [run_sequential(is_cand, y, blocks, r) for r in range(reps)]
    actions = [s.action for s in stops]
    decided = actions.count("decided") / reps
    futile = actions.count("futile") / reps
    assert decided <= 0.07, decided  # the overall false-positive rate of the scheme
    assert futile >= 0.4, futile
    launches = np.mean([s.n_per_arm for s in stops])
    assert launches < 32  # fewer than the fixed design's 40 per arm, on average
    assert all(s.action == "final" for s in stops if s.look == 3 and s.action != "decided")


def test_final_at_the_last_look_without_a_decision() -> None:
    rng = np.random.default_rng(3)
    blocks = np.repeat(np.arange(20), 2)
    base = ArmSample("base", 50 * np.exp(rng.normal(0, 0.002, 40)), blocks)
    cand = ArmSample("cand", 50 * np.exp(rng.normal(0, 0.002, 40)), blocks)
    last = look(base, cand, SEQ_RULE, 3)
    assert last.action == "final" and last.look == 3 and last.n_per_arm == 40
    assert last.comparison.verdict == "equivalent"
    # the same data at an early look: no futility bound that low p, so it continues or stops futile
    early = look(base, cand, SEQ_RULE, 1)
    assert early.action == ("futile" if early.comparison.p_value > 0.538 else "continue")


def test_look_needs_a_sequential_rule_and_a_valid_index() -> None:
    blocks = np.repeat(np.arange(6), 2)
    base = ArmSample("base", np.linspace(48, 52, 12), blocks)
    cand = ArmSample("cand", np.linspace(49, 53, 12), blocks)
    with pytest.raises(ValueError, match="no sequential looks"):
        look(base, cand, DecisionRule(), 0)
    with pytest.raises(IndexError):
        look(base, cand, SEQ_RULE, 4)


def test_due_look() -> None:
    assert due_look(DecisionRule(), 40) is None
    assert due_look(SEQ_RULE, 0) is None
    assert due_look(SEQ_RULE, 11) is None
    assert due_look(SEQ_RULE, 12) == 0
    assert due_look(SEQ_RULE, 19) == 0
    assert due_look(SEQ_RULE, 20) == 1
    assert due_look(SEQ_RULE, 45) == 3
    assert due_look(SEQ_RULE, 19, after=0) is None
    assert due_look(SEQ_RULE, 20, after=0) == 1
    assert due_look(SEQ_RULE, 25, after=1) is None
    assert due_look(SEQ_RULE, 12, after=None) == 0


def test_a_look_at_three_arms_decides_them_as_one_family() -> None:
    """A look decides a device's pairs as the final table does: Holm over the family at alpha_per_look.
    Over 60 seeded three-arm looks (one arm 6% faster, 12 launches per arm), the family never decides a
    pair that the pair alone would not, and holds back some that the pair alone would have decided."""
    from orchestrator.analysis.sequential import look_family

    rule = SEQ_RULE
    alone = rule.model_copy(update={"multiplicity": "none"})
    held_back = 0
    for seed in range(60):
        rng = np.random.default_rng(seed)
        blocks = np.arange(12)
        arms = [ArmSample(name, 50 * np.exp(gap + rng.normal(0, 0.06, 12)), blocks)
                for name, gap in (("a", 0.0), ("b", 0.0), ("c", math.log(1.06)))]
        pairs = [(arms[0], arms[1]), (arms[0], arms[2]), (arms[1], arms[2])]
        family = [d.action == "decided" for d in look_family(pairs, rule, 0, seed=seed)]
        single = [d.action == "decided" for d in look_family(pairs, alone, 0, seed=seed)]
        assert all(s or not f for f, s in zip(family, single, strict=True)), seed
        held_back += sum(s and not f for f, s in zip(family, single, strict=True))
    assert held_back > 0
