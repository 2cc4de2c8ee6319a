"""A small lab's nights for the published site's tests: two simulated devices, one of which slows down.

The candidate build runs 12% slower than the reference on the iPhone from night SLOW_FROM on (its
simulated ground truth), so that night raises a one-night alarm; the Mac stays level.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from conftest import ROOT

from orchestrator.night import run_night

SLOW_FROM = 4


def fleet(night: int, nights: int) -> dict[str, object]:
    builds = {"ref": 1.0} | {f"n{k:02d}": 0.88 if k >= SLOW_FROM else 1.0 for k in range(1, nights + 1)}
    return {"name": "lab", "devices": [
        {"id": "iphone17pro", "kind": "sim", "model": "iPhone 17 Pro", "chip_class": "A19 Pro", "seed": 100 + night,
         "bandwidth_gb_s": 60, "runtimes": {"rawloop-metal": {"bytes_per_token": 783e6, "efficiency": 0.73,
                                                              "builds": builds}}},
        {"id": "mac-m4", "kind": "sim", "model": "Mac mini (M4)", "chip_class": "M4", "seed": 200 + night,
         "bandwidth_gb_s": 100, "noise": {"sigma": 0.03},
         "runtimes": {"rawloop-metal": {"bytes_per_token": 783e6, "efficiency": 0.8,
                                        "builds": dict.fromkeys(builds, 1.0)}}},
    ]}


def night_label(night: int) -> str:
    return f"2026-11-{night:02d}"


def make_nights(tmp: Path, results: Path, first: int, last: int, total: int = 6) -> list[str]:
    """Nights first..last of the lab into results (and results/history); the run ids, in order."""
    plan = tmp / "nightly.yaml"
    plan.write_text((ROOT / "configs" / "plans" / "nightly.yaml").read_text()
                    .replace("devices: [iphone17pro]", "devices: [iphone17pro, mac-m4]")
                    .replace("blocks: 20 ", "blocks: 8 "))
    run_ids = []
    for night in range(first, last + 1):
        f = tmp / f"fleet-{night}.yaml"
        f.write_text(json.dumps(fleet(night, total)))
        outcome = asyncio.run(run_night(f, [plan], reference="ref", candidate=f"n{night:02d}",
                                        night=night_label(night), results=results, history=results / "history"))
        run_ids += outcome.run_ids
    return run_ids
