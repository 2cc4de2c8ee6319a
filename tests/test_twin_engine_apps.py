"""Through the iphone backend on the twin, moved here from the in-process fakes: a trial's spec pushed
and cleaned up, an engine run by another app (which gets the model in its own Documents), a
competitor app's crash found under its own name, and telemetry (the battery from the twin's thermal
model, the thermal state the app read at launch, and how it goes stale)."""

from __future__ import annotations

import asyncio
import hashlib
import json
from pathlib import Path
from typing import Any

import pymobiledevice3.common
import pytest
from pymobiledevice3.services.house_arrest import HouseArrestService
from test_twin_backend import _device
from twin_support import BUNDLE, HARNESS, MODEL, STAND_IN_MODEL, app_executable, harness_has_app, running_twin

from orchestrator.config.sim import ThermalModel
from orchestrator.devices.contract import contract_spec
from orchestrator.devices.iphone import IphoneDevice
from orchestrator.protocol import TrialResult
from orchestrator.protocol.device import ArtifactFile, Artifacts, TrialFailure
from orchestrator.twin import ThreadedTwin, make_ipa

OTHER = "com.example.competitor"


@pytest.fixture(autouse=True)
def _pmd_home(tmp_path: Path, monkeypatch: Any) -> None:
    monkeypatch.setattr(pymobiledevice3.common, "_HOMEFOLDER", tmp_path / "pmd-home")


def _model() -> ArtifactFile:
    sha = hashlib.sha256(MODEL.read_bytes()).hexdigest()
    return ArtifactFile(source=str(MODEL), sha256=sha, size=MODEL.stat().st_size, name=f"models/{sha[:16]}/t1.gguf")


def _documents(twin: ThreadedTwin, bundle: str) -> Path:
    return twin.phone.apps.container(twin.phone.apps.get(bundle)) / "Documents"  # type: ignore[arg-type]


async def _push(device: IphoneDevice, bundle: str, path: str, data: bytes) -> None:
    async with await HouseArrestService.create(await device.connector.lockdown(), bundle) as box:
        await box.makedirs(path.rsplit("/", 1)[0])
        await box.set_file_contents(path, data)


@pytest.mark.skipif(not harness_has_app(), reason="no harness build with `harness app` (swift build in ios_harness)")
def test_an_engine_app_gets_the_model_in_its_own_documents_and_runs_its_trials(tmp_path: Path) -> None:
    """`engine_apps` sends rawloop-cpu to another app (here the real harness again, under another
    bundle id and executable name): prepare pushes the model into that app's Documents as well, and
    the real app opens it there; rawloop-metal stays in the harness app. Specs and results are
    cleaned up in both containers."""
    harness = make_ipa(tmp_path / "harness.ipa", HARNESS, BUNDLE, minimum_os="16.0")
    other = make_ipa(tmp_path / "other.ipa", HARNESS, OTHER, name="Competitor", minimum_os="16.0")
    model = _model()
    wanted = Artifacts(files=[model], model=model.name, engines=["rawloop-cpu", "rawloop-metal"])

    async def body(device: IphoneDevice) -> None:
        report = await device.prepare(wanted)
        assert [(f.app, f.bytes_sent) for f in report.files] == [(OTHER, model.size), (BUNDLE, model.size)]
        again = await device.prepare(wanted)
        assert [f.bytes_sent for f in again.files] == [0, 0], "each app's marker says it holds the model"
        for engine, trial_id in (("rawloop-cpu", "twin-0001"), ("rawloop-metal", "twin-0002")):
            spec = contract_spec(engine, report.path_of(model.name) or "", trial_id)
            result = await device.run_trial(spec.model_copy(update={"decode_tokens": 4, "prompt_tokens": 4}), 60)
            assert isinstance(result, TrialResult) and result.status == "ok", result
        await device.close()

    with running_twin(tmp_path, ios="18.2") as twin:
        asyncio.run(body(_device(twin, harness, competitor_apps={OTHER: str(other)},
                                 engine_apps={"rawloop-cpu": OTHER})))
        launched = [(bundle, argv[-4:]) for bundle, argv in twin.phone.processes.launches]
        boxes = {b: _documents(twin, b) for b in (BUNDLE, OTHER)}
    assert launched == [(OTHER, ["--spec", "specs/twin-0001.json", "--out", "results/twin-0001.json"]),
                        (BUNDLE, ["--spec", "specs/twin-0002.json", "--out", "results/twin-0002.json"])]
    for documents in boxes.values():
        assert (documents / model.name).read_bytes() == MODEL.read_bytes()
        left = sorted(p.name for sub in ("specs", "results") for p in (documents / sub).glob("*"))
        assert left == [], f"a trial leaves no spec or result behind: {left}"


