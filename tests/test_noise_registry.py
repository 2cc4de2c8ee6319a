"""The noise registry: A/A runs record each device's launch noise in the results folder; plan sizing
reads it (with its age and size); a device whose noise jumps is flagged."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
from conftest import fleet_of, plan_with, sim_device
from test_run import invoke, write_inputs

AA = [{"name": "a1", "runtime": "rawloop-metal"}, {"name": "a2", "runtime": "rawloop-metal"}]


def _aa(tmp_path: Path, sigma: float, name: str) -> tuple[int, str]:
    fleet = fleet_of(sim_device("steady", seed=8), sim_device("shaky", seed=9, noise={"sigma": sigma}))
    folder = tmp_path / name
    folder.mkdir()
    f, p = write_inputs(folder, fleet, plan_with(arms=AA, blocks=12))
    return invoke("run", "--fleet", str(f), "--plan", str(p), "--results", str(tmp_path / "r"))


def test_aa_runs_fill_the_registry_and_a_jump_is_flagged(tmp_path: Path) -> None:
    code, out = _aa(tmp_path, 0.06, "first")
    assert code == 0, out
    registry = pd.read_csv(tmp_path / "r" / "noise_registry.csv")
    assert sorted(registry["device"]) == ["shaky", "steady"] and set(registry["runtime"]) == {"rawloop-metal"}
    assert registry["sigma"].between(0.02, 0.15).all() and (registry["launches"] == 48).all(), registry
    code, out = _aa(tmp_path, 0.18, "second")  # the shaky phone's noise triples
    assert code == 0, out
    said = " ".join(out.split())
    assert "shaky (rawloop-metal, m): launch noise" in said and "something changed" in said, out
    assert "steady (rawloop-metal" not in said
    registry = pd.read_csv(tmp_path / "r" / "noise_registry.csv")
    assert len(registry) == 4 and registry["run_id"].nunique() == 2

    code, listed = invoke("plan", "noise", "--results", str(tmp_path / "r"), "--json")
    assert code == 0, listed
    latest = {r["device"]: r for r in json.loads(listed)}
    assert latest["shaky"]["sigma"] > 1.5 * latest["steady"]["sigma"] and latest["shaky"]["age_days"] < 1

    ab = tmp_path / "ab.yaml"
    ab.write_text("name: ab\nmodel: m\narms:\n  - {name: base, runtime: rawloop-metal}\n"
                  "  - {name: cand, runtime: coreai}\n")
    code, sized = invoke("plan", "size", str(ab), "--registry", "--results", str(tmp_path / "r"))
    assert code in (0, 1), sized
    assert "shaky (run" in sized and "launches)" in sized and "d old" in sized, sized
    assert "shaky: NOISE JUMP: launch noise" in " ".join(sized.split()) and "steady: NOISE JUMP" not in sized, sized


def test_a_plan_the_registry_knows_nothing_of_is_told_so(tmp_path: Path) -> None:
    ab = tmp_path / "ab.yaml"
    ab.write_text("name: ab\nmodel: m\narms:\n  - {name: base, runtime: coreai}\n  - {name: cand, runtime: coreai}\n")
    code, out = invoke("plan", "size", str(ab), "--registry", "--results", str(tmp_path / "none"))
    assert code == 2 and "holds nothing for coreai on m" in " ".join(out.split()), out
    code, out = invoke("plan", "size", str(ab), "--registry", "--sigma", "0.05")
    assert code == 2 and "one of --sigma S, --from RUN or --registry" in out, out
