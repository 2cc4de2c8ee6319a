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

_KEEP: list[Any] = []


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
        n_threads_batch=threads, n_batch=batch, n_ubatch=batch, verbose=True,
        seed=0, logits_all=False,
    )
    # The CPU repack (extra buffer types) path faults on AMX-capable CPUs for quantized models:
    # off unless the plan turns it on. The binding has no argument for it: set it on the model
    # parameters it starts from.
    repack = bool(opts.get("repack", False))
    low = llama_cpp.llama_cpp
    defaults = low.llama_model_default_params

    def model_params() -> Any:
        p = defaults()
        p.use_extra_bufts = repack
        return p

    low.llama_model_default_params = model_params
    # Keep llama.cpp's warnings and errors on stderr (the failure tail), not its per-token debug
    # lines; `verbose=False` would also swallow the load errors. ggml's levels: 1 debug, 2 info,
    # 3 warn, 4 error, 5 continues the previous line.
    shown = 1 if opts.get("verbose") else 3
    last = [0]

    @low.llama_log_callback
    def log(level: int, text: bytes, _user: Any) -> None:
        if level != 5:
            last[0] = level
        if last[0] >= shown:
            sys.stderr.write(text.decode("utf-8", "replace"))

    low.llama_log_set(log, None)
    _KEEP.append(log)  # the C side calls it until exit: it must outlive main()
    from llama_cpp import llama as binding

    binding.set_verbose = lambda _verbose: None

    try:
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
        llm._ctx.kv_cache_clear()
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
        "info": {"system": llama_cpp.llama_print_system_info().decode(), "repack": repack,
                 "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY", "")},
    }
    print("ORCH_RUNTIME " + json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
