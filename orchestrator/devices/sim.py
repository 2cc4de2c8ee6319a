"""A simulated phone: thermal physics, launch noise, drift, throttling and faults, on a virtual clock.

Its ground truth is the fleet YAML (`orchestrator.config.sim`), so tests know the right answer.
Deterministic for a given seed and sequence of calls.
"""

from __future__ import annotations

import functools
import json
import math
import zlib
from typing import Any

import numpy as np

from orchestrator.clock import VirtualClock
from orchestrator.config.sim import RuntimeTruth, SimDeviceConfig
from orchestrator.devices.base import Device
from orchestrator.protocol import ThermalState, TrialResult, TrialSpec
from orchestrator.protocol.device import (
    Artifacts,
    DeviceInfo,
    DeviceUnavailable,
    PrepareReport,
    Progress,
    StreamProbe,
    Telemetry,
    TrialFailure,
    result_or_failure,
)

PROBE_S, PROBE_NOISE = 1.0, 0.01  # the throttle probe: a second of reference work, 1% run-to-run noise
WARM_SPEEDUP = 1.04  # warm repetitions run a little faster than trial1, as on real devices


class Thermals:
    """SoC temperature driven by load, cooling exponentially to idle; the battery follows with a lag."""

    def __init__(self, cfg: SimDeviceConfig):
        self.m = cfg.thermal
        self.idle = self.m.ambient_c + self.m.idle_rise_c
        self.soc = self.battery = self.idle + self.m.start_rise_c

    def evolve(self, dt: float, heat_c_per_s: float = 0.0) -> None:
        """Exact solution of T' = h - (T - idle)/tau and B' = (T - B)/tau_b over dt seconds."""
        if dt <= 0:
            return
        tau, tau_b = self.m.cool_tau_s, self.m.battery_lag_s
        if abs(tau - tau_b) < 1e-6:
            tau_b *= 1.0001
        c = self.idle + heat_c_per_s * tau
        b = self.soc - c
        e, eb = math.exp(-dt / tau), math.exp(-dt / tau_b)
        self.soc = c + b * e
        self.battery = c + b * tau / (tau - tau_b) * (e - eb) + (self.battery - c) * eb

    def state(self) -> ThermalState:
        t = self.soc
        if t >= self.m.critical_c:
            return "critical"
        if t >= self.m.serious_c:
            return "serious"
        return "fair" if t >= self.m.fair_c else "nominal"

    def throttle(self, hidden: bool = True) -> float:
        """The clocks' share of full speed now; `hidden=False`: leaving out the throttle the OS does not show."""
        slow = 1.0 - self.m.hidden_throttle if hidden and self.hot() else 1.0
        return max(0.3, slow * (1.0 - self.m.throttle_per_c * max(0.0, self.soc - self.m.serious_c)))

    def hot(self) -> bool:
        return self.m.hidden_throttle_c is not None and self.soc >= self.m.hidden_throttle_c

    def seconds_to_hot(self, heat_c_per_s: float) -> float:
        """Under a steady load from now: seconds until the hidden throttle starts (0 if it has; inf if never)."""
        if self.m.hidden_throttle_c is None:
            return math.inf
        if self.hot():
            return 0.0
        c = self.idle + heat_c_per_s * self.m.cool_tau_s  # where the load would settle
        if c <= self.m.hidden_throttle_c:
            return math.inf
        return -self.m.cool_tau_s * math.log((c - self.m.hidden_throttle_c) / (c - self.soc))


