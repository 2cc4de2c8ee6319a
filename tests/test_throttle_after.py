"""A trial's own heat: the simulator's clocks drop mid-trial, the throttle probe runs again after each trial, a
trial that ran throttled is retried from a rest, and one that throttles itself from rest is counted, marked."""

from __future__ import annotations

import asyncio

import numpy as np
import pandas as pd
import pytest
from conftest import fleet_of, plan_with, sim_device

from orchestrator import core
from orchestrator.clock import VirtualClock
from orchestrator.config import SettlePolicy
from orchestrator.config.sim import SimDeviceConfig
from orchestrator.devices import FakeDevice
from orchestrator.devices.sim import SimDevice
from orchestrator.protocol import TrialResult
from orchestrator.protocol.device import Telemetry, TrialFailure
from orchestrator.results.records import AttemptSpoiled, Record, TrialRecord
from orchestrator.results.trials import self_throttled_words, usable
from orchestrator.schedule import SettleGate

QUIET = {"sigma": 0.0, "drift_per_hour": 0.0, "outlier_rate": 0.0, "token_jitter": 0.0}


def stamps(result: TrialResult) -> np.ndarray:
    assert result.trial1 is not None
    return np.asarray(result.trial1.token_times_ns, dtype=float)


def tok_s(result: TrialResult) -> float:
    rate = result.decode_tok_s()
    assert rate is not None
    return rate


def launched(hidden_c: float | None, soc: float = 28.0) -> TrialResult:
    """One heavy launch (load 2, 4 s model load) on a noiseless sim whose SoC starts at `soc`."""
    thermal = {"ambient_c": 24, "heat_c_per_s": 0.09, "hidden_throttle_c": hidden_c}
    cfg = SimDeviceConfig.model_validate(sim_device(
        runtimes={"rawloop-metal": {"decode_tok_s": 50.0, "load": 2.0, "launch_s": 4.0}}, noise=QUIET,
        thermal=thermal))
    device = SimDevice(cfg, VirtualClock())
    device.thermals.soc = soc
    spec = plan_with(trial={"prompt_tokens": 16, "decode_tokens": 128}).spec_for(
        "cand", run_id="r", trial_id="t", model="m", tuning_table=None)
    got = asyncio.run(device.run_trial(spec, 600))
    assert isinstance(got, TrialResult)
    assert all(s.state == "nominal" for s in got.thermal), "the OS says nominal throughout"
    return got


def test_the_clocks_drop_mid_trial_where_its_own_heat_crosses_the_threshold() -> None:
    cool = launched(None)
    steady = np.diff(stamps(cool))
    assert steady.max() / steady.min() == pytest.approx(1.0, abs=1e-6)
    # from idle 28.0 the heavy launch reaches ~28.36 C by its first token and ~28.88 C by its last
    crossed = launched(28.6)
    gaps = np.diff(stamps(crossed))
    first, last = gaps[:10].mean(), gaps[-10:].mean()
    assert last / first == pytest.approx(1 / 0.9, rel=1e-3), "a step of the throttle's size in the token stamps"
    step = int(np.argmax(gaps > first * 1.05))
    assert 10 < step < len(gaps) - 10, "the step falls inside the decode"
    assert tok_s(cool) > tok_s(crossed) > 0.9 * tok_s(cool)
    assert tok_s(launched(28.6, soc=28.7)) == pytest.approx(0.9 * tok_s(cool), rel=1e-3), \
        "a trial that starts over the threshold runs throttled throughout"
    assert tok_s(launched(29.5)) == pytest.approx(tok_s(cool), rel=1e-9), "never reached from idle"


class Cooling(FakeDevice):
    """A device whose probe and battery temperature read from scripts (then 1.0 and the last temperature)."""

    def __init__(self, rates: list[float], temps: list[float | None]):
        super().__init__("c", lambda spec: TrialFailure(kind="crashed", message="unused"))
        self.rates, self.temps = list(rates), list(temps)

    async def throttle_probe(self) -> float | None:
        return self.rates.pop(0) if self.rates else 1.0

    async def telemetry(self) -> Telemetry:
        temp = self.temps.pop(0) if len(self.temps) > 1 else self.temps[0]
        return Telemetry(t=0.0, thermal_state="nominal", battery_c=temp)


def gate(**probe: object) -> tuple[SettleGate, VirtualClock, list[str]]:
    clock, said = VirtualClock(), list[str]()
    policy = SettlePolicy.model_validate({"min_gap_s": 0, "flat_window_s": 0, "poll_s": 10, "idle_baseline_c": 30.0,
                                          "throttle_probe": {"rest_s": 60, "max_rest_s": 300, **probe}})
    return SettleGate(policy, clock, said.append), clock, said


