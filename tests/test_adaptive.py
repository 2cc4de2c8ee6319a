"""The adaptive design: alpha-spending boundaries, the signed-rank shift, the looks and when they stop."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import norm, wilcoxon

from orchestrator.analysis import ArmSample, compare
from orchestrator.analysis._resample import layout
from orchestrator.analysis._signed_rank import block_differences, signed_rank
from orchestrator.analysis.groupseq import look_times, one_sided_bounds, operating, spent, two_sided_bounds
from orchestrator.analysis.sequential import Timed, adaptive_due, adaptive_looks, decide_at, replay
from orchestrator.config.plan import DecisionRule

RULE = DecisionRule()  # the defaults: adaptive, Hodges-Lehmann


# ----------------------------------------------------------------------------------------------
# Boundaries against published constants


def test_obrien_fleming_type_spending_matches_the_published_bounds() -> None:
    """Lan-DeMets O'Brien-Fleming-type, one-sided 0.025, four equally spaced looks (gsDesign's sfLDOF)."""
    info = (1.0, 2.0, 3.0, 4.0)
    bounds = one_sided_bounds(info, tuple(i / 4 for i in info), 0.025, "obrien_fleming")
    assert bounds == pytest.approx((4.333, 2.963, 2.359, 2.014), abs=2e-3)


def test_pocock_type_spending_matches_the_published_bounds() -> None:
    """Lan-DeMets Pocock-type, two-sided 0.05, five equally spaced looks (Jennison & Turnbull, ch. 7)."""
    info = (1.0, 2.0, 3.0, 4.0, 5.0)
    bounds = two_sided_bounds(info, tuple(i / 5 for i in info), 0.05, "pocock")
    assert bounds == pytest.approx((2.438, 2.427, 2.410, 2.397, 2.386), abs=2e-3)


def test_one_look_is_the_fixed_test() -> None:
    assert two_sided_bounds((40.0,), (1.0,), 0.05, "pocock") == pytest.approx((norm.isf(0.025),))
    assert one_sided_bounds((40.0,), (1.0,), 0.05, "obrien_fleming") == pytest.approx((norm.isf(0.05),))
    assert spent("pocock", 0.05, 1.0) == pytest.approx(0.05) and spent("obrien_fleming", 0.05, 0.0) == 0.0


def test_the_whole_alpha_is_spent_when_the_final_analysis_comes_early() -> None:
    """A session that ends at 50 of its 120 launches per arm: the final analysis spends what is left."""
    looks = [16, 24, 32, 40, 48, 56, 120]
    for final in (None, 50):
        info, times = look_times(looks, 120, final)
        assert times[-1] == 1.0 and info[-1] == (120 if final is None else 50)
        bounds = two_sided_bounds(info, times, 0.05, "pocock")
        se = tuple(0.1 / math.sqrt(n) for n in info)
        o = operating(0.0, info, se, bounds, None, min_effect=0.0, margin=0.03)
        assert o.faster + o.slower == pytest.approx(0.05, abs=1e-3)


# ----------------------------------------------------------------------------------------------
# Operating characteristics against the closed forms of a fixed design


@pytest.mark.parametrize("n", [20, 40, 120])
def test_operating_one_look_matches_the_closed_forms(n: int) -> None:
    se = 0.08 / math.sqrt(n)
    z, b = norm.isf(0.025), norm.isf(0.05)
    gap = math.log(1.05)
    o = operating(gap, (float(n),), (se,), (z,), (b,), min_effect=0.0, margin=0.03)
    assert o.faster == pytest.approx(norm.sf(z - gap / se), abs=3e-3)  # the power of the z test
    null = operating(0.0, (float(n),), (se,), (z,), (b,), min_effect=0.0, margin=0.03)
    # TOST inside the margin, where the difference test does not reject (a difference is said first)
    inside = norm.cdf(min(math.log(1.03) / se - b, z)) - norm.cdf(max(math.log(0.97) / se + b, -z))
    assert null.equivalent == pytest.approx(max(0.0, inside), abs=3e-3)
    assert null.faster + null.slower == pytest.approx(2 * norm.sf(z), abs=2e-3)
    assert null.mean_launches == pytest.approx(n)


# ----------------------------------------------------------------------------------------------
# The Hodges-Lehmann shift and its signed-rank test


def test_signed_rank_matches_scipy_and_its_interval_inverts_the_test() -> None:
    rng = np.random.default_rng(4)
    for k in (6, 10, 25):
        d = rng.normal(0.01, 0.05, k)
        sr = signed_rank(d)
        assert sr.p_two_sided() == pytest.approx(wilcoxon(d, method="exact").pvalue, rel=1e-9)
        assert sr.p_slower() == pytest.approx(wilcoxon(d, method="exact", alternative="less").pvalue, rel=1e-9)
        i, j = np.triu_indices(k)
        assert sr.estimate == pytest.approx(float(np.median((d[i] + d[j]) / 2)))
        for alpha in (0.01, 0.05, 0.2):
            lo, hi = sr.interval(alpha / 2)
            assert (sr.p_two_sided() < alpha) == (lo > 0 or hi < 0), (k, alpha)


def test_signed_rank_interval_covers_at_its_level() -> None:
    rng = np.random.default_rng(5)
    hits = sum(lo <= 0.02 <= hi for lo, hi in (signed_rank(rng.standard_t(3, 15) * 0.05 + 0.02).interval(0.05)
                                               for _ in range(2000)))
    assert 0.88 <= hits / 2000 <= 0.93  # nominal 90% (a discrete test: at least 90% up to Monte Carlo error)


def test_too_few_blocks_give_no_finite_bound() -> None:
    sr = signed_rank(np.array([0.1, 0.2, 0.3]))
    assert sr.interval(0.01) == (-math.inf, math.inf)
    assert sr.p_two_sided() == pytest.approx(0.25)


def test_block_differences_and_the_shift_of_abba_blocks() -> None:
    base = [50.0, 51.0, 49.0, 50.0, 52.0, 50.0]
    cand = [55.0, 56.0, 54.0, 55.0, 57.0, 55.0]
    blocks = np.repeat(np.arange(3), 2)
    b, c = ArmSample("b", np.array(base), blocks), ArmSample("c", np.array(cand), blocks)
    y = np.log(np.concatenate([b.values, c.values]))
    paired = layout(y, np.repeat([False, True], 6), np.concatenate([blocks, blocks]))
    d = block_differences(paired)
    expected = [np.log(cand[2 * k: 2 * k + 2]).mean() - np.log(base[2 * k: 2 * k + 2]).mean() for k in range(3)]
    assert sorted(d) == pytest.approx(sorted(expected))
    comp = compare(b, c, RULE)
    assert comp.ratio == pytest.approx(math.exp(np.median(
        [(x + y) / 2 for i, x in enumerate(d) for y in d[i:]])))
    swapped = compare(c, b, RULE)  # swapping the arms negates the shift and keeps p
    assert swapped.ratio == pytest.approx(1 / comp.ratio) and swapped.p_value == comp.p_value


# ----------------------------------------------------------------------------------------------
# Looks and stopping


def test_the_looks_of_the_default_design() -> None:
    looks = adaptive_looks(RULE, 120)
    assert [lk.n_per_arm for lk in looks] == [*range(16, 120, 4), 120]
    assert looks[-1].final and not looks[0].final and looks[0].of == len(looks)
    assert all(0 < lk.alpha < 0.05 for lk in looks) and all(0 < lk.gamma <= 0.05 for lk in looks)
    # O'Brien-Fleming-type equivalence: nearly nothing early, close to the fixed 5% at the end
    assert looks[0].gamma < 1e-6 and looks[-1].gamma > 0.03
    assert adaptive_looks(RULE, 12)[0].final  # a plan shorter than the first look: one analysis
    assert [adaptive_looks(RULE, 120, final_n=50)[i].n_per_arm for i in (-2, -1)] == [48, 50]
    assert adaptive_due(RULE, 120, 15) is None and adaptive_due(RULE, 120, 17) == 0
    assert adaptive_due(RULE, 120, 20, after=0) == 1 and adaptive_due(RULE, 120, 21, after=1) is None
    assert adaptive_due(RULE, 120, 120) == len(looks) - 2  # the cap is the verdict table's, not a look
    assert adaptive_due(DecisionRule(adaptive=None), 120, 40) is None
    with pytest.raises(ValueError, match="no adaptive design"):
        adaptive_looks(DecisionRule(adaptive=None), 120)


def abba_session(rng: np.random.Generator, blocks: int, gap: float, sigma: float) -> dict[str, Timed]:
    """One ABBA session in arrival order: base, cand, cand, base per block."""
    is_cand = np.tile([False, True, True, False], blocks)
    y = 50 * np.exp(rng.normal(0, sigma, is_cand.size) + is_cand * math.log1p(gap))
    block = np.repeat(np.arange(blocks), 4)
    seq = np.arange(is_cand.size)
    return {name: Timed(ArmSample(name, y[mask], block[mask]), seq[mask])
            for name, mask in (("base", ~is_cand), ("cand", is_cand))}


def test_a_big_gap_is_answered_at_the_first_look() -> None:
    arms = abba_session(np.random.default_rng(1), 60, gap=0.2, sigma=0.03)
    (comp,) = replay(arms, [("base", "cand")], RULE, 120)
    assert comp is not None and comp.verdict == "faster" and comp.n_baseline == 16
    assert comp.reason.startswith("look 1 of up to 27 (16 launches per arm): p=")


def test_no_gap_with_little_noise_is_answered_equivalent_before_the_cap() -> None:
    arms = abba_session(np.random.default_rng(2), 60, gap=0.0, sigma=0.01)
    (comp,) = replay(arms, [("base", "cand")], RULE, 120)
    assert comp is not None and comp.verdict == "equivalent" and comp.n_baseline < 120


def test_a_session_that_ended_at_an_interim_look_keeps_that_looks_answer() -> None:
    """The data ends exactly at an interim look that answered: the verdict is that look's (its levels),
    never a final analysis at the same data spending what is left."""
    arms = abba_session(np.random.default_rng(2), 60, gap=0.0, sigma=0.01)
    (full,) = replay(arms, [("base", "cand")], RULE, 120)
    assert full is not None and not full.reason.startswith("final")
    n = full.n_baseline
    cut = {a: Timed(ArmSample(a, t.sample.values[:n], t.sample.blocks[:n]), t.seq[:n]) for a, t in arms.items()}
    (again,) = replay(cut, [("base", "cand")], RULE, 120)
    assert again == full


def test_a_session_short_of_its_cap_gets_a_final_analysis_there() -> None:
    arms = abba_session(np.random.default_rng(3), 10, gap=0.0, sigma=0.2)
    cut = {a: Timed(ArmSample(a, t.sample.values[:18], t.sample.blocks[:18]), t.seq[:18]) for a, t in arms.items()}
    (comp,) = replay(cut, [("base", "cand")], RULE, 120)
    assert comp is not None and comp.reason.startswith("final analysis (18 launches per arm)")
    assert comp.alpha > adaptive_looks(RULE, 120)[0].alpha  # what was left to spend


def test_a_gap_inside_the_noise_runs_to_the_final_analysis() -> None:
    arms = abba_session(np.random.default_rng(3), 10, gap=0.0, sigma=0.2)
    (comp,) = replay(arms, [("base", "cand")], RULE, 20)
    assert comp is not None and comp.verdict == "inconclusive" and comp.reason.startswith("final analysis (20")


def test_the_session_and_the_verdict_table_see_the_same_looks() -> None:
    """Each interim look the replay takes on a prefix of the session equals decide_at on that prefix."""
    rng = np.random.default_rng(7)
    arms = abba_session(rng, 60, gap=0.03, sigma=0.06)
    looks = adaptive_looks(RULE, 120)
    (comp,) = replay(arms, [("base", "cand")], RULE, 120)
    assert comp is not None
    stop = next(lk for lk in looks if lk.n_per_arm == comp.n_baseline)
    upto = {a: ArmSample(a, t.sample.values[: stop.n_per_arm], t.sample.blocks[: stop.n_per_arm])
            for a, t in arms.items()}
    (again,) = decide_at([(upto["base"], upto["cand"])], RULE, stop)
    assert again is not None and again.verdict == comp.verdict and again.ratio == comp.ratio
    for earlier in looks[: stop.index]:
        part = {a: ArmSample(a, t.sample.values[: earlier.n_per_arm], t.sample.blocks[: earlier.n_per_arm])
                for a, t in arms.items()}
        (before,) = decide_at([(part["base"], part["cand"])], RULE, earlier)
        assert before is not None and before.verdict == "inconclusive"  # no answer before the stop


def test_small_repetition_smoke_check_of_the_error_rates() -> None:
    """40 sessions each (the >= 200-repetition figures are bench/bench_adaptive.py's): loose bounds."""
    rng = np.random.default_rng(11)
    verdicts = {gap: [] for gap in (0.0, 0.05)}
    launches = {gap: [] for gap in (0.0, 0.05)}
    for gap in verdicts:
        for _ in range(40):
            (comp,) = replay(abba_session(rng, 60, gap, 0.06), [("base", "cand")], RULE, 120)
            assert comp is not None
            verdicts[gap].append(comp.verdict)
            launches[gap].append(comp.n_baseline)
    assert verdicts[0.0].count("equivalent") >= 28 and verdicts[0.0].count("faster") <= 4
    assert verdicts[0.05].count("faster") >= 34 and np.mean(launches[0.05]) <= 50
