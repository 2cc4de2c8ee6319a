"""A session against devices that break their contract: the run goes on, the faults become data."""

from __future__ import annotations

import asyncio

from conftest import fleet_of, plan_with, sim_device

from orchestrator import core
from orchestrator.clock import VirtualClock
from orchestrator.devices import FakeDevice, open_device
from orchestrator.devices.base import Device
from orchestrator.protocol import TrialResult, TrialSpec
from orchestrator.protocol.device import Telemetry
from orchestrator.results import MemoryJournal
from orchestrator.results.records import SessionStopped, TrialRecord
from orchestrator.schedule import SessionState, run_sessions


def raising(spec: TrialSpec) -> TrialResult:
    raise RuntimeError("backend bug")


class BrokenTelemetry(FakeDevice):
    async def telemetry(self) -> Telemetry:
        raise KeyError("battery")


def run_with(broken: Device) -> list[object]:
    fleet = fleet_of(sim_device("good"), sim_device("bad", seed=9))
    plan = plan_with(settle={"min_gap_s": 0, "flat_window_s": 0, "timeout_s": 30})
    manifest = core.new_manifest(fleet, plan, __file__, __file__)  # type: ignore[arg-type]
    journal = MemoryJournal()

    def open_(device_id: str):  # type: ignore[no-untyped-def]
        return (broken, VirtualClock()) if device_id == "bad" else open_device(fleet, device_id)

    reasons = asyncio.run(run_sessions(manifest, journal, open_, {s.device: SessionState() for s in manifest.sessions}))
    assert reasons["good"] == "completed", "the healthy device is not affected"
    return journal.records


def test_a_raising_run_trial_becomes_a_typed_failure() -> None:
    records = run_with(FakeDevice("bad", raising))
    bad = [r for r in records if isinstance(r, TrialRecord) and r.device == "bad"]
    assert bad and all(r.failure is not None and r.failure.kind == "launch_failed" for r in bad)
    assert "backend raised RuntimeError: backend bug" in bad[0].failure.message  # type: ignore[union-attr]
    stop = next(r for r in records if isinstance(r, SessionStopped) and r.device == "bad")
    assert stop.reason == "too_many_failures"
    assert stop.detail.endswith("in a row failed; last: launch_failed: " + bad[-1].failure.message)  # type: ignore[union-attr]


def test_raising_telemetry_reads_as_an_unavailable_device() -> None:
    records = run_with(BrokenTelemetry("bad", lambda spec: None))  # type: ignore[arg-type,return-value]
    stop = next(r for r in records if isinstance(r, SessionStopped) and r.device == "bad")
    assert stop.reason == "device_unavailable"


class BrokenInfo(FakeDevice):
    async def info(self):  # type: ignore[no-untyped-def]
        raise ValueError("garbled identity")


def test_a_session_that_crashes_stops_alone_with_the_reason() -> None:
    records = run_with(BrokenInfo("bad", lambda spec: None))  # type: ignore[arg-type,return-value]
    stop = next(r for r in records if isinstance(r, SessionStopped) and r.device == "bad")
    assert stop.reason == "backend_error" and "ValueError: garbled identity" in stop.detail
