"""The adaptive rule in plans and through `orch run`: validated fields, the digest, an A/A that ends equivalent."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pandas as pd
import pytest
from conftest import AA, SIM_LAB
from test_config import PLAN  # a plan whose line 6 is the next line
from typer.testing import CliRunner

from orchestrator.cli import app
from orchestrator.config import load_plan
from orchestrator.config.loader import ConfigError
from orchestrator.config.plan import DecisionRule
from orchestrator.results.records import LookRecord, SessionStopped
from orchestrator.results.store import RunDir

runner = CliRunner()



@pytest.mark.parametrize(("text", "line", "wanted"), [
    ("decision: {adaptive: {first_look: 0}}", 6,
     "decision.adaptive.first_look: Input should be greater than or equal to 2"),
    ("decision: {adaptive: {look_every: 1e9}}", 6,
     "decision.adaptive.look_every: Input should be less than or equal to 2000"),
    ("decision: {adaptive: {efficacy: haybittle}}", 6, "decision.adaptive.efficacy: Input should be 'pocock' or"),
    ("decision: {adaptive: {first_look: 15}}", 6,
     "decision: adaptive: first_look (15) and look_every (4) must be even with order abba-baab (a look ends a block)"),
    ("decision: {estimator: mean}", 6, "decision.estimator: Input should be 'hodges_lehmann' or 'median'"),
    ("decision:\n  sequential: {looks: [12]}\n  adaptive: {first_look: 12}", 6,
     "decision: sequential and adaptive are two designs: give one (adaptive: null for sequential)"),
])
def test_adaptive_fields_are_validated_and_located(
    write: Callable[[str, str], Path], text: str, line: int, wanted: str
) -> None:
    path = write("plan.yaml", PLAN + text + "\n")
    with pytest.raises(ConfigError) as exc:
        load_plan(path)
    assert any(str(p).startswith(f"{path}:{line}: {wanted}") for p in exc.value.problems), exc.value.problems


def test_the_defaults_and_the_digest() -> None:
    rule = DecisionRule()
    assert rule.estimator == "hodges_lehmann" and rule.adaptive is not None
    assert (rule.adaptive.first_look, rule.adaptive.look_every) == (16, 4)
    assert (rule.adaptive.efficacy, rule.adaptive.equivalence) == ("pocock", "obrien_fleming")
    assert DecisionRule(sequential={"looks": [12, 20], "futility": []}).adaptive is None  # type: ignore[arg-type]
    digests = {rule.digest(), DecisionRule(adaptive=None).digest(), DecisionRule(estimator="median").digest(),
               DecisionRule(adaptive={"look_every": 8}).digest(),  # type: ignore[arg-type]
               DecisionRule(adaptive={"efficacy": "obrien_fleming"}).digest()}  # type: ignore[arg-type]
    assert len(digests) == 5  # every choice of the design is part of the pre-committed rule
    assert DecisionRule.model_validate(rule.model_dump(mode="json")) == rule  # a manifest reads back the same


def test_an_aa_run_through_orch_run_ends_equivalent(tmp_path: Path) -> None:
    """The shipped A/A plan on two phones of the simulated lab: each session stops at an interim look
    with `equivalent` (well before the cap of 120 launches per arm), and the table says so."""
    plan = tmp_path / "aa.yaml"
    plan.write_text(AA.read_text() + "devices: [iphone17pro, mac-m4]\n")
    result = runner.invoke(app, ["run", "--fleet", str(SIM_LAB), "--plan", str(plan), "--results", str(tmp_path / "r")])
    assert result.exit_code == 0, result.output
    (run_path,) = [p for p in (tmp_path / "r").iterdir() if p.is_dir()]
    run = RunDir(run_path)
    verdicts = pd.read_csv(run.verdicts_path)
    assert list(verdicts["verdict"]) == ["equivalent", "equivalent"], verdicts[["device", "reason"]]
    assert (verdicts["n_baseline"] < 120).all()
    # the verdict is the answer of the interim look where the session stopped, at that look's levels
    assert verdicts["reason"].str.match(r"look \d+ of up to 27 \(\d+ launches per arm\): ").all(), verdicts["reason"]
    stops = {r.device: r.reason for r in run.records() if isinstance(r, SessionStopped)}
    assert stops == {"iphone17pro": "decided", "mac-m4": "decided"}
    last = {r.device: r for r in run.records() if isinstance(r, LookRecord)}
    assert all(lk.action == "decided" and lk.pairs[0].action == "equivalent" for lk in last.values())
    assert {d: lk.n_per_arm for d, lk in last.items()} == dict(zip(verdicts["device"], verdicts["n_baseline"],
                                                                   strict=True))
    assert "equivalent" in result.output
