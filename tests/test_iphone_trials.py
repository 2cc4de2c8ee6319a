"""Trials on a fake phone: every fault comes back as a typed TrialFailure, and nothing leaves Documents/.

Moved to the twin (tests/test_twin_trials.py): a stale result, a crash report written after the
death, a jetsam kill, a hang, a missing disk image; locked and unplugged (typed while unplugged,
reconnected after) moved to test_twin_backend.py, where a crash runs too.
Spec push and clean-up, telemetry and engine apps moved to tests/test_twin_engine_apps.py.
Still here: faults the twin does not produce on demand (a result that is garbage or a directory, a
lost termination notice, a refused service, a tunnel that cannot open, a crash report with a
backtrace, DVT calls counted while a trial runs, the app crashing while it answers a thermal probe).
The fake app opens its model as the real one does: relative to Documents, where `on_phone` puts one."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from iphone_fakes import HARNESS, FakePhone, make_device

from orchestrator.devices.contract import contract_spec
from orchestrator.protocol import TrialResult, TrialSpec
from orchestrator.protocol.device import Artifacts, TrialFailure

MODEL = "models/tiny.gguf"  # relative to Documents, as prepare's push names it


def spec(trial_id: str = "phone-0001", **over: Any) -> TrialSpec:
    return contract_spec("rawloop-metal", MODEL, trial_id, **over)


def on_phone(tmp_path: Path, body: Callable[[Any, FakePhone, Any], Awaitable[None]], **cfg: Any) -> FakePhone:
    phone = FakePhone()

    async def main() -> None:
        device, connector = make_device(phone, tmp_path, **cfg)
        await device.prepare(Artifacts())
        phone.containers[HARNESS].write(f"/Documents/{MODEL}", b"GGUF")
        try:
            await body(device, phone, connector)
        finally:
            await device.close()

    asyncio.run(main())
    return phone


def test_crash_reads_the_crash_report(tmp_path: Path, capfd: Any) -> None:
    async def body(device: Any, phone: FakePhone, _c: Any) -> None:
        phone.modes[HARNESS] = "crash"
        failure = await device.run_trial(spec(), 30)
        assert isinstance(failure, TrialFailure) and failure.kind == "crashed", failure
        assert "signal 11" in failure.message
        assert failure.detail and "EXC_BAD_ACCESS" in failure.detail and "RawLoop.decodeStep" in failure.detail
        phone.modes[HARNESS] = "exit0"  # the same report is not blamed for the next launch
        again = await device.run_trial(spec("phone-0002"), 30)
        assert isinstance(again, TrialFailure) and "EXC_BAD_ACCESS" not in (again.detail or "")

    on_phone(tmp_path, body)
    assert "terminated with exit code" not in capfd.readouterr().err, "the termination notice is data, not noise"


def test_garbage_result_is_bad_output(tmp_path: Path) -> None:
    async def body(device: Any, phone: FakePhone, _c: Any) -> None:
        phone.modes[HARNESS] = "garbage"
        failure = await device.run_trial(spec(), 30)
        assert isinstance(failure, TrialFailure) and failure.kind == "bad_output", failure
        assert "invalid TrialResult" in failure.message

    on_phone(tmp_path, body)


def test_a_result_that_is_a_directory_is_bad_output(tmp_path: Path) -> None:
    async def body(device: Any, phone: FakePhone, _c: Any) -> None:
        phone.per_token_s = 0.05  # slow enough for the directory to appear first
        launched = asyncio.get_running_loop().create_task(device.run_trial(spec(), 30))
        while not phone.launches:
            await asyncio.sleep(0.001)
        phone.containers[HARNESS].makedirs("/Documents/results/phone-0001.json")
        failure = await launched
        assert isinstance(failure, TrialFailure) and failure.kind == "bad_output" and "S_IFDIR" in failure.message

    on_phone(tmp_path, body)


def test_unsafe_ids_never_become_paths(tmp_path: Path) -> None:
    async def body(device: Any, phone: FakePhone, _c: Any) -> None:
        for bad in ("../../Library/x", "a/b", ".hidden", ""):
            evil = TrialSpec.model_construct(**{**spec().model_dump(), "trial_id": bad})
            failure = await device.run_trial(evil, 30)
            assert isinstance(failure, TrialFailure) and failure.kind == "launch_failed", (bad, failure)
        evil_run = TrialSpec.model_construct(**{**spec().model_dump(), "run_id": "../x"})
        assert isinstance(await device.run_trial(evil_run, 30), TrialFailure)
        assert phone.launches == []

    phone = on_phone(tmp_path, body)
    assert all(p == "/Documents" or p.startswith("/Documents/") for p in phone.containers[HARNESS].seen)


def test_thermal_probe_launch(tmp_path: Path) -> None:
    async def body(device: Any, phone: FakePhone, _c: Any) -> None:
        phone.thermal = "serious"
        reading = await device.telemetry()
        assert (reading.thermal_state, reading.low_power) == ("serious", False) and reading.unavailable == []
        assert phone.launches[-1][1][:2] == ["--probe", "thermal"]
        phone.modes[HARNESS] = "crash"
        broken = await device.telemetry()
        assert broken.thermal_state is None and "thermal_state" in broken.unavailable

    on_phone(tmp_path, body, thermal_probe=True)


def test_a_tunnel_that_cannot_open_is_launch_failed_with_its_fix(tmp_path: Path) -> None:
    from orchestrator.protocol.device import DeviceUnavailable

    async def body(device: Any, phone: FakePhone, connector: Any) -> None:
        connector.tunnel_error = DeviceUnavailable("in use", fix="set `tunnel: tunneld`", state="tunnel_unavailable")
        failure = await device.run_trial(spec(), 30)
        assert isinstance(failure, TrialFailure) and failure.kind == "launch_failed"
        assert failure.detail == "set `tunnel: tunneld`" and phone.launches == []

    on_phone(tmp_path, body)


def test_a_running_trial_is_not_disturbed_by_polling(tmp_path: Path) -> None:
    """While the app runs the host listens (sentinel, termination notice) and reads nothing from the
    phone's disk; the only call is isRunningPid, once per poll_s (here very short, to count them)."""
    async def body(device: Any, phone: FakePhone, _c: Any) -> None:
        phone.per_token_s = 0.1  # a trial of a second or more
        fs = phone.containers[HARNESS]
        launched = asyncio.get_running_loop().create_task(device.run_trial(spec(), 30))
        while not phone.running:
            await asyncio.sleep(0.001)
        await asyncio.sleep(0.05)
        looks, checks = len(fs.seen), phone.liveness_checks
        await asyncio.sleep(0.4)  # the app is still running
        assert phone.running and len(fs.seen) == looks, fs.seen[looks:]
        assert phone.liveness_checks - checks <= 0.4 / 0.05 + 1
        assert isinstance(await launched, TrialResult)

    on_phone(tmp_path, body, poll_s=0.05)


