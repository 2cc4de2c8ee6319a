"""The journal: one JSON line per event, appended and fsynced, the source of truth of a run."""

from __future__ import annotations

import os
from pathlib import Path

from pydantic import BaseModel, ValidationError

from orchestrator.results.records import RECORD, Record


class Journal:
    """Append-only. A record is on disk (fsynced) when `append` returns."""

    def __init__(self, path: Path, *, fsync: bool = True):
        self.path = path
        self.fsync = fsync
        _drop_torn_tail(path)
        self._f = open(path, "ab", buffering=0)  # noqa: SIM115 - closed in close()

    def append(self, record: BaseModel) -> None:
        self._f.write(record.model_dump_json().encode() + b"\n")
        if self.fsync:
            os.fsync(self._f.fileno())

    def close(self) -> None:
        self._f.close()


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


def read_journal(path: Path) -> list[Record]:
    """Every whole record; a torn last line (killed mid-write) is ignored."""
    records: list[Record] = []
    with open(path, "rb") as f:
        lines = f.read().split(b"\n")
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            records.append(RECORD.validate_json(line))
        except ValidationError as exc:
            if i == len(lines) - 1:  # the unterminated last line
                break
            raise ValueError(f"{path}:{i + 1}: corrupt journal record: {exc.errors()[0]['msg']}") from None
    return records
