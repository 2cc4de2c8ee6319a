"""What crosses the device boundary besides the harness's own wire format: a device's identity, its
telemetry, a trial's typed failure and interference, the stream probe, the artifacts `prepare` places
and a device's health. Devices, runtimes and results all speak these; none of them owns them.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from orchestrator.protocol import FailureKind, ThermalState, TrialResult, TrialSpec, parse_result


class _Record(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class DeviceInfo(_Record):
    id: str
    kind: str
    model: str
    chip_class: str | None
    os: str
    harness_version: str | None
    host: str


class Telemetry(_Record):
    """One reading. Fields a backend cannot read are None and named in ``unavailable``."""

    t: float = Field(description="Device clock, seconds")
    thermal_state: ThermalState | None
    battery_c: float | None = None
    cpu_c: float | None = Field(default=None, description="Hottest CPU/SoC sensor (hosts)")
    load_1m: float | None = Field(default=None, description="1-minute load average (hosts)")
    charging: bool | None = None
    low_power: bool | None = None
    unavailable: list[str] = Field(default_factory=list)

    def temperature(self) -> float | None:
        """The reading the settle gate tracks: the battery on phones, the CPU sensor on hosts."""
        return self.battery_c if self.battery_c is not None else self.cpu_c


class TrialFailure(_Record):
    kind: FailureKind
    message: str
    detail: str | None = Field(default=None, description="Crash report, last output lines, ...")


class Interference(_Record):
    """What other processes took from the CPU while one trial ran (hosts that can read it)."""

    wall_s: float = Field(ge=0, description="How long the trial's launch took, s")
    cpus: int = Field(ge=1)
    other_cpu_s: float = Field(ge=0, description="CPU seconds used by everything but the controller and the trial")
    share: float = Field(ge=0, le=1, description="other_cpu_s / (wall_s x cpus): the machine's CPU others took")
    top: list[str] = Field(default_factory=list, description="The largest other processes, for people")
    source: str = Field(default="/proc", description="How it was read: /proc (Linux), ps (macOS), sim")


class StreamProbe(_Record):
    """The device's clean weight-stream bandwidth: the ceiling of the audit."""

    gb_s: float = Field(gt=0, description="Best plain-stream GB/s")
    patterns: dict[str, float] = Field(default_factory=dict, description="Best GB/s per access pattern")
    buffer_bytes: int | None = None
    threads: int | None = None


# One component of a device-relative name: no separators, no `.`/`..`, nothing a shell or AFC reads
# as special. A name is at most a few components deep (`models/<key>/<file>`).
_PART = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.+-]{0,127}$")

Progress = Callable[[str, int, int], None]
"""What `prepare` reports while it pushes a file: (device-relative name, bytes sent, bytes in all)."""


class ArtifactFile(_Record):
    """One file `prepare` puts on a device: the plan's model, a file beside it an arm reads, a tuning table.

    `name` is where it goes relative to the device's own root: an SSH host's cache folder, an
    iPhone app's Documents. A local host uses the controller's file where it is.
    """

    source: str = Field(description="The file on the controller (absolute)")
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    size: int = Field(ge=0)
    name: str = Field(description="Device-relative name, e.g. models/<sha256[:16]>/model-Q8_0.gguf")

    @field_validator("name")
    @classmethod
    def _relative(cls, name: str) -> str:
        parts = name.split("/")
        if not 1 <= len(parts) <= 4 or not all(_PART.match(p) for p in parts) or any(p in (".", "..") for p in parts):
            raise ValueError(f"{name!r} is not a relative name of plain components")
        if parts[-1].endswith((".part", ".sha256", ".tmp")):
            raise ValueError(f"{name!r} ends like orch's own temporary and marker files")
        return name


class Placed(_Record):
    """Where an artifact file landed, as the device's own programs name it."""

    name: str
    path: str = Field(description="Device-local path: absolute on hosts, relative to Documents on iPhones")
    sha256: str
    bytes_sent: int = Field(ge=0, description="0 when the device held it (through an agent: both legs, summed)")
    seconds: float = Field(default=0.0, ge=0)
    app: str | None = Field(default=None, description="iPhones: the bundle id whose Documents holds it")


class PrepareReport(_Record):
    installed: str | None = Field(description="Harness version/hash now on the device")
    skipped: bool = Field(description="True when the installed hash already matched")
    files: list[Placed] = Field(default_factory=list, description="Where each of Artifacts.files landed")

    def path_of(self, name: str) -> str | None:
        return next((f.path for f in self.files if f.name == name), None)


class Artifacts(_Record):
    """What `prepare` puts on a device: the harness build, any runtime apps, and files (the model)."""

    harness: str | None = None
    harness_sha256: str | None = None
    extra: dict[str, str] = Field(default_factory=dict)
    files: list[ArtifactFile] = Field(default_factory=list)
    model: str | None = Field(default=None, description="Which of `files` is the plan's model (its name)")
    tuning: dict[str, str] = Field(default_factory=dict, description="Arm name -> which of `files` is its tuning "
                                   "table (its name)")
    engines: list[str] = Field(
        default_factory=list, description="The runtimes the run's arms launch: on an iPhone, the files go to the "
        "Documents of every app that runs one of them (the harness app when none is named)")


HealthState = Literal[
    "ok",
    "not_connected",
    "locked",
    "developer_mode_off",
    "not_trusted",
    "ddi_missing",
    "tunnel_unavailable",
    "unreachable",
    "auth_refused",
    "host_key_rejected",
    "harness_missing",
    "no_space",
    "error",
]


class Health(_Record):
    """Whether a device can run trials now, and if not, what a person must do."""

    state: HealthState
    fix: str | None = None
    detail: str | None = None


class DeviceUnavailable(Exception):
    """`info`, `telemetry` or `prepare` could not reach the device. The scheduler keeps waiting."""

    def __init__(self, message: str, fix: str | None = None, state: HealthState = "not_connected"):
        super().__init__(message)
        self.fix = fix
        self.state = state


class NoSpace(DeviceUnavailable):
    """`prepare` refused before pushing: the device has less free space than the files need."""

    def __init__(self, device: str, where: str, need: int, free: int, reserve: int):
        super().__init__(
            f"{device}: not enough free space: {_size(need)} to push, {_size(free)} free at {where} "
            f"({_size(reserve)} kept free)",
            fix=f"free at least {_size(need + reserve - free)} on {device} (old models under {where} can go)",
            state="no_space",
        )
        self.need, self.free = need, free


def _size(n: int) -> str:
    for unit, scale in (("GB", 1 << 30), ("MB", 1 << 20), ("KB", 1 << 10)):
        if abs(n) >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"


def result_or_failure(raw: bytes | str, spec: TrialSpec) -> TrialResult | TrialFailure:
    """Map harness output to a typed result, or a `bad_output` / `harness_error` failure."""
    try:
        result = parse_result(raw)
    except ValueError as exc:
        text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw
        return TrialFailure(kind="bad_output", message=str(exc), detail=text[:400])
    if result.trial_id != spec.trial_id or result.run_id != spec.run_id:
        return TrialFailure(
            kind="bad_output", message=f"result is for trial {result.trial_id!r}, expected {spec.trial_id!r}"
        )
    if result.error is not None:
        return TrialFailure(kind="harness_error", message=f"{result.error.kind}: {result.error.message}")
    assert result.trial1 is not None
    if len(result.trial1.token_ids) != spec.decode_tokens:
        return TrialFailure(
            kind="bad_output",
            message=f"{len(result.trial1.token_ids)} tokens generated, spec asked for {spec.decode_tokens}",
        )
    return result