class SimDevice(Device):
    def __init__(self, cfg: SimDeviceConfig, clock: VirtualClock, *, stream: int = 0):
        self.id = cfg.id
        self.cfg = cfg
        self.clock = clock
        self.rng = np.random.default_rng([cfg.seed, zlib.crc32(cfg.id.encode()), stream])
        self._probe_rng = np.random.default_rng([cfg.seed, zlib.crc32(cfg.id.encode()), stream, 1])
        self.thermals = Thermals(cfg)
        self._t_last = clock.now()
        self._session_start = clock.now()
        self._ar = 0.0
        self.installed: str | None = None
        self.launches = 0

    # -- physics bookkeeping -------------------------------------------------------------------
    def _catch_up(self) -> None:
        now = self.clock.now()
        self.thermals.evolve(now - self._t_last)
        self._t_last = now

    def _busy(self, seconds: float, load: float) -> None:
        self._catch_up()
        self.thermals.evolve(seconds, self.cfg.thermal.heat_c_per_s * load)
        self.clock.advance(seconds)
        self._t_last = self.clock.now()

    def _lost(self) -> bool:
        lost_after = self.cfg.faults.lost_after_s
        return lost_after is not None and self.clock.now() - self._session_start >= lost_after

    # -- the device boundary ---------------------------------------------------------------------
    async def info(self) -> DeviceInfo:
        if self._lost():
            raise DeviceUnavailable(f"{self.id}: not connected", fix="reconnect the USB cable")
        return DeviceInfo(
            id=self.id, kind="sim", model=f"{self.cfg.model} (simulated)", chip_class=self.cfg.chip_class,
            os=self.cfg.os, harness_version=self.installed or self.cfg.harness_version, host=self.cfg.host,
        )

    async def prepare(self, artifacts: Artifacts, progress: Progress | None = None) -> PrepareReport:
        if self._lost():
            raise DeviceUnavailable(f"{self.id}: not connected", fix="reconnect the USB cable")
        wanted = artifacts.harness_sha256 or self.cfg.harness_version
        if wanted == self.installed:
            return PrepareReport(installed=self.installed, skipped=True)
        self._busy(8.0, 0.3)  # an install
        self.installed = wanted
        return PrepareReport(installed=self.installed, skipped=False)

    async def telemetry(self) -> Telemetry:
        if self._lost():
            raise DeviceUnavailable(f"{self.id}: not connected", fix="reconnect the USB cable")
        self._catch_up()
        noise = self.cfg.thermal.sensor_noise_c * float(self.rng.standard_normal())
        return Telemetry(
            t=self.clock.now(), thermal_state=self.thermals.state(), battery_c=round(self.thermals.battery + noise, 2),
            charging=False, low_power=False,
        )

    async def stream_probe(self) -> StreamProbe:
        """The ground truth's ceiling, as a probe would read it (a few seconds of full load)."""
        if self._lost():
            raise DeviceUnavailable(f"{self.id}: not connected", fix="reconnect the USB cable")
        self._busy(5.0, 1.0)
        return StreamProbe(gb_s=self.cfg.bandwidth_gb_s, patterns={"stream": self.cfg.bandwidth_gb_s})

    async def throttle_probe(self) -> float:
        """The reference workload: one second at full load; its throughput follows the device's clocks (1.0
        when cool), with 1% noise of its own (drawn apart, so the trials' noise does not depend on it)."""
        if self._lost():
            raise DeviceUnavailable(f"{self.id}: not connected", fix="reconnect the USB cable")
        self._catch_up()
        rate = self.thermals.throttle() * math.exp(PROBE_NOISE * float(self._probe_rng.standard_normal()))
        self._busy(PROBE_S, 1.0)
        return rate

    async def run_trial(self, spec: TrialSpec, timeout: float) -> TrialResult | TrialFailure:
        self.launches += 1
        if self._lost():
            return TrialFailure(kind="disconnected", message=f"{self.id}: device not connected")
        truth = self.cfg.runtimes.get(spec.engine)
        if truth is None:
            return TrialFailure(kind="launch_failed", message=f"runtime {spec.engine!r} is not installed on {self.id}")
        faults, u = self.cfg.faults, float(self.rng.random())
        launch = truth.launch_s
        if u < faults.disconnect:
            self._busy(launch * 0.5, 0.3)
            return TrialFailure(kind="disconnected", message="connection to the device dropped during launch")
        u -= faults.disconnect
        if u < faults.crash:
            self._busy(launch, 0.6)
            return TrialFailure(kind="crashed", message="app exited on signal 11", detail="EXC_BAD_ACCESS (SIGSEGV)")
        u -= faults.crash
        if u < faults.hang:
            self._busy(timeout, 0.2)
            return TrialFailure(kind="hung", message=f"no result after {timeout:.0f} s; killed")
        u -= faults.hang
        garbage = u < faults.garbage
        return self._generate(spec, truth, timeout, garbage)

    def _generate(
        self, spec: TrialSpec, truth: RuntimeTruth, timeout: float, garbage: bool
    ) -> TrialResult | TrialFailure:
        noise, rng = self.cfg.noise, self.rng
        self._catch_up()
        state_before = self.thermals.state()
        self._ar = noise.ar1 * self._ar + math.sqrt(1 - noise.ar1**2) * float(rng.standard_normal())
        hours = (self.clock.now() - self._session_start) / 3600.0
        factor = math.exp(noise.sigma * self._ar) * max(0.1, 1 + noise.drift_per_hour * hours)
        if rng.random() < noise.outlier_rate:
            factor *= 1 - noise.outlier_slowdown
        factor *= self.thermals.throttle(hidden=False)
        decode = truth.decode_rate(self.cfg.bandwidth_gb_s) * truth.multiplier(spec.build, spec.tuning) * factor
        prefill = truth.prefill_rate(spec.chunk_width) * factor
        # the hidden throttle follows the SoC while the launch runs: decode starts after the model load has
        # heated the phone, and the clocks drop the moment the SoC crosses the threshold, mid-generation if so
        # (the harness's per-token stamps then show the step)
        ahead = Thermals(self.cfg)
        ahead.soc, ahead.battery = self.thermals.soc, self.thermals.battery
        ahead.evolve(truth.launch_s, self.cfg.thermal.heat_c_per_s * 0.5 * truth.load)
        hot_in = ahead.seconds_to_hot(self.cfg.thermal.heat_c_per_s * truth.load)
        gens, elapsed = [], 0.0
        for rep in range(1 + spec.warm_repetitions):
            speed = 1.0 if rep == 0 else WARM_SPEEDUP
            gen = self._generation(spec, prefill * speed, decode * speed, hot_in - elapsed)
            gens.append(gen)
            elapsed += (gen["token_times_ns"][-1]) * 1e-9
        total = truth.launch_s + elapsed
        if total > timeout:
            self._busy(timeout, truth.load)
            return TrialFailure(kind="hung", message=f"no result after {timeout:.0f} s; killed")
        self._busy(truth.launch_s, 0.5 * truth.load)
        self._busy(elapsed, truth.load)
        if garbage:
            return result_or_failure(b'{"schema_version": 1, "trial_id": "' + b"\x00\xff" * 8, spec)
        raw = {
            "run_id": spec.run_id, "trial_id": spec.trial_id, "status": "ok", "engine": spec.engine,
            "engine_version": truth.version, "harness_build": spec.build or self.cfg.harness_version,
            "model": spec.model, "prompt_tokens": spec.prompt_tokens, "chunk_width": spec.chunk_width,
            "threads": spec.threads, "trial1": gens[0], "warm": gens[1:],
            "bytes_per_decode_token": int(truth.bytes_per_token) if truth.bytes_per_token else None,
            "bytes_per_prefill_token": (
                int(truth.bytes_per_token / spec.chunk_width) if truth.bytes_per_token else None
            ),
            "thermal": [
                {"t_ns": 0, "state": state_before},
                {"t_ns": gens[-1]["token_times_ns"][-1], "state": self.thermals.state()},
            ],
            "cold_caches": list(spec.clear_caches), "tuning": dict(spec.tuning),
        }
        return result_or_failure(json.dumps(raw), spec)

    def _generation(self, spec: TrialSpec, prefill_tok_s: float, decode_tok_s: float,
                    hot_in_s: float = math.inf) -> dict[str, Any]:
        """One generation; from `hot_in_s` seconds after its submit the hidden throttle stretches time."""
        rng, n = self.rng, spec.decode_tokens
        prefill_ns = int(spec.prompt_tokens / prefill_tok_s * 1e9)
        gaps = np.clip(1.0 + self.cfg.noise.token_jitter * rng.standard_normal(n - 1), 0.2, None)
        gaps *= (1e9 / decode_tok_s) / gaps.mean()
        first = prefill_ns + int(1e9 / decode_tok_s)  # the first token comes off the prefill's logits
        times = first + np.concatenate(([0.0], np.cumsum(gaps)))
        if hot_in_s < math.inf:
            at, slow = max(0.0, hot_in_s) * 1e9, 1.0 / (1.0 - self.cfg.thermal.hidden_throttle)
            times = np.where(times > at, at + (times - at) * slow, times)
            prefill_ns = int(min(prefill_ns, at) + max(0.0, prefill_ns - at) * slow)
            first = int(times[0])
        times = times.astype(np.int64)
        ids = _token_ids(spec.model, spec.seed, n)
        return {"prefill_ns": prefill_ns, "ttft_ns": first, "token_ids": ids, "token_times_ns": times.tolist()}


@functools.lru_cache(maxsize=64)
def _token_ids(model: str, seed: int, n: int) -> list[int]:
    """Greedy output of the simulated model: the same for every runtime (all bit-exact)."""
    gen = np.random.default_rng([zlib.crc32(model.encode()), seed])
    return [int(x) for x in gen.integers(0, 32000, n)]
