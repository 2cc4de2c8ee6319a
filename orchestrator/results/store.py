"""Run directories: `results/<run_id>/{manifest.json, journal.jsonl, derived.json}` and the tables derive writes
(TABLES: trials.parquet, verdicts.csv, sessions.csv, ...).

A run id is a name under the results folder, never a path. One process writes a run at a time: it
holds an exclusive lock on `run.lock` for the run's life (the OS releases it when the process dies).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pandas as pd
from pydantic import ValidationError

from orchestrator.results.journal import Reading, read_records
from orchestrator.results.records import (
    AttemptFailed,
    AttemptSpoiled,
    LookRecord,
    Manifest,
    PreparedRecord,
    StreamProbeRecord,
    Record,
    SessionStopped,
    TrialRecord,
)


class RunNotFound(Exception):
    pass


class RunUnreadable(Exception):
    """The run directory exists but its manifest or journal cannot be read."""


class RunLocked(Exception):
    """Another process is writing this run."""


class RunNotWritable(Exception):
    """The run's folder cannot be written (read-only, not ours): it can be read, not run."""


# Every table derive writes into a run's folder, by name. The first three are always written; the rest
# where there is something to write (pooled classes, real trials to gate, a ceilings table to audit against).
TABLES = {"trials": "trials.parquet", "verdicts": "verdicts.csv", "sessions": "sessions.csv",
          "class_verdicts": "class_verdicts.csv", "token_gates": "token_gates.csv", "audit": "audit.csv",
          "prefill": "prefill.csv"}
ALWAYS = ("trials", "verdicts", "sessions")


@dataclass(frozen=True)
class Derived:
    """What the last derive wrote for the journal as it is now: every table of TABLES by name, and the
    digest of the ceilings table its audit was read against (None: no audit)."""

    tables: dict[str, pd.DataFrame]
    ceilings_sha256: str | None


