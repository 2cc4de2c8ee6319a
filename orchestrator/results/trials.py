"""A run's trial table, from its journal's records: one row per planned trial that finished (ok or
failed), and what a conclusion may be drawn from (finished, not excluded)."""

from __future__ import annotations

import statistics
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pandas as pd

from orchestrator.protocol import TrialResult
from orchestrator.results.records import (
    AttemptFailed,
    AttemptSpoiled,
    Manifest,
    StreamProbeRecord,
    Record,
    SessionStopped,
    TrialRecord,
    device_chips,
)
from orchestrator.results.store import RunDir


def trial_rows(manifest: Manifest, records: list[Record]) -> pd.DataFrame:
    """One row per final trial record: the flat table analysis and reports work on."""
    arms = {a.name: a for a in manifest.plan.arms}
    probes = {r.device: r.probe.gb_s for r in records if isinstance(r, StreamProbeRecord)}
    chips = device_chips(manifest, records)
    retried: dict[tuple[str, str], float] = {}  # failed attempts before the final one: settle + launch
    for r in records:
        if isinstance(r, AttemptFailed | AttemptSpoiled):
            rested = r.rest.waited_s if isinstance(r, AttemptSpoiled) and r.rest else 0.0
            retried[r.device, r.trial_id] = retried.get((r.device, r.trial_id), 0.0) + r.settle_waited_s + \
                r.duration_s + rested
    rows: list[dict[str, Any]] = []
    for rec in records:
        if not isinstance(rec, TrialRecord):
            continue
        arm = arms[rec.arm]
        res, before, after = rec.result, rec.settle.before, rec.after
        gen = res.trial1 if res else None
        warm = [g.decode_tok_s() for g in res.warm] if res else []
        rows.append({
            "run_id": manifest.run_id, "device": rec.device, "chip_class": chips.get(rec.device),
            "trial_id": rec.trial_id, "seq": rec.seq,
            "block": rec.block, "arm": rec.arm, "runtime": arm.runtime, "build": arm.build,
            "attempts": rec.attempts, "status": "ok" if res else "failed",
            "failure_kind": rec.failure.kind if rec.failure else None,
            "failure_message": rec.failure.message if rec.failure else None,
            "decode_tok_s": res.decode_tok_s() if res else None,
            "prefill_tok_s": res.prefill_tok_s() if res else None,
            "ttft_s": gen.ttft_ns * 1e-9 if gen else None,
            "warm_decode_tok_s": statistics.median(warm) if warm else None,
            "bytes_per_decode_token": res.bytes_per_decode_token if res else None,
            "bytes_per_prefill_token": res.bytes_per_prefill_token if res else None,
            "effective_gb_s": res.effective_gb_s() if res else None,
            "chunk_width": res.chunk_width if res else manifest.plan.trial.chunk_width,
            "engine_version": res.engine_version if res else None,
            "harness_build": res.harness_build if res else None,
            "thermal_before": before.thermal_state if before else None,
            "thermal_after": after.thermal_state if after else None,
            "state_rose": rec.state_rose,
            "battery_before_c": before.battery_c if before else None,
            "battery_after_c": after.battery_c if after else None,
            "settle_waited_s": rec.settle.waited_s,
            "other_cpu_share": rec.interference.share if rec.interference else None,
            "throttle_slowdown": rec.settle.throttle.slowdown if rec.settle.throttle else None,
            "throttle_after_slowdown": rec.throttle_after.slowdown if rec.throttle_after else None,
            "throttled_from_rest": rec.throttled_from_rest,
            "excluded": rec.excluded,
            "probe_gb_s": probes.get(rec.device),
            "t_start_s": rec.t_start, "duration_s": rec.duration_s,
            "measured_s": (timed := min(measured_s(res), rec.duration_s) if res else 0.0),
            "launch_s": rec.duration_s - timed,
            "retry_s": retried.get((rec.device, rec.trial_id), 0.0) + (rec.rest.waited_s if rec.rest else 0.0),
            "wall_start": datetime.fromtimestamp(rec.wall, UTC),
        })
    frame = pd.DataFrame(rows, columns=_COLUMNS)
    return frame.sort_values(["device", "seq"], kind="stable").reset_index(drop=True)


