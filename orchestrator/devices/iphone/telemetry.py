"""Telemetry readings: battery temperature and charging from diagnostics, thermal state from the app.

Battery: ``DiagnosticsService.get_battery()`` returns the IORegistry entry of class
``IOPMPowerSource``. pymobiledevice3 documents no unit for its ``Temperature``; we read it as
hundredths of a degree Celsius (3050 -> 30.5 C), as AppleSmartBattery reports it on Macs
(ioreg), and refuse values that are implausible under that reading rather than guess another.
(Assumption, not verified on a phone.)

Thermal state: iOS exposes no host-side API; the harness app records ``ProcessInfo.thermalState``
in every result. Telemetry uses the last result's final sample while it is fresh, or, when
``thermal_probe`` is set, launches the app briefly with ``--probe thermal``.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict

from orchestrator.protocol import ThermalState, TrialResult

TEMPERATURE_SCALE = 100.0
PLAUSIBLE_C = (-20.0, 80.0)


class ThermalProbe(BaseModel):
    """What the app writes for ``--probe thermal``."""

    model_config = ConfigDict(frozen=True, extra="ignore")
    thermal_state: ThermalState
    low_power: bool | None = None


def battery(raw: Any) -> tuple[float | None, bool | None, list[str]]:
    """(battery_c, charging, names that could not be read) from an IOPMPowerSource entry."""
    missing: list[str] = []
    entry = raw if isinstance(raw, dict) else {}
    temp = entry.get("Temperature")
    celsius: float | None = None
    if isinstance(temp, int | float) and not isinstance(temp, bool):
        value = temp / TEMPERATURE_SCALE
        if PLAUSIBLE_C[0] <= value <= PLAUSIBLE_C[1]:
            celsius = round(value, 2)
    if celsius is None:
        missing.append("battery_c")
    charging = entry.get("IsCharging")
    if not isinstance(charging, bool):
        charging = None
        missing.append("charging")
    return celsius, charging, missing


def last_thermal(result: TrialResult) -> ThermalState | None:
    """The state at the end of a trial: the result's last thermal sample."""
    if not result.thermal:
        return None
    return max(result.thermal, key=lambda s: s.t_ns).state
