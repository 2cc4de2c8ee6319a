"""Class verdicts: the phones of one chip class, pooled (`pool_by: chip_class`).

Blocks stay nested in their device (a pooled block id is the device's index and its block), so every
comparison is within one device's block and the device is a stratum of the test and the interval.
An adaptive rule replays the class's looks where the session took them: at the end of a round (every
member done with one sequence number), on the trials up to it. Heterogeneity across the class is
tested and reported, never averaged away: Kruskal-Wallis across devices on each block's difference
(does the effect differ between phones?) and on each block's baseline level (is one phone slower
than its siblings?), each flagged below p = 0.01; a flagged effect names the phone that stands furthest
from its siblings (Welch's t of its block differences against theirs). Beside the class verdict, each
phone's ratio with its 95% interval (t over its block differences).

What it can see (bench/results/pooled.md): a class stops once the pooled question is answered, so each
phone's interval rests on its share of the launches (about 20 per arm at a 5% class effect; ±4-5% at 6%
noise): a phone 8% off its siblings is flagged in 46% of the classes. Testing each phone against its
siblings as well (Welch, Bonferroni over the phones and the two tests) flagged fewer (43%), so the flag
stays Kruskal-Wallis. A phone's own interval says what it is consistent with; a
class that must clear every phone needs more blocks than the pooled answer does.
"""

from __future__ import annotations

import math
from dataclasses import asdict
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats

from orchestrator.analysis.decision import ArmSample, InsufficientData, compare
from orchestrator.analysis.sequential import Timed, replay
from orchestrator.analysis.summary import VERDICT_COLUMNS
from orchestrator.config.plan import Plan
from orchestrator.results.trials import usable

HETEROGENEITY_P = 0.01
BLOCK_STRIDE = 1_000_000  # a pooled block id: device index x stride + the device's own block
CLASS_COLUMNS = ["chip_class", "devices", *[c for c in VERDICT_COLUMNS if c != "device"], "effect_by_device",
                 "effect_heterogeneity_p", "level_by_device", "level_heterogeneity_p", "heterogeneous"]


def pooled_block(index: int, block: int) -> int:
    return index * BLOCK_STRIDE + block


def class_verdicts(trials: pd.DataFrame, plan: Plan, chips: dict[str, str], *, seed: int = 0) -> pd.DataFrame:
    """One row per class and pair (baseline = the arm listed first), for a pooled plan; else empty."""
    if plan.pool_by is None or not len(trials):
        return pd.DataFrame(columns=CLASS_COLUMNS)
    col = plan.decision.column()
    ok = usable(trials, col)
    arms, pairs = [a.name for a in plan.arms], plan.pairs()
    devices = list(dict.fromkeys(trials["device"]))
    rows: list[dict[str, Any]] = []
    by_class: dict[str, list[str]] = {}
    for d in devices:
        by_class.setdefault(chips.get(d, d), []).append(d)
    for chip, members in sorted(by_class.items()):
        mine = ok[ok["device"].isin(members)]
        index = {d: i for i, d in enumerate(members)}
        blocks = np.array([pooled_block(index[d], int(b)) for d, b in zip(mine["device"], mine["block"], strict=True)],
                          dtype=np.int64)
        samples = {a: ArmSample(a, mine.loc[mine["arm"] == a, col].to_numpy(np.float64),
                                blocks[(mine["arm"] == a).to_numpy()]) for a in arms}
        if plan.decision.adaptive is not None:
            timed = {a: Timed(samples[a], mine.loc[mine["arm"] == a, "seq"].to_numpy(np.int64)) for a in arms}
            comps: list[Any] = replay(timed, pairs, plan.decision, plan.launches_per_arm(), seed=seed)
        else:
            comps = []
            for b, c in pairs:
                try:
                    comps.append(compare(samples[b], samples[c], plan.decision, seed=seed))
                except InsufficientData:
                    comps.append(None)
        for (b, c), comp in zip(pairs, comps, strict=True):
            row: dict[str, Any] = dict.fromkeys(CLASS_COLUMNS, math.nan)
            if comp is None:
                row.update(baseline=b, candidate=c, verdict="inconclusive", reason="no verdict: no shared block")
            else:
                row.update({k: v for k, v in asdict(comp).items() if k in CLASS_COLUMNS})
            row.update(chip_class=chip, devices=len(members), **heterogeneity(mine, b, c, col))
            rows.append(row)
    return pd.DataFrame(rows, columns=CLASS_COLUMNS)


def heterogeneity(trials: pd.DataFrame, base: str, cand: str, col: str) -> dict[str, Any]:
    """Per device: its block differences (log candidate - log baseline) and baseline levels, compared
    across the class's devices."""
    effects: dict[str, np.ndarray] = {}
    levels: dict[str, np.ndarray] = {}
    for device, g in trials.groupby("device", sort=True):
        logs = g.assign(v=np.log(g[col].to_numpy(np.float64)))
        means = logs.pivot_table(index="block", columns="arm", values="v", aggfunc="mean")
        if base not in means or cand not in means:
            continue
        both = means[[base, cand]].dropna()
        effects[str(device)] = (both[cand] - both[base]).to_numpy()
        levels[str(device)] = both[base].to_numpy()
    effect_p, level_p = _kruskal(effects), _kruskal(levels)
    words = []
    if not math.isnan(effect_p) and effect_p < HETEROGENEITY_P:
        odd = _odd_phone(effects)
        words.append(f"the effect differs between phones (p={effect_p:.2g}"
                     + (f"; {odd} stands furthest from its siblings)" if odd else ")"))
    if not math.isnan(level_p) and level_p < HETEROGENEITY_P:
        words.append(f"the phones' speeds differ (p={level_p:.2g})")
    return {
        "effect_by_device": "; ".join(f"{d} {math.exp(float(np.median(e))):.3f}{_interval(e)}"
                                      for d, e in effects.items()),
        "effect_heterogeneity_p": effect_p,
        "level_by_device": "; ".join(f"{d} {math.exp(float(np.median(v))):.1f}" for d, v in levels.items()),
        "level_heterogeneity_p": level_p,
        "heterogeneous": ", ".join(words),
    }


def _interval(diffs: np.ndarray) -> str:
    """A phone's 95% interval of its ratio (t over its block differences), as " [lo-hi]"."""
    if len(diffs) < 2:
        return ""
    half = float(stats.t.ppf(0.975, len(diffs) - 1) * np.std(diffs, ddof=1) / math.sqrt(len(diffs)))
    mid = float(np.mean(diffs))
    return f" [{math.exp(mid - half):.3f}-{math.exp(mid + half):.3f}]"


def _odd_phone(groups: dict[str, np.ndarray]) -> str | None:
    """The phone whose block differences stand furthest from its siblings' (smallest Welch's t p); None
    below three phones (with two, "which one" has no answer)."""
    usable = {d: g for d, g in groups.items() if len(g) >= 2}
    if len(usable) < 3:
        return None
    best, best_p = None, math.inf
    for d, g in usable.items():
        rest = np.concatenate([h for e, h in usable.items() if e != d])
        p = float(stats.ttest_ind(g, rest, equal_var=False).pvalue)
        if math.isfinite(p) and p < best_p:
            best, best_p = d, p
    return best


def _kruskal(groups: dict[str, np.ndarray]) -> float:
    usable = [g for g in groups.values() if len(g) >= 2]
    if len(usable) < 2:
        return math.nan
    try:
        return float(stats.kruskal(*usable).pvalue)
    except ValueError:  # every value identical
        return 1.0
