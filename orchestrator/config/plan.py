"""The plan: what to measure, in what order, and how it will be decided (before any data)."""

from __future__ import annotations

import hashlib
import json
from typing import Annotated, Literal

from pydantic import Field, ValidationInfo, field_validator, model_validator

from orchestrator.config.base import (
    HOUR,
    MAX_PROMPT_TOKENS,
    Alpha,
    Celsius,
    ChunkWidth,
    Int64,
    Name,
    Seed,
    Strict,
    Timeout,
    Wait,
)
from orchestrator.protocol import FailureKind, TrialResult, TrialSpec

# A trial's decode: every token is timed and journaled, trial1 and each warm repetition alike.
MAX_DECODE_TOKENS = 2**15
MAX_WARM_REPETITIONS = 100
MAX_TIMED_TOKENS = 2**18  # decode_tokens x (1 + warm_repetitions): a trial record of a few MB at most
# Blocks and arms: a session of 1000 blocks is weeks of a phone's time; 16 arms are 120 pairs.
MAX_BLOCKS = 1000
MAX_ARMS = 16
MAX_LAUNCHES_PER_ARM = 2 * MAX_BLOCKS
# Resampling: each comparison builds (values x resamples) matrices; this keeps launches per arm x
# resamples at what a laptop holds (about 200 MB at the limit, a few seconds per comparison).
MAX_RESAMPLES = 100_000
PAIRED = ("abba-baab", "abba")  # the two-arm orders: 2 launches per arm per block
MAX_RESAMPLING_WORK = 10_000_000

# What an arm passes to the engine: numbers as the harness reads them (Int64, finite doubles of a
# magnitude an engine parameter could have).
EngineValue = Int64 | Annotated[float, Field(ge=-1e18, le=1e18)] | str | bool


class Arm(Strict):
    name: Name
    runtime: str
    build: str | None = None
    engine: dict[str, EngineValue] = Field(default_factory=dict, description="Engine config / tuning params")
    threads: int | None = Field(default=None, ge=1, le=1024)
    tuning_table: str | None = Field(
        default=None, max_length=4096, description="A harness tuning table on the controller (`orch export-tuning` "
        "writes one): prepare deploys it, the harness loads it; `engine` overrides its params")


class TrialSettings(Strict):
    prompt_tokens: int = Field(default=64, ge=1, le=MAX_PROMPT_TOKENS)
    decode_tokens: int = Field(default=128, ge=2, le=MAX_DECODE_TOKENS)
    chunk_width: ChunkWidth = 1
    warm_repetitions: int = Field(default=0, ge=0, le=MAX_WARM_REPETITIONS)
    timeout_s: Timeout = 600.0
    clear_caches: list[str] = Field(default_factory=list)

    @model_validator(mode="after")
    def _timed_tokens(self) -> TrialSettings:
        timed = self.decode_tokens * (1 + self.warm_repetitions)
        if timed > MAX_TIMED_TOKENS:
            raise ValueError(f"decode_tokens x (1 + warm_repetitions) = {timed} tokens timed per launch; "
                             f"at most {MAX_TIMED_TOKENS}")
        return self


class ThrottleProbePolicy(Strict):
    """A short fixed reference workload before each trial, against the session's own baseline (its fastest
    probe so far): throttling the OS does not report (DVFS, a thermal state that still says nominal) shows as
    a slow probe. Slow: wait `wait_s` and probe again, up to `max_wait_s`; then the trial runs, is recorded as
    run throttled, and is excluded from verdicts, the audit and rank (as AndroidX's ThrottleDetector).

    A probe before a trial cannot see the heat the trial's own launch adds. With `after`, the probe runs
    again right after each trial: slow there means the trial ran (at least partly) throttled. Such a trial is
    retried (within `retry.max_attempts`) after a rest: at least `rest_s`, then until the device's
    temperature is within `rest_margin_c` of its idle baseline (up to `max_rest_s`). A trial that still ends
    throttled although it started from that rest throttles itself: a real, sustained property of its arm,
    counted in verdicts and marked (`throttled_from_rest`). One that ends throttled without a rest behind it
    (no retry left) is excluded."""

    max_slowdown: float = Field(default=0.05, gt=0, lt=1, description="Slower than the baseline by more: throttled")
    wait_s: Wait = Field(default=30.0, description="Rest between a slow probe and the next")
    max_wait_s: Wait = Field(default=600.0, description="Then the trial runs and is excluded")
    after: bool = Field(default=True, description="Probe again right after each trial: did it run throttled?")
    rest_s: Wait = Field(default=60.0, description="After a trial that ran throttled: rest at least this long")
    rest_margin_c: float = Field(
        default=0.3, gt=0, le=100, description="... and until the temperature is this close to the idle baseline")
    max_rest_s: Wait = Field(default=900.0, description="... but no longer than this")

    @model_validator(mode="after")
    def _rest_order(self) -> ThrottleProbePolicy:
        if self.rest_s > self.max_rest_s:
            raise ValueError("rest_s must not exceed max_rest_s")
        return self


