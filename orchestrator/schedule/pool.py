"""Pooled phones: the devices of one chip class answer one comparison together.

With `pool_by: chip_class` each phone of a class runs its own interleaved, settled session on a share
of the plan's blocks, and the adaptive looks are taken on the class's values together: blocks stay
nested in their device (a block id is the device's index and its block), so every comparison is
within a device's block and the device is a stratum. A look is taken at the end of a *round*: when
every member still running has finished the trials with that sequence number, on the values of the
trials up to it (the verdict table replays exactly these looks, `analysis.pooled`). Once the class
has its answer, no member starts another trial, unless the phones' effects look different there: then
the class keeps going, every member in step, until that is flagged, no longer suspected, or the phones'
scheduled share ends (`analysis.oddphone`: the check, its levels and why). The class's verdict stays the
one its looks reached; the extra rounds serve the heterogeneity check and the phones' own intervals.

A member does not run ahead of its siblings (``turn``): it starts the trial with sequence number ``s`` once
every other member still running has finished ``s - 1``. A trial beyond the round frontier informs no look
until the slowest member catches up, and when the class decides first it was device time spent for nothing:
the phones that cool faster wait (their idle time cools them further) instead of running such trials.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from orchestrator.analysis.decision import ArmSample
from orchestrator.analysis.oddphone import ClassWatch
from orchestrator.analysis.pooled import block_len, by_class, planned_last, pooled_block, share
from orchestrator.analysis.sequential import FamilyLook, due, take_look
from orchestrator.config.fleet import Fleet
from orchestrator.config.plan import Plan
from orchestrator.results.records import LookRecord, Manifest, TrialRecord

__all__ = ["ClassPool", "classes", "fleet_chips", "pools_for", "share"]


def fleet_chips(fleet: Fleet) -> dict[str, str]:
    """Each device's class for pooling: the fleet's chip_class (a device without one is a class alone)."""
    return {d.id: getattr(d, "chip_class", None) or d.id for d in fleet.devices}


def classes(plan: Plan, chips: dict[str, str], devices: list[str]) -> dict[str, list[str]]:
    """The plan's devices by class (pool_by), in fleet order; without pooling, none."""
    if plan.pool_by is None:
        return {}
    return by_class(devices, chips)


