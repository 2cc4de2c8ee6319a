"""Sequential looks: the adaptive design (``DecisionRule.adaptive``, the default) and the older
group-sequential looks with futility stops (``DecisionRule.sequential``).

The adaptive design looks until the comparison has its answer
------------------------------------------------------------------
Interim looks at ``first_look`` (16) and every ``look_every`` (4) launches per arm; the plan's
launches per arm (``blocks``, default 60 ABBA blocks = 120) are the cap, where the final analysis
spends what is left (also when a session ends short of it: the last analysis is the final one).
At each look, with the rule's estimator (Hodges-Lehmann by default):

* ``faster``/``slower``: the two-sided p is below the look's nominal level and ``|ratio - 1| >=
  min_effect``. The levels come from Lan-DeMets alpha spending of ``rule.alpha`` over the
  information fraction ``n / cap``, Pocock-type (``alpha ln(1 + (e - 1) t)``: early looks can stop
  a real gap) by default;
* ``equivalent``: the interval at the look's equivalence level lies inside ``+-margin``: the two
  one-sided tests of the TOST, each spending 5% over the looks, O'Brien-Fleming-type by default
  (equivalence needs information, so little is spent early and the final interval is near 90%);
* otherwise continue; at the final analysis ``inconclusive``.

The two families of boundaries are computed each on its own (non-binding): stopping for one can
only lower the other's error, so P(faster or slower | no difference) <= alpha and P(equivalent |
|true ratio - 1| = margin) <= 5% per side. Boundaries: :mod:`orchestrator.analysis.groupseq`
(recursive integration, as gsDesign/rpact do in R; no maintained Python library computes
equivalence boundaries at observed information). More than two arms: Bonferroni, each pair at
``alpha / m``; the session stops when every pair answers at one look, and each pair's verdict is
its first answer.

The session takes the interim looks as launches arrive (``Session._look``); the verdict table
(:func:`replay`) takes the same looks on the trials in the order they ran, so the table says what
the session saw.

Calibration (bench/bench_adaptive.py through run_sessions on simulated A19-class phones: 6% noise,
AR(1) 0.3, -2%/h drift, 3% throttled outliers; 1000 phones a figure, the same phones for each
design): no difference: faster or slower 5.4% (Wilson 95%: 4.2-7.0%), equivalent 86.8% after 86.3
launches per arm on average (cap 120); a true 5% gap: faster 99.7% after 38.7 launches per arm on
average. The fixed 40-per-arm median rule it replaces: 5.7% / 20.4% equivalent / 89.4% faster. The
same adaptive design on the median: 5.8% / 77.9% after 92.8 / 100% after 31.9 (the median is
sharper early, Hodges-Lehmann far sharper late, where equivalence is decided). `orch plan size`
predicted 83.8 launches under no difference from the runs' own noise (78.1 from the nominal 6%).
The false-positive excess over 5% is the schedule's: ABBA blocks repeat, so the last launch of a
block and the first of the next are the same arm, and AR(1) noise correlates neighbouring blocks'
differences (+~3%), which the signed-rank (and permutation) tests assume away; alternating ABBA
and BAAB blocks turns it negative (notes' noise model, 3000 sessions: 5.6% -> 4.4%, equivalence 88% -> 89%).

The older ``sequential`` looks
------------------------------

At look ``i`` (``rule.sequential.looks[i]`` launches per arm done) the pair is compared with
``alpha = alpha_per_look``. The action is, in this order:

* ``decided``: ``p < alpha_per_look`` and ``|ratio - 1| >= min_effect`` (the comparison's verdict is
  ``faster`` or ``slower``), also at the last look; with more than two arms p is Holm-adjusted over
  the device's pairs (the rule's multiplicity), as in the final verdicts;
* ``futile``: ``i < len(futility)`` and ``p > futility[i]``;
* ``final``: the last look was reached without a decision (the comparison's verdict stands:
  ``equivalent`` or ``inconclusive``);
* ``continue``: run the next stretch of blocks.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

import numpy as np
import numpy.typing as npt
from scipy.stats import norm

from orchestrator.analysis.decision import ArmSample, Comparison, InsufficientData, compare, in_family
from orchestrator.analysis.groupseq import look_times, one_sided_bounds, two_sided_bounds
from orchestrator.config.plan import AdaptiveDesign, DecisionRule, SequentialLooks

EQUIVALENCE_ALPHA = 0.05  # each one-sided test of the TOST: the fixed design's 90% interval

LookAction = Literal["continue", "decided", "futile", "final"]


@dataclass(frozen=True)
class PairLook:
    baseline: str
    candidate: str
    ratio: float
    p_value: float
    action: str  # a sequential look's LookAction, or an adaptive look's answer (faster/slower/equivalent/continue)


@dataclass(frozen=True)
class FamilyLook:
    """One look at a device's (or a pooled class's) pairs together, as a running session takes it."""

    index: int
    n_per_arm: int
    action: LookAction  # decided / futile: stop; continue / final: go on
    pairs: list[PairLook]


def due(rule: DecisionRule, cap: int, n_per_arm_done: int, *, after: int) -> int | None:
    """The look due after `n_per_arm_done` launches per arm once look `after` was taken (None: none is)."""
    if rule.adaptive is not None:
        return adaptive_due(rule, cap, n_per_arm_done, after=after)
    return due_look(rule, n_per_arm_done, after=after)


def take_look(samples: dict[str, ArmSample], pairs: list[tuple[str, str]], rule: DecisionRule, index: int, *,
              cap: int, seed: int = 0) -> FamilyLook:
    """Look `index` (from `due`) on every pair's data so far; the family stops when all pairs are answered
    (adaptive), or decided or futile (sequential)."""
    family = [(samples[b], samples[c]) for b, c in pairs]
    n = min(s.n for s in samples.values())
    action: LookAction
    if rule.adaptive is not None:
        at = adaptive_looks(rule, cap, family=len(family))[index]
        comps = decide_at(family, rule, at, seed=seed)
        looks = [PairLook(b.name, c.name, comp.ratio if comp else float("nan"), comp.p_value if comp else float("nan"),
                          comp.verdict if comp and comp.verdict != "inconclusive" else "continue")
                 for (b, c), comp in zip(family, comps, strict=True)]
        action = "decided" if all(p.action != "continue" for p in looks) else "continue"
        return FamilyLook(index, n, action, looks)
    decisions = look_family(family, rule, index, seed=seed)
    actions = [d.action for d in decisions]
    action = ("continue" if "continue" in actions else "final" if "final" in actions
              else "decided" if "decided" in actions else "futile")
    return FamilyLook(index, n, action, [PairLook(d.comparison.baseline, d.comparison.candidate, d.comparison.ratio,
                                                  d.comparison.p_value, d.action) for d in decisions])


@dataclass(frozen=True)
class LookDecision:
    look: int  # index into rule.sequential.looks
    n_per_arm: int  # min(n_baseline, n_candidate) actually compared
    action: LookAction
    comparison: Comparison  # computed with alpha = alpha_per_look


def _looks(rule: DecisionRule) -> SequentialLooks:
    if rule.sequential is None:
        raise ValueError("the decision rule has no sequential looks")
    return rule.sequential


def due_look(rule: DecisionRule, n_per_arm_done: int, *, after: int | None = None) -> int | None:
    """The latest look whose launches-per-arm count both arms have reached, or None.

    ``n_per_arm_done`` is the smaller of the two arms' finished-launch counts. With ``after`` (the
    index of the last look already taken), only a later look is returned, so the scheduler can call
    this after every launch: ``due_look(rule, n, after=last)`` is not None exactly when a new look
    is due. None as well when the rule has no sequential looks.
    """
    if rule.sequential is None:
        return None
    reached = [i for i, n in enumerate(rule.sequential.looks) if n <= n_per_arm_done]
    if not reached:
        return None
    i = reached[-1]
    return i if after is None or i > after else None


def look(
    baseline: ArmSample, candidate: ArmSample, rule: DecisionRule, look_index: int, *, seed: int = 0
) -> LookDecision:
    """Take look ``look_index`` on the data gathered so far (pass what both arms have at that look)."""
    return look_family([(baseline, candidate)], rule, look_index, seed=seed)[0]


def look_family(
    pairs: list[tuple[ArmSample, ArmSample]], rule: DecisionRule, look_index: int, *, seed: int = 0
) -> list[LookDecision]:
    """Look ``look_index`` at a device's pairs together: ``decided`` by the family's verdicts (Holm at
    ``alpha_per_look``, as the final table decides them), ``futile`` by each pair's own p."""
    seq = _looks(rule)
    if not 0 <= look_index < len(seq.looks):
        raise IndexError(f"look {look_index} out of range: the rule has {len(seq.looks)} looks")
    comps = in_family([compare(b, c, rule, alpha=seq.alpha_per_look, seed=seed) for b, c in pairs], rule)
    out = []
    for comp in comps:
        action: LookAction
        if comp.verdict in ("faster", "slower"):
            action = "decided"
        elif look_index < len(seq.futility) and comp.p_value > seq.futility[look_index]:
            action = "futile"
        elif look_index == len(seq.looks) - 1:
            action = "final"
        else:
            action = "continue"
        out.append(LookDecision(look_index, min(comp.n_baseline, comp.n_candidate), action, comp))
    return out


