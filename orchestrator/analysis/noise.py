"""The noise registry: each device x runtime x model's launch-to-launch noise, from A/A runs.

An A/A run (every arm the same runtime, build, engine parameters, threads and tuning table: the
`aa-calibration` plan) measures a device's noise as the rule's estimator sees it
(`sizing.noise_of`). Each such run adds one row per device to the registry; the latest row of a
device x runtime x model is what `orch plan size --registry` sizes with and what `orch noise` shows,
with its age and how many launches it rests on. A device whose noise moved by more than half (up or
down) from its previous reading is flagged: something changed on it (an OS update, a failing
battery, background work). The flag stays on the entry (``entry``) until a later reading agrees with it, so
`orch run`, `orch nightly` and `orch plan size --registry` show it each time they read that entry.

Before a run the registry sets two things: the MDE `orch run` prints for each device (``sizing.planned_mde``)
and a nightly device's same-night confirmation cap (``confirm.launches_for``): see ``notes``.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import pandas as pd

from orchestrator.analysis.sizing import noise_of
from orchestrator.config.plan import Plan
from orchestrator.results.records import Manifest
from orchestrator.results.trials import usable

REGISTRY_COLUMNS = ["device", "chip_class", "runtime", "model", "sigma", "launches", "run_id", "measured_at"]
KEY = ["device", "runtime", "model"]
JUMP = 1.5  # a new reading this many times the last one (or its inverse) is flagged


def is_aa(plan: Plan) -> bool:
    """Every arm runs the same thing: the run measures noise, not a difference."""
    runs = {(a.runtime, a.build, a.threads, a.tuning_table, tuple(sorted(a.engine.items()))) for a in plan.arms}
    return len(plan.arms) >= 2 and len(runs) == 1


def readings(trials: pd.DataFrame, manifest: Manifest, chips: dict[str, str]) -> pd.DataFrame:
    """An A/A run's rows for the registry (none for any other run)."""
    plan = manifest.plan
    if not is_aa(plan) or not len(trials):
        return pd.DataFrame(columns=REGISTRY_COLUMNS)
    sigma = noise_of(trials, plan.decision, (plan.arms[0].name, plan.arms[1].name))
    ok = usable(trials, plan.decision.column()).groupby("device").size()  # the launches the sigma came from
    rows = [{"device": d, "chip_class": chips.get(d, ""), "runtime": plan.arms[0].runtime, "model": plan.model,
             "sigma": s, "launches": int(ok.get(d, 0)), "run_id": manifest.run_id, "measured_at": manifest.created}
            for d, s in sigma.items()]
    return pd.DataFrame(rows, columns=REGISTRY_COLUMNS)


def merged(registry: pd.DataFrame, new: pd.DataFrame) -> pd.DataFrame:
    """The registry with a run's readings in place of any it held from that run (derive is repeatable)."""
    kept = registry[~registry["run_id"].isin(set(new["run_id"]))] if len(registry) else registry
    both = [f for f in (kept, new) if len(f)]
    out = pd.concat(both, ignore_index=True) if both else pd.DataFrame(columns=REGISTRY_COLUMNS)
    return out.sort_values("measured_at", kind="stable").reset_index(drop=True)[REGISTRY_COLUMNS]


def latest(registry: pd.DataFrame) -> pd.DataFrame:
    """The last reading of each device x runtime x model."""
    if not len(registry):
        return pd.DataFrame(columns=REGISTRY_COLUMNS)
    return registry.sort_values("measured_at", kind="stable").groupby(KEY, as_index=False).tail(1)


def jumps(registry: pd.DataFrame, new: pd.DataFrame) -> list[str]:
    """Devices whose noise moved by more than half since their previous reading, in words."""
    before = latest(registry[~registry["run_id"].isin(set(new["run_id"]))]) if len(registry) else registry
    if not len(before) or not len(new):
        return []
    last = {(r["device"], r["runtime"], r["model"]): r for r in before.to_dict("records")}
    out = []
    for row in new.to_dict("records"):
        prev = last.get((row["device"], row["runtime"], row["model"]))
        if prev is None:
            continue
        ratio = row["sigma"] / float(prev["sigma"])
        if ratio > JUMP or ratio < 1 / JUMP:
            out.append(f"{row['device']} ({row['runtime']}, {row['model']}): launch noise {float(prev['sigma']):.1%} "
                       f"in run {prev['run_id']}, now {row['sigma']:.1%} in {row['run_id']}: something changed on "
                       "the device (OS update, battery, background work)")
    return out


def age_days(measured_at: str, now: datetime) -> float:
    return (now - datetime.fromisoformat(measured_at)).total_seconds() / 86400


@dataclass(frozen=True)
class Entry:
    """A device x runtime x model's latest registered noise, as read before a run."""

    device: str
    runtime: str
    model: str
    sigma: float
    launches: int
    run_id: str
    age_days: float
    jumped: str | None  # how the noise moved from the reading before it, when it moved by more than half

    def basis(self) -> str:
        """Where the number comes from, in words: "6.1% (noise registry: run R, 3 d old, 118 launches)"."""
        return (f"{self.sigma:.1%} (noise registry: run {self.run_id}, {self.age_days:.0f} d old, "
                f"{self.launches} launches)")


def entry(registry: pd.DataFrame, device: str, runtime: str, model: str, now: datetime) -> Entry | None:
    """The latest reading of ``device`` x ``runtime`` x ``model`` (None: nothing registered), with its jump flag."""
    if not len(registry):
        return None
    mine = registry[(registry["device"] == device) & (registry["runtime"] == runtime) & (registry["model"] == model)]
    if not len(mine):
        return None
    mine = mine.sort_values("measured_at", kind="stable")
    last = mine.iloc[-1]
    moved = None
    if len(mine) > 1:
        prev = mine.iloc[-2]
        ratio = float(last["sigma"]) / float(prev["sigma"])
        if ratio > JUMP or ratio < 1 / JUMP:
            moved = (f"launch noise {float(prev['sigma']):.1%} in run {prev['run_id']}, now {float(last['sigma']):.1%} "
                     f"in {last['run_id']}: something changed on the device (OS update, battery, background work); "
                     "an A/A run again tells whether it stays")
    return Entry(device=device, runtime=runtime, model=model, sigma=float(last["sigma"]),
                 launches=int(last["launches"]), run_id=str(last["run_id"]),
                 age_days=age_days(str(last["measured_at"]), now), jumped=moved)
