"""Derive once, read many: a run's tables from its journal (the source of truth).

`derive` writes every table of `results.store.TABLES` once per journal state, stamped with the journal's
length and digest (derived.json, written last), and reads them back while they are current; `show`,
`report`, `audit` and `rank` go through it and never compute a table themselves. The audit depends on a
ceilings table as well: it is read back while the stamp names the same table, else derived again.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from orchestrator.analysis import noise
from orchestrator.analysis.audit import audit, prefill_view
from orchestrator.analysis.devicetime import costs, session_summary
from orchestrator.analysis.gating import first_arm_gates, gates_of
from orchestrator.analysis.pooled import class_verdicts
from orchestrator.analysis.summary import verdicts
from orchestrator.config.candidates import CeilingTable
from orchestrator.results.records import EARLY_STOPS, Manifest, Record, StopReason, device_chips
from orchestrator.results.store import (
    TABLES,
    RunDir,
    RunLocked,
    RunNotWritable,
    read_registry,
    write_atomic,
    write_registry,
)
from orchestrator.results.trials import stop_records, trial_rows, usable
from orchestrator.runtimes.gater import Gater
from orchestrator.schedule import resume_state
from orchestrator.schedule.pool import fleet_chips


@dataclass(frozen=True)
class RunOutcome:
    run: RunDir
    manifest: Manifest
    stops: dict[str, StopReason]
    trials: pd.DataFrame
    verdicts: pd.DataFrame
    gates: pd.DataFrame  # token gates of the real trials against the numpy reference (empty for sims)
    details: dict[str, str]  # device -> why its session stopped, where it said
    warnings: list[str] = field(default_factory=list)  # journal lines skipped; tables not written (and why)
    chips: dict[str, str] = field(default_factory=dict)  # device -> chip class, as the device said (device_chips)
    sessions: pd.DataFrame = field(default_factory=pd.DataFrame)  # per session: trials, stop, device time
    class_verdicts: pd.DataFrame = field(default_factory=pd.DataFrame)  # pooled phones (pool_by): one per class
    audit: pd.DataFrame = field(default_factory=pd.DataFrame)  # against the ceilings derive was given (else empty)
    prefill: pd.DataFrame = field(default_factory=pd.DataFrame)  # the prefill view against the same ceilings
    first_arm_gates: pd.DataFrame = field(default_factory=pd.DataFrame)  # each arm's tokens vs the first arm's

    @property
    def completed(self) -> bool:
        return all_ran(self.stops)


def all_ran(reasons: dict[str, StopReason]) -> bool:
    """Every session ran its plan (or stopped where the sequential rule said stop)."""
    return all(r in ("completed", *EARLY_STOPS) for r in reasons.values())


def stop_reasons(manifest: Manifest, records: list[Record]) -> dict[str, StopReason]:
    """Why each session ended; `interrupted` for one with no end in the journal, or one whose end the
    journal holds but not all of its trials (records skipped as corrupt: resume runs them)."""
    states = resume_state(manifest, records)
    reasons = {d: s.reason for d, s in stop_records(records).items()}
    for s in manifest.sessions:
        if s.device in states and reasons.get(s.device) == "completed":
            reasons[s.device] = "interrupted"
        reasons.setdefault(s.device, "interrupted")
    return reasons


def ceilings_digest(table: CeilingTable) -> str:
    return hashlib.sha256(table.model_dump_json().encode()).hexdigest()


def derive(run: RunDir, ceilings: CeilingTable | None = None) -> RunOutcome:
    """The run's tables: read back where the last derive wrote them from the journal as it is now, else
    derived and written (when the run can be locked). A run another process is writing, or a folder that
    cannot be written, is derived in memory and says so. `ceilings`: also the audit against that table."""
    try:
        with run.lock():
            return derive_locked(run, ceilings=ceilings)
    except RunLocked as exc:
        return derive_locked(run, ceilings=ceilings, save=False,
                             why=f"{exc}; tables derived in memory from the journal so far")
    except RunNotWritable as exc:
        return derive_locked(run, ceilings=ceilings, save=False, why=f"{exc}; tables derived in memory")


def derive_locked(run: RunDir, *, ceilings: CeilingTable | None = None, save: bool = True,
                  why: str | None = None) -> RunOutcome:
    """`derive` for a caller that holds the run's lock (or, with `save=False`, writes nothing)."""
    manifest = run.manifest()
    reading = run.read(manifest)
    made_from = run.journal_stamp() if run.journal_path.is_file() else None  # under the lock when saving: as read
    records = reading.records
    warnings = reading.warnings(run.journal_path) + ([why] if why else [])
    if reading.skipped:
        warnings.append(f"{len(reading.skipped)} journal line(s) skipped: a trial whose record was skipped counts as "
                        f"not run, and orch run --resume {run.run_id} runs it again")
    stopped, chips = stop_reasons(manifest, records), device_chips(manifest, records)
    digest = ceilings_digest(ceilings) if ceilings is not None else None
    done = run.derived(made_from) if made_from is not None else None
    # the journal changed since the last derive (or there was none): everything again
    tables = dict(done.tables) if done is not None else _tables(run, manifest, records, stopped, chips)
    stale_audit = ceilings is not None and (done is None or done.ceilings_sha256 != digest)
    if ceilings is not None and stale_audit:
        tables.update(_audit(tables["trials"], manifest, ceilings))
    if save and (done is None or stale_audit):
        # everything when the journal changed; else only the audit, the other tables staying as they are
        fresh = tables if done is None else {n: tables[n] for n in AUDIT}
        kept = [] if done is None else [run.table_path(n) for n in TABLES if n not in AUDIT and
                                        TABLES[n] in run.current(made_from)]
        try:
            written = kept + _write(run, fresh)
            if done is None:
                warnings += _register_noise(run, tables["trials"], manifest, chips)
            if made_from is not None:  # last: a table written before a failure is simply derived again
                run.stamp(made_from, written, ceilings_sha256=digest)
        except OSError as exc:
            warnings.append(f"{run.path}: derived tables not written ({exc.strerror}); derived in memory")
    return RunOutcome(run=run, manifest=manifest, stops=stopped, trials=tables["trials"], verdicts=tables["verdicts"],
                      details={d: s.detail for d, s in stop_records(records).items() if s.detail},
                      gates=tables["token_gates"], warnings=warnings, chips=chips, sessions=tables["sessions"],
                      class_verdicts=tables["class_verdicts"], audit=tables["audit"], prefill=tables["prefill"],
                      first_arm_gates=first_arm_gates(manifest, records))


