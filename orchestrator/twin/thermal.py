"""Battery temperature and thermal state from the simulator's thermal model, driven by the CPU
time the twin's app processes really use (Linux ``/proc``), on the wall clock.

Load 1.0 is one core busy, as in the simulator's model; ``thermal_speed`` runs model time faster
than the wall clock so a demo can heat a phone in minutes.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable
from typing import Any, cast

from orchestrator.config.sim import ThermalModel
from orchestrator.devices.sim import Thermals
from orchestrator.protocol import ThermalState

_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def cpu_seconds(pid: int) -> float | None:
    """utime + stime of a process, or None where /proc cannot say."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            fields = fh.read().rsplit(b")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / _TICK
    except (OSError, IndexError, ValueError):
        return None


class ThermalClock:
    """The model, advanced to now on every read. ``pids`` names the running app processes."""

    def __init__(self, model: ThermalModel, speed: float, pids: Callable[[], Iterable[int]],
                 clock: Callable[[], float] = time.monotonic):
        self.model = model
        self.speed = speed
        self.pids = pids
        self.clock = clock
        self.thermals = Thermals(cast(Any, _SimView(model)))  # it reads only .thermal
        self._t = clock()
        self._cpu: dict[int, float] = {}
        self.load = 0.0

    def update(self) -> None:
        now = self.clock()
        dt = now - self._t
        if dt <= 0:
            return
        used, seen = 0.0, {}
        for pid in self.pids():
            cpu = cpu_seconds(pid)
            if cpu is None:
                used += dt  # no /proc: count a running app as one busy core
                continue
            used += max(0.0, cpu - self._cpu.get(pid, cpu))
            seen[pid] = cpu
        self._cpu = seen
        self.load = used / dt
        self.thermals.evolve(dt * self.speed, self.model.heat_c_per_s * self.load)
        self._t = now

    def battery_c(self) -> float:
        self.update()
        return self.thermals.battery

    def state(self) -> ThermalState:
        self.update()
        return self.thermals.state()


class _SimView:
    """The slice of a sim device's config that `Thermals` reads."""

    def __init__(self, model: ThermalModel):
        self.thermal = model


def battery_entry(celsius: float, scale: float, percent: int, charging: bool) -> dict[str, Any]:
    """An IOPMPowerSource entry as diagnostics_relay returns it."""
    return {
        "AtCriticalLevel": percent <= 5, "BatteryInstalled": True, "CurrentCapacity": percent,
        "CycleCount": 112, "DesignCapacity": 3561, "ExternalChargeCapable": charging,
        "ExternalConnected": charging, "FullyCharged": charging and percent >= 100,
        "InstantAmperage": 450 if charging else -310, "IsCharging": charging and percent < 100,
        "MaxCapacity": 100, "Temperature": round(celsius * scale), "UpdateTime": int(time.time()),
        "Voltage": 3700 + 5 * percent,
    }
