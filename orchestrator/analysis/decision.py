"""The pre-committed A/B decision rule: the shift estimate, its p and interval, the verdict.

All statistics are on log tok/s of trial1. ``rule.estimator`` picks the statistic:

* ``hodges_lehmann`` (the default): each paired block gives ``d_k = mean(log c) - mean(log b)``;
  the ratio is ``exp`` of the median of the Walsh averages ``(d_i + d_j) / 2``; ``p_value`` is the
  exact Wilcoxon signed-rank test of the ``d_k`` (normal approximation beyond 400 blocks or with
  ties) and the CIs invert it (order statistics of the Walsh averages; ``ci_method`` and
  ``resamples`` are not used). Valid because arms are exchangeable within a block, so each ``d_k``
  is symmetric about the shift; nothing is resampled. It keeps ~95% of the mean's efficiency under
  normal noise and discounts throttled launches: on the simulator's noise (6%, AR(1) 0.3, drift,
  3% of launches 25% slower) its standard error at 120 launches per arm is 0.87% against the
  median's 1.08% (the median also pays for the session's drift). Its p cannot go below
  ``2 / 2**K`` with K blocks: 6 blocks reach 0.031, 8 blocks 0.0078.
* ``median``: the ratio of the (log-scale) medians with the within-block permutation test below.

An adaptive design (``rule.adaptive``, the default) calls :func:`compare` at each look with that
look's nominal levels (``alpha`` for the difference, ``gamma`` per side for equivalence); see
:mod:`orchestrator.analysis.sequential` for the looks and the calibration. For the median, one pair
of arms (baseline, candidate):

* Only *paired blocks* are analysed: blocks holding at least one value of each arm. A block where
  one arm is missing (every trial of that arm failed) cannot be permuted and would unbalance the
  drift cancellation, so it is dropped from everything (statistic, p, CI, sigma, counts); the
  ``reason`` says how many blocks and values were dropped. Unequal counts within a block (a
  failed trial leaving a gap) are fine.
* ``ratio = exp(median(log c) - median(log b))``, i.e. the ratio of the (log-scale) medians.
* ``p_value``: Monte Carlo within-block permutation test of the difference of medians of logs;
  arm labels are shuffled among the values of the same block only, ``rule.resamples`` times,
  ``p = (1 + #{|d*| >= |d|}) / (1 + R)``. ``p_one_sided_slower`` counts ``d* <= d`` instead.
* CI of the ratio (both the ``1 - alpha`` one and the 90% one used for equivalence):

  - ``block_bootstrap``: whole paired blocks resampled with replacement (both arms' values of a
    block move together), percentile bounds of the difference of medians, exponentiated.
  - ``permutation``: inversion of the within-block permutation test under a location-shift
    model: the CI is every log shift delta that the test does not reject at that level,
    ``{delta : p(delta) >= level}``, where ``p(delta)`` tests the data with the candidate's logs
    shifted by -delta, using the same permutations as the p-value. ``p(delta)`` is monotone on
    each side of the estimate, so each bound is a bracketed root search (to 0.05% in log units).
    Calibrated in simulation (90% CI covers ~90%), but about 5x slower than the bootstrap. With
    too few blocks for the test to ever reject, a bound is infinite (ratio 0 or inf).
    (Aligning the data by the estimate and reading quantiles, the cheap shortcut, was tried and
    under-covers for medians: ~85% for a nominal 90%.)

  In simulation under the notes' noise model (40/arm) the bootstrap covers 92-94% for a nominal
  90% and 96-97% for 95%.

* Verdict (either estimator): ``faster``/``slower`` if ``p < alpha`` and ``|ratio - 1| >= min_effect``
  (direction from the ratio); else ``equivalent`` if the ``1 - 2 gamma`` CI (90% in a fixed design)
  lies inside ``[1 - margin, 1 + margin]``; else ``inconclusive`` (at an interim look: continue).
* More than two arms (``rule.multiplicity == "holm"``): a device's pairs are one family of ``m``
  tests, and ``p`` above is Holm's step-down adjusted p (``in_family``), so the chance of any false
  ``faster``/``slower`` in the family stays <= alpha; the MDE is then stated at Holm's strictest
  level, ``alpha / m``.

Everything is seeded by ``seed`` (``np.random.default_rng``) and deterministic. Swapping the two
arms uses the same random draws, so it negates the statistic exactly and keeps the p-value.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from statistics import NormalDist
from typing import Literal

import numpy as np
import numpy.typing as npt

from orchestrator.analysis import _resample as rs
from orchestrator.analysis._signed_rank import block_differences, signed_rank
from orchestrator.config.plan import DecisionRule

Verdict = Literal["faster", "slower", "equivalent", "inconclusive"]


class InsufficientData(ValueError):
    """The two arms share no block, so nothing can be compared."""


@dataclass(frozen=True, eq=False)
class ArmSample:
    """One arm's trial1 tok/s values (one per finished launch, > 0) and the block of each."""

    name: str
    values: npt.NDArray[np.float64]
    blocks: npt.NDArray[np.int64]

    def __post_init__(self) -> None:
        values = np.asarray(self.values, dtype=np.float64)
        raw_blocks = np.asarray(self.blocks)
        if values.ndim != 1 or raw_blocks.shape != values.shape:
            raise ValueError(
                f"arm {self.name!r}: values and blocks must be 1-D of the same length "
                f"(got {values.shape} and {raw_blocks.shape})"
            )
        if not np.all(np.isfinite(values)) or np.any(values <= 0):
            raise ValueError(f"arm {self.name!r}: values must be finite and > 0 (tok/s)")
        integral = np.issubdtype(raw_blocks.dtype, np.integer) or (
            np.issubdtype(raw_blocks.dtype, np.floating)
            and bool(np.all(np.isfinite(raw_blocks)))
            and bool(np.all(np.mod(raw_blocks, 1) == 0))
        )
        if raw_blocks.size and not integral:
            raise ValueError(f"arm {self.name!r}: block indices must be integers")
        object.__setattr__(self, "values", values)
        object.__setattr__(self, "blocks", raw_blocks.astype(np.int64))

    @property
    def n(self) -> int:
        return int(self.values.size)

    @classmethod
    def of(cls, name: str, block_values: list[tuple[int, float]]) -> ArmSample:
        """From (block, value) pairs as a running session collects them."""
        return cls(name=name, values=np.array([v for _, v in block_values], dtype=np.float64),
                   blocks=np.array([b for b, _ in block_values], dtype=np.int64))


