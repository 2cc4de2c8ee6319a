"""One device's session: settled, fresh launches in the planned order; every outcome journaled."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from pydantic import BaseModel

from orchestrator.analysis.decision import ArmSample
from orchestrator.analysis.sequential import due, take_look
from orchestrator.clock import Clock
from orchestrator.config.plan import Plan
from orchestrator.devices.base import Device
from orchestrator.devices.interference import CpuSample, between
from orchestrator.protocol import THERMAL_ORDER, TrialResult, TrialSpec
from orchestrator.protocol.device import Artifacts, DeviceUnavailable, Interference, TrialFailure
from orchestrator.results.records import (
    AttemptFailed,
    AttemptSpoiled,
    LookPair,
    LookRecord,
    PreparedRecord,
    PushProgress,
    Rest,
    ScheduledTrial,
    SessionPlan,
    SessionStopped,
    SettleWaiting,
    StopReason,
    StreamProbeRecord,
    ThrottleCheck,
    TrialRecord,
)
from orchestrator.schedule.pool import ClassPool
from orchestrator.schedule.settle import SettleGate


class Sink(Protocol):
    def append(self, record: BaseModel) -> None: ...


Observer = Callable[[str, BaseModel], None]


@dataclass
class SessionState:
    """What a session has already done: empty for a new run, read back from the journal on resume."""

    done: set[str] = field(default_factory=set)
    attempts: dict[str, int] = field(default_factory=dict)
    values: dict[str, list[tuple[int, float]]] = field(default_factory=dict)  # arm -> (block, statistic)
    looks_done: int = 0
    probed: bool = False
    used_s: float = 0.0  # device time spent so far: prepare, settle waits, launches (all attempts)
    prepared: PreparedRecord | None = None  # what the device was at the session's last (re)start


@dataclass
class Session:
    run_id: str
    plan: Plan
    schedule: SessionPlan
    device: Device
    clock: Clock
    journal: Sink
    state: SessionState = field(default_factory=SessionState)
    artifacts: Artifacts = field(default_factory=Artifacts)
    observe: Observer = lambda device, record: None
    look_seed: int = 0  # the run's seed (manifest.seed): the looks' resampling; prompts come from plan.seed
    model: str | None = None  # the model as this device's programs name it, once prepare has placed it
    tuning: dict[str, str] = field(default_factory=dict)  # arm -> its tuning table as the device names it
    pool: ClassPool | None = None  # the class this device answers with (pool_by), when pooled
    accept_change: bool = False  # resume on a device that now says it is another model, chip, OS or harness
    _held: str = ""  # what the settle gate still waited for when it gave up

    async def run(self) -> StopReason:
        try:
            reason, detail = await self._run()
        except asyncio.CancelledError:  # Ctrl-C: say so, keep the journal whole, let it resume
            self._emit(SessionStopped(device=self.schedule.device, reason="interrupted", wall=self.clock.wall()))
            raise
        except Exception as exc:  # a backend bug stops this device's session, never the other devices
            reason, detail = "backend_error", f"{type(exc).__name__}: {exc}"
        finally:
            if self.pool is not None:  # the class's rounds no longer wait for this device
                self.pool.leave(self.schedule.device)
        self._emit(SessionStopped(device=self.schedule.device, reason=reason, detail=detail, wall=self.clock.wall()))
        return reason

    async def _run(self) -> tuple[StopReason, str]:
        t0 = self.clock.now()
        try:
            info = await self.device.info()
            report = await self.device.prepare(self.artifacts, progress=self._pushing)
        except DeviceUnavailable as exc:
            return "prepare_failed", f"{exc}" + (f" ({exc.fix})" if exc.fix else "")
        prepared_s = round(self.clock.now() - t0, 6)
        self.state.used_s += prepared_s
        wanted = self.artifacts.model
        placed = report.path_of(wanted) if wanted else None
        if wanted and placed is None:
            return "prepare_failed", f"{self.schedule.device}: prepare did not say where the model {wanted} landed"
        self.model = placed or self.plan.model  # nothing deployed (a sim, a model already on the device): as written
        self.tuning = {arm: path for arm, name in self.artifacts.tuning.items() if (path := report.path_of(name))}
        if missing := sorted(set(self.artifacts.tuning) - set(self.tuning)):
            return "prepare_failed", f"{self.schedule.device}: prepare did not place the tuning tables of {missing}"
        was = self.state.prepared
        if was is not None and (changes := was.changes(info, report.installed)) and not self.accept_change:
            return "device_changed", (f"{self.schedule.device} is not what its earlier trials ran on "
                                      f"({', '.join(changes)}): resume with --accept-device-change to mix "
                                      f"them, or start a new run")
        sha = next((f.sha256 for f in self.artifacts.files if f.name == wanted), None)
        self.state.prepared = PreparedRecord(
            device=self.schedule.device, installed=report.installed, skipped=report.skipped, files=report.files,
            model=self.model, model_sha256=sha, tuning=self.tuning, info=info, seconds=prepared_s,
            wall=self.clock.wall())
        self._emit(self.state.prepared)
        if self.plan.probe and not self.state.probed:
            await self._stream_probe()
        gate = SettleGate(self.plan.settle, self.clock, lambda why: self.observe(self.schedule.device,
                                                                                  SettleWaiting(why=why)),
                          self.plan.interference)
        failures_in_row = 0
        for trial in self.schedule.trials:
            if trial.trial_id in self.state.done:
                continue
            if (spent := self._budget_spent()) is not None:
                return "budget", spent
            if self.pool is not None:
                await self.pool.turn(self.schedule.device, trial.seq)  # never ahead of the class's round
                if self.pool.decided:
                    return "decided", self.pool.decided
            outcome = await self._trial(trial, gate)
            if isinstance(outcome, str):
                return outcome, f"before {trial.trial_id}" + (f" ({self._held})" if self._held else "")
            failures_in_row = failures_in_row + 1 if outcome.failure else 0
            if failures_in_row >= self.plan.retry.max_consecutive_failures:
                last = outcome.failure
                assert last is not None
                return "too_many_failures", f"{failures_in_row} trials in a row failed; last: {last.kind}: " \
                                            f"{last.message}"
            trusted = outcome.result is not None and outcome.excluded is None  # an excluded trial informs no look
            value = self.plan.decision.measure(outcome.result) if trusted and outcome.result is not None else None
            if value is not None:
                self.state.values.setdefault(trial.arm, []).append((trial.block, value))
            if self.pool is not None:
                self.pool.record(self.schedule.device, trial.seq, trial.block, trial.arm, value)
                stop = self._pooled_look()
            else:
                stop = self._look()
            if stop is not None:
                return stop, (self.pool.decided if self.pool is not None and self.pool.decided
                              else f"sequential look {self.state.looks_done - 1}")
        return "completed", ""

    async def _trial(self, trial: ScheduledTrial, gate: SettleGate) -> TrialRecord | StopReason:
        attempt = self.state.attempts.get(trial.trial_id, 0)
        spec = self._spec(trial)
        rest: Rest | None = None  # the rest before this attempt, when the one before ran throttled
        while True:
            attempt += 1
            settle = await gate.wait(self.device, rested=rest is not None)
            if not settle.settled:
                self.observe(self.schedule.device, settle)
                self._held = f"the settle gate still held after {settle.waited_s:.0f} s: {'; '.join(settle.blocking)}"
                return "device_unavailable" if settle.unavailable else "settle_timeout"
            cpu_before = await self._cpu()
            t0, wall = self.clock.now(), self.clock.wall()
            try:
                outcome = await self.device.run_trial(spec, self.plan.trial.timeout_s)
            except Exception as exc:  # the contract says never; a broken backend still becomes data
                outcome = TrialFailure(kind="launch_failed", message=f"backend raised {type(exc).__name__}: {exc}")
            cpu_after = await self._cpu()
            duration = self.clock.now() - t0
            hot = await gate.after_trial(self.device) if isinstance(outcome, TrialResult) else None
            gate.trial_ended()
            self.state.used_s += settle.waited_s + duration
            interference = between(cpu_before, cpu_after) if cpu_before and cpu_after else None
            rested = rest is not None and rest.reached is not False
            excluded = None if isinstance(outcome, TrialFailure) else self._excluded(interference, settle.throttle,
                                                                                     hot, rested)
            retry = self.plan.retry
            limit = self.plan.interference
            spoiled = excluded is not None and excluded.startswith("interference")  # a throttled one was waited on
            ran_hot = excluded is not None and excluded.startswith("throttled during")
            if ((spoiled and limit is not None and limit.retry) or ran_hot) and attempt < retry.max_attempts:
                assert excluded is not None
                rate = outcome.decode_tok_s() if isinstance(outcome, TrialResult) else None
                self._emit(AttemptSpoiled(
                    device=self.schedule.device, trial_id=trial.trial_id, attempt=attempt, why=excluded,
                    interference=interference, throttle_after=hot, rest=rest, decode_tok_s=rate,
                    wall=self.clock.wall(), settle_waited_s=settle.waited_s, duration_s=round(duration, 6),
                ))
                rest = await gate.rest(self.device) if ran_hot else None
                self.state.used_s += rest.waited_s if rest else 0.0
                continue  # the settle gate again, then a fresh launch
            if (
                isinstance(outcome, TrialFailure)
                and outcome.kind in retry.retry_on
                and attempt < retry.max_attempts
            ):
                self._emit(AttemptFailed(
                    device=self.schedule.device, trial_id=trial.trial_id, attempt=attempt, failure=outcome,
                    will_retry=True, wall=self.clock.wall(), settle_waited_s=settle.waited_s,
                    duration_s=round(duration, 6),
                ))
                await self.clock.sleep(retry.backoff_s)
                rest = None  # the next attempt starts after a backoff, not from a rest
                continue
            try:
                after = await self.device.telemetry()
            except Exception:  # unavailable or broken: the trial stands, the reading is missing
                after = None
            before_rank = THERMAL_ORDER.get(settle.before.thermal_state or "", -1) if settle.before else -1
            after_rank = THERMAL_ORDER.get(after.thermal_state or "", -1) if after else -1
            record = TrialRecord(
                device=self.schedule.device, trial_id=trial.trial_id, seq=trial.seq, block=trial.block,
                arm=trial.arm, attempts=attempt, wall=wall, t_start=t0, duration_s=round(duration, 6),
                settle=settle, after=after, state_rose=after_rank > before_rank >= 0,
                result=None if isinstance(outcome, TrialFailure) else outcome,
                failure=outcome if isinstance(outcome, TrialFailure) else None,
                interference=interference, excluded=excluded, throttle_after=hot, rest=rest,
                throttled_from_rest=hot is not None and hot.slow and rested and excluded is None,
            )
            self._emit(record)
            return record

    async def _cpu(self) -> CpuSample | None:
        """The machine's CPU counters, where the plan checks interference and the device can read them."""
        if self.plan.interference is None:
            return None
        try:
            return await self.device.cpu_sample()
        except Exception:  # no reading: the trial is not checked, never lost
            return None

    def _excluded(self, interference: Interference | None, throttle: ThrottleCheck | None,
                  hot: ThrottleCheck | None = None, rested: bool = False) -> str | None:
        """Why a finished trial's number cannot be trusted, or None. One that ran throttled although it started
        from a rest throttles itself: that is its arm's own behaviour, kept."""
        # interference first: a probe slowed by other work is not heat, and a spoiled trial is retried
        limit = self.plan.interference
        if limit is not None and interference is not None and interference.share > limit.max_other_cpu_share:
            who = f"; {interference.top[0]}" if interference.top else ""
            return (f"interference: other processes took {interference.share:.0%} of the CPU during the trial "
                    f"(limit {limit.max_other_cpu_share:.0%}){who}")
        if throttle is not None and throttle.slow:
            return (f"throttled: the throttle probe ran {throttle.slowdown:.0%} slower than the session's baseline "
                    f"after {throttle.waited_s:.0f} s of waiting")
        if hot is not None and hot.slow and not rested:
            return (f"throttled during the trial: the throttle probe right after it ran {hot.slowdown:.0%} slower "
                    "than the session's baseline")
        return None

    async def _stream_probe(self) -> None:
        """The ceiling for the audit, once per session; a device that cannot probe just has none."""
        try:
            measured = await self.device.stream_probe()
        except Exception:  # no ceiling from this device: the audit falls back to ceilings.yaml
            measured = None
        self.state.probed = True
        if measured is not None:
            self._emit(StreamProbeRecord(device=self.schedule.device, probe=measured, wall=self.clock.wall()))

    def _pushing(self, name: str, sent: int, total: int) -> None:
        self.observe(self.schedule.device, PushProgress(name=name, sent=sent, total=total))

    def _spec(self, trial: ScheduledTrial) -> TrialSpec:
        return self.plan.spec_for(trial.arm, run_id=self.run_id, trial_id=trial.trial_id, model=self.model,
                                  tuning_table=self.tuning.get(trial.arm))

    def _budget_spent(self) -> str | None:
        """Why no further trial starts: the plan's device-time budget is used up (None while it is not)."""
        budget = self.plan.budget_minutes
        if budget is None or self.state.used_s < budget * 60:
            return None
        n = min((len(self.state.values.get(a.name, [])) for a in self.plan.arms), default=0)
        return (f"device-time budget {budget:g} min spent ({self.state.used_s / 60:.1f} min) with {n} launches per "
                "arm measured")

    def _pooled_look(self) -> StopReason | None:
        """The class's look, taken by whichever member finished the round (journaled under its id)."""
        assert self.pool is not None
        taken = self.pool.look()
        if taken is not None:
            self._emit(LookRecord(
                device=self.schedule.device, look=taken.index, n_per_arm=taken.n_per_arm, action=taken.action,
                wall=self.clock.wall(), pairs=[LookPair(**vars(p)) for p in taken.pairs],
            ))
        return "decided" if self.pool.decided else None

    def _look(self) -> StopReason | None:
        """Group-sequential or adaptive looks: stop when every pair is decided or futile (adaptive: answered)."""
        rule, arms = self.plan.decision, [a.name for a in self.plan.arms]
        n = min(len(self.state.values.get(a, [])) for a in arms)
        index = due(rule, self.plan.launches_per_arm(), n, after=self.state.looks_done - 1)
        if index is None:
            return None
        samples = {a: ArmSample.of(a, self.state.values.get(a, [])) for a in arms}
        taken = take_look(samples, self.plan.pairs(), rule, index, cap=self.plan.launches_per_arm(),
                          seed=self.look_seed)
        self.state.looks_done = index + 1
        self._emit(LookRecord(
            device=self.schedule.device, look=index, n_per_arm=taken.n_per_arm, action=taken.action,
            pairs=[LookPair(**vars(p)) for p in taken.pairs], wall=self.clock.wall(),
        ))
        return "decided" if taken.action == "decided" else "futile" if taken.action == "futile" else None

    def _emit(self, record: BaseModel) -> None:
        self.journal.append(record)
        self.observe(self.schedule.device, record)
