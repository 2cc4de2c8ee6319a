"""Controller benchmarks on the simulated lab (run on demand: `make bench`; not a test).

1. Controller overhead per simulated trial: wall time per trial of the scheduler, settle gate,
   journal (fsynced) and records, minus the time spent inside the simulated device's own calls.
2. 256 simulated devices x 80 trials each, the whole `orch run` path: wall time.

Writes bench/results/controller.md and .json.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from orchestrator import core  # noqa: E402
from orchestrator.config import Fleet, Plan  # noqa: E402
from orchestrator.derive import derive  # noqa: E402
from orchestrator.devices import open_device  # noqa: E402
from orchestrator.devices.base import Device  # noqa: E402
from orchestrator.results import Journal  # noqa: E402
from orchestrator.results.records import TrialRecord  # noqa: E402
from orchestrator.schedule import SessionState, run_sessions  # noqa: E402


def fleet(n: int) -> Fleet:
    return Fleet.model_validate({"name": "bench", "devices": [
        {"id": f"sim{i:03d}", "kind": "sim", "chip_class": "A19 Pro", "seed": i, "bandwidth_gb_s": 60,
         "runtimes": {"coreai": {"decode_tok_s": 36.5}, "rawloop-metal": {"decode_tok_s": 55.0}},
         "faults": {"crash": 0.01}}
        for i in range(n)
    ]})


def plan(blocks: int) -> Plan:
    return Plan.model_validate({
        "name": "bench", "model": "m", "blocks": blocks,
        "arms": [{"name": "engine", "runtime": "coreai"}, {"name": "rawloop", "runtime": "rawloop-metal"}],
        "trial": {"prompt_tokens": 64, "decode_tokens": 128},
    })


class Timed(Device):
    """Wraps a device and adds up the wall time spent inside it."""

    def __init__(self, inner: Device):
        self.inner, self.id, self.spent = inner, inner.id, 0.0

    async def _t(self, coro: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return await coro
        finally:
            self.spent += time.perf_counter() - t0

    async def info(self):  # type: ignore[no-untyped-def]
        return await self._t(self.inner.info())

    async def prepare(self, artifacts, progress=None):  # type: ignore[no-untyped-def]
        return await self._t(self.inner.prepare(artifacts, progress))

    async def telemetry(self):  # type: ignore[no-untyped-def]
        return await self._t(self.inner.telemetry())

    async def run_trial(self, spec, timeout):  # type: ignore[no-untyped-def]
        return await self._t(self.inner.run_trial(spec, timeout))


def overhead(tmp: Path, trials: int = 400) -> dict[str, float]:
    f, p = fleet(1), plan(trials // 4)
    manifest = core.new_manifest(f, p, Path("bench"), Path("bench"))
    journal = Journal(tmp / "overhead.jsonl")
    device: list[Timed] = []
    marks: list[tuple[float, float]] = []

    def open_timed(d: str):  # type: ignore[no-untyped-def]
        inner, clock = open_device(f, d)
        device.append(Timed(inner))
        return device[0], clock

    def observe(_: str, record: object) -> None:
        if isinstance(record, TrialRecord):
            marks.append((time.perf_counter(), device[0].spent))

    asyncio.run(run_sessions(manifest, journal, open_timed, {"sim000": SessionState()}, observe=observe))
    journal.close()
    total = [b[0] - a[0] for a, b in itertools.pairwise(marks)]
    ctrl = [(b[0] - a[0]) - (b[1] - a[1]) for a, b in itertools.pairwise(marks)]
    return {
        "trials": len(marks),
        "controller_ms_median": statistics.median(ctrl) * 1e3,
        "controller_ms_p90": statistics.quantiles(ctrl, n=10)[-1] * 1e3,
        "with_sim_ms_median": statistics.median(total) * 1e3,
    }


def fleet_run(tmp: Path, devices: int = 256, blocks: int = 20) -> dict[str, float]:
    f, p = fleet(devices), plan(blocks)
    t0 = time.perf_counter()
    run = core.start_run(core.new_manifest(f, p, Path("bench"), Path("bench")), tmp / "results")
    outcome = asyncio.run(core.execute(run))
    wall = time.perf_counter() - t0
    t1 = time.perf_counter()
    derive(run)
    return {
        "devices": devices, "trials": len(outcome.trials), "wall_s": wall,
        "derive_s": time.perf_counter() - t1,
        "journal_mb": run.journal_path.stat().st_size / 1e6,
    }


def main() -> None:
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        o = overhead(tmp)
        r = fleet_run(tmp)
    figures = {"overhead": o, "fleet": r, "machine": f"{platform.machine()}, {platform.python_version()}",
               "date": time.strftime("%Y-%m-%d")}
    out = ROOT / "bench" / "results"
    out.mkdir(parents=True, exist_ok=True)
    (out / "controller.json").write_text(json.dumps(figures, indent=2) + "\n")
    md = f"""# Controller benchmark ({figures['date']}, {figures['machine']})

Command: `make bench` (= `.venv/bin/python bench/bench_controller.py`)

| measure | goal | measured |
|---|---|---|
| controller overhead per simulated trial, median (excl. time inside the sim device) | < 1 ms | {o['controller_ms_median']:.3f} ms (p90 {o['controller_ms_p90']:.3f} ms; with the sim's own work {o['with_sim_ms_median']:.3f} ms; {o['trials']:.0f} trials, journal fsynced) |
| {r['devices']:.0f} simulated devices x 80 trials, whole run incl. verdicts and parquet | < 30 s | {r['wall_s']:.1f} s wall ({r['trials']:.0f} trials; journal {r['journal_mb']:.0f} MB; re-deriving tables alone {r['derive_s']:.1f} s) |
"""
    (out / "controller.md").write_text(md)
    print(md)


if __name__ == "__main__":
    main()