def test_the_probe_after_a_trial_says_whether_it_ran_throttled() -> None:
    g, clock, _ = gate()
    device = Cooling([1.0, 0.97, 0.9], [30.0])
    assert asyncio.run(g.wait(device)).throttle is not None
    fine = asyncio.run(g.after_trial(device))
    hot = asyncio.run(g.after_trial(device))
    assert fine is not None and not fine.slow and fine.slowdown == pytest.approx(0.03)
    assert hot is not None and hot.slow and hot.slowdown == pytest.approx(0.1) and hot.baseline == 1.0
    assert clock.now() == 0, "one probe, no waiting"
    off, _, _ = gate(after=False)
    assert asyncio.run(off.after_trial(device)) is None


def test_a_rest_lasts_until_the_temperature_is_near_idle_or_its_limit() -> None:
    g, clock, said = gate()
    rest = asyncio.run(g.rest(Cooling([], [31.0, 30.6, 30.4, 30.2, 30.1])))
    assert rest.reached and rest.temperature_c == 30.2 and rest.waited_s == 90 and clock.now() == 90
    assert said[0].startswith("the last trial ran throttled") and len(said) == 4
    g, clock, _ = gate()
    stuck = asyncio.run(g.rest(Cooling([], [31.0])))
    assert stuck.reached is False and stuck.waited_s == 300
    g, clock, _ = gate()
    blind = asyncio.run(g.rest(Cooling([], [None])))
    assert blind.reached is None and blind.waited_s == 60, "no temperature: the rest is rest_s"


def test_no_probe_before_a_launch_right_after_a_rest() -> None:
    g, _, _ = gate()
    device = Cooling([1.0], [30.0])
    assert asyncio.run(g.wait(device, rested=True)).throttle is None
    assert device.rates == [1.0], "the probe did not run"


def hot_run(hidden_c: float, margin: float = 0.3, **retry: object) -> tuple[list[Record], pd.DataFrame]:
    heavy = sim_device("hot", runtimes={"coreai": {"decode_tok_s": 50.0},
                                        "rawloop-metal": {"decode_tok_s": 50.0, "load": 2.0, "launch_s": 4.0}},
                       thermal={"ambient_c": 24, "heat_c_per_s": 0.09, "hidden_throttle_c": hidden_c})
    plan = plan_with(blocks=6, trial={"prompt_tokens": 16, "decode_tokens": 128}, retry={"backoff_s": 0, **retry},
                     settle={"throttle_probe": {"max_slowdown": 0.05, "rest_margin_c": margin}})
    _, records, trials = core.simulate(fleet_of(heavy), plan)
    return records, trials


def test_a_trial_warmed_by_the_one_before_is_retried_from_rest_and_kept_clean() -> None:
    records, trials = hot_run(29.5)  # from idle the heavy arm never reaches it; from a warm start it does
    spoiled = [r for r in records if isinstance(r, AttemptSpoiled)]
    assert spoiled and all(r.why.startswith("throttled during the trial") and r.throttle_after is not None
                           and r.throttle_after.slow for r in spoiled)
    final = {r.trial_id: r for r in records if isinstance(r, TrialRecord)}
    retried = [final[r.trial_id] for r in spoiled]
    assert all(t.rest is not None and t.rest.waited_s >= 60 for t in retried)
    assert all(t.settle.throttle is None for t in retried), "no probe before a launch right after a rest"
    assert all(t.throttle_after is not None and not t.throttle_after.slow for t in retried), "cool from rest"
    assert not trials["excluded"].notna().any() and not trials["throttled_from_rest"].any()
    assert trials["throttle_after_slowdown"].notna().all()
    assert (trials.set_index("trial_id").loc[[t.trial_id for t in retried], "retry_s"] >= 60).all()
    assert self_throttled_words(trials) is None


def test_an_arm_that_throttles_itself_from_rest_is_counted_and_said_so() -> None:
    # the heavy arm crosses it from idle, mid-decode, in every launch; the light one only from 0.3 C over idle,
    # so here a rest ends 0.1 C from idle
    _, trials = hot_run(28.6, margin=0.1)
    heavy = trials[trials["arm"] == "cand"]
    assert heavy["throttled_from_rest"].all() and heavy["excluded"].isna().all()
    assert len(usable(trials)) == len(trials), "its trials count: the difference is its own"
    words = self_throttled_words(trials)
    assert words is not None and words.startswith(f"{len(heavy)} trials ran throttled although started from a rest")
    assert trials[trials["arm"] == "base"]["throttled_from_rest"].sum() == 0
    # no retry, so no rest: whose heat it was is not known, and a trial that ran throttled is excluded
    _, once = hot_run(28.6, margin=0.1, max_attempts=1)
    heavy, out = once[once["arm"] == "cand"], once[once["excluded"].notna()]
    assert heavy["excluded"].str.startswith("throttled during the trial").all()
    assert out["excluded"].str.startswith("throttled during the trial").all()
    assert (out["throttle_after_slowdown"] > 0.05).all()
    assert not once["throttled_from_rest"].any() and len(usable(once)) == len(once) - len(out)
