"""The iOS 17+ developer path from where a tunnel is up: the twin's tunneld stand-in names its
RemoteServiceDiscovery endpoint, and pymobiledevice3's RSD client reaches the services behind it."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from pymobiledevice3 import exceptions as pmd_exc
from pymobiledevice3.services.afc import AfcService
from pymobiledevice3.services.diagnostics import DiagnosticsService
from pymobiledevice3.services.installation_proxy import InstallationProxyService
from twin_support import BUNDLE, app_ipa, pmd, running_twin, with_developer

from orchestrator.twin.config import DEFAULT_UDID


def test_tunneld_names_the_rsd_and_only_from_ios_17(tmp_path: Path) -> None:
    with running_twin(tmp_path / "a", ios="18.2") as twin:
        assert twin.tunneld_address is not None
        tunnels = json.loads(urllib.request.urlopen(f"http://{twin.tunneld_address}/", timeout=10).read())
        [entry] = tunnels[DEFAULT_UDID]
        assert entry["tunnel-address"] == "127.0.0.1" and entry["tunnel-port"] > 0
        with pytest.raises(urllib.error.HTTPError):
            urllib.request.urlopen(f"http://{twin.tunneld_address}/start-tunnel", timeout=10)
    with running_twin(tmp_path / "b", ios="16.7") as twin:
        assert twin.tunneld_address is None


def test_rsd_handshake_lockdown_and_shim_services(tmp_path: Path) -> None:
    async def body(rsd: Any) -> tuple[Any, ...]:
        props = rsd.peer_info["Properties"]
        async with InstallationProxyService(lockdown=rsd) as proxy:
            await proxy.install_from_local(app_ipa(tmp_path))
            apps = await proxy.get_apps(bundle_identifiers=[BUNDLE])
        async with DiagnosticsService(lockdown=rsd) as diagnostics:
            battery = await diagnostics.get_battery()
        async with AfcService(rsd) as afc:
            media = await afc.listdir("/")
        return (props["OSVersion"], props["UniqueChipID"], rsd.product_version, await rsd.get_value(key="DeviceName"),
                sorted(rsd.peer_info["Services"]), list(apps), battery["Temperature"], media)

    with running_twin(tmp_path, ios="17.5") as twin:
        os_version, ecid, version, name, services, apps, temperature, media = with_developer(twin, tmp_path, body)
    assert (os_version, ecid, version, name) == ("17.5", twin.phone.cfg.ecid, "17.5", "Twin iPhone")
    assert "com.apple.instruments.dtservicehub" in services
    assert "com.apple.mobile.installation_proxy.shim.remote" in services
    assert apps == [BUNDLE] and 2700 <= temperature <= 2900 and "PublicStaging" in media


def test_no_disk_image_no_dtservicehub_and_a_locked_phone_refuses(tmp_path: Path) -> None:
    async def services(rsd: Any) -> list[str]:
        return sorted(rsd.peer_info["Services"])

    async def apps(rsd: Any) -> Any:
        async with InstallationProxyService(lockdown=rsd) as proxy:
            return await proxy.get_apps()

    with running_twin(tmp_path, ddi_mounted=False) as twin:
        assert "com.apple.instruments.dtservicehub" not in with_developer(twin, tmp_path, services)
        twin.call(lambda p: setattr(p, "unlocked_since_boot", False))
        with pytest.raises(pmd_exc.StartServiceError, match="PasswordProtected"):
            with_developer(twin, tmp_path, apps)


def test_the_cli_reaches_dvt_through_the_tunneld_stand_in(tmp_path: Path) -> None:
    with running_twin(tmp_path, ios="18.2") as twin:
        assert twin.tunneld_address is not None
        port = twin.tunneld_address.rsplit(":", 1)[1]
        listed = pmd(twin, tmp_path, "developer", "dvt", "proclist", "--tunnel", f"{DEFAULT_UDID}:{port}")
    assert listed.returncode == 0, listed.stderr
    assert [p["name"] for p in json.loads(listed.stdout)] == ["launchd"]
