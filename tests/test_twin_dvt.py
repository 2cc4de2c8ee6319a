"""DVT process control on the twin through unmodified pymobiledevice3: a launch runs the app's real
executable with the exact arguments sent, output and termination come back over DTX, kill and pid
checks act on the real process, and deaths leave the crash reports a phone writes."""

from __future__ import annotations

import asyncio
import json
import logging
import re
from pathlib import Path
from typing import Any

import pytest
from pymobiledevice3 import exceptions as pmd_exc
from pymobiledevice3.dtx import DTXNsError
from pymobiledevice3.services.crash_reports import CrashReportsManager
from pymobiledevice3.services.dvt.instruments.device_info import DeviceInfo
from pymobiledevice3.services.dvt.instruments.dvt_provider import DvtProvider
from pymobiledevice3.services.dvt.instruments.process_control import ProcessControl
from pymobiledevice3.services.house_arrest import HouseArrestService
from pymobiledevice3.services.installation_proxy import InstallationProxyService
from twin_support import BUNDLE, STAND_IN_MODEL, app_ipa, running_twin, with_developer, with_lockdown

from orchestrator.devices.contract import contract_spec

TERMINATED = re.compile(r"Process with PID (\d+) terminated with exit code (\S+) or crashing signal (\S+)")


async def _install(client: Any, ipa: Path) -> None:
    async with InstallationProxyService(lockdown=client) as proxy:
        await proxy.install_from_local(ipa)


async def _launch_and_wait(client: Any, arguments: list[str], *, timeout: float = 20,
                           kill_after: float | None = None) -> tuple[int, list[str], list[dict[str, Any]]]:
    """Launch, collect output until the pid is gone; returns (pid, output, process list while it ran)."""
    async with DvtProvider(client) as dvt, ProcessControl(dvt) as pc, DeviceInfo(dvt) as di:
        output: list[str] = []

        async def pump() -> None:
            async for event in pc:
                output.append(event.message)

        reader = asyncio.create_task(pump())
        pid = await pc.launch(BUNDLE, arguments=arguments)
        procs = await di.proclist()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        if kill_after is not None:
            await asyncio.sleep(kill_after)
            assert await di.is_running_pid(pid)
            await pc.kill(pid)
        while await di.is_running_pid(pid):
            assert loop.time() < deadline, "the app did not exit"
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.2)  # the termination notice and last output are on their way
        reader.cancel()
        return pid, output, procs


@pytest.fixture(autouse=True)
def _notices(caplog: Any, monkeypatch: Any) -> None:
    """Termination notices are only logged by pymobiledevice3: capture them, past any filter (the
    iphone backend installs one that consumes them) left on those loggers by earlier tests."""
    name = "pymobiledevice3.services.dvt.instruments.process_control"
    for logger in (logging.getLogger(name), logging.getLogger(name + ".dtx")):
        monkeypatch.setattr(logger, "filters", [])
    caplog.set_level(logging.WARNING, logger=name)


def _terminations(caplog: Any) -> dict[int, tuple[str, str]]:
    found = {}
    for record in caplog.records:
        m = TERMINATED.search(record.getMessage())
        if m:
            found[int(m.group(1))] = (m.group(2), m.group(3))
    return found


async def _documents(client: Any, name: str) -> bytes:
    async with await HouseArrestService.create(client, BUNDLE, documents_only=True) as box:
        return bytes(await box.get_file_contents(f"/Documents/{name}"))


