"""Real competitor runtimes on this host, where installed (`orch runtimes install llamacpp
ort-genai`; CI installs them): one interleaved orch run against the numpy reference, token gates,
and ORT-GenAI's and LiteRT-LM's cached, atomic conversions."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pandas as pd
import pytest
from sshd import Sshd
from test_run import invoke, only_run, write_inputs

from orchestrator.config import Fleet, Plan
from orchestrator.models.maker import make_model
from orchestrator.protocol import TrialSpec
from orchestrator.results import load_trials
from orchestrator.results.store import RunDir
from orchestrator.runners import LocalRunner
from orchestrator.runners.cache import RuntimeContext, cache_root
from orchestrator.runtimes import catalog
from orchestrator.runtimes.envs import installed
from orchestrator.runtimes.litert_lm import ADAPTER as LITERT
from orchestrator.runtimes.ort_genai import ADAPTER as ORT

needs_llamacpp = pytest.mark.skipif(installed("llamacpp") is None, reason="llama.cpp not installed")
needs_ort = pytest.mark.skipif(installed("ort-genai") is None, reason="ORT-GenAI not installed")
needs_mlx = pytest.mark.skipif(installed("mlx") is None, reason="MLX not installed")
needs_litert = pytest.mark.skipif(installed("litert-lm") is None, reason="LiteRT-LM not installed")
pytestmark = pytest.mark.runtime


@pytest.fixture(scope="module")
def t1(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_model("llama", "t1", 0, tmp_path_factory.mktemp("m") / "t1").directory


@needs_llamacpp
@needs_ort
def run_arms(fleet: dict[str, object], model: Path, runtimes: dict[str, str], tmp_path: Path,
             order: str = "abba") -> tuple[str, RunDir, pd.DataFrame]:
    """`orch run` of one trial per arm per slot (6 blocks, 1 thread, 16-token prompt, 24 tokens); every
    trial must succeed. (output, run, trials)"""
    plan = Plan.model_validate({
        "name": "competitors", "model": str(model), "blocks": 6, "order": order,
        "arms": [{"name": arm, "runtime": runtime, "threads": 1} for arm, runtime in runtimes.items()],
        "trial": {"prompt_tokens": 16, "decode_tokens": 24, "timeout_s": 300},
        "settle": {"min_gap_s": 0, "flat_window_s": 0, "poll_s": 1, "timeout_s": 60},
        "interference": None,  # token gates and trial counts do not depend on other work on this machine
    })
    f, p = write_inputs(tmp_path, Fleet.model_validate(fleet), plan)
    code, out = invoke("run", "--fleet", str(f), "--plan", str(p), "--results", str(tmp_path / "r"))
    assert code == 0, out
    run = only_run(tmp_path / "r")
    trials = load_trials(run.path)
    assert (trials["status"] == "ok").all() and (trials["decode_tok_s"] > 0).all(), trials[["arm", "failure_message"]]
    return out, run, trials


def test_one_interleaved_run_of_three_runtimes_with_token_gates(t1: Path, tmp_path: Path) -> None:
    here = {"name": "here", "devices": [{"id": "here", "kind": "host", "workdir": str(tmp_path / "w")}]}
    out, run, trials = run_arms(here, t1 / "model-Q8_0.gguf", {"ref": "numpy", "llama": "llamacpp", "ort": "ort-genai"},
                                tmp_path, order="williams")
    assert len(trials) == 18
    versions = dict(zip(trials["arm"], trials["engine_version"], strict=False))
    assert versions["llama"].startswith("llama-cpp-python") and versions["ort"].startswith("onnxruntime-genai")
    assert out.index("Verdicts") < out.index("Token gates"), "the run gates its own tokens"
    gates = pd.read_csv(run.gates_path).set_index("arm")
    assert gates.loc["ref", "decode"] == "bit-exact" and gates.loc["ref", "prefill"] == "bit-exact"
    # Same Q8_0 weights (llama.cpp) or the same class by another quantizer (ORT int8): never a mismatch.
    assert set(gates["decode"]) <= {"bit-exact", "quality-class"}, gates
    assert set(gates["prefill"]) <= {"bit-exact", "quality-class"}, gates
    assert (gates["distinct_sequences"] == 1).all(), "greedy decode is deterministic in every runtime"


@needs_llamacpp
@needs_ort
def test_competitors_on_an_ssh_host(sshd: Sshd, harness: Path, t1: Path, tmp_path: Path) -> None:
    """llama.cpp and ORT-GenAI trials on a host reached over SSH (loopback): the environments are found
    in the host's cache folder (here: this machine's, where they are installed), the drivers are pushed
    over SFTP, ORT's conversion is made there, and the run gates the tokens as for a local host."""
    lab = {"name": "lab", "hosts": [sshd.host(cache=str(cache_root())).model_dump()],
           "devices": [{"id": "there", "kind": "host", "host": "loop", "harness": str(harness),
                        "workdir": str(tmp_path / "w")}]}
    _, run, trials = run_arms(lab, t1 / "model-Q8_0.gguf", {"llama": "llamacpp", "ort": "ort-genai"}, tmp_path)
    assert len(trials) == 24
    assert list((tmp_path / "w" / "runtimes" / "drivers").glob("*_driver-*.py")), "drivers pushed to the host"
    gates = pd.read_csv(run.gates_path)
    assert set(gates["decode"]) <= {"bit-exact", "quality-class"}, gates


