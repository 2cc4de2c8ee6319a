"""The iPhone backend's small parts: chip table, container paths, exception mapping, the connector."""

from __future__ import annotations

import asyncio
from typing import Any, ClassVar

import pytest
from pymobiledevice3 import exceptions as pmd
from pymobiledevice3.irecv_devices import IRECV_DEVICES

from orchestrator.config.fleet import IphoneDeviceConfig
from orchestrator.devices.iphone import chips, connect
from orchestrator.devices.iphone.errors import DeviceTimeout, call, classify
from orchestrator.devices.iphone.paths import (
    UnsafeName,
    check_bundle_id,
    check_id,
    documents,
    result_place,
    spec_place,
)
from orchestrator.protocol.device import DeviceUnavailable

FAMILY_OF_CLASS = {"A11 Bionic": "A11", "A12 Bionic": "A12", "A13 Bionic": "A13", "A14 Bionic": "A14",
                   "A15 Bionic": "A15", "A16 Bionic": "A16", "A17 Pro": "A17", "A18": "A18", "A18 Pro": "A18",
                   "A19": "A19", "A19 Pro": "A19", "M1": "M1", "M2": "M2", "M3": "M3", "M4": "M4", "M5": "M5"}


def test_chip_table_agrees_with_pymobiledevice3s_device_table() -> None:
    by_type = {d.product_type: d for d in IRECV_DEVICES}
    for product_type, chip in chips.CHIP_BY_PRODUCT_TYPE.items():
        assert product_type in by_type, f"{product_type} is not a product type pymobiledevice3 knows"
        family = chips.FAMILY_BY_CHIP_ID.get(by_type[product_type].chip_id)
        assert family == FAMILY_OF_CLASS[chip], f"{product_type}: {chip} but its CPID is {family}"


def test_chip_classes_and_fallbacks() -> None:
    assert chips.chip_class("iPhone16,1") == "A17 Pro"
    assert chips.chip_class("iPhone17,3") == "A18" and chips.chip_class("iPhone17,2") == "A18 Pro"
    assert chips.chip_class("iPhone18,2") == "A19 Pro" and chips.chip_class("iPhone18,3") == "A19"
    assert chips.chip_class("iPhone19,2") == "T8160"  # known to pymobiledevice3, not yet to us
    assert chips.chip_class("iPhone99,9", 0x8150) == "A19 family"
    assert chips.chip_class("iPhone99,9") is None and chips.chip_class(None) is None
    assert chips.model_name("iPhone16,2") == "iPhone 15 Pro Max (iPhone16,2)"
    assert chips.model_name("iPhone99,9") == "iPhone99,9"


@pytest.mark.parametrize("bad", ["../x", "a/b", "..", ".x", "", "a\\b", "a\x00b", "x" * 200, "-x"])
def test_unsafe_trial_ids_never_become_paths(bad: str) -> None:
    with pytest.raises(UnsafeName):
        spec_place(bad)
    with pytest.raises(UnsafeName):
        result_place(bad)


def test_places_are_inside_documents() -> None:
    place = spec_place("phone-0001")
    assert (place.afc, place.app) == ("/Documents/specs/phone-0001.json", "specs/phone-0001.json")
    assert result_place("a.b_c-1").afc == "/Documents/results/a.b_c-1.json"
    for parts in (("..", "x"), ("specs", ".."), ("a/../../b",), ("",)):
        with pytest.raises(UnsafeName):
            documents(*parts)


@pytest.mark.parametrize("bad", ["dev", "../dev.x", "dev/orch.x", "dev..x", ".dev.x", "dev.x.", "dev.x y"])
def test_bundle_ids(bad: str) -> None:
    assert check_bundle_id("dev.orch.harness") == "dev.orch.harness"
    with pytest.raises(UnsafeName):
        check_bundle_id(bad)


def test_config_refuses_unsafe_names() -> None:
    base = {"id": "p", "kind": "iphone", "udid": "00008140-000A"}
    for over in ({"udid": "../x"}, {"bundle_id": "a/b.c"}, {"competitor_apps": {"../x": "a.ipa"}},
                 {"engine_apps": {"litert": "not a bundle"}}, {"process_name": "a/b"}):
        with pytest.raises(ValueError):
            IphoneDeviceConfig.model_validate({**base, **over})


