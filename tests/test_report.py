"""`orch report`: one self-contained HTML file plus markdown, for whole, failed and nightly runs."""

from __future__ import annotations

import asyncio
import base64
import json
import math
import re
from pathlib import Path

import pandas as pd
import typer
from conftest import ROOT, SIM_LAB, fleet_of, plan_with, sim_device
from typer.testing import CliRunner

from orchestrator import core
from orchestrator.cli_analysis import register
from orchestrator.config.candidates import load_ceilings
from orchestrator.derive import derive
from orchestrator.report.html import render
from orchestrator.results.store import RunDir

CEILINGS = ROOT / "configs" / "ceilings.yaml"
runner = CliRunner()


def cli() -> typer.Typer:
    app = typer.Typer()
    register(app)
    return app


def run_on_disk(tmp_path: Path, fleet: dict[str, object], **plan: object) -> RunDir:
    f, p = tmp_path / "fleet.yaml", tmp_path / "plan.yaml"
    f.write_text(json.dumps(fleet_of(fleet).model_dump(mode="json", exclude_defaults=True)))
    p.write_text(json.dumps(plan_with(**plan).model_dump(mode="json", exclude_defaults=True)))
    fleet_cfg, plan_cfg = core.load_inputs(f, p)
    run = core.start_run(core.new_manifest(fleet_cfg, plan_cfg, f, p), tmp_path / "results")
    asyncio.run(core.execute(run))
    return run


def test_html_is_self_contained_and_shows_everything(tmp_path: Path) -> None:
    run = run_on_disk(tmp_path, sim_device(runtimes={
        "coreai": {"bytes_per_token": 783e6, "efficiency": 0.48}, "rawloop-metal": {"bytes_per_token": 783e6,
                                                                                     "efficiency": 0.73}}),
        model="gemma-4-e2b-qat-mixed")
    html_path, md_path = render(derive(run, load_ceilings(CEILINGS)), tmp_path / "out")
    html = html_path.read_text()
    assert not re.search(r"""(src|href)=["'](?!data:)""", html), "everything must be inline (opens offline)"
    images = re.findall(r'src="data:image/png;base64,([^"]+)"', html)
    assert len(images) == 3  # distributions, trial order, audit
    assert all(base64.b64decode(i).startswith(b"\x89PNG") for i in images)
    for text in ("Verdicts", "faster", "Audit", "no glue to harvest", "raw-loop candidate", "Token gates",
                 "PASS: bit-identical", "Prefill", "coreai: Apple engine", "rawloop-metal: raw loop (Metal)"):
        assert text in html, text
    md = md_path.read_text()
    assert "![audit](figures/audit.png)" in md and (tmp_path / "out" / "figures" / "audit.png").exists()


def test_partly_failed_run_still_renders_and_shows_failures(tmp_path: Path) -> None:
    run = run_on_disk(tmp_path, sim_device(faults={"crash": 0.25, "garbage": 0.1}),
                      retry={"max_attempts": 1, "max_consecutive_failures": 50})
    app = cli()
    res = runner.invoke(app, ["report", run.run_id, "--results", str(run.path.parent), "--out", str(tmp_path / "rep")])
    assert res.exit_code == 0, res.output
    html = (tmp_path / "rep" / "report.html").read_text()
    assert "Failures (kept as data)" in html and "crashed" in html


def test_report_bad_input(tmp_path: Path) -> None:
    res = runner.invoke(cli(), ["report", "nope", "--results", str(tmp_path)])
    assert res.exit_code == 2 and "no run 'nope'" in res.output


