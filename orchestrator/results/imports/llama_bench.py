"""llama-bench's outputs (llama.cpp tools/llama-bench): ``-o json``, ``-o jsonl`` and ``-o md`` (its default).

json and jsonl carry every field of llama-bench's ``test`` record (``test::get_fields()``: build, CPU,
model file, threads, n_prompt, n_gen, n_depth, test_time, avg_ts, stddev_ts, ...) plus each
repetition's ``samples_ts``; the markdown table carries only the printed columns (model type,
size, backend, threads, test such as ``pp512`` or ``tg128 @ d4096``, ``t/s`` as ``mean ± sd``) and
the build in its last line. A test is one measurement: llama-bench's average over its repetitions.
"""

from __future__ import annotations

import json
import re
from pathlib import PurePath
from typing import Any

from orchestrator.results.imports._common import (
    ImportInputError,
    Measurement,
    lines_of,
    number,
    phase_of,
    test_name,
)

__all__ = ["KINDS", "kind_of", "parse"]

KINDS = ("json", "jsonl", "md")
REQUIRED = ("n_prompt", "n_gen", "avg_ts")
SETTINGS = ("backends", "model_type", "model_size", "model_n_params", "n_batch", "n_ubatch", "n_threads", "type_k",
            "type_v", "n_gpu_layers", "flash_attn", "n_depth", "gpu_info")
TEST = re.compile(r"^(?:pp(?P<p>\d+))?\+?(?:tg(?P<g>\d+))?(?: @ d(?P<d>\d+))?$")
BUILD = re.compile(r"^build: (?P<commit>\S+) \((?P<number>-?\d+)\)\s*$")
TS = re.compile(r"^(?P<mean>[0-9.eE+-]+|nan|inf)\s*±\s*(?P<sd>[0-9.eE+-]+|nan|inf)$")


def kind_of(text: str) -> str | None:
    """json, jsonl or md, by the first thing in the file that llama-bench prints; None if none."""
    for line in lines_of(text):
        s = line.strip()
        if not s:
            continue
        if s.startswith("["):
            return "json"
        if s.startswith("{"):
            return "jsonl"
        if s.startswith("|") and _header(s) is not None:
            return "md"
    return None


def parse(text: str, path: str, kind: str | None = None) -> list[Measurement]:
    kind = kind or kind_of(text)
    if kind == "json":
        rows = _json_array(text, path)
    elif kind == "jsonl":
        rows = _json_lines(text, path)
    elif kind == "md":
        return _markdown(text, path)
    else:
        raise ImportInputError(path, 1, "not a llama-bench output (expected its -o json, -o jsonl or markdown table)")
    if not rows:
        raise ImportInputError(path, 1, "llama-bench output without a single test: nothing to import")
    return [_record(path, line, obj) for line, obj in rows]


def _line_at(text: str, pos: int) -> int:
    return text.count("\n", 0, pos) + 1


def _json_array(text: str, path: str) -> list[tuple[int, dict[str, Any]]]:
    """The array's objects with the line each starts on (a cut-off file: the line where it stops)."""
    decoder = json.JSONDecoder()
    pos = text.index("[") + 1
    rows: list[tuple[int, dict[str, Any]]] = []
    while True:
        while pos < len(text) and text[pos] in " \t\r\n,":
            pos += 1
        if pos >= len(text):
            why = ("llama-bench wrote no test (it failed before the first: a model it could not load?)" if not rows
                   else f"the JSON array ends without ']' after {len(rows)} test(s): llama-bench stopped before "
                        "it finished")
            raise ImportInputError(path, _line_at(text, pos), why)
        if text[pos] == "]":
            if text[pos + 1:].strip():
                raise ImportInputError(path, _line_at(text, pos + 1), "text after the JSON array")
            return rows
        try:
            obj, end = decoder.raw_decode(text, pos)
        except json.JSONDecodeError as exc:
            raise ImportInputError(path, exc.lineno, f"bad JSON: {exc.msg}") from None
        if not isinstance(obj, dict):
            raise ImportInputError(path, _line_at(text, pos), f"expected a test object, got {type(obj).__name__}")
        rows.append((_line_at(text, pos), obj))
        pos = end


