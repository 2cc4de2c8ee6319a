"""The nightly gate on the simulated lab: builds whose true speed is written in the fleet."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import pandas as pd
import pytest
import typer
from conftest import ROOT, SIM_LAB, fleet_of, sim_device
from test_audit import run_in_memory
from typer.testing import CliRunner

from orchestrator.analysis.nightly import (
    NightlyInputError,
    alarms,
    append_history,
    history_rows,
    load_history_trials,
    load_nights,
    night_rows,
    pin_builds,
    summarize,
)
from orchestrator.analysis.summary import verdicts
from orchestrator.cli_analysis import register
from orchestrator.config import Plan, load_plan
from orchestrator.config.plan import NightlyAlarm

NIGHTLY = ROOT / "configs" / "plans" / "nightly.yaml"


def night(i: int) -> str:
    return f"2026-01-{i:02d}"


def run_nights(history: Path, n: int, slow_from: int | None, slowdown: float, plan: Plan) -> pd.DataFrame:
    """n nights on one A19 device: candidate build n<i> vs the pinned reference; the alarm table."""
    for i in range(1, n + 1):
        builds = {"ref": 1.0} | {f"n{k:02d}": (1 - slowdown) if slow_from and k >= slow_from else 1.0
                                 for k in range(1, n + 1)}
        fleet = fleet_of(sim_device("iphone17pro", seed=500 + i, runtimes={
            "rawloop-metal": {"bytes_per_token": 783e6, "efficiency": 0.73, "builds": builds},
        }))
        pinned = pin_builds(plan, "ref", f"n{i:02d}")
        trials, manifest = run_in_memory(fleet, pinned, seed=i)
        table = verdicts(trials, pinned, seed=i)
        append_history(history, night(i), history_rows(trials, manifest), night_rows(table, manifest))
    return alarms(load_nights(history), {plan.name: NightlyAlarm()})


@pytest.fixture(scope="module")
def nightly_plan() -> Plan:
    return load_plan(NIGHTLY)


def test_a_6pct_slowdown_from_night_3_alarms_by_night_4(tmp_path: Path, nightly_plan: Plan) -> None:
    table = run_nights(tmp_path / "history", 4, slow_from=3, slowdown=0.06, plan=nightly_plan)
    status = dict(zip(table["night"], table["status"], strict=True))
    assert status[night(1)] == "ok" and status[night(2)] == "ok", table
    assert "alarm" in (status[night(3)], status[night(4)]), table
    assert 0.9 < table["ratio"].iloc[-1] < 0.98
    summary = summarize(tmp_path / "history", night(4), [(nightly_plan.name, "iphone17pro")],
                        {nightly_plan.name: NightlyAlarm()})
    assert summary.alarmed


def test_30_quiet_nights_raise_no_alarm(tmp_path: Path, nightly_plan: Plan) -> None:
    table = run_nights(tmp_path / "history", 30, slow_from=None, slowdown=0.0, plan=nightly_plan)
    assert len(table) == 30 and (table["status"] != "alarm").all(), table[table["status"] != "ok"]
    trials = load_history_trials(tmp_path / "history")
    assert len(trials) == 30 * 2 * nightly_plan.launches_per_arm()
    assert set(trials["role"]) == {"reference", "candidate"}
    summary = summarize(tmp_path / "history", night(30), [(nightly_plan.name, "iphone17pro")],
                        {nightly_plan.name: NightlyAlarm()})
    assert not summary.alarmed and summary.changes.empty


def synthetic(slow: list[float], p: list[float]) -> pd.DataFrame:
    return pd.DataFrame({
        "config": "c", "device": "d", "night": [night(i + 1) for i in range(len(slow))], "run_id": "r",
        "ratio": [1 - s for s in slow], "p_one_sided_slower": p,
    })


def test_rule_single_night_streaks_and_gaps() -> None:
    rules = {"c": NightlyAlarm()}
    big = alarms(synthetic([0.12], [0.001]), rules)
    assert list(big["status"]) == ["alarm"] and "one night" in big["reason"][0]
    two = alarms(synthetic([0.04, 0.0, 0.04, 0.05], [0.03, 0.5, 0.04, 0.02]), rules)
    assert list(two["status"]) == ["watch", "ok", "watch", "alarm"]
    small = alarms(synthetic([0.02, 0.02], [0.001, 0.001]), rules)  # significant but under 3%
    assert list(small["status"]) == ["ok", "ok"]
    gap = alarms(synthetic([0.04, float("nan"), 0.04], [0.03, float("nan"), 0.03]), rules)
    assert list(gap["status"]) == ["watch", "no data", "alarm"]
    strict = alarms(synthetic([0.04, 0.04], [0.03, 0.03]), {"c": NightlyAlarm(consecutive_nights=3)})
    assert list(strict["status"]) == ["watch", "watch"]


def test_plan_must_have_two_arms_of_one_runtime(nightly_plan: Plan) -> None:
    three = nightly_plan.model_copy(update={"arms": [*nightly_plan.arms, nightly_plan.arms[0].model_copy(
        update={"name": "x"})]})
    with pytest.raises(NightlyInputError, match="exactly 2 arms"):
        pin_builds(three, "a", "b")
    mixed = nightly_plan.model_copy(update={"arms": [nightly_plan.arms[0], nightly_plan.arms[1].model_copy(
        update={"runtime": "coreai"})]})
    with pytest.raises(NightlyInputError, match="same runtime"):
        pin_builds(mixed, "a", "b")


def test_cli_nightly_exit_codes_junit_and_summary(tmp_path: Path) -> None:
    app = typer.Typer()
    register(app)
    runner = CliRunner()
    results = tmp_path / "r"
    args = ["nightly", "--fleet", str(SIM_LAB), "--plan", str(NIGHTLY), "--reference", "ref",
            "--results", str(results)]
    res = runner.invoke(app, [*args, "--candidate", "candidate-good", "--night", "2026-02-01"])
    assert res.exit_code == 0, res.output
    junit = ET.parse(results / "nightly" / "2026-02-01" / "junit.xml").getroot()
    assert junit.get("tests") == "1" and junit.get("failures") == "0"
    res = runner.invoke(app, [*args, "--candidate", "candidate-slow", "--night", "2026-02-02"])
    # 8% slower (the sim's candidate-slow): under 10% so no single-night alarm; night 1 of 2.
    assert res.exit_code == 0 and "watch" in res.output, res.output
    res = runner.invoke(app, [*args, "--candidate", "candidate-slow", "--night", "2026-02-03"])
    assert res.exit_code == 1, res.output
    junit = ET.parse(results / "nightly" / "2026-02-03" / "junit.xml").getroot()
    assert junit.get("failures") == "1" and junit.find(".//failure") is not None
    md = (results / "nightly" / "2026-02-03" / "summary.md").read_text()
    assert md.startswith("# Nightly 2026-02-03: ALARM") and "candidate-slow vs ref" in md
    assert len(list((results / "history" / "trials").glob("night=*/*.parquet"))) == 3
    res = runner.invoke(app, [*args, "--candidate", "x", "--night", "bad/night"])
    assert res.exit_code == 2 and "night" in res.output
    res = runner.invoke(app, [*args[:4], str(ROOT / "configs" / "plans" / "sim-ab.yaml"), *args[5:],
                              "--candidate", "x"])
    assert res.exit_code == 2 and "same runtime" in res.output


def test_an_interrupted_night_resumes_once_into_the_history(tmp_path: Path, nightly_plan: Plan) -> None:
    from orchestrator import app as core
    from orchestrator.config import load_fleet

    results = tmp_path / "r"
    pinned = pin_builds(nightly_plan, "ref", "candidate-good")
    run = core.start_run(core.new_manifest(load_fleet(SIM_LAB), pinned, SIM_LAB, NIGHTLY), results)
    app = typer.Typer()
    register(app)
    runner = CliRunner()
    for _ in range(2):  # a second resume of the same run must not count its trials twice
        res = runner.invoke(app, ["nightly", "--resume", run.run_id, "--night", "2026-04-01",
                                  "--results", str(results)])
        assert res.exit_code == 0, res.output
    trials = load_history_trials(results / "history")
    assert len(trials) == 80 and set(trials["run_id"]) == {run.run_id}
    assert len(load_nights(results / "history")) == 1
    res = runner.invoke(app, ["nightly", "--resume", run.run_id, "--fleet", str(SIM_LAB), "--results", str(results)])
    assert res.exit_code == 2 and "drop the rest" in res.output
