"""`--json`: one JSON document per command, for CI scripts (no table parsing).

Every document is an object with ``schema`` (``orch.<command>``) and ``version``; its tables are
lists of row objects whose field names are the columns of the files the same data lands in
(``trials.parquet``, ``verdicts.csv``, the history's parquet, ``--format csv``). Missing values are
null; times are ISO 8601 strings. ``DOCUMENTS`` lists each document's top-level fields (the schema
test holds every command to it).
"""

from __future__ import annotations

import json
import math
from typing import Any

import pandas as pd

__all__ = ["DOCUMENTS", "VERSION", "document", "records"]

VERSION = 1
# Version history: 1 (first): show, audit, rank, devices, runtimes, nightly; import added (a new document);
# show gained `sessions` (sessions.csv: one row per session with its device time).
DOCUMENTS: dict[str, list[str]] = {
    "show": ["run_id", "plan", "completed", "stops", "sessions", "trials", "verdicts", "token_gates", "warnings"],
    "audit": ["run_id", "rows"],
    "rank": ["candidates", "runs", "history", "rows"],
    "devices": ["fleet", "devices"],
    "runtimes": ["runtimes", "failed"],
    "nightly": ["night", "alarmed", "run_ids", "tonight", "missing", "changes", "junit", "summary"],
    "import": ["history", "files", "rows"],
}


def _value(x: Any) -> Any:
    if x is None:
        return None
    if isinstance(x, pd.Timestamp):
        return None if pd.isna(x) else x.isoformat()
    if hasattr(x, "item") and not isinstance(x, str):
        x = x.item()
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if x is pd.NA or x is pd.NaT:
        return None
    return x


def records(frame: pd.DataFrame) -> list[dict[str, Any]]:
    """The frame's rows as objects keyed by its column names (JSON-safe values)."""
    return [{str(k): _value(v) for k, v in row.items()} for row in frame.to_dict("records")]


def document(command: str, **fields: Any) -> str:
    """The command's document, its fields in the documented order."""
    want = DOCUMENTS[command]
    if sorted(fields) != sorted(want):
        raise ValueError(f"orch.{command} document: fields {sorted(fields)}, documented {sorted(want)}")
    body = {"schema": f"orch.{command}", "version": VERSION} | {k: fields[k] for k in want}
    return json.dumps(body, indent=2, default=str) + "\n"
