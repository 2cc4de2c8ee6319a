"""Device time on the simulated lab: every session's time split into prepare, settle, launch and
measured time (failed attempts apart), each verdict's cost, and a plan's device-time budget."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import pytest
from conftest import fleet_of, plan_with, sim_device
from test_run import invoke, only_run, write_inputs

from orchestrator.analysis.devicetime import decided_in, device_time
from orchestrator.config.loader import ConfigError, load_plan
from orchestrator.results import load_trials
from orchestrator.results.records import AttemptFailed, PreparedRecord, SessionStopped, TrialRecord


def test_device_time_adds_up_from_the_journal(tmp_path: Path) -> None:
    fleet = fleet_of(sim_device("flaky", faults={"crash": 0.15}), sim_device("steady", seed=4))
    plan = plan_with(retry={"max_attempts": 2, "backoff_s": 0, "max_consecutive_failures": 50})
    f, p = write_inputs(tmp_path, fleet, plan)
    code, out = invoke("run", "--fleet", str(f), "--plan", str(p), "--results", str(tmp_path / "r"))
    assert code == 0, out
    run = only_run(tmp_path / "r")
    records = run.records()
    spent = pd.read_csv(run.sessions_path).set_index("device")
    for device in ("flaky", "steady"):
        trials = [r for r in records if isinstance(r, TrialRecord) and r.device == device]
        attempts = [r for r in records if isinstance(r, AttemptFailed) and r.device == device]
        prepared = sum(r.seconds for r in records if isinstance(r, PreparedRecord) and r.device == device)
        journal_s = prepared + sum(r.settle.waited_s + r.duration_s for r in trials) + \
            sum(r.settle_waited_s + r.duration_s for r in attempts)
        row = spent.loc[device]
        assert row["total_min"] == pytest.approx(journal_s / 60, rel=1e-9), device
        parts = row[["prepare_min", "settle_min", "launch_min", "measured_min", "retry_min"]].sum()
        assert parts == pytest.approx(row["total_min"], rel=1e-9)
        assert row["settle_share"] == pytest.approx(row["settle_min"] / row["total_min"])
        assert row["measured_min"] > 0 and row["launch_min"] > 0 and row["settle_min"] > 0
        assert (row["retry_min"] > 0) == bool(attempts), device
    assert spent.loc["flaky", "retry_min"] > 0, "the crash faults were retried: their time counts"
    trials = load_trials(run.path)
    ok = trials[trials["status"] == "ok"]
    assert (ok["measured_s"] > 0).all() and (ok["launch_s"] >= 0).all()
    assert (trials["measured_s"] + trials["launch_s"]).round(6).equals(trials["duration_s"].round(6))
    assert "device min" in out and "settle %" in out


def test_a_verdict_costs_the_device_time_until_its_last_launch() -> None:
    trials = pd.DataFrame({
        "device": ["d"] * 6, "seq": range(6), "arm": ["a", "b", "b", "a", "a", "b"], "status": ["ok"] * 6,
        "settle_waited_s": [60.0] * 6, "duration_s": [6.0] * 6, "retry_s": [0, 0, 30.0, 0, 0, 0],
        "launch_s": [1.0] * 6, "measured_s": [5.0] * 6,
    })
    verdicts = pd.DataFrame({"device": ["d", "d"], "baseline": ["a", "a"], "candidate": ["b", "b"],
                             "n_baseline": [2, 3], "n_candidate": [2, float("nan")]})
    got = decided_in(verdicts, trials, {"d": 120.0})
    assert got.iloc[0] == pytest.approx((120 + 4 * 66 + 30) / 60)  # a, b, b (with its retry), a
    assert math.isnan(got.iloc[1])
    table = device_time(trials, {"d": 120.0}, ["d", "idle"], budget_min=30)
    assert table.set_index("device").loc["d", "total_min"] == pytest.approx((120 + 6 * 66 + 30) / 60)
    assert table.set_index("device").loc["idle", "total_min"] == 0 and table["budget_min"].tolist() == [30, 30]


def test_the_budget_stops_a_session_and_says_what_it_allowed(tmp_path: Path) -> None:
    fleet = fleet_of(sim_device("phone"))
    plan = plan_with(blocks=10, budget_minutes=25)
    f, p = write_inputs(tmp_path, fleet, plan)
    code, out = invoke("run", "--fleet", str(f), "--plan", str(p), "--results", str(tmp_path / "r"))
    assert code == 0, out  # a planned end, as a decision is
    run = only_run(tmp_path / "r")
    (stop,) = [r for r in run.records() if isinstance(r, SessionStopped)]
    assert stop.reason == "budget" and "device-time budget 25 min spent" in stop.detail
    spent = pd.read_csv(run.sessions_path)
    n = sum(isinstance(r, TrialRecord) for r in run.records())
    assert 0 < n < 40
    # The budget's arithmetic on the simulated device's clock as the journal holds it (deterministic, not a
    # measured speed): spent when the last trial started is under the budget, spent after it is not.
    total_s = float(spent["total_min"].iloc[0]) * 60
    last = [r for r in run.records() if isinstance(r, TrialRecord)][-1]
    before_last_s = total_s - (last.settle.waited_s + last.duration_s)
    assert (before_last_s < 25 * 60) and (total_s >= 25 * 60), (before_last_s, total_s)
    said = " ".join(out.split())
    assert "the device-time budget (25 min) stopped it after" in said and "what it allowed" in said, out

    # resumed: the budget counts what the journal says was spent; nothing more runs
    code, again = invoke("run", "--resume", run.run_id, "--results", str(tmp_path / "r"))
    assert code == 0, again
    assert sum(isinstance(r, TrialRecord) for r in run.records()) == n


def test_a_bad_budget_is_a_located_error(tmp_path: Path) -> None:
    path = tmp_path / "plan.yaml"
    path.write_text("name: t\nmodel: m\narms:\n  - {name: a, runtime: coreai}\n  - {name: b, runtime: coreai}\n"
                    "budget_minutes: -5\n")
    with pytest.raises(ConfigError) as exc:
        load_plan(path)
    assert f"{path}:6: budget_minutes" in str(exc.value)