class SettlePolicy(Strict):
    require_nominal: bool = True
    battery_margin_c: float = Field(default=1.5, gt=0, le=100, description="Allowed rise over the idle baseline")
    flat_window_s: Wait = 60.0
    flat_tolerance_c: float = Field(
        default=0.3, ge=0, le=100, description="Max spread of battery temp over the window"
    )
    min_gap_s: Wait = 90.0
    poll_s: float = Field(default=10.0, ge=0.1, le=HOUR, description="Thermal sensors update about once a second")
    timeout_s: Timeout = 900.0
    idle_baseline_c: Celsius | None = Field(default=None, description="Else the session's lowest reading")
    charging: Literal["any", "required", "forbidden"] = "any"
    allow_low_power: bool = False
    max_load_1m: float | None = Field(
        default=None, ge=0, le=100_000, description="Hosts: wait while other work loads the CPU"
    )
    throttle_probe: ThrottleProbePolicy | None = Field(
        default=None, description="A reference workload before each trial, against the session's baseline")


class SequentialLooks(Strict):
    """Group-sequential looks at launches-per-arm counts, each with its own alpha and futility bound."""

    looks: list[Annotated[int, Field(ge=1, le=MAX_LAUNCHES_PER_ARM)]] = Field(
        default=[12, 20, 30, 40], min_length=1, max_length=100
    )
    alpha_per_look: Alpha = 0.02
    futility: list[Annotated[float, Field(ge=0, le=1)]] = Field(
        default=[0.835, 0.538, 0.279], max_length=100, description="Stop if p above, per look"
    )

    @model_validator(mode="after")
    def _shape(self) -> SequentialLooks:
        if sorted(set(self.looks)) != self.looks:
            raise ValueError("looks must be strictly increasing")
        if len(self.futility) >= len(self.looks):
            raise ValueError("futility bounds apply to all looks but the last: give fewer than looks")
        return self


Spending = Literal["pocock", "obrien_fleming"]


class AdaptiveDesign(Strict):
    """Looks until the comparison has its answer: faster, slower or equivalent (or the cap, `blocks`).

    Interim looks at `first_look`, then every `look_every` launches per arm, up to the plan's launches
    per arm (the cap, where the final analysis spends what is left). Each look tests for a difference
    (two-sided, `alpha` spent over the looks by `efficacy`) and for equivalence (the two one-sided
    tests of `equivalence_margin`, 5% each, spent by `equivalence`): Lan-DeMets alpha spending.
    """

    first_look: int = Field(default=16, ge=2, le=MAX_LAUNCHES_PER_ARM, description="Launches per arm at the first look")
    look_every: int = Field(default=4, ge=1, le=MAX_LAUNCHES_PER_ARM, description="Launches per arm between looks")
    efficacy: Spending = Field(default="pocock", description="How alpha is spent over the looks (difference)")
    equivalence: Spending = Field(default="obrien_fleming", description="How the 5% per side of the TOST is spent")

    def looks(self, cap: int) -> list[int]:
        """Launches per arm at each look: the interim looks, then the cap (the final analysis)."""
        return [*range(self.first_look, cap, self.look_every), cap]


