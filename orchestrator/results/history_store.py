"""Writing the nightly history: each night's trial rows and comparisons as hive-partitioned parquet.

    history/trials/night=<night>/<run_id>.parquet    one row per trial
    history/nights/night=<night>/<run_id>.parquet    one row per device: ratio, one-sided p, CI, ...

Files are written to a temp name and renamed; a night's per-run files are compacted into one per
dataset once the night is done. Each time a night's trial files change, its rank rollup is written
again beside them (`results/history_rollup.py`). Reading is `results/history.py` (DuckDB).
"""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd

from orchestrator.results.history import STRING_COLUMNS as HISTORY_STRINGS
from orchestrator.results.history_rollup import write_rollup

__all__ = ["FLOAT_COLUMNS", "NIGHT_COLUMNS", "SERIES_COLUMNS", "STRING_COLUMNS", "TRIAL_COLUMNS", "NightlyInputError",
           "append_history", "check_night", "compact_night", "typed"]

NIGHT = re.compile(r"^[0-9A-Za-z_.-]+$")
TRIAL_COLUMNS = [
    "run_id", "config", "device", "chip_class", "model", "runtime", "arm", "role", "build", "block", "seq", "status",
    "failure_kind", "decode_tok_s", "prefill_tok_s", "bytes_per_decode_token", "effective_gb_s", "thermal_before",
    "thermal_after", "state_rose", "settle_waited_s", "probe_gb_s", "wall_start",
]
SERIES_COLUMNS = ["run_id", "config", "device", "ratio", "p_one_sided_slower", "median_reference", "median_candidate"]
NIGHT_COLUMNS = [
    "run_id", "config", "device", "chip_class", "reference_build", "candidate_build", "n_reference", "n_candidate",
    "median_reference", "median_candidate", "ratio", "ci_low", "ci_high", "p_value", "p_one_sided_slower", "sigma",
    "mde", "verdict",
]
STRING_COLUMNS = [c for c in HISTORY_STRINGS if c != "night"]
FLOAT_COLUMNS = ["decode_tok_s", "prefill_tok_s", "bytes_per_decode_token", "effective_gb_s", "settle_waited_s",
                 "probe_gb_s", "median_reference", "median_candidate", "ratio", "ci_low", "ci_high", "p_value",
                 "p_one_sided_slower", "sigma", "mde"]


class NightlyInputError(ValueError):
    """Bad input for a nightly run (the CLI exits 2)."""


def check_night(night: str) -> str:
    if not NIGHT.match(night):
        raise NightlyInputError(f"night {night!r}: use letters, digits, '.', '_' or '-' (e.g. 2026-11-29)")
    return night


def typed(frame: pd.DataFrame) -> pd.DataFrame:
    """Fixed column types, so a column with no value tonight (a simulated device reports no bytes per
    token; every trial of a session failed) is not written as parquet's null type, which the other
    nights' files could not be read together with."""
    return frame.astype({c: ("string" if c in STRING_COLUMNS else "float64") for c in frame.columns
                         if c in STRING_COLUMNS or c in FLOAT_COLUMNS})


def append_history(history: Path, night: str, trials: pd.DataFrame, nights: pd.DataFrame) -> None:
    """Add one run's rows under ``night=<night>/<run_id>.parquet`` (written to a temp name, then renamed)."""
    for kind, frame in (("trials", trials), ("nights", nights)):
        if not len(frame):
            continue
        run_id = str(frame["run_id"].iloc[0])
        part = history / kind / f"night={check_night(night)}"
        part.mkdir(parents=True, exist_ok=True)
        tmp = part / f".{run_id}.parquet.tmp"
        frame.to_parquet(tmp, index=False)
        tmp.replace(part / f"{run_id}.parquet")
        if kind == "trials":
            write_rollup(history, night)  # rank's per-night rollup follows the night's files


def compact_night(history: Path, night: str) -> None:
    """Merge a night's per-run files into one per dataset (reading 400 nights then opens 400 files, not
    thousands). Written to a temp name and renamed before the per-run files are removed.

    The newest file wins: a run appended again (resumed after an interruption) replaces its earlier
    trial rows, and a config run again the same night replaces its earlier comparison per device (run
    ids only order by the second they were made in)."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    for kind, keys in (("trials", ["run_id"]), ("nights", ["config", "device"])):
        part = history / kind / f"night={check_night(night)}"
        files = sorted(part.glob("*.parquet"), key=lambda f: (f.stat().st_mtime_ns, f.name))
        if len(files) < 2:
            continue
        # pc.unique returns a plain Array, whatever the input's chunking: the keys seen are a Python set.
        tables, seen = [], set[str]()
        for f in reversed(files):
            t = pq.read_table(f, partitioning=None)
            key = pc.binary_join_element_wise(*(pc.cast(t.column(k), pa.string()) for k in keys), "\x00")
            tables.append(t.filter(pc.invert(pc.is_in(key, value_set=pa.array(sorted(seen), pa.string())))))
            seen.update(pc.unique(key).to_pylist())
        table = pa.concat_tables(tables[::-1], promote_options="default")
        tmp = part / ".compact.parquet.tmp"
        pq.write_table(table, tmp)
        name = f"night-{len(files)}-{files[-1].stem}.parquet"
        tmp.replace(part / name)
        for f in files:
            if f.name != name:
                f.unlink()
        if kind == "trials":
            write_rollup(history, night)

