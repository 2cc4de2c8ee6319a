"""The numpy reference decoder: the correctness oracle every runtime's token ids are gated against.

A plain llama forward pass in float32 over the weights of one GGUF file, dequantized with the
``gguf`` package (so a Q8_0 file gives the Q8_0 class's reference, a Q4_0 file the Q4_0 class's).
Rope is ggml's adjacent-pair form, because the GGUF's Q/K rows are permuted for it (see
``models/maker.py``). Prefill runs in chunks of the spec's chunk width (1 = sequential, the
bit-exact route), then greedy decode one token at a time, exactly like the harness.

Two uses: `greedy` (the reference token ids for a model + prompt) and `score` (teacher-forced
logits of a given token sequence, so the token gate can say how close a runtime's own choices
were to the reference's at every position, even after a fork).

It is also a runtime (`numpy`): ``python -m orchestrator.runtimes.reference --spec S --out R``
writes a TrialResult, one fresh process per trial like every other adapter.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

from orchestrator.models.maker import Size
from orchestrator.protocol import Generation, TrialResult, TrialSpec
from orchestrator.runtimes.prompt import spec_prompt

VERSION = "numpy-ref 1"


class Weights:
    """Dequantized float32 weights of one GGUF file, rows = output features."""

    def __init__(self, path: Path | str):
        import gguf
        from gguf import quants

        reader = gguf.GGUFReader(str(path))

        def field(name: str) -> float:
            f = reader.fields[name]
            return float(f.parts[f.data[0]][0])

        self.t: dict[str, np.ndarray] = {}
        for tensor in reader.tensors:
            data = np.asarray(tensor.data)
            if tensor.tensor_type != gguf.GGMLQuantizationType.F32:
                data = quants.dequantize(data, tensor.tensor_type)
            self.t[tensor.name] = np.ascontiguousarray(data, dtype=np.float32)
        self.head = self.t.get("output.weight", self.t["token_embd.weight"])
        arch = "llama"
        self.shape = Size(  # the maker's shape type, read back from the file
            dim=int(field(f"{arch}.embedding_length")), layers=int(field(f"{arch}.block_count")),
            heads=int(field(f"{arch}.attention.head_count")), kv_heads=int(field(f"{arch}.attention.head_count_kv")),
            hidden=int(field(f"{arch}.feed_forward_length")), vocab=int(field(f"{arch}.vocab_size")),
            context=int(field(f"{arch}.context_length")), tied="output.weight" not in self.t,
            rope_base=field(f"{arch}.rope.freq_base"), norm_eps=field(f"{arch}.attention.layer_norm_rms_epsilon"),
        )

    def bytes_per_token(self) -> int:
        """Float32 weight bytes a decode step streams: every matrix, one embedding row, the head."""
        s = self.shape
        total = sum(a.nbytes for n, a in self.t.items() if n != "token_embd.weight")
        return total + s.dim * 4 + (self.head.nbytes if "output.weight" not in self.t else 0)


def _rms(x: np.ndarray, w: np.ndarray, eps: float) -> np.ndarray:
    return (x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + np.float32(eps))).astype(np.float32) * w


def _rope(x: np.ndarray, pos: np.ndarray, base: float) -> np.ndarray:
    """ggml's normal rope: adjacent pairs (2i, 2i+1) rotated by pos * base^(-2i/d). x: [T, H, D]."""
    d = x.shape[-1]
    inv = base ** (-np.arange(0, d, 2, dtype=np.float64) / d)
    ang = (pos[:, None].astype(np.float64) * inv[None, :]).astype(np.float32)  # [T, D/2]
    cos, sin = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
    a, b = x[..., 0::2], x[..., 1::2]
    out = np.empty_like(x)
    out[..., 0::2] = a * cos - b * sin
    out[..., 1::2] = a * sin + b * cos
    return out


