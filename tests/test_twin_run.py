"""`orch run` end to end on a phone twin: the real harness app, launched through DVT over RSD on a
twin presenting iOS 18.2, the fleet pointing the iphone backend at the twin's usbmuxd and tunneld.
The plan's model is a file on the controller (model_location: controller, the default): prepare
installs the .ipa and pushes the model over AFC into the app's Documents/models/."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import textwrap
from pathlib import Path
from typing import Any

import pytest
from twin_support import BUNDLE, HARNESS, MODEL, ORCH, ROOT, harness_has_app, running_twin, twin_fleet

from orchestrator.twin import make_ipa


def _orch_run(tmp_path: Path, fleet: Path, plan: Path, **env_over: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HOME": str(tmp_path / "home"), "COLUMNS": "200", **env_over}
    return subprocess.run([str(ORCH), "run", "--fleet", str(fleet), "--plan", str(plan), "--results",
                           str(tmp_path / "results")], env=env, capture_output=True, text=True, timeout=300,
                          check=False)


def _orch_devices(tmp_path: Path, fleet: Path) -> dict[str, Any]:
    env = {**os.environ, "HOME": str(tmp_path / "home")}
    got = subprocess.run([str(ORCH), "devices", "--fleet", str(fleet), "--json"], env=env, capture_output=True,
                         text=True, timeout=120, check=False)
    (row,) = json.loads(got.stdout)["devices"]
    assert got.returncode == (0 if row["health"]["state"] == "ok" else 1), got.stdout + got.stderr
    return row


def _records(tmp_path: Path, kind: str) -> list[dict[str, Any]]:
    """The journal records of one type, of every run under results/, oldest run first."""
    out = []
    for journal in sorted((tmp_path / "results").glob("*/journal.jsonl")):
        out += [r for r in map(json.loads, journal.read_text().splitlines()) if r.get("type") == kind]
    return out


@pytest.mark.skipif(not harness_has_app(), reason="no harness build with `harness app` (swift build in ios_harness)")
def test_orch_run_on_a_twin_deploys_the_model_and_runs_the_raw_loop(tmp_path: Path) -> None:
    ipa = make_ipa(tmp_path / "twin.ipa", HARNESS, BUNDLE, minimum_os="16.0")
    table = tmp_path / "rawloop-cpu.json"  # as `orch export-tuning` writes one: deployed, then loaded by the app
    table.write_text(json.dumps({"engine": "rawloop-cpu", "device": "A18 Pro", "params": {"kv_cache": "f32"}}))
    with running_twin(tmp_path, ios="18.2", thermal_speed=20.0) as twin:
        fleet = twin_fleet(tmp_path / "fleet.yaml", twin, ipa)
        plan = tmp_path / "plan.yaml"
        plan.write_text(textwrap.dedent(f"""\
            name: twin-cpu-metal
            model: {MODEL}
            devices: [twin]
            arms:
              - {{name: cpu, runtime: rawloop-cpu, threads: 1, tuning_table: {table}}}
              - {{name: metal, runtime: rawloop-metal}}
            trial: {{prompt_tokens: 8, decode_tokens: 16, timeout_s: 60}}
            blocks: 6
            settle: {{flat_window_s: 0.5, flat_tolerance_c: 5, min_gap_s: 0, poll_s: 0.1, timeout_s: 60}}
            """))
        before = _orch_devices(tmp_path, fleet)
        first = _orch_run(tmp_path, fleet, plan)
        after = _orch_devices(tmp_path, fleet)
        # the second run names no address: both come from the environment, as `orch twin serve -- CMD` sets it
        bare = tmp_path / "bare-fleet.yaml"
        bare.write_text("\n".join(line for line in fleet.read_text().splitlines() if "_address:" not in line))
        second = _orch_run(tmp_path, bare, plan, USBMUXD_SOCKET_ADDRESS=twin.address,
                           TUNNELD_ADDRESS=twin.tunneld_address)
        launches = [argv for bundle, argv in twin.phone.processes.launches if bundle == BUNDLE]
        documents = twin.phone.apps.container(twin.phone.apps.get(BUNDLE)) / "Documents"
        models = sorted(p.relative_to(documents).as_posix() for p in (documents / "models").rglob("*") if p.is_file())
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    # `orch devices` on the twin: the app is missing until the run installs it, then all is well
    assert before["health"]["state"] == "harness_missing" and "prepare" in before["health"]["fix"], before
    assert before["info"]["chip_class"] == "A18 Pro" and before["info"]["harness_version"] is None, before
    assert after["health"]["state"] == "ok" and after["info"]["chip_class"] == "A18 Pro", after
    assert after["info"]["os"].startswith("iOS 18.2") and after["info"]["harness_version"].startswith("1.0 (1)")
    assert after["telemetry"]["battery_c"] is not None, after
    assert second.returncode == 0, second.stdout[-3000:] + second.stderr[-3000:]
    assert "│ twin   │ 24      │ 24 │ 0      │" in first.stdout, first.stdout
    assert "│ twin   │ A18 Pro │ metal vs cpu │ 12/12 │" in first.stdout, first.stdout  # the chip its ProductType names
    assert "Token gates" in first.stdout, first.stdout
    for arm in ("│ cpu   │ rawloop-cpu   │ Q8_0  │ 12     │", "│ metal │ rawloop-metal │ Q8_0  │ 12     │"):
        assert arm in first.stdout, first.stdout
    assert len(launches) == 48 and all(argv[1:3] == ["app", "--container"] for argv in launches)
    key = models[0].split("/")[1]
    assert models == [f"models/{key}/{MODEL.name}", f"models/{key}/{MODEL.name}.sha256"], models
    placed = f"tuning/{hashlib.sha256(table.read_bytes()).hexdigest()[:16]}/{table.name}"
    assert (documents / placed).read_bytes() == table.read_bytes()
    assert (documents / models[0]).read_bytes() == MODEL.read_bytes()
    one, two = _records(tmp_path, "prepared")
    assert [f["bytes_sent"] for f in one["files"]] == [MODEL.stat().st_size, table.stat().st_size]
    assert [f["bytes_sent"] for f in two["files"]] == [0, 0]
    assert one["tuning"] == {"cpu": placed}
    trials = _records(tmp_path, "trial")
    assert len(trials) == 48 and all(t["result"]["status"] == "ok" for t in trials)
    # the app loaded the deployed table (its params are in the result); the metal arm names none
    assert {json.dumps(t["result"]["tuning"]) for t in trials if t["arm"] == "cpu"} == {'{"kv_cache": "f32"}'}
    assert {json.dumps(t["result"]["tuning"]) for t in trials if t["arm"] == "metal"} == {"{}"}
    # settled on the twin's thermal model: the battery read over diagnostics_relay before each trial
    assert all(isinstance(t["settle"]["before"]["battery_c"], float) for t in trials)
    assert {t["result"]["engine_version"].endswith("(emulated Metal on CPU)") for t in trials} == {True, False}
    assert one["model"] == two["model"] == f"models/{key}/{MODEL.name}"
    assert one["info"]["chip_class"] == two["info"]["chip_class"] == "A18 Pro"  # what the phone said (prepared.info)
    # the audit (and every table) names the chip the phone reported, not the fleet's (it has none here)
    run_id = sorted((tmp_path / "results").glob("*/journal.jsonl"))[0].parent.name
    audited = subprocess.run([str(ORCH), "audit", run_id, "--results", str(tmp_path / "results"), "--ceilings",
                              str(ROOT / "configs" / "ceilings.yaml"), "--format", "csv"], capture_output=True,
                             text=True, timeout=120, check=False)
    assert audited.returncode == 0, audited.stdout + audited.stderr
    assert {row.split(",")[1] for row in audited.stdout.splitlines()[1:] if row} == {"A18 Pro"}, audited.stdout