@pytest.mark.parametrize("ios", ["16.7", "18.2"])  # DVT over lockdown; over RSD (dtservicehub)
def test_launch_runs_the_executable_with_the_exact_arguments(tmp_path: Path, caplog: Any, ios: str) -> None:
    args = ["--say", "hello from the app", "--spec", "specs/t1.json", "--out", "results/t1.json"]
    with running_twin(tmp_path, ios=ios, low_power=True) as twin:
        with_lockdown(twin, tmp_path, lambda c: _install(c, app_ipa(tmp_path)))

        async def push_spec(client: Any) -> None:
            async with await HouseArrestService.create(client, BUNDLE) as box:
                await box.makedirs("/Documents/specs")
                spec = contract_spec("rawloop-cpu", STAND_IN_MODEL, "t1")
                await box.set_file_contents("/Documents/specs/t1.json", spec.model_dump_json().encode())
                await box.makedirs("/Documents/models")
                await box.set_file_contents(f"/Documents/{STAND_IN_MODEL}", b"GGUF")

        with_lockdown(twin, tmp_path, push_spec)
        pid, output, procs = with_developer(twin, tmp_path, lambda c: _launch_and_wait(c, args))
        launch = json.loads(with_lockdown(twin, tmp_path, lambda c: _documents(c, "launch.json")))
        result = json.loads(with_lockdown(twin, tmp_path, lambda c: _documents(c, "results/t1.json")))
        container = str(twin.phone.apps.container(twin.phone.apps.apps[BUNDLE]))
        executable = str(twin.phone.apps.executable(twin.phone.apps.apps[BUNDLE]))
    assert launch["argv"] == [executable, "app", "--container", container, "--", *args]
    assert launch["env"]["HARNESS_THERMAL_STATE"] == "nominal" and launch["env"]["HARNESS_LOW_POWER"] == "1"
    assert (result["trial_id"], result["status"], result["thermal"][0]["state"]) == ("t1", "ok", "nominal")
    text = "".join(output)
    assert "hello from the app\n" in text and f"HARNESS_DONE t1 {container}/Documents/results/t1.json" in text
    assert any(p["pid"] == pid and p["bundleIdentifier"] == BUNDLE for p in procs)
    assert _terminations(caplog)[pid] == ("0", "0")


def test_exit_code_kill_and_pid_checks(tmp_path: Path, caplog: Any) -> None:
    with running_twin(tmp_path) as twin:
        with_lockdown(twin, tmp_path, lambda c: _install(c, app_ipa(tmp_path)))
        exited, _, _ = with_developer(twin, tmp_path, lambda c: _launch_and_wait(c, ["--exit", "3"]))
        killed, _, _ = with_developer(twin, tmp_path, lambda c: _launch_and_wait(c, ["--sleep", "30"], kill_after=0.3))
        reports = list((tmp_path / "twin" / "CrashReports.pending").iterdir())
    got = _terminations(caplog)
    assert got[exited] == ("3", "0") and got[killed] == ("0", "9")
    assert reports == [], "a kill from the host leaves no crash report"


def test_a_suspended_launch_waits_for_resume(tmp_path: Path) -> None:
    async def body(provider: Any) -> tuple[str, str, list[str]]:
        async with DvtProvider(provider) as dvt, ProcessControl(dvt) as pc, DeviceInfo(dvt) as di:
            output: list[str] = []

            async def pump() -> None:
                async for event in pc:
                    output.append(event.message)

            reader = asyncio.create_task(pump())
            pid = await pc.launch(BUNDLE, arguments=["--say", "resumed"], start_suspended=True)
            await asyncio.sleep(0.3)
            stopped = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
            await pc.resume(pid)
            while await di.is_running_pid(pid):
                await asyncio.sleep(0.05)
            await asyncio.sleep(0.2)
            reader.cancel()
            return stopped, "".join(output), []

    with running_twin(tmp_path) as twin:
        with_lockdown(twin, tmp_path, lambda c: _install(c, app_ipa(tmp_path)))
        state, output, _ = with_developer(twin, tmp_path, body)
    assert state == "T" and output == "resumed\n"


async def _flushed_reports(client: Any, match: str) -> list[Any]:
    manager = CrashReportsManager(client)
    try:
        await manager.flush()
        return await manager.parse_latest(match=[match], count=5)
    finally:
        await manager.aclose()


async def _listed(client: Any) -> list[str]:
    manager = CrashReportsManager(client)
    try:
        return await manager.ls("/")
    finally:
        await manager.aclose()