class Decoder:
    """One sequence's state (KV cache) over shared weights."""

    def __init__(self, weights: Weights):
        self.w = weights
        s = weights.shape
        self.k = np.zeros((s.layers, s.context, s.kv_heads, s.head_dim), np.float32)
        self.v = np.zeros_like(self.k)
        self.pos = 0

    def forward(self, tokens: list[int]) -> np.ndarray:
        """Feed `tokens` at the next positions; logits [len(tokens), vocab]."""
        s, t = self.w.shape, self.w.t
        n, p0 = len(tokens), self.pos
        if p0 + n > s.context:
            raise ValueError(f"{p0 + n} positions exceed the context of {s.context}")
        pos = np.arange(p0, p0 + n)
        x = t["token_embd.weight"][np.asarray(tokens)]
        group = s.heads // s.kv_heads
        scale = np.float32(1.0 / np.sqrt(s.head_dim))
        mask = np.triu(np.full((n, p0 + n), -np.inf, np.float32), k=p0 + 1)
        for i in range(s.layers):
            g = f"blk.{i}."
            h = _rms(x, t[g + "attn_norm.weight"], s.norm_eps)
            q = _rope((h @ t[g + "attn_q.weight"].T).reshape(n, s.heads, s.head_dim), pos, s.rope_base)
            k = _rope((h @ t[g + "attn_k.weight"].T).reshape(n, s.kv_heads, s.head_dim), pos, s.rope_base)
            self.k[i, p0:p0 + n] = k
            self.v[i, p0:p0 + n] = (h @ t[g + "attn_v.weight"].T).reshape(n, s.kv_heads, s.head_dim)
            keys = np.repeat(self.k[i, : p0 + n], group, axis=1)  # [P, H, D]
            vals = np.repeat(self.v[i, : p0 + n], group, axis=1)
            att = np.einsum("thd,phd->htp", q, keys) * scale + mask[None]
            att = np.exp(att - att.max(axis=-1, keepdims=True))
            att /= att.sum(axis=-1, keepdims=True)
            o = np.einsum("htp,phd->thd", att, vals).reshape(n, s.dim)
            x = x + o @ t[g + "attn_output.weight"].T
            h = _rms(x, t[g + "ffn_norm.weight"], s.norm_eps)
            gate = h @ t[g + "ffn_gate.weight"].T
            up = h @ t[g + "ffn_up.weight"].T
            x = x + ((gate / (1 + np.exp(-gate))) * up) @ t[g + "ffn_down.weight"].T
        self.pos += n
        return np.asarray(_rms(x, t["output_norm.weight"], s.norm_eps) @ self.w.head.T, dtype=np.float32)


def greedy(weights: Weights, prompt: list[int], decode_tokens: int, chunk_width: int = 1,
           clock: object = time.perf_counter_ns) -> Generation:
    """The harness's generation: prefill in chunks (its last logits give token 0), then decode."""
    now = clock if callable(clock) else time.perf_counter_ns
    dec = Decoder(weights)
    t0 = now()
    for i in range(0, len(prompt), chunk_width):
        logits = dec.forward(prompt[i:i + chunk_width])
    token = int(np.argmax(logits[-1]))
    t1 = now()
    ids, times = [token], [t1 - t0]
    for _ in range(1, decode_tokens):
        token = int(np.argmax(dec.forward([token])[-1]))
        ids.append(token)
        times.append(now() - t0)
    return Generation(prefill_ns=t1 - t0, ttft_ns=t1 - t0, token_ids=ids, token_times_ns=times)


def score(weights: Weights, prompt: list[int], tokens: list[int]) -> np.ndarray:
    """Teacher-forced logits that predicted each of `tokens`: [len(tokens), vocab].

    Row 0 comes from the prompt (the prefill's prediction), row i from prompt + tokens[:i].
    """
    dec = Decoder(weights)
    first = dec.forward(prompt)[-1:]
    rest = dec.forward(tokens[:-1]) if len(tokens) > 1 else np.zeros((0, weights.shape.vocab), np.float32)
    return np.concatenate([first, rest])


def run_spec(spec: TrialSpec) -> TrialResult:
    weights = Weights(spec.model)
    prompt = spec_prompt(spec, weights.shape.vocab)
    trial1 = greedy(weights, prompt, spec.decode_tokens, spec.chunk_width)
    warm = [greedy(weights, prompt, spec.decode_tokens, spec.chunk_width) for _ in range(spec.warm_repetitions)]
    return TrialResult(
        run_id=spec.run_id, trial_id=spec.trial_id, status="ok", engine=spec.engine,
        engine_version=f"{VERSION} (numpy {np.__version__})", harness_build="orch-reference", model=spec.model,
        prompt_tokens=len(prompt), chunk_width=spec.chunk_width, threads=spec.threads, trial1=trial1, warm=warm,
        bytes_per_decode_token=weights.bytes_per_token(),
        bytes_per_prefill_token=weights.bytes_per_token() // spec.chunk_width, tuning=dict(spec.tuning),
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m orchestrator.runtimes.reference")
    ap.add_argument("--spec", required=True)
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)
    spec = TrialSpec.model_validate_json(Path(args.spec).read_text())
    if not Path(spec.model).is_file():
        print(f"model not found: {spec.model}", file=sys.stderr)
        return 2
    result = run_spec(spec)
    tmp = Path(args.out + ".tmp")
    tmp.write_text(result.model_dump_json())
    os.replace(tmp, args.out)
    print(json.dumps({"done": spec.trial_id, "out": args.out}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
