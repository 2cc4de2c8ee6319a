"""Whole runs on the simulated lab: the journal, exit codes, faults, early stops, interrupts, resume."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pandas as pd
from conftest import SIM_AB, SIM_LAB, fleet_of, plan_with, sim_device
from pydantic import BaseModel
from typer.testing import CliRunner

from orchestrator import core
from orchestrator.cli import app
from orchestrator.config import Fleet, Plan
from orchestrator.results import load_trials, read_journal
from orchestrator.results.records import (
    AttemptFailed,
    LookRecord,
    PreparedRecord,
    RunFinished,
    SessionStopped,
    TrialRecord,
)
from orchestrator.results.store import RunDir

runner = CliRunner()


def write_inputs(tmp_path: Path, fleet: Fleet, plan: Plan) -> tuple[Path, Path]:
    """YAML is a superset of JSON: the models' own dump is a valid input file."""
    f, p = tmp_path / "fleet.yaml", tmp_path / "plan.yaml"
    f.write_text(json.dumps(fleet.model_dump(mode="json", exclude_defaults=True), indent=1))
    p.write_text(json.dumps(plan.model_dump(mode="json", exclude_defaults=True), indent=1))
    return f, p


def invoke(*args: str) -> tuple[int, str]:
    result = runner.invoke(app, list(args))
    return result.exit_code, result.output


def only_run(results: Path) -> RunDir:
    (run,) = [p for p in results.iterdir() if p.is_dir()]
    return RunDir(run)


def finals(run: RunDir) -> Counter[str]:
    return Counter(r.trial_id for r in run.records() if isinstance(r, TrialRecord))


def test_demo_lab_end_to_end(tmp_path: Path) -> None:
    results = tmp_path / "results"
    code, out = invoke("run", "--fleet", str(SIM_LAB), "--plan", str(SIM_AB), "--results", str(results))
    assert code == 0, out
    run = only_run(results)
    assert out.startswith(f"run {run.run_id}")
    manifest = run.manifest()
    assert manifest.rule_digest == manifest.plan.decision.digest()
    assert len(manifest.sessions) == 4 and all(len(s.trials) == 80 for s in manifest.sessions)
    # the adaptive rule: a ~1.4x gap is answered at the first look (16 launches per arm, 8 ABBA blocks)
    stops = {r.device: r.reason for r in run.records() if isinstance(r, SessionStopped)}
    assert set(stops.values()) == {"decided"}, stops
    assert set(finals(run).values()) == {1} and len(finals(run)) == 4 * 32
    trials = load_trials(run.path)
    assert len(trials) == 4 * 32 and set(trials["arm"]) == {"engine", "rawloop"}
    verdicts = run.verdicts_path.read_text()
    # Ground truth: the raw loop is ~1.3-1.5x the engine on every device of the lab.
    assert verdicts.count(",faster,") == 4, verdicts
    code, shown = invoke("show", run.run_id, "--results", str(results))
    assert code == 0 and shown.count("faster") == 4 and manifest.rule_digest in shown
    assert isinstance(run.records()[-1], RunFinished)


def test_failures_are_data_the_run_still_completes(tmp_path: Path) -> None:
    fleet = fleet_of(sim_device("flaky", faults={"garbage": 0.15, "crash": 0.1}), sim_device("steady", seed=4))
    plan = plan_with(retry={"max_attempts": 2, "backoff_s": 5, "max_consecutive_failures": 50})
    f, p = write_inputs(tmp_path, fleet, plan)
    code, out = invoke("run", "--fleet", str(f), "--plan", str(p), "--results", str(tmp_path / "r"))
    assert code == 0, out
    run = only_run(tmp_path / "r")
    records = run.records()
    retried = [r for r in records if isinstance(r, AttemptFailed)]
    failed = [r for r in records if isinstance(r, TrialRecord) and r.failure]
    assert retried and all(r.device == "flaky" and r.will_retry for r in retried)
    assert failed and {r.failure.kind for r in failed if r.failure} <= {"bad_output", "crashed"}
    assert all(r.attempts == 2 for r in failed), "a final failure comes after the retry cap"
    assert set(finals(run).values()) == {1} and len(finals(run)) == 48
    trials = load_trials(run.path)
    assert (trials["status"] == "failed").sum() == len(failed)
    assert "failed" in out


