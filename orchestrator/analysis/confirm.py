"""Same-night confirmation of a nightly comparison (pure: what to extend, and the night's decision).

A night whose comparison looks suspicious (one-sided p(slower) < ``confirm.suspicious_p``) gets more
blocks on the same phone, up to ``confirm.launches_per_arm`` in all (an extension run of the same
config, fixed design, its own seed); the night is then decided on every launch it made (the first
run's blocks followed by the extension's, one fixed analysis by the plan's estimator), and the alarm
rule reads that row. Not suspicious: the night's row is the first run's, as without confirmation.
Calibration: bench/bench_nightly_confirm.py, figures in bench/results/nightly_confirm.md.
"""

from __future__ import annotations

import math

import pandas as pd

from orchestrator.analysis.summary import verdicts
from orchestrator.config.plan import MAX_BLOCKS, PAIRED, NightlyAlarm, Plan

__all__ = ["EXTENSION", "MIN_EXTENSION_BLOCKS", "after", "decide", "extends", "extension_blocks", "extension_plan",
           "suspicious"]

EXTENSION = "same-night confirmation of "  # an extension plan's description begins so
MIN_EXTENSION_BLOCKS = 6  # a plan's least blocks: fewer left to the cap, the night is decided on what it has


def suspicious(rows: pd.DataFrame, rule: NightlyAlarm) -> dict[str, int]:
    """Device -> launches per arm it already has, for the night's comparisons (``night_rows``) that look
    suspicious under the rule's confirmation."""
    c = rule.confirm
    if c is None or not len(rows):
        return {}
    p = rows["p_one_sided_slower"].to_numpy(dtype=float)
    n = rows[["n_reference", "n_candidate"]].min(axis=1).to_numpy(dtype=float)
    return {str(d): int(k) for d, pp, k in zip(rows["device"], p, n, strict=True) if pp < c.suspicious_p}


def extension_blocks(plan: Plan, rule: NightlyAlarm, done: int) -> int:
    """Blocks that bring ``done`` launches per arm to the confirmation's cap (0: too few to run)."""
    if rule.confirm is None:
        return 0
    per_block = 2 if plan.order in PAIRED else 1
    blocks = min(MAX_BLOCKS, math.ceil(max(0, rule.confirm.launches_per_arm - done) / per_block))
    return blocks if blocks >= MIN_EXTENSION_BLOCKS else 0


def extension_plan(plan: Plan, devices: list[str], blocks: int, *, seed: int, of: str) -> Plan:
    """The extension run's plan: the same arms and trial, ``blocks`` more on ``devices``, one fixed analysis
    (validated as any plan); its description names the run it extends (``of``, see ``extends``)."""
    fields = plan.model_dump(mode="json")
    fields["decision"] = {**fields["decision"], "adaptive": None, "sequential": None}
    fields.update(blocks=blocks, devices=devices, seed=seed, pool_by=None,
                  description=f"{EXTENSION}{of}: {blocks} more blocks of {plan.name}")
    return Plan.model_validate(fields)


def extends(plan: Plan) -> str | None:
    """The run an extension plan extends (None: not an extension)."""
    if not plan.description.startswith(EXTENSION):
        return None
    return plan.description.removeprefix(EXTENSION).split(":", 1)[0]


def after(first: pd.DataFrame, extension: pd.DataFrame) -> pd.DataFrame:
    """The extension's trials with each device's blocks and sequence numbers after its first run's (the
    blocks stay the unit the tests permute within)."""
    parts = []
    for device, rows in extension.groupby("device", sort=True):
        mine = first[first["device"] == device]
        block = int(mine["block"].max()) + 1 if len(mine) else 0
        seq = int(mine["seq"].max()) + 1 if len(mine) else 0
        parts.append(rows.assign(block=rows["block"] + block, seq=rows["seq"] + seq))
    return pd.concat(parts, ignore_index=True) if parts else extension


def decide(trials: pd.DataFrame, plan: Plan, *, seed: int) -> pd.DataFrame:
    """The verdict table of a night's trials (first run and extension) by one fixed analysis of the plan's
    estimator: the rows that replace the first run's for the extended devices."""
    rule = plan.decision.model_copy(update={"adaptive": None, "sequential": None})
    fixed = plan.model_copy(update={"decision": rule})
    return verdicts(trials, fixed, seed=seed)
