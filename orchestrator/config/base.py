"""The base every config model shares, and the ranges every number in a config keeps to.

`Strict` is frozen, rejects unknown keys and refuses NaN and +-inf in every float it holds (fields,
list items, dict values, union members, nested models alike): a non-finite figure cannot be
measured against and would reach the manifest as `null`.

Every number also has both ends bounded. The bounds are far beyond what a lab runs and exist to
turn a typo (`1e9` blocks, `1e-300` s polls, a negative seed) into a located error instead of a run
that exhausts memory, never finishes, or dies after its last trial. Shared ranges live here:

- names that become file or directory names (device, host, arm, plan, candidate ids): the
  protocol's `SAFE_ID` (no leading `.` or `-`, no `/`, no control characters) and at most
  `MAX_NAME` characters, so `<timestamp>-<plan>-<hex>` run ids and `<device>-<seq>` trial ids stay
  far under any file-name limit (255 bytes) and the 128 the iPhone side allows;
- seeds: 0 ..= 2**32 - 1, what every consumer takes unchanged (numpy, the Swift harness's Int64
  with room for the seeds derived from them: + the night's crc32, + resumptions);
- durations: timeouts and waits at most a day (timeouts at least 0.1 s), poll intervals and
  backoffs at most an hour; a device's result poll at least 0.01 s, the settle gate's thermal poll
  at least 0.1 s (sensors update about once a second; a tinier poll spins, on a simulated clock
  without end);
- temperatures -50 ..= 150 C, rises and margins at most 100 C;
- p-value thresholds (alpha, per-look alpha, nightly alarms) 1e-6 ..= 0.5.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

from orchestrator.protocol import SAFE_ID


class Strict(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)


MAX_NAME = 64
Name = Annotated[str, Field(pattern=SAFE_ID, max_length=MAX_NAME)]

MIN_SEED, MAX_SEED = 0, 2**32 - 1
Seed = Annotated[int, Field(ge=MIN_SEED, le=MAX_SEED)]

HOUR, DAY, WEEK = 3600.0, 86400.0, 7 * 86400.0
Timeout = Annotated[float, Field(ge=0.1, le=DAY)]
Wait = Annotated[float, Field(ge=0, le=DAY)]  # gaps, windows, ages: 0 = none
PollInterval = Annotated[float, Field(ge=0.01, le=HOUR)]

Celsius = Annotated[float, Field(ge=-50, le=150)]
CelsiusRise = Annotated[float, Field(ge=0, le=100)]

# Tokens a trial prefills: 256k, beyond any context a benchmark prefills; the prefill chunk width
# (M) is bounded by the same. Decoded tokens are capped separately (every one is timed and stored).
MAX_PROMPT_TOKENS = 2**18
ChunkWidth = Annotated[int, Field(ge=1, le=MAX_PROMPT_TOKENS)]

Alpha = Annotated[float, Field(ge=1e-6, le=0.5)]
Probability = Annotated[float, Field(ge=0, le=1)]
Int64 = Annotated[int, Field(ge=-(2**63), le=2**63 - 1)]  # integers that reach the harness (Swift Int)
