"""Which reference an arm is gated against, with which near-tie tolerance, and the per-arm table
of a run (simulated devices not gated; a missing reference said, not guessed)."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.analysis.gating import reference_model, run_gates, tolerance
from orchestrator.analysis.tokengate import TIE
from orchestrator.config import Fleet, Plan
from orchestrator.config.plan import Arm
from orchestrator.models.maker import make_model
from orchestrator.protocol import Generation, TrialResult
from orchestrator.protocol.device import TrialFailure
from orchestrator.results.records import Manifest, Settle, TrialRecord
from orchestrator.runtimes.gater import Gater
from orchestrator.runtimes.prompt import prompt_ids
from orchestrator.runtimes.reference import Weights, greedy


@pytest.fixture(scope="module")
def t1(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_model("llama", "t1", 0, tmp_path_factory.mktemp("m") / "t1").directory


def test_reference_follows_the_arms_class(t1: Path) -> None:
    q8 = str(t1 / "model-Q8_0.gguf")
    assert reference_model(Arm(name="a", runtime="llamacpp"), q8) == (q8, "Q8_0")
    assert reference_model(Arm(name="a", runtime="llamacpp", engine={"gguf": "Q4_0"}), q8) == (
        str(t1 / "model-Q4_0.gguf"), "Q4_0")
    assert reference_model(Arm(name="a", runtime="ort-genai", engine={"precision": "int4"}), q8)[1] == "Q4_0"
    litert_int4 = Arm(name="a", runtime="litert-lm", engine={"quantize": "dynamic_int4_block32"})
    assert reference_model(litert_int4, q8)[1] == "Q4_0", "each converting runtime's own option"
    assert reference_model(Arm(name="a", runtime="litert-lm", engine={"precision": "int4"}), q8)[1] == "Q8_0"
    assert reference_model(Arm(name="a", runtime="llamacpp", engine={"gguf": "Q2_K"}), q8) == (q8, "Q8_0")


def test_tolerance_by_how_far_the_arithmetic_is() -> None:
    assert tolerance("numpy", "Q8_0", "Q8_0") == TIE["same-weights"]
    assert tolerance("llamacpp", "F32", "F32") == TIE["same-weights"]
    assert tolerance("llamacpp", "Q8_0", "Q8_0") == TIE["same-class"]
    assert tolerance("ort-genai", "Q8_0", "Q8_0") == TIE["other-quantizer"]
    assert tolerance("llamacpp", "Q4_0", "Q8_0") == TIE["other-quantizer"]


def _record(trial: str, arm: str, tokens: list[int], device: str = "here") -> TrialRecord:
    gen = Generation(prefill_ns=1, ttft_ns=1, token_ids=tokens, token_times_ns=list(range(1, len(tokens) + 1)))
    result = TrialResult(run_id="r", trial_id=trial, status="ok", engine=arm, engine_version="v", harness_build="b",
                         model="m", prompt_tokens=8, chunk_width=1, trial1=gen)
    return TrialRecord.model_construct(device=device, trial_id=trial, seq=0, block=0, arm=arm, attempts=1,
                                       settle=Settle.model_construct(waited_s=0.0), result=result)


def test_run_gates_per_arm(t1: Path) -> None:
    model = str(t1 / "model-Q8_0.gguf")
    plan = Plan.model_validate({"name": "p", "model": model, "blocks": 6, "order": "williams",
                                "arms": [{"name": "ref", "runtime": "numpy"}, {"name": "bad", "runtime": "llamacpp"},
                                         {"name": "phone", "runtime": "coreai"}],
                                "trial": {"prompt_tokens": 8, "decode_tokens": 12}})
    fleet = Fleet.model_validate({"name": "f", "devices": [
        {"id": "here", "kind": "host"},
        {"id": "sim", "kind": "sim", "chip_class": "A19 Pro", "seed": 1, "bandwidth_gb_s": 60.0,
         "runtimes": {"coreai": {"decode_tok_s": 50.0}}}]})
    manifest = Manifest.model_construct(plan=plan, fleet=fleet)
    w = Weights(model)
    ref = greedy(w, prompt_ids(0, 8, w.shape.vocab), 12).token_ids
    wrong = [(t + 97) % w.shape.vocab for t in ref]
    records = [_record("t1", "ref", ref), _record("t2", "ref", ref), _record("t3", "bad", wrong),
               _record("t4", "phone", ref, device="sim")]
    gates = run_gates(manifest, [*records], Gater()).set_index("arm")
    assert set(gates.index) == {"ref", "bad"}, "simulated devices produce no real tokens"
    assert gates.loc["ref", "trials"] == 2 and gates.loc["ref", "distinct_sequences"] == 1
    assert (gates.loc["ref", "prefill"], gates.loc["ref", "decode"]) == ("bit-exact", "bit-exact")
    assert gates.loc["bad", "prefill"] == "mismatch" and gates.loc["bad", "first_divergence"] == 0

    gone = Plan.model_validate({**plan.model_dump(), "model": str(t1 / "missing.gguf")})
    table = run_gates(Manifest.model_construct(plan=gone, fleet=fleet), [records[0]], Gater())
    assert table.loc[0, "error"].startswith("no reference model")
    assert run_gates(manifest, [TrialRecord.model_construct(result=None, failure=TrialFailure(
        kind="crashed", message="x"), device="here", arm="ref")], Gater()).empty
