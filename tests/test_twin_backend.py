"""The iphone backend (`IphoneDevice` with its real `UsbConnector`) against the twin, unchanged:
before iOS 17 developer services go over lockdown; from iOS 17 through `tunnel: tunneld`, the twin's
tunneld stand-in naming its RSD (dtservicehub). Prepare, health, info, telemetry, trials and crash
reports all run through pymobiledevice3 to real processes. (The tunnel itself, and the backend's
default userspace tunnel, are not emulated: see docs/twin.md.)"""

from __future__ import annotations

import asyncio
import hashlib
import json
from pathlib import Path
from typing import Any

import pymobiledevice3.common
import pytest
from pymobiledevice3.services.house_arrest import HouseArrestService
from twin_support import BUNDLE, HARNESS, MODEL, STAND_IN_MODEL, app_ipa, harness_has_app, running_twin

from orchestrator.config.fleet import IphoneDeviceConfig
from orchestrator.devices.contract import check_device_contract, contract_spec
from orchestrator.devices.iphone import IphoneDevice
from orchestrator.protocol import TrialResult
from orchestrator.protocol.device import ArtifactFile, Artifacts, TrialFailure
from orchestrator.twin import make_ipa


@pytest.fixture(autouse=True)
def _pmd_home(tmp_path: Path, monkeypatch: Any) -> None:
    """The backend opens lockdown without a records folder: pymobiledevice3 would make one in ~."""
    monkeypatch.setattr(pymobiledevice3.common, "_HOMEFOLDER", tmp_path / "pmd-home")


def _device(twin: Any, ipa: Path, **over: Any) -> IphoneDevice:
    fields: dict[str, Any] = {
        "id": "twin", "kind": "iphone", "udid": twin.phone.cfg.udid, "usbmux_address": twin.address,
        "ipa": str(ipa), "bundle_id": BUNDLE, "poll_s": 0.05, "call_timeout_s": 15.0, "connect_timeout_s": 15.0,
    }
    if twin.tunneld_address is not None:
        fields.update(tunnel="tunneld", tunneld_address=twin.tunneld_address)
    fields.update(over)
    return IphoneDevice(IphoneDeviceConfig.model_validate(fields))


@pytest.mark.parametrize(("ios", "build"), [("16.7", "20H19"), ("18.2", "22C152")])
def test_the_iphone_backend_prepares_measures_and_runs_trials_on_the_twin(tmp_path: Path, ios: str, build: str) -> None:
    ipa = app_ipa(tmp_path, minimum_os="16.0", increased_memory=False)

    async def body(device: IphoneDevice, twin: Any) -> None:
        health = await device.health()
        assert health.state == "harness_missing", health
        first = await device.prepare(Artifacts())
        again = await device.prepare(Artifacts())
        assert not first.skipped and again.skipped and again.installed == first.installed
        assert (await device.health()).state == "ok"
        # what the stand-in app does per trial (the backend sends only --spec and --out)
        plan = {"twin-0002": ["--signal", "SIGSEGV"], "twin-0003": ["--sleep", "30"]}
        await _push(device, "/Documents/stand-in.json", json.dumps(plan).encode())
        await _push(device, f"/Documents/{STAND_IN_MODEL}", b"GGUF")
        info = await device.info()
        assert info.os == f"iOS {ios} ({build})" and info.chip_class == "A18 Pro"
        assert info.harness_version is not None and info.harness_version.startswith("1.0 (1) sha256:")
        reading = await device.telemetry()
        assert reading.battery_c is not None and 27.5 <= reading.battery_c <= 28.5 and reading.charging is False

        result = await device.run_trial(contract_spec("rawloop-cpu", "models/m.gguf", "twin-0001"), 30)
        assert isinstance(result, TrialResult) and result.trial_id == "twin-0001", result
        assert result.thermal[0].state == "nominal"  # the twin's thermal state, read by the app at launch

        crashed = await device.run_trial(contract_spec("rawloop-cpu", "models/m.gguf", "twin-0002"), 30)
        assert isinstance(crashed, TrialFailure) and crashed.kind == "crashed", crashed
        assert "signal 11" in crashed.message
        assert crashed.detail is not None and crashed.detail.startswith("HarnessApp-")
        assert "EXC_BAD_ACCESS" in crashed.detail and "Fatal error: about to die" in crashed.detail

        hung = await device.run_trial(contract_spec("rawloop-cpu", "models/m.gguf", "twin-0003"), 0.5)
        assert isinstance(hung, TrialFailure) and hung.kind == "hung", hung

        twin.call(lambda p: setattr(p, "locked", True))  # services start; SpringBoard launches nothing
        locked = await device.run_trial(contract_spec("rawloop-cpu", "models/m.gguf", "twin-0004"), 30)
        assert isinstance(locked, TrialFailure) and locked.kind == "launch_failed", locked
        assert locked.detail is not None and "unlock the phone" in locked.detail
        await device.close()

    with running_twin(tmp_path, ios=ios, crash_report_delay_s=30) as twin:
        device = _device(twin, ipa)
        asyncio.run(body(device, twin))
        launched = [argv for bundle, argv in twin.phone.processes.launches if bundle == BUNDLE]
    assert launched[0][-4:] == ["--spec", "specs/twin-0001.json", "--out", "results/twin-0001.json"]