# ----------------------------------------------------------------------------------------------
# The adaptive design (``DecisionRule.adaptive``): look until faster, slower or equivalent.


@dataclass(frozen=True)
class AdaptiveLook:
    """One look of the adaptive design: where it falls and the nominal levels it tests at."""

    index: int
    n_per_arm: int  # planned launches per arm (the information the boundaries assume)
    final: bool  # the final analysis: spends what is left
    of: int  # looks planned
    efficacy_z: float  # |Z| boundary of the two-sided test of no difference
    equivalence_z: float  # one-sided boundary of each test of the equivalence TOST
    family: int = 1  # pairs sharing alpha (Bonferroni: the boundary is at alpha / family)

    @property
    def alpha(self) -> float:
        """Two-sided nominal level: ``p < alpha`` crosses the efficacy boundary."""
        return float(2 * norm.sf(self.efficacy_z))

    @property
    def gamma(self) -> float:
        """Each one-sided equivalence test's nominal level: the ``1 - 2 gamma`` interval decides."""
        return float(norm.sf(self.equivalence_z))

    def words(self) -> str:
        what = "final analysis" if self.final else f"look {self.index + 1} of up to {self.of}"
        return f"{what} ({self.n_per_arm} launches per arm)"


def adaptive_looks(rule: DecisionRule, cap: int, *, family: int = 1, final_n: int | None = None) -> list[AdaptiveLook]:
    """The looks of ``rule.adaptive`` on a plan of ``cap`` launches per arm, with their boundaries.

    ``final_n``: the final analysis falls at these launches per arm instead of the cap (a session
    that ended short of its blocks); the looks before it are unchanged. With more than two arms and
    Holm's multiplicity, each pair's efficacy alpha is ``alpha / family`` (Bonferroni).
    """
    design = _adaptive(rule)
    planned = design.looks(cap)
    info, times = look_times(planned, cap, final_n)
    a = rule.alpha / family if rule.multiplicity == "holm" and family > 1 else rule.alpha
    eff = two_sided_bounds(info, times, a, design.efficacy)
    eqv = one_sided_bounds(info, times, EQUIVALENCE_ALPHA, design.equivalence)
    k = len(info)
    return [AdaptiveLook(i, int(info[i]), i == k - 1, len(planned), eff[i], eqv[i], family) for i in range(k)]


