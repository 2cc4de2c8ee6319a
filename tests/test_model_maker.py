"""The tiny-model maker: deterministic files, HF and GGUF holding the same weights."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

gguf = pytest.importorskip("gguf")
safetensors_numpy = pytest.importorskip("safetensors.numpy")

from orchestrator.models import SIZES, default_cache_dir, make_model, model_dir  # noqa: E402
from orchestrator.models.maker import permute_qk  # noqa: E402

FIXTURES = Path(__file__).resolve().parents[1] / "ios_harness" / "Tests" / "Fixtures" / "models"


def _tensors(path: Path) -> dict[str, tuple[np.ndarray, int]]:
    reader = gguf.GGUFReader(str(path))
    out = {}
    for t in reader.tensors:
        data = gguf.quants.dequantize(t.data, t.tensor_type)
        shape = tuple(reversed([int(d) for d in t.shape]))
        out[t.name] = (np.asarray(data, dtype=np.float32).reshape(shape), int(t.tensor_type))
    return out


def test_same_seed_same_bytes_other_seed_other_bytes(tmp_path: Path) -> None:
    a = make_model("llama", "t1", 0, tmp_path / "a")
    b = make_model("llama", "t1", 0, tmp_path / "b")
    c = make_model("llama", "t1", 1, tmp_path / "c", formats=("Q8_0",))
    for fmt in ("F32", "Q8_0", "Q4_0"):
        assert a.gguf[fmt].read_bytes() == b.gguf[fmt].read_bytes()
    assert a.safetensors.read_bytes() == b.safetensors.read_bytes()
    assert a.gguf["Q8_0"].read_bytes() != c.gguf["Q8_0"].read_bytes()


def test_committed_fixtures_match_the_maker(tmp_path: Path) -> None:
    """The GGUF files the Swift tests use are exactly what the maker makes today."""
    for size in ("t1", "t2"):
        made = make_model("llama", size, 0, tmp_path / size, formats=("Q8_0", "Q4_0"))
        for path in made.gguf.values():
            committed = FIXTURES / f"llama-{size}-s0" / path.name
            assert committed.read_bytes() == path.read_bytes(), f"{committed} is stale: regenerate it"


@pytest.mark.parametrize("size", ["t1", "t2"])
def test_gguf_holds_the_hf_weights(tmp_path: Path, size: str) -> None:
    shape = SIZES[size]
    made = make_model("llama", size, 3, tmp_path)
    hf = safetensors_numpy.load_file(str(made.safetensors))
    f32 = _tensors(made.gguf["F32"])
    q8 = _tensors(made.gguf["Q8_0"])
    q4 = _tensors(made.gguf["Q4_0"])
    q_hf = hf["model.layers.1.self_attn.q_proj.weight"]
    k_hf = hf["model.layers.1.self_attn.k_proj.weight"]
    np.testing.assert_array_equal(f32["blk.1.attn_q.weight"][0], permute_qk(q_hf, shape.heads))
    np.testing.assert_array_equal(f32["blk.1.attn_k.weight"][0], permute_qk(k_hf, shape.kv_heads))
    np.testing.assert_array_equal(f32["token_embd.weight"][0], hf["model.embed_tokens.weight"])
    assert ("output.weight" in f32) == (not shape.tied) == ("lm_head.weight" in hf)
    down = hf["model.layers.0.mlp.down_proj.weight"]
    data8, type8 = q8["blk.0.ffn_down.weight"]
    data4, type4 = q4["blk.0.ffn_down.weight"]
    assert (type8, type4) == (int(gguf.GGMLQuantizationType.Q8_0), int(gguf.GGMLQuantizationType.Q4_0))
    assert np.abs(data8 - down).max() <= np.abs(down).max() / 127 * 0.51 + 1e-6
    assert np.abs(data4 - down).max() <= np.abs(down).max() / 8 + 1e-6
    # Norms stay F32 in every format.
    assert q4["blk.0.attn_norm.weight"][1] == int(gguf.GGMLQuantizationType.F32)


def test_metadata_and_config(tmp_path: Path) -> None:
    made = make_model("llama", "t1", 0, tmp_path)
    reader = gguf.GGUFReader(str(made.gguf["Q4_0"]))
    fields = {name: f for name, f in reader.fields.items()}

    def scalar(key: str) -> float:
        f = fields[key]
        return float(f.parts[f.data[0]][0])

    s = SIZES["t1"]
    assert scalar("llama.embedding_length") == s.dim
    assert scalar("llama.attention.head_count_kv") == s.kv_heads
    assert scalar("llama.context_length") == s.context
    assert len(fields["tokenizer.ggml.tokens"].data) == s.vocab
    assert made.manifest is not None and made.manifest.exists()
    assert '"num_key_value_heads": 2' in made.hf_config.read_text()


def test_unknown_inputs_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="arch"):
        make_model("gpt2", "t1", 0, tmp_path)
    with pytest.raises(ValueError, match="size"):
        make_model("llama", "huge", 0, tmp_path)
    with pytest.raises(ValueError, match="formats"):
        make_model("llama", "t1", 0, tmp_path, formats=("Q5_K",))


def test_cache_dir_is_outside_the_repo(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("ORCH_CACHE", str(tmp_path))
    assert default_cache_dir() == tmp_path / "models"
    assert model_dir("llama", "m110", 4) == tmp_path / "models" / "llama-m110-s4"
    monkeypatch.delenv("ORCH_CACHE")
    assert default_cache_dir() == Path.home() / ".cache" / "orch" / "models"


def test_sizes_have_the_advertised_parameter_counts() -> None:
    assert 14e6 < SIZES["s15"].params() < 16e6
    assert 105e6 < SIZES["m110"].params() < 115e6
    assert 1.0e9 < SIZES["b1"].params() < 1.2e9
