"""Device time per device class on the simulated lab: where a decision's device time goes (run on demand).

For each device of configs/sim-lab.yaml (one per chip class: its thermal model, noise and speeds),
`--reps` copies with their own seeds run the default A/B (coreai vs rawloop-metal, Gemma-4-E2B decode,
the default adaptive rule and settle gate) through `orch run`'s machinery in memory; the device time
table (`analysis.devicetime`) splits each session into prepare, settle, launch and measured time.

Writes bench/results/device_time.md and .json. Usage: python bench/bench_device_time.py [--reps N]
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
from collections import Counter
from datetime import date
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from orchestrator import core  # noqa: E402
from orchestrator.analysis.devicetime import device_time, prepare_seconds  # noqa: E402
from orchestrator.analysis.summary import verdicts  # noqa: E402
from orchestrator.config import Fleet, Plan  # noqa: E402
from orchestrator.config.loader import load_fleet  # noqa: E402

LAB = ROOT / "configs" / "sim-lab.yaml"


def copies(device: dict[str, Any], reps: int) -> Fleet:
    return Fleet.model_validate({"name": "bench", "devices": [
        {**device, "id": f"{device['id']}-{i:03d}", "seed": 50_000 + i, "faults": {}} for i in range(reps)]})


def plan() -> Plan:
    return Plan.model_validate({
        "name": "bench", "model": "gemma-4-e2b", "seed": 2026, "probe": False,
        "arms": [{"name": "engine", "runtime": "coreai"}, {"name": "rawloop", "runtime": "rawloop-metal"}],
        "trial": {"prompt_tokens": 64, "decode_tokens": 128},
    })


def measure(device: dict[str, Any], reps: int) -> dict[str, Any]:
    f, p = copies(device, reps), plan()
    manifest, records, trials = core.simulate(f, p)
    spent = device_time(trials, prepare_seconds(records), [s.device for s in manifest.sessions])
    table = verdicts(trials, p, seed=manifest.seed)
    sums = spent[["prepare_min", "settle_min", "launch_min", "measured_min", "retry_min", "total_min"]].mean()
    return {
        "device": device["id"], "chip_class": device["chip_class"], "reps": reps,
        **{k: float(v) for k, v in sums.items()},
        "settle_share": float(spent["settle_min"].sum() / spent["total_min"].sum()),
        "median_settle_wait_s": float(trials["settle_waited_s"].median()),
        "launches_per_arm": float(len(trials) / 2 / reps),
        "verdicts": dict(Counter(table["verdict"])),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=200)
    args = ap.parse_args()
    lab = load_fleet(LAB)
    rows = []
    for d in lab.devices:
        rows.append(measure(d.model_dump(mode="json", exclude_defaults=True) | {"kind": "sim"}, args.reps))
        print(json.dumps(rows[-1]), flush=True)
    write(rows, args.reps)


def write(rows: list[dict[str, Any]], reps: int) -> None:
    out = ROOT / "bench" / "results"
    meta = {"date": date.today().isoformat(), "machine": platform.machine(), "python": platform.python_version(),
            "command": " ".join([".venv/bin/python", "bench/bench_device_time.py", *sys.argv[1:]])}
    (out / "device_time.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1) + "\n")
    lines = [f"# Device time per device class, simulated lab ({meta['date']}, {meta['machine']}, {meta['python']})",
             "", f"Command: `{meta['command']}`", "",
             f"{reps} copies of each configs/sim-lab.yaml device (own seeds, no injected faults), the default A/B (coreai",
             "vs rawloop-metal, adaptive rule, default settle gate). Minutes per decision, means over the copies.", "",
             "| device (class) | verdicts | launches per arm | prepare | settle | launch | measured | retried | "
             "device min per decision | settle share | median settle wait s |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        said = ", ".join(f"{k} {v}" for k, v in sorted(r["verdicts"].items()))
        lines.append(f"| {r['device']} ({r['chip_class']}) | {said} | {r['launches_per_arm']:.1f} | "
                     f"{r['prepare_min']:.1f} | {r['settle_min']:.1f} | {r['launch_min']:.1f} | {r['measured_min']:.1f} | "
                     f"{r['retry_min']:.1f} | {r['total_min']:.1f} | {100 * r['settle_share']:.0f}% | "
                     f"{r['median_settle_wait_s']:.0f} |")
    (out / "device_time.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
