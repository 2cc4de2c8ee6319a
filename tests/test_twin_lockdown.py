"""The twin's usbmuxd and lockdown, driven by unmodified pymobiledevice3 (its CLI and its API)."""

from __future__ import annotations

import json
import plistlib
import signal
import subprocess
from pathlib import Path
from typing import Any

import pytest
from pymobiledevice3 import exceptions as pmd_exc
from twin_support import ORCH, PMD, lockdown, pmd, pmd_env, run, running_twin, with_lockdown

from orchestrator.twin import TwinConfig
from orchestrator.twin.config import DEFAULT_UDID


def test_usbmux_list_and_lockdown_info_through_the_cli(tmp_path: Path) -> None:
    with running_twin(tmp_path, ios="18.2") as twin:
        listed = pmd(twin, tmp_path, "usbmux", "list")
        info = pmd(twin, tmp_path, "lockdown", "info")
    assert listed.returncode == 0, listed.stderr
    [device] = json.loads(listed.stdout)
    assert device["UniqueDeviceID"] == DEFAULT_UDID
    assert device["ProductVersion"] == "18.2" and device["ConnectionType"] == "USB"
    assert info.returncode == 0, info.stderr
    values = json.loads(info.stdout)
    assert values["ProductType"] == "iPhone17,1" and values["BuildVersion"] == "22C152"
    assert not any((tmp_path / "home").glob("**/*.plist")), "the pair record came from usbmuxd, not a file"


def test_lockdown_session_over_the_api(tmp_path: Path) -> None:
    with running_twin(tmp_path, ios="17.5", developer_mode=False) as twin:

        async def body(client: Any) -> tuple[Any, ...]:
            return (client.paired, client.product_version, client.product_build_version,
                    await client.get_developer_mode_status(), await client.get_value("com.apple.disk_usage"))

        paired, version, build, dev_mode, disk = with_lockdown(twin, tmp_path, body)
    assert paired and version == "17.5" and build == "21F79"
    assert dev_mode is False
    assert disk["TotalDiskCapacity"] == 128 * 10**9 and 0 < disk["AmountDataAvailable"] <= disk["TotalDiskCapacity"]


def test_state_survives_a_restart_on_the_same_root(tmp_path: Path) -> None:
    with running_twin(tmp_path) as twin:
        first = (twin.phone.key.public_pem, twin.phone.records.read(twin.phone.cfg.udid))
    with running_twin(tmp_path) as twin:
        assert (twin.phone.key.public_pem, twin.phone.records.read(twin.phone.cfg.udid)) == first
        assert with_lockdown(twin, tmp_path, lambda c: _paired(c))


async def _paired(client: Any) -> bool:
    return bool(client.paired)


def test_an_unpaired_twin_asks_for_trust_and_remembers_the_answer(tmp_path: Path, monkeypatch: Any) -> None:
    with running_twin(tmp_path, paired=False, trust="deny") as twin:
        monkeypatch.setenv("USBMUXD_SOCKET_ADDRESS", twin.address)  # where SavePairRecord goes
        assert not with_lockdown(twin, tmp_path, _paired)
        with pytest.raises(pmd_exc.UserDeniedPairingError):
            run(lockdown(twin, tmp_path, autopair=True, pair_timeout=0))
        twin.call(lambda p: setattr(p, "trust_answer", "pending"))
        with pytest.raises(pmd_exc.PairingDialogResponsePendingError):
            run(lockdown(twin, tmp_path, autopair=True, pair_timeout=0))
        twin.call(lambda p: setattr(p, "trust_answer", "accept"))
        assert with_lockdown(twin, tmp_path, _paired, autopair=True, pair_timeout=0)
        assert twin.phone.records.read(twin.phone.cfg.udid) is not None, "SavePairRecord reached usbmuxd"
        other = tmp_path / "elsewhere"  # a fresh client finds the record in usbmuxd, not on its disk
        assert with_lockdown(twin, tmp_path, _paired, pairing_records_cache_folder=other)


def test_a_host_the_phone_forgot_gets_no_session(tmp_path: Path) -> None:
    with running_twin(tmp_path) as twin:
        record = twin.phone.records.read(twin.phone.cfg.udid)
        assert record is not None
        twin.call(lambda p: p.trusted.forget(plistlib.loads(record)["HostID"]))
        assert not with_lockdown(twin, tmp_path, _paired), "StartSession answered InvalidHostID"


def test_a_phone_not_unlocked_since_boot_refuses_services(tmp_path: Path) -> None:
    from pymobiledevice3.services.installation_proxy import InstallationProxyService

    with running_twin(tmp_path, unlocked_since_boot=False) as twin:

        async def body(client: Any) -> None:
            async with InstallationProxyService(lockdown=client) as proxy:
                await proxy.get_apps()

        with pytest.raises(pmd_exc.PasswordRequiredError):
            with_lockdown(twin, tmp_path, body)


def test_unknown_device_and_unknown_port(tmp_path: Path) -> None:
    with running_twin(tmp_path) as twin:
        with pytest.raises(pmd_exc.DeviceNotFoundError):
            run(lockdown(twin, tmp_path, serial="00008140-0000000000000001"))

        async def body(client: Any) -> None:
            await client.create_service_connection(50000)

        with pytest.raises(pmd_exc.ConnectionFailedError):
            with_lockdown(twin, tmp_path, body)


def test_config_refuses_what_it_cannot_be() -> None:
    with pytest.raises(ValueError, match="iOS 14 and later"):
        TwinConfig(root=Path("/nonexistent"), ios="13.7")
    with pytest.raises(ValueError, match="udid"):
        TwinConfig(root=Path("/nonexistent"), udid="not-a-udid")


def test_orch_twin_serve_starts_and_stops_cleanly(tmp_path: Path) -> None:
    proc = subprocess.Popen(
        [str(ORCH), "twin", "serve", "--root", str(tmp_path / "twin"), "--ios", "18.2", "--port", "0"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        lines = [proc.stdout.readline(), proc.stdout.readline()]
        address = lines[1].strip().removeprefix("USBMUXD_SOCKET_ADDRESS=")
        assert address.startswith("127.0.0.1:"), lines
        env = pmd_env(_Addr(address), tmp_path)  # type: ignore[arg-type]
        listed = subprocess.run([str(PMD), "usbmux", "list", "--simple"], env=env, capture_output=True, text=True,
                                timeout=60, check=False)
        assert json.loads(listed.stdout) == [DEFAULT_UDID], listed.stderr
    finally:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(20)
    assert code == 0, proc.stderr.read() if proc.stderr else ""


class _Addr:
    def __init__(self, address: str):
        self.address = address
