"""The numpy reference decoder: the same prompt and tokens as the harness, teacher-forced scores
that agree with its own greedy choices, and the `numpy` runtime through a host device."""

from __future__ import annotations

import asyncio
import json
import subprocess
from pathlib import Path

import pytest

from orchestrator.analysis.tokengate import margins
from orchestrator.config import HostDeviceConfig
from orchestrator.devices.host import HostDevice
from orchestrator.models.maker import make_model
from orchestrator.protocol import TrialResult, TrialSpec
from orchestrator.runners import LocalRunner
from orchestrator.runtimes import catalog
from orchestrator.runtimes.prompt import prompt_ids, spec_prompt
from orchestrator.runtimes.reference import Weights, greedy, score


@pytest.fixture(scope="module")
def t1(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_model("llama", "t1", 0, tmp_path_factory.mktemp("m") / "t1").directory


def test_prompt_maker_is_splitmix64_like_the_harness() -> None:
    # SplitMix64 from state 0: the stream's well-known first output, 0xE220A8397B1DCDAF.
    assert prompt_ids(0, 1, 1 << 62) == [0xE220A8397B1DCDAF % (1 << 62)]
    ids = prompt_ids(7, 50, 100)
    assert ids == prompt_ids(7, 50, 100) != prompt_ids(8, 50, 100) and all(0 <= i < 100 for i in ids)
    assert prompt_ids(-1, 3, 288) == prompt_ids((1 << 64) - 1, 3, 288), "negative seeds as Int64 bit patterns"
    spec = TrialSpec(run_id="r", trial_id="t", engine="numpy", model="m", prompt_tokens=2, decode_tokens=2,
                     prompt_ids=[5, 6])
    assert spec_prompt(spec, 10) == [5, 6]


def test_reference_matches_the_harness_raw_loop_on_f32(t1: Path, harness: Path, tmp_path: Path) -> None:
    spec = {"run_id": "r", "trial_id": "t", "engine": "rawloop-cpu", "model": str(t1 / "model-F32.gguf"),
            "prompt_tokens": 24, "decode_tokens": 40, "seed": 5}
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    subprocess.run([str(harness), "run", "--spec", str(tmp_path / "spec.json"), "--out", str(tmp_path / "h.json")],
                   check=True, capture_output=True)
    theirs = json.loads((tmp_path / "h.json").read_text())["trial1"]["token_ids"]
    w = Weights(t1 / "model-F32.gguf")
    ours = greedy(w, prompt_ids(5, 24, w.shape.vocab), 40).token_ids
    assert ours == theirs


def test_teacher_forced_scores_agree_with_greedy_and_chunks(t1: Path) -> None:
    w = Weights(t1 / "model-Q8_0.gguf")
    prompt = prompt_ids(3, 20, w.shape.vocab)
    tokens = greedy(w, prompt, 30).token_ids
    assert (margins(score(w, prompt, tokens), tokens) == 0).all()
    assert greedy(w, prompt, 30, chunk_width=20).token_ids[0] == tokens[0]
    assert w.bytes_per_token() > 0
    with pytest.raises(ValueError, match="context"):
        greedy(w, prompt_ids(3, 120, w.shape.vocab), 20)


def test_numpy_runtime_through_a_host_device(t1: Path, tmp_path: Path) -> None:
    device = HostDevice(HostDeviceConfig(id="here", kind="host", workdir=str(tmp_path)), LocalRunner(),
                        launchers=catalog.adapter_for)
    spec = TrialSpec(run_id="r", trial_id="t", engine="numpy", model=str(t1 / "model-Q8_0.gguf"), prompt_tokens=16,
                     decode_tokens=16, threads=1, warm_repetitions=1)
    result = asyncio.run(device.run_trial(spec, 120))
    assert isinstance(result, TrialResult), result
    assert result.engine_version.startswith("numpy-ref") and len(result.warm) == 1
    assert result.trial1 is not None and result.trial1.token_ids == result.warm[0].token_ids
    missing = asyncio.run(device.run_trial(spec.model_copy(update={"model": str(tmp_path / "no.gguf")}), 60))
    assert not isinstance(missing, TrialResult) and missing.kind == "launch_failed" and "no.gguf" in missing.message
