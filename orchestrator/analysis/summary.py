"""Verdicts for a run: every device, every pair of arms, by the plan's pre-committed rule."""

from __future__ import annotations

import math
from dataclasses import asdict
from typing import Any

import numpy as np
import pandas as pd

from orchestrator.analysis.decision import ArmSample, Comparison, InsufficientData, compare, in_family
from orchestrator.analysis.sequential import Timed, adaptive_looks, replay
from orchestrator.config.plan import Plan
from orchestrator.results.trials import usable

VERDICT_COLUMNS = [
    "device",
    "baseline",
    "candidate",
    "n_baseline",
    "n_candidate",
    "median_baseline",
    "median_candidate",
    "ratio",
    "ci_low",
    "ci_high",
    "ci90_low",
    "ci90_high",
    "p_value",
    "p_adjusted",
    "family",
    "p_one_sided_slower",
    "sigma",
    "mde",
    "alpha",
    "verdict",
    "reason",
    "rule_digest",
]


def verdicts(trials: pd.DataFrame, plan: Plan, *, seed: int = 0) -> pd.DataFrame:
    """One row per device and pair (baseline = the arm listed first in the plan).

    An adaptive rule replays each device's looks on its trials in the order they ran (see
    :func:`orchestrator.analysis.sequential.replay`): a pair's verdict is its first answer.
    """
    if plan.decision.adaptive is not None:
        return _adaptive_verdicts(trials, plan, seed)
    col, rows = plan.decision.column(), []
    seq = plan.decision.sequential
    alpha = seq.alpha_per_look if seq is not None else plan.decision.alpha
    ok = usable(trials, col)
    arms = [a.name for a in plan.arms]
    for device in sorted(trials["device"].unique()):
        mine = ok[ok["device"] == device]
        samples = {a: _sample(mine[mine["arm"] == a], a, col) for a in arms}
        family: list[Comparison] = []
        for base, cand in plan.pairs():
            try:
                family.append(compare(samples[base], samples[cand], plan.decision, alpha=alpha, seed=seed))
            except InsufficientData as exc:
                rows.append(_empty(device, base, cand, str(exc), plan, alpha))
        # The pairs that could be compared are one family (Holm's step-down unless the rule says none).
        for c in in_family(family, plan.decision):
            rows.append({k: v for k, v in asdict(c).items() if k in VERDICT_COLUMNS} | {"device": device})
    order = {pair: k for k, pair in enumerate(plan.pairs())}
    rows.sort(key=lambda r: (r["device"], order[(r["baseline"], r["candidate"])]))
    return pd.DataFrame(rows, columns=VERDICT_COLUMNS)


def _adaptive_verdicts(trials: pd.DataFrame, plan: Plan, seed: int) -> pd.DataFrame:
    col, rows = plan.decision.column(), []
    ok = usable(trials, col)
    arms, pairs = [a.name for a in plan.arms], plan.pairs()
    cap = plan.launches_per_arm()
    last = adaptive_looks(plan.decision, cap, family=len(pairs))[-1]
    for device in sorted(trials["device"].unique()):
        mine = ok[ok["device"] == device]
        timed = {a: Timed(_sample(mine[mine["arm"] == a], a, col),
                          mine.loc[mine["arm"] == a, "seq"].to_numpy(dtype=np.int64)) for a in arms}
        for (base, cand), comp in zip(pairs, replay(timed, pairs, plan.decision, cap, seed=seed), strict=True):
            if comp is None:
                rows.append(_empty(device, base, cand, f"{timed[base].sample.name!r} and {timed[cand].sample.name!r} "
                                   "share no block", plan, last.alpha))
            else:
                rows.append({k: v for k, v in asdict(comp).items() if k in VERDICT_COLUMNS} | {"device": device})
    return pd.DataFrame(rows, columns=VERDICT_COLUMNS)


def _sample(frame: pd.DataFrame, arm: str, col: str) -> ArmSample:
    return ArmSample(
        name=arm, values=frame[col].to_numpy(dtype=np.float64), blocks=frame["block"].to_numpy(dtype=np.int64)
    )


def _empty(device: str, base: str, cand: str, why: str, plan: Plan, alpha: float) -> dict[str, Any]:
    row: dict[str, Any] = dict.fromkeys(VERDICT_COLUMNS, math.nan)
    row.update(
        device=device,
        baseline=base,
        candidate=cand,
        verdict="inconclusive",
        reason=f"no verdict: {why}",
        rule_digest=plan.decision.digest(),
        alpha=alpha,
        n_baseline=0,
        n_candidate=0,
    )
    return row


def family_words(plan: Plan) -> str:
    """How the p column is to be read when a device's pairs are one family."""
    pairs = len(plan.arms) * (len(plan.arms) - 1) // 2
    if pairs > 1 and plan.decision.multiplicity == "holm" and plan.decision.adaptive is not None:
        return f" for each device's {pairs} pairs together: each pair's looks at alpha/{pairs} (Bonferroni)"
    if pairs > 1 and plan.decision.multiplicity == "holm":
        return f" for each device's {pairs} pairs together: p is Holm-adjusted, MDE at alpha/{pairs}"
    return ""

