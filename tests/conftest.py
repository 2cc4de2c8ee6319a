from __future__ import annotations

import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest

from orchestrator.config import Fleet, Plan, load_fleet, load_plan

ROOT = Path(__file__).resolve().parents[1]
SIM_LAB = ROOT / "configs" / "sim-lab.yaml"
SIM_AB = ROOT / "configs" / "plans" / "sim-ab.yaml"
AA = ROOT / "configs" / "plans" / "aa-calibration.yaml"
HARNESS = ROOT / "ios_harness" / ".build" / "release" / "harness"
MODEL = str(ROOT / "ios_harness" / "Tests" / "Fixtures" / "models" / "llama-t1-s0" / "model-Q8_0.gguf")
ORCH = str(Path(sys.executable).with_name("orch"))  # the console script beside the running interpreter


@pytest.fixture(scope="session")
def harness() -> Path:
    """The harness `make test` built before pytest (built here when pytest runs alone)."""
    if not HARNESS.exists():
        import asyncio

        from orchestrator.config import HostDeviceConfig
        from orchestrator.devices.host import HostDevice
        from orchestrator.protocol.device import Artifacts
        from orchestrator.runners import LocalRunner

        asyncio.run(HostDevice(HostDeviceConfig(id="b", kind="host"), LocalRunner()).prepare(Artifacts()))
    return HARNESS


@pytest.fixture
def sim_fleet() -> Fleet:
    return load_fleet(SIM_LAB)


@pytest.fixture
def sim_plan() -> Plan:
    return load_plan(SIM_AB)


@pytest.fixture
def write(tmp_path: Path) -> Callable[[str, str], Path]:
    """Write a dedented YAML file into tmp_path and return its path."""

    def _write(name: str, text: str) -> Path:
        path = tmp_path / name
        path.write_text(textwrap.dedent(text).lstrip())
        return path

    return _write




def sim_device(device_id: str = "phone", **over: object) -> dict[str, object]:
    base: dict[str, object] = {
        "id": device_id, "kind": "sim", "chip_class": "A19 Pro", "seed": 3, "bandwidth_gb_s": 60.0,
        "runtimes": {"rawloop-metal": {"decode_tok_s": 54.0}, "coreai": {"decode_tok_s": 50.0}},
    }
    base.update(over)
    return base


def fleet_of(*devices: dict[str, object]) -> Fleet:
    return Fleet.model_validate({"name": "t", "devices": list(devices)})


def plan_with(**over: object) -> Plan:
    """A small plan. Its decision is the fixed design on medians (every planned trial runs) unless `decision`
    says otherwise: the tests of run mechanics count trials; tests/test_adaptive*.py cover the default rule."""
    base: dict[str, object] = {
        "name": "t", "model": "m", "blocks": 6, "decision": {"adaptive": None, "estimator": "median"},
        "arms": [{"name": "base", "runtime": "coreai"}, {"name": "cand", "runtime": "rawloop-metal"}],
        "trial": {"prompt_tokens": 16, "decode_tokens": 32},
    }
    base.update(over)
    return Plan.model_validate(base)


@pytest.fixture(scope="session")
def sshd(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    from sshd import start_sshd

    server = start_sshd(tmp_path_factory.mktemp("sshd"))
    yield server
    server.stop()