@pytest.mark.parametrize(("exc", "state"), [
    (pmd.PasswordRequiredError(), "locked"),
    (pmd.PairingDialogResponsePendingError(), "not_trusted"),
    (pmd.UserDeniedPairingError(), "not_trusted"),
    (pmd.NotPairedError(), "not_trusted"),
    (pmd.DeveloperModeIsNotEnabledError(), "developer_mode_off"),
    (pmd.InvalidServiceError("InvalidService", "u", "17.0"), "ddi_missing"),
    (pmd.TunneldConnectionError(), "tunnel_unavailable"),
    (pmd.UserspaceTunnelUnavailableError(), "tunnel_unavailable"),
    (pmd.RSDRequiredError("u", "17.0"), "tunnel_unavailable"),
    (pmd.NoDeviceConnectedError(), "not_connected"),
    (pmd.DeviceNotFoundError("u"), "not_connected"),
    (pmd.ConnectionFailedToUsbmuxdError(), "not_connected"),
    (pmd.ConnectionTerminatedError(), "not_connected"),
    (DeviceTimeout("x"), "not_connected"),
    (pmd.AppNotInstalledError(), "harness_missing"),
    (pmd.AppInstallError("no"), "error"),
])
def test_exceptions_map_to_health_states(exc: BaseException, state: str) -> None:
    assert classify(exc) == state


def test_a_refused_developer_service_means_no_disk_image() -> None:
    refused = pmd.StartServiceError("com.apple.instruments.remoteserver.DVTSecureSocketProxy", "InvalidService")
    assert classify(refused) == "error" and classify(refused, developer=True) == "ddi_missing"


def test_every_device_call_has_a_timeout() -> None:
    async def never() -> None:
        await asyncio.sleep(3600)

    with pytest.raises(DeviceTimeout, match=r"read the battery: no answer within 0\.01 s"):
        asyncio.run(call(never(), 0.01, "read the battery"))


# -- the real connector, with pymobiledevice3's factories swapped for stand-ins -------------------------
class _Client:
    def __init__(self, paired: bool = True, version: str = "18.5"):
        self.paired, self.product_version, self.closed = paired, version, False

    async def close(self) -> None:
        self.closed = True

    async def start_lockdown_service(self, name: str) -> Any:
        """As a real iOS 17+ phone answers a DVT start over lockdown."""
        raise pmd.InvalidServiceError("InvalidService", "u", self.product_version)


def cfg(**over: Any) -> IphoneDeviceConfig:
    return IphoneDeviceConfig.model_validate({"id": "p", "kind": "iphone", "udid": "00008140-000A", **over})


def test_connector_prefers_usb_and_refuses_an_unpaired_phone(monkeypatch: pytest.MonkeyPatch) -> None:
    import pymobiledevice3.lockdown as lockdown

    asked: list[Any] = []
    unpaired = _Client(paired=False)

    async def create(**kw: Any) -> _Client:
        asked.append(kw.get("connection_type"))
        if kw.get("connection_type") == "USB":
            raise pmd.DeviceNotFoundError(kw["serial"])
        return unpaired

    monkeypatch.setattr(lockdown, "create_using_usbmux", create)
    with pytest.raises(pmd.NotPairedError):
        asyncio.run(connect.UsbConnector(cfg()).lockdown())
    assert asked == ["USB", None] and unpaired.closed


def test_connector_developer_provider_by_ios_version(monkeypatch: pytest.MonkeyPatch) -> None:
    import pymobiledevice3.lockdown as lockdown
    import pymobiledevice3.remote.userspace_tunnel as userspace

    class Tunnel:
        opened: ClassVar[list[str]] = []

        def __init__(self, serial: str, autopair: bool, remotepairing_fallback: bool):
            assert autopair is False, "never wait on a Trust dialog unattended"
            self.serial = serial

        async def aopen(self) -> str:
            Tunnel.opened.append(self.serial)
            return f"rsd:{self.serial}"

        async def aclose(self) -> None:
            Tunnel.opened.remove(self.serial)

    old, new = _Client(version="16.7"), _Client(version="17.5")
    clients = iter([old, new, _Client(version="18.0")])

    async def create(**kw: Any) -> _Client:
        return next(clients)

    monkeypatch.setattr(lockdown, "create_using_usbmux", create)
    monkeypatch.setattr(userspace, "UserspaceRsdTunnel", Tunnel)

    async def main() -> None:
        assert await connect.UsbConnector(cfg()).developer() is old  # iOS 16: DVT over lockdown
        first = connect.UsbConnector(cfg(udid="AAAA"))
        assert await first.developer() == "rsd:AAAA"
        second = connect.UsbConnector(cfg(id="q", udid="BBBB"))
        with pytest.raises(DeviceUnavailable) as exc:  # one userspace tunnel per process
            await second.developer()
        assert exc.value.state == "tunnel_unavailable" and "tunneld" in (exc.value.fix or "")
        await first.reset()
        assert Tunnel.opened == [] and new.closed

    asyncio.run(main())


