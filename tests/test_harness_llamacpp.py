"""llama.cpp inside the harness (runtime `harness-llamacpp`, the harness's `llamacpp` engine) on this host,
where the harness is built with it (`make llama` links the llamacpp environment's build; CI installs the
environment): one interleaved orch run beside the raw loop, the out-of-process adapter and the numpy
reference, every trial ok, its tokens gated against the reference like the adapter's."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from test_run import invoke, only_run, write_inputs

from orchestrator.config import Fleet, Plan
from orchestrator.devices.host import REPO_HARNESS
from orchestrator.models.maker import make_model
from orchestrator.results import load_trials
from orchestrator.runtimes.envs import installed

pytestmark = [
    pytest.mark.runtime,
    pytest.mark.skipif(installed("llamacpp") is None or not (REPO_HARNESS / ".llama" / "pin.json").is_file(),
                       reason="llama.cpp not installed, or not linked for the harness (make llama)"),
]


@pytest.fixture(scope="module")
def t1(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_model("llama", "t1", 0, tmp_path_factory.mktemp("m") / "t1").directory


def test_in_harness_llamacpp_beside_the_adapter_with_token_gates(t1: Path, tmp_path: Path) -> None:
    arms = {"ref": "numpy", "raw": "rawloop-cpu", "inh": "harness-llamacpp", "oop": "llamacpp"}
    plan = Plan.model_validate({
        "name": "in-harness", "model": str(t1 / "model-Q8_0.gguf"), "blocks": 6, "order": "williams",
        "arms": [{"name": arm, "runtime": runtime, "threads": 1} for arm, runtime in arms.items()],
        "trial": {"prompt_tokens": 16, "decode_tokens": 24, "chunk_width": 4, "timeout_s": 300},
        "settle": {"min_gap_s": 0, "flat_window_s": 0, "poll_s": 1, "timeout_s": 60},
        "interference": None,  # token gates and trial counts do not depend on other work on this machine
    })
    fleet = Fleet.model_validate({"name": "here", "devices": [{"id": "here", "kind": "host",
                                                                "workdir": str(tmp_path / "w")}]})
    f, p = write_inputs(tmp_path, fleet, plan)
    code, out = invoke("run", "--fleet", str(f), "--plan", str(p), "--results", str(tmp_path / "r"))
    assert code == 0, out
    run = only_run(tmp_path / "r")
    trials = load_trials(run.path)
    assert (trials["status"] == "ok").all(), trials[["arm", "failure_message"]]
    assert len(trials) == 24 and (trials["decode_tok_s"] > 0).all()
    inh = trials[trials["arm"] == "inh"]
    # The harness's engine: llama.cpp's own build line, and weight bytes counted by the raw loop's rule.
    assert inh["engine_version"].str.startswith("llamacpp 2 (llama.cpp ").all(), inh["engine_version"]
    raw = trials[trials["arm"] == "raw"]
    assert set(inh["bytes_per_decode_token"]) == set(raw["bytes_per_decode_token"]), "one counting rule"
    gates = pd.read_csv(run.gates_path).set_index("arm")
    # The same Q8_0 file through the same library: never a mismatch, and the same class as the adapter.
    assert gates.loc["inh", "decode"] in {"bit-exact", "quality-class"}, gates
    assert gates.loc["inh", "prefill"] in {"bit-exact", "quality-class"}, gates
    assert (gates["distinct_sequences"] == 1).all(), "greedy decode is deterministic in every runtime"
