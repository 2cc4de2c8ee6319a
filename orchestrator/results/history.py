"""The nightly history, queried with DuckDB over its hive-partitioned parquet.

The layout stays plain parquet that Spark, Trino, pandas or pyarrow read as well::

    history/trials/night=<night>/*.parquet    one row per trial
    history/nights/night=<night>/*.parquet    one row per device and config: the night's comparison
    history/imported/night=<day>/*.parquet    other tools' results (``orch import``): no rank, alarm or verdict reads them

DuckDB scans it in place: only the columns a query names are read, filters and aggregates run in
the scan, and what comes back to Python is the answer (per-group medians, one row per night), not
the rows. Files whose schemas differ (a column added later, a night where a column held only nulls)
are read together by column name.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd

__all__ = ["STRING_COLUMNS", "connect", "has", "load_nights", "load_trials", "medians_by", "query"]

STRING_COLUMNS = ["run_id", "config", "device", "chip_class", "model", "runtime", "arm", "role", "build", "status",
                  "failure_kind", "thermal_before", "thermal_after", "reference_build", "candidate_build", "verdict",
                  "night"]


def connect() -> Any:
    """An in-memory DuckDB connection (all cores; it spills to a temporary folder past its memory limit)."""
    import duckdb

    return duckdb.connect(":memory:", config={"preserve_insertion_order": False})


def has(history: Path, kind: str) -> bool:
    """The dataset holds at least one night's file."""
    root = history / kind
    return root.is_dir() and any(root.glob("night=*/*.parquet"))


