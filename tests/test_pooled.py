"""Pooled phones (`pool_by: chip_class`) on the simulated lab: each phone runs a share of the blocks,
the class's looks are taken on its values together and stop every member, the class gets one verdict
(blocks nested in devices) and its heterogeneity is tested, not averaged away."""

from __future__ import annotations

import asyncio
import contextlib
import math
import re
from collections import Counter
from pathlib import Path

import numpy as np
import pandas as pd
from conftest import fleet_of, plan_with, sim_device
from test_run import invoke, only_run, write_inputs

from orchestrator import core
from orchestrator.analysis.oddphone import (
    CLEAR_P,
    HETEROGENEITY_P,
    SUSPECT_P,
    ClassWatch,
    block_effects,
    effect_check,
    pooled_block,
    step,
)
from orchestrator.analysis.pooled import heterogeneity
from orchestrator.results.records import LookRecord, SessionStopped, TrialRecord
from orchestrator.schedule.pool import ClassPool


def _phones(gaps: list[float], chip: str = "A19 Pro") -> list[dict[str, object]]:
    return [sim_device(f"p{i}", chip_class=chip, seed=60 + i,
                       runtimes={"coreai": {"decode_tok_s": 50.0}, "rawloop-metal": {"decode_tok_s": 50.0 * (1 + g)}})
            for i, g in enumerate(gaps)]


def test_four_phones_of_a_class_answer_together_on_a_share_of_the_blocks(tmp_path: Path) -> None:
    fleet = fleet_of(*_phones([0.10] * 4), *[{**d, "id": "other", "chip_class": "M4"} for d in _phones([0.10])])
    plan = plan_with(blocks=40, pool_by="chip_class", decision={"estimator": "hodges_lehmann"})
    f, p = write_inputs(tmp_path, fleet, plan)
    code, out = invoke("run", "--fleet", str(f), "--plan", str(p), "--results", str(tmp_path / "r"))
    assert code == 0, out
    run = only_run(tmp_path / "r")
    manifest, records = run.manifest(), run.records()
    planned = {s.device: len(s.trials) for s in manifest.sessions}
    assert planned == {"p0": 40, "p1": 40, "p2": 40, "p3": 40, "other": 160}, "a share of 40 blocks: 10 each"
    stops = {r.device: r for r in records if isinstance(r, SessionStopped)}
    assert {d: s.reason for d, s in stops.items()} == dict.fromkeys(planned, "decided")
    assert all("class A19 Pro: pooled look" in stops[f"p{i}"].detail for i in range(4))
    ran = {d: sum(1 for r in records if isinstance(r, TrialRecord) and r.device == d) for d in planned}
    decided = [r for r in records if isinstance(r, LookRecord) and r.action == "decided" and r.device != "other"]
    assert len(decided) == 1, "one look decides the class"
    pooled = pd.read_csv(run.path / "class_verdicts.csv").set_index("chip_class")
    row = pooled.loc["A19 Pro"]
    assert row["verdict"] == "faster" and row["devices"] == 4
    assert row["n_baseline"] == decided[0].n_per_arm, "the verdict table replays the look the class took"
    assert max(ran[f"p{i}"] for i in range(4)) < ran["other"], "each phone of four ran fewer launches than one alone"
    members = [ran[f"p{i}"] for i in range(4)]
    assert max(members) - min(members) <= 1, f"no member runs ahead of its siblings' round: {ran}"
    assert sum(members) <= 2 * decided[0].n_per_arm + 4, "past the deciding round, at most one trial a member"
    assert pooled.loc["M4", "devices"] == 1
    assert "Class verdicts" in out


def test_heterogeneity_shows_a_phone_off_its_siblings() -> None:
    rng = np.random.default_rng(7)
    rows = []
    for d, (level, effect) in enumerate([(50, 0.05), (50, 0.05), (50, 0.05), (46, -0.05)]):
        for block in range(30):
            for arm, mult in (("a", 1.0), ("b", 1 + effect), ("b", 1 + effect), ("a", 1.0)):
                rows.append({"device": f"d{d}", "block": block, "arm": arm,
                             "v": level * mult * float(np.exp(rng.normal(0, 0.06)))})
    frame = pd.DataFrame(rows)
    got = heterogeneity(frame, "a", "b", "v")
    assert got["effect_heterogeneity_p"] < 0.01 and got["level_heterogeneity_p"] < 0.01, got
    assert "the effect differs between phones" in got["heterogeneous"] and "speeds differ" in got["heterogeneous"]
    assert "d3 0.9" in got["effect_by_device"], got["effect_by_device"]
    assert "d3 stands furthest from its siblings" in got["heterogeneous"], got
    # each phone's 95% interval beside its ratio: the odd phone's excludes its siblings' 5%
    intervals = dict(re.findall(r"(d\d) [0-9.]+ \[([0-9.]+-[0-9.]+)\]", got["effect_by_device"]))
    assert set(intervals) == {"d0", "d1", "d2", "d3"}, got["effect_by_device"]
    lo, hi = map(float, intervals["d3"].split("-"))
    assert hi < 1.05 and lo < 0.95 < hi, intervals
    assert all(float(intervals[d].split("-")[0]) < 1.05 < float(intervals[d].split("-")[1]) for d in ("d0", "d1", "d2"))
    same = heterogeneity(frame[frame["device"] != "d3"], "a", "b", "v")
    assert same["heterogeneous"] == "", same