def _adaptive(rule: DecisionRule) -> AdaptiveDesign:
    if rule.adaptive is None:
        raise ValueError("the decision rule has no adaptive design")
    return rule.adaptive


def adaptive_due(rule: DecisionRule, cap: int, n_per_arm_done: int, *, after: int = -1) -> int | None:
    """The index of the interim look that ``n_per_arm_done`` reaches, if later than ``after``.

    Interim looks only (fewer launches than the cap): the final analysis belongs to the verdict
    table, which runs after the last block.
    """
    if rule.adaptive is None:
        return None
    interim = rule.adaptive.looks(cap)[:-1]
    reached = [i for i, n in enumerate(interim) if n <= n_per_arm_done]
    return reached[-1] if reached and reached[-1] > after else None


def decide_at(pairs: list[tuple[ArmSample, ArmSample]], rule: DecisionRule, at: AdaptiveLook,
              *, seed: int = 0) -> list[Comparison | None]:
    """Each pair at one look: its comparison (verdict ``inconclusive`` = no answer yet), or None if
    the pair shares no block yet. An interim ``inconclusive`` means: continue."""
    out: list[Comparison | None] = []
    m = at.family if rule.multiplicity == "holm" else 1
    for b, c in pairs:
        try:
            comp = compare(b, c, rule, alpha=at.alpha, gamma=at.gamma, seed=seed)
        except InsufficientData:
            out.append(None)
            continue
        out.append(replace(comp, reason=f"{at.words()}: {comp.reason}", family=m,
                           p_adjusted=min(1.0, m * comp.p_value)))
    return out


