"""The nightly gate on the simulated lab: builds whose true speed is written in the fleet."""

from __future__ import annotations

import os
import re
import time
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import typer
from conftest import ROOT, SIM_LAB, fleet_of, sim_device
from test_audit import run_in_memory
from typer.testing import CliRunner

from orchestrator.analysis.nightly import alarms, history_rows, night_rows, pin_builds
from orchestrator.analysis.summary import verdicts
from orchestrator.cli_analysis import register
from orchestrator.config import Plan, load_plan
from orchestrator.config.plan import NightlyAlarm
from orchestrator.night import summarize
from orchestrator.results.history import load_nights
from orchestrator.results.history import load_trials as load_history_trials
from orchestrator.results.history_store import NightlyInputError, append_history, compact_night

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
    # 8% slower (the sim's candidate-slow): suspicious, so the night is extended to 120 launches per arm on
    # the same phone (a second run, printed with its resume command) and the alarm fires on its first night.
    assert res.exit_code == 1, res.output
    md = (results / "nightly" / "2026-02-02" / "summary.md").read_text()
    assert "confirmed the same night on 120 launches per arm" in md, md
    assert len(re.findall(r"^run \S+", res.output, re.M)) == 2, res.output
    res = runner.invoke(app, [*args, "--candidate", "candidate-slow", "--night", "2026-02-03"])
    assert res.exit_code == 1, res.output
    junit = ET.parse(results / "nightly" / "2026-02-03" / "junit.xml").getroot()
    assert junit.get("failures") == "1" and junit.find(".//failure") is not None
    md = (results / "nightly" / "2026-02-03" / "summary.md").read_text()
    assert md.startswith("# Nightly 2026-02-03: ALARM") and "candidate-slow vs ref" in md
    assert "since 2026-02-02" in md, md  # latched: raised on its first night
    assert len(list((results / "history" / "trials").glob("night=*/*.parquet"))) == 3
    trials = load_history_trials(results / "history")
    extended = trials[trials["night"] == "2026-02-02"]
    assert (extended.groupby("role", observed=True).size() == 120).all() and extended["run_id"].nunique() == 2
    res = runner.invoke(app, [*args, "--candidate", "candidate-good", "--night", "2026-02-04"])
    assert res.exit_code == 0 and "since" not in (results / "nightly" / "2026-02-04" / "summary.md").read_text()
    res = runner.invoke(app, [*args, "--candidate", "x", "--night", "bad/night"])
    assert res.exit_code == 2 and "night" in res.output
    res = runner.invoke(app, [*args[:4], str(ROOT / "configs" / "plans" / "sim-ab.yaml"), *args[5:],
                              "--candidate", "x"])
    assert res.exit_code == 2 and "same runtime" in res.output


def test_an_interrupted_night_resumes_once_into_the_history(tmp_path: Path, nightly_plan: Plan) -> None:
    from orchestrator import core
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
    (row,) = load_nights(results / "history").to_dict("records")
    # 40 launches per arm, or 120 when the night was confirmed: each trial once, the confirmation started once.
    per_arm = 40 if row["run_id"] == run.run_id else 120
    assert (trials.groupby("role", observed=True).size() == per_arm).all(), trials
    assert trials["run_id"].nunique() == (1 if per_arm == 40 else 2) and run.run_id in set(trials["run_id"])
    assert not trials.duplicated(["run_id", "device", "seq"]).any()
    res = runner.invoke(app, ["nightly", "--resume", run.run_id, "--fleet", str(SIM_LAB), "--results", str(results)])
    assert res.exit_code == 2 and "drop the rest" in res.output


# -- a night of several configs, through the CLI -----------------------------------------------------
LAB = """\
name: nightly-lab
devices:
  - {id: a19, kind: sim, chip_class: A19 Pro, seed: 19, bandwidth_gb_s: 60,
     runtimes: {rawloop-metal: {decode_tok_s: 55.0, builds: {ref: 1.0, good: 1.0, slow: 0.85}}}}
  - {id: a18, kind: sim, chip_class: A18 Pro, seed: 18, bandwidth_gb_s: 50,
     runtimes: {rawloop-metal: {decode_tok_s: 45.0}}}
  - {id: flaky, kind: sim, chip_class: A17 Pro, seed: 17, bandwidth_gb_s: 42,
     runtimes: {rawloop-metal: {decode_tok_s: 40.0}}, faults: {crash: 1.0}}
"""
CONFIGS = {"decode-a": ["a19"], "decode-b": ["a19", "a18"], "decode-c": ["flaky"]}  # flaky: every launch crashes


