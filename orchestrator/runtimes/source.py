"""The one source model a plan names, as every adapter reads it.

A plan's `model` is a GGUF made by `orch model make` (``<dir>/model-<FMT>.gguf``); beside it are the
HF folder's files (``config.json``, ``model.safetensors``) and ``manifest.json`` (sha256 of every
file). The GGUF's format is the trial's quantization class; runtimes with their own formats convert
from the HF files to the matching class of their own (Q8_0 -> int8, Q4_0 -> int4, F32 -> fp32).
"""

from __future__ import annotations

import json
import posixpath
import re
import tempfile
from pathlib import Path
from typing import Any

from orchestrator.runners import LocalRunner, Runner

_FORMAT = re.compile(r"model-([A-Za-z0-9_]+)\.gguf$")

# Our quantization classes and what each runtime calls its member of the class.
CLASSES = ("F32", "Q8_0", "Q4_0")
ORT_PRECISION = {"F32": "fp32", "Q8_0": "int8", "Q4_0": "int4"}
MLX_BITS = {"F32": None, "Q8_0": 8, "Q4_0": 4}
# litert-torch quantization recipes: dynamic-range int8 / int4 (blocks of 32, like Q4_0), or none (fp32).
LITERT_QUANT = {"F32": "none", "Q8_0": "dynamic_int8", "Q4_0": "dynamic_int4_block32"}


def quant_class(model: str) -> str:
    m = _FORMAT.search(model)
    return m.group(1) if m else "F32"


def source_dir(model: str) -> str:
    return posixpath.dirname(model)


async def read_json(runner: Runner, path: str) -> dict[str, Any] | None:
    """A small JSON file on the host, or None when it is not there."""
    if not await runner.exists(path):
        return None
    with tempfile.TemporaryDirectory() as tmp:
        local = Path(tmp) / "f.json"
        await runner.get(path, local)
        data = json.loads(local.read_text())
    return data if isinstance(data, dict) else None


async def vocab_size(runner: Runner, model: str) -> int:
    config = await read_json(runner, posixpath.join(source_dir(model), "config.json"))
    if config and "vocab_size" in config:
        return int(config["vocab_size"])
    if isinstance(runner, LocalRunner) and model.endswith(".gguf") and Path(model).is_file():
        import gguf

        f = gguf.GGUFReader(model).fields["llama.vocab_size"]
        return int(f.parts[f.data[0]][0])
    raise ValueError(f"no config.json beside {model}: cannot tell its vocabulary")


def gguf_bytes_per_token(path: str) -> int | None:
    """Weight bytes a decode step reads from a GGUF: every matrix, one embedding row, the head."""
    if not Path(path).is_file():
        return None
    import gguf

    reader = gguf.GGUFReader(path)
    sizes = {t.name: int(t.n_bytes) for t in reader.tensors}
    embd = next((t for t in reader.tensors if t.name == "token_embd.weight"), None)
    emb = sizes.get("token_embd.weight", 0)
    emb_row = emb // int(embd.shape[-1]) if embd is not None else 0  # ggml shape: [dim, vocab]
    total = sum(v for k, v in sizes.items() if k != "token_embd.weight") + emb_row
    return total + (emb if "output.weight" not in sizes else 0)


async def source_digest(runner: Runner, model: str) -> str:
    """What identifies the source weights: the manifest's sha256 of the safetensors file."""
    manifest = await read_json(runner, posixpath.join(source_dir(model), "manifest.json"))
    files = (manifest or {}).get("files", {})
    if "model.safetensors" in files:
        return str(files["model.safetensors"]["sha256"])
    res = await runner.run(["sha256sum", posixpath.join(source_dir(model), "model.safetensors")], timeout=300)
    if not res.ok:
        raise ValueError(f"no model.safetensors beside {model}")
    return res.stdout.split()[0]


__all__ = ["CLASSES", "LITERT_QUANT", "MLX_BITS", "ORT_PRECISION", "gguf_bytes_per_token", "quant_class", "read_json",
           "source_digest", "source_dir", "vocab_size"]
