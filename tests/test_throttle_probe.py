"""Throttling the OS does not report: the simulator's hidden throttle and the settle gate's throttle probe."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from conftest import fleet_of, plan_with, sim_device

from orchestrator import core
from orchestrator.clock import VirtualClock
from orchestrator.config import SettlePolicy
from orchestrator.config.sim import SimDeviceConfig
from orchestrator.devices import FakeDevice, open_device
from orchestrator.devices.sim import SimDevice
from orchestrator.protocol.device import Telemetry, TrialFailure
from orchestrator.results import MemoryJournal
from orchestrator.results.records import TrialRecord
from orchestrator.results.trials import trial_rows, usable
from orchestrator.schedule import SessionState, SettleGate, run_sessions


def test_the_sim_throttles_below_fair_while_its_os_says_nominal() -> None:
    cfg = SimDeviceConfig.model_validate(sim_device(thermal={"hidden_throttle_c": 32.0, "hidden_throttle": 0.1}))
    device = SimDevice(cfg, VirtualClock())
    cool = asyncio.run(device.throttle_probe())
    device.thermals.soc = 33.0  # above the hidden threshold, below fair (36 C)
    hot = asyncio.run(device.throttle_probe())
    assert asyncio.run(device.telemetry()).thermal_state == "nominal"
    assert hot / cool == pytest.approx(0.9, abs=0.04)
    with pytest.raises(ValueError, match="below fair_c"):
        SimDeviceConfig.model_validate(sim_device(thermal={"hidden_throttle_c": 36.0}))


class Probed(FakeDevice):
    """A cool, nominal device whose throttle probe reads from a script (then 1.0)."""

    def __init__(self, rates: list[float | None]):
        super().__init__("p", lambda spec: TrialFailure(kind="crashed", message="unused"),
                         telemetry=Telemetry(t=0.0, thermal_state="nominal", battery_c=30.0))
        self.rates = list(rates)

    async def throttle_probe(self) -> float | None:
        return self.rates.pop(0) if self.rates else 1.0


def gate_with(**probe: object) -> tuple[SettleGate, VirtualClock, list[str]]:
    clock, said = VirtualClock(), []
    policy = SettlePolicy(min_gap_s=0, flat_window_s=0, throttle_probe={"wait_s": 30, **probe})  # type: ignore[arg-type]
    return SettleGate(policy, clock, said.append), clock, said


def test_a_slow_probe_is_waited_out_and_probed_again() -> None:
    gate, clock, said = gate_with(max_slowdown=0.05)
    device = Probed([1.0, 0.97, 0.85, 0.9, 0.99])
    first = asyncio.run(gate.wait(device))
    assert first.throttle is not None and first.throttle.baseline == 1.0 and not first.throttle.slow
    second = asyncio.run(gate.wait(device))
    assert second.throttle is not None and not second.throttle.slow and second.throttle.slowdown == pytest.approx(0.03)
    third = asyncio.run(gate.wait(device))
    check = third.throttle
    assert check is not None and not check.slow and check.probes == 3 and check.waited_s == 60
    assert third.waited_s == 60 and clock.now() == 60
    assert len(said) == 2 and said[0].startswith("throttle probe 15% slower than the session's baseline")


def test_the_baseline_is_the_sessions_fastest_probe() -> None:
    gate, _, _ = gate_with()
    device = Probed([0.8, 1.0, 0.8])  # started throttled: once it has run faster, 0.8 is slow
    asyncio.run(gate.wait(device))
    asyncio.run(gate.wait(device))
    assert gate.probe_baseline == 1.0


def test_a_probe_still_slow_after_max_wait_lets_the_trial_run_marked_slow() -> None:
    gate, clock, _ = gate_with(max_wait_s=100)
    device = Probed([1.0] + [0.5] * 10)
    asyncio.run(gate.wait(device))
    s = asyncio.run(gate.wait(device))
    assert s.settled and s.throttle is not None and s.throttle.slow and s.throttle.probes == 4
    assert s.throttle.waited_s == 90 and clock.now() == 90


def test_no_probe_without_the_policy_or_on_a_device_without_one() -> None:
    clock = VirtualClock()
    s = asyncio.run(SettleGate(SettlePolicy(min_gap_s=0, flat_window_s=0), clock).wait(Probed([0.5])))
    assert s.throttle is None
    gate, _, _ = gate_with()
    assert asyncio.run(gate.wait(FakeDevice("f", lambda spec: TrialFailure(kind="crashed", message="x")))).throttle \
        is None


def test_a_run_on_a_hidden_throttler_records_every_probe_and_excludes_slow_trials() -> None:
    hot = sim_device("hot", thermal={"hidden_throttle_c": 30.0, "hidden_throttle": 0.1, "heat_c_per_s": 0.2})
    fleet = fleet_of(hot)
    plan = plan_with(probe=False, settle={"min_gap_s": 0, "flat_window_s": 0, "timeout_s": 30, "battery_margin_c": 50,
                             "throttle_probe": {"max_slowdown": 0.05, "wait_s": 5, "max_wait_s": 10,
                                                "after": False}})
    manifest = core.new_manifest(fleet, plan, __file__, __file__)  # type: ignore[arg-type]
    journal = MemoryJournal()
    asyncio.run(run_sessions(manifest, journal, lambda d: open_device(fleet, d),
                             {s.device: SessionState() for s in manifest.sessions}))
    trials = [r for r in journal.records if isinstance(r, TrialRecord)]
    assert trials and all(t.settle.throttle is not None for t in trials), "every trial records its probe"
    slow = [t for t in trials if t.settle.throttle and t.settle.throttle.slow]
    assert slow, "a gate that lets it launch warm: some probes stay slow past max_wait_s"
    assert all(t.excluded is not None and t.excluded.startswith("throttled") for t in slow)
    assert all(t.settle.before is not None and t.settle.before.thermal_state == "nominal" for t in slow), \
        "the OS said nominal all along"
    rows = trial_rows(manifest, journal.records)  # type: ignore[arg-type]
    assert len(usable(rows)) == len(rows) - len(slow)
    assert rows["throttle_slowdown"].notna().all()


def test_bad_trust_settings_are_located_errors(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from orchestrator.cli import app

    plan = tmp_path / "plan.yaml"
    plan.write_text("name: p\nmodel: m\narms: [{name: a, runtime: x}, {name: b, runtime: y}]\n"
                    "settle:\n  throttle_probe: {max_slowdown: 1.5}\ninterference: {max_other_cpu_share: 0}\n")
    result = CliRunner().invoke(app, ["validate", str(plan)])
    assert result.exit_code == 2
    assert f"{plan}:5: settle.throttle_probe.max_slowdown: Input should be less than 1" in result.output
    assert f"{plan}:6: interference.max_other_cpu_share: Input should be greater than 0" in result.output
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text("name: f\ndevices:\n  - {id: s, kind: sim, chip_class: c, bandwidth_gb_s: 1,\n"
                     "     runtimes: {x: {decode_tok_s: 1}}, thermal: {hidden_throttle_c: 40}}\n")
    result = CliRunner().invoke(app, ["validate", str(fleet)])
    assert result.exit_code == 2 and f"{fleet}:4: devices[0].thermal" in result.output
    assert "hidden_throttle_c must be below fair_c" in result.output