def nightly_lab(tmp_path: Path, *, confirm: bool = True) -> tuple[Path, list[Path]]:
    """A fleet file and three nightly plans (one config each) on it (``confirm=False``: without same-night
    confirmation, so every night runs each plan's blocks and no more)."""
    fleet = tmp_path / "lab.yaml"
    fleet.write_text(LAB)
    plans = []
    for name, devices in CONFIGS.items():
        path = tmp_path / f"{name}.yaml"
        path.write_text(NIGHTLY.read_text().replace("name: nightly-decode", f"name: {name}")
                        .replace("devices: [iphone17pro]", f"devices: [{', '.join(devices)}]")
                        + ("" if confirm else "nightly: {confirm: null}\n"))
        plans.append(path)
    return fleet, plans


def cli() -> tuple[typer.Typer, CliRunner]:
    app = typer.Typer()
    register(app)
    return app, CliRunner()


def started(output: str) -> tuple[list[str], str]:
    """The run ids printed before their first trial, and the command that finishes the night: one for the
    night's runs, a longer one when a same-night confirmation adds a run (each printed once)."""
    found = re.findall(r"^run (\S+)  \(resume with: (orch nightly .*)\)$", output, re.M)
    assert found, output
    ids = [r for r, _ in found]
    assert len(set(ids)) == len(ids), found
    for r, cmd in found:
        assert f"--resume {r} " in cmd, found
        assert all(f"--resume {k} " in found[-1][1] for k in ids), found
    return ids, found[-1][1]


def cases(junit: Path) -> dict[tuple[str, str], str]:
    """(config, device) -> passed | failure | error (its type)."""
    out = {}
    for case in ET.parse(junit).getroot().iter("testcase"):
        bad = case.find("failure") if case.find("failure") is not None else case.find("error")
        key = (case.get("classname", "").removeprefix("nightly."), case.get("name", ""))
        assert key not in out, f"two test cases for {key}"
        out[key] = "passed" if bad is None else f"{bad.tag}:{bad.get('type')}"
    return out


def test_cli_a_night_of_three_configs_and_the_same_night_again(tmp_path: Path) -> None:
    fleet, plans = nightly_lab(tmp_path, confirm=False)
    results = tmp_path / "r"
    app, runner = cli()
    args = ["nightly", "--fleet", str(fleet), *(a for p in plans for a in ("--plan", str(p))),
            "--reference", "ref", "--results", str(results)]
    junit = results / "nightly" / "2026-06-01" / "junit.xml"
    everyone = {(c, d) for c, devices in CONFIGS.items() for d in devices}
    all_runs: list[str] = []
    for _ in range(2):  # the same night run twice: new runs, no crash, tonight's verdicts once
        res = runner.invoke(app, [*args, "--candidate", "good", "--night", "2026-06-01"])
        assert res.exit_code == 0, res.output
        run_ids, again = started(res.output)
        assert len(run_ids) == 3
        assert again == (f"orch nightly {' '.join('--resume ' + r for r in run_ids)} --night 2026-06-01 "
                         f"--results {results}")
        assert res.output.index(f"run {run_ids[-1]}") < res.output.index("Nightly 2026-06-01")  # before any trial
        all_runs += run_ids
        got = cases(junit)
        assert set(got) == everyone, got
        assert got[("decode-c", "flaky")] == "error:no_data", got  # no comparison is an error, never a pass
        assert all(v == "passed" for k, v in got.items() if k != ("decode-c", "flaky")), got
    trials = load_history_trials(results / "history")
    per_run = trials.groupby("run_id", observed=True).size()
    assert set(per_run.index) == set(all_runs)
    launches = 2 * load_plan(plans[0]).launches_per_arm()
    for run_id in all_runs:
        config = next(c for c in CONFIGS if f"-{c}-" in run_id)
        if config != "decode-c":  # the flaky session stops after too many failures in a row
            assert per_run[run_id] == launches * len(CONFIGS[config]), per_run
    assert not trials.duplicated(["run_id", "device", "block", "seq"]).any()
    nights = load_nights(results / "history")
    assert set(zip(nights["config"], nights["device"], strict=True)) == everyone
    assert set(nights["run_id"]) <= set(all_runs[3:])  # a night run twice keeps its latest runs
    for kind in ("trials", "nights"):  # compacted: one file per night and dataset
        assert len(list((results / "history" / kind).glob("night=2026-06-01/*.parquet"))) == 1

    # Two nights 15% slower on a19 (every config that runs on it): an alarm there only, exit 1.
    for night_label in ("2026-06-02", "2026-06-03"):
        res = runner.invoke(app, [*args, "--candidate", "slow", "--night", night_label])
        got = cases(results / "nightly" / night_label / "junit.xml")
        alarmed = {k for k, v in got.items() if v == "failure:alarm"}
        assert alarmed == {("decode-a", "a19"), ("decode-b", "a19")}, (got, res.output)
        assert res.exit_code == 1 and "ALARM" in res.output, res.output
        assert got[("decode-b", "a18")] == "passed" and set(got) == everyone, got
    assert len(load_nights(results / "history")) == 3 * len(everyone)


