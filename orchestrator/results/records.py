"""Typed records: the run manifest and every event of the journal.

Schema history:
- 1: first version. Later additions, all optional to readers: `prepared` records (where a session's
  model files landed, by sha256); the manifest's `model_sha256`; a `prepared` record's `chip_class`
  (what the device said it is: an iPhone's from its ProductType); a `trial` record's `interference`
  (other processes' CPU during it), `throttle` (the settle gate's throttle probe before it) and
  `excluded` (why its number is kept out of verdicts, the audit and rank); `attempt_spoiled` records
  (an attempt whose number could not be trusted, retried); a `prepared` record's `info` (the device's
  model, chip, OS and harness version as it said at the session's (re)start: `chip_class` is then left
  empty, read from `info`; a resume on a device that says otherwise is refused unless accepted); a
  `settle`'s `unavailable` (its last poll could not reach the device); a `trial` record's
  `throttle_after` (the throttle probe right after it), `rest` (the rest before its attempt, when the one
  before ran throttled) and `throttled_from_rest`, and an `attempt_spoiled` record's `throttle_after` and `rest`.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

from orchestrator.config.fleet import Fleet
from orchestrator.config.plan import Plan
from orchestrator.protocol import TrialResult
from orchestrator.protocol.device import DeviceInfo, Interference, Placed, StreamProbe, Telemetry, TrialFailure

SCHEMA_VERSION: Literal[1] = 1


class _Rec(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class ScheduledTrial(_Rec):
    trial_id: str
    seq: int
    block: int
    arm: str


class SessionPlan(_Rec):
    device: str
    coin: int = Field(description="The seeded coin flip / arm permutation index, recorded")
    arm_order: list[str] = Field(description="Arms as mapped onto the design's letters A, B, ...")
    trials: list[ScheduledTrial]


class Manifest(_Rec):
    schema_version: Literal[1] = SCHEMA_VERSION
    run_id: str
    created: str
    plan: Plan
    plan_file: str
    plan_sha256: str
    rule_digest: str = Field(description="Hash of the pre-committed decision rule")
    fleet: Fleet
    fleet_file: str
    seed: int
    sessions: list[SessionPlan]
    versions: dict[str, str]
    model_sha256: str | None = Field(default=None, description="The plan's model file, when the run deploys it")
    tuning_sha256: dict[str, str] = Field(default_factory=dict, description="Arm -> its tuning table's sha256")

    def session(self, device: str) -> SessionPlan:
        return next(s for s in self.sessions if s.device == device)


class ThrottleCheck(_Rec):
    """The throttle probe before (or right after) a trial: a short fixed workload against the session's own
    baseline (the fastest probe so far). Slow means throttled, whatever the thermal state says."""

    rate: float = Field(gt=0, description="The probe's throughput, in the probe's own units (higher is faster)")
    baseline: float = Field(gt=0, description="The session's baseline for this probe")
    slowdown: float = Field(description="1 - rate / baseline")
    slow: bool = Field(description="Over the plan's max_slowdown at the last probe (the gate gave up waiting)")
    probes: int = Field(ge=1, description="Probes run before this trial (a slow probe is waited out and rerun)")
    waited_s: float = Field(ge=0, description="Time spent waiting for a slow probe to recover")


class Rest(_Rec):
    """The rest before an attempt whose predecessor ran throttled (its after-probe was slow)."""

    waited_s: float = Field(ge=0)
    temperature_c: float | None = Field(description="The device's temperature when the rest ended (None: unknown)")
    baseline_c: float | None = Field(description="Its idle baseline then")
    reached: bool | None = Field(description="Within the plan's rest_margin_c of the baseline (None: no reading; "
                                 "the rest was rest_s)")


class Settle(_Rec):
    settled: bool
    waited_s: float
    polls: int
    baseline_c: float | None
    before: Telemetry | None
    blocking: list[str] = Field(default_factory=list, description="What still held the gate at the last poll")
    unavailable: bool = Field(default=False, description="The last poll could not reach the device at all")
    throttle: ThrottleCheck | None = Field(default=None, description="The throttle probe, where the plan runs one")
    quiet: Interference | None = Field(default=None, description="Other processes' CPU in the second before the "
                                       "launch, where the plan waits for quiet (interference.quiet_wait_s)")


class RunStarted(_Rec):
    type: Literal["run_started"] = "run_started"
    wall: float
    resumed: bool
    pid: int


class PreparedRecord(_Rec):
    """What a device held when its session began: the harness prepare installed or kept, and where each
    artifact file (the plan's model, files beside it) landed, by sha256. Written at every (re)start."""

    type: Literal["prepared"] = "prepared"
    device: str
    installed: str | None
    skipped: bool
    files: list[Placed] = Field(default_factory=list)
    model: str = Field(description="The model as this session's specs name it (device-local path, or the plan's)")
    model_sha256: str | None = None
    tuning: dict[str, str] = Field(default_factory=dict, description="Arm -> its tuning table as the specs name it")
    chip_class: str | None = Field(default=None, description="Older journals: the device's own chip answer (now in info)")
    info: DeviceInfo | None = Field(default=None, description="What the device said it is: model, chip, OS, harness")
    seconds: float = Field(default=0.0, ge=0, description="Device time info() and prepare took (installs, pushes)")
    wall: float

    def chip(self) -> str | None:
        return self.info.chip_class if self.info is not None else self.chip_class

    def changes(self, info: DeviceInfo, installed: str | None) -> list[str]:
        """How the device now differs from what this record says it was (phone model, chip, OS, harness
        build): a session resumed across such a change would mix measurements of two devices."""
        was = self.info
        pairs = [("harness", self.installed, installed)]
        if was is not None:
            pairs += [("model", was.model, info.model), ("chip", was.chip_class, info.chip_class), ("OS", was.os, info.os)]
        return [f"{what} {a} -> {b}" for what, a, b in pairs if a != b]


class PushProgress(_Rec):
    """Not journaled: what a live view shows while a device's prepare pushes a file."""

    name: str
    sent: int
    total: int


class SettleWaiting(_Rec):
    """Not journaled: what a live view shows while the settle gate holds a trial back."""

    why: str


class StreamProbeRecord(_Rec):
    """The device's stream ceiling, measured at the start of its session."""

    type: Literal["probe"] = "probe"
    device: str
    probe: StreamProbe
    wall: float


class AttemptFailed(_Rec):
    type: Literal["attempt_failed"] = "attempt_failed"
    device: str
    trial_id: str
    attempt: int
    failure: TrialFailure
    will_retry: bool
    wall: float
    settle_waited_s: float = Field(default=0.0, ge=0, description="The settle wait before this attempt")
    duration_s: float = Field(default=0.0, ge=0, description="The attempt's launch, as the device clock saw it")


class AttemptSpoiled(_Rec):
    """An attempt that ran, but whose number cannot be trusted (other work took the CPU, or it ran throttled
    by heat the device carried in); retried."""

    type: Literal["attempt_spoiled"] = "attempt_spoiled"
    device: str
    trial_id: str
    attempt: int
    why: str
    interference: Interference | None = None
    throttle_after: ThrottleCheck | None = Field(default=None, description="The throttle probe right after it")
    rest: Rest | None = Field(default=None, description="The rest before this attempt (the one before ran throttled)")
    decode_tok_s: float | None = None
    wall: float
    settle_waited_s: float = Field(default=0.0, ge=0, description="The settle wait before this attempt")
    duration_s: float = Field(default=0.0, ge=0, description="The attempt's launch, as the device clock saw it")


class TrialRecord(_Rec):
    """The one final record of a planned trial: its result, or its last failure."""

    type: Literal["trial"] = "trial"
    device: str
    trial_id: str
    seq: int
    block: int
    arm: str
    attempts: int
    wall: float
    t_start: float = Field(description="Device clock at launch, s")
    duration_s: float
    settle: Settle
    after: Telemetry | None
    state_rose: bool
    result: TrialResult | None = None
    failure: TrialFailure | None = None
    interference: Interference | None = Field(default=None, description="Other processes' CPU during the trial")
    excluded: str | None = Field(default=None, description="Why its number is kept out of verdicts, audit and rank")
    throttle_after: ThrottleCheck | None = Field(default=None, description="The throttle probe right after it")
    rest: Rest | None = Field(default=None, description="The rest before this attempt (the one before ran throttled)")
    throttled_from_rest: bool = Field(
        default=False, description="Ran throttled although it started from a rest: its arm throttles itself (kept)")


class LookPair(_Rec):
    baseline: str
    candidate: str
    ratio: float
    p_value: float
    action: str


class LookRecord(_Rec):
    type: Literal["look"] = "look"
    device: str
    look: int
    n_per_arm: int
    action: Literal["continue", "decided", "futile", "final"]
    pairs: list[LookPair]
    wall: float


StopReason = Literal[
    "completed", "decided", "futile", "settle_timeout", "device_unavailable", "too_many_failures", "prepare_failed",
    "interrupted", "backend_error", "budget", "device_changed",
]
EARLY_STOPS = ("decided", "futile", "budget")  # planned ends: the rule (or the plan's device-time budget) said stop


class SessionStopped(_Rec):
    type: Literal["session_stopped"] = "session_stopped"
    device: str
    reason: StopReason
    detail: str = ""
    wall: float


class RunFinished(_Rec):
    type: Literal["run_finished"] = "run_finished"
    status: Literal["completed", "incomplete"]
    wall: float


Record = Annotated[
    RunStarted | PreparedRecord | StreamProbeRecord | AttemptFailed | AttemptSpoiled | TrialRecord | LookRecord | SessionStopped
    | RunFinished,
    Field(discriminator="type"),
]
RECORD = TypeAdapter(Record)


def device_chips(manifest: Manifest, records: list[Any]) -> dict[str, str]:
    """Each device's chip class for tables: what the device said at its last (re)start (an iPhone names
    its chip only when asked), else the fleet's `chip_class`, else its kind."""
    said = {r.device: chip for r in records if isinstance(r, PreparedRecord) and (chip := r.chip())}
    return {d.id: said.get(d.id) or getattr(d, "chip_class", None) or d.kind for d in manifest.fleet.devices}
