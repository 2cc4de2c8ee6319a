"""The simulated phone: its physics, its noise and its faults match the ground truth it was given."""

from __future__ import annotations

import asyncio
import math
import statistics

import pytest
from conftest import fleet_of, sim_device

from orchestrator.clock import VirtualClock
from orchestrator.config import SimDeviceConfig
from orchestrator.devices.contract import check_device_contract, contract_spec
from orchestrator.devices.sim import SimDevice, Thermals
from orchestrator.protocol import TrialResult
from orchestrator.protocol.device import DeviceUnavailable, TrialFailure


def make(**over: object) -> tuple[SimDevice, VirtualClock]:
    cfg = fleet_of(sim_device(**over)).devices[0]
    assert isinstance(cfg, SimDeviceConfig)
    clock = VirtualClock(epoch=0.0)
    return SimDevice(cfg, clock), clock


def rates(device: SimDevice, n: int, engine: str = "rawloop-metal", gap: float = 600.0) -> list[float]:
    async def go() -> list[float]:
        out = []
        for i in range(n):
            r = await device.run_trial(contract_spec(engine, "m", f"t-{i}", decode_tokens=64), 300)
            assert isinstance(r, TrialResult)
            out.append(r.decode_tok_s() or 0.0)
            await device.clock.sleep(gap)
        return out

    return asyncio.run(go())


def test_contract() -> None:
    device, _ = make()
    asyncio.run(check_device_contract(device, engine="rawloop-metal", model="m"))


def test_same_seed_same_numbers_other_seed_other_numbers() -> None:
    a, b, c = make()[0], make()[0], make(seed=99)[0]
    assert rates(a, 5) == rates(b, 5)
    assert rates(a, 5) != rates(c, 5)


def test_median_recovers_ground_truth_and_sigma() -> None:
    noise = {"sigma": 0.06, "ar1": 0.0, "drift_per_hour": 0.0, "outlier_rate": 0.0}
    device, _ = make(noise=noise)
    got = rates(device, 300)
    assert statistics.median(got) == pytest.approx(54.0, rel=0.015)
    logs = [math.log(x) for x in got]
    assert statistics.stdev(logs) == pytest.approx(0.06, rel=0.15)


def test_bandwidth_truth_drift_builds_and_tuning() -> None:
    runtimes = {
        "rawloop-metal": {
            "bytes_per_token": 783e6, "efficiency": 0.73, "builds": {"slow": 0.9},
            "tuning": {"tile_rows": {16: 1.0, 32: 1.1}},
        }
    }
    quiet = {"sigma": 0.0, "ar1": 0.0, "drift_per_hour": 0.0, "outlier_rate": 0.0, "token_jitter": 0.0}
    device, _ = make(runtimes=runtimes, noise=quiet)

    async def rate(**over: object) -> float:
        r = await device.run_trial(contract_spec("rawloop-metal", "m", **over), 300)
        assert isinstance(r, TrialResult)
        await device.clock.sleep(3600)
        return r.decode_tok_s() or 0.0

    truth = 0.73 * 60e9 / 783e6
    assert asyncio.run(rate()) == pytest.approx(truth, rel=1e-3)
    assert asyncio.run(rate(build="slow")) == pytest.approx(truth * 0.9, rel=1e-3)
    assert asyncio.run(rate(tuning={"tile_rows": 32})) == pytest.approx(truth * 1.1, rel=1e-3)
    drifting, clock = make(runtimes=runtimes, noise=quiet | {"drift_per_hour": -0.05})
    clock.advance(2 * 3600)
    r = asyncio.run(drifting.run_trial(contract_spec("rawloop-metal", "m"), 300))
    assert isinstance(r, TrialResult) and r.decode_tok_s() == pytest.approx(truth * 0.9, rel=2e-3)
    assert r.effective_gb_s() == pytest.approx(0.73 * 60 * 0.9, rel=2e-3)


def test_thermal_model_heats_cools_and_battery_lags() -> None:
    cfg = fleet_of(sim_device()).devices[0]
    assert isinstance(cfg, SimDeviceConfig)
    th = Thermals(cfg)
    idle = th.idle
    th.evolve(120, heat_c_per_s=0.2)
    assert th.soc > idle + 10 and th.battery < th.soc, "the battery lags the SoC"
    assert th.state() in ("fair", "serious", "critical") and th.throttle() <= 1.0
    hot = th.soc
    th.evolve(cfg.thermal.cool_tau_s)
    assert th.soc - idle == pytest.approx((hot - idle) / math.e, rel=1e-6), "exponential cooling to idle"
    th.evolve(20 * cfg.thermal.cool_tau_s)
    assert th.soc == pytest.approx(idle, abs=1e-3) and th.battery == pytest.approx(idle, abs=1e-2)
    assert th.state() == "nominal" and th.throttle() == 1.0


def test_sustained_load_throttles_throughput() -> None:
    hot = {"heat_c_per_s": 0.6}
    device, _ = make(thermal=hot, noise={"sigma": 0.0, "outlier_rate": 0.0, "drift_per_hour": 0.0})
    back_to_back = rates(device, 40, gap=0.0)
    assert back_to_back[-1] < 0.9 * back_to_back[0]
    assert asyncio.run(device.telemetry()).thermal_state in ("serious", "critical")


@pytest.mark.parametrize("fault,kind", [("disconnect", "disconnected"), ("crash", "crashed"), ("hang", "hung"),
                                        ("garbage", "bad_output")])
def test_faults_come_back_typed_at_their_rate(fault: str, kind: str) -> None:
    device, _ = make(faults={fault: 0.2})

    async def go() -> list[str]:
        kinds = []
        for i in range(400):
            r = await device.run_trial(contract_spec("rawloop-metal", "m", f"t-{i}"), 60)
            kinds.append(r.kind if isinstance(r, TrialFailure) else "ok")
        return kinds

    kinds = asyncio.run(go())
    assert set(kinds) == {"ok", kind}
    assert kinds.count(kind) / len(kinds) == pytest.approx(0.2, abs=0.05)


def test_lost_device_is_unavailable() -> None:
    device, clock = make(faults={"lost_after_s": 100})
    assert isinstance(asyncio.run(device.run_trial(contract_spec("rawloop-metal", "m"), 60)), TrialResult)
    clock.advance(200)
    with pytest.raises(DeviceUnavailable):
        asyncio.run(device.telemetry())
    r = asyncio.run(device.run_trial(contract_spec("rawloop-metal", "m"), 60))
    assert isinstance(r, TrialFailure) and r.kind == "disconnected"
