"""Driver output parsers on what the runtimes really printed (tests/fixtures/runtimes, made by
capture.py there): successes, and each failure mode typed with the tail of the output."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from orchestrator.protocol import TrialResult, TrialSpec
from orchestrator.protocol.device import TrialFailure
from orchestrator.runners import CommandResult
from orchestrator.runtimes.process import Artifact, DriverOutput, parse_output, to_result

FIXTURES = Path(__file__).parent / "fixtures" / "runtimes"
CASES = sorted(FIXTURES.glob("*/*.json"))


def load(path: Path) -> tuple[dict[str, object], CommandResult]:
    d = json.loads(path.read_text())
    return d, CommandResult(d["returncode"], d["stdout"], d["stderr"], d["timed_out"])


def fixture(runtime: str, case: str) -> tuple[dict[str, object], CommandResult]:
    return load(FIXTURES / runtime / f"{case}.json")


def test_every_adapter_with_a_driver_has_fixtures_for_success_and_failures() -> None:
    for runtime in ("llamacpp", "ort-genai", "mlx", "litert-lm"):
        cases = {p.stem for p in (FIXTURES / runtime).glob("*.json")}
        assert {"ok", "ok_warm", "missing_model", "truncated_model", "prompt_out_of_range", "killed"} <= cases


@pytest.mark.parametrize("path", [p for p in CASES if p.stem.startswith("ok") or p.stem == "repack_on"],
                         ids=lambda p: f"{p.parent.name}-{p.stem}")
def test_successes_parse_into_timed_generations(path: Path) -> None:
    d, res = load(path)
    out = parse_output(res)
    assert isinstance(out, DriverOutput), out
    job = d["job"]
    assert isinstance(job, dict)
    assert len(out.generations) == 1 + int(job["warm"])
    assert out.version.split()[0] in ("llama-cpp-python", "onnxruntime-genai", "mlx", "litert-lm-api")
    for g in out.generations:
        assert len(g.token_ids) == job["decode_tokens"]
        assert g.decode_tok_s() > 0 and g.prefill_ns > 0 and g.ttft_ns == g.prefill_ns
    # Same fresh process, same prompt, greedy: warm repetitions give the same tokens.
    assert all(g.token_ids == out.generations[0].token_ids for g in out.generations)


@pytest.mark.parametrize("runtime", ["llamacpp", "ort-genai", "mlx", "litert-lm"])
def test_a_success_becomes_a_trial_result_with_the_spec_ids(runtime: str) -> None:
    _d, res = fixture(runtime, "ok")
    out = parse_output(res)
    assert isinstance(out, DriverOutput)
    spec = TrialSpec(run_id="r", trial_id="t1", engine=runtime, model="m.gguf", prompt_tokens=16, decode_tokens=16)
    result = to_result(spec, out, Artifact("m.gguf", 1_000_000, "Q8_0"), 16)
    assert isinstance(result, TrialResult)
    assert result.engine_version == out.version and result.threads == (None if runtime == "mlx" else 2)
    assert result.effective_gb_s() == pytest.approx(1e6 * result.decode_tok_s() / 1e9)  # type: ignore[operator]
    wrong = to_result(spec.model_copy(update={"decode_tokens": 17}), out, Artifact("m", None, "Q8_0"), 16)
    assert isinstance(wrong, TrialFailure) and wrong.kind == "bad_output"


@pytest.mark.parametrize("runtime", ["llamacpp", "ort-genai", "mlx", "litert-lm"])
def test_a_missing_model_is_a_launch_failure(runtime: str) -> None:
    _, res = fixture(runtime, "missing_model")
    out = parse_output(res)
    assert isinstance(out, TrialFailure) and out.kind == "launch_failed"
    assert out.message.startswith("model_not_found:")


def test_a_truncated_model_says_what_the_runtime_said() -> None:
    _, res = fixture("llamacpp", "truncated_model")
    out = parse_output(res)
    assert isinstance(out, TrialFailure) and out.kind == "harness_error" and "bad_model" in out.message
    assert out.detail is not None and "failed to read key-value pairs" in out.detail
    _, res = fixture("ort-genai", "truncated_model")
    out = parse_output(res)
    assert isinstance(out, TrialFailure) and out.kind == "crashed"
    assert out.message.startswith("runtime exit 1: RuntimeError: Deserialize tensor")
    _, res = fixture("mlx", "truncated_model")
    out = parse_output(res)
    assert isinstance(out, TrialFailure) and out.kind == "crashed" and "[load_safetensors]" in out.message
    _, res = fixture("litert-lm", "truncated_model")  # the engine refuses it; the C++ log names the missing section
    out = parse_output(res)
    assert isinstance(out, TrialFailure) and out.kind == "harness_error" and out.message.startswith("bad_model:")
    assert out.detail is not None and "tf_lite_prefill_decode not found" in out.detail


def test_an_out_of_range_prompt_is_typed() -> None:
    _, res = fixture("llamacpp", "prompt_out_of_range")
    out = parse_output(res)
    assert isinstance(out, TrialFailure) and out.kind == "harness_error" and out.message.startswith("bad_spec:")
    _, res = fixture("ort-genai", "prompt_out_of_range")
    out = parse_output(res)
    assert isinstance(out, TrialFailure) and out.kind == "crashed" and "out of data bounds" in out.message
    _, res = fixture("mlx", "prompt_out_of_range")  # MLX's gather does not check: a segfault
    out = parse_output(res)
    assert isinstance(out, TrialFailure) and out.kind == "crashed" and "signal 11" in out.message
    # LiteRT-LM would read an unknown word as <unk>: the driver checks the engine's own tokenization.
    _, res = fixture("litert-lm", "prompt_out_of_range")
    out = parse_output(res)
    assert isinstance(out, TrialFailure) and out.kind == "harness_error" and out.message.startswith("bad_spec:")
    assert "prompt id 999" in out.message


def test_litert_says_which_cache_was_cold_and_times_every_token_apart() -> None:
    ok = parse_output(fixture("litert-lm", "ok")[1])  # captured with clear_caches: [xnnpack_cache]
    warm = parse_output(fixture("litert-lm", "ok_warm")[1])
    assert isinstance(ok, DriverOutput) and isinstance(warm, DriverOutput)
    assert ok.info["xnnpack_cache"] == "cold" and warm.info["xnnpack_cache"] == "warm"
    for g in [*ok.generations, *warm.generations]:  # the stream's one-token lag undone: no two tokens share a stamp
        assert all(b > a for a, b in zip(g.token_times_ns, g.token_times_ns[1:], strict=False))


@pytest.mark.parametrize("runtime", ["llamacpp", "ort-genai", "mlx", "litert-lm"])
def test_a_crash_by_signal_is_crashed_with_the_tail(runtime: str) -> None:
    _, res = fixture(runtime, "killed")
    out = parse_output(res)
    assert isinstance(out, TrialFailure) and out.kind == "crashed"
    assert out.message.startswith("runtime killed by signal 11")


def test_system_info_naming_amx_is_not_taken_for_an_amx_fault() -> None:
    _, res = fixture("llamacpp", "killed")
    faked = CommandResult(-11, res.stdout, res.stderr.replace("AVX512 = 1", "AMX_INT8 = 1 | AVX512 = 1"))
    out = parse_output(faked)
    assert isinstance(out, TrialFailure) and "AMX" not in out.message
    fault = CommandResult(-6, "", faked.stderr + "\n/src/ggml/src/ggml-cpu/amx/mmq.cpp:1 GGML_ASSERT failed\n")
    out = parse_output(fault)
    assert isinstance(out, TrialFailure) and "AMX kernel fault" in out.message and "repack" in out.message


def test_hangs_missing_lines_and_garbage() -> None:
    _, ok = fixture("llamacpp", "ok")
    hung = parse_output(CommandResult(None, ok.stdout[:50], "", timed_out=True), 30)
    assert isinstance(hung, TrialFailure) and hung.kind == "hung" and "30 s" in hung.message
    none = parse_output(CommandResult(0, "loaded\n", ""))
    assert isinstance(none, TrialFailure) and none.kind == "bad_output" and "no ORCH_RUNTIME" in none.message
    cut = parse_output(CommandResult(0, ok.stdout.strip()[:-40] + "\n", ""))
    assert isinstance(cut, TrialFailure) and cut.kind == "bad_output" and cut.detail
    empty = parse_output(CommandResult(0, 'ORCH_RUNTIME {"version": "x", "generations": []}\n', ""))
    assert isinstance(empty, TrialFailure) and empty.kind == "bad_output"
    gone = parse_output(CommandResult(127, "", "python: command not found"))
    assert isinstance(gone, TrialFailure) and gone.kind == "launch_failed"
