"""Per-night rollups of the trial rows: `orch rank`'s exact medians over a long history from a small read.

    history/rollups/night=<night>/rank-<fingerprint>.parquet    one row per group, measure and value bin

A rollup is derived once, when a night's trial rows are written (``append_history``,
``compact_night``), and read by every `orch rank --history` after. It is parquet in the same hive
layout as the trials, beside them (not inside ``trials/``, so every reader of the trials sees only
trial rows).

What it holds merges exactly. An exact median cannot be merged from per-night medians, so a rollup
keeps, per (model, chip class, runtime) and measure (decode tok/s, bytes per token, probe GB/s) of
the rows rank reads (status ok, a decode figure), the count of values in each value bin, and the
smallest and largest value in the bin. A bin is ``[m, m + 1) * 2**(e - BITS)`` for the value's
binary exponent ``e`` and its top ``BITS`` mantissa bits ``m`` (``numpy.frexp``, exact in any IEEE
arithmetic), so the same value falls in the same bin on every night and every machine; zero,
negative, subnormal, huge and infinite values get a bin of their own value. Summed over nights, the counts place
each group's middle rank(s) in one bin. Where that bin holds one distinct value (bytes per token and
the probe, constant per device and model), or the rank is the bin's first or last, the rollup gives
the value itself. Otherwise (decode tok/s) the values of that bin alone are read back from the
trial rows of the nights that have any (a range filter DuckDB applies in the scan) and the rank's
value picked from them. The medians are the same numbers, to the last bit, as a median over every
raw row (decode tok/s as DuckDB's ``median``, the others as the mean of the two middle values, as
``history.medians_by`` computes them).

Freshness: a rollup's file name carries a fingerprint of the night's trial files (name, size and
modification time of each, with ``ROLLUP_VERSION`` and ``BITS``). A night whose files changed since
(a run appended, a compaction, a copy that did not keep modification times) has no rollup of that
name: rank derives that night's rollup from its rows in memory, the same numbers at the cost of
reading the night; past ``STALE_LIMIT`` such nights (a history written before rollups) it scans
every row instead (``history.medians_by``, the same numbers again). ``refresh_rollups`` writes the
missing ones; `orch nightly` calls it once a night is compacted. Hashing the files' contents on
every read would cost what the rollup saves.
"""

from __future__ import annotations

import hashlib
import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from orchestrator.results.history import _ident, _quote, connect, has, query

__all__ = ["BITS", "KEYS", "MEASURES", "ROLLUP_VERSION", "WHERE", "derive", "fingerprint", "night_files",
           "refresh_rollups", "rollup_file", "summarize", "write_rollup"]

ROLLUP_VERSION = 1
BITS = 8  # mantissa bits a bin keeps: bins 0.4-0.8% wide (smaller files vs fewer values read back)
KEYS = ["model", "chip_class", "runtime"]
MEASURES = ["decode_tok_s", "bytes_per_decode_token", "probe_gb_s"]
# The rows rank reads; decode tok/s's median interpolates as DuckDB's median does, the others as the
# mean of the two middle values (``history._counted_medians``).
WHERE = "status = 'ok' AND decode_tok_s IS NOT NULL AND NOT isnan(decode_tok_s)"
INTERPOLATE = {"decode_tok_s": "duckdb", "bytes_per_decode_token": "mean", "probe_gb_s": "mean"}
ROLLUP_COLUMNS = [*KEYS, "measure", "lo", "hi", "count", "vmin", "vmax"]
KIND = "rollups"
# Nights without a fresh rollup that rank derives in memory (tonight's, being written); past this, one
# scan of every row (``history.medians_by``, the same numbers) is quicker than deriving night by night.
STALE_LIMIT = 8


def night_files(history: Path) -> dict[str, list[Path]]:
    """Each night of the trials dataset and its parquet files."""
    out: dict[str, list[Path]] = {}
    for part in sorted((history / "trials").glob("night=*")):
        files = sorted(part.glob("*.parquet"))
        if files:
            out[part.name.split("=", 1)[1]] = files
    return out