def test_a_competitor_apps_crash_is_found_under_its_own_name(tmp_path: Path) -> None:
    exe = app_executable(tmp_path)
    harness = make_ipa(tmp_path / "harness.ipa", exe, BUNDLE, minimum_os="16.0")
    other = make_ipa(tmp_path / "other.ipa", exe, OTHER, name="Competitor", minimum_os="16.0")

    async def body(device: IphoneDevice) -> None:
        await device.prepare(Artifacts())
        await _push(device, OTHER, "/Documents/stand-in.json", json.dumps({"twin-0001": ["--signal", "SIGSEGV"]})
                    .encode())
        failure = await device.run_trial(contract_spec("litert", STAND_IN_MODEL, "twin-0001"), 30)
        assert isinstance(failure, TrialFailure) and failure.kind == "crashed", failure
        assert failure.detail is not None and failure.detail.startswith("Competitor-"), failure
        await device.close()

    with running_twin(tmp_path, ios="16.7") as twin:
        asyncio.run(body(_device(twin, harness, competitor_apps={OTHER: str(other)}, engine_apps={"litert": OTHER},
                                 crash_report_wait_s=5.0)))


def test_telemetry_reads_the_battery_and_the_thermal_state_the_app_saw(tmp_path: Path) -> None:
    """The battery from diagnostics_relay (the twin's thermal model); the thermal state from the last
    result (the state the app read from the OS at launch) while it is fresh; nothing when the phone
    gives a battery temperature that is not hundredths of a degree."""
    exe = app_executable(tmp_path)
    ipa = make_ipa(tmp_path / "harness.ipa", exe, BUNDLE, minimum_os="16.0")
    warm = ThermalModel(start_rise_c=10)  # 38 C at the start, above fair (36 C): a warm phone

    async def body(device: IphoneDevice, twin: ThreadedTwin) -> None:
        await device.prepare(Artifacts())
        await _push(device, BUNDLE, f"/Documents/{STAND_IN_MODEL}", b"GGUF")
        first = await device.telemetry()
        assert first.battery_c is not None and 25 <= first.battery_c <= 40 and first.charging is False, first
        assert first.thermal_state is None and first.unavailable == ["thermal_state", "low_power"], first
        assert isinstance(await device.run_trial(contract_spec("rawloop-cpu", STAND_IN_MODEL, "twin-0001"), 30),
                          TrialResult)
        after = await device.telemetry()
        assert after.thermal_state == "fair" and "thermal_state" not in after.unavailable, after
        scaled = twin.phone.cfg.model_copy(update={"battery_temperature_scale": 10_000.0})  # not hundredths: refused
        twin.call(lambda p: setattr(p, "cfg", scaled))
        odd = await device.telemetry()
        assert odd.battery_c is None and "battery_c" in odd.unavailable, odd
        await device.close()

    async def stale(device: IphoneDevice) -> None:
        await device.prepare(Artifacts())
        await _push(device, BUNDLE, f"/Documents/{STAND_IN_MODEL}", b"GGUF")
        assert isinstance(await device.run_trial(contract_spec("rawloop-cpu", STAND_IN_MODEL, "twin-0002"), 30),
                          TrialResult)
        reading = await device.telemetry()
        assert reading.thermal_state is None and "thermal_state" in reading.unavailable, reading
        await device.close()

    with running_twin(tmp_path, ios="16.7", thermal=warm) as twin:
        asyncio.run(body(_device(twin, ipa), twin))
        asyncio.run(stale(_device(twin, ipa, thermal_max_age_s=0)))
