"""The device boundary and its backends. `open_device` is the one place a backend is chosen."""

from __future__ import annotations

import shlex
import sys
from typing import TYPE_CHECKING

from orchestrator.clock import Clock, SystemClock, VirtualClock
from orchestrator.config.fleet import Fleet, HostDeviceConfig, SshHost
from orchestrator.config.sim import SimDeviceConfig
from orchestrator.devices.base import Device
from orchestrator.devices.fake import FakeDevice
from orchestrator.protocol.device import (
    Artifacts,
    DeviceInfo,
    DeviceUnavailable,
    PrepareReport,
    Telemetry,
    TrialFailure,
    result_or_failure,
)
from orchestrator.runners import LocalRunner, Runner
from orchestrator.runners.ssh import SshRunner

if TYPE_CHECKING:
    from orchestrator.devices.host import Launchers

__all__ = [
    "Artifacts",
    "Device",
    "DeviceInfo",
    "DeviceUnavailable",
    "FakeDevice",
    "PrepareReport",
    "Telemetry",
    "TrialFailure",
    "open_device",
    "open_runner",
    "result_or_failure",
]


def _ssh_host(fleet: Fleet, host: str) -> SshHost | None:
    return next((h for h in fleet.hosts if h.id == host and isinstance(h, SshHost)), None)


def open_runner(fleet: Fleet, host: str) -> Runner:
    """The runner for one of the fleet's hosts: `local`, or an SSH host by id."""
    ssh = _ssh_host(fleet, host)
    return SshRunner(ssh) if ssh is not None else LocalRunner()


def open_device(fleet: Fleet, device_id: str, *, stream: int = 0, launchers: Launchers | None = None,
                ) -> tuple[Device, Clock]:
    """The device and the clock its session runs on (virtual for simulated devices).

    A device on an SSH host runs its commands there; iPhones on another host (and hosts with
    `via: agent`) are served by `orch agent` on that host. `launchers` finds a host's runtimes that
    are not the harness (the runtime catalog's adapters; without it a host runs the harness only).
    """
    cfg = fleet.device(device_id)
    if isinstance(cfg, SimDeviceConfig):
        from orchestrator.devices.sim import SimDevice

        clock = VirtualClock()
        return SimDevice(cfg, clock, stream=stream), clock
    ssh = _ssh_host(fleet, cfg.host)
    runner = open_runner(fleet, cfg.host)
    if (isinstance(cfg, HostDeviceConfig) and cfg.via == "agent") or (ssh is not None and cfg.kind == "iphone"):
        from orchestrator.devices.agent_client import AgentDevice

        command = shlex.split(ssh.orch_command) if ssh is not None else [sys.executable, "-m", "orchestrator"]
        return AgentDevice(cfg, runner, command), SystemClock()
    if isinstance(cfg, HostDeviceConfig):
        from orchestrator.devices.host import HostDevice, harness_only

        return HostDevice(cfg, runner, launchers=launchers or harness_only), SystemClock()
    from orchestrator.devices.iphone import IphoneDevice

    return IphoneDevice(cfg), SystemClock()