def test_connector_through_tunneld(monkeypatch: pytest.MonkeyPatch) -> None:
    import pymobiledevice3.lockdown as lockdown
    import pymobiledevice3.tunneld.api as api

    async def create(**kw: Any) -> _Client:
        return _Client(version="17.4")

    async def tunnels(address: tuple[str, int]) -> dict[str, Any]:
        assert address == ("10.0.0.2", 5555)
        return {}

    monkeypatch.setattr(lockdown, "create_using_usbmux", create)
    monkeypatch.setattr(api, "get_tunneld_tunnels", tunnels)
    with pytest.raises(DeviceUnavailable) as exc:
        asyncio.run(connect.UsbConnector(cfg(tunnel="tunneld", tunneld_address="10.0.0.2:5555")).developer())
    assert exc.value.state == "tunnel_unavailable" and "no tunnel for 00008140-000A" in str(exc.value)


def test_tunneld_addresses(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TUNNELD_ADDRESS", raising=False)
    assert connect.parse_address(None) == ("127.0.0.1", 49151)
    assert connect.parse_address("[::1]:49151") == ("::1", 49151)
    with pytest.raises(ValueError):
        connect.parse_address("localhost")
    monkeypatch.setenv("TUNNELD_ADDRESS", "127.0.0.1:5000")  # what `orch twin serve -- CMD` exports
    assert connect.parse_address(None) == ("127.0.0.1", 5000)
    assert connect.parse_address("10.0.0.2:49151") == ("10.0.0.2", 49151), "the fleet's address wins"
    monkeypatch.setenv("TUNNELD_ADDRESS", "nonsense")
    with pytest.raises(ValueError, match=r"\$TUNNELD_ADDRESS"):
        connect.parse_address(None)


def _connector(**over: Any) -> connect.UsbConnector:
    fields: dict[str, Any] = {"id": "p", "kind": "iphone", "udid": "00008140-000A1B2C3D4E001E", **over}
    return connect.UsbConnector(IphoneDeviceConfig.model_validate(fields))


def test_a_tunneld_tunnel_that_cannot_be_connected_is_tunnel_unavailable(monkeypatch: pytest.MonkeyPatch) -> None:
    """pymobiledevice3 skips a tunnel whose RSD connect failed and then indexes an empty list."""
    from pymobiledevice3.tunneld import api

    c = _connector(tunnel="tunneld")

    async def tunnels(address: Any) -> dict[str, Any]:
        return {c.cfg.udid: [{"tunnel-address": "fd00::1", "tunnel-port": 1}]}

    async def by_udid(udid: str, address: Any) -> Any:
        return [][0]

    monkeypatch.setattr(api, "get_tunneld_tunnels", tunnels)
    monkeypatch.setattr(api, "get_tunneld_device_by_udid", by_udid)
    with pytest.raises(DeviceUnavailable) as err:
        asyncio.run(c._tunneld())
    assert err.value.state == "tunnel_unavailable" and "could not be connected" in str(err.value)


@pytest.mark.parametrize(("serves", "via"), [(True, "lockdown"), (False, "tunnel")])
def test_ios_17_and_later_uses_dvt_over_lockdown_where_the_phone_serves_it(serves: bool, via: str) -> None:
    """A real iOS 17+ phone refuses DVT over lockdown (InvalidService): then, and only then, the tunnel."""
    from iphone_fakes import FakePhone
    from iphone_fakes.phone import FakeLockdown

    phone = FakePhone(ios="18.2")
    phone.ddi_mounted = serves  # the fake refuses developer services with InvalidService when unmounted
    c = _connector()
    c._lockdown = FakeLockdown(phone)
    tunnel = object()

    async def userspace() -> Any:
        return tunnel

    c._userspace = userspace  # type: ignore[method-assign]
    got = asyncio.run(c.developer())
    assert (got is c._lockdown) if via == "lockdown" else (got is tunnel)


def test_a_jetsam_report_is_attributed_only_to_the_process_it_killed() -> None:
    from iphone_fakes.dvt import jetsam_report

    from orchestrator.devices.iphone.crash import jetsam_reason

    raw = jetsam_report("HarnessApp", pages=1000)
    why = jetsam_reason(raw, "HarnessApp")
    assert why == "killed by the OS for memory (jetsam reason: per-process-limit, 16 MiB resident)"
    assert jetsam_reason(raw, "SpringBoard") is None  # listed, not killed
    assert jetsam_reason(raw, "Other") is None
    assert jetsam_reason(b"not a report", "HarnessApp") is None


@pytest.mark.parametrize("value", ["id\n", "dev.orch.harness\n"])
def test_a_trailing_newline_is_not_part_of_a_safe_name(value: str) -> None:
    """`$` in a regex also matches before a final newline: names are matched whole."""
    with pytest.raises(UnsafeName):
        check_id(value) if "." not in value else check_bundle_id(value)
