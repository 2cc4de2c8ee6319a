"""``python -m mlx_lm.benchmark`` output (mlx-lm's mlx_lm/benchmark.py, printed by its rank 0)::

    Running warmup..
    Timing with prompt_tokens=512, generation_tokens=1024, batch_size=1.
    Trial 1:  prompt_tps=1234.567, generation_tps=89.012, peak_memory=1.234, total_time=12.345
    ...
    Averages: prompt_tps=..., generation_tps=..., peak_memory=...

Two measurements: prefill (``pp<prompt_tokens>``, prompt_tps) and decode (``tg<generation_tokens>``,
generation_tps), each the mean of the trials (the Averages line, checked against them) with the
trials as samples. mlx-lm names neither the model nor the machine: ``orch import --model/--device``
say them. A run that stopped (a traceback, no Averages line) is refused.
"""

from __future__ import annotations

import re

from orchestrator.results.imports._common import ImportInputError, Measurement, lines_of, stddev

__all__ = ["looks_like", "parse"]

TIMING = re.compile(r"Timing with prompt_tokens=(?P<p>\d+), generation_tokens=(?P<g>\d+), batch_size=(?P<b>\d+)")
TRIAL = re.compile(r"^Trial (?P<i>\d+):\s+(?P<kv>.*)$")
AVERAGES = re.compile(r"^Averages:\s+(?P<kv>.*)$")
PAIR = re.compile(r"(\w+)=([-+0-9.eE]+|nan|inf)")
KEYS = ("prompt_tps", "generation_tps", "peak_memory")


def looks_like(text: str) -> bool:
    return any(TIMING.search(s) for s in lines_of(text)) or (
        any(TRIAL.match(s) and "prompt_tps=" in s for s in lines_of(text)))


def _pairs(path: str, line: int, kv: str) -> dict[str, float]:
    pairs = {k: float(v) for k, v in PAIR.findall(kv)}
    missing = [k for k in KEYS if k not in pairs]
    if missing:
        raise ImportInputError(path, line, f"{', '.join(missing)} missing from {kv.strip()!r}")
    return pairs


def parse(text: str, path: str) -> list[Measurement]:
    lines = lines_of(text)
    timing = next(((i + 1, m) for i, s in enumerate(lines) if (m := TIMING.search(s))), None)
    if timing is None:
        raise ImportInputError(path, 1, "no 'Timing with prompt_tokens=..., generation_tokens=..., batch_size=...' "
                                        "line: not an mlx_lm.benchmark output")
    at, m = timing
    p, g, batch = int(m["p"]), int(m["g"]), int(m["b"])
    trials: list[tuple[int, dict[str, float]]] = []
    averages: tuple[int, dict[str, float]] | None = None
    for i in range(at, len(lines)):
        s = lines[i].strip()
        if t := TRIAL.match(s):
            if int(t["i"]) != len(trials) + 1:
                raise ImportInputError(path, i + 1, f"trial {t['i']} follows trial {len(trials)}")
            trials.append((i + 1, _pairs(path, i + 1, t["kv"])))
        elif a := AVERAGES.match(s):
            averages = (i + 1, _pairs(path, i + 1, a["kv"]))
        elif s.startswith("Traceback (most recent call last)"):
            last = next((x.strip() for x in reversed(lines) if x.strip()), s)
            raise ImportInputError(path, i + 1, f"mlx_lm.benchmark failed: {last}")
    if not trials:
        raise ImportInputError(path, at, "no 'Trial N:' line after the timing line: the benchmark did not run")
    if averages is None:
        raise ImportInputError(path, trials[-1][0], f"no 'Averages:' line after trial {len(trials)}: the benchmark "
                                                    "stopped before it finished")
    line, avg = averages
    out = []
    suffix = f" x b{batch}" if batch > 1 else ""
    for key, n_prompt, n_gen, phase in (("prompt_tps", p, 0, "prefill"), ("generation_tps", 0, g, "decode")):
        samples = [t[key] for _, t in trials]
        mean = sum(samples) / len(samples)
        if abs(mean - avg[key]) > 0.0015 + 1e-6 * abs(mean):  # both printed to 3 decimals
            raise ImportInputError(path, line, f"{key}: the average {avg[key]} is not the mean of the "
                                               f"{len(samples)} trials ({mean:.3f}): an edited or mixed file?")
        out.append(Measurement(
            source_format="mlx-lm", line=line, runtime="mlx", test=f"{'pp' if n_prompt else 'tg'}"
                                                                   f"{n_prompt or n_gen}{suffix}",
            phase=phase, n_prompt=n_prompt, n_gen=n_gen, tok_s=avg[key], tok_s_stddev=stddev(samples),
            samples_tok_s=tuple(samples),
            settings={"prompt_tokens": str(p), "generation_tokens": str(g), "batch_size": str(batch),
                      "trials": str(len(trials)), "peak_memory_gb": f"{avg['peak_memory']:.3f}"},
        ).check(path))
    return out
