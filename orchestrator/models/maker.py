"""Make a llama-architecture model with random weights, as HF safetensors and as GGUF.

One source of truth per model: the float32 weights are drawn once from ``seed`` in HF layout;
the safetensors file holds them as they are, and each GGUF file (F32, Q8_0, Q4_0) holds the same
weights converted the way llama.cpp's ``convert_hf_to_gguf.py`` converts a llama checkpoint
(Q/K rows permuted from HF's rotate-half rope layout to ggml's adjacent-pair layout), then
quantized with the ``gguf`` package. The same (arch, size, seed) gives the same bytes.

Tokenizer: a synthetic SentencePiece-style vocabulary (``<unk> <s> </s>``, 256 byte tokens,
then ``▁t<N>``) so llama.cpp can load the GGUF; benchmarks feed token ids, never text.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

ARCHS = ("llama",)
FORMATS = ("F32", "Q8_0", "Q4_0")


@dataclass(frozen=True)
class Size:
    dim: int
    layers: int
    heads: int
    kv_heads: int
    hidden: int
    vocab: int
    context: int
    tied: bool
    rope_base: float = 10000.0
    norm_eps: float = 1e-5

    @property
    def head_dim(self) -> int:
        return self.dim // self.heads

    def params(self) -> int:
        kv = self.kv_heads * self.head_dim
        per_layer = 2 * self.dim * self.dim + 2 * self.dim * kv + 3 * self.dim * self.hidden + 2 * self.dim
        head = 0 if self.tied else self.vocab * self.dim
        return self.vocab * self.dim + self.layers * per_layer + self.dim + head


SIZES: dict[str, Size] = {
    # Test sizes: GQA + untied head, and MHA + tied head; a few tens of KB as Q8_0.
    "t1": Size(dim=64, layers=2, heads=4, kv_heads=2, hidden=96, vocab=288, context=128, tied=False),
    "t2": Size(dim=64, layers=2, heads=2, kv_heads=2, hidden=128, vocab=272, context=128, tied=True),
    # The shapes of llama2.c's stories15M and stories110M.
    "s15": Size(dim=288, layers=6, heads=6, kv_heads=6, hidden=768, vocab=32000, context=256, tied=True),
    "m110": Size(dim=768, layers=12, heads=12, kv_heads=12, hidden=2048, vocab=32000, context=1024, tied=True),
    # The shape of TinyLlama-1.1B (GQA 32/4, untied).
    "b1": Size(dim=2048, layers=22, heads=32, kv_heads=4, hidden=5632, vocab=32000, context=2048, tied=False),
}


@dataclass(frozen=True)
class ModelPaths:
    directory: Path
    hf_config: Path
    safetensors: Path
    gguf: dict[str, Path] = field(default_factory=dict)
    manifest: Path | None = None


def default_cache_dir() -> Path:
    """``$ORCH_CACHE/models`` or ``~/.cache/orch/models``: never inside the repository."""
    root = os.environ.get("ORCH_CACHE")
    return (Path(root) if root else Path.home() / ".cache" / "orch") / "models"


def model_dir(arch: str, size: str, seed: int, cache: Path | None = None) -> Path:
    return (cache or default_cache_dir()) / f"{arch}-{size}-s{seed}"


def _weights(size: Size, seed: int) -> dict[str, np.ndarray]:
    """Float32 weights in HF layout and naming, drawn in a fixed order."""
    rng = np.random.Generator(np.random.PCG64(seed))
    d, kv = size.dim, size.kv_heads * size.head_dim

    def normal(rows: int, cols: int, std: float) -> np.ndarray:
        return (rng.standard_normal((rows, cols), dtype=np.float32) * np.float32(std)).astype(np.float32)

    def norm() -> np.ndarray:
        return (1.0 + 0.1 * rng.standard_normal(d, dtype=np.float32)).astype(np.float32)

    # Unit-gain projections (std 1/sqrt(fan_in)) and a modest embedding, so every layer moves
    # the residual stream and greedy decode does not lock onto the input token (tied heads).
    r_d, r_h = 1 / np.sqrt(d), 1 / np.sqrt(size.hidden)
    w: dict[str, np.ndarray] = {"model.embed_tokens.weight": normal(size.vocab, d, 0.5)}
    for i in range(size.layers):
        p = f"model.layers.{i}."
        w[p + "input_layernorm.weight"] = norm()
        w[p + "self_attn.q_proj.weight"] = normal(d, d, 2 * r_d)
        w[p + "self_attn.k_proj.weight"] = normal(kv, d, 2 * r_d)
        w[p + "self_attn.v_proj.weight"] = normal(kv, d, r_d)
        w[p + "self_attn.o_proj.weight"] = normal(d, d, r_d)
        w[p + "post_attention_layernorm.weight"] = norm()
        w[p + "mlp.gate_proj.weight"] = normal(size.hidden, d, r_d)
        w[p + "mlp.up_proj.weight"] = normal(size.hidden, d, r_d)
        w[p + "mlp.down_proj.weight"] = normal(d, size.hidden, r_h)
    w["model.norm.weight"] = norm()
    if not size.tied:
        w["lm_head.weight"] = normal(size.vocab, d, r_d)
    return w


def permute_qk(weights: np.ndarray, heads: int) -> np.ndarray:
    """HF rotate-half rope rows -> ggml adjacent-pair rows (llama.cpp's ``LlamaModel.permute``)."""
    rows = weights.shape[0]
    return (
        weights.reshape(heads, 2, rows // heads // 2, *weights.shape[1:]).swapaxes(1, 2).reshape(weights.shape)
    )


def _gguf_tensors(size: Size, w: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """HF names -> GGUF llama names, Q/K permuted."""
    t: dict[str, np.ndarray] = {"token_embd.weight": w["model.embed_tokens.weight"]}
    for i in range(size.layers):
        p, g = f"model.layers.{i}.", f"blk.{i}."
        t[g + "attn_norm.weight"] = w[p + "input_layernorm.weight"]
        t[g + "attn_q.weight"] = permute_qk(w[p + "self_attn.q_proj.weight"], size.heads)
        t[g + "attn_k.weight"] = permute_qk(w[p + "self_attn.k_proj.weight"], size.kv_heads)
        t[g + "attn_v.weight"] = w[p + "self_attn.v_proj.weight"]
        t[g + "attn_output.weight"] = w[p + "self_attn.o_proj.weight"]
        t[g + "ffn_norm.weight"] = w[p + "post_attention_layernorm.weight"]
        t[g + "ffn_gate.weight"] = w[p + "mlp.gate_proj.weight"]
        t[g + "ffn_up.weight"] = w[p + "mlp.up_proj.weight"]
        t[g + "ffn_down.weight"] = w[p + "mlp.down_proj.weight"]
    t["output_norm.weight"] = w["model.norm.weight"]
    if not size.tied:
        t["output.weight"] = w["lm_head.weight"]
    return t


def _hf_config(size: Size) -> dict[str, object]:
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": size.dim,
        "intermediate_size": size.hidden,
        "num_attention_heads": size.heads,
        "num_key_value_heads": size.kv_heads,
        "num_hidden_layers": size.layers,
        "vocab_size": size.vocab,
        "max_position_embeddings": size.context,
        "rms_norm_eps": size.norm_eps,
        "rope_theta": size.rope_base,
        "hidden_act": "silu",
        "tie_word_embeddings": size.tied,
        "torch_dtype": "float32",
        "bos_token_id": 1,
        "eos_token_id": 2,
    }


def _vocab(n: int) -> tuple[list[str], list[float], list[int]]:
    if n < 3 + 256:
        raise ValueError(f"vocab {n} is too small for the synthetic tokenizer (needs >= 259)")
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
    types = [2, 3, 3] + [6] * 256  # unknown, control, byte (gguf.TokenType)
    tokens += [f"▁t{i}" for i in range(n - len(tokens))]
    types += [1] * (n - len(types))
    scores = [0.0] * 259 + [-float(i) for i in range(n - 259)]
    return tokens, scores, types


def _write_gguf(path: Path, size: Size, tensors: dict[str, np.ndarray], fmt: str, name: str) -> None:
    import gguf
    from gguf import GGMLQuantizationType, LlamaFileType, quants

    qtype = {
        "F32": GGMLQuantizationType.F32,
        "Q8_0": GGMLQuantizationType.Q8_0,
        "Q4_0": GGMLQuantizationType.Q4_0,
    }[fmt]
    file_type = {
        "F32": LlamaFileType.ALL_F32,
        "Q8_0": LlamaFileType.MOSTLY_Q8_0,
        "Q4_0": LlamaFileType.MOSTLY_Q4_0,
    }[fmt]
    tmp = path.with_suffix(path.suffix + ".tmp")
    writer = gguf.GGUFWriter(str(tmp), "llama")
    writer.add_name(name)
    writer.add_context_length(size.context)
    writer.add_embedding_length(size.dim)
    writer.add_block_count(size.layers)
    writer.add_feed_forward_length(size.hidden)
    writer.add_head_count(size.heads)
    writer.add_head_count_kv(size.kv_heads)
    writer.add_rope_dimension_count(size.head_dim)
    writer.add_rope_freq_base(size.rope_base)
    writer.add_layer_norm_rms_eps(size.norm_eps)
    writer.add_vocab_size(size.vocab)
    writer.add_file_type(file_type)
    tokens, scores, types = _vocab(size.vocab)
    writer.add_tokenizer_model("llama")
    writer.add_token_list(tokens)
    writer.add_token_scores(scores)
    writer.add_token_types(types)
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    writer.add_unk_token_id(0)
    for tname, data in tensors.items():
        if data.ndim == 1 or qtype == GGMLQuantizationType.F32:
            writer.add_tensor(tname, np.ascontiguousarray(data, dtype=np.float32))
        else:
            writer.add_tensor(tname, quants.quantize(data, qtype), raw_dtype=qtype)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    tmp.replace(path)


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def make_model(
    arch: str, size: str, seed: int, out_dir: Path | str, formats: tuple[str, ...] = FORMATS
) -> ModelPaths:
    """Write ``config.json`` + ``model.safetensors`` and ``model-<FMT>.gguf`` for each format
    into ``out_dir``, plus ``manifest.json`` (shape, seed, sha256 of every file)."""
    from safetensors.numpy import save_file

    if arch not in ARCHS:
        raise ValueError(f"unknown arch {arch!r}; known: {', '.join(ARCHS)}")
    if size not in SIZES:
        raise ValueError(f"unknown size {size!r}; known: {', '.join(SIZES)}")
    if bad := [f for f in formats if f not in FORMATS]:
        raise ValueError(f"unknown formats {bad}; known: {', '.join(FORMATS)}")
    shape = SIZES[size]
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    weights = _weights(shape, seed)
    name = f"{arch}-{size}-s{seed}"

    config_path = out / "config.json"
    config_path.write_text(json.dumps(_hf_config(shape), indent=2, sort_keys=True) + "\n")
    st_path = out / "model.safetensors"
    # One metadata key: safetensors writes its metadata map in hash order (bytes would vary).
    save_file(weights, str(st_path), metadata={"format": "pt"})

    tensors = _gguf_tensors(shape, weights)
    ggufs: dict[str, Path] = {}
    for fmt in formats:
        path = out / f"model-{fmt}.gguf"
        _write_gguf(path, shape, tensors, fmt, name)
        ggufs[fmt] = path

    manifest = out / "manifest.json"
    files = [config_path, st_path, *ggufs.values()]
    manifest.write_text(
        json.dumps(
            {
                "name": name,
                "arch": arch,
                "size": size,
                "seed": seed,
                "params": shape.params(),
                "shape": {k: getattr(shape, k) for k in shape.__dataclass_fields__},
                "files": {p.name: {"bytes": p.stat().st_size, "sha256": _sha256(p)} for p in files},
            },
            indent=2,
            sort_keys=True,
        )
        + "\n"
    )
    return ModelPaths(directory=out, hf_config=config_path, safetensors=st_path, gguf=ggufs, manifest=manifest)
