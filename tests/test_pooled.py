"""Pooled phones (`pool_by: chip_class`) on the simulated lab: each phone runs a share of the blocks,
the class's looks are taken on its values together and stop every member, the class gets one verdict
(blocks nested in devices) and its heterogeneity is tested, not averaged away."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import numpy as np
import pandas as pd
from conftest import fleet_of, plan_with, sim_device
from test_run import invoke, only_run, write_inputs

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
