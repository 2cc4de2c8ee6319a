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
from pathlib import Path
from typing import Any

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


def tonight(history: Path) -> str:
    return sorted(p.name.split("=", 1)[1] for p in (history / "nights").glob("night=*"))[-1]


def measure(engine: str, kind: str, history: Path) -> dict[str, Any]:
    from orchestrator.config.candidates import load_candidates, load_ceilings
    from orchestrator.config.plan import NightlyAlarm

    candidates = load_candidates(ROOT / "configs" / "candidates.yaml")
    ceilings = load_ceilings(ROOT / "configs" / "ceilings.yaml")
    night = tonight(history)
    planned = [(f"config{c}", f"dev{d:02d}") for c in range(CONFIGS) for d in range(DEVICES)]
    rules = {c: NightlyAlarm() for c, _ in planned}
    from orchestrator.analysis.rank import rank_summary, summarize_history
    from orchestrator.night import summarize

    t0 = time.perf_counter()
    if engine == "duckdb":
        if kind == "rank":
            table = rank_summary(candidates, summarize_history(history), ceilings)
        else:
            summary = summarize(history, night, planned, rules)
    else:
        old_nightly, old_rank = _old("analysis.nightly"), _old("analysis.rank")
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
    for kind in ("trials", "nights"):
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
        size = sum(p.stat().st_size for p in history.rglob("*.parquet"))
        small_nights = max(1, round(args.pandas_rows / per_night))
        small = first_nights(history, small_nights, Path(tmp) / "small")
        sizes = {"full": {"nights": nights, "trial_rows": nights * per_night, "path": history},
                 "small": {"nights": small_nights, "trial_rows": small_nights * per_night, "path": small}}
        results: dict[str, Any] = {}
        for kind in ("rank", "nightly"):
            results[kind] = {
                "duckdb_full": run("duckdb", kind, history),
                "duckdb_small": run("duckdb", kind, small),
                "pandas_small": run("pandas", kind, small),
            }
            if args.pandas_full:
                results[kind]["pandas_full"] = run("pandas", kind, history)
    res = {"date": time.strftime("%Y-%m-%d"), "machine": platform.machine(), "cpus": os.cpu_count(),
           "python": platform.python_version(), "baseline": BASELINE,
           "history": made | {"nights": nights, "devices": DEVICES, "configs": CONFIGS, "trials_per_night":
                              per_night, "parquet_mb": round(size / 2**20)},
           "sizes": {k: {"nights": v["nights"], "trial_rows": v["trial_rows"]} for k, v in sizes.items()},
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
    lines = [
        f"# History queries: DuckDB over the parquet vs the pandas path ({res['date']}, {res['machine']}, "
        f"{res['cpus']} CPUs, Python {res['python']})", "",
        f"Command: `.venv/bin/python bench/bench_history.py{res['command'].removeprefix('python bench/bench_history.py')}`",
        "",
        f"History: {h['devices']} phones x {h['configs']} configs x {h['trials_per_night'] // (h['devices'] * h['configs'])} "
        f"trials a night, {h['nights']} nights: {full} trial rows and {h['nights'] * h['devices'] * h['configs']:,} "
        f"nightly comparisons, {h['parquet_mb']:,} MB of parquet (one file per night and dataset). The pandas path "
        f"(commit {res['baseline']}) is also measured on the first {s['small']['nights']} nights ({small} rows).", "",
        "Each cell: wall time in process, the same with interpreter start-up and imports, peak RSS. Goal for "
        "DuckDB at 100 M rows: < 5 s and < 2 GB each.", "",
        f"| measure | DuckDB, {full} rows | DuckDB, {small} rows | pandas, {small} rows |"
        + (f" pandas, {full} rows |" if "pandas_full" in r["rank"] else ""),
        "|---|---|---|---|" + ("---|" if "pandas_full" in r["rank"] else ""),
    ]
    for kind, label in (("rank", "`orch rank` over the history"),
                        ("nightly", f"nightly rule + change points, all {h['devices'] * h['configs']} series")):
        row = r[kind]
        lines.append(f"| {label} | {_cell(row['duckdb_full'])} | {_cell(row['duckdb_small'])} | "
                     f"{_cell(row['pandas_small'])} |" + (f" {_cell(row['pandas_full'])} |" if "pandas_full" in row
                                                          else ""))
    same_rank = r["rank"]["duckdb_small"].get("current_tok_s") == r["rank"]["pandas_small"].get("current_tok_s")
    keys = ("alarms_tonight", "watch_tonight", "change_points")
    same_night = all(r["nightly"]["duckdb_small"].get(k) == r["nightly"]["pandas_small"].get(k) for k in keys)
    d = r["nightly"]["duckdb_full"]
    loads = [x for row in r.values() for cell in row.values() for x in cell.get("load_1m", [])]
    if loads:
        lines += ["", f"Load average (1 min) on this shared {res['cpus']}-CPU machine around the measures: "
                      f"{min(loads)} to {max(loads)}."]
    lines += ["", f"Same answers on the same rows: rank {'yes' if same_rank else 'NO'} (order and current tok/s to "
              f"6 decimals), nightly {'yes' if same_night else 'NO'} (alarms, watches, change points tonight).",
              f"At {full} rows tonight: {d.get('alarms_tonight')} alarm(s), {d.get('watch_tonight')} watch, "
              f"{d.get('change_points')} change point(s) (the synthetic history holds one series, config0/dev00, "
              "6% slower from 60% of the nights; the rest is noise at alpha 0.01 over 6,400 signals).", "",
              "Where the time goes in `rank` at 100 M rows: one scan grouping every row by three strings (model, "
              "chip class, runtime) takes about 3.5 s on these 2 cores before any aggregate; the exact median of "
              "decode tok/s then holds every value of its group (800 MB), and bytes per token and the probe are "
              "counted by distinct value in a second scan (their medians read off the counts), so memory stays "
              "under 2 GB but the time does not reach 5 s. The pandas path would need about 20 GB at 100 M rows "
              "(2.1 GB at 10 M), so it is not run there.", ""]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
