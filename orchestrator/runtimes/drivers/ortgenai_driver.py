"""One fresh ONNX Runtime GenAI trial, run by the runtime's own environment's Python.

Standalone (imports nothing from orch). Reads a job JSON (argv[1]); the model is a folder made by
`onnxruntime_genai.models.builder`. Threads: the session's intra-op threads are set through a
config overlay (GenAI defaults to one thread). End of sequence never stops the generation (the
harness decodes a fixed count): min_length = max_length. Prefill is the whole prompt in one pass
(GenAI has no chunk control): token 0 is the first generate_next_token after append_tokens; every
later generate_next_token is one decode step, stamped on arrival.
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
    folder = job["model"]
    if not os.path.isfile(os.path.join(folder, "genai_config.json")):
        fail("model_not_found", "no genai_config.json in " + folder)
    import onnxruntime_genai as og  # type: ignore[import-not-found]

    threads = job.get("threads") or os.cpu_count() or 1
    prompt = job["prompt_ids"]
    length = len(prompt) + job["decode_tokens"]
    config = og.Config(folder)
    overlay = {"model": {"decoder": {"session_options": {"intra_op_num_threads": threads,
                                                         "inter_op_num_threads": 1}}}}
    config.overlay(json.dumps(overlay))
    model = og.Model(config)
    gens: list[dict[str, Any]] = []
    for _ in range(1 + job.get("warm", 0)):
        params = og.GeneratorParams(model)
        params.set_search_options(max_length=length, min_length=length, do_sample=False, batch_size=1)
        generator = og.Generator(model, params)
        t0 = time.perf_counter_ns()
        generator.append_tokens(prompt)
        generator.generate_next_token()
        ids = [int(generator.get_next_tokens()[0])]
        t1 = time.perf_counter_ns()
        times = [t1 - t0]
        for _ in range(1, job["decode_tokens"]):
            generator.generate_next_token()
            ids.append(int(generator.get_next_tokens()[0]))
            times.append(time.perf_counter_ns() - t0)
        del generator
        gens.append({"prefill_ns": t1 - t0, "ttft_ns": t1 - t0, "token_ids": ids, "token_times_ns": times})
    import onnxruntime  # type: ignore[import-not-found]

    out: dict[str, Any] = {
        "runtime": "ort-genai", "chunk_width": len(prompt), "threads": threads, "generations": gens,
        "version": f"onnxruntime-genai {og.__version__} (onnxruntime {onnxruntime.__version__})",
        "info": {},
    }
    print("ORCH_RUNTIME " + json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