class DecisionRule(Strict):
    """Pre-committed: hashed into the run manifest before the first trial."""

    statistic: Literal["log_decode_tok_s", "log_prefill_tok_s"] = "log_decode_tok_s"
    alpha: Alpha = 0.05
    min_effect: float = Field(default=0.02, ge=0, lt=1, description="Smallest ratio change called a verdict")
    equivalence_margin: float = Field(default=0.03, gt=0, lt=1)
    ci_method: Literal["block_bootstrap", "permutation"] = Field(
        default="block_bootstrap", description="The median's interval (estimator: median only)")
    resamples: int = Field(default=2000, ge=200, le=MAX_RESAMPLES, description="estimator: median only")
    power: float = Field(default=0.8, gt=0, lt=1, description="Power at which the MDE is stated")
    sequential: SequentialLooks | None = None
    multiplicity: Literal["holm", "none"] = Field(
        default="holm", description="More than two arms: each device's pairs are one family; holm = Holm's step-down "
        "on their p-values (family-wise false positives <= alpha), none = each pair at alpha alone")
    estimator: Literal["hodges_lehmann", "median"] = Field(
        default="hodges_lehmann", description="hodges_lehmann: shift of the blocks' differences, signed-rank p and "
        "interval (exact; ci_method and resamples unused); median: difference of medians, permutation p")
    adaptive: AdaptiveDesign | None = Field(
        default_factory=AdaptiveDesign, description="Look until an answer (the default; off when `sequential` is "
        "given); null: one analysis after all blocks")

    @model_validator(mode="before")
    @classmethod
    def _one_design(cls, data: object) -> object:
        if isinstance(data, dict) and data.get("sequential") is not None:
            if data.get("adaptive") is not None:
                raise ValueError("sequential and adaptive are two designs: give one (adaptive: null for sequential)")
            data = {**data, "adaptive": None}
        return data

    def measure(self, result: TrialResult) -> float | None:
        """The trial's number this rule decides on: decode or prefill tok/s of trial1."""
        return result.prefill_tok_s() if self.statistic == "log_prefill_tok_s" else result.decode_tok_s()

    def column(self) -> str:
        """The same number's column in the trials table."""
        return "prefill_tok_s" if self.statistic == "log_prefill_tok_s" else "decode_tok_s"

    def digest(self) -> str:
        canon = json.dumps(self.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(canon.encode()).hexdigest()[:16]


class NightlyConfirm(Strict):
    """Same-night confirmation: a night whose comparison looks suspicious (one-sided p(slower) <
    `suspicious_p`) gets more blocks, up to `launches_per_arm` in all (more on a device whose registered noise
    exceeds `sigma`, up to `max_launches_per_arm` on one phone), on the same phone or, with `siblings`, shared
    with the other phones of its chip class in the config, and is then decided on every launch of the night: the
    alarm fires at p < `p` with a slowdown >= `slowdown`.
    Defaults chosen in bench/results/nightly_confirm.md (a first set of simulated nights, then checked
    on fresh ones): p < 0.001 let 1 of 4000 quiet nights alarm, p < 0.0001 none, and still alarms a 5%
    regression on its first night in about 96% of cases."""

    suspicious_p: float = Field(default=0.2, gt=0, lt=1, description="Extend the night below this p(slower)")
    launches_per_arm: int = Field(
        default=120, ge=12, le=MAX_LAUNCHES_PER_ARM, description="The cap: launches per arm of the night in all")
    p: Alpha = Field(default=0.0001, description="Alarm below this one-sided p(slower), on the whole night")
    slowdown: float = Field(default=0.03, ge=0, lt=1, description="... and a slowdown at least this")
    sigma: float = Field(
        default=0.065, gt=0, lt=1, description="The launch noise launches_per_arm is sized for, as the noise registry "
        "reads it (6.5%: the median reading of the simulated 6%-noise phones the defaults were measured on): a device "
        "whose registered noise is larger is extended to launches_per_arm x (its noise / sigma)^2, so its night's "
        "interval is as narrow as the one the defaults were measured with")
    max_launches_per_arm: int = Field(
        default=360, ge=12, le=MAX_LAUNCHES_PER_ARM, description="The most a noisy device's night is extended to "
        "(360 at 120 launches per arm and sigma 6.5%: noise up to 11.3% keeps the first-night detection)")
    siblings: bool = Field(
        default=True, description="Share a suspicious night's extension with the other phones of its chip class in "
        "the same config (each runs a share of the blocks; the device's night is then decided on its own first run and "
        "every phone's extension, stratified by phone): the night's confirmation takes a fraction of one phone's hours")

    @model_validator(mode="after")
    def _confirmable(self) -> NightlyConfirm:
        if self.p >= self.suspicious_p:
            raise ValueError(f"p ({self.p:g}) must be below suspicious_p ({self.suspicious_p:g}): a night that could "
                             "alarm would not be extended")
        if self.max_launches_per_arm < self.launches_per_arm:
            raise ValueError(f"max_launches_per_arm ({self.max_launches_per_arm}) must be at least launches_per_arm "
                             f"({self.launches_per_arm}): it is the most a noisy device's night is extended to")
        return self


class NightlyAlarm(Strict):
    """When `orch nightly` raises the alarm (candidate vs pinned reference, per device and config).

    Either `consecutive_nights` nights in a row each with one-sided p < `consecutive_p` and a
    slowdown >= `consecutive_slowdown`, or one night with p < `single_p` and slowdown >= `single_slowdown`,
    or one night confirmed the same night (`confirm`: the night extended when suspicious). With `latch`,
    an alarm stays raised on the nights after it until one shows the configuration recovered (one-sided
    p(slower) >= `recovered_p`), and says since which night.
    """

    consecutive_nights: int = Field(default=2, ge=1, le=365)
    consecutive_p: Alpha = 0.05
    consecutive_slowdown: float = Field(default=0.03, ge=0, lt=1)
    single_p: Alpha = 0.01
    single_slowdown: float = Field(default=0.10, ge=0, lt=1)
    confirm: NightlyConfirm | None = Field(
        default_factory=NightlyConfirm, description="Same-night confirmation (the default); null: none")
    latch: bool = Field(default=True, description="An alarm stays raised until a night shows recovery")
    recovered_p: float = Field(
        default=0.2, gt=0, lt=1, description="A latched alarm clears on a night with one-sided p(slower) >= this")


class RetryPolicy(Strict):
    max_attempts: int = Field(default=3, ge=1, le=100)
    backoff_s: float = Field(default=30.0, ge=0, le=HOUR)
    retry_on: list[FailureKind] = Field(default=["disconnected", "crashed", "hung", "bad_output"])
    max_consecutive_failures: int = Field(
        default=6, ge=1, le=10_000, description="Then the device's session stops"
    )


class InterferenceLimit(Strict):
    """Hosts: how much of the machine's CPU other processes may take while a trial runs.

    A trial over the limit is retried (up to `retry.max_attempts`, with the settle gate before each
    attempt) and, if its last attempt is still over, kept in the journal but excluded from verdicts, the
    audit and rank. Devices that cannot read it (phones, sims) are not checked.
    """

    max_other_cpu_share: float = Field(
        default=0.10, gt=0, le=1, description="Share of all CPUs' time over the trial (0.1: a tenth of the machine)")
    retry: bool = Field(default=True, description="Retry a spoiled trial (within retry.max_attempts)")
    quiet_wait_s: Wait = Field(
        default=0.0, description="Before each trial, wait up to this long for a second in which other processes "
        "stay under the limit (saying so on screen); then launch anyway, checked as ever. 0: do not wait")


class Plan(Strict):
    name: Name = Field(description="Part of every run id (and so of directory and file names)")
    description: str = ""
    model: str = Field(description="The model file; where it lives: model_location")
    model_location: Literal["controller", "device"] = Field(
        default="controller", description="controller: a file here that prepare puts on each device (a sim takes "
        "it as a label); device: a path already on every device (an iPhone's relative to Documents), used as written")
    arms: list[Arm] = Field(min_length=2, max_length=MAX_ARMS)
    trial: TrialSettings = TrialSettings()
    blocks: int = Field(
        default=60, ge=6, le=MAX_BLOCKS, description=">= 6: with 5 blocks no p < 0.05 is reachable; the cap of an "
        "adaptive decision (ABBA x 60 = 120 launches per arm: what equivalence within 3% at 6% noise needs)"
    )
    order: Literal["abba-baab", "abba", "williams"] = Field(
        default="abba-baab", description="2 arms: ABBA blocks alternating with BAAB (every block boundary changes "
        "arm), or ABBA repeated; more arms: williams")
    settle: SettlePolicy = SettlePolicy()
    decision: DecisionRule = DecisionRule()
    retry: RetryPolicy = RetryPolicy()
    interference: InterferenceLimit | None = Field(
        default_factory=InterferenceLimit, description="Hosts: other processes' CPU during a trial; null: not checked")
    devices: list[Name] | None = Field(default=None, description="Device ids to use; default all")
    probe: bool = Field(default=True, description="Measure each device's stream ceiling once per session (audit)")
    seed: Seed = 0
    nightly: NightlyAlarm | None = Field(default=None, description="Alarm thresholds for `orch nightly`")
    pool_by: Literal["chip_class"] | None = Field(
        default=None, description="Pool the phones of each chip class (the fleet's chip_class): each runs a share of "
        "the blocks, the adaptive looks are taken on the class's values together (device as a stratum), and the "
        "class gets one verdict beside each device's")
    pool_keep_going: bool = Field(
        default=True, description="With pool_by: a class whose answer is in while one phone's effect looks off its "
        "siblings' (p < 0.2) keeps going, every member in step, until that phone is flagged, no longer suspected or "
        "the phones' share of the blocks is used (its verdict stays the looks'); false: the class stops at its answer "
        "and is checked there once. Ignored without pool_by")
    budget_minutes: float | None = Field(
        default=None, gt=0, le=7 * 24 * 60, description="Device time each session may use (prepare, settle, "
        "launches), minutes: no trial starts once it is spent (stop reason `budget`); the verdicts are what it "
        "allowed. In a nightly plan, the config's device time on a phone tonight: a same-night confirmation gets "
        "what the first run left")

    @field_validator("arms")
    @classmethod
    def _unique_arms(cls, arms: list[Arm]) -> list[Arm]:
        names = [a.name for a in arms]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"duplicate arm names: {', '.join(dupes)}")
        return arms

    @field_validator("decision")
    @classmethod
    def _resampling_fits(cls, rule: DecisionRule, info: ValidationInfo) -> DecisionRule:
        blocks, order = info.data.get("blocks"), info.data.get("order")
        if blocks is None or order is None:
            return rule  # reported where they are
        adaptive = rule.adaptive
        if adaptive is not None and order in PAIRED and (adaptive.first_look % 2 or adaptive.look_every % 2):
            raise ValueError(f"adaptive: first_look ({adaptive.first_look}) and look_every ({adaptive.look_every}) "
                             f"must be even with order {order} (a look ends a block)")
        launches = blocks * (2 if order in PAIRED else 1)
        if launches * rule.resamples > MAX_RESAMPLING_WORK:
            raise ValueError(
                f"{launches} launches per arm x {rule.resamples} resamples is more than {MAX_RESAMPLING_WORK:,}: "
                "fewer blocks or resamples"
            )
        return rule

    @model_validator(mode="after")
    def _order_fits(self) -> Plan:
        if self.order in PAIRED and len(self.arms) != 2:
            raise ValueError(f"order {self.order} needs exactly 2 arms (got {len(self.arms)}); use order: williams")
        seq = self.decision.sequential
        if seq is not None and seq.looks[-1] > self.launches_per_arm():
            raise ValueError(
                f"last sequential look at {seq.looks[-1]} launches per arm, but the plan has only "
                f"{self.launches_per_arm()} ({self.blocks} blocks)"
            )
        return self

    def launches_per_arm(self) -> int:
        return self.blocks * (2 if self.order in PAIRED else 1)

    def arm(self, name: str) -> Arm:
        return next(a for a in self.arms if a.name == name)

    def pairs(self) -> list[tuple[str, str]]:
        """Every (baseline, candidate) pair of arms the rule compares: each arm against every later one."""
        names = [a.name for a in self.arms]
        return [(base, cand) for i, base in enumerate(names) for cand in names[i + 1:]]

    def spec_for(self, arm_name: str, *, run_id: str, trial_id: str, model: str | None = None,
                 tuning_table: str | None = None) -> TrialSpec:
        """The one way a trial spec is made from the plan: `model` and `tuning_table` as the device names
        them once prepare placed them (else the plan's paths: a sim takes them as labels)."""
        arm, t = self.arm(arm_name), self.trial
        return TrialSpec(
            run_id=run_id, trial_id=trial_id, engine=arm.runtime, model=model or self.model,
            prompt_tokens=t.prompt_tokens, decode_tokens=t.decode_tokens, chunk_width=t.chunk_width,
            warm_repetitions=t.warm_repetitions, seed=self.seed, threads=arm.threads, build=arm.build,
            tuning=dict(arm.engine), clear_caches=list(t.clear_caches), tuning_table=tuning_table or arm.tuning_table,
        )