def test_nightly_report_shows_history_with_alarms(tmp_path: Path) -> None:
    app = cli()
    plan = ROOT / "configs" / "plans" / "nightly.yaml"
    results = tmp_path / "r"
    base = ["nightly", "--fleet", str(SIM_LAB), "--plan", str(plan), "--reference", "ref", "--results", str(results)]
    for night, build in (("2026-03-01", "candidate-good"), ("2026-03-02", "candidate-slow"),
                         ("2026-03-03", "candidate-slow")):
        runner.invoke(app, [*base, "--candidate", build, "--night", night])
    last = sorted(p for p in results.iterdir() if (p / "manifest.json").exists())[-1]
    res = runner.invoke(app, ["report", last.name, "--results", str(results), "--out", str(tmp_path / "rep")])
    assert res.exit_code == 0, res.output
    html = (tmp_path / "rep" / "report.html").read_text()
    assert "Nightly history" in html and '<span class="v alarm">alarm</span>' in html
    assert len(re.findall(r'src="data:image/png', html)) == 4


def test_free_text_is_inert_in_the_markdown(tmp_path: Path) -> None:
    """A model path or failure message with HTML or newlines cannot add headings, tags or table cells."""
    run = run_on_disk(tmp_path, sim_device(faults={"crash": 0.25}), model="m<script>x</script>\n# injected | cell",
                      retry={"max_attempts": 1, "max_consecutive_failures": 50})
    _, md_path = render(derive(run, load_ceilings(CEILINGS)), tmp_path / "out")
    md = md_path.read_text()
    assert "<script>" not in md and "\n# injected" not in md
    assert md.splitlines()[0] == "# Run " + run.run_id + ": t (m&lt;script&gt;x&lt;/script&gt; # injected / cell)"


def test_trials_run_throttled_are_listed_and_charted_apart(tmp_path: Path) -> None:
    run = run_on_disk(tmp_path, sim_device(thermal={"hidden_throttle_c": 30.0, "heat_c_per_s": 0.2}), probe=False,
                      settle={"min_gap_s": 0, "flat_window_s": 0, "timeout_s": 30, "battery_margin_c": 50,
                              "throttle_probe": {"wait_s": 5, "max_wait_s": 10}})
    app = cli()
    res = runner.invoke(app, ["report", run.run_id, "--results", str(run.path.parent), "--out", str(tmp_path / "rep")])
    assert res.exit_code == 0, res.output
    md = (tmp_path / "rep" / "report.md").read_text()
    assert "## Excluded from verdicts, audit and rank (kept as data)" in md
    assert "throttled: the throttle probe ran" in md
    res = runner.invoke(app, ["audit", run.run_id, "--results", str(run.path.parent)])
    assert res.exit_code == 0 and "excluded from verdicts, the audit and rank" in res.output
    res = runner.invoke(app, ["rank", run.run_id, "--results", str(run.path.parent)])
    assert res.exit_code == 0 and "excluded from verdicts, the audit and rank (phone: " in " ".join(res.output.split())


def test_an_arm_that_throttles_itself_from_rest_is_counted_and_the_report_says_so(tmp_path: Path) -> None:
    heavy = sim_device(runtimes={"coreai": {"decode_tok_s": 50.0},
                                 "rawloop-metal": {"decode_tok_s": 50.0, "load": 2.0, "launch_s": 4.0}},
                       thermal={"ambient_c": 24, "heat_c_per_s": 0.09, "hidden_throttle_c": 28.6},
                       noise={"sigma": 0.01, "outlier_rate": 0.0})
    run = run_on_disk(tmp_path, heavy, probe=False, retry={"backoff_s": 0}, trial={"prompt_tokens": 16,
                                                                                  "decode_tokens": 128},
                      settle={"throttle_probe": {"max_slowdown": 0.05, "rest_margin_c": 0.1}})
    res = runner.invoke(cli(), ["report", run.run_id, "--results", str(run.path.parent), "--out", str(tmp_path / "r")])
    assert res.exit_code == 0, res.output
    md = " ".join((tmp_path / "r" / "report.md").read_text().split())
    assert "12 trials ran throttled although started from a rest (phone cand: 12): counted" in md, md
    assert "## Excluded from verdicts" not in md, "nothing excluded: the heavy arm's own heat is its own"
    assert "slower" in md.split("## Verdicts", 1)[-1].split("##", 1)[0], "the real gap is the verdict"


