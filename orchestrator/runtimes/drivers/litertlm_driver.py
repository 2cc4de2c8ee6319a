"""One fresh LiteRT-LM trial (the litert-lm-api engine on its CPU backend), run by the runtime's own Python.

Standalone (imports nothing from orch). Reads a job JSON (argv[1]); the model is a folder holding
``model.litertlm`` made by ``litertlm_convert.py``. The real LiteRT-LM engine runs it: an Engine
(CPU backend, `threads` XNNPACK threads, float32 activations unless `options.activations` says
fp16, LiteRT-LM's CPU default) and one Session per generation, greedy sampler, no prompt template.

Token ids: LiteRT-LM sessions take and return text, so the converter packed a word-level tokenizer
in which id i is the word ``w<i>``. The prompt ids are written as words, and the engine's own
tokenizer must give them back exactly (checked every trial: an id outside the vocabulary is a
bad_spec, not a silent <unk>); each streamed chunk is read back into ids the same way. The stop
token is an id outside the vocabulary, so end of sequence never stops the generation and
`max_output_tokens` = decode_tokens gives exactly that many tokens.

Timing: t0 just before `run_prefill` (the whole prompt in one call: LiteRT-LM picks its own prefill
signature, so the chunk width is the prompt length). LiteRT-LM 0.18's stream delivers each token's
text one decode step late: chunk k arrives right after token k+1 is computed, and the last chunk is
flushed with the one before it (measured: the final gap is ~0 while every other gap is one step;
with 2 tokens both arrive together). So token k >= 1 is stamped by the callback that delivered chunk
k-1 (stamped inside the engine's callback thread), and token 0, which no callback marks, by the
engine's own benchmark clock: t0 + its time to first token (its prefill start -> first token
sampled; it starts a few microseconds after t0, so token 0 is if anything early). prefill_ns =
ttft_ns = token 0's time. info has the raw stream stamps' last-gap ratio that shows the lag, and
the engine's own decode tok/s for the same generation as a cross-check.

Caches: XNNPACK's packed-weight cache (``xnnpack_cache``) is written beside the model, in
``<model>/cache`` (the engine's cache_dir), never in the home folder; `clear_caches` naming it
empties that folder before the engine loads, and info says whether it was cold.
"""

import itertools
import json
import os
import shutil
import sys
import threading
import time
from pathlib import Path
from typing import Any, NoReturn

CACHES = ("xnnpack_cache",)


def fail(kind: str, message: str) -> NoReturn:
    print("ORCH_ERROR " + json.dumps({"kind": kind, "message": message}), flush=True)
    sys.exit(3)


def words_to_ids(text: str) -> list[int]:
    out = []
    for w in text.split():
        if not (w.startswith("w") and w[1:].isdigit()):
            fail("bad_output", f"LiteRT-LM produced {w!r}, not a word of the id tokenizer")
        out.append(int(w[1:]))
    return out


def new_session(engine: Any, decode_tokens: int) -> Any:
    """A session with a greedy sampler and no prompt template and a fixed output length, through
    the binding's C API (the Python wrapper hides the sampler's k behind a config object)."""
    from litert_lm._ffi import SamplerType  # type: ignore[import-not-found]
    from litert_lm.session import Session  # type: ignore[import-not-found]

    lib = engine._lib
    config = lib.litert_lm_session_config_create()
    lib.litert_lm_session_config_set_apply_prompt_template(config, False)
    # 0.18's CPU engine implements only its top-p sampler ("Sampler type: GREEDY/TOP_K not implemented
    # yet"); top-k 1 before the top-p cut is the argmax.
    params = lib.litert_lm_sampler_params_create(SamplerType.TOP_P)
    lib.litert_lm_sampler_params_set_top_k(params, 1)
    lib.litert_lm_sampler_params_set_top_p(params, 1.0)
    lib.litert_lm_sampler_params_set_temperature(params, 1.0)
    lib.litert_lm_sampler_params_set_seed(params, 0)
    lib.litert_lm_session_config_set_sampler_params(config, params)
    lib.litert_lm_sampler_params_delete(params)
    lib.litert_lm_session_config_set_max_output_tokens(config, int(decode_tokens))
    ptr = lib.litert_lm_engine_create_session(engine._engine_ptr, config)
    lib.litert_lm_session_config_delete(config)
    if not ptr:
        fail("engine_failure", "LiteRT-LM could not create a session")
    return Session(lib, ptr, engine=engine)


