"""How many launches a plan needs, before the run: `orch plan size`.

Given a device's launch-to-launch noise ``sigma`` (SD of log tok/s), the rule's estimator has the
standard error ``f * sigma * sqrt(2 / n)`` at ``n`` launches per arm (``f``: sqrt(pi/2) for the
median, sqrt(pi/3) for Hodges-Lehmann). From it:

* a fixed design's launches per arm to detect ``effect`` at ``rule.power`` (two-sided ``alpha``):
  ``n = 2 (f sigma (z_{1-alpha/2} + z_power) / log(1 + effect))^2``;
* a fixed design's launches per arm to show equivalence when there is no difference, with
  probability ``rule.power``: ``n = 2 (f sigma (z_0.95 + z_{(1+power)/2}) / log(1 + margin))^2``;
* the adaptive design's verdict probabilities and expected launches per arm for no difference and
  for ``effect`` (:func:`orchestrator.analysis.groupseq.operating`), and the smallest number of
  blocks (the cap) at which no difference ends ``equivalent`` with probability ``rule.power``.

``sigma`` comes from the user (``--sigma``) or from an earlier run of the same device
(:func:`noise_of`): the noise *as the rule's estimator sees it*, read off the width of its own
interval, so a run with throttled outliers gives the (smaller) noise a robust estimator suffers
rather than the inflated SD.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy.stats import norm

from orchestrator.analysis.decision import ArmSample, InsufficientData, compare, mde, standard_error
from orchestrator.analysis.groupseq import Operating, operating
from orchestrator.analysis.sequential import EQUIVALENCE_ALPHA, adaptive_looks
from orchestrator.config.plan import MAX_BLOCKS, DecisionRule, Plan
from orchestrator.results.trials import usable

_ONE_SD = float(norm.sf(1.0))  # each tail of a +-1 SE interval


@dataclass(frozen=True)
class Sizing:
    """The answer of `orch plan size` for one noise level."""

    sigma: float
    estimator: str
    launches_per_arm: int  # the plan's (the cap of an adaptive design)
    effect: float  # the target effect (ratio - 1) the figures below are for
    fixed_for_effect: int  # launches per arm a fixed design needs to detect `effect` at rule.power
    fixed_for_equivalence: int  # ... to show equivalence under no difference with probability rule.power
    null: Operating  # this plan under no difference
    alternative: Operating  # this plan under `effect`
    blocks_for_equivalence: int | None  # the smallest blocks (cap) giving P(equivalent | none) >= rule.power


def _pair_alpha(plan: Plan) -> float:
    """Each pair's alpha: the rule's, over the number of pairs when more than two arms share it (Holm's
    strictest level, as the MDE states it; Bonferroni in an adaptive design)."""
    family = len(plan.arms) * (len(plan.arms) - 1) // 2
    return plan.decision.alpha / family if family > 1 and plan.decision.multiplicity == "holm" else plan.decision.alpha


def planned_mde(plan: Plan, sigma: float) -> float:
    """The smallest effect (a fraction) the plan can detect at ``rule.power`` with launch noise ``sigma``, at
    its launches per arm (an adaptive design's cap) and each pair's alpha: the MDE stated before a run."""
    return math.expm1(mde(sigma, plan.launches_per_arm(), _pair_alpha(plan), plan.decision.power,
                          estimator=plan.decision.estimator))


def fixed_launches_for_effect(plan: Plan, sigma: float, effect: float) -> int:
    """Launches per arm for a fixed design to detect ``effect`` at ``rule.power`` (each pair's alpha)."""
    rule = plan.decision
    z = norm.isf(_pair_alpha(plan) / 2) + norm.isf(1 - rule.power)
    se_needed = abs(math.log1p(effect)) / z
    return _launches(plan, sigma, se_needed)


def fixed_launches_for_equivalence(plan: Plan, sigma: float) -> int:
    """Launches per arm for a fixed design to show equivalence under no difference with ``rule.power``."""
    rule = plan.decision
    z = norm.isf(EQUIVALENCE_ALPHA) + norm.isf((1 - rule.power) / 2)
    margin = min(-math.log1p(-rule.equivalence_margin), math.log1p(rule.equivalence_margin))
    return _launches(plan, sigma, margin / z)


def _launches(plan: Plan, sigma: float, se_needed: float) -> int:
    """Launches per arm at which the estimator's standard error reaches ``se_needed``."""
    unit = standard_error(sigma, 1.0, plan.decision.estimator)  # SE at one launch per arm
    return max(1, math.ceil((unit / se_needed) ** 2))


def plan_operating(plan: Plan, sigma: float, effect: float, *, blocks: int | None = None) -> Operating:
    """What the plan's rule does when the true ratio is ``1 + effect`` and the noise ``sigma``."""
    rule = plan.decision
    per_block = plan.launches_per_arm() // plan.blocks
    cap = (blocks or plan.blocks) * per_block
    family = len(plan.arms) * (len(plan.arms) - 1) // 2
    if rule.adaptive is not None:
        looks = adaptive_looks(rule, cap, family=family)
        ns = tuple(float(lk.n_per_arm) for lk in looks)
        eff = tuple(lk.efficacy_z for lk in looks)
        eqv: tuple[float, ...] = tuple(lk.equivalence_z for lk in looks)
    else:
        ns, eff = (float(cap),), (float(norm.isf(_pair_alpha(plan) / 2)),)
        eqv = (float(norm.isf(EQUIVALENCE_ALPHA)),)
    se = tuple(standard_error(sigma, n, rule.estimator) for n in ns)
    return operating(math.log1p(effect), ns, se, eff, eqv, min_effect=rule.min_effect,
                     margin=rule.equivalence_margin)


def blocks_for_equivalence(plan: Plan, sigma: float) -> int | None:
    """The fewest blocks for which the plan ends ``equivalent`` under no difference with probability
    ``rule.power`` (bisection; None if even the largest plan allowed does not)."""
    target = plan.decision.power
    per_block = plan.launches_per_arm() // plan.blocks

    def ok(blocks: int) -> bool:
        return plan_operating(plan, sigma, 0.0, blocks=blocks).equivalent >= target

    lo, hi = 6, max(6, math.ceil(fixed_launches_for_equivalence(plan, sigma) / per_block))
    while not ok(hi):  # from the fixed design's count, doubling: an adaptive design needs a little more
        if hi >= MAX_BLOCKS:
            return None
        lo, hi = hi, min(MAX_BLOCKS, 2 * hi)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if ok(mid) else (mid, hi)
    return hi if not ok(lo) else lo


def size(plan: Plan, sigma: float, effect: float = 0.05) -> Sizing:
    if not (0 < sigma < 1):
        raise ValueError(f"sigma is the SD of log tok/s between launches, e.g. 0.06; got {sigma}")
    return Sizing(
        sigma=sigma, estimator=plan.decision.estimator, launches_per_arm=plan.launches_per_arm(), effect=effect,
        fixed_for_effect=fixed_launches_for_effect(plan, sigma, effect),
        fixed_for_equivalence=fixed_launches_for_equivalence(plan, sigma),
        null=plan_operating(plan, sigma, 0.0), alternative=plan_operating(plan, sigma, effect),
        blocks_for_equivalence=blocks_for_equivalence(plan, sigma),
    )


def noise_of(trials: pd.DataFrame, rule: DecisionRule, arms: tuple[str, str]) -> dict[str, float]:
    """Each device's launch noise as ``rule``'s estimator sees it, from a run's trials.

    The run's two ``arms`` are compared on each device; the half-width of the estimator's +-1 SE
    interval, scaled back to one launch (``/ (f sqrt(2 / n))``), is the noise. Devices whose arms
    share no block are left out.
    """
    col = rule.column()
    ok = usable(trials, col)
    first, second = arms
    out: dict[str, float] = {}
    for device in sorted(ok["device"].unique()):
        mine = ok[ok["device"] == device]
        samples = [ArmSample(a, mine.loc[mine["arm"] == a, col].to_numpy(dtype=np.float64),
                             mine.loc[mine["arm"] == a, "block"].to_numpy(dtype=np.int64)) for a in (first, second)]
        try:
            comp = compare(samples[0], samples[1], rule, gamma=_ONE_SD)
        except InsufficientData:
            continue
        half = (math.log(comp.ci90_high) - math.log(comp.ci90_low)) / 2
        n = 2 / (1 / comp.n_baseline + 1 / comp.n_candidate)
        if math.isfinite(half) and half > 0:
            out[device] = half / standard_error(1.0, n, rule.estimator)
    return out