@needs_ort
def test_ort_conversion_is_cached_by_content_and_never_half_written(t1: Path, tmp_path: Path) -> None:
    ctx = RuntimeContext(LocalRunner(), str(tmp_path), "here")
    spec = TrialSpec(run_id="r", trial_id="t", engine="ort-genai", model=str(t1 / "model-Q4_0.gguf"),
                     prompt_tokens=4, decode_tokens=4)
    art = asyncio.run(ORT.artifact(ctx, spec))
    folder = Path(art.path)
    assert art.quant_class == "Q4_0" and "-int4-" in folder.name and (folder / "genai_config.json").is_file()
    stamp = (folder / "genai_config.json").stat().st_mtime_ns
    again = asyncio.run(ORT.artifact(ctx, spec))
    assert again.path == art.path and (folder / "genai_config.json").stat().st_mtime_ns == stamp, "not reconverted"
    assert not [p for p in folder.parent.iterdir() if ".tmp-" in p.name], "no half-written conversions left"

    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "config.json").write_text('{"vocab_size": 288}')
    (broken / "model.safetensors").write_bytes(b"not safetensors")
    bad = spec.model_copy(update={"model": str(broken / "model-Q8_0.gguf"), "tuning": {"precision": "int8"}})
    failure = asyncio.run(ORT.run_trial(ctx, bad, 300))
    assert failure.kind == "launch_failed" and "conversion to int8 failed" in failure.message  # type: ignore[union-attr]
    leftovers = [p for p in folder.parent.iterdir() if ".tmp-" in p.name]
    assert not leftovers


@needs_mlx
def test_mlx_cpu_linux_decodes_the_source_folder_like_the_reference(t1: Path, tmp_path: Path) -> None:
    from orchestrator.analysis.tokengate import TIE, gate
    from orchestrator.config import HostDeviceConfig
    from orchestrator.devices.host import HostDevice
    from orchestrator.protocol import TrialResult
    from orchestrator.runtimes.prompt import prompt_ids
    from orchestrator.runtimes.reference import Weights, greedy, score

    device = HostDevice(HostDeviceConfig(id="here", kind="host", workdir=str(tmp_path)), LocalRunner(),
                        launchers=catalog.adapter_for)
    spec = TrialSpec(run_id="r", trial_id="t", engine="mlx", model=str(t1 / "model-F32.gguf"), prompt_tokens=16,
                     decode_tokens=24, seed=4)
    result = asyncio.run(device.run_trial(spec, 300))
    assert isinstance(result, TrialResult), result
    assert "CPU, Linux" in result.engine_version and result.bytes_per_decode_token
    w = Weights(t1 / "model-F32.gguf")
    prompt = prompt_ids(4, 16, w.shape.vocab)
    assert result.trial1 is not None
    g = gate(result.trial1.token_ids, greedy(w, prompt, 24).token_ids, lambda t: score(w, prompt, list(t)),
             TIE["same-weights"])
    assert g.overall in ("bit-exact", "quality-class"), g
    bad = spec.model_copy(update={"prompt_ids": [999] * 16})
    failure = asyncio.run(device.run_trial(bad, 60))
    assert not isinstance(failure, TrialResult) and failure.message.startswith("bad_spec: prompt id 999")


