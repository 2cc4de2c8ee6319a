"""One catalog entry is all a new runtime needs: a runtime registered here (the numpy reference's
adapter under another name, so its trials are real processes with real tokens) shows up in
validate, `runtimes list`, prepare, a host's trials and the token gate, and nowhere before."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from orchestrator.analysis.gating import run_gates, tolerance
from orchestrator.analysis.tokengate import TIE
from orchestrator.cli import app
from orchestrator.config import Fleet, HostDeviceConfig, Plan
from orchestrator.devices.host import HostDevice
from orchestrator.models.maker import make_model
from orchestrator.protocol import TrialResult, TrialSpec
from orchestrator.results.records import Manifest, Settle, TrialRecord
from orchestrator.runners import LocalRunner
from orchestrator.runtimes import catalog
from orchestrator.runtimes.envs import EnvSpec
from orchestrator.runtimes.gater import Gater
from orchestrator.runtimes.numpy_ref import NumpyReference
from orchestrator.runtimes.prepare import prepare_plan


class Throwaway(NumpyReference):
    name = "throwaway"


ENTRY = catalog.Runtime(
    "throwaway", "driver", "a runtime registered by a test", "Throwaway", runs_on=("host",), adapter=Throwaway(),
    own_quantizer=True, env=EnvSpec("throwaway", ("pip",), "import json; print(json.dumps({}))", "seconds"))


@pytest.fixture(scope="module")
def t1(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_model("llama", "t1", 0, tmp_path_factory.mktemp("m") / "t1").directory


def inputs(tmp_path: Path, model: Path) -> tuple[Path, Path]:
    fleet, plan = tmp_path / "fleet.yaml", tmp_path / "plan.yaml"
    fleet.write_text(json.dumps({"name": "lab", "devices": [{"id": "here", "kind": "host"}]}))
    plan.write_text(json.dumps({"name": "p", "model": str(model), "blocks": 6, "arms": [
        {"name": "ref", "runtime": "numpy"}, {"name": "new", "runtime": "throwaway"}],
        "trial": {"prompt_tokens": 8, "decode_tokens": 8}}))
    return fleet, plan


def test_validate_and_list_know_it_once_registered(t1: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ORCH_CACHE", str(tmp_path / "cache"))
    fleet, plan = inputs(tmp_path, t1 / "model-Q8_0.gguf")
    before = CliRunner().invoke(app, ["validate", str(fleet), str(plan)])
    assert before.exit_code == 2 and "unknown runtime 'throwaway'" in before.output, before.output
    monkeypatch.setitem(catalog.CATALOG, "throwaway", ENTRY)
    after = CliRunner().invoke(app, ["validate", str(fleet), str(plan)])
    assert after.exit_code == 0, after.output
    res = CliRunner().invoke(app, ["runtimes", "list", "--json"])
    rows = {r["runtime"]: r for r in json.loads(res.stdout)["runtimes"]}
    assert rows["throwaway"]["what"] == "a runtime registered by a test" and rows["throwaway"]["installed"] is False
    assert rows["throwaway"]["install"] == "orch runtimes install throwaway"
    res = CliRunner().invoke(app, ["runtimes", "install", "nope"])
    assert res.exit_code == 2, res.output
    assert "installable runtimes are llamacpp, ort-genai, mlx, litert-lm, throwaway" in res.output


def test_prepare_a_host_trial_and_the_gate_use_it(t1: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(catalog.CATALOG, "throwaway", ENTRY)
    model = t1 / "model-Q8_0.gguf"
    plan = Plan.model_validate(json.loads(inputs(tmp_path, model)[1].read_text()))
    assert asyncio.run(prepare_plan(plan)) == [("ref", "numpy: nothing to convert", False),
                                                ("new", "throwaway: nothing to convert", False)]

    device = HostDevice(HostDeviceConfig(id="here", kind="host", workdir=str(tmp_path)), LocalRunner(),
                        launchers=catalog.adapter_for)
    spec = TrialSpec(run_id="r", trial_id="t", engine="throwaway", model=str(model), prompt_tokens=8,
                     decode_tokens=8, threads=1)
    result = asyncio.run(device.run_trial(spec, 120))
    assert isinstance(result, TrialResult) and result.engine == "throwaway", result
    assert result.trial1 is not None and len(result.trial1.token_ids) == 8

    assert tolerance("throwaway", "Q8_0", "Q8_0") == TIE["other-quantizer"] != tolerance("numpy", "Q8_0", "Q8_0")
    fleet = Fleet.model_validate({"name": "f", "devices": [{"id": "here", "kind": "host"}]})
    record = TrialRecord.model_construct(device="here", trial_id="t", seq=0, block=0, arm="new", attempts=1,
                                         settle=Settle.model_construct(waited_s=0.0), result=result)
    gates = run_gates(Manifest.model_construct(plan=plan, fleet=fleet), [record], Gater()).set_index("arm")
    assert gates.loc["new", "trials"] == 1 and gates.loc["new", "decode"] == "bit-exact"
    assert gates.loc["new", "tie"] == TIE["other-quantizer"]
