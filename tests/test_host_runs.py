"""`orch run` and `orch devices` on real hosts: this machine and itself over SSH loopback."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
from conftest import MODEL, ORCH
from sshd import Sshd
from test_run import finals, invoke, only_run, write_inputs

from orchestrator.config import Fleet, Plan
from orchestrator.results import load_trials


def lab(sshd: Sshd, tmp_path: Path, harness: Path, **loop: object) -> Fleet:
    return Fleet.model_validate({
        "name": "loopback-lab",
        "hosts": [sshd.host(orch_command=ORCH, cache=str(tmp_path / "host cache"), **loop).model_dump()],
        "devices": [
            {"id": "here", "kind": "host", "workdir": str(tmp_path / "here")},
            {"id": "there", "kind": "host", "host": "loop", "harness": str(harness), "workdir": str(tmp_path / "w")},
        ],
    })


def test_orch_run_over_ssh_loopback_puts_real_results_in_the_journal(
    sshd: Sshd, tmp_path: Path, harness: Path
) -> None:
    plan = Plan.model_validate({
        "name": "cpu-threads", "model": MODEL, "blocks": 6, "devices": ["there"],
        "arms": [{"name": "t1", "runtime": "rawloop-cpu", "threads": 1},
                 {"name": "t2", "runtime": "rawloop-cpu", "threads": 2}],
        "trial": {"prompt_tokens": 16, "decode_tokens": 32, "timeout_s": 120},
        "settle": {"min_gap_s": 0, "flat_window_s": 0, "poll_s": 1, "timeout_s": 60},
        # an SSH host is checked for interference too; what this test checks must not depend on other work here
        "interference": None,
    })
    f, p = write_inputs(tmp_path, lab(sshd, tmp_path, harness), plan)
    code, out = invoke("run", "--fleet", str(f), "--plan", str(p), "--results", str(tmp_path / "r"))
    assert code == 0, out
    run = only_run(tmp_path / "r")
    assert len(finals(run)) == 24 and set(finals(run).values()) == {1}
    trials = load_trials(run.path)
    assert (trials["status"] == "ok").all(), trials[["status", "failure_message"]]
    # The model was put in the host's cache folder, and every spec named it there.
    (prepared,) = [r for r in run.records() if type(r).__name__ == "PreparedRecord"]
    assert prepared.model.startswith(str(tmp_path / "host cache" / "models") + "/")  # type: ignore[union-attr]
    assert prepared.model_sha256 == run.manifest().model_sha256 is not None  # type: ignore[union-attr]
    assert {r.result.model for r in run.records() if type(r).__name__ == "TrialRecord"} == {  # type: ignore[union-attr]
        prepared.model}  # type: ignore[union-attr]
    assert set(trials["engine_version"]) != {None} and (trials["decode_tok_s"] > 0).all()
    assert (trials["bytes_per_decode_token"] > 0).all()
    settle = next(r for r in run.records() if type(r).__name__ == "TrialRecord").settle  # type: ignore[union-attr]
    assert settle.before is not None and "thermal_state" in settle.before.unavailable, "recorded as unreadable"
    # Same model, same greedy decode: every trial produced the same tokens.
    tokens = {tuple(r.result.trial1.token_ids) for r in run.records()  # type: ignore[union-attr]
              if type(r).__name__ == "TrialRecord"}
    assert len(tokens) == 1
    # The stream probe ran once at the start of the session and is the audit's ceiling.
    (probe,) = [r for r in run.records() if type(r).__name__ == "StreamProbeRecord"]
    assert probe.device == "there" and probe.probe.gb_s > 0  # type: ignore[union-attr]
    assert (trials["probe_gb_s"] == probe.probe.gb_s).all()  # type: ignore[union-attr]
    # The run's own summary gated both arms' tokens against the numpy reference and kept the table.
    assert out.index("Verdicts") < out.index("Token gates") and "token_gates.csv" in out
    gates = pd.read_csv(run.gates_path).set_index("arm")
    assert set(gates.index) == {"t1", "t2"} and (gates["trials"] == 12).all()
    assert set(gates["decode"]) <= {"bit-exact", "quality-class"}, gates
    code, out = invoke("audit", run.run_id, "--results", str(tmp_path / "r"))
    assert code == 0 and "stream probe" in out, out


def test_orch_devices_lists_health_and_the_fix(sshd: Sshd, tmp_path: Path, harness: Path) -> None:
    f, _ = write_inputs(tmp_path, lab(sshd, tmp_path, harness), Plan.model_validate(
        {"name": "x", "model": "m", "arms": [{"name": "a", "runtime": "rawloop-cpu"},
                                             {"name": "b", "runtime": "rawloop-cpu"}]}))
    code, out = invoke("devices", "--fleet", str(f), "--json")
    rows = {r["id"]: r for r in json.loads(out)["devices"]}
    assert code == 0, out
    assert rows["here"]["health"]["state"] == "ok" and rows["there"]["health"]["state"] == "ok"
    assert rows["here"]["info"]["harness_version"], "built in this checkout"
    assert rows["there"]["info"]["harness_version"] is None, "not pushed yet: shown as none"
    assert rows["there"]["host"] == "loop" and rows["there"]["info"]["os"].startswith("Linux")
    assert rows["here"]["telemetry"]["load_1m"] is not None

    (tmp_path / "empty").write_text("")
    bad, _ = write_inputs(tmp_path, lab(sshd, tmp_path, harness, known_hosts=str(tmp_path / "empty")),
                          Plan.model_validate({"name": "x", "model": "m", "arms": [
                              {"name": "a", "runtime": "rawloop-cpu"}, {"name": "b", "runtime": "rawloop-cpu"}]}))
    code, out = invoke("devices", "--fleet", str(bad))
    assert code == 1
    assert "host_key_rejected" in out and "ssh-keyscan" in out
