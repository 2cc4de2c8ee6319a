"""One fresh MLX trial (mlx-lm on MLX's CPU backend), run by the runtime's own environment's Python.

Standalone (imports nothing from orch). The model is the source HF folder, read by mlx-lm; the
quantization class is applied at load (before t = 0) with MLX's own quantizer: `bits` 8 or 4,
group size 32, like GGUF's Q8_0/Q4_0 blocks. Prefill is the prompt in chunks of `chunk_width`
through the KV cache, then greedy decode; `.item()` forces each token's evaluation, so every
stamp is the moment the token is on the CPU.
"""

import json
import sys
import time
from pathlib import Path
from typing import Any, NoReturn


def fail(kind: str, message: str) -> NoReturn:
    print("ORCH_ERROR " + json.dumps({"kind": kind, "message": message}), flush=True)
    sys.exit(3)


def main() -> None:
    job = json.loads(Path(sys.argv[1]).read_text())
    folder = Path(job["model"])
    if not (folder / "config.json").is_file() or not (folder / "model.safetensors").is_file():
        fail("model_not_found", f"no config.json + model.safetensors in {folder}")
    import mlx.core as mx  # type: ignore[import-not-found]
    import mlx.nn as nn  # type: ignore[import-not-found]
    from mlx_lm.models.cache import make_prompt_cache  # type: ignore[import-not-found]
    from mlx_lm.utils import load_model  # type: ignore[import-not-found]

    opts = job.get("options", {})
    mx.set_default_device(mx.cpu)
    model, _config = load_model(folder)
    bits = opts.get("bits")
    if bits:
        nn.quantize(model, group_size=int(opts.get("group_size", 32)), bits=int(bits))
    mx.eval(model.parameters())
    prompt = job["prompt_ids"]
    width = max(1, int(job["chunk_width"]) if int(job["chunk_width"]) > 1 else len(prompt))
    gens: list[dict[str, Any]] = []
    for _ in range(1 + job.get("warm", 0)):
        cache = make_prompt_cache(model)
        t0 = time.perf_counter_ns()
        for i in range(0, len(prompt), width):
            logits = model(mx.array(prompt[i:i + width])[None], cache=cache)
        token = int(mx.argmax(logits[0, -1]).item())
        t1 = time.perf_counter_ns()
        ids, times = [token], [t1 - t0]
        for _ in range(1, job["decode_tokens"]):
            logits = model(mx.array([[token]]), cache=cache)
            token = int(mx.argmax(logits[0, -1]).item())
            times.append(time.perf_counter_ns() - t0)
            ids.append(token)
        gens.append({"prefill_ns": t1 - t0, "ttft_ns": t1 - t0, "token_ids": ids, "token_times_ns": times})
    import importlib.metadata as meta

    out: dict[str, Any] = {
        "runtime": "mlx", "chunk_width": width, "threads": None, "generations": gens,  # MLX picks its own
        "version": f"mlx {meta.version('mlx')} (mlx-lm {meta.version('mlx-lm')}, CPU, Linux)",
        "info": {"bits": bits, "group_size": int(opts.get("group_size", 32)) if bits else None},
    }
    print("ORCH_RUNTIME " + json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
