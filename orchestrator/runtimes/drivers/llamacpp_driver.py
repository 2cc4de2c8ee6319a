"""One fresh llama.cpp trial (llama-cpp-python), run by the runtime's own environment's Python.

Standalone on purpose: it imports nothing from orch, so it runs in the isolated environment on
any host. Reads a job JSON (argv[1]), loads the model, then for each generation: t = 0 at prompt
submission, prefill in batches of `chunk_width` tokens (its last logits give token 0), then greedy
decode one token at a time, each stamped on arrival (ns, one monotonic clock). Prints one line
`ORCH_RUNTIME {json}` at the end; a fault it can name is one line `ORCH_ERROR {json}` and exit 3.
"""

import json
import os
import sys
import time
from pathlib import Path
from typing import Any, NoReturn


def fail(kind: str, message: str) -> NoReturn:
    print("ORCH_ERROR " + json.dumps({"kind": kind, "message": message}), flush=True)
    sys.exit(3)


def main() -> None:
    job = json.loads(Path(sys.argv[1]).read_text())
    if not os.path.isfile(job["model"]):
        fail("model_not_found", "no model file at " + job["model"])
    import llama_cpp  # type: ignore[import-not-found]
    import numpy as np

    opts = job.get("options", {})
    threads = job.get("threads") or os.cpu_count() or 1
    batch = int(opts.get("n_batch", job["chunk_width"]))
    params = dict(
        model_path=job["model"], n_ctx=len(job["prompt_ids"]) + job["decode_tokens"] + 8, n_threads=threads,
        n_threads_batch=threads, n_batch=batch, n_ubatch=batch, verbose=bool(opts.get("verbose", True)),
        seed=0, logits_all=False,
    )
    # The CPU repack (extra buffer types) path faults on AMX-capable CPUs for quantized models:
    # off unless the plan turns it on.
    if not opts.get("repack", False):
        params["use_extra_bufts"] = False
    try:
        llm = llama_cpp.Llama(**params)
    except TypeError as exc:  # an older binding without use_extra_bufts
        if "use_extra_bufts" not in str(exc):
            raise
        params.pop("use_extra_bufts")
        llm = llama_cpp.Llama(**params)
    except ValueError as exc:
        fail("bad_model", str(exc))
    vocab = llm.n_vocab()
    prompt = job["prompt_ids"]
    if max(prompt) >= vocab:
        fail("bad_spec", f"prompt id {max(prompt)} is outside the vocabulary (0..{vocab - 1})")

    def last_logits() -> Any:
        return np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(llm.ctx, -1), shape=(vocab,))

    gens: list[dict[str, Any]] = []
    for _ in range(1 + job.get("warm", 0)):
        llm.reset()
        llm._ctx.memory_clear(True)
        t0 = time.perf_counter_ns()
        llm.eval(prompt)
        token = int(np.argmax(last_logits()))
        t1 = time.perf_counter_ns()
        ids, times = [token], [t1 - t0]
        for _ in range(1, job["decode_tokens"]):
            llm.eval([token])
            token = int(np.argmax(last_logits()))
            times.append(time.perf_counter_ns() - t0)
            ids.append(token)
        gens.append({"prefill_ns": t1 - t0, "ttft_ns": t1 - t0, "token_ids": ids, "token_times_ns": times})
    out: dict[str, Any] = {
        "runtime": "llamacpp", "version": "llama-cpp-python " + llama_cpp.__version__, "threads": threads,
        "chunk_width": batch, "generations": gens,
        "info": {"system": llama_cpp.llama_print_system_info().decode(), "repack": bool(opts.get("repack", False))},
    }
    print("ORCH_RUNTIME " + json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
