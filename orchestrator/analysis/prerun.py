"""What the noise registry says before a run (pure): the MDE `orch run` prints for each device, and the
same-night confirmation cap `orch nightly` gives each device.

Each line names the registry entry it rests on (its run, age and launches) or says plainly that there is
none and what is used instead, and repeats the registry's flag when the device's noise jumped at its last
reading (``noise.entry``).
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

import pandas as pd

from orchestrator.analysis.confirm import Cap, launches_for
from orchestrator.analysis.noise import Entry, entry
from orchestrator.analysis.pooled import by_class
from orchestrator.analysis.sizing import planned_mde
from orchestrator.config.plan import NightlyAlarm, Plan

__all__ = ["mde_notes", "night_caps"]

_RECORD = "an A/A run such as configs/plans/aa-calibration.yaml records it"


def _entries(plan: Plan, devices: Iterable[str], registry: pd.DataFrame, now: datetime) -> dict[str, Entry | None]:
    """Each device's registry entry for the plan's baseline runtime on its model."""
    return {d: entry(registry, d, plan.arms[0].runtime, plan.model, now) for d in devices}


def _none(plan: Plan, device: str) -> str:
    return f"{device}: no launch noise registered for {plan.arms[0].runtime} on {plan.model} ({_RECORD})"


def _flag(e: Entry) -> list[str]:
    return [f"{e.device}: NOISE JUMP: {e.jumped}"] if e.jumped else []


def mde_notes(plan: Plan, devices: Iterable[str], registry: pd.DataFrame, now: datetime) -> list[str]:
    """One line per device before `orch run`'s first trial: the smallest effect the plan can detect on it."""
    rule = plan.decision
    n = plan.launches_per_arm()
    at = (f"at {'the cap of ' if rule.adaptive else ''}{n} launches per arm"
          f"{' pooled over its class' if plan.pool_by else ''}, {rule.power:.0%} power")
    lines: list[str] = []
    for device, e in _entries(plan, devices, registry, now).items():
        if e is None:
            lines.append(f"{_none(plan, device)}: the MDE is stated after the run, from the run's own noise")
            continue
        lines.append(f"{device}: launch noise {e.basis()}: smallest detectable effect {planned_mde(plan, e.sigma):.1%} "
                     f"{at}")
        lines += _flag(e)
    return lines


def night_caps(plan: Plan, rule: NightlyAlarm, devices: Iterable[str], registry: pd.DataFrame,
               now: datetime, chips: dict[str, str] | None = None) -> tuple[dict[str, Cap], list[str]]:
    """Each device's same-night confirmation cap from its registered noise, and the lines that say so (with
    ``chips``, device -> class: which phones share a suspicious night's extension, ``confirm.siblings``)."""
    c = rule.confirm
    caps: dict[str, Cap] = {}
    devices = list(devices)
    lines = _siblings(rule, devices, chips or {})
    for device, e in _entries(plan, devices, registry, now).items():
        cap = launches_for(rule, None if e is None else e.sigma)
        caps[device] = cap
        if c is None:
            continue
        if e is None:
            lines.append(f"{_none(plan, device)}: a suspicious night is extended to the plan's {cap.launches_per_arm} "
                         "launches per arm (nightly.confirm.launches_per_arm)")
            continue
        if cap.short:
            sized = (f"a suspicious night (p(slower) < {cap.suspicious_p:.2g}) is extended to at most "
                     f"{cap.launches_per_arm} launches per arm; its noise needs {cap.needed} launches per arm to keep "
                     f"the first-night detection measured at {c.sigma:.1%}; max_launches_per_arm allows "
                     f"{cap.launches_per_arm}: a regression may need a second night here")
        elif cap.launches_per_arm > c.launches_per_arm:
            sized = (f"noisier than the {c.sigma:.1%} the cap is sized for: a suspicious night (p(slower) < "
                     f"{cap.suspicious_p:.2g}, plan: {c.suspicious_p:g}) is extended to {cap.launches_per_arm} "
                     f"launches per arm (plan: {c.launches_per_arm})")
        else:
            sized = f"a suspicious night is extended to the plan's {cap.launches_per_arm} launches per arm"
        lines.append(f"{device}: launch noise {e.basis()}: {sized}")
        lines += _flag(e)
    return caps, lines


def _siblings(rule: NightlyAlarm, devices: list[str], chips: dict[str, str]) -> list[str]:
    if rule.confirm is None or not rule.confirm.siblings:
        return []
    return [f"{chip}: {', '.join(members)} share a suspicious night's extension (nightly.confirm.siblings): each runs "
            f"a share of the blocks, and that night is decided over the {len(members)} phones, stratified by phone "
            "(the launches per arm below are the night's in all)"
            for chip, members in by_class(devices, chips).items() if len(members) > 1]
