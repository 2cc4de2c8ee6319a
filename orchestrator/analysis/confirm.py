"""Same-night confirmation of a nightly comparison (pure: what to extend, and the night's decision).

A night whose comparison looks suspicious (one-sided p(slower) < ``confirm.suspicious_p``) gets more
blocks, up to ``confirm.launches_per_arm`` in all (an extension run of the same config, fixed design, its
own seed); the night is then decided on every launch it made (the first run's blocks followed by the
extension's, one fixed analysis by the plan's estimator), and the alarm rule reads that row. Not
suspicious: the night's row is the first run's, as without confirmation.

Where the config runs on other phones of the device's chip class (``confirm.siblings``, the default), they
share the extension (``plan_extensions``): the launches the night needs are split between the suspicious
phone and its siblings, each running its share as its own interleaved, settled session, so the night's
confirmation takes about 1/k of one phone's hours. The device's night is then decided on its own first run and
every phone's extension, stratified by phone (blocks nested in their phone, as a pooled class verdict,
``analysis.pooled``): it answers "is the candidate slower on this class tonight", which is what a build's
regression is. A phone alone in its class, or ``siblings: false``, is extended on itself.

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

from orchestrator.analysis.pooled import by_class, pooled_block
from orchestrator.analysis.summary import verdicts
from orchestrator.config.plan import MAX_BLOCKS, PAIRED, NightlyAlarm, Plan

__all__ = ["EXTENSION", "MIN_BUDGET_LEFT", "MIN_EXTENSION_BLOCKS", "Cap", "Extension", "after", "budget_left",
           "decide", "extends", "extension_blocks", "extension_plan", "helpers_of", "launches_for", "night_verdict",
           "plan_extensions", "suspicious", "targets_of"]

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


@dataclass(frozen=True)
class Extension:
    """One extension run: ``blocks`` more on each of ``devices``, deciding the nights of ``targets`` (the
    suspicious devices among them; the others are their siblings, sharing the blocks)."""

    devices: tuple[str, ...]
    blocks: int
    targets: tuple[str, ...]


def plan_extensions(plan: Plan, rule: NightlyAlarm, suspects: dict[str, int], caps: dict[str, Cap],
                    chips: dict[str, str], devices: list[str]) -> list[Extension]:
    """The night's extension runs for the ``suspects`` (``suspicious``: device -> launches per arm it has), one
    per number of blocks a phone runs. A phone alone in its class (or without ``confirm.siblings``) is extended
    to its cap (``caps``, else the rule's). A class of several phones among ``devices`` (``chips``: device ->
    class) shares what its suspicious phones need (the largest of their caps, uncut by ``max_launches_per_arm``,
    less the fewest launches they have): split between as many of its phones as have at least
    ``MIN_EXTENSION_BLOCKS`` each, the suspicious ones first, no phone's night above ``max_launches_per_arm``."""
    c = rule.confirm
    if c is None:
        return []
    per_block = 2 if plan.order in PAIRED else 1
    groups: dict[int, tuple[list[str], list[str]]] = {}

    def add(blocks: int, helpers: list[str], targets: list[str]) -> None:
        run, decided = groups.setdefault(blocks, ([], []))
        run.extend(helpers)
        decided.extend(targets)

    for members in by_class(devices, chips).values():
        mine = [d for d in members if d in suspects]
        if not c.siblings or len(members) == 1:
            for d in mine:
                if (blocks := extension_blocks(plan, rule, suspects[d], caps[d].launches_per_arm
                                               if d in caps else None)) > 0:
                    add(blocks, [d], [d])
            continue
        if not mine:
            continue
        need = max(caps[d].needed if d in caps else c.launches_per_arm for d in mine)
        total = math.ceil(max(0, need - min(suspects[d] for d in mine)) / per_block)
        if total < MIN_EXTENSION_BLOCKS:
            continue
        helpers = [*mine, *(d for d in members if d not in mine)][:min(len(members), total // MIN_EXTENSION_BLOCKS)]
        room = (c.max_launches_per_arm - max(suspects[d] for d in mine)) // per_block
        add(min(MAX_BLOCKS, math.ceil(total / len(helpers)), max(room, MIN_EXTENSION_BLOCKS)), helpers, mine)
    return [Extension(tuple(run), blocks, tuple(decided)) for blocks, (run, decided) in sorted(groups.items())]


def helpers_of(rule: NightlyAlarm, target: str, devices: list[str], chips: dict[str, str]) -> list[str]:
    """The phones of an extension run (``devices``) whose launches decide ``target``'s night: those of its class
    with ``confirm.siblings``, else itself."""
    if rule.confirm is None or not rule.confirm.siblings:
        return [target]
    return [d for d in devices if chips.get(d, d) == chips.get(target, target)]


def extension_plan(plan: Plan, ext: Extension, *, seed: int, of: str, minutes_left: float | None = None) -> Plan:
    """The extension run's plan: the same arms and trial, ``ext.blocks`` more on ``ext.devices``, one fixed
    analysis (validated as any plan); its description names the run it extends (``of``, see ``extends``) and
    the devices whose nights it decides (``targets_of``). A plan with ``budget_minutes`` (a config's device time
    on a phone tonight) gives its extension what the first run left of it (``minutes_left``, see ``budget_left``)."""
    fields = plan.model_dump(mode="json")
    fields["decision"] = {**fields["decision"], "adaptive": None, "sequential": None}
    shared = [d for d in ext.devices if d not in ext.targets]
    fields.update(blocks=ext.blocks, devices=list(ext.devices), seed=seed, pool_by=None,
                  budget_minutes=minutes_left if plan.budget_minutes is not None else None,
                  description=f"{EXTENSION}{of}: {ext.blocks} more blocks of {plan.name} for {', '.join(ext.targets)}"
                  + (f" (shared with {', '.join(shared)})" if shared else ""))
    return Plan.model_validate(fields)


def budget_left(plan: Plan, ext: Extension, used_min: dict[str, float]) -> float | None:
    """What a plan's ``budget_minutes`` leaves for ``ext`` after the first run (``used_min``: device -> its
    session's device minutes): the least any of its phones has left (None: no budget; 0: none left)."""
    if plan.budget_minutes is None:
        return None
    return max(0.0, min(plan.budget_minutes - used_min.get(d, 0.0) for d in ext.devices))


MIN_BUDGET_LEFT = 1.0  # minutes: with less left of a budget no extension starts (its first trial could not)


def extends(plan: Plan) -> str | None:
    """The run an extension plan extends (None: not an extension)."""
    if not plan.description.startswith(EXTENSION):
        return None
    return plan.description.removeprefix(EXTENSION).split(":", 1)[0]


def targets_of(plan: Plan) -> list[str]:
    """The devices whose nights an extension plan decides (its description's "for ..."; an extension written
    before siblings shared them: every device it ran on)."""
    words = plan.description.split(" for ", 1)
    if len(words) < 2:
        return list(plan.devices or [])
    return [d.strip() for d in words[1].split(" (shared with ", 1)[0].split(",")]


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
    return verdicts(trials, _fixed(plan), seed=seed)


def night_verdict(first: pd.DataFrame, later: pd.DataFrame, target: str, helpers: list[str], plan: Plan, *,
                  seed: int) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``target``'s night decided on its first run's trials and the extension's on ``helpers`` (``later``, as
    ``after`` numbers them): its verdict row and the trials it rests on. Over several phones the comparison
    is stratified by phone: every trial is ``target``'s, its block nested in its phone (``pooled_block``), so
    the one fixed analysis compares within a phone's block only (one phone: its blocks as they are)."""
    tonight = pd.concat([first[first["device"] == target], later[later["device"].isin(helpers)]], ignore_index=True)
    index = {d: i for i, d in enumerate(dict.fromkeys([target, *helpers]))}
    nested = tonight.assign(device=target, block=[pooled_block(index[d], int(b)) for d, b in
                                                  zip(tonight["device"], tonight["block"], strict=True)])
    return decide(nested, plan, seed=seed), tonight


def _fixed(plan: Plan) -> Plan:
    return plan.model_copy(update={"decision": plan.decision.model_copy(update={"adaptive": None,
                                                                                "sequential": None})})
