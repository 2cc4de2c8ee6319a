"""The device boundary: the only thing the scheduler talks to.

Like an HTTP client's transport: one small interface, a fake that takes a handler (``fake.py``),
and one contract test (``orchestrator.devices.contract``) that every backend passes.
"""

from __future__ import annotations

import abc
from typing import TYPE_CHECKING

from orchestrator.protocol import TrialResult, TrialSpec
from orchestrator.protocol.device import (
    Artifacts,
    DeviceInfo,
    DeviceUnavailable,
    Health,
    PrepareReport,
    Progress,
    StreamProbe,
    Telemetry,
    TrialFailure,
)

if TYPE_CHECKING:
    from orchestrator.devices.interference import CpuSample


class Device(abc.ABC):
    """One measured device. Every method is a coroutine; `run_trial` never raises."""

    id: str

    @abc.abstractmethod
    async def info(self) -> DeviceInfo:
        """Identity: model, chip class, OS, installed harness version."""

    @abc.abstractmethod
    async def prepare(self, artifacts: Artifacts, progress: Progress | None = None) -> PrepareReport:
        """Install or update the harness and put `artifacts.files` on the device, skipping what it
        already holds (by sha256); report where each file landed. `progress` hears large pushes."""

    @abc.abstractmethod
    async def telemetry(self) -> Telemetry:
        """Thermal state, battery temperature, charging and low-power state, now."""

    @abc.abstractmethod
    async def run_trial(self, spec: TrialSpec, timeout: float) -> TrialResult | TrialFailure:
        """One fresh launch. Every fault comes back as a TrialFailure, never as an exception."""

    async def stream_probe(self) -> StreamProbe | None:
        """Measure the stream ceiling, where the device can (None where it cannot)."""
        return None

    async def throttle_probe(self) -> float | None:
        """Run a short fixed reference workload and return its throughput (higher is faster; units are the
        device's own, compared only with its own earlier probes). None where the device has none."""
        return None

    async def cpu_sample(self) -> CpuSample | None:
        """The machine's CPU counters now, where the device shares a CPU that other work can use and the
        controller can read it (a local host); None elsewhere. Two samples bracket each trial."""
        return None

    async def health(self) -> Health:
        """Can this device run trials now? Backends with richer checks override this."""
        try:
            await self.info()
        except DeviceUnavailable as exc:
            return Health(state=exc.state, fix=exc.fix, detail=str(exc))
        return Health(state="ok")

    async def close(self) -> None:
        """Release connections. Calling it twice is harmless."""
        return None
