"""The audit on the simulated lab: effective GB/s against the ceiling, and the prefill view.

Also home of `run_in_memory`, the fast in-process sim runner the other analysis tests import.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pandas as pd
import pytest
from conftest import ROOT, SIM_AB, SIM_LAB, fleet_of, plan_with, sim_device

from orchestrator import core
from orchestrator.analysis.audit import audit, ceiling_for, prefill_view
from orchestrator.config import ConfigError, Fleet, Plan, load_fleet, load_plan
from orchestrator.config.candidates import load_ceilings
from orchestrator.devices import open_device
from orchestrator.results import Manifest, MemoryJournal
from orchestrator.results.trials import trial_rows
from orchestrator.schedule import SessionState, run_sessions

CEILINGS = ROOT / "configs" / "ceilings.yaml"


def run_in_memory(fleet: Fleet, plan: Plan, seed: int | None = None) -> tuple[pd.DataFrame, Manifest]:
    """Run a plan on simulated devices in-process (MemoryJournal): its trial rows and manifest."""
    manifest = core.new_manifest(fleet, plan, Path("fleet.yaml"), Path("plan.yaml"), seed)
    journal = MemoryJournal()
    asyncio.run(run_sessions(manifest, journal, lambda d: open_device(fleet, d),
                             {s.device: SessionState() for s in manifest.sessions}))
    return trial_rows(manifest, journal.records), manifest  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def lab_audit() -> pd.DataFrame:
    trials, manifest = run_in_memory(load_fleet(SIM_LAB), load_plan(SIM_AB))
    return audit(trials, manifest, load_ceilings(CEILINGS)).set_index(["device", "arm"])


def test_a19_reads_like_the_seed(lab_audit: pd.DataFrame) -> None:
    # Seed: engine + custom kernel 36.5 tok/s = 28.6 GB/s; raw loop ~55 = 43.8 GB/s; A19 mixed ceiling ~44.
    engine, raw = lab_audit.loc[("iphone17pro", "engine")], lab_audit.loc[("iphone17pro", "rawloop")]
    assert engine["ceiling_gb_s"] == 44.0 and engine["ceiling_source"] == "ceilings.yaml: A19 Pro mixed"
    assert 26 < engine["effective_gb_s"] < 31 and 40 < raw["effective_gb_s"] < 46
    assert engine["effective_ci_low"] < engine["effective_gb_s"] < engine["effective_ci_high"]
    assert engine["reading"].startswith("raw-loop candidate") and 0.55 < engine["ratio"] < 0.7
    assert "no glue to harvest" in raw["reading"] and raw["ratio"] > 0.9
    # At the ceiling the engine would run ~44e9 / 783e6 = 56 tok/s.
    assert engine["ceiling_tok_s"] == pytest.approx(44e9 / 783e6)


def test_probe_beats_the_table_and_every_device_is_audited(lab_audit: pd.DataFrame) -> None:
    assert len(lab_audit) == 8 and lab_audit["ratio"].notna().all()
    a17 = lab_audit.loc[("iphone15pro", "engine")]
    assert a17["ceiling_source"].startswith("stream probe 42 GB/s x 0.71")
    assert a17["ceiling_gb_s"] == pytest.approx(42 * 0.71)


def test_ceiling_order_and_unknown_chip() -> None:
    table = load_ceilings(CEILINGS)
    assert ceiling_for(table, "A19 Pro", "llama-3.2-3b-q4").gb_s == 62  # dense: the clean stream
    assert ceiling_for(table, "A19 Pro", "llama-3.2-3b-q4", probe=58).gb_s == 58
    unknown = ceiling_for(table, "Z1", "llama")
    assert unknown.gb_s is None and "run the stream probe" in unknown.source
    assert ceiling_for(table, "A19 Pro", "bitcpm-8b-ternary").gb_s is None


def test_no_ceiling_and_no_bytes_say_so() -> None:
    fleet = fleet_of(sim_device(chip_class="Z9", runtimes={
        "coreai": {"decode_tok_s": 30.0}, "rawloop-metal": {"bytes_per_token": 1e9, "efficiency": 0.5},
    }))
    trials, manifest = run_in_memory(fleet, plan_with(model="bitcpm-8b"))
    rows = audit(trials, manifest, load_ceilings(CEILINGS)).set_index("arm")
    assert rows.loc["base", "reading"] == "no bytes per token reported: cannot audit"
    assert rows.loc["cand", "reading"] == "no ceiling: cannot audit"


def test_prefill_view_follows_chunk_width() -> None:
    fleet = fleet_of(sim_device(runtimes={
        "coreai": {"bytes_per_token": 783e6, "efficiency": 0.48, "prefill_tok_s": 60},
        "rawloop-metal": {"bytes_per_token": 783e6, "efficiency": 0.73, "prefill_tok_s": {1: 72, 4: 94.7}},
    }))
    trials, manifest = run_in_memory(fleet, plan_with(model="gemma-4-e2b-qat-mixed", trial={"chunk_width": 4}))
    view = prefill_view(trials, manifest, load_ceilings(CEILINGS))
    raw = view[view["arm"] == "cand"].set_index("chunk_width")
    assert list(raw.index) == [1, 4, 16, 128]
    assert raw.loc[4, "measured"] and not raw.loc[16, "measured"]
    assert raw.loc[4, "bytes_per_prefill_token"] == pytest.approx(783e6 / 4)
    assert raw.loc[128, "bytes_per_prefill_token"] == pytest.approx(783e6 / 128)  # ~6 MB at LiteRT's chunk
    assert 85 < raw.loc[4, "prefill_tok_s"] < 105
    assert "bit-exact" in raw.loc[4, "regime"] and "quality-class" in raw.loc[128, "regime"]


def test_bad_ceiling_file_is_located(tmp_path: Path) -> None:
    bad = tmp_path / "c.yaml"
    bad.write_text("workloads:\n  dense: {match: '.*'}\nchips:\n  A19 Pro: {stream_gbs: 60}\n")
    with pytest.raises(ConfigError) as exc:
        load_ceilings(bad)
    assert "c.yaml:4: chips.A19 Pro.stream_gbs: unknown field" in str(exc.value)


def test_cli_audit_and_its_bad_inputs(tmp_path: Path) -> None:
    import json

    import typer
    from typer.testing import CliRunner

    from orchestrator.cli_analysis import register

    app = typer.Typer()
    register(app)
    runner = CliRunner()
    results = tmp_path / "r"

    def make(device: dict[str, object]) -> str:
        f, p = tmp_path / "f.yaml", tmp_path / "p.yaml"
        f.write_text(json.dumps(fleet_of(device).model_dump(mode="json", exclude_defaults=True)))
        plan = plan_with(model="gemma-4-e2b-qat-mixed", retry={"max_attempts": 1, "max_consecutive_failures": 50})
        p.write_text(json.dumps(plan.model_dump(mode="json", exclude_defaults=True)))
        run = core.start_run(core.new_manifest(*core.load_inputs(f, p), f, p), results)
        asyncio.run(core.execute(run))
        return run.run_id

    good = make(sim_device(runtimes={"coreai": {"bytes_per_token": 783e6, "efficiency": 0.48},
                                     "rawloop-metal": {"bytes_per_token": 783e6, "efficiency": 0.73}}))
    res = runner.invoke(app, ["audit", good, "--results", str(results)])
    assert res.exit_code == 0 and "raw-loop candidate" in res.output and "Prefill" in res.output, res.output
    res = runner.invoke(app, ["audit", good, "--results", str(results), "--format", "json"])
    assert res.exit_code == 0 and len(json.loads(res.output)) == 2
    dead = make(sim_device("dead", faults={"crash": 1.0}))
    res = runner.invoke(app, ["audit", dead, "--results", str(results)])
    assert res.exit_code == 2 and "no finished trials" in res.output
    res = runner.invoke(app, ["rank", dead, "--results", str(results)])
    assert res.exit_code == 2 and "no finished trials" in res.output
    bad = tmp_path / "cands.yaml"
    bad.write_text("candidates: []\nextra: 1\n")
    res = runner.invoke(app, ["rank", "--candidates", str(bad)])
    assert res.exit_code == 2 and "extra: unknown field" in res.output
    res = runner.invoke(app, ["rank", good, "--results", str(results), "--format", "csv",
                              "--candidates", str(ROOT / "configs" / "candidates.yaml")])
    assert res.exit_code == 0 and res.output.startswith("rank,seed_rank,id"), res.output