def test_death_by_signal_writes_an_ips_the_mover_brings_out(tmp_path: Path, caplog: Any) -> None:
    with running_twin(tmp_path, crash_report_delay_s=60) as twin:
        with_lockdown(twin, tmp_path, lambda c: _install(c, app_ipa(tmp_path)))
        pid, output, _ = with_developer(twin, tmp_path, lambda c: _launch_and_wait(c, ["--signal", "SIGSEGV"]))
        before = with_lockdown(twin, tmp_path, _listed)
        [report] = with_lockdown(twin, tmp_path, lambda c: _flushed_reports(c, r"^HarnessApp-"))
    assert _terminations(caplog)[pid] == ("0", "11")
    assert before == [], "pending until the mover runs (or the delay passes)"
    assert report.name == "HarnessApp" and report.exception_type == "EXC_BAD_ACCESS"
    assert "Fatal error: about to die" in json.dumps(report.application_specific_information)
    assert "Fatal error: about to die" in "".join(output)


def test_over_the_memory_limit_jetsam_kills_and_reports(tmp_path: Path, caplog: Any) -> None:
    with running_twin(tmp_path, memory_limit_mb=64, memory_poll_s=0.02) as twin:
        with_lockdown(twin, tmp_path, lambda c: _install(c, app_ipa(tmp_path, increased_memory=False)))
        pid, _, _ = with_developer(twin, tmp_path, lambda c: _launch_and_wait(c, ["--alloc", "200", "--sleep", "20"]))
        [report] = with_lockdown(twin, tmp_path, lambda c: _flushed_reports(c, r"^JetsamEvent-"))
        crashes = list((tmp_path / "twin" / "CrashReports").glob("HarnessApp-*"))
    assert _terminations(caplog)[pid] == ("0", "9")
    assert report.bug_type_str == "298" and crashes == []
    body = report._data
    assert body["largestProcess"] == "HarnessApp"
    assert body["processes"][0]["reason"] == "per-process-limit" and body["processes"][0]["pid"] == pid


def test_launch_refused_as_a_phone_refuses(tmp_path: Path) -> None:
    async def launch(client: Any, bundle: str) -> int:
        async with DvtProvider(client) as dvt, ProcessControl(dvt) as pc:
            return int(await pc.launch(bundle))

    with running_twin(tmp_path) as twin:
        with pytest.raises(DTXNsError, match="FBSApplicationLibrary"):
            with_developer(twin, tmp_path, lambda c: launch(c, "dev.orch.absent"))
        with_lockdown(twin, tmp_path, lambda c: _install(c, app_ipa(tmp_path)))
        twin.call(lambda p: setattr(p, "locked", True))  # services still start; SpringBoard will not launch
        with pytest.raises(DTXNsError, match="Locked"):
            with_developer(twin, tmp_path, lambda c: launch(c, BUNDLE))
        twin.call(lambda p: setattr(p, "locked", False))
        twin.call(lambda p: setattr(p, "ddi_mounted", False))
        with pytest.raises(pmd_exc.InvalidServiceError):  # over RSD: dtservicehub is not advertised
            with_developer(twin, tmp_path, lambda c: launch(c, BUNDLE))


@pytest.mark.parametrize(("ios", "policy", "served"), [
    ("18.2", "as-ios", False), ("18.2", "always", True), ("16.7", "as-ios", True)])  # served over RSD too
def test_dvt_over_lockdown_by_version(tmp_path: Path, ios: str, policy: str, served: bool) -> None:
    async def connect(client: Any) -> bool:
        async with DvtProvider(client) as dvt, DeviceInfo(dvt) as di:
            return bool(await di.proclist())

    with running_twin(tmp_path, ios=ios, developer_over_lockdown=policy) as twin:
        if served:
            assert with_lockdown(twin, tmp_path, connect)
        else:
            with pytest.raises(pmd_exc.InvalidServiceError):
                with_lockdown(twin, tmp_path, connect)
