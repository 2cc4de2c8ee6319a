"""prepare installs only what differs, through the real InstallationProxyService, quietly."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from iphone_fakes import HARNESS, FakePhone, make_device, make_ipa

from orchestrator.devices.base import Artifacts, DeviceUnavailable


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def test_install_once_then_skip_then_reinstall_on_a_new_build(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    async def main() -> None:
        phone = FakePhone()
        device, _ = make_device(phone, tmp_path)
        first = await device.prepare(Artifacts())
        again = await device.prepare(Artifacts())
        assert not first.skipped and again.skipped and again.installed == first.installed
        assert phone.installs == [HARNESS]
        marker = json.loads(phone.containers[HARNESS].files["/Documents/.orch/installed.json"])
        assert marker["apps"][HARNESS] == {"sha256": first.installed, "version": "1.0 (1)"}
        rebuilt = make_ipa(tmp_path / "new.ipa", HARNESS, version="1.1", build="2")
        third = await device.prepare(Artifacts(harness=str(rebuilt)))
        assert not third.skipped and phone.installs == [HARNESS, HARNESS] and third.installed != first.installed
        assert (await device.info()).harness_version.startswith("1.1 (2)")

    run(main())
    out, err = capfd.readouterr()
    assert out == "" and err == "", "install progress must not reach the terminal"


def test_an_install_behind_our_back_is_noticed(tmp_path: Path) -> None:
    async def main() -> None:
        phone = FakePhone()
        device, _ = make_device(phone, tmp_path)
        await device.prepare(Artifacts())
        phone.apps[HARNESS]["CFBundleVersion"] = "99"  # someone ran it from Xcode
        assert not (await device.prepare(Artifacts())).skipped
        assert len(phone.installs) == 2

    run(main())


def test_a_declared_hash_names_the_build(tmp_path: Path) -> None:
    async def main() -> None:
        phone = FakePhone()
        device, _ = make_device(phone, tmp_path)
        first = await device.prepare(Artifacts(harness_sha256="0" * 64))
        again = await device.prepare(Artifacts(harness_sha256="0" * 64))
        assert first.installed == "0" * 64 and again.skipped
        assert not (await device.prepare(Artifacts(harness_sha256="1" * 64))).skipped

    run(main())


def test_a_package_whose_hash_differs_from_the_declared_one_is_refused(tmp_path: Path) -> None:
    async def main() -> None:
        phone = FakePhone()
        device, _ = make_device(phone, tmp_path)
        with pytest.raises(DeviceUnavailable, match="differs"):
            await device.prepare(Artifacts(harness=str(tmp_path / "harness.ipa"), harness_sha256="0" * 64))
        assert phone.installs == []

    run(main())


def test_competitor_apps_install_and_skip_too(tmp_path: Path) -> None:
    other = "com.example.litert"
    ipa = make_ipa(tmp_path / "c.ipa", other)

    async def main() -> None:
        phone = FakePhone()
        device, _ = make_device(phone, tmp_path, competitor_apps={other: str(ipa)})
        assert not (await device.prepare(Artifacts())).skipped
        assert sorted(phone.installs) == sorted([HARNESS, other])
        assert (await device.prepare(Artifacts())).skipped
        make_ipa(ipa, other, build="7")  # the competitor's .ipa changed on disk
        assert not (await device.prepare(Artifacts())).skipped
        assert phone.installs.count(other) == 2 and phone.installs.count(HARNESS) == 1

    run(main())


def test_wrong_or_missing_packages_are_typed(tmp_path: Path) -> None:
    async def main() -> None:
        phone = FakePhone()
        wrong = make_ipa(tmp_path / "wrong.ipa", "com.example.other")
        device, _ = make_device(phone, tmp_path, ipa=str(wrong))
        with pytest.raises(DeviceUnavailable) as exc:
            await device.prepare(Artifacts())
        assert exc.value.state == "harness_missing" and "com.example.other" in str(exc.value)
        bare, _ = make_device(phone, tmp_path, ipa=None)
        with pytest.raises(DeviceUnavailable) as exc:
            await bare.prepare(Artifacts())
        assert exc.value.state == "harness_missing" and "ipa" in (exc.value.fix or "")
        (tmp_path / "junk.ipa").write_bytes(b"not a zip")
        junk, _ = make_device(phone, tmp_path, ipa=str(tmp_path / "junk.ipa"))
        with pytest.raises(DeviceUnavailable, match=r"not an \.ipa"):
            await junk.prepare(Artifacts())
        assert phone.installs == []

    run(main())


def test_a_refused_install_is_device_unavailable(tmp_path: Path) -> None:
    async def main() -> None:
        phone = FakePhone()
        device, _ = make_device(phone, tmp_path)
        phone.plugged = False
        with pytest.raises(DeviceUnavailable) as exc:
            await device.prepare(Artifacts())
        assert exc.value.state == "not_connected"

    run(main())


def test_the_phone_refusing_an_install_is_device_unavailable_with_its_reason(tmp_path: Path) -> None:
    async def main() -> None:
        phone = FakePhone()
        phone.install_error = "ApplicationVerificationFailed"
        device, _ = make_device(phone, tmp_path)
        with pytest.raises(DeviceUnavailable, match="ApplicationVerificationFailed") as exc:
            await device.prepare(Artifacts())
        assert exc.value.state == "error" and phone.installs == []
        phone.install_error = None
        assert not (await device.prepare(Artifacts())).skipped

    run(main())


def test_a_phone_older_than_the_apps_minimum_ios_is_told_so_before_installing(tmp_path: Path) -> None:
    async def main() -> None:
        phone = FakePhone(ios="17.5")  # the harness app targets iOS 18 (Metal mathMode)
        device, _ = make_device(phone, tmp_path)
        with pytest.raises(DeviceUnavailable, match=r"needs iOS 18\.0 or later .* this phone runs iOS 17\.5") as exc:
            await device.prepare(Artifacts())
        assert "update the phone to iOS 18.0" in (exc.value.fix or "") and phone.installs == []
        older = make_ipa(tmp_path / "old.ipa", HARNESS, minimum_os="17.0")
        assert not (await device.prepare(Artifacts(harness=str(older)))).skipped

    run(main())
