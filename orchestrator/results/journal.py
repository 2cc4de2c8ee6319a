"""The journal: one JSON line per event, appended and fsynced, the source of truth of a run.

A record is written whole or not at all: a short write (a nearly full disk) is continued until the
record is complete, and a write that fails cuts the file back to the end of the last whole record
and fails the journal, so a run stops cleanly and resumes from its last whole record. Reading skips
what cannot be a record of this run (a corrupt line, a duplicate of a trial already recorded) and
says which line and why: the trial is missing from the run and is planned again on resume.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import BaseModel, ValidationError

from orchestrator.results.records import RECORD, Record

Write = Callable[[int, memoryview], int]  # os.write's shape: bytes written, possibly fewer than given


class JournalWriteError(Exception):
    """A record could not be written whole. The journal ends at the last whole record: resume the run."""

    def __init__(self, path: Path, exc: OSError):
        super().__init__(f"{path}: cannot write the journal: {exc.strerror or exc}")
        self.path = path
        self.errno = exc.errno


class Journal:
    """Append-only. A record is on disk (fsynced) when `append` returns; once an append fails, every
    later append raises the same error (nothing more is written after a hole)."""

    def __init__(self, path: Path, *, fsync: bool = True, write: Write = os.write):
        self.path = path
        self.fsync = fsync
        self._write = write
        _drop_torn_tail(path)
        self._fd: int | None = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self._failed: JournalWriteError | None = None

    def append(self, record: BaseModel) -> None:
        if self._failed is not None:
            raise self._failed
        if self._fd is None:
            raise ValueError(f"{self.path}: journal closed")
        data = record.model_dump_json().encode() + b"\n"
        start = os.lseek(self._fd, 0, os.SEEK_END)
        try:
            view = memoryview(data)
            while view:
                n = self._write(self._fd, view)
                if n <= 0:  # a write that makes no progress would loop forever
                    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
                view = view[n:]
            if self.fsync:
                os.fsync(self._fd)
        except OSError as exc:
            self._failed = JournalWriteError(self.path, exc)
            try:  # leave only whole records behind; if even this fails, the next open cuts the torn tail
                os.ftruncate(self._fd, start)
                os.fsync(self._fd)
            except OSError:
                pass
            raise self._failed from exc

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


class MemoryJournal:
    """Same interface, kept in memory: for simulations that run a design thousands of times."""

    def __init__(self) -> None:
        self.records: list[BaseModel] = []

    def append(self, record: BaseModel) -> None:
        self.records.append(record)

    def close(self) -> None:
        return None


def _drop_torn_tail(path: Path) -> None:
    """A controller killed mid-write can leave half a line: cut it so appends start clean."""
    if not path.exists() or path.stat().st_size == 0:
        return
    with open(path, "rb+") as f:
        end = f.seek(0, os.SEEK_END)
        f.seek(end - 1)
        if f.read(1) == b"\n":
            return  # the usual case: only the last byte is read
        pos = end
        while pos > 0:  # walk back to the last whole line
            start = max(0, pos - (1 << 16))
            f.seek(start)
            chunk = f.read(pos - start)
            if (cut := chunk.rfind(b"\n")) >= 0:
                f.truncate(start + cut + 1)
                break
            pos = start
        else:
            f.truncate(0)
        f.flush()
        os.fsync(f.fileno())


@dataclass(frozen=True)
class Skipped:
    line: int
    reason: str


@dataclass
class Reading:
    """What a journal holds: its records, and the lines that could not be read as one."""

    records: list[Record] = field(default_factory=list)
    skipped: list[Skipped] = field(default_factory=list)

    def warnings(self, path: Path) -> list[str]:
        return [f"{path}:{s.line}: skipped: {s.reason}" for s in self.skipped]


def read_journal(path: Path) -> list[Record]:
    """Every whole record (corrupt lines left out: `read_records` says which)."""
    return read_records(path).records


Check = Callable[[Record], str | None]  # why a record that parses cannot belong to this run, or None


def read_records(path: Path, check: Check = lambda record: None) -> Reading:
    """Every record that parses and passes `check`; a torn last line (killed mid-write) is ignored
    silently, any other line that is not a record of this run is skipped with its line number and why."""
    reading = Reading()
    with open(path, "rb") as f:
        lines = f.read().split(b"\n")
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            record = RECORD.validate_json(line)
        except ValidationError as exc:
            if i == len(lines) - 1:  # the unterminated last line
                break
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"])
            reading.skipped.append(Skipped(i + 1, f"not a journal record ({where + ': ' if where else ''}"
                                                  f"{first['msg']})"))
            continue
        if (why := check(record)) is not None:
            reading.skipped.append(Skipped(i + 1, why))
        else:
            reading.records.append(record)
    return reading