def _quote(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def scan(history: Path, kind: str, *, rows: bool = False) -> str:
    """The SQL table expression of a dataset; ``rows`` adds each row's file and position in it."""
    glob = _quote(str(history / kind / "night=*" / "*.parquet"))
    extra = ", filename=true, file_row_number=true" if rows else ""
    return (f"read_parquet({glob}, hive_partitioning=true, union_by_name=true, "
            f"hive_types={{'night': 'VARCHAR'}}{extra})")


def _ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def query(sql: str, params: Sequence[Any] | None = None, con: Any = None) -> Any:
    """A pyarrow Table: the answer of ``sql`` (a fresh connection unless one is given)."""
    con = con or connect()
    return con.sql(sql, params=list(params) if params is not None else None).to_arrow_table()


def _to_frame(table: Any) -> pd.DataFrame:
    """Strings categorical (cheap at millions of rows), nights an ordered categorical."""
    import pyarrow as pa
    import pyarrow.compute as pc

    for i, field in enumerate(table.schema):
        if field.name in STRING_COLUMNS and (pa.types.is_string(field.type) or pa.types.is_large_string(field.type)):
            table = table.set_column(i, field.name, pc.dictionary_encode(table.column(i)))
    table = table.unify_dictionaries().combine_chunks() if table.num_rows else table
    frame = table.to_pandas()
    if "night" in frame.columns and isinstance(frame["night"].dtype, pd.CategoricalDtype):
        labels = frame["night"].cat.rename_categories([str(c) for c in frame["night"].cat.categories])
        frame["night"] = labels.cat.reorder_categories(sorted(labels.cat.categories), ordered=True)
    return frame


def load_trials(history: Path, columns: list[str] | None = None, configs: list[str] | None = None) -> pd.DataFrame:
    """Trial rows (only ``columns``, and the night), of every config or of ``configs``."""
    if not has(history, "trials"):
        return pd.DataFrame(columns=[*(columns or []), "night"])
    cols = ", ".join(_ident(c) for c in [*columns, "night"]) if columns else "*"
    where, params = "", None
    if configs is not None:
        where, params = "WHERE config IN (SELECT unnest(?))", [list(configs)]
    return _to_frame(query(f"SELECT {cols} FROM {scan(history, 'trials')} {where}", params))


def _files(history: Path, kind: str) -> tuple[list[str], list[str]]:
    """The dataset's files: those alone in their night (compacted, or a night of one run), and the rest."""
    alone: list[str] = []
    shared: list[str] = []
    for part in sorted((history / kind).glob("night=*")):
        files = sorted(str(f) for f in part.glob("*.parquet"))
        (alone if len(files) == 1 else shared).extend(files)
    return alone, shared


def _read(files: list[str], extra: str = "") -> str:
    listed = "[" + ", ".join(_quote(f) for f in files) + "]"
    return (f"read_parquet({listed}, hive_partitioning=true, union_by_name=true, "
            f"hive_types={{'night': 'VARCHAR'}}, filename=true, file_row_number=true{extra})")


def load_nights(history: Path, configs: list[str] | None = None, columns: list[str] | None = None,
                night: str | None = None, strings: str = "object", ordered: bool = True) -> pd.DataFrame:
    """Every night's comparison (or ``night``'s), ordered by night and run id; a night run twice for a
    device and config keeps its latest run (one row once the night is compacted; before, the greatest
    run id). ``columns``: only those (and the night); ``strings="category"`` leaves strings categorical;
    ``ordered=False``: in no particular order (the caller sorts)."""
    alone, shared = _files(history, "nights")
    if not alone and not shared:
        return pd.DataFrame(columns=[*(columns or []), "night"])
    conds: list[str] = []
    params: list[Any] = []
    if configs is not None:
        conds.append("config IN (SELECT unnest(?))")
        params.append(list(configs))
    if night is not None:
        conds.append("night = ?")
        params.append(night)
    where = f"WHERE {' AND '.join(conds)}" if conds else ""
    keep = [*columns, "night"] if columns else None
    cols = ", ".join(_ident(c) for c in keep) if keep else "*"
    if keep and ordered:
        cols += ", run_id AS _run, filename, file_row_number"
    # A compacted night holds one row per device and config; only nights of several files need the
    # latest run chosen (the night being written, or one whose compaction was interrupted).
    parts = []
    if alone:
        parts.append(f"SELECT {cols} FROM {_read(alone)} {where}")
    if shared:
        params = params * (2 if alone else 1)
        parts.append(f"""SELECT {cols} FROM {_read(shared)} {where}
            QUALIFY row_number() OVER (PARTITION BY night, config, device
                                       ORDER BY run_id DESC, filename DESC, file_row_number DESC) = 1""")
    sql = " UNION ALL BY NAME ".join(f"({p})" for p in parts)
    if ordered:
        hidden = ["_run", "filename", "file_row_number"] if keep else ["filename", "file_row_number"]
        sql = (f"SELECT * EXCLUDE ({', '.join(hidden)}) FROM ({sql}) "
               f"ORDER BY night, {'_run' if keep else 'run_id'}, filename, file_row_number")
    elif not keep:
        sql = f"SELECT * EXCLUDE (filename, file_row_number) FROM ({sql})"
    frame = _to_frame(query(sql, params))
    if strings == "category":
        return frame
    cats = [c for c in frame.columns if c != "night" and isinstance(frame[c].dtype, pd.CategoricalDtype)]
    return frame.astype(dict.fromkeys(cats, object))  # one row per night and device: plain strings are fine


def medians_by(history: Path | None, extra: pd.DataFrame | None, keys: list[str], values: list[str],
               where: str, counted: tuple[str, ...] = ()) -> pd.DataFrame:
    """Per group of ``keys``: the median of each of ``values`` (nulls skipped), ``n`` rows, and ``runs``
    (the group's sorted run ids; "history" for rows of the history), over the history's trial rows and
    the rows of ``extra`` together; rows kept by the SQL condition ``where``.

    A median holds every value of its group in memory (800 MB a column at 100 M rows). The ``counted``
    values, few distinct ones (bytes per token, a device's probe), are counted instead, in a second
    scan, and their exact median read off the counts."""
    import pyarrow as pa

    cols = [*keys, *values]
    select = ", ".join([*(f"{_ident(k)}::VARCHAR AS {_ident(k)}" for k in keys),
                        *(f"{_ident(v)}::DOUBLE AS {_ident(v)}" for v in values)])
    parts = []
    con = connect()
    if history is not None and has(history, "trials"):
        parts.append(f"SELECT {select}, NULL::VARCHAR AS run_id, status::VARCHAR AS status "
                     f"FROM {scan(history, 'trials')}")
    if extra is not None and len(extra):
        frame = extra[[*cols, "status", *(["run_id"] if "run_id" in extra.columns else [])]]
        con.register("extra_rows", pa.Table.from_pandas(frame, preserve_index=False))  # NaN -> null
        run_id = "run_id::VARCHAR" if "run_id" in frame.columns else "NULL::VARCHAR"
        parts.append(f"SELECT {select}, {run_id} AS run_id, status::VARCHAR AS status FROM extra_rows")
    if not parts:
        return pd.DataFrame(columns=[*keys, *values, "n", "runs"])
    rows = f"({' UNION ALL BY NAME '.join(parts)}) WHERE {where}"
    group = ", ".join(_ident(k) for k in keys)
    meds = "".join(f", median({_ident(v)}) AS {_ident(v)}" for v in values if v not in counted)
    # Run ids only come from ``extra`` (a few runs): named in pandas, not collected over the history's rows.
    sql = f"""
        SELECT {group}{meds}, count(*) AS n, count(*) FILTER (WHERE run_id IS NULL) AS _from_history
        FROM {rows} GROUP BY {group} ORDER BY {group}"""
    frame = query(sql, con=con).to_pandas()
    named: dict[tuple[str | None, ...], set[str]] = {}
    if extra is not None and len(extra) and "run_id" in extra.columns:
        cast = ", ".join(f"{_ident(k)}::VARCHAR AS {_ident(k)}" for k in keys)
        for key, g in query(f"SELECT DISTINCT {cast}, run_id::VARCHAR AS run_id FROM extra_rows WHERE {where} "
                            "AND run_id IS NOT NULL", con=con).to_pandas().groupby(keys, sort=False, dropna=False):
            named[_key(key)] = set(g["run_id"])
    runs = []
    for key, from_history in zip(frame[keys].itertuples(index=False, name=None), frame["_from_history"], strict=True):
        r = sorted(named.get(_key(key), set()) | ({"history"} if from_history else set()))
        runs.append(",".join(r[:3]) + ("..." if len(r) > 3 else ""))
    frame["runs"] = runs
    if counted:
        for v, med in _counted_medians(con, rows, keys, list(counted), frame).items():
            frame[v] = med
    return frame[[*keys, *values, "n", "runs"]]


def _key(key: Any) -> tuple[str | None, ...]:
    """A group's keys as strings; a null key (None or NaN) is a group of its own, as in DuckDB's GROUP BY."""
    return tuple(None if pd.isna(k) else str(k) for k in (key if isinstance(key, tuple) else (key,)))


def _counted_medians(con: Any, rows: str, keys: list[str], values: list[str],
                     groups: pd.DataFrame) -> dict[str, list[float]]:
    """Each group's exact median of each of ``values`` from its distinct values' counts, all counted in
    one scan (nulls and NaN skipped; an even count gives the mean of the two middle values, as pandas)."""
    import numpy as np

    group = ", ".join(_ident(k) for k in keys)
    sets = ", ".join(f"({group}, {_ident(v)})" for v in values)
    which = ", ".join(f"grouping({_ident(v)}) AS {_ident('_g_' + v)}" for v in values)
    counts = query(f"""SELECT {group}, {', '.join(_ident(v) for v in values)}, {which}, count(*) AS _c
                       FROM {rows} GROUP BY GROUPING SETS ({sets})""", con=con).to_pandas()
    out: dict[str, list[float]] = {}
    for v in values:
        mine = counts[(counts[f"_g_{v}"] == 0) & counts[v].notna()]
        medians: dict[tuple[str | None, ...], float] = {}
        for key, g in mine.groupby(keys, sort=False, dropna=False):
            g = g.sort_values(v)
            cum = g["_c"].to_numpy().cumsum()
            n = int(cum[-1])
            vals = g[v].to_numpy(dtype=float)
            lo = vals[np.searchsorted(cum, (n - 1) // 2, side="right")]
            hi = vals[np.searchsorted(cum, n // 2, side="right")]
            medians[_key(key)] = float((lo + hi) / 2)
        out[v] = [medians.get(_key(k), float("nan")) for k in groups[keys].itertuples(index=False, name=None)]
    return out
