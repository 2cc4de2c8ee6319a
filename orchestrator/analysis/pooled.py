"""Class verdicts: the phones of one chip class, pooled (`pool_by: chip_class`).

Blocks stay nested in their device (a pooled block id is the device's index and its block), so every
comparison is within one device's block and the device is a stratum of the test and the interval.
An adaptive rule replays the class's looks where the session took them: at the end of a round (every
member done with one sequence number), on the trials up to it. The class's verdict is the one its looks
reached, also when the class kept going past it.

Heterogeneity across the class is tested and reported, never averaged away. Does the effect differ
between phones? The rank contrast of each phone against its siblings (:mod:`orchestrator.analysis.oddphone`),
checked at the round the class's answer came and, when suspected there, once a block on the rounds the
class kept going for it: replayed here on the trials up to each of those rounds, so the table says what
the session did (a resumed one too). The flag names the phone furthest off its siblings and says how many
rounds were kept going for it. Is one phone slower than its siblings? Kruskal-Wallis across devices on
each block's baseline level, on all the trials, flagged below p = 0.01. Beside the class verdict, each
phone's ratio with its 95% interval (t over its block differences, on all its trials: the extra rounds
serve these intervals too).

What it can see: bench/results/pooled.md (four simulated A19-class phones, one of them 8% off its siblings).
"""

from __future__ import annotations

import math
from dataclasses import asdict
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats

from orchestrator.analysis.decision import ArmSample, InsufficientData, compare
from orchestrator.analysis.oddphone import (
    BLOCK_STRIDE,
    HETEROGENEITY_P,
    ClassWatch,
    PairWatch,
    Values,
    effect_check,
    once,
    pooled_block,
)
from orchestrator.analysis.sequential import Timed, replay_answered
from orchestrator.analysis.summary import VERDICT_COLUMNS
from orchestrator.config.plan import Plan
from orchestrator.results.trials import usable

LEVEL_P = 0.01  # the phones' speeds: one check, on all the trials
CLASS_COLUMNS = ["chip_class", "devices", *[c for c in VERDICT_COLUMNS if c != "device"], "effect_by_device",
                 "effect_heterogeneity_p", "effect_check", "odd_phone", "rounds_kept", "level_by_device",
                 "level_heterogeneity_p", "heterogeneous"]
__all__ = ["BLOCK_STRIDE", "CLASS_COLUMNS", "by_class", "class_verdicts", "heterogeneity", "pooled_block", "watch_of"]


def by_class(devices: list[str], chips: dict[str, str]) -> dict[str, list[str]]:
    """Devices by class (``chips``: device -> class; a device without one, or an empty one, is a class alone),
    in their order."""
    out: dict[str, list[str]] = {}
    for d in devices:
        out.setdefault(chips.get(d) or d, []).append(d)
    return out


def block_len(plan: Plan) -> int:
    """Rounds (sequence numbers) in one block of a phone's session."""
    return plan.launches_per_arm() // plan.blocks * len(plan.arms)


def share(plan: Plan, members: int) -> int:
    """Blocks each of a class's ``members`` phones runs: the plan's blocks split between them."""
    return max(6, math.ceil(plan.blocks / members))


def planned_last(plan: Plan, members: int) -> int:
    """The last round (sequence number) a class's phones are scheduled for: the watch's cap."""
    return share(plan, members) * block_len(plan) - 1


def watch_of(values: Values, plan: Plan, members: list[str], answered: int | None, last: int,
             cap: int) -> dict[tuple[str, str], PairWatch]:
    """Each pair's heterogeneity check as the class left it: watched from the round of its answer up to the
    last round run (``last``), or one check on everything when no interim look answered it."""
    if answered is None:
        return once(values, plan.pairs(), members, last)
    watch = ClassWatch(plan.pairs(), members, answered, cap if plan.pool_keep_going else answered,
                       block_len(plan)).walk(values, last)
    return watch.state or {}


