"""Ground truth of a simulated phone: the physics the sim runs and the answers tests expect."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from orchestrator.config.base import (
    HOUR,
    WEEK,
    Celsius,
    CelsiusRise,
    ChunkWidth,
    Name,
    Probability,
    Seed,
    Strict,
)

Key = int | str | bool

# Simulated throughput: a real engine decodes somewhere in 0.1 .. 10^4 tok/s and prefills faster.
# The floor keeps a trial's simulated nanosecond timestamps inside int64 (and a trial within its
# timeout); the ceilings are orders of magnitude above any device.
MIN_TOK_S, MAX_DECODE_TOK_S, MAX_PREFILL_TOK_S = 0.01, 1e6, 1e7
MAX_BANDWIDTH_GB_S = 100_000.0  # 100 TB/s: ten times the fastest HBM
PrefillRate = Annotated[float, Field(ge=MIN_TOK_S, le=MAX_PREFILL_TOK_S)]
Multiplier = Annotated[float, Field(ge=0.01, le=100)]  # decode multiplier of a build or tuning value


class RuntimeTruth(Strict):
    """True throughput of one runtime on this device at nominal temperature, before noise."""

    decode_tok_s: float | None = Field(default=None, ge=MIN_TOK_S, le=MAX_DECODE_TOK_S)
    bytes_per_token: float | None = Field(
        default=None, ge=1, le=1e12, description="Weight bytes read per decode token"
    )
    efficiency: float | None = Field(default=None, ge=0.001, le=1, description="Fraction of the bandwidth ceiling")
    prefill_tok_s: PrefillRate | Annotated[dict[ChunkWidth, PrefillRate], Field(min_length=1)] = Field(
        default=200.0, description="One rate, or one per chunk width M"
    )
    load: float = Field(default=1.0, ge=0.01, le=10, description="Heat produced while running, relative")
    launch_s: float = Field(default=2.0, ge=0, le=HOUR, description="Process start + model load")
    version: str = "sim"
    builds: dict[str, Multiplier] = Field(default_factory=dict, description="Decode multiplier per build")
    tuning: dict[str, dict[Key, Multiplier]] = Field(
        default_factory=dict, description="Decode multiplier per tuning parameter value"
    )

    @model_validator(mode="after")
    def _one_truth(self) -> RuntimeTruth:
        by_rate = self.decode_tok_s is not None
        by_bytes = self.bytes_per_token is not None and self.efficiency is not None
        if by_rate == by_bytes:
            raise ValueError("give either decode_tok_s, or bytes_per_token with efficiency")
        return self

    def decode_rate(self, bandwidth_gb_s: float) -> float:
        if self.decode_tok_s is not None:
            return self.decode_tok_s
        assert self.bytes_per_token is not None and self.efficiency is not None
        return self.efficiency * bandwidth_gb_s * 1e9 / self.bytes_per_token

    def prefill_rate(self, chunk_width: int) -> float:
        if isinstance(self.prefill_tok_s, float | int):
            return float(self.prefill_tok_s)
        widths = sorted(self.prefill_tok_s)
        fitting = [w for w in widths if w <= chunk_width] or widths[:1]
        return self.prefill_tok_s[fitting[-1]]

    def multiplier(self, build: str | None, tuning: dict[str, int | float | str | bool]) -> float:
        m = self.builds.get(build, 1.0) if build is not None else 1.0
        for param, value in tuning.items():
            table = {str(k): v for k, v in self.tuning.get(param, {}).items()}
            m *= table.get(str(value), 1.0)
        return m


class NoiseModel(Strict):
    sigma: float = Field(default=0.06, ge=0, le=1, description="Per-launch lognormal sigma")
    ar1: float = Field(default=0.3, ge=0, lt=1, description="Launch-to-launch correlation")
    drift_per_hour: float = Field(default=-0.02, ge=-1, le=1, description="Slow drift, fraction per hour of session")
    outlier_rate: Probability = Field(default=0.03, description="Rare throttled launches")
    outlier_slowdown: float = Field(default=0.25, ge=0, lt=1)
    token_jitter: float = Field(default=0.03, ge=0, le=1, description="Per-token time jitter, fraction")


class ThermalModel(Strict):
    ambient_c: Celsius = 24.0
    idle_rise_c: CelsiusRise = Field(default=4.0, description="Idle SoC sits this far above ambient")
    start_rise_c: CelsiusRise = Field(default=0.0, description="Extra heat at session start")
    heat_c_per_s: float = Field(default=0.10, ge=0, le=10, description="Rise per second at load 1")
    cool_tau_s: float = Field(default=240.0, ge=0.1, le=WEEK, description="A week: a device that never cools")
    battery_lag_s: float = Field(default=120.0, ge=0.1, le=WEEK)
    fair_c: Celsius = 36.0
    serious_c: Celsius = 41.0
    critical_c: Celsius = 46.0
    throttle_per_c: float = Field(default=0.03, ge=0, le=1, description="Throughput lost per degree above serious")
    hidden_throttle_c: Celsius | None = Field(
        default=None, description="From this SoC temperature (below fair_c: the OS still says nominal) throughput "
        "falls by hidden_throttle, as DVFS does on real phones and Macs")
    hidden_throttle: float = Field(default=0.10, ge=0, lt=1, description="Throughput lost above hidden_throttle_c")
    sensor_noise_c: float = Field(default=0.05, ge=0, le=10)

    @model_validator(mode="after")
    def _ordered(self) -> ThermalModel:
        if not (self.ambient_c + self.idle_rise_c < self.fair_c < self.serious_c < self.critical_c):
            raise ValueError("need ambient + idle_rise < fair_c < serious_c < critical_c")
        if self.hidden_throttle_c is not None and self.hidden_throttle_c >= self.fair_c:
            raise ValueError("hidden_throttle_c must be below fair_c (the throttling the thermal state does not show)")
        return self


class FaultRates(Strict):
    """Per-launch probabilities of each fault, and an optional permanent loss."""

    disconnect: Probability = 0.0
    crash: Probability = 0.0
    hang: Probability = 0.0
    garbage: Probability = 0.0
    lost_after_s: float | None = Field(default=None, ge=0, le=WEEK, description="Unplugged for good after this long")


class SimDeviceConfig(Strict):
    id: Name
    kind: Literal["sim"]
    host: str = "local"
    model: str = "iPhone (simulated)"
    chip_class: str
    os: str = "iOS 26.1"
    seed: Seed = 0
    bandwidth_gb_s: float = Field(
        ge=0.01, le=MAX_BANDWIDTH_GB_S, description="Clean weight-stream ceiling of the device"
    )
    harness_version: str = "sim-1"
    runtimes: dict[str, RuntimeTruth] = Field(min_length=1)
    noise: NoiseModel = NoiseModel()
    thermal: ThermalModel = ThermalModel()
    faults: FaultRates = FaultRates()

    @model_validator(mode="after")
    def _rates(self) -> SimDeviceConfig:
        for name, truth in self.runtimes.items():
            rate = truth.decode_rate(self.bandwidth_gb_s)
            if not MIN_TOK_S <= rate <= MAX_DECODE_TOK_S:
                raise ValueError(f"runtime {name!r}: decode at {rate:.3g} tok/s (at {self.bandwidth_gb_s:g} GB/s) "
                                 f"is outside {MIN_TOK_S:g} .. {MAX_DECODE_TOK_S:g} tok/s")
        return self