@dataclass(frozen=True)
class Comparison:
    baseline: str
    candidate: str
    n_baseline: int  # values used (paired blocks only)
    n_candidate: int
    median_baseline: float  # tok/s, exp(median(log values))
    median_candidate: float
    ratio: float  # exp(median(log c) - median(log b))
    ci_low: float  # (1 - alpha) CI of the ratio
    ci_high: float
    ci90_low: float  # 90% CI of the ratio (the equivalence test)
    ci90_high: float
    p_value: float  # two-sided within-block permutation p (this pair alone)
    p_one_sided_slower: float  # one-sided p that the candidate is slower
    sigma: float  # residual SD of log y ~ block + arm (launch-to-launch SD of log tok/s)
    mde: float  # minimum detectable effect (log units ~ fraction) at rule.power, two-sided alpha
    alpha: float
    verdict: Verdict
    reason: str
    rule_digest: str
    n_blocks: int  # paired blocks used
    n_dropped: int  # values dropped because their block lacks the other arm
    p_adjusted: float = math.nan  # Holm-adjusted p within the device's family of pairs (the verdict's p)
    family: int = 1  # pairs in that family
    note: str = ""  # what the reason adds to the rule's words (dropped blocks)


# Standard error of each estimator against the difference of means, under normal noise: the median
# keeps 2/pi of the mean's efficiency, Hodges-Lehmann 3/pi.
EFFICIENCY_FACTOR = {"median": math.sqrt(math.pi / 2), "hodges_lehmann": math.sqrt(math.pi / 3)}


def standard_error(sigma: float, n_per_arm: float, estimator: str = "median") -> float:
    """Standard error of the log ratio with ``n_per_arm`` launches per arm and launch noise ``sigma``."""
    return EFFICIENCY_FACTOR[estimator] * sigma * math.sqrt(2 / n_per_arm)


