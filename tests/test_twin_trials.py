"""Trial faults through the iphone backend on the twin, moved here from the in-process fakes
(tests/test_iphone_trials.py) where the twin produces them for real: a stale result left by an earlier
attempt, a crash report ReportCrash writes only after the death, a jetsam kill with its
JetsamEvent report, a hang killed within its timeout, a launch without the developer disk image.
The stand-in app (twin_support) acts on per-trial arguments in Documents/stand-in.json."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pymobiledevice3.common
import pytest
from test_twin_backend import _device, _push
from twin_support import STAND_IN_MODEL, app_ipa, running_twin

from orchestrator.devices.contract import contract_spec
from orchestrator.devices.iphone import IphoneDevice
from orchestrator.protocol import TrialSpec
from orchestrator.protocol.device import Artifacts, TrialFailure
from orchestrator.twin import ThreadedTwin


@pytest.fixture(autouse=True)
def _pmd_home(tmp_path: Path, monkeypatch: Any) -> None:
    monkeypatch.setattr(pymobiledevice3.common, "_HOMEFOLDER", tmp_path / "pmd-home")


def spec(trial_id: str) -> TrialSpec:
    return contract_spec("rawloop-cpu", STAND_IN_MODEL, trial_id)


def on_twin(tmp_path: Path, plan: dict[str, list[str]], body: Callable[[IphoneDevice, ThreadedTwin], Awaitable[None]],
            **twin: Any) -> None:
    ipa = app_ipa(tmp_path, minimum_os="16.0", increased_memory=False)

    async def main(device: IphoneDevice, running: ThreadedTwin) -> None:
        await device.prepare(Artifacts())
        await _push(device, "/Documents/stand-in.json", json.dumps(plan).encode())
        await _push(device, f"/Documents/{STAND_IN_MODEL}", b"GGUF")
        try:
            await body(device, running)
        finally:
            await device.close()

    with running_twin(tmp_path, ios="16.7", **twin) as running:
        asyncio.run(main(_device(running, ipa), running))


def test_a_stale_result_from_an_earlier_attempt_never_counts(tmp_path: Path) -> None:
    async def body(device: IphoneDevice, _twin: ThreadedTwin) -> None:
        ok = await device.run_trial(spec("twin-0001"), 30)  # a real result to leave behind as a stale one
        stale = json.loads(ok.model_dump_json())
        stale["engine_version"] = "stale"
        await _push(device, "/Documents/results/twin-0002.json", json.dumps(stale | {"trial_id": "twin-0002"}).encode())
        failure = await device.run_trial(spec("twin-0002"), 30)  # this launch exits 0 without writing one
        assert isinstance(failure, TrialFailure) and failure.kind == "bad_output", failure
        assert "exit code 0" in failure.message

    on_twin(tmp_path, {"twin-0002": ["--exit", "0"]}, body)


def test_a_crash_report_written_after_the_death_is_still_found(tmp_path: Path) -> None:
    async def body(device: IphoneDevice, _twin: ThreadedTwin) -> None:
        failure = await device.run_trial(spec("twin-0001"), 30)
        assert isinstance(failure, TrialFailure) and failure.kind == "crashed", failure
        assert "signal 11" in failure.message and "EXC_BAD_ACCESS" in (failure.detail or ""), failure
        again = await device.run_trial(spec("twin-0002"), 30)  # the same report is not blamed for the next one
        assert isinstance(again, TrialFailure) and "EXC_BAD_ACCESS" not in (again.detail or ""), again

    on_twin(tmp_path, {"twin-0001": ["--signal", "SIGSEGV"], "twin-0002": ["--exit", "3"]}, body,
            crash_report_delay_s=1.2)


def test_a_memory_kill_says_so(tmp_path: Path) -> None:
    """Jetsam kills with SIGKILL and writes JetsamEvent-*.ips naming the process, not <Process>-*.ips."""
    async def body(device: IphoneDevice, _twin: ThreadedTwin) -> None:
        failure = await device.run_trial(spec("twin-0001"), 30)
        assert isinstance(failure, TrialFailure) and failure.kind == "crashed", failure
        assert "signal 9" in failure.message
        assert re.search(r"killed by the OS for memory \(jetsam reason: per-process-limit, \d+ MiB resident\)",
                         failure.detail or ""), failure
        again = await device.run_trial(spec("twin-0002"), 30)  # the same report is not blamed for the next one
        assert isinstance(again, TrialFailure) and "jetsam" not in (again.detail or ""), again

    on_twin(tmp_path, {"twin-0001": ["--alloc", "200", "--sleep", "20"], "twin-0002": ["--exit", "3"]}, body,
            memory_limit_mb=64, memory_poll_s=0.02, crash_report_delay_s=0.6)


def test_hang_is_killed_within_its_timeout(tmp_path: Path) -> None:
    async def body(device: IphoneDevice, twin: ThreadedTwin) -> None:
        loop = asyncio.get_running_loop()
        start = loop.time()
        failure = await device.run_trial(spec("twin-0001"), 0.5)
        assert isinstance(failure, TrialFailure) and failure.kind == "hung", failure
        assert 0.5 <= loop.time() - start < 3.0
        for _ in range(200):  # killed with SIGKILL: gone once the twin has reaped it
            if not twin.call(lambda phone: list(phone.processes.running)):
                break
            await asyncio.sleep(0.01)
        assert twin.call(lambda phone: list(phone.processes.running)) == [], "the hung app was killed"

    on_twin(tmp_path, {"twin-0001": ["--sleep", "30"]}, body)


def test_missing_disk_image_is_launch_failed_with_the_fix(tmp_path: Path) -> None:
    async def body(device: IphoneDevice, _twin: ThreadedTwin) -> None:
        failure = await device.run_trial(spec("twin-0001"), 30)
        assert isinstance(failure, TrialFailure) and failure.kind == "launch_failed", failure
        assert failure.detail and "mounter auto-mount" in failure.detail, failure

    on_twin(tmp_path, {}, body, ddi_mounted=False)
