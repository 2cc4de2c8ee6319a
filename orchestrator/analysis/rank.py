"""Ranking the candidate table with measured data (the rules are in configs/candidates.yaml's header).

Measured data comes as one flat frame of trial rows (from runs or from the nightly history) with
at least: run_id, model, chip_class, device, runtime, status, decode_tok_s, bytes_per_decode_token,
probe_gb_s. Each candidate is joined by model regex and chip class.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from orchestrator.analysis.audit import ceiling_for, chip_class, probe_gb_s, reading
from orchestrator.config.candidates import Candidate, CandidateTable, CeilingTable, Range
from orchestrator.results.records import Manifest
from orchestrator.results.trials import usable

OBS_COLUMNS = [
    "run_id", "model", "chip_class", "device", "runtime", "status", "decode_tok_s", "bytes_per_decode_token",
    "probe_gb_s", "excluded",
]
# What ranking reads from a nightly history (tens of millions of rows): no per-row run ids.
HISTORY_OBS_COLUMNS = [c for c in OBS_COLUMNS if c not in ("run_id", "device", "excluded")]
RANK_COLUMNS = [
    "rank", "seed_rank", "id", "target", "device_classes", "gate", "gate_status", "current_tok_s", "current_source",
    "expected_tok_s", "expected_source", "gain", "audit_ratio", "audit_bound_tok_s", "audit_reading", "runs", "why",
]


def observations(trials: pd.DataFrame, manifest: Manifest) -> pd.DataFrame:
    """A run's trial rows in the shape ranking joins on."""
    devices = sorted(trials["device"].unique())
    chips = {d: chip_class(manifest, d, trials) for d in devices}
    probes = {d: probe_gb_s(manifest, d, trials) for d in devices}
    if "excluded" not in trials.columns:  # a run from before trials could be excluded
        trials = trials.assign(excluded=None)
    out = trials.assign(
        model=manifest.plan.model, chip_class=trials["device"].map(chips),
        probe_gb_s=trials["device"].map(lambda d: probes[d] if probes[d] is not None else math.nan),
    )
    return out[OBS_COLUMNS]


SUMMARY_KEYS = ["model", "chip_class", "runtime"]
SUMMARY_COLUMNS = [*SUMMARY_KEYS, "decode_tok_s", "bytes_per_token", "probe_gb_s", "n", "runs"]


def _summarize(obs: pd.DataFrame) -> pd.DataFrame:
    """Medians per (model, chip_class, runtime) of measured rows in memory (a few runs' trials); trials
    excluded for interference or throttling never count."""
    ok = usable(obs)
    g = ok.groupby(SUMMARY_KEYS, sort=True, observed=True)
    summary = g.agg(
        decode_tok_s=("decode_tok_s", "median"), bytes_per_token=("bytes_per_decode_token", "median"),
        probe_gb_s=("probe_gb_s", "median"), n=("decode_tok_s", "size"),
    )
    if "run_id" in ok.columns:
        runs = g["run_id"].unique().map(lambda r: ",".join(sorted(map(str, r))[:3]) + ("..." if len(r) > 3 else ""))
        return summary.assign(runs=runs).reset_index()
    return summary.assign(runs="history").reset_index()


def summarize_history(history: Path | None, obs: pd.DataFrame | None = None) -> pd.DataFrame:
    """The same medians over a nightly history's trial rows (and ``obs``, runs' rows, with them), computed
    from the history's per-night rollups (``results.history_rollup``): exact medians, as over every row,
    from a small read; the rows never come into memory, only one row per group comes back."""
    from orchestrator.results.history_rollup import summarize

    if obs is not None and "excluded" in obs.columns:  # excluded trials inform no conclusion
        obs = obs[obs["excluded"].isna()]
    frame = summarize(history, obs)
    return frame.rename(columns={"bytes_per_decode_token": "bytes_per_token"})[SUMMARY_COLUMNS]


def _fmt_range(r: Range | None) -> float:
    return r.mid if r is not None else math.nan


