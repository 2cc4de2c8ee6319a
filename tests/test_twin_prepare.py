"""prepare installs only what differs, through the real InstallationProxyService, quietly; on the
twin (moved here from the in-process fakes), whose installd inspects and refuses packages as a phone
does. An install is seen as the app's new bundle directory (a phone gives each install a new one)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pymobiledevice3.common
import pytest
from pymobiledevice3.services.installation_proxy import InstallationProxyService
from test_twin_backend import _device
from twin_support import BUNDLE, app_executable, app_ipa, lockdown, running_twin

from orchestrator.devices.iphone import IphoneDevice
from orchestrator.protocol.device import Artifacts, DeviceUnavailable
from orchestrator.twin import ThreadedTwin, make_ipa

OTHER = "com.example.litert"
ELSEWHERE = "00008140-0000000000000001"  # a phone a profile may list instead of the twin


@pytest.fixture(autouse=True)
def _pmd_home(tmp_path: Path, monkeypatch: Any) -> None:
    monkeypatch.setattr(pymobiledevice3.common, "_HOMEFOLDER", tmp_path / "pmd-home")


def installed(twin: ThreadedTwin, bundle: str = BUNDLE) -> str | None:
    """The app's bundle directory (a new one per install), None when the app is not installed."""
    app = twin.phone.apps.get(bundle)
    return None if app is None else app.bundle_uuid


def staged(twin: ThreadedTwin) -> list[str]:
    return sorted(p.name for p in (twin.phone.media / "PublicStaging").iterdir())


def on_twin(tmp_path: Path, body: Any, ipa: Path | None = None, twin_over: dict[str, Any] | None = None,
            **device_over: Any) -> None:
    ipa = ipa or app_ipa(tmp_path, minimum_os="16.0", increased_memory=False)

    async def main(device: IphoneDevice, twin: ThreadedTwin) -> None:
        try:
            await body(device, twin)
        finally:
            await device.close()

    with running_twin(tmp_path, **({"ios": "16.7"} | (twin_over or {}))) as twin:
        asyncio.run(main(_device(twin, ipa, **device_over), twin))


