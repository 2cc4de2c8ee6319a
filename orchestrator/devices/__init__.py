"""The device boundary and its backends. `open_device` is the one place a backend is chosen."""

from __future__ import annotations

from orchestrator.clock import Clock, VirtualClock
from orchestrator.config.fleet import Fleet
from orchestrator.config.sim import SimDeviceConfig
from orchestrator.devices.base import (
    Artifacts,
    Device,
    DeviceInfo,
    DeviceUnavailable,
    PrepareReport,
    Telemetry,
    TrialFailure,
    result_or_failure,
)
from orchestrator.devices.fake import FakeDevice

__all__ = [
    "AVAILABLE_KINDS",
    "Artifacts",
    "Device",
    "DeviceInfo",
    "DeviceUnavailable",
    "FakeDevice",
    "PrepareReport",
    "Telemetry",
    "TrialFailure",
    "open_device",
    "result_or_failure",
]

AVAILABLE_KINDS = ("sim",)


class BackendUnavailable(Exception):
    pass


def open_device(fleet: Fleet, device_id: str, *, stream: int = 0) -> tuple[Device, Clock]:
    """The device and the clock its session runs on (virtual for simulated devices)."""
    cfg = fleet.device(device_id)
    if isinstance(cfg, SimDeviceConfig):
        from orchestrator.devices.sim import SimDevice

        clock = VirtualClock()
        return SimDevice(cfg, clock, stream=stream), clock
    raise BackendUnavailable(f"device {device_id!r}: kind {cfg.kind!r}: backend not available yet")