def _json_lines(text: str, path: str) -> list[tuple[int, dict[str, Any]]]:
    rows: list[tuple[int, dict[str, Any]]] = []
    for i, line in enumerate(text.split("\n"), 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ImportInputError(path, i, f"bad JSON line (column {exc.colno}): {exc.msg}") from None
        if not isinstance(obj, dict):
            raise ImportInputError(path, i, f"expected a test object, got {type(obj).__name__}")
        rows.append((i, obj))
    return rows


def _record(path: str, line: int, obj: dict[str, Any]) -> Measurement:
    for name in REQUIRED:
        if name not in obj:
            raise ImportInputError(path, line, f"field {name!r} missing (not a llama-bench test record?)")
    n_prompt = int(number(path, line, "n_prompt", obj["n_prompt"]))
    n_gen = int(number(path, line, "n_gen", obj["n_gen"]))
    depth = int(number(path, line, "n_depth", obj.get("n_depth", 0)))
    samples = obj.get("samples_ts", [])
    if not isinstance(samples, list):
        raise ImportInputError(path, line, f"field 'samples_ts': expected a list, got {samples!r}")
    sd = obj.get("stddev_ts")
    model = obj.get("model_filename") or obj.get("model_type")
    device = " + ".join(str(obj[k]) for k in ("cpu_info", "gpu_info") if obj.get(k)) or None
    build = f"{obj['build_commit']} ({obj.get('build_number', '?')})" if obj.get("build_commit") else None
    return Measurement(
        source_format="llama-bench", line=line, runtime="llamacpp", test=test_name(n_prompt, n_gen, depth),
        phase=phase_of(n_prompt, n_gen), n_prompt=n_prompt, n_gen=n_gen,
        tok_s=number(path, line, "avg_ts", obj["avg_ts"]),
        tok_s_stddev=number(path, line, "stddev_ts", sd) if sd is not None else None,
        samples_tok_s=tuple(number(path, line, "samples_ts", s) for s in samples),
        model=PurePath(str(model)).name if model else None, device=device, build=build,
        measured_at=str(obj["test_time"]) if obj.get("test_time") else None,
        settings={k: str(obj[k]) for k in SETTINGS if obj.get(k) not in (None, "")},
    ).check(path)


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def _header(line: str) -> list[str] | None:
    cells = _cells(line)
    return cells if "test" in cells and "t/s" in cells else None


def _markdown(text: str, path: str) -> list[Measurement]:
    lines = lines_of(text)
    head_at = next((i for i, s in enumerate(lines) if s.strip().startswith("|") and _header(s)), None)
    if head_at is None:
        raise ImportInputError(path, 1, "no llama-bench table (a header row with 'test' and 't/s')")
    head = _cells(lines[head_at])
    build = next((f"{m['commit']} ({m['number']})" for s in lines if (m := BUILD.match(s.strip()))), None)
    out: list[Measurement] = []
    for i in range(head_at + 1, len(lines)):
        s = lines[i].strip()
        if not s.startswith("|"):
            break  # the table ends at its first line that is not a row
        cells = _cells(s)
        if all(set(c) <= set("-:") for c in cells):
            continue  # the |---|---:| rule under the header
        if len(cells) != len(head):
            raise ImportInputError(path, i + 1, f"row has {len(cells)} cells, the header {len(head)}")
        row = dict(zip(head, cells, strict=True))
        test = TEST.match(row["test"])
        if test is None or not (test["p"] or test["g"]):
            raise ImportInputError(path, i + 1, f"column 'test': {row['test']!r} is not ppN, tgN or ppN+tgN")
        ts = TS.match(row["t/s"])
        if ts is None:
            raise ImportInputError(path, i + 1, f"column 't/s': {row['t/s']!r} is not 'mean ± sd'")
        n_prompt, n_gen, depth = int(test["p"] or 0), int(test["g"] or 0), int(test["d"] or 0)
        out.append(Measurement(
            source_format="llama-bench", line=i + 1, runtime="llamacpp", test=test_name(n_prompt, n_gen, depth),
            phase=phase_of(n_prompt, n_gen), n_prompt=n_prompt, n_gen=n_gen, tok_s=float(ts["mean"]),
            tok_s_stddev=float(ts["sd"]), model=row.get("model") or None, build=build,
            settings={k: v for k, v in row.items() if k not in ("model", "test", "t/s") and v},
        ).check(path))
    if not out:
        raise ImportInputError(path, head_at + 1, "llama-bench table without a single test row: nothing to import")
    return out