def test_install_once_then_skip_then_reinstall_on_a_new_build(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    async def body(device: IphoneDevice, twin: ThreadedTwin) -> None:
        first = await device.prepare(Artifacts())
        bundle_dir = installed(twin)
        again = await device.prepare(Artifacts())
        assert not first.skipped and again.skipped and again.installed == first.installed
        assert bundle_dir is not None and installed(twin) == bundle_dir, "installed once"
        documents = twin.phone.apps.container(twin.phone.apps.get(BUNDLE)) / "Documents"  # type: ignore[arg-type]
        marker = json.loads((documents / ".orch" / "installed.json").read_text())
        assert marker["apps"][BUNDLE] == {"sha256": first.installed, "version": "1.0 (1)"}
        rebuilt = app_ipa(tmp_path, minimum_os="16.0", increased_memory=False, version="1.1", build="2")
        third = await device.prepare(Artifacts(harness=str(rebuilt)))
        assert not third.skipped and installed(twin) != bundle_dir and third.installed != first.installed
        assert ((await device.info()).harness_version or "").startswith("1.1 (2)")

    on_twin(tmp_path, body)
    out, err = capfd.readouterr()
    assert out == "" and err == "", "install progress must not reach the terminal"


def test_an_install_behind_our_back_is_noticed(tmp_path: Path) -> None:
    async def body(device: IphoneDevice, twin: ThreadedTwin) -> None:
        await device.prepare(Artifacts())
        ours = installed(twin)
        # someone ran it from Xcode: another build of the same app, installed by another client
        xcode = app_ipa(tmp_path, minimum_os="16.0", increased_memory=False, build="99")
        client = await lockdown(twin, tmp_path)
        proxy = InstallationProxyService(lockdown=client)
        await proxy.connect()
        try:
            await proxy.install_from_local(xcode)
        finally:
            await proxy.close()
            await client.close()
        theirs = installed(twin)
        assert theirs != ours
        assert not (await device.prepare(Artifacts())).skipped
        assert installed(twin) not in (ours, theirs), "installed again"
        assert twin.phone.apps.get(BUNDLE).info["CFBundleVersion"] == "1"  # type: ignore[union-attr]

    on_twin(tmp_path, body)


def test_a_declared_hash_names_the_build(tmp_path: Path) -> None:
    async def body(device: IphoneDevice, twin: ThreadedTwin) -> None:
        first = await device.prepare(Artifacts(harness_sha256="0" * 64))
        bundle_dir = installed(twin)
        again = await device.prepare(Artifacts(harness_sha256="0" * 64))
        assert first.installed == "0" * 64 and again.skipped and installed(twin) == bundle_dir
        assert not (await device.prepare(Artifacts(harness_sha256="1" * 64))).skipped
        assert installed(twin) != bundle_dir

    on_twin(tmp_path, body)


def test_competitor_apps_install_and_skip_too(tmp_path: Path) -> None:
    ipa = make_ipa(tmp_path / "c.ipa", app_executable(tmp_path), OTHER, name="Competitor", minimum_os="16.0")

    async def body(device: IphoneDevice, twin: ThreadedTwin) -> None:
        assert not (await device.prepare(Artifacts())).skipped
        harness, other = installed(twin), installed(twin, OTHER)
        assert harness is not None and other is not None
        assert (await device.prepare(Artifacts())).skipped
        make_ipa(ipa, app_executable(tmp_path), OTHER, name="Competitor", minimum_os="16.0", build="7")  # changed
        assert not (await device.prepare(Artifacts())).skipped
        assert installed(twin, OTHER) != other and installed(twin) == harness, "only the competitor again"

    on_twin(tmp_path, body, competitor_apps={OTHER: str(ipa)})


def test_wrong_or_missing_packages_are_typed(tmp_path: Path) -> None:
    wrong = app_ipa(tmp_path, bundle_id="com.example.other")
    (tmp_path / "junk.ipa").write_bytes(b"not a zip")

    async def body(device: IphoneDevice, twin: ThreadedTwin) -> None:
        with pytest.raises(DeviceUnavailable) as exc:
            await device.prepare(Artifacts())
        assert exc.value.state == "harness_missing" and "com.example.other" in str(exc.value)
        bare = IphoneDevice(device.cfg.model_copy(update={"ipa": None}))  # no `ipa:` in the fleet
        with pytest.raises(DeviceUnavailable) as exc:
            await bare.prepare(Artifacts())
        await bare.close()
        assert exc.value.state == "harness_missing" and "ipa" in (exc.value.fix or "")
        junk = _device(twin, tmp_path / "junk.ipa")
        with pytest.raises(DeviceUnavailable, match=r"not an \.ipa"):
            await junk.prepare(Artifacts())
        await junk.close()
        assert twin.phone.apps.apps == {} and staged(twin) == [], "nothing installed, nothing uploaded"

    on_twin(tmp_path, body, ipa=wrong)


def test_a_refused_install_is_device_unavailable(tmp_path: Path) -> None:
    async def body(device: IphoneDevice, twin: ThreadedTwin) -> None:
        twin.unplug()
        with pytest.raises(DeviceUnavailable) as exc:
            await device.prepare(Artifacts())
        assert exc.value.state == "not_connected"

    on_twin(tmp_path, body)


def test_the_phone_refusing_an_install_is_device_unavailable_with_its_reason(tmp_path: Path) -> None:
    # signed with a development profile that lists another phone, not this one
    foreign = app_ipa(tmp_path, minimum_os="16.0", increased_memory=False, devices=[ELSEWHERE])

    async def body(device: IphoneDevice, twin: ThreadedTwin) -> None:
        with pytest.raises(DeviceUnavailable, match="ApplicationVerificationFailed") as exc:
            await device.prepare(Artifacts())
        assert exc.value.state == "error" and installed(twin) is None
        resigned = app_ipa(tmp_path, minimum_os="16.0", increased_memory=False)  # the profile names the phone
        assert not (await device.prepare(Artifacts(harness=str(resigned)))).skipped
        assert installed(twin) is not None

    on_twin(tmp_path, body, ipa=foreign)


def test_a_phone_older_than_the_apps_minimum_ios_is_told_so_before_installing(tmp_path: Path) -> None:
    ipa = app_ipa(tmp_path, minimum_os="18.0", increased_memory=False)  # as the harness app (Metal mathMode)

    async def body(device: IphoneDevice, twin: ThreadedTwin) -> None:
        with pytest.raises(DeviceUnavailable, match=r"needs iOS 18\.0 or later .* this phone runs iOS 17\.5") as exc:
            await device.prepare(Artifacts())
        assert "update the phone to iOS 18.0" in (exc.value.fix or "")
        assert installed(twin) is None and staged(twin) == [], "not even uploaded"
        older = app_ipa(tmp_path, minimum_os="17.0", increased_memory=False)
        assert not (await device.prepare(Artifacts(harness=str(older)))).skipped
        assert installed(twin) is not None

    on_twin(tmp_path, body, ipa=ipa, twin_over={"ios": "17.5"})
