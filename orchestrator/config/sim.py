"""Ground truth of a simulated phone: the physics the sim runs and the answers tests expect."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from orchestrator.config.base import Strict

Key = int | str | bool


class RuntimeTruth(Strict):
    """True throughput of one runtime on this device at nominal temperature, before noise."""

    decode_tok_s: float | None = Field(default=None, gt=0)
    bytes_per_token: float | None = Field(default=None, gt=0, description="Weight bytes read per decode token")
    efficiency: float | None = Field(default=None, gt=0, le=1, description="Fraction of the bandwidth ceiling")
    prefill_tok_s: float | dict[int, float] = Field(default=200.0, description="One rate, or one per chunk width M")
    load: float = Field(default=1.0, gt=0, description="Heat produced while running, relative")
    launch_s: float = Field(default=2.0, ge=0, description="Process start + model load")
    version: str = "sim"
    builds: dict[str, float] = Field(default_factory=dict, description="Decode multiplier per build")
    tuning: dict[str, dict[Key, float]] = Field(
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
    sigma: float = Field(default=0.06, ge=0, description="Per-launch lognormal sigma")
    ar1: float = Field(default=0.3, ge=0, lt=1, description="Launch-to-launch correlation")
    drift_per_hour: float = Field(default=-0.02, description="Slow drift, fraction per hour of session")
    outlier_rate: float = Field(default=0.03, ge=0, le=1, description="Rare throttled launches")
    outlier_slowdown: float = Field(default=0.25, ge=0, lt=1)
    token_jitter: float = Field(default=0.03, ge=0, description="Per-token time jitter, fraction")


class ThermalModel(Strict):
    ambient_c: float = 24.0
    idle_rise_c: float = Field(default=4.0, ge=0, description="Idle SoC sits this far above ambient")
    start_rise_c: float = Field(default=0.0, ge=0, description="Extra heat at session start")
    heat_c_per_s: float = Field(default=0.10, ge=0, description="Rise per second at load 1")
    cool_tau_s: float = Field(default=240.0, gt=0)
    battery_lag_s: float = Field(default=120.0, gt=0)
    fair_c: float = 36.0
    serious_c: float = 41.0
    critical_c: float = 46.0
    throttle_per_c: float = Field(default=0.03, ge=0, description="Throughput lost per degree above serious")
    sensor_noise_c: float = Field(default=0.05, ge=0)

    @model_validator(mode="after")
    def _ordered(self) -> ThermalModel:
        if not (self.ambient_c + self.idle_rise_c < self.fair_c < self.serious_c < self.critical_c):
            raise ValueError("need ambient + idle_rise < fair_c < serious_c < critical_c")
        return self


class FaultRates(Strict):
    """Per-launch probabilities of each fault, and an optional permanent loss."""

    disconnect: float = Field(default=0.0, ge=0, le=1)
    crash: float = Field(default=0.0, ge=0, le=1)
    hang: float = Field(default=0.0, ge=0, le=1)
    garbage: float = Field(default=0.0, ge=0, le=1)
    lost_after_s: float | None = Field(default=None, ge=0, description="Unplugged for good after this long")


class SimDeviceConfig(Strict):
    id: str = Field(pattern=r"^[A-Za-z0-9_.-]+$")
    kind: Literal["sim"]
    host: str = "local"
    model: str = "iPhone (simulated)"
    chip_class: str
    os: str = "iOS 26.1"
    seed: int = 0
    bandwidth_gb_s: float = Field(gt=0, description="Clean weight-stream ceiling of the device")
    harness_version: str = "sim-1"
    runtimes: dict[str, RuntimeTruth] = Field(min_length=1)
    noise: NoiseModel = NoiseModel()
    thermal: ThermalModel = ThermalModel()
    faults: FaultRates = FaultRates()