def mde(sigma: float, n_per_arm: float, alpha: float, power: float, *, two_sided: bool = True,
        estimator: str = "median") -> float:
    """Minimum detectable effect of the estimator's log ratio, as a fraction (log units).

    ``(z_{1-alpha/2} + z_power) * sigma * sqrt(2 / n) * f``: ``f = sqrt(pi/2)`` for the median and
    ``sqrt(pi/3)`` for Hodges-Lehmann (their efficiency loss against the mean under normal noise).
    ``z_{1-alpha}`` when one-sided. For unequal arms pass the harmonic mean of the two counts. NaN if
    sigma is NaN or n < 1.
    """
    if not (0 < alpha < 1 and 0 < power < 1):
        raise ValueError("alpha and power must be in (0, 1)")
    if math.isnan(sigma) or n_per_arm < 1:
        return float("nan")
    z = NormalDist()
    z_a = z.inv_cdf(1 - alpha / 2) if two_sided else z.inv_cdf(1 - alpha)
    return (z_a + z.inv_cdf(power)) * standard_error(sigma, n_per_arm, estimator)


def _pair(baseline: ArmSample, candidate: ArmSample) -> tuple[rs.Paired, int, int]:
    """Paired-block layout, plus the number of dropped blocks and dropped values."""
    shared = np.intersect1d(baseline.blocks, candidate.blocks)
    keep_b = np.isin(baseline.blocks, shared)
    keep_c = np.isin(candidate.blocks, shared)
    if shared.size == 0:
        raise InsufficientData(
            f"{baseline.name!r} ({baseline.n} values) and {candidate.name!r} ({candidate.n} values) share no block"
        )
    all_blocks = np.union1d(baseline.blocks, candidate.blocks)
    dropped_blocks = int(all_blocks.size - shared.size)
    dropped_values = int((~keep_b).sum() + (~keep_c).sum())
    y = np.log(np.concatenate([baseline.values[keep_b], candidate.values[keep_c]]))
    is_cand = np.concatenate([np.zeros(int(keep_b.sum()), bool), np.ones(int(keep_c.sum()), bool)])
    block = np.concatenate([baseline.blocks[keep_b], candidate.blocks[keep_c]])
    return rs.layout(y, is_cand, block), dropped_blocks, dropped_values


def _verdict(
    p: float, ratio: float, ci90: tuple[float, float], alpha: float, rule: DecisionRule, family: int = 1,
    gamma: float = 0.05,
) -> tuple[Verdict, str]:
    eff = ratio - 1
    margin = rule.equivalence_margin
    big = abs(eff) >= rule.min_effect
    sig = p < alpha
    name = f"Holm p over {family} pairs" if family > 1 else "p"
    p_txt = f"{name}={p:.4f} {'<' if sig else '>='} {alpha:g}"
    eff_txt = f"|{eff:+.1%}| {'>=' if big else '<'} {rule.min_effect:.1%}"
    if sig and big:
        verdict: Verdict = "faster" if eff > 0 else "slower"
        return verdict, f"{p_txt} and {eff_txt}: {verdict}"
    why_not = f"{p_txt} but {eff_txt}" if sig else p_txt
    inside = 1 - margin <= ci90[0] and ci90[1] <= 1 + margin
    ci_txt = (
        f"{100 * (1 - 2 * gamma):.3g}% CI [{ci90[0]:.3f}, {ci90[1]:.3f}] {'inside' if inside else 'not inside'} "
        f"[{1 - margin:.3f}, {1 + margin:.3f}]"
    )
    verdict = "equivalent" if inside else "inconclusive"
    return verdict, f"{why_not}; {ci_txt}: {verdict}"


