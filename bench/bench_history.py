"""History queries at scale: DuckDB over the parquet against the pandas path they replaced (not a test).

Writes a synthetic nightly history as `orch nightly` leaves it (hive-partitioned parquet, one file per
night and dataset after compaction): 400 phones x 8 configs x 80 trials a night, 391 nights, about
100 M trial rows. Then, each measure in a fresh process (wall time in process, and peak RSS from
getrusage):

1. `orch rank` over the history: per (model, chip class, runtime) medians, audit, re-rank.
2. The nightly rule over every series: tonight's alarms (streaks over the whole nights dataset) and
   change points of every series, as `summarize` does for a night where every series ran.

The DuckDB path is this checkout's code. The pandas path is the code it replaced (commit BASELINE:
pyarrow dataset into pandas, then pandas), imported from git as it was; it runs on the first nights
of the same history, as many as give ``--pandas-rows`` rows, since at 100 M rows it needs more memory
than this machine should give one query (it is also run at 100 M with --pandas-full).

Goal (DuckDB, 100 M rows): under 5 s and under 2 GB each. Writes bench/results/history.md and .json.
Usage: python bench/bench_history.py [--rows N] [--pandas-rows N] [--keep DIR]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

BASELINE = "7e88070"  # the last commit whose history queries ran in pandas
DEVICES, CONFIGS = 400, 8


def _old(module: str) -> Any:
    """A module of the orchestrator as it was at BASELINE (its imports resolve to today's package)."""
    src = subprocess.run(["git", "-C", str(ROOT), "show", f"{BASELINE}:orchestrator/{module.replace('.', '/')}.py"],
                         capture_output=True, text=True, check=True).stdout
    path = Path(tempfile.mkdtemp()) / f"old_{module.replace('.', '_')}.py"
    path.write_text(src)
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = mod  # dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


@dataclass(frozen=True)
class OldAlarm:
    """NightlyAlarm's fields at BASELINE, with its defaults."""

    consecutive_nights: int = 2
    consecutive_p: float = 0.05
    consecutive_slowdown: float = 0.03
    single_p: float = 0.01
    single_slowdown: float = 0.10
    model_fields: ClassVar[tuple[str, ...]] = ("consecutive_nights", "consecutive_p", "consecutive_slowdown",
                                               "single_p", "single_slowdown")


def tonight(history: Path) -> str:
    return sorted(p.name.split("=", 1)[1] for p in (history / "nights").glob("night=*"))[-1]


def measure(engine: str, kind: str, history: Path) -> dict[str, Any]:
    from orchestrator.config.candidates import load_candidates, load_ceilings
    from orchestrator.config.plan import NightlyAlarm

    candidates = load_candidates(ROOT / "configs" / "candidates.yaml")
    ceilings = load_ceilings(ROOT / "configs" / "ceilings.yaml")
    night = tonight(history)
    planned = [(f"config{c}", f"dev{d:02d}") for c in range(CONFIGS) for d in range(DEVICES)]
    # The rule as it was at BASELINE (no same-night confirmation, no latch), so both paths decide alike.
    rules: dict[str, Any] = {c: NightlyAlarm(confirm=None, latch=False) for c, _ in planned}
    from orchestrator.analysis.rank import rank_summary, summarize_history
    from orchestrator.night import summarize

    if kind == "rollups":  # derive once: the rollups `orch nightly` writes (none when they are current)
        from orchestrator.results.history import connect
        from orchestrator.results.history_rollup import _night_source, derive, night_files, refresh_rollups

        t0 = time.perf_counter()
        written = refresh_rollups(history)
        wall = time.perf_counter() - t0
        t1 = time.perf_counter()  # what one night costs when its files change (a night's append, compaction)
        derive(connect(), _night_source(night_files(history)[night]))
        return {"wall_s": round(wall, 2), "nights_written": len(written),
                "one_night_s": round(time.perf_counter() - t1, 2),
                "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)}
    t0 = time.perf_counter()
    if engine in ("duckdb", "duckdb-rows"):
        if kind == "rank" and engine == "duckdb":
            summary_rows = summarize_history(history)
            table = rank_summary(candidates, summary_rows, ceilings)
        elif kind == "rank":  # the path rank took before rollups: DuckDB's median over every row
            from orchestrator.analysis.rank import SUMMARY_COLUMNS
            from orchestrator.results.history import medians_by
            from orchestrator.results.history_rollup import KEYS, MEASURES, WHERE

            summary_rows = medians_by(history, None, KEYS, MEASURES, WHERE, counted=tuple(MEASURES[1:])).rename(
                columns={"bytes_per_decode_token": "bytes_per_token"})[SUMMARY_COLUMNS]
            table = rank_summary(candidates, summary_rows, ceilings)
        else:
            summary = summarize(history, night, planned, rules)
    else:
        old_nightly, old_rank = _old("analysis.nightly"), _old("analysis.rank")
        old_nightly.NightlyAlarm = OldAlarm  # it reads every field of the rule as a number, as the rule then was
        rules = {c: OldAlarm() for c, _ in planned}
        t0 = time.perf_counter()  # not the git show
        if kind == "rank":
            obs = old_nightly.load_history_trials(history, old_rank.HISTORY_OBS_COLUMNS)
            table = old_rank.rank(candidates, obs, ceilings)
        else:
            summary = old_nightly.summarize(history, night, planned, rules)
    wall = time.perf_counter() - t0
    out: dict[str, Any] = {"wall_s": round(wall, 2),
                           "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)}
    if kind == "rank":
        out |= {"ranked": list(table["id"]), "current_tok_s": [round(float(x), 6) for x in table["current_tok_s"]]}
        if engine != "pandas":  # every group's medians, exact (repr round-trips a double)
            out["medians"] = [[*(str(r[k]) for k in ("model", "chip_class", "runtime")),
                               *(repr(float(r[v])) for v in ("decode_tok_s", "bytes_per_token", "probe_gb_s")),
                               int(r["n"])] for _, r in summary_rows.iterrows()]
    else:
        out |= {"series": len(planned), "alarms_tonight": int((summary.tonight["status"] == "alarm").sum()),
                "watch_tonight": int((summary.tonight["status"] == "watch").sum()),
                "change_points": len(summary.changes)}
    return out


def run(engine: str, kind: str, history: Path) -> dict[str, Any]:
    load = os.getloadavg()[0]  # the machine is shared: what else was running shows here
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, __file__, "--child", engine, kind, str(history)], capture_output=True,
                          text=True)
    if proc.returncode != 0:
        return {"failed": (proc.stderr.strip().splitlines() or ["?"])[-1],
                "peak_rss_mb": None, "wall_s": None, "process_wall_s": round(time.perf_counter() - t0, 2)}
    out: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    out["process_wall_s"] = round(time.perf_counter() - t0, 2)  # incl. interpreter start and imports
    out["load_1m"] = [round(load, 2), round(os.getloadavg()[0], 2)]
    return out


def first_nights(history: Path, nights: int, into: Path) -> Path:
    """The first nights of a history, as a history of its own (links, no copy)."""
    for kind in ("trials", "nights", "rollups"):
        (into / kind).mkdir(parents=True)
        for part in sorted((history / kind).glob("night=*"))[:nights]:
            os.symlink(part.resolve(), into / kind / part.name)
    return into


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=100_000_000)
    ap.add_argument("--pandas-rows", type=int, default=10_000_000)
    ap.add_argument("--pandas-full", action="store_true", help="also run the pandas path at --rows")
    ap.add_argument("--keep", type=Path, default=None, help="write the history here (or reuse it if there)")
    ap.add_argument("--child", nargs=3, default=None)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(measure(args.child[0], args.child[1], Path(args.child[2]))))
        return
    from bench_analysis import PER_ARM, write_history

    with tempfile.TemporaryDirectory() as tmp:
        history = args.keep or Path(tmp) / "history"
        if (history / "trials").exists():
            made = {"reused": True}
        else:
            made = write_history(history, args.rows, devices=DEVICES, configs=CONFIGS)
        nights = len(list((history / "trials").glob("night=*")))
        per_night = DEVICES * CONFIGS * 2 * PER_ARM
        size = sum(p.stat().st_size for kind in ("trials", "nights") for p in (history / kind).rglob("*.parquet"))
        small_nights = max(1, round(args.pandas_rows / per_night))
        sizes = {"full": {"nights": nights, "trial_rows": nights * per_night},
                 "small": {"nights": small_nights, "trial_rows": small_nights * per_night}}
        results: dict[str, Any] = {"rollups": {"duckdb_full": run("duckdb", "rollups", history)}}
        small = first_nights(history, small_nights, Path(tmp) / "small")  # with the rollups now written
        for kind in ("rank", "nightly"):
            results[kind] = {
                "duckdb_full": run("duckdb", kind, history),
                "duckdb_small": run("duckdb", kind, small),
                "pandas_small": run("pandas", kind, small),
            }
            if args.pandas_full:
                results[kind]["pandas_full"] = run("pandas", kind, history)
        results["rank"]["rows_full"] = run("duckdb-rows", "rank", history)
        rollup_mb = round(sum(p.stat().st_size for p in (history / "rollups").rglob("*.parquet")) / 2**20, 1)
    res = {"date": time.strftime("%Y-%m-%d"), "machine": platform.machine(), "cpus": os.cpu_count(),
           "python": platform.python_version(), "baseline": BASELINE,
           "history": made | {"nights": nights, "devices": DEVICES, "configs": CONFIGS, "trials_per_night":
                              per_night, "parquet_mb": round(size / 2**20)},
           "sizes": sizes, "rollup_mb": rollup_mb,
           "results": results, "command": "python bench/bench_history.py " + " ".join(
               "DIR" if a.startswith("/") else a for a in sys.argv[1:])}
    out = ROOT / "bench" / "results"
    out.mkdir(parents=True, exist_ok=True)
    (out / "history.json").write_text(json.dumps(res, indent=2, default=str) + "\n")
    (out / "history.md").write_text(markdown(res))
    print(markdown(res))