async def _push(device: IphoneDevice, path: str, data: bytes) -> None:
    lockdown = await device.connector.lockdown()
    async with await HouseArrestService.create(lockdown, BUNDLE) as box:
        await box.makedirs(path.rsplit("/", 1)[0])
        await box.set_file_contents(path, data)


@pytest.mark.skipif(not harness_has_app(), reason="no harness build with `harness app` (swift build in ios_harness)")
@pytest.mark.parametrize("ios", ["16.7", "18.2"])
def test_the_device_contract_holds_on_the_twin_running_the_real_harness(tmp_path: Path, ios: str) -> None:
    """`check_device_contract` on IphoneDevice -> pymobiledevice3 -> twin -> `harness app`."""
    ipa = make_ipa(tmp_path / "harness.ipa", HARNESS, BUNDLE, minimum_os="16.0")

    async def body(device: IphoneDevice) -> None:
        await device.prepare(Artifacts())
        await _push(device, "/Documents/models/t1.gguf", MODEL.read_bytes())
        await check_device_contract(device, engine="rawloop-cpu", model="models/t1.gguf", timeout=60, probes=False)

    with running_twin(tmp_path, ios=ios) as twin:
        asyncio.run(body(_device(twin, ipa)))


def test_a_cable_pulled_mid_trial_is_a_disconnect_until_replugged(tmp_path: Path) -> None:
    ipa = app_ipa(tmp_path, minimum_os="16.0")

    async def body(device: IphoneDevice, twin: Any) -> None:
        await device.prepare(Artifacts())
        await _push(device, "/Documents/stand-in.json", json.dumps({"twin-0005": ["--sleep", "30"]}).encode())
        await _push(device, f"/Documents/{STAND_IN_MODEL}", b"GGUF")
        trial = asyncio.create_task(device.run_trial(contract_spec("rawloop-cpu", STAND_IN_MODEL, "twin-0005"), 60))
        await asyncio.sleep(1.0)
        await asyncio.to_thread(twin.unplug)
        failure = await trial
        assert isinstance(failure, TrialFailure) and failure.kind == "disconnected", failure
        assert twin.call(lambda p: p.processes.by_bundle(BUNDLE)) is not None, "the app keeps running on the phone"
        again = await device.run_trial(contract_spec("rawloop-cpu", STAND_IN_MODEL, "twin-0006"), 30)
        assert isinstance(again, TrialFailure) and again.kind == "disconnected", again  # still unplugged: typed
        health = await device.health()
        assert health.state == "not_connected", health
        await asyncio.to_thread(twin.replug)
        assert (await device.health()).state == "ok"
        after = await device.run_trial(contract_spec("rawloop-cpu", STAND_IN_MODEL, "twin-0007"), 30)  # reconnected
        assert isinstance(after, TrialResult) and after.trial_id == "twin-0007", after
        await device.close()

    with running_twin(tmp_path, ios="18.2") as twin:
        asyncio.run(body(_device(twin, ipa), twin))


