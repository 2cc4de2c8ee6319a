"""The Swift harness CLI end to end: real processes, real GGUF files, results parsed by pydantic.

Needs a built harness (``make test`` builds it first: ``cd ios_harness && swift build -c release``);
``ORCH_HARNESS_BIN`` points at another binary. Without one these tests skip.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from orchestrator.protocol import TrialResult, parse_result

ROOT = Path(__file__).resolve().parents[1]
HARNESS_DIR = ROOT / "ios_harness"
GOLDEN_SPEC = HARNESS_DIR / "Tests" / "Fixtures" / "protocol" / "valid" / "spec_golden_q8_0.json"


def _binary() -> Path | None:
    if env := os.environ.get("ORCH_HARNESS_BIN"):
        return Path(env)
    for config in ("release", "debug"):
        path = HARNESS_DIR / ".build" / config / "harness"
        if path.exists():
            return path
    return None


BIN = _binary()
pytestmark = pytest.mark.skipif(BIN is None, reason="harness not built (cd ios_harness && swift build -c release)")


def _harness(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    assert BIN is not None
    return subprocess.run([str(BIN), *args], cwd=HARNESS_DIR, capture_output=True, text=True, timeout=timeout)


def _run_spec(
    tmp_path: Path, spec: dict[str, Any], tuning: dict[str, Any] | None = None
) -> tuple[int, TrialResult, str]:
    tmp_path.mkdir(parents=True, exist_ok=True)
    spec_path = tmp_path / f"spec-{spec.get('trial_id', 'x')}.json"
    out = tmp_path / "results" / f"{spec.get('trial_id', 'x')}.json"
    spec_path.write_text(json.dumps(spec))
    args = ["run", "--spec", str(spec_path), "--out", str(out)]
    if tuning is not None:
        tuning_path = tmp_path / "tuning.json"
        tuning_path.write_text(json.dumps(tuning))
        args += ["--tuning", str(tuning_path)]
    proc = _harness(*args)
    result = parse_result(out.read_text())
    assert proc.stdout.splitlines()[-1] == f"HARNESS_DONE {result.trial_id} {out}"
    assert not list(out.parent.glob(".*.tmp")), "temporary file left behind"
    return proc.returncode, result, proc.stderr


def _spec(model: Path | str, **over: Any) -> dict[str, Any]:
    spec: dict[str, Any] = json.loads(GOLDEN_SPEC.read_text())
    spec["model"] = str(model)
    spec.update(over)
    return spec


@pytest.fixture(scope="module")
def t1(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("gguf")
    from orchestrator.models import make_model

    return make_model("llama", "t1", 0, tmp_path_factory.mktemp("t1")).directory


def test_golden_spec_runs_twice_with_the_same_tokens(tmp_path: Path) -> None:
    spec = json.loads(GOLDEN_SPEC.read_text())
    code_a, a, _ = _run_spec(tmp_path / "a", spec)
    code_b, b, _ = _run_spec(tmp_path / "b", spec)
    assert code_a == code_b == 0
    assert a.status == b.status == "ok"
    assert a.trial1 is not None and b.trial1 is not None
    assert a.trial1.token_ids == b.trial1.token_ids
    assert len(a.trial1.token_ids) == spec["decode_tokens"]
    assert [g.token_ids for g in a.warm] == [a.trial1.token_ids]
    assert a.engine_version.startswith("rawloop-cpu")
    assert a.bytes_per_decode_token and a.bytes_per_prefill_token
    assert a.bytes_per_prefill_token < a.bytes_per_decode_token
    assert (a.decode_tok_s() or 0) > 0 and (a.effective_gb_s() or 0) > 0


def test_chunk_width_does_not_change_tokens(tmp_path: Path) -> None:
    tokens = []
    for m in (1, 4, 16):
        code, r, _ = _run_spec(tmp_path / str(m), _spec(GOLDEN_SPEC.parent.parent.parent / "models" / "llama-t2-s0" /
                                                      "model-Q4_0.gguf", prompt_tokens=40, chunk_width=m))
        assert code == 0 and r.trial1 is not None
        tokens.append(r.trial1.token_ids)
    assert tokens[0] == tokens[1] == tokens[2]


def _reference_greedy(model_dir: Path, prompt: list[int], n: int) -> list[int]:
    """A float64 numpy llama over the HF safetensors (rotate-half rope): an independent oracle."""
    from safetensors.numpy import load_file

    cfg = json.loads((model_dir / "config.json").read_text())
    w = {k: v.astype(np.float64) for k, v in load_file(str(model_dir / "model.safetensors")).items()}
    d, heads, kv_heads = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"]
    hd, eps = d // heads, cfg["rms_norm_eps"]
    inv = cfg["rope_theta"] ** (-np.arange(0, hd, 2) / hd)
    head = w.get("lm_head.weight", w["model.embed_tokens.weight"])
    cache: list[tuple[list[np.ndarray], list[np.ndarray]]] = [([], []) for _ in range(cfg["num_hidden_layers"])]

    def rms(x: np.ndarray, g: np.ndarray) -> np.ndarray:
        return np.asarray(x / np.sqrt(np.mean(x * x) + eps) * g)

    def rope(x: np.ndarray, pos: int) -> np.ndarray:
        ang = np.concatenate([pos * inv, pos * inv])
        rot = np.concatenate([-x[:, hd // 2 :], x[:, : hd // 2]], axis=1)
        return np.asarray(x * np.cos(ang) + rot * np.sin(ang))

    def step(tok: int, pos: int) -> np.ndarray:
        x = w["model.embed_tokens.weight"][tok].copy()
        for layer, (keys, values) in enumerate(cache):
            p = f"model.layers.{layer}."
            xn = rms(x, w[p + "input_layernorm.weight"])
            q = rope((w[p + "self_attn.q_proj.weight"] @ xn).reshape(heads, hd), pos)
            keys.append(rope((w[p + "self_attn.k_proj.weight"] @ xn).reshape(kv_heads, hd), pos))
            values.append((w[p + "self_attn.v_proj.weight"] @ xn).reshape(kv_heads, hd))
            k, v = np.stack(keys), np.stack(values)
            out = np.zeros((heads, hd))
            for h in range(heads):
                g = h // (heads // kv_heads)
                s = k[:, g] @ q[h] / np.sqrt(hd)
                s = np.exp(s - s.max())
                out[h] = (s / s.sum()) @ v[:, g]
            x = x + w[p + "self_attn.o_proj.weight"] @ out.reshape(-1)
            xn = rms(x, w[p + "post_attention_layernorm.weight"])
            gate, up = w[p + "mlp.gate_proj.weight"] @ xn, w[p + "mlp.up_proj.weight"] @ xn
            x = x + w[p + "mlp.down_proj.weight"] @ (gate / (1 + np.exp(-gate)) * up)
        return np.asarray(head @ rms(x, w["model.norm.weight"]))

    for i, tok in enumerate(prompt):
        logits = step(tok, i)
    out = [int(np.argmax(logits))]
    for i in range(n - 1):
        out.append(int(np.argmax(step(out[-1], len(prompt) + i))))
    return out


def test_f32_engine_matches_an_independent_reference(tmp_path: Path, t1: Path) -> None:
    """Same tokens as a numpy llama on the HF weights: rope layout, GQA, norms and head agree."""
    prompt = [1, 17, 42, 99, 200, 7, 63]
    code, r, _ = _run_spec(tmp_path, _spec(t1 / "model-F32.gguf", prompt_tokens=len(prompt), prompt_ids=prompt,
                                           decode_tokens=12, chunk_width=4, warm_repetitions=0,
                                           tuning={"kv_cache": "f32"}))
    assert code == 0 and r.trial1 is not None
    assert r.trial1.token_ids == _reference_greedy(t1, prompt, 12)


def _write_gguf(path: Path, t1: Path, mutate: str) -> None:
    """A copy of t1 with one defect: a wrong shape or an unsupported tensor type."""
    import gguf

    reader = gguf.GGUFReader(str(t1 / "model-Q8_0.gguf"))
    writer = gguf.GGUFWriter(str(path), "llama")
    for name, field in reader.fields.items():
        if name.startswith("llama.") and len(field.types) == 1 and field.types[0] != gguf.GGUFValueType.STRING:
            value = field.parts[field.data[0]][0]
            writer.add_key_value(name, value.item(), field.types[0])
    for t in reader.tensors:
        data = gguf.quants.dequantize(t.data, t.tensor_type)
        shape = tuple(reversed([int(d) for d in t.shape]))
        arr = np.asarray(data, dtype=np.float32).reshape(shape)
        if t.name == "blk.0.attn_q.weight" and mutate == "shape":
            writer.add_tensor(t.name, np.ascontiguousarray(arr[:32]))
        elif t.name == "blk.0.ffn_up.weight" and mutate == "type":
            writer.add_tensor(t.name, arr.astype(np.float16))
        elif arr.ndim == 1:
            writer.add_tensor(t.name, arr)
        else:
            writer.add_tensor(t.name, gguf.quants.quantize(arr, gguf.GGMLQuantizationType.Q8_0),
                              raw_dtype=gguf.GGMLQuantizationType.Q8_0)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


@pytest.mark.parametrize(
    ("case", "kind"),
    [
        ("missing", "model_not_found"),
        ("truncated", "bad_model"),
        ("not_gguf", "bad_model"),
        ("shape", "bad_model"),
        ("type", "bad_model"),
        ("context", "context_overflow"),
        ("other_engine_tuning", "bad_tuning"),
        ("unknown_tuning", "bad_tuning"),
        ("schema", "unsupported_schema"),
        ("garbage", "bad_spec"),
        ("sha", "bad_model"),
    ],
)
def test_bad_input_is_a_typed_error_result(tmp_path: Path, t1: Path, case: str, kind: str) -> None:
    good = t1 / "model-Q8_0.gguf"
    spec = _spec(good, trial_id=f"bad-{case}")
    tuning = None
    if case == "missing":
        spec["model"] = str(tmp_path / "nope.gguf")
    elif case == "truncated":
        cut = tmp_path / "cut.gguf"
        cut.write_bytes(good.read_bytes()[: good.stat().st_size // 2])
        spec["model"] = str(cut)
    elif case == "not_gguf":
        junk = tmp_path / "junk.gguf"
        junk.write_bytes(b"\x00" * 4096)
        spec["model"] = str(junk)
    elif case in ("shape", "type"):
        pytest.importorskip("gguf")
        bad = tmp_path / f"{case}.gguf"
        _write_gguf(bad, t1, case)
        spec["model"] = str(bad)
    elif case == "context":
        spec.update(prompt_tokens=100, decode_tokens=100)
    elif case == "other_engine_tuning":
        tuning = {"engine": "llama.cpp", "params": {"threads": 2}}
    elif case == "unknown_tuning":
        tuning = {"engine": "rawloop-cpu", "params": {"tile_rows": 8}}
    elif case == "schema":
        spec["schema_version"] = 2
    elif case == "garbage":
        spec["decode_tokens"] = "lots"
    elif case == "sha":
        spec["model_sha256"] = "0" * 64
    code, result, stderr = _run_spec(tmp_path, spec, tuning)
    assert code == 2, stderr
    assert result.status == "error" and result.error is not None
    assert result.error.kind == kind, result.error.message
    assert result.trial_id == f"bad-{case}"


def test_unreadable_arguments_exit_without_a_result(tmp_path: Path) -> None:
    proc = _harness("run", "--spec", str(tmp_path / "s.json"))
    assert proc.returncode == 64 and "missing --out" in proc.stderr
    assert _harness("fly").returncode == 64


def test_info_reports_engines_and_caches() -> None:
    proc = _harness("info")
    assert proc.returncode == 0
    info = json.loads(proc.stdout)
    assert "rawloop-cpu" in info["engines"]
    assert info["protocol_schema_version"] == 1
    levels = {c["level"] for c in info["host"]["caches"]}
    sysfs = Path("/sys/devices/system/cpu/cpu0/cache")
    if sysfs.exists():
        expected = {int((d / "level").read_text()) for d in sysfs.glob("index*")}
        assert levels == expected


def test_probe_writes_bandwidths(tmp_path: Path) -> None:
    out = tmp_path / "probe.json"
    proc = _harness("probe", "--out", str(out), "--mib", "32", "--repeats", "1", "--patterns", "stream,q4_0_kernel")
    assert proc.returncode == 0, proc.stderr
    report = json.loads(out.read_text())
    assert [m["pattern"] for m in report["results"]] == ["stream", "q4_0_kernel"]
    assert all(m["best_gb_s"] > 0 for m in report["results"])
    assert report["buffer_bytes"] == 32 << 20
