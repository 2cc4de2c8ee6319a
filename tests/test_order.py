from __future__ import annotations

from collections import Counter
from itertools import pairwise

import pytest
from conftest import plan_with

from orchestrator.schedule import session_plan, williams


def test_the_default_order_alternates_abba_with_baab() -> None:
    assert plan_with().order == "abba-baab"


@pytest.mark.parametrize(("order", "blocks"), [("abba", [["a", "b", "b", "a"]] * 6),
                                               ("abba-baab", [["a", "b", "b", "a"], ["b", "a", "a", "b"]] * 3)])
def test_abba_blocks_with_a_recorded_seeded_coin(order: str, blocks: list[list[str]]) -> None:
    plan = plan_with(blocks=6, order=order)
    coins = set()
    for device in ("d1", "d2", "d3", "d4", "d5", "d6"):
        sp = session_plan(plan, device, seed=1)
        a, b = sp.arm_order
        arms = [t.arm for t in sp.trials]
        assert arms == [{"a": a, "b": b}[x] for block in blocks for x in block]
        if order == "abba-baab":  # no block starts with the arm the one before it ended with
            assert all(arms[i] != arms[i - 1] for i in range(4, 24, 4))
        assert [t.block for t in sp.trials] == [i // 4 for i in range(24)]
        assert sp.trials[0].arm == ("base" if sp.coin == 0 else "cand")
        assert session_plan(plan, device, seed=1) == sp, "the same seed gives the same order"
        coins.add(sp.coin)
    assert coins == {0, 1}, "the coin lands both ways across devices"
    assert len({t.trial_id for t in sp.trials}) == 24


@pytest.mark.parametrize("k", [2, 3, 4, 5, 6])
def test_williams_is_latin_and_balanced_for_carryover(k: int) -> None:
    rows = williams(k)
    assert len(rows) == (k if k % 2 == 0 else 2 * k)
    assert all(sorted(r) == list(range(k)) for r in rows)
    follows = Counter(p for r in rows for p in pairwise(r))
    assert set(follows) == {(i, j) for i in range(k) for j in range(k) if i != j}
    assert len(set(follows.values())) == 1, "every arm follows every other equally often"


def test_williams_plan_permutes_arms_by_recorded_seed() -> None:
    arms = [{"name": n, "runtime": "coreai"} for n in ("x", "y", "z")]
    plan = plan_with(arms=arms, order="williams", blocks=12)
    sp = session_plan(plan, "d", seed=5)
    assert sorted(sp.arm_order) == ["x", "y", "z"]
    per_block = Counter((t.block, t.arm) for t in sp.trials)
    assert set(per_block.values()) == {1} and len(per_block) == 36