def test_cli_a_failed_night_is_not_an_alarm_and_leaves_no_stale_report(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from orchestrator import core
    from orchestrator.derive import RunOutcome
    from orchestrator.results.store import RunDir

    fleet, plans = nightly_lab(tmp_path)
    results, junit, summary = tmp_path / "r", tmp_path / "ci" / "junit.xml", tmp_path / "ci" / "summary.md"
    app, runner = cli()
    args = ["nightly", "--fleet", str(fleet), "--plan", str(plans[0]), "--plan", str(plans[1]), "--reference", "ref",
            "--candidate", "good", "--results", str(results), "--junit", str(junit), "--summary", str(summary)]
    res = runner.invoke(app, [*args, "--night", "2026-07-01"])
    assert res.exit_code == 0 and "errors=\"0\"" in junit.read_text(), res.output

    real, calls = core.execute, []

    async def second_run_fails(run: RunDir, **kw: Any) -> RunOutcome:
        calls.append(run.run_id)
        if len(calls) == 1:  # before the first trial: the ids are out and last night's report is replaced
            assert "is running" in junit.read_text() and run.run_id in junit.read_text()
        if len(calls) == 2:
            raise RuntimeError("disk on fire\nsecond line")
        return await real(run, **kw)

    monkeypatch.setattr(core, "execute", second_run_fails)
    res = runner.invoke(app, [*args, "--night", "2026-07-02"])
    assert res.exit_code == 3, res.output  # not 1: 1 means alarm
    run_ids, again = started(res.output)
    failed = [line for line in res.output.splitlines() if line.startswith("nightly failed:")]
    assert failed == [f"nightly failed: RuntimeError: disk on fire second line (traceback in {summary}; "
                      f"finish the night with: {again})"], res.output
    assert again.endswith(f"--night 2026-07-02 --results {results} --junit {junit} --summary {summary}")
    # Last night's passing report is gone: tonight's says it did not finish, every planned case an error.
    assert set(cases(junit).values()) == {"error:unfinished"} and len(cases(junit)) == 3
    assert "2026-07-02" in junit.read_text() and "2026-07-01" not in junit.read_text()
    assert summary.read_text().startswith("# Nightly 2026-07-02: DID NOT FINISH") and "disk on fire" in \
        summary.read_text() and "Traceback" in summary.read_text()

    monkeypatch.setattr(core, "execute", real)
    res = runner.invoke(app, again.split()[1:])  # the printed command, as printed
    assert res.exit_code == 0, res.output
    resumed_ids, finish = started(res.output)  # the same runs; a confirmation started only now comes after them
    assert resumed_ids[:len(run_ids)] == run_ids and finish.startswith(again.split(" --night ")[0]), res.output
    got = cases(junit)
    assert set(got) == {("decode-a", "a19"), ("decode-b", "a19"), ("decode-b", "a18")}, got
    assert set(got.values()) == {"passed"}, got
    trials = load_history_trials(results / "history")
    tonight = trials[trials["night"] == "2026-07-02"]
    assert set(tonight["run_id"]) == set(resumed_ids) and not tonight.duplicated(["run_id", "device", "seq"]).any()
    # Each config x device: the plan's launches per arm, or the confirmation's 120 when the night was extended.
    sizes = tonight.assign(config=tonight["run_id"].str.extract(r"-(decode-[abc])-")[0]).groupby(
        ["config", "device", "role"], observed=True).size()
    assert len(sizes) == 2 * 3 and set(sizes) <= {load_plan(plans[0]).launches_per_arm(), 120}, sizes


def test_cli_nightly_unexpected_error_before_any_run_exits_3(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import orchestrator.night as nightly

    def boom(night: str) -> str:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(nightly, "check_night", boom)
    app, runner = cli()
    res = runner.invoke(app, ["nightly", "--fleet", str(SIM_LAB), "--plan", str(NIGHTLY), "--reference", "r",
                              "--candidate", "c", "--results", str(tmp_path / "r")])
    assert res.exit_code == 3 and res.output.strip() == "nightly failed: OSError: [Errno 28] No space left on device"


def test_compaction_of_several_runs_keeps_each_runs_newest_rows(tmp_path: Path) -> None:
    def rows(run_id: str, value: float, n: int) -> pd.DataFrame:
        return pd.DataFrame({"run_id": run_id, "config": "c", "device": "d", "seq": range(n),
                             "decode_tok_s": value, "effective_gb_s": None})  # null-typed, as sims write it

    history = tmp_path / "history"
    part = history / "trials" / "night=n1"
    later = time.time_ns() + 10**9  # mtimes a second apart: append order, whatever the clock's resolution
    for i, (run_id, value) in enumerate((("r1", 1.0), ("r2", 2.0), ("r3", 3.0), ("r1", 4.0))):
        append_history(history, "n1", rows(run_id, value, 3), rows(run_id, value, 1))
        for kind in ("trials", "nights"):
            os.utime(history / kind / "night=n1" / f"{run_id}.parquet", ns=(later + 2 * i * 10**9,) * 2)
        if i == 1:  # then two more runs on top of a compacted file, one of them r1 resumed
            compact_night(history, "n1")
            for kind in ("trials", "nights"):
                os.utime(next((history / kind / "night=n1").glob("night-*.parquet")), ns=(later + 3 * 10**9,) * 2)
    compact_night(history, "n1")
    assert len(list(part.glob("*.parquet"))) == 1
    # The config's comparison on that device: the newest run's (r1 resumed last), whatever the run ids say.
    assert load_nights(history)[["run_id", "decode_tok_s"]].to_dict("records") == [
        {"run_id": "r1", "decode_tok_s": 4.0}]
    # A night whose column is typed (a device reporting bytes per token) reads together with the others.
    append_history(history, "n2", rows("r9", 9.0, 2).assign(effective_gb_s=40.0), rows("r9", 9.0, 0))
    assert len(load_nights(history)) == 1
    got = load_history_trials(history)
    assert got.groupby("run_id", observed=True)["decode_tok_s"].agg(["size", "max"]).to_dict("index") == {
        "r1": {"size": 3, "max": 4.0}, "r2": {"size": 3, "max": 2.0}, "r3": {"size": 3, "max": 3.0},
        "r9": {"size": 2, "max": 9.0}}
    assert got["effective_gb_s"].astype(float).max() == 40.0


def test_a_night_without_any_comparison_reports_every_pair_missing(tmp_path: Path) -> None:
    summary = summarize(tmp_path / "history", "2026-01-01", [("c", "d")], {"c": NightlyAlarm()}, {("c", "d"): "why"})
    assert summary.missing == [("c", "d", "why")] and not summary.alarmed and summary.changes.empty
