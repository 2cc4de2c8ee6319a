"""diagnostics_relay (battery from the simulator's thermal model) and mobile_image_mounter on the
twin, and the thermal model itself driven by an app's CPU time."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pymobiledevice3 import exceptions as pmd_exc
from pymobiledevice3.services.diagnostics import DiagnosticsService
from pymobiledevice3.services.mobile_image_mounter import MobileImageMounterService, image_type_for_device
from twin_support import pmd, running_twin, with_lockdown

from orchestrator.config.sim import ThermalModel
from orchestrator.devices.iphone.telemetry import battery
from orchestrator.twin import thermal as twin_thermal
from orchestrator.twin.thermal import ThermalClock


async def _battery(client: Any) -> Any:
    async with DiagnosticsService(lockdown=client) as diagnostics:
        return await diagnostics.get_battery()


def test_battery_reads_the_thermal_model_as_the_backend_parses_it(tmp_path: Path) -> None:
    model = ThermalModel(ambient_c=22.0, idle_rise_c=5.0, start_rise_c=3.5)
    with running_twin(tmp_path, thermal=model, charging=True, battery_percent=64) as twin:
        raw = with_lockdown(twin, tmp_path, _battery)
        cli = pmd(twin, tmp_path, "diagnostics", "battery", "single")
    celsius, charging, missing = battery(raw)
    assert celsius is not None and 30.0 <= celsius <= 30.5  # idle 27 C + 3.5 at start, barely cooled
    assert charging is True and missing == [] and raw["CurrentCapacity"] == 64
    assert cli.returncode == 0, cli.stderr
    assert json.loads(cli.stdout)["IsCharging"] is True


def test_battery_temperature_scale_is_a_knob(tmp_path: Path) -> None:
    with running_twin(tmp_path, battery_temperature_scale=10.0) as twin:
        raw = with_lockdown(twin, tmp_path, _battery)
    assert 270 <= raw["Temperature"] <= 285  # 28 C in tenths


def test_thermal_model_heats_with_cpu_time_and_cools_when_idle(monkeypatch: Any) -> None:
    now = [0.0]
    cpu = {4242: 0.0}
    monkeypatch.setattr(twin_thermal, "cpu_seconds", lambda pid: cpu.get(pid))
    running = [4242]
    clock = ThermalClock(ThermalModel(), speed=10.0, pids=lambda: running, clock=lambda: now[0])
    idle = clock.battery_c()
    assert clock.state() == "nominal"
    for _ in range(60):  # 60 wall seconds of one busy core = 600 model seconds
        now[0] += 1.0
        cpu[4242] += 1.0
        clock.update()
    assert clock.load == pytest.approx(1.0)
    hot, state = clock.battery_c(), clock.state()
    assert hot > idle + 15 and state in ("serious", "critical")
    running.clear()
    now[0] += 300.0  # 3000 model seconds idle
    assert clock.state() == "nominal" and clock.battery_c() < idle + 1


def test_developer_disk_image_lookups(tmp_path: Path) -> None:
    async def mounted(client: Any) -> tuple[str, bool, bool]:
        async with MobileImageMounterService(lockdown=client) as mounter:
            kind = image_type_for_device(client)
            return kind, await mounter.is_image_mounted(kind), await mounter.query_developer_mode_status()

    for ios, kind in (("18.2", "Personalized"), ("16.7", "Developer")):
        with running_twin(tmp_path / ios, ios=ios) as twin:
            assert with_lockdown(twin, tmp_path, mounted) == (kind, True, True)
    with running_twin(tmp_path / "off", ddi_mounted=False) as twin:
        assert with_lockdown(twin, tmp_path, mounted) == ("Personalized", False, True)
        listed = pmd(twin, tmp_path, "mounter", "list")
        assert listed.returncode == 0 and json.loads(listed.stdout) == [], listed.stderr
    with running_twin(tmp_path / "nodev", developer_mode=False) as twin:
        assert with_lockdown(twin, tmp_path, mounted) == ("Personalized", False, False)

        async def mount(client: Any) -> None:
            async with MobileImageMounterService(lockdown=client) as mounter:
                await mounter.mount_image("Personalized", b"sig")

        with pytest.raises(pmd_exc.DeveloperModeIsNotEnabledError):
            with_lockdown(twin, tmp_path, mount)