def compare(
    baseline: ArmSample,
    candidate: ArmSample,
    rule: DecisionRule,
    *,
    alpha: float | None = None,
    gamma: float = 0.05,
    seed: int = 0,
) -> Comparison:
    """Apply the pre-committed rule to candidate vs baseline (see the module docstring).

    ``alpha`` overrides ``rule.alpha`` (sequential looks pass their per-look alpha); ``gamma`` is
    the error of each one-sided equivalence test (0.05: the 90% CI; an adaptive look passes its
    spent share). Raises :class:`InsufficientData` if the arms share no block.
    """
    a = rule.alpha if alpha is None else alpha
    if not 0 < a < 1:
        raise ValueError(f"alpha must be in (0, 1), got {a}")
    if not 0 < gamma < 0.5:
        raise ValueError(f"gamma must be in (0, 0.5), got {gamma}")
    paired, dropped_blocks, dropped_values = _pair(baseline, candidate)
    if rule.estimator == "hodges_lehmann":
        sr = signed_rank(block_differences(paired))
        d, p, p_slower = sr.estimate, sr.p_two_sided(), sr.p_slower()
        (lo, hi), (lo90, hi90) = sr.interval(a / 2), sr.interval(gamma)
    else:
        r = rule.resamples
        d = rs.median_difference(paired)
        rng = np.random.default_rng(seed)
        draws = rs.draw_permutations(paired, r, rng)
        null = rs.permuted_statistics(paired, paired.y, draws)
        p = (1 + int(np.count_nonzero(np.abs(null) >= abs(d) - rs.TIE_TOL))) / (1 + r)
        p_slower = (1 + int(np.count_nonzero(null <= d + rs.TIE_TOL))) / (1 + r)
        qs = [a / 2, 1 - a / 2, gamma, 1 - gamma]
        if rule.ci_method == "block_bootstrap":
            lo, hi, lo90, hi90 = np.quantile(rs.block_bootstrap(paired, r, rng), qs)
        else:
            (lo, hi), (lo90, hi90) = rs.invert_permutation_test(paired, draws, d, null, [a, 2 * gamma])

    ratio = math.exp(d)
    ci90 = (math.exp(lo90), math.exp(hi90))
    verdict, reason = _verdict(p, ratio, ci90, a, rule, gamma=gamma)
    note = f" ({dropped_blocks} block(s) lacking an arm dropped: {dropped_values} value(s))" if dropped_blocks else ""
    n_b, n_c = paired.n_base, paired.n_cand
    sigma = rs.residual_sd(paired)
    return Comparison(
        baseline=baseline.name,
        candidate=candidate.name,
        n_baseline=n_b,
        n_candidate=n_c,
        median_baseline=math.exp(float(np.median(paired.y[~paired.is_cand]))),
        median_candidate=math.exp(float(np.median(paired.y[paired.is_cand]))),
        ratio=ratio,
        ci_low=math.exp(lo),
        ci_high=math.exp(hi),
        ci90_low=ci90[0],
        ci90_high=ci90[1],
        p_value=p,
        p_one_sided_slower=p_slower,
        sigma=sigma,
        mde=mde(sigma, 2 / (1 / n_b + 1 / n_c), a, rule.power, estimator=rule.estimator),
        alpha=a,
        verdict=verdict,
        reason=reason + note,
        note=note,
        rule_digest=rule.digest(),
        n_blocks=paired.n_blocks,
        n_dropped=dropped_values,
        p_adjusted=p,
    )


def holm(p_values: list[float]) -> list[float]:
    """Holm's step-down adjusted p-values: calling each test whose adjusted p < alpha keeps the
    chance of any false call among them <= alpha, whatever their dependence."""
    m, running = len(p_values), 0.0
    adjusted = [math.nan] * m
    for rank, i in enumerate(sorted(range(m), key=lambda k: p_values[k])):
        running = max(running, min(1.0, (m - rank) * p_values[i]))
        adjusted[i] = running
    return adjusted


def in_family(comparisons: list[Comparison], rule: DecisionRule) -> list[Comparison]:
    """One device's pairs decided as a family (the rule's multiplicity): Holm-adjusted p for the
    verdict, the MDE at alpha / m. One pair, or multiplicity none: unchanged."""
    m = len(comparisons)
    if m < 2 or rule.multiplicity == "none":
        return comparisons
    out = []
    for c, p_adj in zip(comparisons, holm([c.p_value for c in comparisons]), strict=True):
        verdict, reason = _verdict(p_adj, c.ratio, (c.ci90_low, c.ci90_high), c.alpha, rule, family=m)
        n = 2 / (1 / c.n_baseline + 1 / c.n_candidate)
        out.append(replace(c, p_adjusted=p_adj, family=m, verdict=verdict, reason=reason + c.note,
                           mde=mde(c.sigma, n, c.alpha / m, rule.power, estimator=rule.estimator)))
    return out