def test_a_member_ahead_of_the_round_waits_for_its_siblings() -> None:
    plan = plan_with(blocks=12, pool_by="chip_class", decision={"estimator": "hodges_lehmann"})
    pool = ClassPool("A19 Pro", ["a", "b", "c"], plan)
    for d in ("a", "b", "c"):
        pool.record(d, 0, 0, "base", 50.0)
    pool.record("a", 1, 0, "cand", 51.0)
    assert not pool.ahead("a", 1) and pool.ahead("a", 2) and not pool.ahead("b", 1)

    async def scenario() -> list[str]:
        said: list[str] = []

        async def a() -> None:
            await pool.turn("a", 2)
            said.append("a starts 2")

        async def siblings() -> None:
            await asyncio.sleep(0)
            said.append("b finishes 1")
            pool.record("b", 1, 0, "cand", 51.0)
            await asyncio.sleep(0)
            said.append("c leaves")
            pool.leave("c")

        await asyncio.gather(a(), siblings())
        return said

    assert asyncio.run(scenario()) == ["b finishes 1", "c leaves", "a starts 2"]
    fixed = ClassPool("x", ["a", "b"], plan_with(blocks=12, pool_by="chip_class"))  # no looks: no rounds to wait for
    fixed.record("a", 5, 2, "base", 50.0)
    assert not fixed.ahead("a", 6)


def _odd_class(tmp_path: Path, **plan: object) -> tuple[Path, Path]:
    """Four phones, the candidate 10% faster on three and no faster on the fourth (p3): the class answers
    `faster` at its second look, where p3 looks off but is not yet flagged (these seeds: found by simulation)."""
    phones = [sim_device(f"p{i}", seed=130 + i, runtimes={"coreai": {"decode_tok_s": 50.0},
                                                           "rawloop-metal": {"decode_tok_s": 50.0 * (1 + g)}})
              for i, g in enumerate([0.10, 0.10, 0.10, 0.0])]
    return write_inputs(tmp_path, fleet_of(*phones), plan_with(blocks=40, pool_by="chip_class",
                                                                decision={"estimator": "hodges_lehmann"}, **plan))


def test_a_class_keeps_going_to_check_a_phone_off_its_siblings_and_keeps_its_verdict(tmp_path: Path) -> None:
    f, p = _odd_class(tmp_path)
    code, out = invoke("run", "--fleet", str(f), "--plan", str(p), "--results", str(tmp_path / "r"))
    assert code == 0, out
    run = only_run(tmp_path / "r")
    records = run.records()
    decided = [r for r in records if isinstance(r, LookRecord) and r.action == "decided"]
    assert len(decided) == 1 and decided[0].look == 1, decided
    stops = {r.device: r for r in records if isinstance(r, SessionStopped)}
    assert {s.reason for s in stops.values()} == {"decided"}
    assert all(s.detail == "class A19 Pro: pooled look 1 at 20 launches per arm; kept going 24 rounds to check p3: "
               "flagged" for s in stops.values()), stops
    ran = Counter(r.device for r in records if isinstance(r, TrialRecord))
    # the look came at round 9 (20 launches per arm over four phones); 24 rounds more: 34 trials each
    assert ran == dict.fromkeys(["p0", "p1", "p2", "p3"], 34), ran
    row = pd.read_csv(run.path / "class_verdicts.csv").iloc[0]
    assert row["verdict"] == "faster" and row["n_baseline"] == decided[0].n_per_arm == 20, \
        "the class's verdict is the look's, not re-decided on the rounds kept going"
    assert row["effect_check"] == "flagged" and row["odd_phone"] == "p3" and row["rounds_kept"] == 24, row
    assert row["effect_heterogeneity_p"] < 0.0075
    assert "kept going 24 rounds to check p3" in row["heterogeneous"], row["heterogeneous"]
    # each phone's interval rests on all its trials, the rounds kept going included
    intervals = dict(re.findall(r"(p\d) [0-9.]+ \[([0-9.]+)-", row["effect_by_device"]))
    assert set(intervals) == {"p0", "p1", "p2", "p3"} and float(intervals["p3"]) < 1.0, row["effect_by_device"]


def test_a_plan_can_stop_the_class_at_its_answer(tmp_path: Path) -> None:
    f, p = _odd_class(tmp_path, pool_keep_going=False)
    code, out = invoke("run", "--fleet", str(f), "--plan", str(p), "--results", str(tmp_path / "r"))
    assert code == 0, out
    run = only_run(tmp_path / "r")
    ran = Counter(r.device for r in run.records() if isinstance(r, TrialRecord))
    assert ran == dict.fromkeys(["p0", "p1", "p2", "p3"], 10), "stopped at the answer's round (9)"
    row = pd.read_csv(run.path / "class_verdicts.csv").iloc[0]
    assert row["verdict"] == "faster" and row["n_baseline"] == 20 and row["rounds_kept"] == 0
    assert row["effect_check"] == "quiet" and HETEROGENEITY_P <= row["effect_heterogeneity_p"] < SUSPECT_P, \
        "suspected at the answer, checked there once, not flagged"