def class_verdicts(trials: pd.DataFrame, plan: Plan, chips: dict[str, str], *, seed: int = 0) -> pd.DataFrame:
    """One row per class and pair (baseline = the arm listed first), for a pooled plan; else empty."""
    if plan.pool_by is None or not len(trials):
        return pd.DataFrame(columns=CLASS_COLUMNS)
    col = plan.decision.column()
    ok = usable(trials, col)
    arms, pairs = [a.name for a in plan.arms], plan.pairs()
    devices = list(dict.fromkeys(trials["device"]))
    rows: list[dict[str, Any]] = []
    for chip, members in sorted(by_class(devices, chips).items()):
        mine = ok[ok["device"].isin(members)]
        index = {d: i for i, d in enumerate(members)}
        blocks = np.array([pooled_block(index[d], int(b)) for d, b in zip(mine["device"], mine["block"], strict=True)],
                          dtype=np.int64)
        samples = {a: ArmSample(a, mine.loc[mine["arm"] == a, col].to_numpy(np.float64),
                                blocks[(mine["arm"] == a).to_numpy()]) for a in arms}
        seqs = mine["seq"].to_numpy(np.int64)
        values: Values = {a: [(int(s), int(b), float(v)) for s, b, v, arm in
                              zip(seqs, blocks, mine[col].to_numpy(np.float64), mine["arm"], strict=True) if arm == a]
                          for a in arms}
        answered: int | None = None
        if plan.decision.adaptive is not None:
            timed = {a: Timed(samples[a], mine.loc[mine["arm"] == a, "seq"].to_numpy(np.int64)) for a in arms}
            comps: list[Any]
            comps, answered = replay_answered(timed, pairs, plan.decision, plan.launches_per_arm(), seed=seed)
        else:
            comps = []
            for b, c in pairs:
                try:
                    comps.append(compare(samples[b], samples[c], plan.decision, seed=seed))
                except InsufficientData:
                    comps.append(None)
        watched = watch_of(values, plan, members, answered, int(seqs.max()) if len(seqs) else -1,
                           cap=planned_last(plan, len(members)))
        for (b, c), comp in zip(pairs, comps, strict=True):
            row: dict[str, Any] = dict.fromkeys(CLASS_COLUMNS, math.nan)
            if comp is None:
                row.update(baseline=b, candidate=c, verdict="inconclusive", reason="no verdict: no shared block")
            else:
                row.update({k: v for k, v in asdict(comp).items() if k in CLASS_COLUMNS})
            row.update(chip_class=chip, devices=len(members), **heterogeneity(mine, b, c, col, watched.get((b, c))))
            rows.append(row)
    return pd.DataFrame(rows, columns=CLASS_COLUMNS)


def heterogeneity(trials: pd.DataFrame, base: str, cand: str, col: str,
                  watch: PairWatch | None = None) -> dict[str, Any]:
    """Per device: its block differences (log candidate - log baseline) and baseline levels, compared across the
    class's devices. ``watch``: the effect check as the class took it (None: one check on all these trials)."""
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
    if watch is None:
        p, odd = effect_check(effects)
        watch = PairWatch("flagged" if p < HETEROGENEITY_P else "quiet", p, odd, -1)
    level_p = _kruskal(levels)
    words = []
    if watch.status == "flagged":
        words.append(f"the effect differs between phones (p={watch.p:.2g}"
                     + (f"; {watch.odd} stands furthest from its siblings)" if watch.odd else ")"))
    if watch.kept:
        words.append(f"kept going {watch.kept} rounds to check {watch.odd or 'the phones'}"
                     + ("" if watch.status == "flagged" else f": {watch.status} (p={watch.p:.2g})"))
    if not math.isnan(level_p) and level_p < LEVEL_P:
        words.append(f"the phones' speeds differ (p={level_p:.2g})")
    return {
        "effect_by_device": "; ".join(f"{d} {math.exp(float(np.median(e))):.3f}{_interval(e)}"
                                      for d, e in effects.items()),
        "effect_heterogeneity_p": watch.p,
        "effect_check": watch.status,
        "odd_phone": watch.odd if watch.status == "flagged" and watch.odd else "",
        "rounds_kept": watch.kept,
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


def _kruskal(groups: dict[str, np.ndarray]) -> float:
    usable = [g for g in groups.values() if len(g) >= 2]
    if len(usable) < 2:
        return math.nan
    try:
        return float(stats.kruskal(*usable).pvalue)
    except ValueError:  # every value identical
        return 1.0