def test_a_lost_device_stops_its_session_the_others_go_on(tmp_path: Path) -> None:
    fleet = fleet_of(sim_device("lost", faults={"lost_after_s": 1800}), sim_device("fine", seed=5))
    f, p = write_inputs(tmp_path, fleet, plan_with(settle={"timeout_s": 600}))
    code, out = invoke("run", "--fleet", str(f), "--plan", str(p), "--results", str(tmp_path / "r"))
    assert code == 1, out
    run = only_run(tmp_path / "r")
    stops = {r.device: r for r in run.records() if isinstance(r, SessionStopped)}
    assert stops["fine"].reason == "completed"
    assert stops["lost"].reason == "device_unavailable"
    done = Counter(r.device for r in run.records() if isinstance(r, TrialRecord))
    assert done["fine"] == 24 and 0 < done["lost"] < 24
    assert "orch run --resume" in out


def test_never_settling_device_times_out_with_reason(tmp_path: Path) -> None:
    fleet = fleet_of(sim_device("hot", thermal={"start_rise_c": 30.0, "cool_tau_s": 100000}))
    f, p = write_inputs(tmp_path, fleet, plan_with())
    code, _ = invoke("run", "--fleet", str(f), "--plan", str(p), "--results", str(tmp_path / "r"))
    assert code == 1
    run = only_run(tmp_path / "r")
    (stop,) = [r for r in run.records() if isinstance(r, SessionStopped)]
    assert stop.reason == "settle_timeout"
    assert stop.detail == "before hot-0000 (the settle gate still held after 900 s: thermal state critical)"


def test_sequential_looks_stop_a_decided_comparison_early(tmp_path: Path) -> None:
    fleet = fleet_of(sim_device(runtimes={"coreai": {"decode_tok_s": 36.5}, "rawloop-metal": {"decode_tok_s": 55}}))
    plan = plan_with(blocks=20, decision={"sequential": {"looks": [12, 20, 30, 40]}, "estimator": "median"})
    f, p = write_inputs(tmp_path, fleet, plan)
    code, out = invoke("run", "--fleet", str(f), "--plan", str(p), "--results", str(tmp_path / "r"))
    assert code == 0, out
    run = only_run(tmp_path / "r")
    looks = [r for r in run.records() if isinstance(r, LookRecord)]
    assert [(lk.look, lk.action) for lk in looks] == [(0, "decided")]
    assert looks[0].n_per_arm == 12
    assert len(finals(run)) == 24, "stopped at the first look: 12 launches per arm"
    (stop,) = [r for r in run.records() if isinstance(r, SessionStopped)]
    assert stop.reason == "decided"
    assert "faster" in out


def test_interrupt_keeps_the_journal_and_resume_finishes(tmp_path: Path) -> None:
    fleet = fleet_of(sim_device("a"), sim_device("b", seed=8))
    f, p = write_inputs(tmp_path, fleet, plan_with())
    fleet_cfg, plan_cfg = core.load_inputs(f, p)
    run = core.start_run(core.new_manifest(fleet_cfg, plan_cfg, f, p), tmp_path / "r")

    async def interrupted() -> None:
        task = asyncio.current_task()
        seen = 0

        def observe(device: str, record: BaseModel) -> None:
            nonlocal seen
            seen += isinstance(record, TrialRecord)
            if seen == 17 and task is not None:
                task.cancel()

        await core.execute(run, observe=observe)

    with contextlib.suppress(asyncio.CancelledError):
        asyncio.run(interrupted())
    stops = [r for r in run.records() if isinstance(r, SessionStopped)]
    assert {s.reason for s in stops} == {"interrupted"} and len(stops) == 2
    assert 17 <= len(finals(run)) < 48
    code, out = invoke("run", "--resume", run.run_id, "--results", str(tmp_path / "r"))
    assert code == 0, out
    assert set(finals(run).values()) == {1} and len(finals(run)) == 48


