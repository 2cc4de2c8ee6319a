"""export-tuning on the simulated lab: the pick matches the sim's ground truth; the JSON is the harness's."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pandas as pd
import pytest
import typer
from conftest import ROOT, SIM_LAB, fleet_of, plan_with, sim_device
from test_audit import run_in_memory
from typer.testing import CliRunner

from orchestrator.analysis.tuning import HarnessTuningTable, TuningInputError, choose, harness_tables, write
from orchestrator.cli_analysis import register
from orchestrator.config import load_fleet, load_plan

SWEEP = ROOT / "configs" / "plans" / "sweep-tile-rows.yaml"
HARNESS = ROOT / "ios_harness"
TUNING_SWIFT = HARNESS / "Sources" / "HarnessCore" / "Tuning.swift"


@pytest.fixture(scope="module")
def evidence() -> pd.DataFrame:
    trials, manifest = run_in_memory(load_fleet(SIM_LAB), load_plan(SWEEP))
    return choose(trials, manifest)


def test_pick_matches_ground_truth(evidence: pd.DataFrame) -> None:
    chosen = evidence[evidence["chosen"]].set_index("chip_class")
    # sim-lab: only the A19 Pro's raw loop depends on tile_rows (32: +6%); elsewhere the default stays.
    assert json.loads(chosen.loc["A19 Pro", "params"]) == {"tile_rows": 32}
    for chip in ("A17 Pro", "A18 Pro", "M4"):
        assert json.loads(chosen.loc[chip, "params"]) == {"tile_rows": 16}, chosen.loc[chip, "reason"]
    a19 = evidence[evidence["chip_class"] == "A19 Pro"].set_index("arm")
    assert a19.loc["rows16", "verdict_vs_best"] == "faster"  # the best is distinguishably faster
    assert (evidence["n_trials"] == 120).all() and evidence["run_id"].nunique() == 1
    assert (evidence["ci_low"] <= evidence["median_tok_s"]).all()


def test_written_json_is_the_harness_table(evidence: pd.DataFrame, tmp_path: Path) -> None:
    paths = write(evidence, tmp_path / "tuning.json")
    jsons = sorted(p.name for p in paths if p.suffix == ".json")
    assert jsons == ["tuning.A17-Pro.json", "tuning.A18-Pro.json", "tuning.A19-Pro.json", "tuning.M4.json"]
    table = HarnessTuningTable.model_validate_json((tmp_path / "tuning.A19-Pro.json").read_bytes())
    assert table == HarnessTuningTable(engine="rawloop-metal", device="A19 Pro", params={"tile_rows": 32})
    csv = pd.read_csv(tmp_path / "tuning.csv")
    assert {"median_tok_s", "ci_low", "ci_high", "n_trials", "run_id", "chosen"} <= set(csv.columns)


def test_model_mirrors_the_swift_coding_keys() -> None:
    swift = TUNING_SWIFT.read_text()
    keys = re.search(r"enum CodingKeys: String, CodingKey, CaseIterable \{\s*case ([a-z, ]+)\n", swift)
    assert keys is not None, "Tuning.swift changed shape: update HarnessTuningTable"
    assert [k.strip() for k in keys.group(1).split(",")] == list(HarnessTuningTable.model_fields)
    assert "decoder.rejectUnknownKeys" in swift


def _harness() -> Path | None:
    for kind in ("release", "debug"):
        found = sorted(HARNESS.glob(f".build/*/{kind}/harness"))
        if found:
            return found[0]
    return None


@pytest.mark.skipif(_harness() is None, reason="harness not built (make swift)")
def test_the_real_harness_loads_what_we_write(tmp_path: Path) -> None:
    evidence = pd.DataFrame([{"chip_class": "x86 host", "engine": "rawloop-cpu", "params": '{"threads": 2}',
                              "chosen": True}])
    (path, _csv) = write(evidence, tmp_path / "t.json")
    spec = HARNESS / "Tests" / "Fixtures" / "protocol" / "valid" / "spec_golden_q8_0.json"
    out = tmp_path / "result.json"
    subprocess.run([str(_harness()), "run", "--spec", str(spec), "--out", str(out), "--tuning", str(path)],
                   cwd=HARNESS, check=True, capture_output=True, timeout=60)
    result = json.loads(out.read_text())
    assert result["status"] == "ok", result.get("error")
    assert result["tuning"] == {"threads": 2} and result["threads"] == 2


def test_one_configuration_is_bad_input(tmp_path: Path) -> None:
    same = plan_with(arms=[{"name": "a", "runtime": "coreai", "engine": {"x": 1}},
                           {"name": "b", "runtime": "coreai", "engine": {"x": 1}}])
    trials, manifest = run_in_memory(fleet_of(sim_device()), same)
    with pytest.raises(TuningInputError, match="one configuration"):
        choose(trials, manifest)


def test_cli_export_tuning(tmp_path: Path) -> None:
    app = typer.Typer()
    register(app)
    runner = CliRunner()
    plan = tmp_path / "sweep.yaml"
    plan.write_text(SWEEP.read_text() + "devices: [iphone17pro]\n")
    from orchestrator.cli import app as orch

    res = runner.invoke(orch, ["run", "--fleet", str(SIM_LAB), "--plan", str(plan), "--results", str(tmp_path)])
    assert res.exit_code == 0, res.output
    (run,) = [p.name for p in tmp_path.iterdir() if (p / "manifest.json").exists()]
    res = runner.invoke(app, ["export-tuning", run, "--results", str(tmp_path), "--out", str(tmp_path / "a19.json")])
    assert res.exit_code == 0, res.output
    assert json.loads((tmp_path / "a19.json").read_text())["params"] == {"tile_rows": 32}
    res = runner.invoke(app, ["export-tuning", "nope", "--results", str(tmp_path), "--out", str(tmp_path / "x")])
    assert res.exit_code == 2 and "no run 'nope'" in res.output
    res = runner.invoke(app, ["audit", "nope", "--results", str(tmp_path)])
    assert res.exit_code == 2


def test_a_table_carries_the_harness_engine_name() -> None:
    """llama.cpp in the harness runs as runtime `harness-llamacpp`; the harness knows the engine as `llamacpp`."""
    evidence = pd.DataFrame([{"chip_class": "A19 Pro", "engine": "harness-llamacpp", "chosen": True,
                              "params": json.dumps({"n_batch": 64})},
                             {"chip_class": "M4", "engine": "rawloop-cpu", "chosen": True, "params": "{}"}])
    tables = harness_tables(evidence)
    assert tables["A19 Pro"].engine == "llamacpp" and tables["A19 Pro"].params == {"n_batch": 64}
    assert tables["M4"].engine == "rawloop-cpu"