def _cell(r: dict[str, Any] | None) -> str:
    if r is None:
        return "not run"
    if r.get("failed"):
        return f"failed: {r['failed'][:80]}"
    return f"{r['wall_s']} s ({r['process_wall_s']} s with start-up), {r['peak_rss_mb']:,} MB"


def markdown(res: dict[str, Any]) -> str:
    h, s, r = res["history"], res["sizes"], res["results"]
    full, small = f"{s['full']['trial_rows']:,}", f"{s['small']['trial_rows']:,}"
    wide = "pandas_full" in r["rank"]
    lines = [
        f"# History queries: DuckDB over the parquet vs the pandas path ({res['date']}, {res['machine']}, "
        f"{res['cpus']} CPUs, Python {res['python']})", "",
        f"Command: `.venv/bin/python bench/bench_history.py{res['command'].removeprefix('python bench/bench_history.py')}`",
        "",
        f"History: {h['devices']} phones x {h['configs']} configs x {h['trials_per_night'] // (h['devices'] * h['configs'])} "
        f"trials a night, {h['nights']} nights: {full} trial rows and {h['nights'] * h['devices'] * h['configs']:,} "
        f"nightly comparisons, {h['parquet_mb']:,} MB of parquet (one file per night and dataset), and rank's "
        f"per-night rollups beside them ({res['rollup_mb']:,} MB). The pandas path (commit {res['baseline']}) is "
        f"also measured on the first {s['small']['nights']} nights ({small} rows).", "",
        "Each cell: wall time in process, the same with interpreter start-up and imports, peak RSS. Goal for "
        "DuckDB at 100 M rows: < 5 s and < 2 GB each.", "",
        f"| measure | DuckDB, {full} rows | DuckDB, {small} rows | pandas, {small} rows |"
        + (f" pandas, {full} rows |" if wide else ""),
        "|---|---|---|---|" + ("---|" if wide else ""),
    ]
    for kind, label in (("rank", "`orch rank` over the history (from the rollups)"),
                        ("nightly", f"nightly rule + change points, all {h['devices'] * h['configs']} series")):
        row = r[kind]
        lines.append(f"| {label} | {_cell(row['duckdb_full'])} | {_cell(row['duckdb_small'])} | "
                     f"{_cell(row['pandas_small'])} |" + (f" {_cell(row['pandas_full'])} |" if wide else ""))
    rows = r["rank"].get("rows_full")
    lines.append(f"| `orch rank` from every row (the path before rollups) | {_cell(rows)} | | |" + (" |" if wide else ""))
    made = r["rollups"]["duckdb_full"]
    one = made.get("one_night_s")
    every = f", all {h['nights']} from nothing about {round(one * h['nights'])} s at that rate" if one else ""
    lines.append(f"| writing missing rollups (derive once; {made.get('nights_written', '?')} night(s) written this "
                 f"run; one night's rollup derived in {one} s{every}) | {_cell(made)} | | |" + (" |" if wide else ""))
    same_rank = r["rank"]["duckdb_small"].get("current_tok_s") == r["rank"]["pandas_small"].get("current_tok_s")
    same_rows = rows is not None and rows.get("medians") is not None and \
        rows.get("medians") == r["rank"]["duckdb_full"].get("medians")
    keys = ("alarms_tonight", "watch_tonight", "change_points")
    same_night = all(r["nightly"]["duckdb_small"].get(k) == r["nightly"]["pandas_small"].get(k) for k in keys)
    d = r["nightly"]["duckdb_full"]
    loads = [x for row in r.values() for cell in row.values() for x in cell.get("load_1m", [])]
    if loads:
        lines += ["", f"Load average (1 min) on this shared {res['cpus']}-CPU machine around the measures: "
                      f"{min(loads)} to {max(loads)}."]
    lines += ["", f"Same answers on the same rows: rank {'yes' if same_rank else 'NO'} against pandas at {small} rows "
              f"(order and current tok/s to 6 decimals); rank from the rollups {'yes' if same_rows else 'NO'} against "
              f"every row at {full} rows (every group's medians of decode tok/s, bytes per token and probe, and n, "
              f"to the last bit); nightly {'yes' if same_night else 'NO'} (alarms, watches, change points tonight).",
              f"At {full} rows tonight: {d.get('alarms_tonight')} alarm(s), {d.get('watch_tonight')} watch, "
              f"{d.get('change_points')} change point(s) (the synthetic history holds one series, config0/dev00, "
              "6% slower from 60% of the nights; the rest is noise at alpha 0.01 over 6,400 signals).", "",
              "How rank reaches its figure: from every row it groups 100 M rows by three strings (model, chip "
              "class, runtime) and holds each group's decode tok/s for its exact median. From the rollups it reads, "
              "per night, counts of each group's values in exact value bins (0.4-0.8% wide) with each bin's smallest "
              "and largest value: summed over the nights they place each group's middle rank(s) in one bin, and only "
              "that bin's values are read back from the trial rows (one scan of the decode column with the bins' "
              "range filtered in the scan). Bytes per token and the probe are one value per bin, given by the "
              "rollups alone. A night whose files changed since its rollup is derived from its rows in memory. The "
              "pandas path would need about 20 GB at 100 M rows (2.1 GB at 10 M), so it is not run there.", ""]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