def fingerprint(files: list[Path]) -> str:
    h = hashlib.sha256(f"rank-rollup v{ROLLUP_VERSION} bits={BITS}".encode())
    for f in files:
        st = f.stat()
        h.update(f"\0{f.name}\0{st.st_size}\0{st.st_mtime_ns}".encode())
    return h.hexdigest()[:16]


def rollup_file(history: Path, night: str, files: list[Path]) -> Path:
    return history / KIND / f"night={night}" / f"rank-{fingerprint(files)}.parquet"


def bins(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each value's bin ``[lo, hi)``; ``lo == hi == value`` for zero, negative, subnormal, huge (>= 2**1023)
    and infinite values, whose bin edges would not all be doubles."""
    mant, exp = np.frexp(values)
    k = np.floor(np.ldexp(mant, BITS))
    binned = (values >= np.finfo(np.float64).tiny) & (values < 2.0**1023)
    lo = np.where(binned, np.ldexp(k, exp - BITS), values)
    hi = np.where(binned, np.ldexp(k + 1, exp - BITS), values)
    return lo, hi


def _columns(con: Any, source: str) -> set[str]:
    return {r[0] for r in con.sql(f"DESCRIBE SELECT * FROM {source}").fetchall()}


def _rows_sql(source: str, have: set[str]) -> str:
    """The rows rank reads, its keys as strings and its measures as doubles (null where a file has none)."""
    cols = [f"{_ident(k)}::VARCHAR AS {_ident(k)}" if k in have else f"NULL::VARCHAR AS {_ident(k)}" for k in KEYS]
    cols += [f"{_ident(m)}::DOUBLE AS {_ident(m)}" if m in have else f"NULL::DOUBLE AS {_ident(m)}" for m in MEASURES]
    return f"SELECT {', '.join(cols)} FROM {source} WHERE {WHERE}"


def derive(con: Any, source: str) -> pd.DataFrame:
    """The rollup rows (``ROLLUP_COLUMNS``) of the rows of the SQL table expression ``source``."""
    have = _columns(con, source)
    if not {"status", "decode_tok_s"} <= have:
        return pd.DataFrame({c: pd.Series(dtype="float64" if c in ("lo", "hi", "vmin", "vmax") else
                                          "int64" if c == "count" else "object") for c in ROLLUP_COLUMNS})
    rows = query(_rows_sql(source, have), con=con).to_pandas()
    parts = []
    for m in MEASURES:
        v = rows[m].to_numpy(dtype=float)
        ok = ~np.isnan(v)
        lo, hi = bins(v[ok])
        frame = rows.loc[ok, KEYS].assign(measure=m, lo=lo, hi=hi, _v=v[ok])
        g = frame.groupby([*KEYS, "measure", "lo", "hi"], dropna=False, sort=True)["_v"]
        parts.append(g.agg(count="size", vmin="min", vmax="max").reset_index())
    out = pd.concat(parts, ignore_index=True)
    return out.astype({"count": "int64"})[ROLLUP_COLUMNS]


def _night_source(files: list[Path]) -> str:
    listed = "[" + ", ".join(_quote(str(f)) for f in files) + "]"
    return f"read_parquet({listed}, union_by_name=true, hive_partitioning=false)"


def write_rollup(history: Path, night: str, files: list[Path] | None = None) -> Path | None:
    """Derive and write ``night``'s rollup (temp name, then renamed); earlier rollups of the night removed.
    `files`: the night's trial files, where the caller has listed them already."""
    files = files if files is not None else night_files(history).get(night)
    if not files:
        return None
    target = rollup_file(history, night, files)
    frame = derive(connect(), _night_source(files))
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.tmp")
    frame.to_parquet(tmp, index=False)
    tmp.replace(target)
    for old in target.parent.glob("rank-*.parquet"):
        if old != target:
            old.unlink(missing_ok=True)
    return target


def refresh_rollups(history: Path) -> list[str]:
    """Write the rollup of every night that has none for its current files; the nights written."""
    _fresh, stale = _stale(history)
    for night, files in stale.items():
        write_rollup(history, night, files)
    return list(stale)


def _stale(history: Path | None) -> tuple[list[Path], dict[str, list[Path]]]:
    """The fresh rollups' files, and the nights (with their trial files) that have none."""
    fresh: list[Path] = []
    stale: dict[str, list[Path]] = {}
    if history is not None and has(history, "trials"):
        for night, files in night_files(history).items():
            path = rollup_file(history, night, files)
            if path.exists():
                fresh.append(path)
            else:
                stale[night] = files
    return fresh, stale


def _gather(con: Any, fresh: list[Path], stale: dict[str, list[Path]], has_extra: bool) -> bool:
    """Every rollup row, with its night ("" for the extra rows), into the table ``rolled``: the written
    ones where fresh, the rest derived; keys never null (``NULL`` stands for null). False: no row."""
    parts = []
    for i, (night, files) in enumerate(stale.items()):
        con.register(f"_derived{i}", derive(con, _night_source(files)).assign(night=night))
        parts.append(f"SELECT * FROM _derived{i}")
    if fresh:
        listed = "[" + ", ".join(_quote(str(p)) for p in fresh) + "]"
        parts.append(f"SELECT * FROM read_parquet({listed}, hive_partitioning=true, hive_types={{'night': 'VARCHAR'}})")
    if has_extra:
        con.register("_derived_extra", derive(con, "extra_rows").assign(night=""))
        parts.append("SELECT * FROM _derived_extra")
    if not parts:
        return False
    keys = ", ".join(f"coalesce({_ident(k)}::VARCHAR, {_quote(NULL)}) AS {_ident(k)}" for k in KEYS)
    union = " UNION ALL BY NAME ".join(f"({p})" for p in parts)
    con.sql(f"""CREATE TEMP TABLE rolled AS SELECT {keys}, measure::VARCHAR AS measure, lo::DOUBLE AS lo,
                hi::DOUBLE AS hi, "count"::BIGINT AS "count", vmin::DOUBLE AS vmin, vmax::DOUBLE AS vmax,
                night::VARCHAR AS night FROM ({union})""")
    return True


def _interpolate(lo: float, hi: float, how: str) -> float:
    return lo + (hi - lo) * 0.5 if how == "duckdb" else (lo + hi) / 2


NULL = "\x00null"  # a null key while grouping in pandas (no key the history writes begins with NUL)


def _key_order(key: tuple[str, ...]) -> tuple[tuple[bool, str], ...]:
    """DuckDB's ORDER BY of the keys: strings by code point (as UTF-8 bytes), nulls last."""
    return tuple((k == NULL, "" if k == NULL else k) for k in key)


def _middles(merged: pd.DataFrame) -> tuple[dict[tuple[str, ...], dict[str, Any]], list[dict[str, Any]]]:
    """Per group and measure: the values at the middle ranks the rollup gives, and those only rows can give."""
    medians: dict[tuple[str, ...], dict[str, Any]] = {}
    pending: list[dict[str, Any]] = []
    for (*key_parts, measure), g in merged.groupby([*KEYS, "measure"], sort=False):
        key = tuple(str(k) for k in key_parts)
        counts = g["count"].to_numpy(dtype=np.int64)
        lows, highs = g["lo"].to_numpy(dtype=float), g["hi"].to_numpy(dtype=float)
        vmins, vmaxs = g["vmin"].to_numpy(dtype=float), g["vmax"].to_numpy(dtype=float)
        upto = counts.cumsum()
        n = int(upto[-1])
        got: list[float | None] = []
        for pos in ((n - 1) // 2, n // 2):
            i = int(np.searchsorted(upto, pos, side="right"))
            count, vmin, vmax = int(counts[i]), float(vmins[i]), float(vmaxs[i])
            within = pos - int(upto[i] - count)
            if vmin == vmax or within == 0:
                got.append(vmin)
            elif within == count - 1:
                got.append(vmax)
            else:
                pending.append({"key": key, "measure": str(measure), "lo": float(lows[i]), "hi": float(highs[i]),
                                "within": within, "count": count, "slot": len(got)})
                got.append(None)
        medians.setdefault(key, {})[str(measure)] = got
        if measure == MEASURES[0]:
            medians[key]["n"] = n
    return medians, pending


def summarize(history: Path | None, extra: pd.DataFrame | None) -> pd.DataFrame:
    """Per (model, chip class, runtime): the median of each measure, ``n`` and ``runs``, over the
    history's trial rows and ``extra``'s rows together: the frame ``history.medians_by(history, extra,
    KEYS, MEASURES, WHERE, counted=(bytes per token, probe))`` returns, from the rollups."""
    import pyarrow as pa

    fresh, stale = _stale(history)
    if len(stale) > STALE_LIMIT:  # a history from before rollups: one scan of its rows beats deriving each night
        from orchestrator.results.history import medians_by

        return medians_by(history, extra, KEYS, MEASURES, WHERE, counted=tuple(MEASURES[1:]))
    con = connect()
    has_extra = extra is not None and len(extra) > 0
    if extra is not None and has_extra:
        frame = extra[[*KEYS, *MEASURES, "status", *(["run_id"] if "run_id" in extra.columns else [])]]
        con.register("extra_rows", pa.Table.from_pandas(frame, preserve_index=False))  # NaN -> null
    if not _gather(con, fresh, stale, has_extra):
        return pd.DataFrame(columns=[*KEYS, *MEASURES, "n", "runs"])
    group = ", ".join(_ident(k) for k in KEYS)
    merged = query(f"""SELECT {group}, measure, lo, hi, sum("count")::BIGINT AS "count", min(vmin) AS vmin,
                       max(vmax) AS vmax FROM rolled GROUP BY ALL ORDER BY {group}, measure, lo""", con=con).to_pandas()
    if not len(merged):
        return pd.DataFrame(columns=[*KEYS, *MEASURES, "n", "runs"])
    medians, pending = _middles(merged)
    for item, value in zip(pending, _read_back(con, history, pending), strict=True):
        medians[item["key"]][item["measure"]][item["slot"]] = value
    groups = sorted((k for k, v in medians.items() if "n" in v), key=_key_order)
    out = pd.DataFrame({k: pd.Series([None if key[j] == NULL else key[j] for key in groups], dtype="str")
                        for j, k in enumerate(KEYS)})
    for m in MEASURES:
        vals = []
        for key in groups:
            pair = medians[key].get(m)
            vals.append(math.nan if pair is None else
                        pair[0] if pair[0] == pair[1] else _interpolate(pair[0], pair[1], INTERPOLATE[m]))
        out[m] = pd.Series(vals, dtype="float64")
    out["n"] = pd.Series([medians[k]["n"] for k in groups], dtype="int64")
    out["runs"] = _runs(con, groups, extra)
    return out[[*KEYS, *MEASURES, "n", "runs"]]


def _read_back(con: Any, history: Path | None, pending: list[dict[str, Any]]) -> list[float]:
    """The value at each pending rank: its bin's values read from the trial rows of the nights (and the
    extra rows) that hold any, in one scan a measure, the bin's range filtered in the scan."""
    values: list[float] = [math.nan] * len(pending)
    by_night = night_files(history) if history is not None else {}
    for measure in MEASURES:
        items = [(i, p) for i, p in enumerate(pending) if p["measure"] == measure]
        if not items:
            continue
        con.register("_wanted", pd.DataFrame([[*p["key"], p["lo"], p["hi"]] for _, p in items],
                                             columns=[*KEYS, "lo", "hi"]))
        holding = {r[0] for r in con.sql(f"SELECT DISTINCT night FROM rolled JOIN _wanted USING "
                                         f"({', '.join(_ident(k) for k in KEYS)}, lo, hi) WHERE measure = ?",
                                         params=[measure]).fetchall()}
        sources = []
        files = [f for n in sorted(holding - {""}) for f in by_night.get(n, [])]
        if files:
            sources.append(_night_source(files))
        if "" in holding:
            sources.append("extra_rows")
        needed = pd.DataFrame([[i, *(None if k == NULL else k for k in p["key"]), p["lo"], p["hi"]]
                               for i, p in items], columns=["i", *KEYS, "lo", "hi"])
        scale = 2.0 ** BITS
        kks = sorted({kk for _, p in items for kk in range(math.floor(math.log2(p["lo"]) * scale) - 1,
                                                           math.floor(math.log2(p["hi"]) * scale) + 2)})
        con.register("_needed", needed)
        con.register("_kks", pd.DataFrame({"kk": pd.Series(kks, dtype="int64")}))
        low, high = float(needed["lo"].min()), float(needed["hi"].max())
        col = _ident(measure)
        rows = " UNION ALL ".join(
            f"SELECT {', '.join(_ident(k) for k in KEYS)}, {col} AS v FROM ({_rows_sql(s, _columns(con, s))}) "
            f"WHERE {col} >= {low!r} AND {col} < {high!r} "
            f"AND floor(log2({col}) * {scale!r})::BIGINT IN (SELECT kk FROM _kks)" for s in sources)
        on = " AND ".join(f"s.{_ident(k)} IS NOT DISTINCT FROM n.{_ident(k)}" for k in KEYS)
        got = query(f"SELECT n.i AS i, s.v AS v FROM ({rows}) s JOIN _needed n ON {on} "
                    "AND s.v >= n.lo AND s.v < n.hi", con=con).to_pandas()
        for i, g in got.groupby("i", sort=False):
            p = pending[int(i)]
            if len(g) != p["count"]:
                raise RuntimeError(f"history rollups out of date: {len(g)} {measure} values in [{p['lo']}, "
                                   f"{p['hi']}) for {p['key']} where the rollups count {p['count']}; "
                                   f"remove {history}/{KIND} and rank again")
            values[int(i)] = float(np.partition(g["v"].to_numpy(), p["within"])[p["within"]])
        missing = {i for i, _ in items} - set(got["i"].astype(int))
        if missing:
            raise RuntimeError(f"history rollups out of date: no rows where they count some; remove {history}/{KIND}")
    return values


def _runs(con: Any, groups: list[tuple[str, ...]], extra: pd.DataFrame | None) -> list[str]:
    """Each group's sorted run ids ("history" for the history's rows), the first three then "..."."""
    in_history = set(con.sql(f"SELECT DISTINCT {', '.join(_ident(k) for k in KEYS)} FROM rolled "
                             f"WHERE night <> '' AND measure = ?", params=[MEASURES[0]]).fetchall())
    named: dict[tuple[str, ...], set[str]] = {}
    if extra is not None and len(extra) and "run_id" in extra.columns:
        cast = ", ".join(f"{_ident(k)}::VARCHAR AS {_ident(k)}" for k in KEYS)
        found = con.sql(f"SELECT DISTINCT {cast}, run_id::VARCHAR AS run_id FROM extra_rows WHERE {WHERE} "
                        "AND run_id IS NOT NULL").fetchall()
        for row in found:
            named.setdefault(tuple(NULL if k is None else k for k in row[:-1]), set()).add(row[-1])
    out = []
    for key in groups:
        r = sorted(named.get(key, set()) | ({"history"} if key in in_history else set()))
        out.append(",".join(r[:3]) + ("..." if len(r) > 3 else ""))
    return out
