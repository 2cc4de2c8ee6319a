"""Run directories: `results/<run_id>/{manifest.json, journal.jsonl, trials.parquet, verdicts.csv}`."""

from __future__ import annotations

import os
import statistics
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pandas as pd

from orchestrator.results.journal import read_journal
from orchestrator.results.records import Manifest, ProbeRecord, Record, SessionStopped, TrialRecord


class RunNotFound(Exception):
    pass


@dataclass(frozen=True)
class RunDir:
    path: Path

    @property
    def run_id(self) -> str:
        return self.path.name

    @property
    def manifest_path(self) -> Path:
        return self.path / "manifest.json"

    @property
    def journal_path(self) -> Path:
        return self.path / "journal.jsonl"

    @property
    def trials_path(self) -> Path:
        return self.path / "trials.parquet"

    @property
    def verdicts_path(self) -> Path:
        return self.path / "verdicts.csv"

    @property
    def gates_path(self) -> Path:
        return self.path / "token_gates.csv"

    def fresh(self, derived: Path) -> bool:
        """A table derived from the journal is current: written after the journal's last record."""
        return derived.exists() and derived.stat().st_mtime >= self.journal_path.stat().st_mtime

    def manifest(self) -> Manifest:
        return Manifest.model_validate_json(self.manifest_path.read_bytes())

    def records(self) -> list[Record]:
        return read_journal(self.journal_path) if self.journal_path.exists() else []


def find_run(results: Path, run_id: str) -> RunDir:
    run = RunDir(results / run_id)
    if not run.manifest_path.exists():
        known = sorted(p.name for p in results.glob("*/manifest.json") if p.is_file()) if results.is_dir() else []
        hint = f" (latest: {known[-1]})" if known else ""
        raise RunNotFound(f"no run {run_id!r} under {results}{hint}")
    return run


def create_run(results: Path, manifest: Manifest) -> RunDir:
    run = RunDir(results / manifest.run_id)
    run.path.mkdir(parents=True, exist_ok=False)
    write_atomic(run.manifest_path, manifest.model_dump_json(indent=2).encode())
    return run


def write_atomic(path: Path, data: bytes) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def new_run_id(plan_name: str, now: datetime | None = None) -> str:
    now = now or datetime.now(UTC)
    return f"{now:%Y%m%d-%H%M%S}-{plan_name}-{os.urandom(2).hex()}"


def trial_rows(manifest: Manifest, records: list[Record]) -> pd.DataFrame:
    """One row per final trial record: the flat table analysis and reports work on."""
    arms = {a.name: a for a in manifest.plan.arms}
    probes = {r.device: r.probe.gb_s for r in records if isinstance(r, ProbeRecord)}
    rows: list[dict[str, Any]] = []
    for rec in records:
        if not isinstance(rec, TrialRecord):
            continue
        arm = arms[rec.arm]
        res, before, after = rec.result, rec.settle.before, rec.after
        gen = res.trial1 if res else None
        warm = [g.decode_tok_s() for g in res.warm] if res else []
        rows.append({
            "run_id": manifest.run_id, "device": rec.device, "trial_id": rec.trial_id, "seq": rec.seq,
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
            "probe_gb_s": probes.get(rec.device),
            "t_start_s": rec.t_start, "duration_s": rec.duration_s,
            "wall_start": datetime.fromtimestamp(rec.wall, UTC),
        })
    frame = pd.DataFrame(rows, columns=_COLUMNS)
    return frame.sort_values(["device", "seq"], kind="stable").reset_index(drop=True)


_COLUMNS = [
    "run_id", "device", "trial_id", "seq", "block", "arm", "runtime", "build", "attempts", "status",
    "failure_kind", "failure_message", "decode_tok_s", "prefill_tok_s", "ttft_s", "warm_decode_tok_s",
    "bytes_per_decode_token", "bytes_per_prefill_token", "effective_gb_s", "chunk_width", "engine_version",
    "harness_build", "thermal_before", "thermal_after", "state_rose", "battery_before_c", "battery_after_c",
    "settle_waited_s", "probe_gb_s", "t_start_s", "duration_s", "wall_start",
]


def stops(records: list[Record]) -> dict[str, SessionStopped]:
    """The last stop record of each device."""
    return {r.device: r for r in records if isinstance(r, SessionStopped)}


def load_trials(run_dir: str | Path) -> pd.DataFrame:
    """The public loader: one row per planned trial that finished (ok or failed)."""
    run = RunDir(Path(run_dir))
    if run.fresh(run.trials_path):
        return pd.read_parquet(run.trials_path)
    return trial_rows(run.manifest(), run.records())