def decode(session: Any) -> tuple[list[int], list[int], int]:
    """Stream the decode; (ids, each chunk's arrival in perf_counter ns per id, the most ids one chunk carried)."""
    from litert_lm._ffi import STREAM_CALLBACK_TYPE

    lib = session._lib
    chunks: list[tuple[int, str]] = []
    done: list[str | None] = []
    finished = threading.Event()  # the main thread sleeps on it: no polling steals a core from the engine

    def on_chunk(_data: Any, chunk: Any) -> None:
        now = time.perf_counter_ns()
        err = lib.litert_lm_stream_chunk_get_error(chunk)
        if err:
            done.append(err.decode("utf-8", "replace"))
            finished.set()
            return
        text = lib.litert_lm_stream_chunk_get_text(chunk)
        chunks.append((now, text.decode("utf-8") if text else ""))
        if lib.litert_lm_stream_chunk_is_final(chunk):
            done.append(None)
            finished.set()

    callback = STREAM_CALLBACK_TYPE(on_chunk)
    if lib.litert_lm_session_run_decode_async(session._ptr, callback, None) != 0:
        fail("engine_failure", "litert_lm_session_run_decode_async failed")
    finished.wait()
    if done[0] and "Max number of tokens" not in done[0] and "CANCELLED" not in done[0]:
        fail("engine_failure", done[0][:300])
    ids: list[int] = []
    stamps: list[int] = []
    most = 0
    for stamp, text in chunks:
        got = words_to_ids(text)
        most = max(most, len(got))
        ids += got
        stamps += [stamp] * len(got)
    del callback
    return ids, stamps, most


def generation(engine: Any, text: str, decode_tokens: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """One timed generation in a fresh session: (the generation, what it says about the timing)."""
    session = new_session(engine, decode_tokens)
    t0 = time.perf_counter_ns()
    session.run_prefill([text])
    prefilled = time.perf_counter_ns()
    ids, stamps, most = decode(session)
    bench = session.get_benchmark_info()
    session.close()
    if len(ids) != decode_tokens:
        fail("bad_output", f"LiteRT-LM generated {len(ids)} tokens, {decode_tokens} asked for")
    first = t0 + round(bench.time_to_first_token_in_second * 1e9)
    times = [first, *stamps[:-1]]  # the stream's one-token lag undone (see the module docstring)
    if any(b < a for a, b in itertools.pairwise(times)):
        fail("bad_output", "LiteRT-LM's first-token clock is later than the stream's next token")
    gaps = [b - a for a, b in itertools.pairwise(stamps)]
    lag = gaps[-1] / sorted(gaps)[len(gaps) // 2] if len(gaps) > 2 and min(gaps[:-1]) > 0 else None
    rel = [t - t0 for t in times]
    return ({"prefill_ns": rel[0], "ttft_ns": rel[0], "token_ids": ids, "token_times_ns": rel},
            {"prefill_call_ns": prefilled - t0, "last_stream_gap_vs_median": lag, "tokens_per_chunk_max": most,
             "engine_decode_tok_s": bench.last_decode_tokens_per_second,
             "engine_prefill_tok_s": bench.last_prefill_tokens_per_second})


def main() -> None:
    job = json.loads(Path(sys.argv[1]).read_text())
    folder = Path(job["model"])
    model = folder / "model.litertlm"
    if not model.is_file():
        fail("model_not_found", f"no model.litertlm in {folder}")
    cache = folder / "cache"
    if any(c in CACHES for c in job.get("clear_caches", [])):
        shutil.rmtree(cache, ignore_errors=True)
    cache.mkdir(exist_ok=True)
    cold = not any(cache.glob("*.xnnpack_cache"))
    import litert_lm  # type: ignore[import-not-found]

    litert_lm.set_min_log_severity(litert_lm.LogSeverity.WARNING)
    opts = job.get("options", {})
    activations = str(opts.get("activations", "fp32"))
    act = {"fp32": litert_lm.ActivationDataType.FLOAT32, "fp16": litert_lm.ActivationDataType.FLOAT16}.get(activations)
    if act is None:
        fail("bad_spec", f"activations {activations!r}: fp32 or fp16")
    threads = job.get("threads") or os.cpu_count() or 1
    prompt = [int(t) for t in job["prompt_ids"]]
    try:
        engine = litert_lm.Engine(str(model), litert_lm.Backend.CPU(thread_count=threads), cache_dir=str(cache),
                                  activation_data_type=act, enable_benchmark=True)
    except RuntimeError as exc:
        fail("bad_model", str(exc))
    text = " ".join(f"w{t}" for t in prompt)
    if (got := engine.tokenize(text)) != prompt:
        bad = next((p for g, p in zip(got, prompt, strict=False) if g != p), prompt[-1])
        fail("bad_spec", f"prompt id {bad} is not in the model's vocabulary: LiteRT-LM's tokenizer read the prompt "
                         f"as {len(got)} other ids")
    gens: list[dict[str, Any]] = []
    timing: list[dict[str, Any]] = []
    for _ in range(1 + job.get("warm", 0)):
        gen, how = generation(engine, text, int(job["decode_tokens"]))
        gens.append(gen)
        timing.append(how)
    import importlib.metadata as meta

    out: dict[str, Any] = {
        "runtime": "litert-lm", "chunk_width": len(prompt), "threads": threads, "generations": gens,
        "version": f"litert-lm-api {meta.version('litert-lm-api')} (CPU, XNNPACK)",
        "info": {"activations": activations, "xnnpack_cache": "cold" if cold else "warm", "timing": timing},
    }
    print("ORCH_RUNTIME " + json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
