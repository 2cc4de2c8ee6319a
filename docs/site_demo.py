"""Make the published site's screenshots in docs/: fourteen simulated nights, then `orch publish`.

The candidate build loses 6% from night 9 on the iPhone (its ground truth says so), seen by two
configs from night 3 on; the Mac stays level. Each night gets its own simulator seed. Needs
chromium (Debian: apt-get install chromium; make test installs it).

Then three captured outputs of other tools (tests/data/imports) are imported into the same history,
as measured on the Mac: the overview shows them in their own section.

    .venv/bin/python docs/site_demo.py      # writes docs/site-overview.png, site-series.png, site-imported.png
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from demo_lab import nightly_lab  # noqa: E402

from orchestrator.config.candidates import load_ceilings  # noqa: E402
from orchestrator.night import run_night  # noqa: E402
from orchestrator.report.site import publish  # noqa: E402
from orchestrator.results.imports import import_files  # noqa: E402

NIGHTS, SLOW_FROM = 14, 9


def fleet(night: int) -> dict[str, object]:
    return nightly_lab(night, NIGHTS, slow_from=SLOW_FROM)


def shoot(chromium: str, page: Path, png: Path, height: int) -> None:
    subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                    f"--window-size=1280,{height}", "--virtual-time-budget=5000", f"--screenshot={png}",
                    page.as_uri()], check=True, capture_output=True, timeout=120)


def main() -> None:
    tmp = Path(tempfile.mkdtemp(prefix="orch-site-"))
    text = (ROOT / "configs" / "plans" / "nightly.yaml").read_text().replace(
        "devices: [iphone17pro]", "devices: [iphone17pro, mac-m4]")
    plans = [tmp / "nightly.yaml", tmp / "prefill.yaml"]
    plans[0].write_text(text)
    plans[1].write_text(text.replace("name: nightly-decode", "name: nightly-prefill"))
    results = tmp / "results"
    for night in range(1, NIGHTS + 1):
        f = tmp / f"fleet-{night}.yaml"
        f.write_text(json.dumps(fleet(night)))
        outcome = asyncio.run(run_night(f, plans[:1] if night < 3 else plans, reference="ref",
                                        candidate=f"n{night:02d}", night=f"2026-11-{night:02d}", results=results,
                                        history=results / "history"))
        print(f"night {night}: " + ", ".join(f"{r['config']}/{r['device']} {r['status']}"
                                              for r in outcome.summary.tonight.to_dict("records")))
    os.chdir(ROOT)  # the files' paths as the site names them: relative to the repository
    captured = Path("tests") / "data" / "imports"
    stamp = datetime(2026, 11, NIGHTS, 7, 0, tzinfo=UTC)
    import_files([captured / "llama-bench.json", captured / "mlx-lm-benchmark.txt"], results / "history",
                 lambda: stamp, model="llama-m110-s0", device="mac-m4")
    # The second: a run LiteRT-LM reported as failed (and exited 0), listed as failed.
    import_files([captured / "litert-lm-benchmark.txt", captured / "litert-lm-missing-model.txt"],
                 results / "history", lambda: stamp, device="mac-m4")
    site = tmp / "site"
    publish(results, results / "history", site, load_ceilings(ROOT / "configs" / "ceilings.yaml"))
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        sys.exit(f"site at {site / 'index.html'}; no chromium to take the screenshots")
    shoot(chromium, site / "index.html", ROOT / "docs" / "site-overview.png", 560)
    shoot(chromium, site / "config" / "nightly-decode.html", ROOT / "docs" / "site-series.png", 1000)
    imported = site / "imported.html"  # the index scrolled to the imported section (a screenshot has no scroll)
    imported.write_text((site / "index.html").read_text().replace('<h1>orch: the morning view</h1>', '', 1)
                        .replace('id="overview"', 'id="overview" style="display:none"', 1))
    shoot(chromium, imported, ROOT / "docs" / "site-imported.png", 640)
    print(f"wrote docs/site-overview.png, docs/site-series.png and docs/site-imported.png (from {site})")


if __name__ == "__main__":
    main()
