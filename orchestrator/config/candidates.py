"""What we know about targets before measuring: the candidate table and the bandwidth ceilings.

`configs/candidates.yaml` is the seed's ranked list of models to port next; `configs/ceilings.yaml`
says what clean weight streams reach on each chip class. Both load with located errors.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, field_validator, model_validator

from orchestrator.config.base import Name, Strict
from orchestrator.config.loader import read_yaml, validate

Gate = Literal["none", "audit_first"]
MAX_GB_S = 100_000.0  # as a sim device's bandwidth: ten times the fastest HBM


class Range(Strict):
    """A figure the seed gives as a range ("19-20 tok/s"); a single number is low == high."""

    low: float = Field(gt=0, le=1e6)
    high: float = Field(gt=0, le=1e6)

    @model_validator(mode="after")
    def _ordered(self) -> Range:
        if self.high < self.low:
            raise ValueError("high must be >= low")
        return self

    @property
    def mid(self) -> float:
        return (self.low + self.high) / 2


def _as_range(value: object) -> object:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return {"low": value, "high": value}
    if isinstance(value, list | tuple) and len(value) == 2:
        return {"low": value[0], "high": value[1]}
    return value


class Candidate(Strict):
    rank: int = Field(ge=1, le=10_000, description="The seed's rank")
    id: Name
    target: str
    models: list[str] = Field(min_length=1, description="Regexes matched against a plan's `model`")
    device_classes: list[str] = Field(min_length=1, description="Chip classes the figures are for")
    current_runtime: str = Field(description="The runtime the current tok/s is measured on")
    target_runtime: str = "rawloop-metal"
    current_tok_s: Range | None = None
    expected_tok_s: Range | None = None
    expected_note: str = ""
    why: str
    gate: Gate = "none"
    gate_note: str = ""

    _ranges = field_validator("current_tok_s", "expected_tok_s", mode="before")(_as_range)

    @field_validator("models")
    @classmethod
    def _regexes(cls, models: list[str]) -> list[str]:
        for m in models:
            try:
                re.compile(m)
            except re.error as exc:
                raise ValueError(f"bad regex {m!r}: {exc}") from None
        return models

    def matches(self, model: str, chip_class: str | None) -> bool:
        return chip_class in self.device_classes and any(re.search(m, model, re.IGNORECASE) for m in self.models)


class NonCandidate(Strict):
    target: str
    reason: str


class CandidateTable(Strict):
    source: str = ""
    candidates: list[Candidate] = Field(min_length=1)
    non_candidates: list[NonCandidate] = Field(default_factory=list)
    adjacent: list[NonCandidate] = Field(default_factory=list, description="Worth watching, not in the zoo")

    @model_validator(mode="after")
    def _unique(self) -> CandidateTable:
        ids = [c.id for c in self.candidates]
        dupes = sorted({i for i in ids if ids.count(i) > 1})
        if dupes:
            raise ValueError(f"duplicate candidate ids: {', '.join(dupes)}")
        return self


class Workload(Strict):
    match: str = Field(description="Regex on the plan's model name; the first workload that matches applies")
    fraction_of_stream: float | None = Field(
        default=None, gt=0, le=1.5, description="Ceiling as a fraction of the clean stream, where no chip value"
    )
    note: str = ""


class Chip(Strict):
    stream_gb_s: float | None = Field(default=None, gt=0, le=MAX_GB_S, description="Clean int8 dense weight stream")
    workloads: dict[str, Annotated[float, Field(gt=0, le=MAX_GB_S)]] = Field(
        default_factory=dict, description="Measured ceiling per workload class"
    )
    source: str = ""


class Thresholds(Strict):
    near: float = Field(default=0.90, gt=0, le=10, description="effective/ceiling at or above: no glue to harvest")
    candidate: float = Field(default=0.75, gt=0, le=10, description="below: a raw-loop candidate")

    @model_validator(mode="after")
    def _ordered(self) -> Thresholds:
        if self.candidate > self.near:
            raise ValueError("candidate threshold must be <= near threshold")
        return self


class CeilingTable(Strict):
    thresholds: Thresholds = Thresholds()
    workloads: dict[str, Workload] = Field(min_length=1)
    chips: dict[str, Chip] = Field(default_factory=dict)

    def workload(self, model: str) -> str:
        for name, w in self.workloads.items():
            if re.search(w.match, model, re.IGNORECASE):
                return name
        return next(iter(self.workloads))


def load_candidates(path: Path) -> CandidateTable:
    return validate(path, read_yaml(path), CandidateTable)


def load_ceilings(path: Path) -> CeilingTable:
    return validate(path, read_yaml(path), CeilingTable)
