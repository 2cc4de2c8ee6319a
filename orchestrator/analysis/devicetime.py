"""Device time: what a run cost each device, and what each verdict cost.

A device is busy from its session's start: `prepare` (info, install, pushes), then for every attempt
of every trial the settle gate's wait and the launch itself. A launch splits into *measured* time
(each generation from submit to its last token: what the statistic is made of) and *launch* time
(the rest: spec push, process start, model load, result pull). Failed attempts before a trial's
final one count apart (*retry*). All from the journal's records, on the device's own clock (a sim's
simulated seconds, a phone's wall seconds).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np
import pandas as pd

from orchestrator.results.records import PreparedRecord
from orchestrator.results.trials import excluded_counts

DEVICE_TIME_COLUMNS = [
    "device", "trials", "prepare_min", "settle_min", "launch_min", "measured_min", "retry_min", "total_min",
    "settle_share", "budget_min",
]


def prepare_seconds(records: list[Any]) -> dict[str, float]:
    """Per device, the device time its prepares took (one per session start)."""
    out: dict[str, float] = {}
    for r in records:
        if isinstance(r, PreparedRecord):
            out[r.device] = out.get(r.device, 0.0) + r.seconds
    return out


def device_time(trials: pd.DataFrame, prepare_s: dict[str, float], devices: list[str],
                budget_min: float | None = None) -> pd.DataFrame:
    """One row per device of the run: minutes of each kind, the total, and settle's share of it."""
    rows = []
    for device in devices:
        mine = trials[trials["device"] == device]
        parts = {
            "prepare_min": prepare_s.get(device, 0.0) / 60,
            "settle_min": float(mine["settle_waited_s"].sum()) / 60,
            "launch_min": float(mine["launch_s"].sum()) / 60,
            "measured_min": float(mine["measured_s"].sum()) / 60,
            "retry_min": float(mine["retry_s"].sum()) / 60,
        }
        total = sum(parts.values())
        rows.append({"device": device, "trials": len(mine), **parts, "total_min": total,
                     "settle_share": parts["settle_min"] / total if total > 0 else float("nan"),
                     "budget_min": budget_min})
    return pd.DataFrame(rows, columns=DEVICE_TIME_COLUMNS)


def decided_in(verdicts: pd.DataFrame, trials: pd.DataFrame, prepare_s: dict[str, float]) -> pd.Series:
    """Per verdict row, the device minutes its device had spent when the verdict's last launch ended
    (prepare, then every trial in the order it ran, failed attempts included): what the answer cost."""
    out = []
    for row in verdicts.to_dict("records"):
        mine = trials[trials["device"] == row["device"]].sort_values("seq", kind="stable")
        spent = (mine["settle_waited_s"] + mine["duration_s"] + mine["retry_s"]).cumsum().to_numpy()
        need = {row["baseline"]: row["n_baseline"], row["candidate"]: row["n_candidate"]}
        if not len(mine) or any(pd.isna(n) or n <= 0 for n in need.values()):
            out.append(float("nan"))
            continue
        ok = (mine["status"] == "ok").to_numpy()
        reached = np.ones(len(mine), dtype=bool)
        for arm, n in need.items():
            reached &= np.cumsum(ok & (mine["arm"] == arm).to_numpy()) >= n
        at = int(np.argmax(reached)) if reached.any() else len(mine) - 1
        out.append((prepare_s.get(str(row["device"]), 0.0) + float(spent[at])) / 60)
    return pd.Series(out, index=verdicts.index, dtype=float)


def costs(verdicts: pd.DataFrame, trials: pd.DataFrame, records: list[Any], devices: list[str],
          budget_min: float | None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The verdicts with what each cost (`device_min`), and the per-device table: derived once from the
    journal's records, for the run's files and for its report alike."""
    prepare_s = prepare_seconds(records)
    if len(verdicts):
        verdicts = verdicts.assign(device_min=decided_in(verdicts, trials, prepare_s))
    return verdicts, device_time(trials, prepare_s, devices, budget_min)


SESSION_COLUMNS = [
    "device", "chip_class", "stop", "planned", "ok", "failed", "failures_by_kind", "excluded_by_reason",
    "settle_wait_median_s", "state_rose", *DEVICE_TIME_COLUMNS[1:],
]


def session_summary(spent: pd.DataFrame, trials: pd.DataFrame, planned: dict[str, int], stops: dict[str, str],
                    chips: dict[str, str]) -> pd.DataFrame:
    """One row per session (device): how it ended, its trials (planned, finished, failed by kind, excluded by
    reason), the settle gate's median wait, and its device time (`spent`: device_time's table)."""
    rows = []
    by_device = spent.set_index("device") if len(spent) else None
    excluded = excluded_counts(trials) if len(trials) else {}
    for device, n in planned.items():
        mine = trials[trials["device"] == device] if len(trials) else trials
        ok = int((mine["status"] == "ok").sum()) if len(mine) else 0
        kinds = Counter(mine["failure_kind"].dropna()) if len(mine) else Counter()
        time = by_device.loc[device].to_dict() if by_device is not None and device in by_device.index else {}
        rows.append({
            "device": device, "chip_class": chips.get(device, ""), "stop": stops.get(device, "not started"),
            "planned": n, "ok": ok, "failed": len(mine) - ok,
            "failures_by_kind": ", ".join(f"{k} {c}" for k, c in sorted(kinds.items())),
            "excluded_by_reason": ", ".join(f"{k} {c}" for k, c in sorted(excluded.get(device, {}).items())),
            "settle_wait_median_s": float(mine["settle_waited_s"].median()) if len(mine) else float("nan"),
            "state_rose": int(mine["state_rose"].sum()) if len(mine) else 0,
            **{c: time.get(c, float("nan")) for c in DEVICE_TIME_COLUMNS[1:]},
        })
    return pd.DataFrame(rows, columns=SESSION_COLUMNS)
