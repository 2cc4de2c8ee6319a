"""installation_proxy, AFC and house_arrest on the twin, through unmodified pymobiledevice3: what
a phone does, and what it refuses (a package it cannot run, a full disk, the wrong vend mode)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from pymobiledevice3 import exceptions as pmd_exc
from pymobiledevice3.services.afc import AfcService
from pymobiledevice3.services.house_arrest import HouseArrestService
from pymobiledevice3.services.installation_proxy import InstallationProxyService
from twin_support import BUNDLE, app_executable, app_ipa, pmd, running_twin, with_lockdown

from orchestrator.twin import make_ipa


async def _install(client: Any, ipa: Path) -> dict[str, Any]:
    async with InstallationProxyService(lockdown=client) as proxy:
        await proxy.install_from_local(ipa)
        return await proxy.get_apps(application_type="Any", bundle_identifiers=[BUNDLE])


def test_cli_installs_lists_and_browses_media(tmp_path: Path) -> None:
    ipa = app_ipa(tmp_path, version="2.0", build="7")
    with running_twin(tmp_path) as twin:
        installed = pmd(twin, tmp_path, "apps", "install", str(ipa))
        listed = pmd(twin, tmp_path, "apps", "list")
        media = pmd(twin, tmp_path, "afc", "ls", "/")
    assert installed.returncode == 0, installed.stderr
    assert listed.returncode == 0, listed.stderr
    app = json.loads(listed.stdout)[BUNDLE]
    assert (app["CFBundleShortVersionString"], app["CFBundleVersion"]) == ("2.0", "7")
    assert app["Entitlements"]["get-task-allow"] is True and app["ApplicationType"] == "User"
    assert media.returncode == 0, media.stderr
    assert {"/PublicStaging", "/Downloads", "/DCIM"} <= set(media.stdout.split())


def test_install_keeps_the_container_and_uninstall_removes_it(tmp_path: Path) -> None:
    with running_twin(tmp_path) as twin:
        apps = with_lockdown(twin, tmp_path, lambda c: _install(c, app_ipa(tmp_path)))
        assert apps[BUNDLE]["CFBundleExecutable"] == "HarnessApp"

        async def keep_a_file(client: Any) -> None:
            async with await HouseArrestService.create(client, BUNDLE) as box:
                await box.set_file_contents("/Documents/keep.txt", b"kept")

        with_lockdown(twin, tmp_path, keep_a_file)
        again = with_lockdown(twin, tmp_path, lambda c: _install(c, app_ipa(tmp_path, version="3.0")))
        assert again[BUNDLE]["CFBundleShortVersionString"] == "3.0"

        async def read_and_uninstall(client: Any) -> tuple[bytes, dict[str, Any]]:
            async with await HouseArrestService.create(client, BUNDLE) as box:
                kept = await box.get_file_contents("/Documents/keep.txt")
            async with InstallationProxyService(lockdown=client) as proxy:
                await proxy.uninstall(BUNDLE)
                await proxy.uninstall(BUNDLE)  # absent: the phone ignores it and completes
                return kept, await proxy.get_apps(bundle_identifiers=[BUNDLE])

        kept, after = with_lockdown(twin, tmp_path, read_and_uninstall)
        assert kept == b"kept" and after == {}
        assert not list((tmp_path / "twin" / "Data" / "Application").iterdir())


@pytest.mark.parametrize(("package", "error"), [
    ("minimum_os", "DeviceOSVersionTooLow"),
    ("garbage", "PackageExtractionFailed"),
    ("no_executable", "MissingBundleExecutable"),
    ("other_device", "ApplicationVerificationFailed"),
    ("ipad_only", "DeviceFamilyNotSupported"),
])
def test_install_refused_as_a_phone_refuses(tmp_path: Path, package: str, error: str) -> None:
    if package == "minimum_os":
        ipa = app_ipa(tmp_path, minimum_os="18.4")
    elif package == "garbage":
        ipa = tmp_path / "garbage.ipa"
        ipa.write_bytes(b"PK not really a zip")
    elif package == "no_executable":
        ipa = app_ipa(tmp_path, extra_info={"CFBundleExecutable": "Elsewhere"})
    elif package == "other_device":
        ipa = app_ipa(tmp_path, devices=["00008140-0000000000000001"])
    else:
        ipa = app_ipa(tmp_path, extra_info={"UIDeviceFamily": [2]})
    with running_twin(tmp_path, ios="18.2") as twin:
        with pytest.raises(pmd_exc.AppInstallError, match=error):
            with_lockdown(twin, tmp_path, lambda c: _install(c, ipa))
        assert with_lockdown(twin, tmp_path, _apps) == {}


async def _apps(client: Any) -> dict[str, Any]:
    async with InstallationProxyService(lockdown=client) as proxy:
        return await proxy.get_apps(bundle_identifiers=[BUNDLE])


def test_a_full_disk_refuses_the_install_and_afc_writes(tmp_path: Path) -> None:
    exe = app_executable(tmp_path)
    exe.write_text(exe.read_text() + "#" + "0" * (3 << 20) + "\n")  # 3 MB unpacked, a few KB zipped
    ipa = make_ipa(tmp_path / "big.ipa", exe, BUNDLE)
    with running_twin(tmp_path, disk_bytes=10**6) as twin:
        with pytest.raises(pmd_exc.AppInstallError, match=r"APIInternalError.*enough storage"):
            with_lockdown(twin, tmp_path, lambda c: _install(c, ipa))

        async def fill(client: Any) -> None:
            async with AfcService(client) as afc:
                await afc.set_file_contents("/Downloads/big", b"x" * 2_000_000)

        with pytest.raises(pmd_exc.AfcException, match="NO_SPACE_LEFT"):
            with_lockdown(twin, tmp_path, fill)


def _vend(twin: Any, tmp_path: Path, bundle: str, documents_only: bool, action: Any) -> Any:
    async def body(client: Any) -> Any:
        async with await HouseArrestService.create(client, bundle, documents_only=documents_only) as box:
            return await action(box)

    return with_lockdown(twin, tmp_path, body)


async def _ls(box: Any) -> list[str]:
    return sorted(await box.listdir("/"))


def test_house_arrest_modes_as_on_a_phone(tmp_path: Path) -> None:
    dev_sharing = app_ipa(tmp_path)  # development-signed, UIFileSharingEnabled
    store_sharing = app_ipa(tmp_path, bundle_id="dev.orch.store", development=False)
    store_private = app_ipa(tmp_path, bundle_id="dev.orch.private", development=False, file_sharing=False)
    with running_twin(tmp_path) as twin:
        for ipa in (dev_sharing, store_sharing, store_private):
            with_lockdown(twin, tmp_path, lambda c, ipa=ipa: _install(c, ipa))
        assert _vend(twin, tmp_path, BUNDLE, False, _ls) == ["Documents", "Library", "SystemData", "tmp"]
        assert _vend(twin, tmp_path, BUNDLE, True, _ls) == ["Documents"]
        assert _vend(twin, tmp_path, "dev.orch.store", True, _ls) == ["Documents"]
        for bundle, documents_only in (("dev.orch.store", False), ("dev.orch.private", False),
                                       ("dev.orch.private", True)):
            with pytest.raises(pmd_exc.PyMobileDevice3Exception, match="InstallationLookupFailed"):
                _vend(twin, tmp_path, bundle, documents_only, _ls)
        with pytest.raises(pmd_exc.AppNotInstalledError):
            _vend(twin, tmp_path, "dev.orch.absent", False, _ls)

        async def outside_documents(box: Any) -> None:
            await box.listdir("/Library")

        with pytest.raises(pmd_exc.AfcException, match="PERM_DENIED"):
            _vend(twin, tmp_path, BUNDLE, True, outside_documents)


def test_house_arrest_push_pull_and_no_way_out(tmp_path: Path) -> None:
    local = tmp_path / "local"
    (local / "models").mkdir(parents=True)
    (local / "models" / "m.gguf").write_bytes(os.urandom(5 << 20))  # over AFC's 4 MB read size: chunked
    with running_twin(tmp_path) as twin:
        with_lockdown(twin, tmp_path, lambda c: _install(c, app_ipa(tmp_path)))
        container = next((tmp_path / "twin" / "Data" / "Application").iterdir())
        (container / "Documents" / "escape").symlink_to(tmp_path / "twin" / "lockdown")

        async def round_trip(box: Any) -> tuple[list[str], bytes]:
            await box.push(str(local / "models"), "/Documents")
            await box.pull("/Documents/models/m.gguf", str(tmp_path / "back.gguf"))
            await box.rename("/Documents/models/m.gguf", "/Documents/models/n.gguf")
            names = await box.listdir("/Documents/models")
            with pytest.raises(pmd_exc.AfcException, match="PERM_DENIED"):
                await box.listdir("/Documents/escape")
            with pytest.raises(pmd_exc.AfcException, match="PERM_DENIED"):  # "/lockdown/...": not Documents
                await box.get_file_contents("/Documents/../../lockdown/device_key.pem")
            return names, (tmp_path / "back.gguf").read_bytes()

        names, back = _vend(twin, tmp_path, BUNDLE, True, round_trip)
    assert names == ["n.gguf"] and back == (local / "models" / "m.gguf").read_bytes()
    assert (container / "Documents" / "models" / "n.gguf").stat().st_size == 5 << 20
