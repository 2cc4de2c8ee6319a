"""Group-sequential looks with futility stops (``DecisionRule.sequential``).

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

from dataclasses import dataclass
from typing import Literal

from orchestrator.analysis.decision import ArmSample, Comparison, compare, in_family
from orchestrator.config.plan import DecisionRule, SequentialLooks

LookAction = Literal["continue", "decided", "futile", "final"]


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