_COLUMNS = [
    "run_id", "device", "chip_class", "trial_id", "seq", "block", "arm", "runtime", "build", "attempts", "status",
    "failure_kind", "failure_message", "decode_tok_s", "prefill_tok_s", "ttft_s", "warm_decode_tok_s",
    "bytes_per_decode_token", "bytes_per_prefill_token", "effective_gb_s", "chunk_width", "engine_version",
    "harness_build", "thermal_before", "thermal_after", "state_rose", "battery_before_c", "battery_after_c",
    "settle_waited_s", "other_cpu_share", "throttle_slowdown", "throttle_after_slowdown", "throttled_from_rest",
    "excluded", "probe_gb_s", "t_start_s", "duration_s",
    "measured_s", "launch_s", "retry_s", "wall_start",
]


def measured_s(result: TrialResult) -> float:
    """The timed part of a launch: each generation from submit to its last token (trial1, warm ones)."""
    gens = [g for g in (result.trial1, *result.warm) if g is not None]
    return sum(g.token_times_ns[-1] for g in gens if g.token_times_ns) * 1e-9


def usable(trials: pd.DataFrame, column: str = "decode_tok_s") -> pd.DataFrame:
    """The trials a conclusion may be drawn from: finished, with `column`, and not excluded (other work took
    the CPU, or the device ran throttled). Tables without an `excluded` column (older runs) exclude none."""
    keep = (trials["status"] == "ok") & trials[column].notna()
    if "excluded" in trials.columns:
        keep &= trials["excluded"].isna()
    return trials[keep]


def excluded_counts(trials: pd.DataFrame) -> dict[str, dict[str, int]]:
    """Per device, how many finished trials were excluded and why (the reason's first word)."""
    if "excluded" not in trials.columns:
        return {}
    out: dict[str, dict[str, int]] = {}
    hit = trials[(trials["status"] == "ok") & trials["excluded"].notna()]
    for device, why in zip(hit["device"], hit["excluded"], strict=True):
        kind = str(why).split(":", 1)[0]
        out.setdefault(str(device), {}).setdefault(kind, 0)
        out[str(device)][kind] += 1
    return out


def excluded_words(trials: pd.DataFrame) -> str | None:
    """One line saying what was excluded, or None when nothing was."""
    counts = excluded_counts(trials)
    if not counts:
        return None
    total = sum(sum(c.values()) for c in counts.values())
    per = "; ".join(f"{d}: " + ", ".join(f"{n} {k}" for k, n in sorted(c.items())) for d, c in sorted(counts.items()))
    kinds = {k for c in counts.values() for k in c}
    why = [text for kind, text in (("interference", "other processes took more of the CPU than the plan allows"),
                                   ("throttled", "the throttle probe stayed slow before it, or was slow right after it "
                                    "with no retry left (throttled, whatever the OS said)"))
           if kind in kinds]
    return (f"{total} finished trial{'s' if total != 1 else ''} excluded from verdicts, the audit and rank ({per}): "
            + "; ".join(why or ["see the trials' `excluded` column"]))


def self_throttled_words(trials: pd.DataFrame) -> str | None:
    """One line naming the trials that ran throttled although they started from a rest (counted), or None."""
    if "throttled_from_rest" not in trials.columns:
        return None
    hit = trials[(trials["status"] == "ok") & trials["throttled_from_rest"].fillna(False).astype(bool)]
    if hit.empty:
        return None
    per = ", ".join(f"{d} {a}: {n}" for (d, a), n in sorted(Counter(zip(hit["device"], hit["arm"], strict=True)).items()))
    return (f"{len(hit)} trial{'s' if len(hit) != 1 else ''} ran throttled although started from a rest ({per}): "
            "counted, as their arm throttles the device itself (a real, sustained difference, not carried-over heat)")


def finished_by_device(records: list[Record]) -> dict[str, int]:
    """How many trials each device has finished (ok or failed) in the journal so far."""
    done: dict[str, int] = {}
    for r in records:
        if isinstance(r, TrialRecord):
            done[r.device] = done.get(r.device, 0) + 1
    return done


def stop_records(records: list[Record]) -> dict[str, SessionStopped]:
    """The last stop record of each device."""
    return {r.device: r for r in records if isinstance(r, SessionStopped)}


def load_trials(run_dir: str | Path) -> pd.DataFrame:
    """The public loader: one row per planned trial that finished (ok or failed)."""
    run = RunDir(Path(run_dir))
    if run.fresh(run.trials_path):
        return pd.read_parquet(run.trials_path)
    return trial_rows(run.manifest(), run.records())