@pytest.mark.parametrize(("signing", "prefer_documents", "granted"), [
    ({"file_sharing": False}, False, False),  # development-signed, no file sharing: VendContainer only
    ({"file_sharing": False}, True, False),  # the fleet prefers VendDocuments: refused, VendContainer learnt
    ({"development": False}, False, True),  # file sharing, no development profile: VendDocuments only
])
def test_house_arrest_mode_is_learnt_per_app(tmp_path: Path, monkeypatch: Any, signing: dict[str, bool],
                                            prefer_documents: bool, granted: bool) -> None:
    """The phone refuses VendContainer to an app without a development profile and VendDocuments to an
    app without UIFileSharingEnabled (the twin does both): the backend tries the fleet's preference,
    falls back to the other once, and opens that app's container the granted way from then on; the
    model, the marker, specs and results land in the same Documents either way."""
    ipa = app_ipa(tmp_path, minimum_os="16.0", increased_memory=False, **signing)
    sha = hashlib.sha256(MODEL.read_bytes()).hexdigest()
    model = ArtifactFile(source=str(MODEL), sha256=sha, size=MODEL.stat().st_size, name=f"models/{sha[:16]}/t1.gguf")
    vends: list[bool] = []
    create = HouseArrestService.create.__func__  # type: ignore[attr-defined]

    async def counting(cls: Any, lockdown: Any, bundle_id: str, documents_only: bool = False) -> Any:
        vends.append(documents_only)
        return await create(cls, lockdown, bundle_id, documents_only=documents_only)

    monkeypatch.setattr(HouseArrestService, "create", classmethod(counting))

    async def body(device: IphoneDevice) -> None:
        report = await device.prepare(Artifacts(files=[model], model=model.name))
        assert [f.bytes_sent for f in report.files] == [model.size]
        assert (await device.prepare(Artifacts(files=[model], model=model.name))).skipped
        result = await device.run_trial(contract_spec("rawloop-cpu", model.name, "twin-0001"), 30)
        assert isinstance(result, TrialResult) and result.trial_id == "twin-0001", result
        assert (await device.health()).state == "ok"
        await device.close()

    with running_twin(tmp_path, ios="16.7") as twin:
        asyncio.run(body(_device(twin, ipa, documents_only=prefer_documents)))
        documents = twin.phone.apps.container(twin.phone.apps.get(BUNDLE)) / "Documents"  # type: ignore[arg-type]
    assert (documents / model.name).read_bytes() == MODEL.read_bytes()
    assert (documents / (model.name + ".sha256")).read_text().strip() == sha
    assert (documents / ".orch" / "installed.json").is_file()
    # the preference first; refused at most once (the first time), the granted way every time after
    assert vends[0] == prefer_documents and len(vends) > 4, vends
    assert vends.count(not granted) == int(prefer_documents != granted) and vends[1:] == [granted] * (len(vends) - 1)


@pytest.mark.skipif(not harness_has_app(), reason="no harness build with `harness app` (swift build in ios_harness)")
def test_the_thermal_probe_is_answered_by_the_real_app(tmp_path: Path) -> None:
    """`thermal_probe: true` launches the app with `--probe thermal`; the real app (not a double) answers
    with the state the phone gives it, at once (it used to ignore the option: each reading waited 30 s)."""
    ipa = make_ipa(tmp_path / "harness.ipa", HARNESS, BUNDLE, minimum_os="16.0")

    async def body(device: IphoneDevice, twin: Any) -> None:
        await device.prepare(Artifacts())
        loop = asyncio.get_running_loop()
        start = loop.time()
        reading = await device.telemetry()
        assert loop.time() - start < 15, "answered, not timed out"
        assert reading.thermal_state == "nominal" and reading.low_power is True, reading
        probes = [argv for bundle, argv in twin.call(lambda p: p.processes.launches) if "--probe" in argv]
        assert probes and probes[-1][probes[-1].index("--probe") + 1] == "thermal"

    with running_twin(tmp_path, ios="16.7", low_power=True) as twin:
        asyncio.run(body(_device(twin, ipa, thermal_probe=True, thermal_max_age_s=0), twin))
