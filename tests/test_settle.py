"""The settle gate, on a scripted device and a virtual clock: minutes of waiting in microseconds."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from orchestrator.clock import VirtualClock
from orchestrator.config import SettlePolicy
from orchestrator.devices import FakeDevice
from orchestrator.protocol.device import DeviceUnavailable, Telemetry, TrialFailure
from orchestrator.schedule import SettleGate


class Scripted(FakeDevice):
    """Telemetry as a function of virtual time."""

    def __init__(self, clock: VirtualClock, reading: Callable[[float], Telemetry | None]):
        super().__init__("scripted", lambda spec: TrialFailure(kind="crashed", message="unused"))
        self.clock, self.reading = clock, reading

    async def telemetry(self) -> Telemetry:
        r = self.reading(self.clock.now())
        if r is None:
            raise DeviceUnavailable("not connected", fix="reconnect the USB cable")
        return r


def settle(policy: SettlePolicy, reading: Callable[[float], Telemetry | None], last_end: float | None = None):  # type: ignore[no-untyped-def]
    clock = VirtualClock(start=1000.0)
    gate = SettleGate(policy, clock)
    if last_end is not None:
        gate.last_end = last_end
    return asyncio.run(gate.wait(Scripted(clock, reading))), clock


def test_waits_for_the_flat_window_then_the_gap() -> None:
    cool = lambda t: Telemetry(t=t, thermal_state="nominal", battery_c=30.0)  # noqa: E731
    s, _ = settle(SettlePolicy(flat_window_s=60, min_gap_s=90), cool)
    assert s.settled and s.waited_s == 60 and s.polls == 7
    s, _ = settle(SettlePolicy(flat_window_s=0, min_gap_s=90), cool, last_end=1000.0 - 30)
    assert s.settled and s.waited_s == 60, "only the gap held it: sleep exactly until the gap is met"


def test_waits_for_nominal_and_cooling_battery_against_baseline() -> None:
    def cooling(t: float) -> Telemetry:
        dt = t - 1000.0
        state = "fair" if dt < 200 else "nominal"
        return Telemetry(t=t, thermal_state=state, battery_c=max(30.0, 34.0 - dt * 0.01))

    policy = SettlePolicy(idle_baseline_c=30.0, battery_margin_c=1.5, flat_window_s=60, flat_tolerance_c=0.3,
                          min_gap_s=0)
    s, _ = settle(policy, cooling)
    assert s.settled and s.baseline_c == 30.0
    assert s.before is not None and s.before.battery_c is not None and s.before.battery_c <= 31.5
    assert s.waited_s >= 250, "needs battery within margin (>= 250 s) and flat over 60 s"


def test_gives_up_with_a_typed_reason() -> None:
    hot = lambda t: Telemetry(t=t, thermal_state="serious", battery_c=40.0)  # noqa: E731
    s, clock = settle(SettlePolicy(timeout_s=900), hot)
    assert not s.settled and s.waited_s == 900 and clock.now() == 1900.0
    assert s.blocking == ["thermal state serious"]


def test_unavailable_device_is_blocking_and_named() -> None:
    s, _ = settle(SettlePolicy(timeout_s=100), lambda t: None)
    assert not s.settled and s.before is None
    assert s.blocking == ["device unavailable: not connected (reconnect the USB cable)"]


def test_unreadable_battery_is_not_blocking() -> None:
    reading = lambda t: Telemetry(t=t, thermal_state="nominal", unavailable=["battery_c"])  # noqa: E731
    s, _ = settle(SettlePolicy(min_gap_s=0), reading)
    assert s.settled and s.waited_s == 0


def test_baseline_is_the_sessions_lowest_reading() -> None:
    temps = iter([33.0, 32.0, 31.0, 31.0, 31.0, 31.0, 31.0, 31.0, 31.0])
    s, _ = settle(SettlePolicy(min_gap_s=0), lambda t: Telemetry(t=t, thermal_state="nominal", battery_c=next(temps)))
    assert s.settled and s.baseline_c == 31.0


def test_sleeping_exactly_the_gap_is_not_defeated_by_rounding() -> None:
    """Regression: a gap left of 1e-13 s was slept in steps too small to move the clock."""
    cool = lambda t: Telemetry(t=t, thermal_state="nominal", battery_c=30.0)  # noqa: E731
    for start in (2127.9197640909997, 1e6 + 0.1, 73.759953066):
        clock = VirtualClock(start=start)
        gate = SettleGate(SettlePolicy(flat_window_s=0, min_gap_s=90), clock)
        gate.last_end = start - 0.3
        s = asyncio.run(gate.wait(Scripted(clock, cool)))
        assert s.settled and s.polls == 2 and abs(s.waited_s - 89.7) < 1e-3


def test_a_timeout_a_rounding_error_away_still_ends_on_a_virtual_clock() -> None:
    """Start at a time where start + 600 is not exactly reachable in 10 s steps (the float sum lands a
    hair short): the gate must give up at the timeout, not sleep 2e-13 s forever."""
    clock = VirtualClock(start=1467.1004870844138)
    gate = SettleGate(SettlePolicy(timeout_s=600, poll_s=10), clock)

    async def bounded() -> object:
        return await asyncio.wait_for(gate.wait(Scripted(clock, lambda t: None)), 10)

    s = asyncio.run(bounded())
    assert not s.settled and s.blocking[0].startswith("device unavailable")  # type: ignore[attr-defined]
    assert abs(s.waited_s - 600) < 1e-3  # type: ignore[attr-defined]