def test_a_run_interrupted_while_kept_going_resumes_to_the_same_end(tmp_path: Path) -> None:
    f, p = _odd_class(tmp_path)
    fleet_cfg, plan_cfg = core.load_inputs(f, p)
    run = core.start_run(core.new_manifest(fleet_cfg, plan_cfg, f, p), tmp_path / "r")

    async def interrupted() -> None:
        task, seen = asyncio.current_task(), 0

        def observe(device: str, record: object) -> None:
            nonlocal seen
            seen += isinstance(record, TrialRecord)
            if seen == 70 and task is not None:  # round ~17: past the answer (round 9), before the flag (33)
                task.cancel()

        await core.execute(run, observe=observe)

    with contextlib.suppress(asyncio.CancelledError):
        asyncio.run(interrupted())
    assert any(isinstance(r, LookRecord) and r.action == "decided" for r in run.records())
    assert {r.reason for r in run.records() if isinstance(r, SessionStopped)} == {"interrupted"}
    code, out = invoke("run", "--resume", run.run_id, "--results", str(tmp_path / "r"))
    assert code == 0, out
    records = run.records()
    ran = Counter(r.device for r in records if isinstance(r, TrialRecord))
    assert ran == dict.fromkeys(["p0", "p1", "p2", "p3"], 34), ran
    last = {r.device: r for r in records if isinstance(r, SessionStopped)}
    assert all(s.reason == "decided" and s.detail.endswith("kept going 24 rounds to check p3: flagged")
               for s in last.values()), last
    row = pd.read_csv(run.path / "class_verdicts.csv").iloc[0]
    assert row["odd_phone"] == "p3" and row["rounds_kept"] == 24 and row["n_baseline"] == 20


def _values(effects: dict[str, list[float]]) -> tuple[dict[str, list[tuple[int, int, float]]], list[str]]:
    """Each phone's blocks as one baseline and one candidate value whose log ratio is the given effect."""
    members = list(effects)
    values: dict[str, list[tuple[int, int, float]]] = {"a": [], "b": []}
    for i, d in enumerate(members):
        for block, e in enumerate(effects[d]):
            values["a"].append((2 * block, pooled_block(i, block), 50.0))
            values["b"].append((2 * block + 1, pooled_block(i, block), 50.0 * math.exp(e)))
    return values, members


def test_the_rank_contrast_names_the_phone_off_its_siblings() -> None:
    rng = np.random.default_rng(11)
    effects = {f"d{i}": list(rng.normal(0.05 if i < 3 else -0.05, 0.06, 15)) for i in range(4)}
    values, members = _values(effects)
    p, odd = effect_check(block_effects(values, "a", "b", members, upto=10**6))
    assert p < HETEROGENEITY_P and odd == "d3", (p, odd)
    early, _ = effect_check(block_effects(values, "a", "b", members, upto=7))  # four blocks each: not yet
    assert early > p
    same = {d: list(rng.normal(0.05, 0.06, 15)) for d in ("d0", "d1", "d2", "d3")}
    values, members = _values(same)
    assert effect_check(block_effects(values, "a", "b", members, upto=10**6))[0] > 0.05
    assert math.isnan(effect_check({"d0": np.array([0.1, 0.2])})[0]), "one phone: no p"
    two = effect_check({"d0": np.array([0.0, 0.01, 0.02]), "d1": np.array([0.1, 0.11, 0.12])})
    assert two[1] is None and two[0] < 0.05, "two phones: a p, but no phone to name"


def test_the_watch_flags_clears_or_stops_at_the_cap() -> None:
    first = step(None, 0.001, "d3", 20, answered=20, at_cap=False)
    assert (first.status, first.kept) == ("flagged", 0)
    assert step(None, SUSPECT_P, "d3", 20, answered=20, at_cap=False).status == "quiet"
    watching = step(None, 0.05, "d3", 20, answered=20, at_cap=False)
    assert watching.status == "watching"
    assert step(watching, 0.3, "d3", 24, answered=20, at_cap=False).status == "watching", "still suspected"
    cleared = step(watching, CLEAR_P, "d3", 28, answered=20, at_cap=False)
    assert (cleared.status, cleared.kept) == ("cleared", 8)
    assert step(watching, 0.02, "d3", 39, answered=20, at_cap=True).status == "capped"
    assert step(watching, 0.007, "d3", 39, answered=20, at_cap=True).status == "flagged"
    assert step(None, 0.05, "d3", 39, answered=39, at_cap=True).status == "quiet", "at the cap: nothing to keep"
    # the class's rounds: a check at the answer, then once a block, and at the last scheduled round
    watch = ClassWatch([("a", "b")], ["d0"], answered=9, cap=39, block_len=4)
    assert [r for r in range(60) if watch.due(r)] == [9, 13, 17, 21, 25, 29, 33, 37, 39, *range(40, 60)]
