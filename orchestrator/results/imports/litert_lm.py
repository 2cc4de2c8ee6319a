"""``litert-lm benchmark MODEL`` output (the litert-lm package's litert_lm_cli/commands/benchmark.py)::

    Benchmarking model: <model> (<path>)
    Backend                    : cpu
    Number of tokens in prefill: 256
    Number of tokens in decode : 256
    ...
    ----- Results -----
    Prefill speed:        1234.56 tokens/s
    Decode speed:         78.90 tokens/s
    Init time:            1.2345 s
    Time to first token:  0.2345 s

Two measurements: prefill (``pp<n>``) and decode (``tg<n>``), each LiteRT-LM's mean over its
``--runs``. The tool exits 0 when it benchmarked nothing: it prints ``Could not find <model>
locally in <path>.`` for a missing model, or ``An error occurred during benchmarking`` and a
traceback. Both are kept as one failed row each (``failure_kind`` model_not_found or
benchmark_error, the tool's words in ``failure``, no speed): a record that the run failed, never a
measurement. A file cut before its results is refused (a located error, exit 2).
"""

from __future__ import annotations

import re
from pathlib import PurePath

from orchestrator.results.imports._common import ImportInputError, Measurement, failed_run, lines_of

__all__ = ["looks_like", "parse"]

MODEL = re.compile(r"^Benchmarking model: (?P<name>.*?)(?: \((?P<path>[^()]*)\))?$")
FIELD = re.compile(r"^(?P<key>[A-Za-z][A-Za-z ]*?)\s*:\s*(?P<value>.*)$")
SPEED = re.compile(r"^(?P<what>Prefill|Decode) speed:\s+(?P<v>[-+0-9.eE]+|nan|inf) tokens/s$")
MISSING = re.compile(r"^Could not find (?P<model>.*) locally in (?P<path>.*?)\.?$")
FAILED = "An error occurred during benchmarking"
RESULTS = "----- Results -----"


def looks_like(text: str) -> bool:
    lines = lines_of(text)
    return any(s.startswith("Benchmarking model: ") or s.strip() == RESULTS or MISSING.match(s) for s in lines)


def parse(text: str, path: str) -> list[Measurement]:
    lines = [s.strip() for s in lines_of(text)]
    head = next(((i + 1, m) for i, s in enumerate(lines) if (m := MODEL.match(s))), None)
    for i, s in enumerate(lines):
        if m := MISSING.match(s):
            return [failed_run("litert-lm", "litert-lm", i + 1, "model_not_found",
                               f"could not find the model {m['model']} (in {m['path']}); the tool still exited 0",
                               model=PurePath(m["model"]).name, settings={"model_path": m["model"]}).check(path)]
        if s == FAILED:
            last = next((x for x in reversed(lines[i + 1:]) if x), "no detail")
            name = head[1]["name"] if head else None
            return [failed_run("litert-lm", "litert-lm", i + 1, "benchmark_error",
                               f"benchmarking failed: {last}; the tool still exited 0", model=name).check(path)]
    if head is None:
        raise ImportInputError(path, 1, "no 'Benchmarking model:' line: not a litert-lm benchmark output")
    fields: dict[str, str] = {}
    speeds: dict[str, tuple[int, float]] = {}
    results_at = None
    for i in range(head[0], len(lines)):
        s = lines[i]
        if s == RESULTS:
            results_at = i + 1
        elif sp := SPEED.match(s):
            speeds[sp["what"]] = (i + 1, float(sp["v"]))
        elif (f := FIELD.match(s)) and results_at is None:
            fields[f["key"].strip()] = f["value"].strip()
    if results_at is None or len(speeds) < 2:
        raise ImportInputError(path, results_at or len(lines), "no 'Prefill speed' and 'Decode speed' under "
                                                               f"'{RESULTS}': the benchmark did not finish")
    counts = {}
    for key, name in (("Number of tokens in prefill", "prefill"), ("Number of tokens in decode", "decode")):
        if not fields.get(key, "").isdigit():
            raise ImportInputError(path, head[0], f"{key!r} missing or not a count: {fields.get(key)!r}")
        counts[name] = int(fields[key])
    name, model_path = head[1]["name"], head[1]["path"]
    settings = {k.lower().replace(" ", "_"): v for k, v in fields.items() if not k.startswith("Number of tokens")}
    settings |= {k: v for k, v in (("model_path", model_path),) if v}
    for extra in ("Init time", "Time to first token"):
        got = next((s.split(":", 1)[1].strip() for s in lines if s.startswith(extra + ":")), None)
        if got:
            settings[extra.lower().replace(" ", "_")] = got
    out = []
    for what, n_prompt, n_gen, phase in (("Prefill", counts["prefill"], 0, "prefill"),
                                         ("Decode", 0, counts["decode"], "decode")):
        line, value = speeds[what]
        out.append(Measurement(
            source_format="litert-lm", line=line, runtime="litert-lm",
            test=f"pp{n_prompt}" if n_prompt else f"tg{n_gen}", phase=phase, n_prompt=n_prompt, n_gen=n_gen,
            tok_s=value, model=name or (PurePath(model_path).name if model_path else None), settings=settings,
        ).check(path))
    return out
