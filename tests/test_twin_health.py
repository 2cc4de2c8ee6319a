"""Each health state of a phone, with the fix a person must make, through the iphone backend on the
twin (moved here from the in-process fakes): the phone is really unplugged, really forgets this host,
really restarts without being unlocked, really has Developer Mode off or no disk image mounted; an
iOS 17.0-17.3 phone really has no CoreDeviceProxy for the userspace tunnel; tunneld is really not
there. Then info and telemetry raising the state, and the identity a phone reports."""

from __future__ import annotations

import asyncio
import plistlib
import socket
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pymobiledevice3.common
import pytest
from test_twin_backend import _device
from twin_support import app_ipa, running_twin

from orchestrator.protocol.device import Artifacts, DeviceUnavailable, Health
from orchestrator.twin import ThreadedTwin
from orchestrator.twin.phone import Phone


@pytest.fixture(autouse=True)
def _pmd_home(tmp_path: Path, monkeypatch: Any) -> None:
    monkeypatch.setattr(pymobiledevice3.common, "_HOMEFOLDER", tmp_path / "pmd-home")


@pytest.fixture
def dead_port() -> Iterator[int]:
    """A loopback port bound but never listening: a connection to it is refused (tunneld not running)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        yield sock.getsockname()[1]


def _forget_this_host(p: Phone) -> None:
    """Settings > General > Transfer or Reset > Reset Location & Privacy: the phone trusts no host."""
    record = p.records.read(p.cfg.udid)
    assert record is not None
    p.trusted.forget(plistlib.loads(record)["HostID"])


def _restarted_not_unlocked(p: Phone) -> None:
    """Restarted and not unlocked since: lockdown refuses services with PasswordProtected."""
    p.locked, p.unlocked_since_boot = True, False


def _locked_after_unlock(p: Phone) -> None:
    """Locked after its first unlock: services still start, app launches fail; lockdown's
    PasswordProtected value says so, and health reads it."""
    p.locked = True


def _developer_mode_off(p: Phone) -> None:
    p.developer_mode = p.ddi_mounted = False  # turning it off restarts the phone: no image mounted either


CHANGES: dict[str, Callable[[Phone], None]] = {
    "untrust": _forget_this_host,
    "lock": _restarted_not_unlocked,
    "relock": _locked_after_unlock,
    "devmode": _developer_mode_off,
    "ddi": lambda p: setattr(p, "ddi_mounted", False),
}


def health_of(tmp_path: Path, monkeypatch: Any, change: str, twin_over: dict[str, Any],
              device_over: dict[str, Any]) -> Health:
    """Install on a ready phone, make the one change, then ask a fresh device for its health."""
    ipa = app_ipa(tmp_path, minimum_os="16.0", increased_memory=False)

    async def install(twin: ThreadedTwin) -> None:
        device = _device(twin, ipa, id="phone", **device_over)
        try:
            await device.prepare(Artifacts())
        finally:
            await device.close()

    async def check(twin: ThreadedTwin) -> Health:
        device = _device(twin, ipa, id="phone", **device_over)
        try:
            return await device.health()
        finally:
            await device.close()

    with running_twin(tmp_path, **({"ios": "16.7"} | twin_over)) as twin:
        # the userspace tunnel opens a lockdown client of its own, on the usbmuxd the environment names
        monkeypatch.setenv("USBMUXD_SOCKET_ADDRESS", twin.address)
        asyncio.run(install(twin))
        if change == "unplug":
            twin.unplug()
        elif change in CHANGES:
            twin.call(CHANGES[change])
        return asyncio.run(check(twin))


@pytest.mark.parametrize(("change", "twin_over", "device_over", "state", "fix_says"), [
    ("unplug", {}, {}, "not_connected", "USB cable"),
    ("untrust", {}, {}, "not_trusted", "Trust"),
    ("lock", {}, {}, "locked", "unlock"),
    ("relock", {}, {}, "locked", "unlock"),
    ("devmode", {}, {}, "developer_mode_off", "Developer Mode"),
    ("ddi", {}, {}, "ddi_missing", "mounter auto-mount"),
    # iOS 17.0-17.3 has no CoreDeviceProxy: pymobiledevice3 cannot build the userspace tunnel
    ("none", {"ios": "17.2"}, {"tunnel": "userspace"}, "tunnel_unavailable", "tunneld"),
    # tunneld is not running where the fleet says (a port nobody listens on)
    ("none", {"ios": "18.2"}, {"tunneld_address": "DEAD"}, "tunnel_unavailable", "sudo pymobiledevice3 remote tunneld"),
], ids=["unplugged", "untrusted", "locked", "relocked", "devmode_off", "no_ddi", "no_userspace_tunnel", "no_tunneld"])
def test_each_state_names_its_fix(tmp_path: Path, monkeypatch: Any, dead_port: int, change: str,
                                  twin_over: dict[str, Any], device_over: dict[str, Any], state: str,
                                  fix_says: str) -> None:
    if device_over.get("tunneld_address") == "DEAD":
        device_over = {"tunnel": "tunneld", "tunneld_address": f"127.0.0.1:{dead_port}"}
    health = health_of(tmp_path, monkeypatch, change, twin_over, device_over)
    assert health.state == state, health
    assert health.fix and fix_says in health.fix, health.fix
    assert health.detail and health.detail.startswith("phone:"), health.detail


def test_ok_and_harness_missing(tmp_path: Path) -> None:
    ipa = app_ipa(tmp_path, minimum_os="16.0", increased_memory=False)

    async def body(device: Any) -> None:
        missing = await device.health()
        assert missing.state == "harness_missing" and "ipa" in (missing.fix or ""), missing
        await device.prepare(Artifacts())
        assert (await device.health()).state == "ok"
        await device.close()

    with running_twin(tmp_path, ios="16.7") as twin:
        asyncio.run(body(_device(twin, ipa)))


def test_info_and_telemetry_raise_device_unavailable_with_state(tmp_path: Path) -> None:
    ipa = app_ipa(tmp_path, minimum_os="16.0", increased_memory=False)

    async def body(device: Any, twin: ThreadedTwin) -> None:
        record = plistlib.loads(twin.phone.records.read(twin.phone.cfg.udid) or b"")
        twin.call(_forget_this_host)
        with pytest.raises(DeviceUnavailable) as exc:
            await device.info()
        assert exc.value.state == "not_trusted"
        twin.call(lambda p: p.trusted.trust(record))  # Trust tapped again
        await device.telemetry()  # a lockdown session held from here on
        twin.unplug()
        with pytest.raises(DeviceUnavailable) as exc:
            await device.telemetry()
        assert exc.value.state == "not_connected"
        twin.replug()
        await device.telemetry()  # the dead session was dropped: this one reconnects
        twin.call(_restarted_not_unlocked)
        with pytest.raises(DeviceUnavailable) as exc:
            await device.telemetry()
        assert exc.value.state == "locked"
        await device.close()

    with running_twin(tmp_path, ios="16.7") as twin:
        asyncio.run(body(_device(twin, ipa), twin))


def test_identity(tmp_path: Path) -> None:
    ipa = app_ipa(tmp_path, minimum_os="16.0", increased_memory=False)

    async def body(device: Any) -> None:
        info = await device.info()
        assert (info.model, info.chip_class, info.os, info.harness_version) == (
            "iPhone 17 Pro (iPhone18,1)", "A19 Pro", "iOS 26.1 (23B85)", None)
        report = await device.prepare(Artifacts())
        info = await device.info()
        assert info.harness_version == f"1.0 (1) sha256:{report.installed[:12]}" and info.kind == "iphone"
        await device.close()

    with running_twin(tmp_path, product_type="iPhone18,1", ios="26.1") as twin:
        asyncio.run(body(_device(twin, ipa)))
