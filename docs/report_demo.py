"""Make the report screenshot in docs/: twelve simulated nights, then `orch report` on the last one.

The candidate build loses 6% from night 8 on the iPhone (its ground truth says so); the iPhone
also crashes now and then, so the report shows failures kept as data. Each night gets its own
simulator seed, as real nights differ. Needs chromium (Debian: apt-get install chromium).

    .venv/bin/python docs/report_demo.py            # writes docs/report-screenshot.png
"""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from demo_lab import nightly_lab  # noqa: E402

from orchestrator.config.candidates import load_ceilings  # noqa: E402
from orchestrator.derive import derive  # noqa: E402
from orchestrator.night import run_night  # noqa: E402
from orchestrator.report.html import render  # noqa: E402
from orchestrator.results.store import RunDir  # noqa: E402

NIGHTS, SLOW_FROM = 12, 8


def fleet(night: int) -> dict[str, object]:
    return nightly_lab(night, NIGHTS, slow_from=SLOW_FROM, phone={"faults": {"crash": 0.04, "hang": 0.01}},
                       phone_runtime={"prefill_tok_s": {1: 72, 4: 94.7, 16: 300}},
                       mac={"thermal": {"idle_rise_c": 6, "heat_c_per_s": 0.05, "fair_c": 45, "serious_c": 55,
                                        "critical_c": 65}})


def _trim(png: Path) -> None:
    """Cut the blank page below the report (the headless window is taller than the page)."""
    from PIL import Image, ImageChops

    im = Image.open(png).convert("RGB")
    box = ImageChops.difference(im, Image.new("RGB", im.size, (255, 255, 255))).getbbox()
    if box:
        im.crop((0, 0, im.width, min(im.height, box[3] + 24))).save(png, optimize=True)


def main() -> None:
    tmp = Path(tempfile.mkdtemp(prefix="orch-demo-"))
    plan = tmp / "nightly.yaml"
    plan.write_text((ROOT / "configs" / "plans" / "nightly.yaml").read_text().replace(
        "devices: [iphone17pro]",
        "devices: [iphone17pro, mac-m4]\nretry: {max_attempts: 1, max_consecutive_failures: 20}"))
    results = tmp / "results"
    for night in range(1, NIGHTS + 1):
        f = tmp / f"fleet-{night}.yaml"
        f.write_text(json.dumps(fleet(night)))
        outcome = asyncio.run(run_night(f, [plan], reference="ref", candidate=f"n{night:02d}",
                                        night=f"2026-11-{night:02d}", results=results, history=results / "history"))
        status = ", ".join(f"{r['device']} {r['status']}" for r in outcome.summary.tonight.to_dict("records"))
        print(f"night {night}: {status}")
    run = RunDir(results / outcome.run_ids[-1])
    derived = derive(run, load_ceilings(ROOT / "configs" / "ceilings.yaml"))
    html, _ = render(derived, tmp / "report", results / "history")
    shot = ROOT / "docs" / "report-screenshot.png"
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        sys.exit(f"report at {html}; no chromium to take the screenshot")
    subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                    "--window-size=1240,5200", f"--screenshot={shot}", html.as_uri()], check=True,
                   capture_output=True, timeout=120)
    _trim(shot)
    shutil.copy(html, ROOT / "docs" / "report-example.html")
    print(f"wrote {shot} and docs/report-example.html (from {html})")


if __name__ == "__main__":
    main()
