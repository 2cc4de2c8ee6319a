"""Analysis benchmarks over a synthetic nightly history (run on demand; not a test).

Writes a history of ~10 million trial rows as the nightly command does (hive-partitioned parquet,
one file per config per night under history/trials/night=*/, plus the nights' comparisons), then
times, each in a fresh process (wall time and peak RSS):

1. `orch rank` over the history: read the rows ranking joins on, medians, audit, re-rank.
2. The nightly rule over the whole history: every series' alarms (nights dataset) plus the
   change-point detector on per-night medians (trials dataset).

Goal: under 5 s each, under 4 GB. Writes bench/results/analysis.md and .json.
Usage: python bench/bench_analysis.py [--rows N] [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import platform
import resource
import subprocess
import sys
import tempfile
import time
from datetime import date, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from orchestrator.results.history_store import NIGHT_COLUMNS, TRIAL_COLUMNS  # noqa: E402

DEVICES, CONFIGS, PER_ARM = 40, 8, 40  # 40 devices x 8 configs x 80 trials = 25,600 rows per night
CHIPS = ["A19 Pro", "A18 Pro", "A17 Pro", "M4"]
MODELS = ["gemma-4-e2b-qat-mixed", "gemma-4-e4b-qat-mixed", "llama-3.2-3b-q4", "smollm3-3b-q4"]


def write_history(root: Path, rows: int, seed: int = 0, *, devices: int = DEVICES, configs: int = CONFIGS,
                  first_nights: int | None = None) -> dict[str, Any]:
    """Synthetic history: ABBA nights, lognormal 6% noise, a 6% regression in one series from night 60%.
    ``first_nights``: write only that many of the nights (the same rows a full write would hold)."""
    DEVICES, CONFIGS = devices, configs
    rng = np.random.default_rng(seed)
    per_night = DEVICES * CONFIGS * 2 * PER_ARM
    nights = max(1, round(rows / per_night))
    written = nights if first_nights is None else min(nights, first_nights)
    t0 = time.perf_counter()
    names = [f"dev{i:02d}" for i in range(DEVICES)]
    chip = {d: CHIPS[i % len(CHIPS)] for i, d in enumerate(names)}
    n_trials = 2 * PER_ARM
    block = np.repeat(np.arange(PER_ARM // 2), 4)
    role = np.tile(np.array(["reference", "candidate", "candidate", "reference"]), PER_ARM // 2)
    for k in range(written):
        night = (date(2026, 1, 1) + timedelta(days=k)).isoformat()
        trial_parts, night_parts = [], []
        for c in range(CONFIGS):
            config = f"config{c}"
            run_id = f"{night.replace('-', '')}-000000-{config}-0000"
            base = 30.0 + 10 * c
            slow = np.array([0.94 if (c == 0 and i == 0 and k >= nights * 0.6) else 1.0 for i in range(DEVICES)])
            rate = base * np.exp(0.06 * rng.standard_normal((DEVICES, n_trials)))
            rate = np.where(role == "candidate", rate * slow[:, None], rate)
            frame = pd.DataFrame({
                "run_id": run_id, "config": config, "device": np.repeat(names, n_trials),
                "chip_class": np.repeat([chip[d] for d in names], n_trials), "model": MODELS[c % len(MODELS)],
                "runtime": "rawloop-metal", "arm": np.tile(role, DEVICES), "role": np.tile(role, DEVICES),
                "build": np.where(np.tile(role, DEVICES) == "reference", "ref", f"n{k}"),
                "block": np.tile(block, DEVICES), "seq": np.tile(np.arange(n_trials), DEVICES), "status": "ok",
                "failure_kind": pd.NA, "decode_tok_s": rate.ravel(), "prefill_tok_s": rate.ravel() * 1.3,
                "bytes_per_decode_token": 783e6, "effective_gb_s": rate.ravel() * 0.783, "thermal_before": "nominal",
                "thermal_after": "nominal", "state_rose": False, "settle_waited_s": 90.0, "probe_gb_s": 60.0,
                "wall_start": pd.Timestamp("2026-01-01", tz="UTC"),
            })[TRIAL_COLUMNS].astype({"build": "string", "failure_kind": "string"})
            trial_parts.append(frame)
            ratio = np.exp(0.06 * np.sqrt(2 / PER_ARM) * 1.25 * rng.standard_normal(DEVICES)) * slow
            p = 1 - 0.5 * (1 + np.tanh((1 - ratio) / 0.02))  # a plausible one-sided p for the shift
            nights_frame = pd.DataFrame({
                "run_id": run_id, "config": config, "device": names, "chip_class": [chip[d] for d in names],
                "reference_build": "ref", "candidate_build": f"n{k}", "n_reference": PER_ARM,
                "n_candidate": PER_ARM, "median_reference": base, "median_candidate": base * ratio, "ratio": ratio,
                "ci_low": ratio * 0.97, "ci_high": ratio * 1.03, "p_value": np.minimum(1, 2 * np.minimum(p, 1 - p)),
                "p_one_sided_slower": p, "sigma": 0.06, "mde": 0.047, "verdict": "equivalent",
            })[NIGHT_COLUMNS]
            night_parts.append(nights_frame)
        # One file per night and dataset: what `orch nightly` leaves after compacting the night's runs.
        for kind, parts in (("trials", trial_parts), ("nights", night_parts)):
            part = root / kind / f"night={night}"
            part.mkdir(parents=True, exist_ok=True)
            pd.concat(parts, ignore_index=True).to_parquet(part / f"night-{CONFIGS}.parquet", index=False)
    return {"nights": written, "trial_rows": written * per_night, "files": written * 2,
            "write_s": round(time.perf_counter() - t0, 1)}


def measure_rank(history: Path) -> dict[str, Any]:
    from orchestrator.analysis.rank import HISTORY_OBS_COLUMNS, rank
    from orchestrator.config.candidates import load_candidates, load_ceilings
    from orchestrator.results.history import load_trials as load_history_trials

    obs = load_history_trials(history, HISTORY_OBS_COLUMNS)
    table = rank(load_candidates(ROOT / "configs" / "candidates.yaml"), obs,
                 load_ceilings(ROOT / "configs" / "ceilings.yaml"))
    return {"rows": len(obs), "ranked": list(table["id"])}


def measure_nightly(history: Path) -> dict[str, Any]:
    from orchestrator.config.plan import NightlyAlarm
    from orchestrator.night import summarize
    from orchestrator.results.history import load_nights

    nights = load_nights(history)
    last = str(max(nights["night"]))
    planned = sorted(set(zip(nights["config"], nights["device"], strict=True)))
    summary = summarize(history, last, planned, {c: NightlyAlarm() for c, _ in planned})
    return {"series": len(planned), "alarmed_tonight": int((summary.tonight["status"] == "alarm").sum()),
            "change_points": len(summary.changes),
            "first_change": summary.changes.head(2).to_dict("records")}


def child(kind: str, history: Path) -> None:
    t0 = time.perf_counter()
    out = (measure_rank if kind == "rank" else measure_nightly)(history)
    out["wall_s"] = round(time.perf_counter() - t0, 2)
    out["peak_rss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
    print(json.dumps(out, default=str))


def run(kind: str, history: Path) -> dict[str, Any]:
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, __file__, "--child", kind, str(history)], capture_output=True, text=True,
                          check=True)
    out: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    out["process_wall_s"] = round(time.perf_counter() - t0, 2)  # incl. interpreter start and imports
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=10_000_000)
    ap.add_argument("--keep", type=Path, default=None)
    ap.add_argument("--child", nargs=2, default=None)
    args = ap.parse_args()
    if args.child:
        child(args.child[0], Path(args.child[1]))
        return
    with tempfile.TemporaryDirectory() as tmp:
        history = args.keep or Path(tmp) / "history"
        if (history / "trials").exists():  # --keep of an earlier history: describe what is there
            made = {"reused": str(history), "nights": len(list((history / "trials").glob("night=*"))),
                    "files": len(list(history.rglob("*.parquet")))}
        else:
            made = write_history(history, args.rows)
        size = sum(p.stat().st_size for p in history.rglob("*.parquet"))
        rank_res, nightly_res = run("rank", history), run("nightly", history)
    res = {"date": time.strftime("%Y-%m-%d"), "machine": platform.machine(), "python": platform.python_version(),
           "history": made | {"parquet_mb": round(size / 2**20)}, "rank": rank_res, "nightly": nightly_res}
    out = ROOT / "bench" / "results"
    out.mkdir(parents=True, exist_ok=True)
    (out / "analysis.json").write_text(json.dumps(res, indent=2, default=str) + "\n")
    h = res["history"]
    md = [
        f"# Analysis benchmark ({res['date']}, {res['machine']}, {res['python']})", "",
        "Command: `.venv/bin/python bench/bench_analysis.py` (synthetic nightly history, hive-partitioned parquet)", "",
        f"History: {h.get('trial_rows') or rank_res['rows']:,} trial rows, {h.get('nights', '?')} nights x {CONFIGS} configs x "
        f"{DEVICES} devices, {h.get('files', '?')} files, {h['parquet_mb']} MB.", "",
        "| measure | goal | wall (in process) | process incl. imports | peak RSS |", "|---|---|---|---|---|",
        f"| `orch rank` over the history ({rank_res['rows']:,} rows) | < 5 s, < 4 GB | {rank_res['wall_s']} s "
        f"| {rank_res['process_wall_s']} s | {rank_res['peak_rss_mb']} MB |",
        f"| nightly rule + change points, all {nightly_res['series']} series | < 5 s, < 4 GB | "
        f"{nightly_res['wall_s']} s | {nightly_res['process_wall_s']} s | {nightly_res['peak_rss_mb']} MB |", "",
        f"Nightly: {nightly_res['alarmed_tonight']} alarm(s) tonight, {nightly_res['change_points']} change point(s) "
        "(the synthetic history has one series, config0/dev00, 6% slower from 60% of the nights).", "",
    ]
    (out / "analysis.md").write_text("\n".join(md))
    print("\n".join(md))


if __name__ == "__main__":
    main()
