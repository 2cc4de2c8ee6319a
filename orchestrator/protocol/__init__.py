"""Harness protocol v1: the TrialSpec a harness reads and the TrialResult it writes.

The same JSON is produced and consumed by the Swift harness (``ios_harness``); the golden
fixtures in ``ios_harness/Tests/Fixtures/protocol/`` are read by both sides, so the two cannot
drift. Metric definitions live here and nowhere else.

Schema history:
- 1: first version.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

SCHEMA_VERSION: Literal[1] = 1

TuningValue = int | float | str | bool

# Ids that become file names on devices and hosts: never a path separator, never a shell word.
SAFE_ID = r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$"

# How a trial can fail, as seen from the controller (the device boundary maps every fault to one).
FailureKind = Literal["disconnected", "crashed", "hung", "bad_output", "launch_failed", "harness_error"]


class _Strict(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class HarnessTuningTable(BaseModel):
    """What `harness run --tuning FILE` (or a spec's `tuning_table`) loads: the Swift `TuningTable`
    (ios_harness/Sources/HarnessCore/Tuning.swift), unknown keys refused; `orch export-tuning` writes it."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    engine: str
    device: str | None = None
    params: dict[str, TuningValue]


class TrialSpec(_Strict):
    """One fresh launch of one engine: everything the harness needs, nothing it must guess."""

    schema_version: Literal[1] = SCHEMA_VERSION
    run_id: str = Field(pattern=SAFE_ID)
    trial_id: str = Field(pattern=SAFE_ID, description="Also a file name on the device: no path separators")
    engine: str
    model: str = Field(description="Model path (or name) as the device sees it")
    model_sha256: str | None = None
    prompt_tokens: int = Field(ge=1)
    prompt_ids: list[int] | None = Field(default=None, description="Explicit prompt; else made from seed")
    decode_tokens: int = Field(ge=2)
    chunk_width: int = Field(default=1, ge=1, description="Prefill chunk width M (1 = sequential)")
    warm_repetitions: int = Field(default=0, ge=0)
    seed: int = 0
    threads: int | None = Field(default=None, ge=1)
    build: str | None = Field(default=None, description="Harness/engine build the plan expects")
    tuning: dict[str, TuningValue] = Field(default_factory=dict)
    tuning_table: str | None = Field(default=None, description="A tuning table file as the device sees it (what "
                                     "`--tuning` names); `tuning` overrides its params")
    clear_caches: list[str] = Field(default_factory=list)

    @model_validator(mode="after")
    def _prompt_matches(self) -> TrialSpec:
        if self.prompt_ids is not None and len(self.prompt_ids) != self.prompt_tokens:
            raise ValueError("prompt_ids must have prompt_tokens entries")
        return self


class Generation(_Strict):
    """One generation: a prefill of the prompt, then greedy decode.

    All times are nanoseconds on one monotonic clock, measured from the moment the spec was
    submitted to the engine (t = 0).
    """

    prefill_ns: int = Field(ge=0)
    ttft_ns: int = Field(ge=0, description="Submit -> first generated token available on the CPU")
    token_ids: list[int]
    token_times_ns: list[int]

    @model_validator(mode="after")
    def _consistent(self) -> Generation:
        if len(self.token_ids) != len(self.token_times_ns):
            raise ValueError("token_ids and token_times_ns differ in length")
        if len(self.token_times_ns) < 2:
            raise ValueError("a generation needs at least two tokens to time decode")
        if any(b < a for a, b in zip(self.token_times_ns, self.token_times_ns[1:], strict=False)):
            raise ValueError("token_times_ns is not monotonic")
        if self.token_times_ns[-1] == self.token_times_ns[0]:
            raise ValueError("decode took zero time")
        return self

    def decode_tok_s(self) -> float:
        """(n - 1) / (t_last - t_first) over the generated tokens' timestamps."""
        t = self.token_times_ns
        return (len(t) - 1) / ((t[-1] - t[0]) * 1e-9)

    def prefill_tok_s(self, prompt_tokens: int) -> float | None:
        """Prompt tokens / prefill time."""
        return prompt_tokens / (self.prefill_ns * 1e-9) if self.prefill_ns > 0 else None


ThermalState = Literal["nominal", "fair", "serious", "critical"]
THERMAL_ORDER: dict[str, int] = {"nominal": 0, "fair": 1, "serious": 2, "critical": 3}


class ThermalSample(_Strict):
    t_ns: int
    state: ThermalState


class HarnessError(_Strict):
    kind: Literal[
        "bad_spec",
        "unsupported_schema",
        "model_not_found",
        "bad_model",
        "context_overflow",
        "bad_tuning",
        "engine_failure",
        "out_of_memory",
        "interrupted",
    ]
    message: str


class TrialResult(_Strict):
    """What the harness writes (atomically) for one TrialSpec."""

    schema_version: Literal[1] = SCHEMA_VERSION
    run_id: str
    trial_id: str
    status: Literal["ok", "error"]
    error: HarnessError | None = None
    engine: str
    engine_version: str
    harness_build: str
    model: str
    prompt_tokens: int
    chunk_width: int
    threads: int | None = None
    trial1: Generation | None = None
    warm: list[Generation] = Field(default_factory=list)
    bytes_per_decode_token: int | None = Field(default=None, description="Engine-reported weight bytes read")
    bytes_per_prefill_token: int | None = None
    thermal: list[ThermalSample] = Field(default_factory=list)
    cold_caches: list[str] = Field(default_factory=list)
    tuning: dict[str, TuningValue] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _status(self) -> TrialResult:
        if self.status == "ok" and self.trial1 is None:
            raise ValueError("status ok needs trial1")
        if self.status == "error" and self.error is None:
            raise ValueError("status error needs error")
        return self

    def decode_tok_s(self) -> float | None:
        return self.trial1.decode_tok_s() if self.trial1 else None

    def prefill_tok_s(self) -> float | None:
        return self.trial1.prefill_tok_s(self.prompt_tokens) if self.trial1 else None

    def effective_gb_s(self) -> float | None:
        """Engine-reported bytes read per decode token x decode tok/s."""
        rate = self.decode_tok_s()
        if rate is None or self.bytes_per_decode_token is None:
            return None
        return self.bytes_per_decode_token * rate / 1e9


# orch runtimes whose harness engine has another name: llama.cpp inside the harness is its `llamacpp`
# engine, while the runtime `llamacpp` is the out-of-process adapter.
HARNESS_ENGINE_NAMES = {"harness-llamacpp": "llamacpp"}


def harness_engine(runtime: str) -> str:
    """The harness's name for a runtime it runs (its specs and tuning tables carry it)."""
    return HARNESS_ENGINE_NAMES.get(runtime, runtime)


def for_harness(spec: TrialSpec) -> TrialSpec:
    """The spec as the harness reads it: `engine` is the harness's name for the arm's runtime."""
    name = harness_engine(spec.engine)
    return spec.model_copy(update={"engine": name}) if name != spec.engine else spec


def parse_result(raw: bytes | str) -> TrialResult:
    """Parse harness output; raises ``ValueError`` with a readable reason on garbage."""
    try:
        return TrialResult.model_validate_json(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "<root>"
        n = exc.error_count()
        raise ValueError(f"invalid TrialResult ({n} errors; first at {where}: {first['msg']})") from None