def test_an_app_that_dies_silently_is_noticed_by_the_liveness_check(tmp_path: Path) -> None:
    """No termination notice (a lost DVT message): the isRunningPid check every poll_s still ends the wait."""
    async def body(device: Any, phone: FakePhone, _c: Any) -> None:
        phone.modes[HARNESS], phone.termination_notices = "exit0", False
        failure = await device.run_trial(spec(), 30)
        assert isinstance(failure, TrialFailure) and failure.kind == "crashed", failure
        assert phone.liveness_checks >= 1

    on_phone(tmp_path, body, poll_s=0.05)


def test_a_refused_house_arrest_is_not_blamed_on_the_disk_image(tmp_path: Path) -> None:
    """Only a developer service refusing to start means the developer disk image is missing."""
    async def body(device: Any, phone: FakePhone, _c: Any) -> None:
        phone.refused = {"com.apple.mobile.house_arrest"}
        failure = await device.run_trial(spec(), 30)
        assert isinstance(failure, TrialFailure) and failure.kind == "launch_failed", failure
        assert "mounter" not in (failure.detail or ""), failure
        phone.refused = {"com.apple.instruments.remoteserver.DVTSecureSocketProxy"}
        failure = await device.run_trial(spec("phone-0002"), 30)
        assert isinstance(failure, TrialFailure) and "mounter auto-mount" in (failure.detail or ""), failure

    on_phone(tmp_path, body)

