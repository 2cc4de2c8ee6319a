"""`orch plan size`: the launches a plan needs, against the closed forms, and the command."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from conftest import AA, SIM_AB, SIM_LAB, plan_with
from scipy.stats import norm
from typer.testing import CliRunner

from orchestrator.analysis import mde
from orchestrator.analysis.sizing import (
    fixed_launches_for_effect,
    fixed_launches_for_equivalence,
    plan_operating,
    size,
)
from orchestrator.cli import app

runner = CliRunner()


@pytest.mark.parametrize(("estimator", "factor"), [("median", math.pi / 2), ("hodges_lehmann", math.pi / 3)])
@pytest.mark.parametrize("sigma", [0.03, 0.06, 0.12])
def test_fixed_launches_are_the_closed_forms(estimator: str, factor: float, sigma: float) -> None:
    """n = 2 (f sigma (z_{1-a/2} + z_power) / log(1 + effect))^2, and for equivalence
    n = 2 (f sigma (z_0.95 + z_{(1+power)/2}) / log(1.03))^2, rounded up."""
    plan = plan_with(decision={"estimator": estimator})
    z = norm.isf(0.025) + norm.isf(0.2)
    assert fixed_launches_for_effect(plan, sigma, 0.05) == math.ceil(2 * factor * (sigma * z / math.log(1.05)) ** 2)
    z_eq = norm.isf(0.05) + norm.isf(0.1)
    assert fixed_launches_for_equivalence(plan, sigma) == math.ceil(2 * factor * (sigma * z_eq / math.log(1.03)) ** 2)


def test_the_notes_minimum_detectable_effects_follow() -> None:
    """statistics.md: at sigma 6% and 40 launches per arm the median detects 4.7% at 80% power."""
    plan = plan_with(decision={"estimator": "median"})
    effect = mde(0.06, 40, 0.05, 0.8)  # log units
    assert effect == pytest.approx(0.047, abs=5e-4)
    assert fixed_launches_for_effect(plan, 0.06, math.expm1(effect)) in (40, 41)  # 40 up to rounding


def test_a_fixed_plan_operates_as_one_z_test() -> None:
    plan = plan_with(blocks=20, decision={"adaptive": None, "min_effect": 0.0})  # 40 per arm, Hodges-Lehmann
    se = math.sqrt(math.pi / 3) * 0.06 * math.sqrt(2 / 40)
    o = plan_operating(plan, 0.06, 0.05)
    assert o.faster == pytest.approx(norm.sf(norm.isf(0.025) - math.log(1.05) / se), abs=3e-3)
    assert o.mean_launches == pytest.approx(40)


def test_the_default_design_answers_no_difference_in_fewer_launches_than_its_cap() -> None:
    plan = plan_with(blocks=60, decision={})
    s = size(plan, 0.06)
    assert s.null.equivalent >= 0.8 and s.null.faster + s.null.slower == pytest.approx(0.05, abs=2e-3)
    assert 60 < s.null.mean_launches < 120 and s.alternative.mean_launches < 40
    assert s.blocks_for_equivalence is not None and s.blocks_for_equivalence <= 60
    assert plan_operating(plan, 0.06, 0.0, blocks=s.blocks_for_equivalence).equivalent >= 0.8
    assert plan_operating(plan, 0.06, 0.0, blocks=s.blocks_for_equivalence - 1).equivalent < 0.8


def test_orch_plan_size_with_sigma() -> None:
    res = runner.invoke(app, ["plan", "size", str(AA), "--sigma", "0.06"])
    assert res.exit_code == 0, res.output
    assert "aa-calibration: hodges_lehmann, adaptive" in res.output and "blocks needed (plan: 60)" in res.output
    short = runner.invoke(app, ["plan", "size", str(SIM_AB), "--sigma", "0.06"])
    assert short.exit_code == 1 and "20 blocks are too few to show equivalence" in short.output


def test_orch_plan_size_needs_one_noise_source() -> None:
    for args in ([], ["--sigma", "0.06", "--from", "x"]):
        res = runner.invoke(app, ["plan", "size", str(AA), *args])
        assert res.exit_code == 2 and "needs one of --sigma S, --from RUN or --registry" in res.output
    assert runner.invoke(app, ["plan", "size", str(AA), "--sigma", "3"]).exit_code == 2


def test_orch_plan_size_from_a_run(tmp_path: Path) -> None:
    plan = tmp_path / "aa.yaml"
    plan.write_text(AA.read_text() + "devices: [mac-m4]\n")
    done = runner.invoke(app, ["run", "--fleet", str(SIM_LAB), "--plan", str(plan), "--results", str(tmp_path / "r")])
    assert done.exit_code == 0, done.output
    (run,) = [p.name for p in (tmp_path / "r").iterdir() if p.is_dir()]
    res = runner.invoke(app, ["plan", "size", str(AA), "--from", run, "--results", str(tmp_path / "r")])
    assert res.exit_code == 0, res.output
    assert "mac-m4" in res.output
    missing = runner.invoke(app, ["plan", "size", str(AA), "--from", "nope", "--results", str(tmp_path / "r")])
    assert missing.exit_code == 2


def test_more_than_two_arms_size_each_pair_at_alpha_over_the_pairs() -> None:
    arms = [{"name": f"a{i}", "runtime": "coreai"} for i in range(3)]
    plan = plan_with(order="williams", blocks=60, arms=arms, decision={"adaptive": None})
    z = norm.isf(0.05 / 3 / 2) + norm.isf(0.2)
    assert fixed_launches_for_effect(plan, 0.06, 0.05) == math.ceil(2 * math.pi / 3 * (0.06 * z / math.log(1.05)) ** 2)
    null = plan_operating(plan, 0.06, 0.0)
    assert null.faster + null.slower == pytest.approx(0.05 / 3, abs=2e-3)
