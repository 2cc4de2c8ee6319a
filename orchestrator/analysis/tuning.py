"""Tuning tables from a sweep run: per device class, the configuration the harness should launch with.

A sweep plan's arms are the grid points (one runtime, different engine params / threads); its first
arm is the *default*. Per chip class (devices of one class pooled, blocks kept apart per device):

1. the *best* arm is the one with the highest median decode tok/s (trial1);
2. every other arm is compared with the best by the plan's pre-committed rule (``compare``): one
   whose verdict is not "best is faster" (p < alpha and >= min_effect) is *indistinguishable*;
3. among the best and the indistinguishable arms: the default if it is there, else the *simplest*
   (fewest params that differ from the default), then the highest median.

The output is the harness's ``TuningTable`` JSON (``ios_harness/Sources/HarnessCore/Tuning.swift``:
``{"engine", "device", "params"}``, unknown keys rejected) per chip class, and a CSV with the evidence
(median, CI, trials, run id, comparison with the best) for people.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import numpy as np
import pandas as pd

from orchestrator.analysis.audit import chip_class, median_ci
from orchestrator.analysis.decision import ArmSample, InsufficientData, compare
from orchestrator.config.plan import Arm
from orchestrator.protocol import HarnessTuningTable, TuningValue, harness_engine
from orchestrator.results.records import Manifest
from orchestrator.results.trials import usable


class TuningInputError(ValueError):
    """The run cannot produce a tuning table (the CLI exits 2)."""


EVIDENCE_COLUMNS = [
    "chip_class", "engine", "arm", "params", "chosen", "default", "median_tok_s", "ci_low", "ci_high", "n_trials",
    "devices", "ratio_to_best", "p_vs_best", "verdict_vs_best", "run_id", "reason",
]


def params_of(arm: Arm) -> dict[str, TuningValue]:
    params: dict[str, TuningValue] = dict(arm.engine)
    if arm.threads is not None:
        params["threads"] = arm.threads
    return params


def check_sweep(manifest: Manifest) -> None:
    arms = manifest.plan.arms
    runtimes = sorted({a.runtime for a in arms})
    if len(runtimes) != 1:
        raise TuningInputError(f"a sweep runs one runtime with different params; plan {manifest.plan.name!r} "
                               f"runs {', '.join(runtimes)}")
    distinct = {json.dumps(params_of(a), sort_keys=True) for a in arms}
    if len(distinct) < 2:
        raise TuningInputError(f"plan {manifest.plan.name!r} sweeps one configuration ({distinct.pop()}): "
                               "nothing to choose between; give the arms different engine params")


def _sample(frame: pd.DataFrame, arm: str, device_index: dict[str, int]) -> ArmSample:
    blocks = frame["device"].map(device_index).to_numpy(dtype=np.int64) * 1_000_000 + frame["block"].to_numpy(
        dtype=np.int64)
    return ArmSample(name=arm, values=frame["decode_tok_s"].to_numpy(dtype=np.float64), blocks=blocks)


def _differs(a: dict[str, TuningValue], default: dict[str, TuningValue]) -> int:
    return sum(1 for k in set(a) | set(default) if a.get(k) != default.get(k))


def choose(trials: pd.DataFrame, manifest: Manifest) -> pd.DataFrame:
    """The evidence table: one row per chip class and arm; ``chosen`` marks the pick per class."""
    check_sweep(manifest)
    plan = manifest.plan
    default = plan.arms[0]
    ok = usable(trials)
    if not len(ok):
        raise TuningInputError(f"run {manifest.run_id} has no finished trials")
    ok = ok.assign(chip_class=ok["device"].map(lambda d: chip_class(manifest, d, trials)))
    rows = []
    for chip, g in ok.groupby("chip_class", sort=True):
        index = {d: i for i, d in enumerate(sorted(g["device"].unique()))}
        samples = {a.name: _sample(g[g["arm"] == a.name], a.name, index) for a in plan.arms}
        stats = {a.name: median_ci(g.loc[g["arm"] == a.name, "decode_tok_s"], seed=manifest.seed) for a in plan.arms}
        measured = [a for a in plan.arms if samples[a.name].n]
        best = max(measured, key=lambda a: stats[a.name][0])
        evidence = {}
        for a in measured:
            if a.name == best.name:
                evidence[a.name] = (1.0, math.nan, "best")
                continue
            try:
                c = compare(samples[a.name], samples[best.name], plan.decision, seed=manifest.seed)
                evidence[a.name] = (1 / c.ratio, c.p_value, c.verdict)
            except InsufficientData:
                evidence[a.name] = (math.nan, math.nan, "no shared block")
        near = [a for a in measured if evidence[a.name][2] not in ("faster", "no shared block")]
        d_params = params_of(default)
        if any(a.name == default.name for a in near):
            pick = default
        else:
            pick = min(near, key=lambda a: (_differs(params_of(a), d_params), -stats[a.name][0]))
        for a in plan.arms:
            med, lo, hi = stats[a.name]
            ratio, p, verdict = evidence.get(a.name, (math.nan, math.nan, "no data"))
            rows.append({
                "chip_class": chip, "engine": a.runtime, "arm": a.name,
                "params": json.dumps(params_of(a), sort_keys=True), "chosen": a.name == pick.name,
                "default": a.name == default.name, "median_tok_s": med, "ci_low": lo, "ci_high": hi,
                "n_trials": samples[a.name].n, "devices": ",".join(index), "ratio_to_best": ratio, "p_vs_best": p,
                "verdict_vs_best": verdict, "run_id": manifest.run_id,
                "reason": _reason(a, pick, best, default, verdict, ratio, p) ,
            })
    return pd.DataFrame(rows, columns=EVIDENCE_COLUMNS)


def _reason(a: Arm, pick: Arm, best: Arm, default: Arm, verdict: str, ratio: float, p: float) -> str:
    vs = f"{ratio - 1:+.1%} vs best, p={p:.3g}" if np.isfinite(ratio) and a.name != best.name else ""
    if a.name == pick.name:
        if a.name == default.name and a.name != best.name:
            return f"chosen: the default, indistinguishable from the best ({best.name}) ({vs})"
        if a.name == best.name and a.name == default.name:
            return "chosen: the default, and the best median"
        if a.name == best.name:
            return "chosen: best median; the default is distinguishably slower"
        return f"chosen: simplest among those indistinguishable from the best ({vs})"
    if verdict == "faster":
        return f"distinguishably slower than the best ({vs})"
    if a.name == best.name:
        return "best median, but a simpler or the default configuration is indistinguishable"
    return f"indistinguishable from the best ({vs}); not the default or simplest"


def harness_tables(evidence: pd.DataFrame) -> dict[str, HarnessTuningTable]:
    """Per chip class, the table the harness loads."""
    out = {}
    for row in evidence[evidence["chosen"]].to_dict("records"):
        out[str(row["chip_class"])] = HarnessTuningTable(
            engine=harness_engine(str(row["engine"])), device=str(row["chip_class"]),
            params=json.loads(str(row["params"])))
    return out


def slug(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", name).strip("-")


def write(evidence: pd.DataFrame, out: Path) -> list[Path]:
    """The harness JSON (``out`` itself for one chip class; ``<stem>.<chip>.json`` for several) and
    ``<stem>.csv`` with the evidence. Returns the paths written."""
    tables = harness_tables(evidence)
    out.parent.mkdir(parents=True, exist_ok=True)
    paths = []
    for chip, table in tables.items():
        path = out if len(tables) == 1 else out.with_name(f"{out.stem}.{slug(chip)}{out.suffix or '.json'}")
        path.write_text(table.model_dump_json(indent=2, exclude_none=True) + "\n")
        paths.append(path)
    csv = out.with_suffix(".csv")
    evidence.to_csv(csv, index=False)
    return [*paths, csv]