def start_and_signal(tmp_path: Path, sig: signal.Signals) -> tuple[RunDir, int, bytes]:
    """`orch run` in its own process on 12 devices x 80 trials; `sig` once 100 trials are journaled."""
    devices = [sim_device(f"p{i}", seed=i, faults={"crash": 0.05}) for i in range(12)]
    # the fixed design: every planned trial runs, so the resume can be checked trial by trial
    f, p = write_inputs(tmp_path, fleet_of(*devices), plan_with(blocks=20, decision={"adaptive": None}))
    results = tmp_path / "r"
    proc = subprocess.Popen(
        [sys.executable, "-m", "orchestrator", "run", "--fleet", str(f), "--plan", str(p), "--results", str(results)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=os.environ | {"PYTHONUNBUFFERED": "1"},
    )
    deadline = time.monotonic() + 60
    journal = None
    while time.monotonic() < deadline and journal is None:
        runs = list(results.glob("*/journal.jsonl")) if results.exists() else []
        if runs and runs[0].read_bytes().count(b'"type":"trial"') >= 100:
            journal = runs[0]
        time.sleep(0.002)
    proc.send_signal(sig)
    output, _ = proc.communicate(timeout=60)
    assert journal is not None, "the run never got going"
    return RunDir(journal.parent), proc.returncode, output


def test_ctrl_c_exits_130_with_a_valid_journal_and_resumes(tmp_path: Path) -> None:
    run, code, output = start_and_signal(tmp_path, signal.SIGINT)
    assert code == 130, output
    assert b"Resume with: orch run --resume" in output and b"Traceback" not in output
    stops = [r for r in run.records() if isinstance(r, SessionStopped)]
    assert stops and {s.reason for s in stops} <= {"interrupted", "completed"}
    code, out = invoke("run", "--resume", run.run_id, "--results", str(run.path.parent))
    assert code == 0, out
    assert len(finals(run)) == 960 and set(finals(run).values()) == {1}


def test_sigkill_mid_run_then_resume_runs_every_trial_exactly_once(tmp_path: Path) -> None:
    run, code, _ = start_and_signal(tmp_path, signal.SIGKILL)
    assert code == -signal.SIGKILL
    before = finals(run)
    assert 100 <= len(before) < 960, "killed mid-run"
    assert not any(isinstance(r, RunFinished) for r in read_journal(run.journal_path))
    code, out = invoke("run", "--resume", run.run_id, "--results", str(run.path.parent))
    assert code == 0, out
    after = finals(run)
    planned = {t.trial_id for s in run.manifest().sessions for t in s.trials}
    assert set(after) == planned and set(after.values()) == {1}
    assert all(after[t] == 1 for t in before)


def test_torn_last_line_is_ignored_and_cut_before_appending(tmp_path: Path) -> None:
    fleet = fleet_of(sim_device("a"))
    f, p = write_inputs(tmp_path, fleet, plan_with())
    fleet_cfg, plan_cfg = core.load_inputs(f, p)
    run = core.start_run(core.new_manifest(fleet_cfg, plan_cfg, f, p), tmp_path / "r")
    asyncio.run(core.execute(run))
    data = run.journal_path.read_bytes()
    lines = data.split(b"\n")
    cut = b"\n".join(lines[:10]) + b"\n" + lines[10][: len(lines[10]) // 2]
    run.journal_path.write_bytes(cut)
    assert len(read_journal(run.journal_path)) == 10
    code, out = invoke("run", "--resume", run.run_id, "--results", str(tmp_path / "r"))
    assert code == 0, out
    assert set(finals(run).values()) == {1} and len(finals(run)) == 24


def test_resume_and_show_of_unknown_runs_exit_2(tmp_path: Path) -> None:
    code, out = invoke("run", "--resume", "nope", "--results", str(tmp_path))
    assert code == 2 and "no run 'nope'" in out
    code, out = invoke("show", "nope", "--results", str(tmp_path))
    assert code == 2 and "no run 'nope'" in out
    code, out = invoke("run", "--fleet", str(SIM_LAB))
    assert code == 2 and "needs --fleet FILE and --plan FILE" in out


def test_show_prints_token_gates_beside_the_verdicts(tmp_path: Path) -> None:
    f, p = write_inputs(tmp_path, fleet_of(sim_device("a")), plan_with())
    code, _ = invoke("run", "--fleet", str(f), "--plan", str(p), "--results", str(tmp_path / "r"))
    run = only_run(tmp_path / "r")
    (run.path / "token_gates.csv").write_text(
        "device,arm,runtime,quant_class,trials,distinct_sequences,prefill,decode,first_divergence,worst_margin,"
        "tie,error\na,cand,rawloop-metal,Q8_0,12,1,bit-exact,quality-class,7,0.21,0.5,\n")
    stamp = json.loads(run.stamp_path.read_text())  # as a derive of real trials would have listed it
    run.stamp_path.write_text(json.dumps({**stamp, "tables": [*stamp["tables"], "token_gates.csv"]}))
    code, out = invoke("show", run.run_id, "--results", str(tmp_path / "r"))
    assert code == 0 and "Token gates" in out and "quality-class" in out
    assert out.index("Verdicts") < out.index("Token gates")
    code, out = invoke("report", run.run_id, "--results", str(tmp_path / "r"), "--out", str(tmp_path / "rep"))
    assert code == 0, out
    for name in ("report.md", "report.html"):
        text = (tmp_path / "rep" / name).read_text()
        assert "Against the numpy reference decoder" in text and "quality-class" in text


def test_three_arms_are_decided_as_one_family_per_device(tmp_path: Path) -> None:
    """Three arms on a simulated phone (ground truth: the metal raw loop 20% faster than the other two):
    the three pairs' p-values are Holm-adjusted together, and the run says so above the table."""
    device = sim_device("a", runtimes={"rawloop-metal": {"decode_tok_s": 60.0}, "coreai": {"decode_tok_s": 50.0},
                                       "rawloop-cpu": {"decode_tok_s": 50.0}})
    plan = plan_with(order="williams", blocks=12, decision={"adaptive": None}, arms=[
        {"name": "engine", "runtime": "coreai"}, {"name": "cpu", "runtime": "rawloop-cpu"},
        {"name": "metal", "runtime": "rawloop-metal"}])
    f, p = write_inputs(tmp_path, fleet_of(device), plan)
    code, out = invoke("run", "--fleet", str(f), "--plan", str(p), "--results", str(tmp_path / "r"))
    assert code == 0, out
    assert "for each device's 3 pairs together: p is Holm-adjusted, MDE at alpha/3" in out
    v = load_verdicts(only_run(tmp_path / "r")).set_index("candidate")
    assert (v["family"] == 3).all() and (v["p_adjusted"] >= v["p_value"]).all()
    assert v.loc["metal", "verdict"].tolist() == ["faster", "faster"], v[["baseline", "verdict", "p_adjusted"]]
    assert v.loc["metal", "reason"].iloc[0].startswith("Holm p over 3 pairs=")


def load_verdicts(run: RunDir) -> pd.DataFrame:
    return pd.read_csv(run.verdicts_path)


def test_a_resume_on_a_device_that_changed_is_refused_unless_accepted(tmp_path: Path) -> None:
    """Each session journals what the device said it is (model, chip, OS, harness); resumed on a device that
    now says otherwise (here the phone's OS moved on overnight), its session stops as `device_changed` and
    runs nothing, as pyperf refuses to mix runs from different machines; the user may accept the mix."""
    f, p = write_inputs(tmp_path, fleet_of(sim_device("a", os="18.2")), plan_with())
    run = core.start_run(core.new_manifest(*core.load_inputs(f, p), f, p), tmp_path / "r")

    async def interrupted() -> None:
        task = asyncio.current_task()

        def observe(device: str, record: BaseModel) -> None:
            if isinstance(record, TrialRecord) and record.seq == 5 and task is not None:
                task.cancel()

        await core.execute(run, observe=observe)

    with contextlib.suppress(asyncio.CancelledError):
        asyncio.run(interrupted())
    prepared = [r for r in run.records() if isinstance(r, PreparedRecord)]
    assert len(prepared) == 1 and prepared[0].info is not None and prepared[0].info.os == "18.2"
    assert prepared[0].chip() == "A19 Pro"
    before = len(finals(run))

    manifest = json.loads(run.manifest_path.read_text())
    manifest["fleet"]["devices"][0]["os"] = "18.3"  # what the simulated phone answers from now on
    run.manifest_path.write_text(json.dumps(manifest))
    code, out = invoke("run", "--resume", run.run_id, "--results", str(tmp_path / "r"))
    assert code == 1, out
    stop = [r for r in run.records() if isinstance(r, SessionStopped)][-1]
    assert stop.reason == "device_changed" and "OS 18.2 -> 18.3" in stop.detail, stop
    assert "--accept-device-change" in stop.detail and len(finals(run)) == before, "nothing ran on the other phone"

    code, out = invoke("run", "--accept-device-change", "--fleet", str(f), "--plan", str(p))
    assert code == 2 and "goes with --resume" in out, out
    code, out = invoke("run", "--resume", run.run_id, "--results", str(tmp_path / "r"), "--accept-device-change")
    assert code == 0, out
    assert len(finals(run)) == 24 and set(finals(run).values()) == {1}
