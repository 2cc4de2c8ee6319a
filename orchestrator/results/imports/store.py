"""Imported rows in the history, a dataset of their own beside ``trials/`` and ``nights/``::

    history/imported/night=<day>/<import_id>.parquet    one row per imported measurement

``<day>`` is the UTC day the tool measured on when the file says it (llama-bench's test_time), else
the day of the import. A run the tool reported as failed (LiteRT-LM's "Could not find", exit 0) is
a row with ``status`` failed, its ``failure_kind`` and ``failure``, and no ``tok_s``; rows written
before that column existed read as ok. ``import_id`` is a hash of the file's content, its format and the labels
given with it: importing the same file again rewrites the same rows, never a second copy. Files
are written to a temp name and renamed; nothing is written unless every file given parsed.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import pandas as pd

from orchestrator.results.imports._common import Measurement

__all__ = ["COLUMNS", "ImportedFile", "import_id", "load", "rows", "write"]

KIND = "imported"
COLUMNS = ["import_id", "origin", "interleaved", "settled", "decision_grade", "source_format", "source_file",
           "source_line", "runtime", "model", "device", "test", "phase", "n_prompt", "n_gen", "tok_s",
           "tok_s_stddev", "n_samples", "samples_tok_s", "build", "measured_at", "imported_at", "settings",
           "status", "failure_kind", "failure"]


@dataclass(frozen=True)
class ImportedFile:
    source_file: str
    source_format: str
    import_id: str
    rows: pd.DataFrame  # COLUMNS plus night
    written: tuple[Path, ...]


def import_id(text: bytes, fmt: str, labels: dict[str, str | None]) -> str:
    h = hashlib.sha256(fmt.encode() + b"\0" + json.dumps(labels, sort_keys=True).encode() + b"\0" + text)
    return "import-" + h.hexdigest()[:16]


def _day(measured_at: str | None, imported: datetime) -> str:
    if measured_at:
        try:
            stamp = datetime.fromisoformat(measured_at.replace("Z", "+00:00"))
            return (stamp.astimezone(UTC) if stamp.tzinfo else stamp).strftime("%Y-%m-%d")
        except ValueError:
            pass
    return imported.astimezone(UTC).strftime("%Y-%m-%d")


def rows(measurements: Iterable[Measurement], *, ident: str, source_file: str, imported: datetime,
         model: str | None = None, device: str | None = None) -> pd.DataFrame:
    """The history's rows of one file's measurements; ``model``/``device`` name what the file does not
    (or override what it says)."""
    out = []
    for m in measurements:
        out.append({
            "import_id": ident, "origin": "imported", "interleaved": False, "settled": False, "decision_grade": False,
            "source_format": m.source_format, "source_file": source_file, "source_line": m.line,
            "runtime": m.runtime, "model": model or m.model or "unknown", "device": device or m.device or "unknown",
            "test": m.test, "phase": m.phase, "n_prompt": m.n_prompt, "n_gen": m.n_gen,
            "tok_s": None if m.failed else m.tok_s, "status": "failed" if m.failed else "ok",
            "failure_kind": m.failure_kind, "failure": m.failure,
            "tok_s_stddev": m.tok_s_stddev, "n_samples": len(m.samples_tok_s) or None,
            "samples_tok_s": list(m.samples_tok_s), "build": m.build, "measured_at": m.measured_at,
            "imported_at": imported.astimezone(UTC).isoformat(), "settings": json.dumps(m.settings, sort_keys=True),
            "night": _day(m.measured_at, imported),
        })
    return pd.DataFrame(out, columns=[*COLUMNS, "night"])


def _schema() -> object:
    import pyarrow as pa

    s, i, f, b = pa.string(), pa.int64(), pa.float64(), pa.bool_()
    types = {"interleaved": b, "settled": b, "decision_grade": b, "source_line": i, "n_prompt": i, "n_gen": i,
             "tok_s": f, "tok_s_stddev": f, "n_samples": i, "samples_tok_s": pa.list_(f)}
    return pa.schema([(c, types.get(c, s)) for c in COLUMNS])


def write(history: Path, frame: pd.DataFrame) -> tuple[Path, ...]:
    """One file per day of ``frame`` (one import's rows), named by its import id (fixed column types, so
    a column empty in one file never reads as parquet's null type beside the others)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    written = []
    for night, part in frame.groupby("night", sort=True):
        folder = history / KIND / f"night={night}"
        folder.mkdir(parents=True, exist_ok=True)
        name = f"{part['import_id'].iloc[0]}.parquet"
        table = pa.Table.from_pandas(part[COLUMNS], schema=_schema(), preserve_index=False)
        tmp = folder / f".{name}.tmp"
        pq.write_table(table, tmp)
        tmp.replace(folder / name)
        written.append(folder / name)
    return tuple(written)


def load(history: Path | None) -> pd.DataFrame:
    """Every imported row (with its night), oldest first; an empty frame when there are none."""
    from orchestrator.results import history as history_db

    if history is None or not history_db.has(history, KIND):
        return pd.DataFrame(columns=[*COLUMNS, "night"])
    sql = (f"SELECT * EXCLUDE (filename, file_row_number) FROM {history_db.scan(history, KIND, rows=True)} "
           "ORDER BY night, imported_at, import_id, file_row_number")
    frame = history_db.query(sql).to_pandas()
    for c in ("status", "failure_kind", "failure"):  # files written before failed runs were kept: all ok
        if c not in frame.columns:
            frame[c] = None
    frame["status"] = frame["status"].fillna("ok")
    frame["samples_tok_s"] = [[float(v) for v in a] if a is not None else [] for a in frame["samples_tok_s"]]
    return frame