@dataclass
class ClassPool:
    name: str
    members: list[str]
    plan: Plan
    look_seed: int = 0  # the run's seed (manifest.seed): the looks' resampling
    values: dict[str, list[tuple[int, int, float]]] = field(default_factory=dict)  # arm -> (seq, block, value)
    done: dict[str, int] = field(default_factory=dict)  # member -> highest seq finished
    active: set[str] = field(default_factory=set)
    next_round: int = 0
    looks_done: int = 0
    answered: str | None = None  # the look that answered the class (its words)
    watch: ClassWatch | None = None  # the heterogeneity check from the answer on
    decided: str | None = None  # why the class stopped (the look's words, and the watch's)
    _changed: asyncio.Event = field(default_factory=asyncio.Event)  # set (and replaced) when done/active change

    def __post_init__(self) -> None:
        self.active = set(self.members)

    def record(self, device: str, seq: int, block: int, arm: str, value: float | None) -> None:
        if value is not None:
            self.values.setdefault(arm, []).append((seq, pooled_block(self.members.index(device), block), value))
        self.done[device] = max(self.done.get(device, -1), seq)
        self._notify()

    def leave(self, device: str) -> None:
        self.active.discard(device)
        self._notify()

    def _notify(self) -> None:
        was, self._changed = self._changed, asyncio.Event()
        was.set()

    def ahead(self, device: str, seq: int) -> bool:
        """Trial ``seq`` of ``device`` would run ahead of the class's round: a sibling still running has not
        finished ``seq - 1``. Only an adaptive rule looks at rounds; without one every member runs its share."""
        if self.plan.decision.adaptive is None or self.decided:
            return False
        return any(self.done.get(d, -1) < seq - 1 for d in self.active if d != device)

    async def turn(self, device: str, seq: int) -> None:
        """Wait until ``device`` may start trial ``seq`` (``ahead`` no longer holds)."""
        while self.ahead(device, seq):
            await self._changed.wait()

    def look(self) -> FamilyLook | None:
        """Every round the members have now finished, in order; the look at the first that reaches an
        interim look. Once every pair has its answer, the heterogeneity watch takes the rounds after it;
        `decided` is set when the watch is done (at once, when nothing is suspected)."""
        rule, arms = self.plan.decision, [a.name for a in self.plan.arms]
        if rule.adaptive is None or self.decided:
            return None
        frontier = min((self.done.get(d, -1) for d in self.active), default=-1)
        cap = self.plan.launches_per_arm()
        while self.next_round <= frontier and not self.decided:
            upto, self.next_round = self.next_round, self.next_round + 1
            if self.watch is not None:
                self.watch_round(upto)
                continue
            n = min(sum(1 for s, _, _ in self.values.get(a, []) if s <= upto) for a in arms)
            index = due(rule, cap, n, after=self.looks_done - 1)
            if index is None:
                continue
            samples = {a: ArmSample.of(a, [(b, v) for s, b, v in self.values.get(a, []) if s <= upto]) for a in arms}
            taken = take_look(samples, self.plan.pairs(), rule, index, cap=cap, seed=self.look_seed)
            self.looks_done = index + 1
            if taken.action == "decided":
                self.answer(f"class {self.name}: pooled look {index} at {n} launches per arm", upto)
            return taken
        return None

    def answer(self, words: str, upto: int) -> None:
        """The class's looks answered it at round ``upto``: watch its heterogeneity from there."""
        self.answered = words
        last = planned_last(self.plan, len(self.members)) if self.plan.pool_keep_going else upto  # off: check once
        self.watch = ClassWatch(self.plan.pairs(), self.members, upto, last, block_len(self.plan))
        self.watch_round(upto)

    def watch_round(self, upto: int) -> None:
        """The watch's check at round ``upto`` (when one is due); `decided` once it is done."""
        assert self.watch is not None and self.answered is not None
        self.watch.advance(self.values, upto)
        if self.watch.done:
            more = self.watch.words()
            self.decided = self.answered + (f"; {more}" if more else "")

    def answered_at(self, n_per_arm: int) -> int:
        """The round at which the class's values first held ``n_per_arm`` per arm (a journaled look's round)."""
        arms = [a.name for a in self.plan.arms]
        rounds = sorted({s for a in arms for s, _, _ in self.values.get(a, [])})
        for upto in rounds:
            if min(sum(1 for s, _, _ in self.values.get(a, []) if s <= upto) for a in arms) >= n_per_arm:
                return upto
        return rounds[-1] if rounds else -1


def pools_for(manifest: Manifest, records: list[Any], running: list[str]) -> dict[str, ClassPool]:
    """Each pooled device's class pool, with what the journal already holds (a resumed run): the
    members' finished trials, the looks taken; members not running again have left."""
    plan = manifest.plan
    devices = [s.device for s in manifest.sessions]
    out: dict[str, ClassPool] = {}
    for name, members in classes(plan, fleet_chips(manifest.fleet), devices).items():
        pool = ClassPool(name, members, plan, look_seed=manifest.seed)
        answered: tuple[str, int] | None = None
        for r in records:
            if isinstance(r, TrialRecord) and r.device in members:
                value = plan.decision.measure(r.result) if r.result is not None and r.excluded is None else None
                pool.record(r.device, r.seq, r.block, r.arm, value)
            elif isinstance(r, LookRecord) and r.device in members:
                pool.looks_done = max(pool.looks_done, r.look + 1)
                if r.action == "decided":
                    answered = f"class {name}: pooled look {r.look} at {r.n_per_arm} launches per arm", r.n_per_arm
        for d in members:
            if d not in running:
                pool.leave(d)
        frontier = min((pool.done.get(d, -1) for d in pool.active), default=-1)
        if answered is not None:  # the watch again, on the rounds the journal holds
            upto = pool.answered_at(answered[1])
            pool.answer(answered[0], upto)
            for later in range(upto + 1, frontier + 1):
                if pool.decided:
                    break
                pool.watch_round(later)
        pool.next_round = max(frontier + 1, pool.next_round)
        out.update(dict.fromkeys(members, pool))
    return out
