"""Trial order: ABBA blocks (alternating with BAAB by default) for two arms, a Williams design for more;
coin flip recorded."""

from __future__ import annotations

import zlib

import numpy as np

from orchestrator.config.plan import Plan
from orchestrator.results.records import ScheduledTrial, SessionPlan


def williams(k: int) -> list[list[int]]:
    """Rows of a Williams design: every arm follows every other equally often (first-order carryover).

    Even k: one Latin square (k rows). Odd k: that square and its mirror (2k rows).
    """
    first, lo, hi = [0], 1, k - 1
    while len(first) < k:
        first.append(lo)
        lo += 1
        if len(first) < k:
            first.append(hi)
            hi -= 1
    rows = [[(x + r) % k for x in first] for r in range(k)]
    return rows if k % 2 == 0 else rows + [row[::-1] for row in rows]


def session_plan(plan: Plan, device: str, seed: int, blocks: int | None = None) -> SessionPlan:
    """The whole session's order, fixed before the first trial and stored in the manifest. ``blocks``:
    this device's share when phones are pooled (default: the plan's)."""
    blocks = plan.blocks if blocks is None else blocks
    rng = np.random.default_rng([seed, zlib.crc32(device.encode())])
    names = [a.name for a in plan.arms]
    if plan.order in ("abba", "abba-baab"):
        coin = int(rng.integers(2))
        order = names if coin == 0 else names[::-1]
        # abba-baab: ABBA BAAB ABBA ...: a block never starts with the arm the last one ended with, so
        # drift and AR(1) noise do not correlate neighbouring blocks' differences as ABBA ABBA does
        alternate = plan.order == "abba-baab"
        pattern = [[1, 0, 0, 1] if alternate and b % 2 else [0, 1, 1, 0] for b in range(blocks)]
    else:
        coin = int(rng.integers(1 << 30))  # seeds the permutation of arms onto the design's letters
        order = [names[i] for i in np.random.default_rng(coin).permutation(len(names))]
        rows = williams(len(names))
        pattern = [rows[b % len(rows)] for b in range(blocks)]
    trials, seq = [], 0
    for block, letters in enumerate(pattern):
        for letter in letters:
            trials.append(ScheduledTrial(trial_id=f"{device}-{seq:04d}", seq=seq, block=block, arm=order[letter]))
            seq += 1
    return SessionPlan(device=device, coin=coin, arm_order=order, trials=trials)
