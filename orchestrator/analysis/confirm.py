"""Same-night confirmation of a nightly comparison (pure: what to extend, and the night's decision).

A night whose comparison looks suspicious (one-sided p(slower) < ``confirm.suspicious_p``) gets more
blocks on the same phone, up to ``confirm.launches_per_arm`` in all (an extension run of the same
config, fixed design, its own seed); the night is then decided on every launch it made (the first
run's blocks followed by the extension's, one fixed analysis by the plan's estimator), and the alarm
rule reads that row. Not suspicious: the night's row is the first run's, as without confirmation.

The cap is sized per device from the noise registry (``launches_for``): ``launches_per_arm`` was measured
to alarm a 5% regression on its first night on phones whose registered noise is ``confirm.sigma``; a noisier
device gets ``launches_per_arm x (its sigma / confirm.sigma)^2`` (the standard error of the night's estimate,
``f sigma sqrt(2 / n)``, then stays what it was where the goal was measured), up to ``max_launches_per_arm``.
Its first run sees a regression less clearly too (the z of a given slowdown shrinks by ``confirm.sigma /
sigma``), so its night counts as suspicious below the p whose z is ``z(suspicious_p)`` scaled by the same
factor (0.2 at 6.5%, 0.27 at 9%): more of its quiet nights are extended, fewer regressions slip through the
first run. The alarm's p and slowdown do not change, so neither does the false-alarm rate (the p is the
test's own). A device with no registry entry, or one no noisier than ``confirm.sigma``, keeps the plan's.
Calibration: bench/bench_nightly_confirm.py, figures in bench/results/nightly_confirm.md.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import pandas as pd
from scipy.stats import norm

from orchestrator.analysis.summary import verdicts
from orchestrator.config.plan import MAX_BLOCKS, PAIRED, NightlyAlarm, Plan

__all__ = ["EXTENSION", "MIN_EXTENSION_BLOCKS", "Cap", "after", "decide", "extends", "extension_blocks",
           "extension_plan", "launches_for", "suspicious"]

EXTENSION = "same-night confirmation of "  # an extension plan's description begins so
MIN_EXTENSION_BLOCKS = 6  # a plan's least blocks: fewer left to the cap, the night is decided on what it has


def suspicious(rows: pd.DataFrame, rule: NightlyAlarm, caps: dict[str, Cap] | None = None) -> dict[str, int]:
    """Device -> launches per arm it already has, for the night's comparisons (``night_rows``) that look
    suspicious under the rule's confirmation (a device in ``caps``: below its own ``suspicious_p``)."""
    c = rule.confirm
    if c is None or not len(rows):
        return {}
    caps = caps or {}
    p = rows["p_one_sided_slower"].to_numpy(dtype=float)
    n = rows[["n_reference", "n_candidate"]].min(axis=1).to_numpy(dtype=float)
    return {str(d): int(k) for d, pp, k in zip(rows["device"], p, n, strict=True)
            if pp < (caps[str(d)].suspicious_p if str(d) in caps else c.suspicious_p)}


@dataclass(frozen=True)
class Cap:
    """A device's same-night confirmation cap, and why."""

    launches_per_arm: int  # the night's launches per arm in all, when extended
    needed: int  # what its noise asks for (above launches_per_arm when max_launches_per_arm cut it)
    sigma: float | None  # its registered noise (None: none registered)
    suspicious_p: float  # its first run's comparison is extended below this one-sided p(slower)

    @property
    def short(self) -> bool:
        """The noise asks for more than max_launches_per_arm allows: the first-night detection goal is not held."""
        return self.needed > self.launches_per_arm


def launches_for(rule: NightlyAlarm, sigma: float | None) -> Cap:
    """The confirmation cap of a device whose registered noise is ``sigma`` (None: nothing registered)."""
    c = rule.confirm
    if c is None:
        return Cap(0, 0, sigma, 0.0)
    if sigma is None or not math.isfinite(sigma) or sigma <= c.sigma:
        return Cap(c.launches_per_arm, c.launches_per_arm, sigma, c.suspicious_p)
    needed = math.ceil(c.launches_per_arm * (sigma / c.sigma) ** 2)
    wider = float(norm.sf(norm.isf(c.suspicious_p) * c.sigma / sigma))
    return Cap(min(needed, c.max_launches_per_arm), needed, sigma, wider)


def extension_blocks(plan: Plan, rule: NightlyAlarm, done: int, cap: int | None = None) -> int:
    """Blocks that bring ``done`` launches per arm to the confirmation's cap (``cap``: a device's own, from
    ``launches_for``; default the rule's ``launches_per_arm``) (0: too few to run)."""
    if rule.confirm is None:
        return 0
    per_block = 2 if plan.order in PAIRED else 1
    target = rule.confirm.launches_per_arm if cap is None else cap
    blocks = min(MAX_BLOCKS, math.ceil(max(0, target - done) / per_block))
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
