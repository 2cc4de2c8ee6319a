"""What every parser returns (one measurement per row) and how it refuses (a located error)."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

__all__ = ["ImportInputError", "Measurement", "failed_run", "test_name"]

ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


class ImportInputError(ValueError):
    """A file that cannot be imported: ``FILE:LINE: what``. The CLI prints it and exits 2."""

    def __init__(self, path: str, line: int, what: str):
        self.path, self.line, self.what = path, line, what
        super().__init__(f"{path}:{line}: {what}")


@dataclass(frozen=True)
class Measurement:
    """One speed another tool reported: its own average over its own repetitions, taken however that
    tool takes them (no settle gate, no interleaving, no fresh process per repetition)."""

    source_format: str  # llama-bench | mlx-lm | litert-lm
    line: int  # where in the file it was read
    runtime: str  # orch's runtime name: llamacpp | mlx | litert-lm
    test: str  # llama-bench's words: pp512 (prefill), tg128 (decode), pp512+tg128, "... @ d4096"
    phase: str  # prefill | decode | prefill+decode
    n_prompt: int
    n_gen: int
    tok_s: float
    tok_s_stddev: float | None = None
    samples_tok_s: tuple[float, ...] = ()
    model: str | None = None
    device: str | None = None
    build: str | None = None  # the tool's build or version, when the file says it
    measured_at: str | None = None  # ISO 8601, when the file says it
    settings: dict[str, str] = field(default_factory=dict)  # the tool's own knobs, as it printed them
    # A run the tool reported as failed (and still exited 0): kept as a typed row, with no speed.
    failure_kind: str | None = None  # model_not_found | benchmark_error
    failure: str | None = None  # what the tool said

    @property
    def failed(self) -> bool:
        return self.failure_kind is not None

    def check(self, path: str) -> Measurement:
        """Refuse a speed that is no speed (zero, negative, NaN): the tool measured nothing. A failed run
        carries no speed at all."""
        if self.failed:
            if not math.isnan(self.tok_s):
                raise ImportInputError(path, self.line, "a failed run carries no speed")
            return self
        if not (math.isfinite(self.tok_s) and self.tok_s > 0):
            raise ImportInputError(path, self.line, f"{self.test}: tok/s {self.tok_s} is no measurement "
                                                    "(the tool reported no speed)")
        return self


def failed_run(source_format: str, runtime: str, line: int, kind: str, failure: str, model: str | None = None,
               settings: dict[str, str] | None = None) -> Measurement:
    """A tool's run that measured nothing and said so (test "benchmark", no speed, never a measurement)."""
    return Measurement(source_format=source_format, line=line, runtime=runtime, test="benchmark", phase="none",
                       n_prompt=0, n_gen=0, tok_s=math.nan, model=model, settings=settings or {},
                       failure_kind=kind, failure=failure)


def test_name(n_prompt: int, n_gen: int, depth: int = 0) -> str:
    """llama-bench's name of a test (its markdown printer's rule)."""
    if n_prompt > 0 and n_gen == 0:
        name = f"pp{n_prompt}"
    elif n_gen > 0 and n_prompt == 0:
        name = f"tg{n_gen}"
    else:
        name = f"pp{n_prompt}+tg{n_gen}"
    return f"{name} @ d{depth}" if depth > 0 else name


def phase_of(n_prompt: int, n_gen: int) -> str:
    return "prefill" if n_gen == 0 else "decode" if n_prompt == 0 else "prefill+decode"


def lines_of(text: str) -> list[str]:
    """The file's lines without terminal colours (a tool that printed to a terminal, then was copied)."""
    return [ANSI.sub("", line).rstrip("\r") for line in text.split("\n")]


def number(path: str, line: int, name: str, value: object) -> float:
    """A numeric field, or a located error naming it."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise ImportInputError(path, line, f"field {name!r}: expected a number, got {value!r}")
    try:
        return float(value)
    except ValueError:
        raise ImportInputError(path, line, f"field {name!r}: expected a number, got {value!r}") from None


def stddev(values: list[float]) -> float | None:
    """Sample standard deviation (n - 1), as llama-bench reports it; None under two values."""
    if len(values) < 2:
        return None
    mean = sum(values) / len(values)
    return math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))
