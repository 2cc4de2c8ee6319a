"""Host devices through the real `harness` CLI: locally, over SSH loopback, and through `orch agent`."""

from __future__ import annotations

import asyncio
import os
import stat
from pathlib import Path

import pytest
from conftest import MODEL, ORCH
from sshd import Sshd

from orchestrator.config import Fleet
from orchestrator.devices import open_device
from orchestrator.devices.base import Device
from orchestrator.devices.contract import check_device_contract, contract_spec
from orchestrator.protocol import TrialResult
from orchestrator.protocol.device import Artifacts, DeviceUnavailable, TrialFailure


def fleet(sshd: Sshd | None, tmp_path: Path, **device: object) -> Fleet:
    hosts = [sshd.host(orch_command=ORCH).model_dump()] if sshd else []
    dev = {"id": "box", "kind": "host", "workdir": str(tmp_path / "work dir"), **device}
    return Fleet.model_validate({"hosts": hosts, "devices": [dev]})


def contract(device: Device) -> None:
    asyncio.run(check_device_contract(device, engine="rawloop-cpu", model=MODEL))


def test_contract_host_local(harness: Path, tmp_path: Path) -> None:
    contract(open_device(fleet(None, tmp_path), "box")[0])


def test_contract_host_over_ssh(harness: Path, sshd: Sshd, tmp_path: Path) -> None:
    device, _ = open_device(fleet(sshd, tmp_path, host="loop", harness=str(harness)), "box")
    assert type(device).__name__ == "HostDevice"
    contract(device)
    assert (tmp_path / "work dir" / "bin" / "harness").read_bytes() == harness.read_bytes()


def test_contract_host_through_the_agent_over_ssh(harness: Path, sshd: Sshd, tmp_path: Path) -> None:
    device, _ = open_device(fleet(sshd, tmp_path, host="loop", harness=str(harness), via="agent"), "box")
    assert type(device).__name__ == "AgentDevice"
    contract(device)
    # the interference check's counters come from the agent's host, its own process tree counted as its own
    device, _ = open_device(fleet(sshd, tmp_path, host="loop", harness=str(harness), via="agent"), "box")
    first = asyncio.run(device.cpu_sample())
    assert first is not None and first.cpus >= 1 and first.own_s > 0 and first.others, first


def fake_harness(tmp_path: Path, body: str) -> Path:
    """A stand-in binary for the faults a real harness cannot be asked to produce on cue."""
    path = tmp_path / "fake harness"
    path.write_text('#!/bin/sh\nif [ "$1" = info ]; then echo "{}"; exit 0; fi\n' + body + "\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def one_trial(device: Device, timeout: float = 60) -> TrialResult | TrialFailure:
    async def go() -> TrialResult | TrialFailure:
        try:
            return await device.run_trial(contract_spec("rawloop-cpu", MODEL), timeout)
        finally:
            await device.close()

    return asyncio.run(go())


@pytest.mark.parametrize(("body", "kind", "words"), [
    ("kill -9 $$", "crashed", "signal 9"),
    ('printf "not json" > "$5"; echo "HARNESS_DONE contract-0000 $5"; exit 0', "bad_output", "invalid TrialResult"),
    ("exit 0", "bad_output", "no result file"),
    ('mkdir -p "$5"; echo "HARNESS_DONE contract-0000 $5"; exit 0', "bad_output", "result"),  # a directory there
    ("sleep 30", "hung", "killed"),
])
def test_harness_faults_are_typed(tmp_path: Path, sshd: Sshd, body: str, kind: str, words: str) -> None:
    fake = fake_harness(tmp_path, body)
    local, remote = fleet(None, tmp_path, harness=str(fake)), fleet(sshd, tmp_path, host="loop", harness=str(fake))
    for where in (local, remote):
        device, _ = open_device(where, "box")
        asyncio.run(device.prepare(Artifacts()))
        got = one_trial(device, timeout=2.0)
        assert isinstance(got, TrialFailure) and got.kind == kind, got
        assert words in got.message + (got.detail or ""), got


def test_missing_harness_binary_is_a_typed_health_problem(tmp_path: Path, sshd: Sshd) -> None:
    device, _ = open_device(fleet(sshd, tmp_path, host="loop", harness=str(tmp_path / "nope")), "box")
    with pytest.raises(DeviceUnavailable) as exc:
        asyncio.run(device.prepare(Artifacts()))
    assert exc.value.state == "harness_missing" and exc.value.fix


def test_wrong_host_key_is_a_health_state_and_a_disconnected_trial(tmp_path: Path, sshd: Sshd) -> None:
    (tmp_path / "empty").write_text("")
    f = Fleet.model_validate({
        "hosts": [sshd.host(known_hosts=str(tmp_path / "empty")).model_dump()],
        "devices": [{"id": "box", "kind": "host", "host": "loop", "harness": "/bin/true"}],
    })
    health = asyncio.run(open_device(f, "box")[0].health())
    assert health.state == "host_key_rejected" and health.fix and "ssh-keyscan" in health.fix
    trial = one_trial(open_device(f, "box")[0])
    assert isinstance(trial, TrialFailure) and trial.kind == "disconnected"


def _kill_harness_run(workdir: Path) -> bool:
    """Kill the `harness run` whose spec lies under this test's workdir (and no other)."""
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if cmd[0].endswith(b"/harness") and cmd[1:2] == [b"run"] and str(workdir).encode() in cmd[3]:
            os.kill(int(pid), 9)
            return True
    return False


def test_harness_killed_mid_trial_is_crashed(harness: Path, tmp_path: Path) -> None:
    device, _ = open_device(fleet(None, tmp_path), "box")
    long = contract_spec("rawloop-cpu", MODEL, prompt_tokens=16, decode_tokens=100, warm_repetitions=200)

    async def go() -> TrialResult | TrialFailure:
        task = asyncio.ensure_future(device.run_trial(long, 120))
        while not task.done() and not _kill_harness_run(tmp_path / "work dir"):
            await asyncio.sleep(0.002)
        return await task

    outcome = asyncio.run(go())
    assert isinstance(outcome, TrialFailure) and outcome.kind == "crashed", outcome
