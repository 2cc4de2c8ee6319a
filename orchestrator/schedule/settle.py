"""The settle gate: no trial launches until the device is cool, flat and rested."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

from orchestrator.clock import Clock
from orchestrator.config.plan import InterferenceLimit, SettlePolicy
from orchestrator.devices.base import Device
from orchestrator.devices.interference import between
from orchestrator.protocol.device import DeviceUnavailable, Interference, Telemetry
from orchestrator.results.records import Rest, Settle, ThrottleCheck

QUIET_WINDOW_S = 1.0  # how long the gate watches other processes before a trial, when the plan asks it to


class SettleGate:
    """One per session: it remembers the baseline, the temperature history, the last trial's end and the
    throttle probe's baseline (the fastest probe of the session)."""

    def __init__(self, policy: SettlePolicy, clock: Clock, waiting: Callable[[str], None] = lambda why: None,
                 interference: InterferenceLimit | None = None):
        self.policy = policy
        self.interference = interference
        self.clock = clock
        self.waiting = waiting  # told what the gate waits for, for people watching
        self.baseline: float | None = policy.idle_baseline_c
        self.history: deque[tuple[float, float]] = deque()
        self.last_end: float | None = None
        self.probe_baseline: float | None = None

    def trial_ended(self) -> None:
        self.last_end = self.clock.now()

    async def wait(self, device: Device, rested: bool = False) -> Settle:
        """Until the device is settled (or the policy's timeout). `rested`: the device has just rested after a
        throttled trial; the throttle probe before the launch is skipped (the rest did its job, and the probe's
        own second of work would start the trial warmer)."""
        start, polls = self.clock.now(), 0
        while True:
            polls += 1
            now = self.clock.now()
            reading: Telemetry | None
            unavailable = True
            try:
                reading = await device.telemetry()
            except DeviceUnavailable as exc:
                reading, blocking = None, [f"device unavailable: {exc}" + (f" ({exc.fix})" if exc.fix else "")]
            except Exception as exc:  # a backend bug reads as an unavailable device, named
                reading, blocking = None, [f"device unavailable: telemetry raised {type(exc).__name__}: {exc}"]
            else:
                unavailable, blocking = False, self._blocking(reading, now)
            waited = now - start
            # within a microsecond of the timeout is the timeout: a sleep of the float rounding left over
            # would not move a virtual clock at all, and the gate would poll forever
            if not blocking or waited >= self.policy.timeout_s - 1e-6:
                probing = self.clock.now()
                quiet = await self._quiet(device) if not blocking else None
                throttle = await self._throttle(device) if not blocking and not rested else None
                waited += self.clock.now() - probing if quiet is not None or throttle is not None else 0.0
                return Settle(
                    settled=not blocking, waited_s=round(waited, 3), polls=polls,
                    baseline_c=self.baseline, before=reading, blocking=blocking, throttle=throttle, quiet=quiet,
                    unavailable=unavailable and bool(blocking),
                )
            self.waiting("; ".join(blocking))
            gap_left = self._gap_left(now)
            only_gap = len(blocking) == 1 and gap_left > 0
            step = gap_left if only_gap else self.policy.poll_s
            await self.clock.sleep(min(step, self.policy.timeout_s - waited))

    async def _quiet(self, device: Device) -> Interference | None:
        """Other processes' share of the CPU over a second, until it is under the plan's limit or the plan's
        `quiet_wait_s` has passed; the last reading (None where the device has no CPU counters to read)."""
        limit = self.interference
        if limit is None or limit.quiet_wait_s <= 0:
            return None
        start = self.clock.now()
        while True:
            try:
                before = await device.cpu_sample()
                await self.clock.sleep(QUIET_WINDOW_S)
                after = await device.cpu_sample()
            except Exception:  # no reading: the trial is still checked while it runs, where it can be
                return None
            if before is None or after is None:
                return None
            got = between(before, after)
            waited = self.clock.now() - start
            if got.share <= limit.max_other_cpu_share or waited >= limit.quiet_wait_s:
                return got
            who = f"; {got.top[0]}" if got.top else ""
            self.waiting(f"waiting for quiet: other processes took {got.share:.0%} of the CPU "
                         f"(limit {limit.max_other_cpu_share:.0%}{who}), {waited:.0f}/{limit.quiet_wait_s:.0f} s")

    async def _throttle(self, device: Device) -> ThrottleCheck | None:
        """The throttle probe against the session's fastest: slow means rest (`wait_s`, then until the
        temperature is near idle) and probe again, until it is not slow or `max_wait_s` has passed (then the
        check says slow and the trial is excluded)."""
        policy = self.policy.throttle_probe
        if policy is None:
            return None
        start, probes = self.clock.now(), 0
        while True:
            try:
                rate = await device.throttle_probe()
            except Exception:  # no probe from this device now: the trial is not checked
                return None
            if rate is None or not rate > 0:
                return None
            probes += 1
            self.probe_baseline = max(self.probe_baseline or rate, rate)
            slowdown = 1.0 - rate / self.probe_baseline
            waited = self.clock.now() - start
            slow = slowdown > policy.max_slowdown
            if not slow or waited + policy.wait_s > policy.max_wait_s:
                return ThrottleCheck(rate=rate, baseline=self.probe_baseline, slowdown=round(slowdown, 5), slow=slow,
                                     probes=probes, waited_s=round(waited, 3))
            self.waiting(f"throttle probe {slowdown:.0%} slower than the session's baseline "
                         f"(limit {policy.max_slowdown:.0%}): resting {policy.wait_s:.0f} s")
            await self._cool(device, policy.wait_s, max(policy.wait_s, policy.max_wait_s - waited),
                             "throttle probe slow")

    async def after_trial(self, device: Device) -> ThrottleCheck | None:
        """The throttle probe once, right after a trial (where the plan asks): slow means the trial ran at
        least partly throttled, by heat the gate before it could not see (its own launch's, or carried in)."""
        policy = self.policy.throttle_probe
        if policy is None or not policy.after:
            return None
        try:
            rate = await device.throttle_probe()
        except Exception:  # no probe now: the trial is not checked after, never lost
            return None
        if rate is None or not rate > 0:
            return None
        self.probe_baseline = max(self.probe_baseline or rate, rate)
        slowdown = 1.0 - rate / self.probe_baseline
        return ThrottleCheck(rate=rate, baseline=self.probe_baseline, slowdown=round(slowdown, 5),
                             slow=slowdown > policy.max_slowdown, probes=1, waited_s=0.0)

    async def rest(self, device: Device) -> Rest:
        """After a trial that ran throttled: rest `rest_s`, then until the temperature is within `rest_margin_c`
        of the idle baseline, at most `max_rest_s` (a device without a temperature rests `rest_s`)."""
        policy = self.policy.throttle_probe
        assert policy is not None
        self.waiting(f"the last trial ran throttled (throttle probe slow after it): resting {policy.rest_s:.0f} s")
        return await self._cool(device, policy.rest_s, policy.max_rest_s, "the last trial ran throttled")

    async def _cool(self, device: Device, least_s: float, most_s: float, why: str) -> Rest:
        """Rest `least_s`, then until the temperature is within the probe's `rest_margin_c` of the idle
        baseline, `most_s` at most. Probing meanwhile would not do: its own work keeps a device warm."""
        policy = self.policy.throttle_probe
        assert policy is not None
        start = self.clock.now()
        await self.clock.sleep(least_s)
        while True:
            try:
                temp = (await device.telemetry()).temperature()
            except Exception:  # no reading: the rest is least_s, as on a device without a temperature
                temp = None
            waited = self.clock.now() - start
            if temp is None:
                return Rest(waited_s=round(waited, 3), temperature_c=None, baseline_c=self.baseline, reached=None)
            if self.policy.idle_baseline_c is None:
                self.baseline = temp if self.baseline is None else min(self.baseline, temp)
            assert self.baseline is not None
            near = temp - self.baseline <= policy.rest_margin_c
            if near or waited >= most_s - 1e-6:
                return Rest(waited_s=round(waited, 3), temperature_c=temp, baseline_c=self.baseline, reached=near)
            self.waiting(f"{why}: resting until {temp:.1f} C is within {policy.rest_margin_c:g} C of idle "
                         f"{self.baseline:.1f} C, {waited:.0f}/{most_s:.0f} s")
            await self.clock.sleep(min(self.policy.poll_s, most_s - waited))

    def _gap_left(self, now: float) -> float:
        left = 0.0 if self.last_end is None else self.policy.min_gap_s - (now - self.last_end)
        return left if left > 1e-6 else 0.0  # sleeping exactly the gap can land a rounding error short

    def _blocking(self, reading: Telemetry, now: float) -> list[str]:
        p, why = self.policy, []
        if (gap := self._gap_left(now)) > 0:
            why.append(f"min gap: {gap:.0f} s to go")
        if p.require_nominal and reading.thermal_state not in (None, "nominal"):
            why.append(f"thermal state {reading.thermal_state}")
        if (temp := reading.temperature()) is not None:
            why += self._battery(temp, now)
        if p.max_load_1m is not None and reading.load_1m is not None and reading.load_1m > p.max_load_1m:
            why.append(f"load {reading.load_1m:.2f} over {p.max_load_1m:.2f}")
        if p.charging == "required" and reading.charging is False:
            why.append("not charging")
        if p.charging == "forbidden" and reading.charging:
            why.append("charging")
        if not p.allow_low_power and reading.low_power:
            why.append("low power mode on")
        return why

    def _battery(self, temp: float, now: float) -> list[str]:
        p, why = self.policy, []
        if self.policy.idle_baseline_c is None:
            self.baseline = temp if self.baseline is None else min(self.baseline, temp)
        assert self.baseline is not None
        if temp - self.baseline > p.battery_margin_c:
            why.append(f"temperature {temp:.1f} C is {temp - self.baseline:.1f} C over baseline {self.baseline:.1f} C")
        self.history.append((now, temp))
        # keep exactly one sample at or beyond the window's start, so a full window can be seen
        while len(self.history) > 1 and self.history[1][0] <= now - p.flat_window_s:
            self.history.popleft()
        span = now - self.history[0][0]
        spread = max(t for _, t in self.history) - min(t for _, t in self.history)
        if span < p.flat_window_s:
            why.append(f"flat window: {span:.0f}/{p.flat_window_s:.0f} s observed")
        elif spread > p.flat_tolerance_c:
            why.append(f"temperature moved {spread:.2f} C over {p.flat_window_s:.0f} s")
        return why

