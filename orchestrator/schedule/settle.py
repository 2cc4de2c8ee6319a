"""The settle gate: no trial launches until the device is cool, flat and rested."""

from __future__ import annotations

from collections import deque

from orchestrator.clock import Clock
from orchestrator.config.plan import SettlePolicy
from orchestrator.devices.base import Device, DeviceUnavailable, Telemetry
from orchestrator.results.records import Settle


class SettleGate:
    """One per session: it remembers the baseline, the temperature history and the last trial's end."""

    def __init__(self, policy: SettlePolicy, clock: Clock):
        self.policy = policy
        self.clock = clock
        self.baseline: float | None = policy.idle_baseline_c
        self.history: deque[tuple[float, float]] = deque()
        self.last_end: float | None = None

    def trial_ended(self) -> None:
        self.last_end = self.clock.now()

    async def wait(self, device: Device) -> Settle:
        start, polls = self.clock.now(), 0
        while True:
            polls += 1
            now = self.clock.now()
            reading: Telemetry | None
            try:
                reading = await device.telemetry()
            except DeviceUnavailable as exc:
                reading, blocking = None, [f"device unavailable: {exc}" + (f" ({exc.fix})" if exc.fix else "")]
            except Exception as exc:  # a backend bug reads as an unavailable device, named
                reading, blocking = None, [f"device unavailable: telemetry raised {type(exc).__name__}: {exc}"]
            else:
                blocking = self._blocking(reading, now)
            waited = now - start
            # within a microsecond of the timeout is the timeout: a sleep of the float rounding left over
            # would not move a virtual clock at all, and the gate would poll forever
            if not blocking or waited >= self.policy.timeout_s - 1e-6:
                return Settle(
                    settled=not blocking, waited_s=round(waited, 3), polls=polls, baseline_c=self.baseline,
                    before=reading, blocking=blocking,
                )
            gap_left = self._gap_left(now)
            only_gap = len(blocking) == 1 and gap_left > 0
            step = gap_left if only_gap else self.policy.poll_s
            await self.clock.sleep(min(step, self.policy.timeout_s - waited))

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