@needs_llamacpp
def test_llamacpp_trial_with_a_cold_page_cache_and_a_missing_model(t1: Path, tmp_path: Path) -> None:
    from orchestrator.config import HostDeviceConfig
    from orchestrator.devices.host import HostDevice
    from orchestrator.protocol import TrialResult

    device = HostDevice(HostDeviceConfig(id="here", kind="host", workdir=str(tmp_path)), LocalRunner(),
                        launchers=catalog.adapter_for)
    spec = TrialSpec(run_id="r", trial_id="t", engine="llamacpp", model=str(t1 / "model-Q4_0.gguf"), prompt_tokens=8,
                     decode_tokens=8, threads=1, clear_caches=["page_cache", "xnnpack"])
    result = asyncio.run(device.run_trial(spec, 300))
    assert isinstance(result, TrialResult), result
    assert result.cold_caches == ["page_cache"], "llama.cpp has no xnnpack cache to clear"
    assert result.bytes_per_decode_token and result.engine_version.startswith("llama-cpp-python")
    missing = asyncio.run(device.run_trial(spec.model_copy(update={"model": str(tmp_path / "model-Q8_0.gguf")}), 60))
    assert not isinstance(missing, TrialResult) and missing.kind == "launch_failed"
    assert "model not found" in missing.message and "orch model make" in (missing.detail or "")


@needs_litert
def test_litert_lm_decodes_like_the_reference_and_caches_its_conversion(t1: Path, tmp_path: Path) -> None:
    from orchestrator.analysis.tokengate import TIE, gate
    from orchestrator.config import HostDeviceConfig
    from orchestrator.devices.host import HostDevice
    from orchestrator.protocol import TrialResult
    from orchestrator.runtimes.prompt import prompt_ids
    from orchestrator.runtimes.reference import Weights, greedy, score

    device = HostDevice(HostDeviceConfig(id="here", kind="host", workdir=str(tmp_path)), LocalRunner(),
                        launchers=catalog.adapter_for)
    spec = TrialSpec(run_id="r", trial_id="t", engine="litert-lm", model=str(t1 / "model-F32.gguf"), prompt_tokens=16,
                     decode_tokens=24, seed=4, threads=1, warm_repetitions=1,
                     clear_caches=["page_cache", "xnnpack_cache"])
    # F32 is the same weights in fp32: bit-exact; dynamic int8 is LiteRT's own quantizer: at worst near-ties.
    for fmt, tie, allowed in (("F32", TIE["same-weights"], {"bit-exact"}),
                              ("Q8_0", TIE["other-quantizer"], {"bit-exact", "quality-class"})):
        model = str(t1 / f"model-{fmt}.gguf")
        result = asyncio.run(device.run_trial(spec.model_copy(update={"model": model}), 600))
        assert isinstance(result, TrialResult), result
        assert result.engine_version.startswith("litert-lm-api") and result.threads == 1
        assert result.cold_caches == ["page_cache", "xnnpack_cache"] and result.bytes_per_decode_token
        w = Weights(model)
        prompt = prompt_ids(4, 16, w.shape.vocab)
        assert result.trial1 is not None and all(g.token_ids == result.trial1.token_ids for g in result.warm)
        verdict = gate(result.trial1.token_ids, greedy(w, prompt, 24).token_ids,
                       lambda t, w=w, prompt=prompt: score(w, prompt, list(t)), tie)
        assert verdict.overall in allowed, (fmt, verdict)

    ctx = RuntimeContext(LocalRunner(), str(tmp_path), "here")
    art = asyncio.run(LITERT.artifact(ctx, spec))
    model_file = Path(art.path) / "model.litertlm"
    assert art.quant_class == "F32" and "-none-" in Path(art.path).name and model_file.is_file()
    stamp = model_file.stat().st_mtime_ns
    again = asyncio.run(LITERT.artifact(ctx, spec))
    assert again.path == art.path and model_file.stat().st_mtime_ns == stamp, "not reconverted"
    assert not [p for p in Path(art.path).parent.iterdir() if ".tmp-" in p.name], "no half-written conversions left"

    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "config.json").write_text((t1 / "config.json").read_text())
    (broken / "model.safetensors").write_bytes(b"not safetensors")
    bad = spec.model_copy(update={"model": str(broken / "model-Q8_0.gguf")})
    failure = asyncio.run(LITERT.run_trial(ctx, bad, 600))
    assert failure.kind == "launch_failed" and "conversion to dynamic_int8 failed" in failure.message  # type: ignore[union-attr]
    assert not [p for p in Path(art.path).parent.iterdir() if ".tmp-" in p.name]