RUN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,199}")  # a name, never a path: no `/`, `..`, leading `.` or `-`


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

    def table_path(self, name: str) -> Path:
        """Where derive writes the table `name` (one of TABLES)."""
        return self.path / TABLES[name]

    @property
    def trials_path(self) -> Path:
        return self.table_path("trials")

    @property
    def verdicts_path(self) -> Path:
        return self.table_path("verdicts")

    @property
    def gates_path(self) -> Path:
        return self.table_path("token_gates")

    @property
    def sessions_path(self) -> Path:
        return self.table_path("sessions")

    @property
    def stamp_path(self) -> Path:
        return self.path / "derived.json"

    def journal_stamp(self) -> dict[str, Any]:
        """What derived tables are made from: the journal's length and sha256 (not file times, which a
        copy, a restore or a coarse clock changes)."""
        h, n = hashlib.sha256(), 0
        with open(self.journal_path, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
                n += len(chunk)
        return {"journal_bytes": n, "journal_sha256": h.hexdigest()}

    def stamp(self, made_from: dict[str, Any], tables: list[Path], ceilings_sha256: str | None = None) -> None:
        """Say which tables `derive` wrote from the journal as `made_from` describes it, and against which
        ceilings table the audit was read (written last)."""
        write_atomic(self.stamp_path, json.dumps({**made_from, "tables": sorted(p.name for p in tables),
                                                  "ceilings_sha256": ceilings_sha256}, indent=1).encode())

    def _current_stamp(self, now: dict[str, Any] | None = None) -> dict[str, Any] | None:
        """The stamp of the last derive, when it was made from the journal as it is now."""
        try:
            stamp = json.loads(self.stamp_path.read_bytes())
            now = now if now is not None else self.journal_stamp()
        except (OSError, ValueError):
            return None
        if not isinstance(stamp, dict) or any(stamp.get(k) != v for k, v in now.items()):
            return None
        return stamp

    def current(self, now: dict[str, Any] | None = None) -> set[str]:
        """The tables the last derive wrote from the journal as it is now (`now`: its journal_stamp, when
        the caller has it); none when the journal has changed since."""
        stamp = self._current_stamp(now)
        if stamp is None:
            return set()
        return {name for name in stamp.get("tables", []) if (self.path / name).exists()}

    def fresh(self, derived: Path) -> bool:
        """A table derived from the journal is current: the last derive wrote it from the journal as it is now."""
        return derived.name in self.current()

    def derived(self, now: dict[str, Any] | None = None) -> Derived | None:
        """The tables the last derive wrote, when they are current (None: derive again). Every name of
        TABLES is there; one derive did not write (no pooled classes, no real trials, no ceilings) is empty."""
        stamp = self._current_stamp(now)  # the journal is hashed once for all of them
        if stamp is None:
            return None
        current = {name for name in stamp.get("tables", []) if (self.path / name).exists()}
        if not {TABLES[t] for t in ALWAYS} <= current:
            return None
        try:
            tables = {name: (pd.read_parquet if file.endswith(".parquet") else pd.read_csv)(self.path / file)
                      if file in current else pd.DataFrame() for name, file in TABLES.items()}
        except (OSError, ValueError):
            return None
        return Derived(tables, stamp.get("ceilings_sha256"))

    @property
    def lock_path(self) -> Path:
        return self.path / "run.lock"

    def manifest(self) -> Manifest:
        try:
            return Manifest.model_validate_json(self.manifest_path.read_bytes())
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"])
            raise RunUnreadable(f"{self.manifest_path}: not a run manifest ({where + ': ' if where else ''}"
                                f"{first['msg']}); the run cannot be read without it") from None
        except OSError as exc:
            raise RunUnreadable(f"{self.manifest_path}: {exc.strerror}") from None

    def read(self, manifest: Manifest | None = None) -> Reading:
        """The journal's records that belong to this run's manifest (read here unless given), and the
        lines skipped (with why)."""
        if not self.journal_path.exists():
            return Reading()
        try:
            return read_records(self.journal_path, _belongs(manifest or self.manifest()))
        except OSError as exc:
            raise RunUnreadable(f"{self.journal_path}: {exc.strerror}") from None

    def records(self) -> list[Record]:
        return self.read().records

    @contextlib.contextmanager
    def lock(self) -> Iterator[None]:
        """Exclusive for the block: RunLocked at once if another process holds it (it says its pid)."""
        try:
            fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise RunNotWritable(f"{self.lock_path}: cannot lock the run for writing: {exc.strerror}") from None
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = os.pread(fd, 32, 0).decode("ascii", "replace").strip() or "unknown"
                raise RunLocked(f"run {self.run_id} is being written by another orch process (pid {holder}): "
                                "wait for it to end, or stop it and resume") from None
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
            yield
        finally:
            os.close(fd)  # releases the lock


def _belongs(manifest: Manifest) -> Any:
    """Why a parsed record cannot be part of this run (None if it can): a device or trial the
    manifest does not plan, or a second final record of a trial (the first is kept)."""
    planned = {s.device: {t.trial_id: t for t in s.trials} for s in manifest.sessions}
    seen: set[tuple[str, str]] = set()

    def check(rec: Record) -> str | None:
        device_records = (PreparedRecord | StreamProbeRecord | AttemptFailed | AttemptSpoiled | TrialRecord | LookRecord
                          | SessionStopped)
        if not isinstance(rec, device_records):
            return None
        if rec.device not in planned:
            return f"{rec.type} record of device {rec.device!r}, which has no session in the manifest"
        if not isinstance(rec, AttemptFailed | AttemptSpoiled | TrialRecord):
            return None
        trial = planned[rec.device].get(rec.trial_id)
        if trial is None:
            return f"{rec.type} record of trial {rec.trial_id!r}, which {rec.device}'s session does not plan"
        if isinstance(rec, TrialRecord):
            if (rec.arm, rec.seq) != (trial.arm, trial.seq):
                return f"trial {rec.trial_id!r} recorded as arm {rec.arm!r} seq {rec.seq}; planned {trial.arm!r} " \
                       f"seq {trial.seq}"
            if (rec.device, rec.trial_id) in seen:
                return f"a second record of trial {rec.trial_id!r} on {rec.device} (the first is kept)"
            seen.add((rec.device, rec.trial_id))
        return None

    return check


def find_run(results: Path, run_id: str) -> RunDir:
    """The run named `run_id` under `results`; a path or a name that is not a run id is refused."""
    if not RUN_ID.fullmatch(run_id):
        shown = run_id if len(run_id) <= 80 else run_id[:77] + "..."
        raise RunNotFound(f"{shown!r} is not a run id (a name under --results, like 20260101-120000-plan-ab12); "
                          "for a run in another folder give that folder: --results DIR")
    run = RunDir(results / run_id)
    if not run.manifest_path.is_file():
        if run.journal_path.exists():
            raise RunUnreadable(f"run {run_id} under {results} has a journal but no manifest.json: "
                                "the run's plan and fleet are in the manifest, so it cannot be read")
        known = sorted(p.parent.name for p in results.glob("*/manifest.json")) if results.is_dir() else []
        hint = f" (latest: {known[-1]})" if known else ""
        raise RunNotFound(f"no run {run_id!r} under {results}{hint}")
    return run


def create_run(results: Path, manifest: Manifest) -> RunDir:
    """The run's directory with its manifest, or nothing at all (no half-made directory stays behind)."""
    run = RunDir(results / manifest.run_id)
    results.mkdir(parents=True, exist_ok=True)
    run.path.mkdir(exist_ok=False)
    try:
        write_atomic(run.manifest_path, manifest.model_dump_json(indent=2).encode())
    except BaseException:  # disk full, Ctrl-C: a directory without its manifest is no run
        shutil.rmtree(run.path, ignore_errors=True)
        raise
    return run


def write_atomic(path: Path, data: bytes) -> None:
    """All of `data` under `path`, or `path` as it was (the temporary file is removed on failure)."""
    tmp = path.with_name(path.name + ".tmp")
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def new_run_id(plan_name: str, now: datetime | None = None) -> str:
    now = now or datetime.now(UTC)
    return f"{now:%Y%m%d-%H%M%S}-{plan_name}-{os.urandom(2).hex()}"


REGISTRY_FILE = "noise_registry.csv"  # in the results folder: every A/A run's noise per device (analysis.noise)


def read_registry(results: Path) -> pd.DataFrame:
    """The results folder's noise registry (empty when there is none)."""
    path = results / REGISTRY_FILE
    if not path.exists():
        return pd.DataFrame()
    return pd.read_csv(path, dtype={"device": str, "chip_class": str, "runtime": str, "model": str, "run_id": str,
                                    "measured_at": str})


def write_registry(results: Path, registry: pd.DataFrame) -> None:
    write_atomic(results / REGISTRY_FILE, registry.to_csv(index=False).encode())
