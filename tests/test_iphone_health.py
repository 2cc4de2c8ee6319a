"""Each health state of a phone, with the fix a person must make."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import pytest
from iphone_fakes import FakeConnector, FakePhone, make_device
from pymobiledevice3 import exceptions as pmd

from orchestrator.devices.base import Artifacts, DeviceUnavailable, Health


def health_of(tmp_path: Path, setup: Callable[[FakePhone, FakeConnector], None], install: bool = True) -> Health:
    async def main() -> Health:
        phone = FakePhone()
        device, connector = make_device(phone, tmp_path)
        if install:
            await device.prepare(Artifacts())
        setup(phone, connector)
        try:
            return await device.health()
        finally:
            await device.close()

    return asyncio.run(main())


def _unplug(p: FakePhone, c: FakeConnector) -> None:
    p.plugged = False


def _untrust(p: FakePhone, c: FakeConnector) -> None:
    p.paired = False


def _lock(p: FakePhone, c: FakeConnector) -> None:
    p.locked = True


def _devmode(p: FakePhone, c: FakeConnector) -> None:
    p.developer_mode = False


def _ddi(p: FakePhone, c: FakeConnector) -> None:
    p.ddi_mounted = False


def _no_userspace(p: FakePhone, c: FakeConnector) -> None:
    c.tunnel_error = pmd.UserspaceTunnelUnavailableError("no CoreDeviceProxy (needs iOS 17.4+)")


def _no_tunneld(p: FakePhone, c: FakeConnector) -> None:
    c.tunnel_error = pmd.TunneldConnectionError()


@pytest.mark.parametrize(("setup", "state", "fix_says"), [
    (_unplug, "not_connected", "USB cable"),
    (_untrust, "not_trusted", "Trust"),
    (_lock, "locked", "unlock"),
    (_devmode, "developer_mode_off", "Developer Mode"),
    (_ddi, "ddi_missing", "mounter auto-mount"),
    (_no_userspace, "tunnel_unavailable", "tunneld"),
    (_no_tunneld, "tunnel_unavailable", "sudo pymobiledevice3 remote tunneld"),
])
def test_each_state_names_its_fix(
    tmp_path: Path, setup: Callable[[FakePhone, FakeConnector], None], state: str, fix_says: str
) -> None:
    health = health_of(tmp_path, setup)
    assert health.state == state, health
    assert health.fix and fix_says in health.fix, health.fix
    assert health.detail and health.detail.startswith("phone:")


def test_ok_and_harness_missing(tmp_path: Path) -> None:
    assert health_of(tmp_path, lambda p, c: None).state == "ok"
    missing = health_of(tmp_path, lambda p, c: None, install=False)
    assert missing.state == "harness_missing" and "ipa" in (missing.fix or "")


def test_info_and_telemetry_raise_device_unavailable_with_state(tmp_path: Path) -> None:
    async def main() -> None:
        phone = FakePhone()
        device, connector = make_device(phone, tmp_path)
        phone.paired = False
        with pytest.raises(DeviceUnavailable) as exc:
            await device.info()
        assert exc.value.state == "not_trusted"
        phone.paired, phone.plugged = True, False
        with pytest.raises(DeviceUnavailable) as exc:
            await device.telemetry()
        assert exc.value.state == "not_connected" and connector.resets >= 1
        phone.plugged, phone.locked = True, True
        with pytest.raises(DeviceUnavailable) as exc:
            await device.telemetry()
        assert exc.value.state == "locked"

    asyncio.run(main())


def test_identity(tmp_path: Path) -> None:
    async def main() -> None:
        phone = FakePhone(product_type="iPhone18,1", ios="26.1")
        device, _ = make_device(phone, tmp_path)
        info = await device.info()
        assert (info.model, info.chip_class, info.os, info.harness_version) == (
            "iPhone 17 Pro (iPhone18,1)", "A19 Pro", "iOS 26.1 (22F76)", None)
        report = await device.prepare(Artifacts())
        info = await device.info()
        assert info.harness_version == f"1.0 (1) sha256:{report.installed[:12]}" and info.kind == "iphone"

    asyncio.run(main())