def test_the_report_reads_what_derive_wrote_and_writes_nothing_into_the_run(tmp_path: Path) -> None:
    """Derive once, read many: the report shows the verdicts table derive wrote for this journal (here
    edited on disk, so a recomputation would show) and leaves the run's own files as they were."""
    run = run_on_disk(tmp_path, sim_device())
    derive(run, load_ceilings(CEILINGS))  # as orch run does at its end, with the lab's ceilings table
    table = run.verdicts_path.read_text()
    assert ",faster," in table
    run.verdicts_path.write_text(table.replace(",faster,", ",slower,"))  # the journal is unchanged: still current
    before = {p: p.read_bytes() for p in run.path.iterdir() if p.is_file()}
    res = runner.invoke(cli(), ["report", run.run_id, "--results", str(run.path.parent), "--out", str(tmp_path / "o")])
    assert res.exit_code == 0, res.output
    md = (tmp_path / "o" / "report.md").read_text()
    assert "slower" in md and "faster" not in md.split("## Verdicts", 1)[-1].split("##", 1)[0], md
    assert {p: p.read_bytes() for p in run.path.iterdir() if p.is_file()} == before, "the run's files untouched"


def test_audit_is_derived_once_per_ceilings_table_and_read_back(tmp_path: Path) -> None:
    """derive writes the audit against the ceilings it is given and says which (derived.json); orch audit
    reads that table (edited here on disk, so a recomputation would show) and writes nothing; another
    ceilings table derives the audit again, leaving the other tables as they were."""
    run = run_on_disk(tmp_path, sim_device())
    derive(run, load_ceilings(CEILINGS))
    stamp = json.loads(run.stamp_path.read_text())
    assert {"audit.csv", "sessions.csv"} <= set(stamp["tables"]) and stamp["ceilings_sha256"]
    audit_csv = run.table_path("audit")
    pd.read_csv(audit_csv).assign(reading="edited on disk").to_csv(audit_csv, index=False)
    before = {p: p.read_bytes() for p in run.path.iterdir() if p.is_file()}
    res = runner.invoke(cli(), ["audit", run.run_id, "--results", str(run.path.parent), "--ceilings", str(CEILINGS)])
    assert res.exit_code == 0 and "edited on disk" in res.output, res.output
    assert {p: p.read_bytes() for p in run.path.iterdir() if p.is_file()} == before, "orch audit wrote nothing"

    other = tmp_path / "ceilings.yaml"
    table = load_ceilings(CEILINGS).model_dump(mode="json")
    table["thresholds"]["near"] = 0.95  # another lab's table
    other.write_text(json.dumps(table))
    res = runner.invoke(cli(), ["audit", run.run_id, "--results", str(run.path.parent), "--ceilings", str(other)])
    assert res.exit_code == 0 and "edited on disk" not in res.output, res.output
    assert json.loads(run.stamp_path.read_text())["ceilings_sha256"] != stamp["ceilings_sha256"]
    for name in ("trials.parquet", "verdicts.csv", "sessions.csv"):
        assert (run.path / name).read_bytes() == before[run.path / name], f"{name} was not derived again"


def test_an_unbounded_interval_is_said_with_the_90_percent_interval_beside_it() -> None:
    """Too few blocks for p < alpha leave the (1 - alpha) CI unbounded: the tables say so, with the 90% CI
    that equivalence is judged by, instead of printing [0.000, inf]."""
    from orchestrator.report.console import ratio_ci

    row = {"ratio": 0.908, "ci_low": 0.0, "ci_high": math.inf, "ci90_low": 0.819, "ci90_high": 0.996, "alpha": 0.0083}
    assert ratio_ci(row) == "0.908 [unbounded at alpha 0.0083; 90%: 0.819, 0.996]"
    assert ratio_ci({**row, "ci_low": 0.85, "ci_high": 0.97}) == "0.908 [0.850, 0.970]"