@dataclass(frozen=True)
class Timed:
    """One arm's usable values with the trial sequence number of each (the order they arrived in)."""

    sample: ArmSample
    seq: npt.NDArray[np.int64]


def replay(arms: dict[str, Timed], pairs: list[tuple[str, str]], rule: DecisionRule, cap: int,
           *, seed: int = 0) -> list[Comparison | None]:
    """Each pair's verdict under the adaptive design, from the session's data alone.

    The looks are taken where the session took them: interim look ``j`` on the values that had
    arrived when every arm first had ``n_j`` values. A pair's verdict is its first answer; a pair
    still without one gets the final analysis on all its values (spending what is left, at the
    launches per arm the session reached). None: the pair never shared a block.
    """
    return replay_answered(arms, pairs, rule, cap, seed=seed)[0]


def replay_answered(arms: dict[str, Timed], pairs: list[tuple[str, str]], rule: DecisionRule, cap: int,
                    *, seed: int = 0) -> tuple[list[Comparison | None], int | None]:
    """:func:`replay`, and the sequence number of the interim look at which every pair had its answer
    (where the session stopped for it; None: no interim look answered them all)."""
    _adaptive(rule)
    names = list(arms)
    seqs = np.sort(np.concatenate([arms[a].seq for a in names])) if names else np.empty(0, np.int64)
    counts = np.stack([np.searchsorted(np.sort(arms[a].seq), seqs, side="right") for a in names])
    least = counts.min(axis=0) if seqs.size else np.empty(0, np.int64)
    n_final = int(least[-1]) if least.size else 0
    planned = adaptive_looks(rule, cap, family=len(pairs))
    verdicts: list[Comparison | None] = [None] * len(pairs)
    answered = [False] * len(pairs)
    for at in planned[:-1]:  # the interim looks the session took, at their planned boundaries
        hit = np.flatnonzero(least >= at.n_per_arm)
        if not hit.size:
            break
        upto = seqs[hit[0]]
        todo = [i for i in range(len(pairs)) if not answered[i]]
        comps = decide_at([(_until(arms[pairs[i][0]], upto), _until(arms[pairs[i][1]], upto)) for i in todo],
                          rule, at, seed=seed)
        for i, comp in zip(todo, comps, strict=True):
            if comp is not None and comp.verdict != "inconclusive":
                verdicts[i], answered[i] = comp, True
        if all(answered):
            return verdicts, int(upto)
    # the final analysis: at the cap, or where the session ended (then it spends what is left there)
    final = planned[-1] if n_final >= cap else adaptive_looks(rule, cap, family=len(pairs), final_n=max(n_final, 1))[-1]
    todo = [i for i in range(len(pairs)) if not answered[i]]
    comps = decide_at([(arms[pairs[i][0]].sample, arms[pairs[i][1]].sample) for i in todo], rule, final, seed=seed)
    for i, comp in zip(todo, comps, strict=True):
        verdicts[i] = comp
    return verdicts, None


def _until(arm: Timed, upto: int) -> ArmSample:
    keep = arm.seq <= upto
    s = arm.sample
    return ArmSample(s.name, s.values[keep], s.blocks[keep])