def _rank_one(c: Candidate, summary: pd.DataFrame, ceilings: CeilingTable) -> dict[str, Any]:
    hit = np.array([c.matches(str(m), str(k)) for m, k in zip(summary["model"], summary["chip_class"], strict=True)],
                   dtype=bool)
    mine = summary[hit]
    cur = mine[mine["runtime"] == c.current_runtime]
    tgt = mine[mine["runtime"] == c.target_runtime]
    current, current_src = _fmt_range(c.current_tok_s), "seed" if c.current_tok_s else "-"
    audit_ratio = bound = math.nan
    audit_text, runs = "no audit yet", sorted(set(mine["runs"]))
    if len(cur):
        best = cur.sort_values("n", kind="stable").iloc[-1]
        current = float(best["decode_tok_s"])
        current_src = f"measured ({best['chip_class']}, n={int(best['n'])})"
        bpt = float(best["bytes_per_token"])
        probe = float(best["probe_gb_s"]) if np.isfinite(best["probe_gb_s"]) else None
        ceil = ceiling_for(ceilings, str(best["chip_class"]), str(best["model"]), probe)
        if ceil.gb_s is not None and np.isfinite(bpt):
            audit_ratio = current * bpt / 1e9 / ceil.gb_s
            bound = ceil.gb_s * 1e9 / bpt
            audit_text = reading(audit_ratio, ceilings.thresholds)
        elif not np.isfinite(bpt):
            audit_text = "no bytes per token reported: cannot audit"
        else:
            audit_text = ceil.source
    expected, expected_src = _fmt_range(c.expected_tok_s), "seed" if c.expected_tok_s else "-"
    if len(tgt):
        best = tgt.sort_values("n", kind="stable").iloc[-1]
        expected, expected_src = float(best["decode_tok_s"]), f"measured {c.target_runtime} (n={int(best['n'])})"
    elif np.isfinite(bound):
        if np.isfinite(expected) and bound < expected:
            expected, expected_src = bound, "seed, capped at the audit's bandwidth bound"
        elif not np.isfinite(expected):
            expected, expected_src = bound, "audit's bandwidth bound"
    gate_met = c.gate == "none" or np.isfinite(audit_ratio)
    if c.gate == "none":
        gate_status = "-"
    elif gate_met:
        gate_status = "audit first: met"
    else:
        gate_status = "audit first: no audit yet"
    return {
        "seed_rank": c.rank, "id": c.id, "target": c.target, "device_classes": ", ".join(c.device_classes),
        "gate": c.gate, "gate_status": gate_status, "gate_met": gate_met, "current_tok_s": current,
        "current_source": current_src, "expected_tok_s": expected,
        "expected_source": expected_src + (f": {c.expected_note}" if c.expected_note else ""),
        "gain": expected / current if np.isfinite(expected) and np.isfinite(current) else math.nan,
        "audit_ratio": audit_ratio, "audit_bound_tok_s": bound, "audit_reading": audit_text,
        "runs": ",".join(runs), "why": c.why,
    }


def rank(table: CandidateTable, obs: pd.DataFrame, ceilings: CeilingTable) -> pd.DataFrame:
    """Candidates re-ranked from measured rows in memory."""
    return rank_summary(table, _summarize(obs) if len(obs) else pd.DataFrame(columns=SUMMARY_COLUMNS), ceilings)


def rank_summary(table: CandidateTable, summary: pd.DataFrame, ceilings: CeilingTable) -> pd.DataFrame:
    """Candidates re-ranked from per-group medians (``_summarize`` or ``summarize_history``): gate met
    first, then by gain (no gain figure last), then the seed's rank."""
    rows = pd.DataFrame([_rank_one(c, summary, ceilings) for c in table.candidates])
    rows["_gain"] = rows["gain"].fillna(-1.0)
    rows = rows.sort_values(["gate_met", "_gain", "seed_rank"], ascending=[False, False, True], kind="stable")
    rows["rank"] = range(1, len(rows) + 1)
    return rows[RANK_COLUMNS].reset_index(drop=True)


def empty_observations() -> pd.DataFrame:
    return pd.DataFrame(columns=OBS_COLUMNS)
