"""`orch run` on a phone twin: the raw loop against llama.cpp inside the one harness app (runtime
`harness-llamacpp`, the app's `llamacpp` engine), interleaved and settled, with verdicts and token gates.
The twin runs the Linux harness build as the app; that build links the llamacpp environment's libllama
(`make llama`), where a phone's app would link llama.cpp's XCFramework (docs/llamacpp-engine.md)."""

from __future__ import annotations

import json
import os
import subprocess
import textwrap
from pathlib import Path

import pandas as pd
import pytest
from twin_support import BUNDLE, HARNESS, MODEL, ORCH, harness_has_app, running_twin, twin_fleet

from orchestrator.twin import make_ipa


def _harness_has_llamacpp() -> bool:
    if not harness_has_app():
        return False
    info = subprocess.run([str(HARNESS), "info"], capture_output=True, text=True, timeout=60, check=False)
    return info.returncode == 0 and "llamacpp" in json.loads(info.stdout).get("engines", [])


@pytest.mark.skipif(not _harness_has_llamacpp(), reason="no harness build with llama.cpp (make llama, then build)")
def test_twin_runs_the_raw_loop_against_llamacpp_inside_the_app(tmp_path: Path) -> None:
    ipa = make_ipa(tmp_path / "twin.ipa", HARNESS, BUNDLE, minimum_os="16.0")
    with running_twin(tmp_path, ios="18.2", thermal_speed=20.0) as twin:
        fleet = twin_fleet(tmp_path / "fleet.yaml", twin, ipa)
        plan = tmp_path / "plan.yaml"
        plan.write_text(textwrap.dedent(f"""\
            name: twin-cpu-llamacpp
            model: {MODEL}
            devices: [twin]
            arms:
              - {{name: cpu, runtime: rawloop-cpu, threads: 1}}
              - {{name: llama, runtime: harness-llamacpp, threads: 1}}
            trial: {{prompt_tokens: 8, decode_tokens: 16, chunk_width: 4, timeout_s: 60}}
            blocks: 6
            settle: {{flat_window_s: 0.5, flat_tolerance_c: 5, min_gap_s: 0, poll_s: 0.1, timeout_s: 60}}
            """))
        env = {**os.environ, "HOME": str(tmp_path / "home"), "COLUMNS": "200"}
        run = subprocess.run([str(ORCH), "run", "--fleet", str(fleet), "--plan", str(plan), "--results",
                              str(tmp_path / "results")], env=env, capture_output=True, text=True, timeout=600,
                             check=False)
        launches = [argv for bundle, argv in twin.phone.processes.launches if bundle == BUNDLE]
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert len(launches) == 24 and all(argv[1:3] == ["app", "--container"] for argv in launches)
    (journal,) = (tmp_path / "results").glob("*/journal.jsonl")
    trials = [r for r in map(json.loads, journal.read_text().splitlines()) if r.get("type") == "trial"]
    assert len(trials) == 24 and all(t["result"]["status"] == "ok" for t in trials), trials[:1]
    llama = [t["result"] for t in trials if t["arm"] == "llama"]
    # One app, two engines: the app ran llama.cpp under the harness's name for it, timed by the same runner.
    assert {r["engine"] for r in llama} == {"llamacpp"}
    assert all(r["engine_version"].startswith("llamacpp 2 (llama.cpp ") for r in llama)
    assert all(len(r["trial1"]["token_ids"]) == 16 and r["threads"] == 1 for r in llama)
    assert all(isinstance(t["settle"]["before"]["battery_c"], float) for t in trials), "settled on the twin"
    assert "│ twin   │ A18 Pro │ llama vs cpu │ 12/12 │" in run.stdout, run.stdout
    assert "Token gates" in run.stdout, run.stdout
    gates = pd.read_csv(journal.parent / "token_gates.csv").set_index("arm")
    # Both engines of the app pass the gate against the numpy reference on the same Q8_0 file.
    for arm in ("cpu", "llama"):
        assert gates.loc[arm, "prefill"] in {"bit-exact", "quality-class"}, gates
        assert gates.loc[arm, "decode"] in {"bit-exact", "quality-class"}, gates
    assert (gates["distinct_sequences"] == 1).all(), gates