def _tables(run: RunDir, manifest: Manifest, records: list[Record], stopped: dict[str, StopReason],
            chips: dict[str, str]) -> dict[str, pd.DataFrame]:
    """Every table from the journal's records (the audit empty: it needs a ceilings table)."""
    trials = trial_rows(manifest, records)
    table = verdicts(trials, manifest.plan, seed=manifest.seed)
    table, spent = costs(table, trials, records, [s.device for s in manifest.sessions], manifest.plan.budget_minutes)
    planned = {s.device: len(s.trials) for s in manifest.sessions}
    return {"trials": trials, "verdicts": table,
            "sessions": session_summary(spent, trials, planned, {d: str(r) for d, r in stopped.items()}, chips),
            "class_verdicts": class_verdicts(trials, manifest.plan, fleet_chips(manifest.fleet), seed=manifest.seed),
            "token_gates": gates_of(run, Gater(), records, save=False, force=True),
            "audit": pd.DataFrame(), "prefill": pd.DataFrame()}


AUDIT = ("audit", "prefill")  # the tables that also depend on a ceilings table


def _audit(trials: pd.DataFrame, manifest: Manifest, ceilings: CeilingTable) -> dict[str, pd.DataFrame]:
    """The audit and the prefill view against `ceilings` (empty without a trial a conclusion may use)."""
    if not len(trials) or not len(usable(trials)):
        return {"audit": pd.DataFrame(), "prefill": pd.DataFrame()}
    return {"audit": audit(trials, manifest, ceilings, seed=manifest.seed),
            "prefill": prefill_view(trials, manifest, ceilings)}


def _write(run: RunDir, tables: dict[str, pd.DataFrame]) -> list[Path]:
    """Every non-empty table (trials, verdicts and sessions always), each replaced whole."""
    written = []
    for name, frame in tables.items():
        path = run.table_path(name)
        if name == "trials":
            tmp = path.with_name(path.name + ".tmp")
            try:
                frame.to_parquet(tmp, index=False)
                os.replace(tmp, path)
            finally:
                tmp.unlink(missing_ok=True)
        elif name in ("verdicts", "sessions") or len(frame):
            write_atomic(path, frame.to_csv(index=False).encode())
        else:
            continue
        written.append(path)
    return written


def _register_noise(run: RunDir, trials: pd.DataFrame, manifest: Manifest, chips: dict[str, str]) -> list[str]:
    """An A/A run's noise into its results folder's registry; a device whose noise jumped, in words."""
    new = noise.readings(trials, manifest, chips)
    if not len(new):
        return []
    registry = read_registry(run.path.parent)
    write_registry(run.path.parent, noise.merged(registry, new))
    return noise.jumps(registry, new)
