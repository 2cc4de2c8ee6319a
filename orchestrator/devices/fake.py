"""A device that answers every trial with a plain function: for tests and for wiring checks."""

from __future__ import annotations

from collections.abc import Callable

from orchestrator.devices.base import Device
from orchestrator.devices.interference import CpuSample
from orchestrator.protocol import TrialResult, TrialSpec
from orchestrator.protocol.device import Artifacts, DeviceInfo, Placed, PrepareReport, Progress, Telemetry, TrialFailure

Handler = Callable[[TrialSpec], TrialResult | TrialFailure]


class FakeDevice(Device):
    def __init__(self, device_id: str, handler: Handler, *, telemetry: Telemetry | None = None,
                 cpu: Callable[[], CpuSample | None] | None = None):
        self.id = device_id
        self.handler = handler
        self.cpu = cpu
        self.specs: list[TrialSpec] = []
        self._telemetry = telemetry or Telemetry(t=0.0, thermal_state="nominal", battery_c=30.0)
        self.installed: str | None = None
        self.closed = False

    async def info(self) -> DeviceInfo:
        return DeviceInfo(
            id=self.id, kind="fake", model="fake", chip_class=None, os="fake", harness_version=self.installed,
            host="local",
        )

    async def prepare(self, artifacts: Artifacts, progress: Progress | None = None) -> PrepareReport:
        wanted = artifacts.harness_sha256 or "fake-harness"
        skipped = wanted == self.installed
        self.installed = wanted
        # Files land under a made-up root, so a test sees the spec name the device's path, not the controller's.
        files = [Placed(name=f.name, path=f"/fake/{f.name}", sha256=f.sha256, bytes_sent=0) for f in artifacts.files]
        return PrepareReport(installed=self.installed, skipped=skipped, files=files)

    async def telemetry(self) -> Telemetry:
        return self._telemetry

    async def run_trial(self, spec: TrialSpec, timeout: float) -> TrialResult | TrialFailure:
        self.specs.append(spec)
        return self.handler(spec)

    async def cpu_sample(self) -> CpuSample | None:
        return self.cpu() if self.cpu is not None else None

    async def close(self) -> None:
        self.closed = True
