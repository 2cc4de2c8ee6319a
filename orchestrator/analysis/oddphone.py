"""One phone off its siblings: the class's effect heterogeneity, checked where the class decides and
watched for a few more rounds when it is suspected.

The test. Each phone's block differences (mean log candidate - mean log baseline, one per block both
arms reached) are ranked together; each phone's mean rank is contrasted with the mean of its siblings'
mean ranks on the pooled within-phone variance of the ranks (t with N - k degrees of freedom), and the
smallest of the k two-sided p values is multiplied by k (Bonferroni). The phone with the largest
contrast is the one named. Ranks keep a throttled launch from dominating a phone's mean; the contrast
puts all the test's power on "one phone differs", where Kruskal-Wallis and a one-way ANOVA spread it
over k - 1 directions. On the same simulated classes (bench/results/pooled.md: four A19-class phones,
one 8% off, each test once on every trial the class ran) the contrast at p < 0.0075 flagged 73% of them,
Kruskal-Wallis at p < 0.01 57.5%, a one-way ANOVA (pooled residual variance) at p < 0.01 58%; where every
phone has the same effect each flagged 0.5% of 200 classes under no difference, and at a 5% class effect
the contrast 2.0% (4 classes), the other two 0.5%.

The watch. A pooled class stops when its pooled question is answered (``ClassPool``), and then each
phone rests on ~20 launches per arm: too few to see an 8% phone reliably. So the check is repeated:

* at the round the class's answer came (``answered``): flagged if ``p < HETEROGENEITY_P``; not
  suspected if ``p >= SUSPECT_P`` (the class stops); otherwise the class keeps going, every member in
  step, and
* every block after it (``block_len`` rounds): flagged if ``p < HETEROGENEITY_P``; cleared if
  ``p >= CLEAR_P`` (no longer suspected); ``capped`` at the phones' last scheduled round.

The cap is each phone's share of the plan's blocks: launches the plan already budgeted for every phone,
so a kept-going class never runs past what the same plan runs when its looks never answer it. A multiple
of the answer's round would hardly differ: at the defaults a class answers at 10-22 launches per arm per
phone of a share of 30, so even twice the answer's round is mostly past the share.

Every check may flag, so each one's level (0.0075) is below the 0.01 a single check would spend, and
the suspicion ends as soon as p drifts up (``CLEAR_P`` 0.5: quickly, when nothing is there), which keeps
the kept-going rounds short where the phones agree. Measured (bench/results/pooled.md, 200 classes a
case): the 8%-off phone flagged in 73% of classes (46% by Kruskal-Wallis at the answer alone, before);
false effect flags 0.5% under no difference and 2.0% at a 5% class effect; 15% of those classes kept going,
13 rounds on average when they did; wall time 0.26 and 0.28 of one phone's. The share bounds it: a
class that must clear every phone more surely needs a plan with more blocks than its pooled answer.

The class's verdict stays the one its looks reached: the extra rounds serve this question and the
phones' own intervals only.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass
from typing import Literal

import numpy as np
from scipy import stats

HETEROGENEITY_P = 0.0075  # flag below this at any check (a single check alone would spend 0.01)
SUSPECT_P = 0.2  # at the class's answer: keep going below this
CLEAR_P = 0.5  # while kept going: no longer suspected at or above this
BLOCK_STRIDE = 1_000_000  # a pooled block id: device index x stride + the device's own block

Values = dict[str, list[tuple[int, int, float]]]  # arm -> (seq, pooled block, value) as the class ran them
Status = Literal["watching", "flagged", "quiet", "cleared", "capped"]


def pooled_block(index: int, block: int) -> int:
    return index * BLOCK_STRIDE + block


def block_effects(values: Values, base: str, cand: str, members: list[str], upto: int) -> dict[str, np.ndarray]:
    """Each phone's block differences (log candidate - log baseline, block means) on the trials up to ``upto``."""
    logs: dict[tuple[int, str], list[float]] = defaultdict(list)
    for arm in (base, cand):
        for seq, block, value in values.get(arm, []):
            if seq <= upto and value > 0:
                logs[(block, arm)].append(math.log(value))
    out: dict[str, list[float]] = {}
    for block in sorted({b for b, _ in logs}):
        if (block, base) in logs and (block, cand) in logs:
            diff = float(np.mean(logs[(block, cand)]) - np.mean(logs[(block, base)]))
            out.setdefault(members[block // BLOCK_STRIDE], []).append(diff)
    return {d: np.array(v) for d, v in out.items()}


def effect_check(effects: dict[str, np.ndarray]) -> tuple[float, str | None]:
    """The rank contrast of each phone against its siblings: (Bonferroni p, the phone furthest off; None
    below three phones, where "which one" has no answer). p is nan below two phones with two blocks."""
    groups = {d: g for d, g in effects.items() if len(g) >= 2}
    k = len(groups)
    if k < 2:
        return math.nan, None
    names = list(groups)
    ranks = stats.rankdata(np.concatenate([groups[d] for d in names]))
    parts = np.split(ranks, np.cumsum([len(groups[d]) for d in names])[:-1])
    df = len(ranks) - k
    s2 = sum(float(((r - r.mean()) ** 2).sum()) for r in parts) / df
    if s2 <= 0:
        return 1.0, None
    means = np.array([r.mean() for r in parts])
    sizes = np.array([len(r) for r in parts], dtype=np.float64)
    best, best_p = 0, math.inf
    for i in range(k):
        rest = np.arange(k) != i
        contrast = means[i] - means[rest].mean()
        var = s2 * (1 / sizes[i] + float((1 / sizes[rest]).sum()) / (k - 1) ** 2)
        p = float(2 * stats.t.sf(abs(contrast) / math.sqrt(var), df))
        if p < best_p:
            best, best_p = i, p
    return min(1.0, best_p * (k if k > 2 else 1)), (names[best] if k >= 3 else None)


@dataclass(frozen=True)
class PairWatch:
    """One pair's heterogeneity check as the class left it."""

    status: Status
    p: float
    odd: str | None  # the phone furthest from its siblings at the last check
    checked: int  # the round (sequence number) of the last check
    kept: int = 0  # rounds past the class's answer it was watched


def step(prev: PairWatch | None, p: float, odd: str | None, upto: int, *, answered: int, at_cap: bool) -> PairWatch:
    """The pair's check at round ``upto``: the first (``prev`` None) at the class's answer, then one a block."""
    kept = upto - answered
    status: Status
    if not math.isnan(p) and p < HETEROGENEITY_P:
        status = "flagged"
    elif prev is None:
        status = "quiet" if math.isnan(p) or p >= SUSPECT_P or at_cap else "watching"
    else:
        status = "cleared" if p >= CLEAR_P else "capped" if at_cap else "watching"
    return PairWatch(status, p, odd, upto, kept)


@dataclass
class ClassWatch:
    """The checks of a class's pairs after its answer (at round ``answered``), up to the last round
    ``cap`` its phones are scheduled for. ``advance`` walks the rounds as they complete: the session and the
    verdict table take the same checks at the same rounds."""

    pairs: list[tuple[str, str]]
    members: list[str]
    answered: int
    cap: int
    block_len: int
    state: dict[tuple[str, str], PairWatch] | None = None

    @property
    def done(self) -> bool:
        return self.state is not None and all(w.status != "watching" for w in self.state.values())

    def due(self, upto: int) -> bool:
        return upto >= self.answered and ((upto - self.answered) % self.block_len == 0 or upto >= self.cap)

    def advance(self, values: Values, upto: int) -> None:
        """The check at round ``upto``, if one is due and the watch is not done."""
        if self.done or not self.due(upto):
            return
        state = dict(self.state or {})
        for pair in self.pairs:
            prev = state.get(pair)
            if prev is not None and prev.status != "watching":
                continue
            p, odd = effect_check(block_effects(values, *pair, self.members, upto))
            state[pair] = step(prev, p, odd, upto, answered=self.answered, at_cap=upto >= self.cap)
        self.state = state

    def walk(self, values: Values, last: int) -> ClassWatch:
        """Every round from the answer to ``last`` (the verdict table, a resumed run)."""
        for upto in range(self.answered, last + 1):
            if self.done:
                break
            self.advance(values, upto)
        return self

    def kept(self) -> int:
        return max((w.kept for w in (self.state or {}).values()), default=0)

    def words(self) -> str:
        """What the watch did, for the class's stop (empty when it stopped at the answer)."""
        if not self.state or self.kept() == 0:
            return ""
        looked = sorted({w.odd for w in self.state.values() if w.kept and w.odd})
        outcome = ", ".join(sorted({w.status for w in self.state.values()}))
        return f"kept going {self.kept()} rounds to check {' and '.join(looked) or 'the phones'}: {outcome}"


def once(values: Values, pairs: list[tuple[str, str]], members: list[str], last: int) -> dict[tuple[str, str],
                                                                                                PairWatch]:
    """A single check on everything (a fixed design, or a class its looks never answered)."""
    out = {}
    for pair in pairs:
        p, odd = effect_check(block_effects(values, *pair, members, last))
        out[pair] = step(None, p, odd, last, answered=last, at_cap=True)
    return out
