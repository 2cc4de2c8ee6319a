"""The device boundary and its backends. `open_device` is the one place a backend is chosen."""

from __future__ import annotations

import shlex
import sys

from orchestrator.clock import Clock, SystemClock, VirtualClock
from orchestrator.config.fleet import Fleet, HostDeviceConfig, IphoneDeviceConfig, LocalHost, SshHost
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
from orchestrator.devices.runners import LocalRunner, Runner
from orchestrator.devices.ssh import SshRunner

__all__ = [
    "Artifacts",
    "BackendUnavailable",
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


class BackendUnavailable(Exception):
    pass


def runner_for(fleet: Fleet, host_id: str) -> Runner:
    """Where a device's commands run: this machine, or a fleet host over SSH."""
    host = next((h for h in fleet.hosts if h.id == host_id), None)
    if host is None or isinstance(host, LocalHost):
        return LocalRunner()
    return SshRunner(host)


def open_device(fleet: Fleet, device_id: str, *, stream: int = 0) -> tuple[Device, Clock]:
    """The device and the clock its session runs on (virtual for simulated devices)."""
    cfg = fleet.device(device_id)
    if isinstance(cfg, SimDeviceConfig):
        from orchestrator.devices.sim import SimDevice

        clock = VirtualClock()
        return SimDevice(cfg, clock, stream=stream), clock
    host = next((h for h in fleet.hosts if h.id == cfg.host), None)
    remote_iphone = isinstance(host, SshHost) and cfg.kind == "iphone"
    if (isinstance(cfg, HostDeviceConfig) and cfg.via == "agent") or remote_iphone:
        from orchestrator.devices.agent import AgentDevice

        if isinstance(host, SshHost):
            return AgentDevice(cfg, SshRunner(host), shlex.split(host.orch_command)), SystemClock()
        return AgentDevice(cfg, LocalRunner(), [sys.executable, "-m", "orchestrator"]), SystemClock()
    if isinstance(cfg, HostDeviceConfig):
        from orchestrator.devices.host import HostDevice

        return HostDevice(cfg, runner_for(fleet, cfg.host)), SystemClock()
    if isinstance(cfg, IphoneDeviceConfig):
        from orchestrator.devices.iphone import IphoneDevice

        return IphoneDevice(cfg), SystemClock()
    raise BackendUnavailable(f"device {device_id!r}: kind {cfg.kind!r}: backend not available yet")
