"""A guard on `orch rank`: its measured tok/s and audit reading never come from trials that failed the
interference check. Trials spoiled by other work run at a fifth of the speed here, so a reading that drew on
them would say so in the printed numbers."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pandas as pd
from conftest import fleet_of, plan_with, sim_device
from typer.testing import CliRunner

from orchestrator import core
from orchestrator.analysis.audit import RULE
from orchestrator.cli import app
from orchestrator.clock import VirtualClock
from orchestrator.derive import derive
from orchestrator.devices import FakeDevice
from orchestrator.devices.interference import CpuSample
from orchestrator.protocol import Generation, TrialResult, TrialSpec
from orchestrator.results.journal import Journal
from orchestrator.results.store import RunDir
from orchestrator.schedule import SessionState, run_sessions

RULE_WORDS = " ".join(RULE.split())
CLEAN, SPOILED, BYTES = 19.5, 4.0, 1.6e9  # tok/s; bytes per token: 31 GB/s clean of a 62 GB/s stream


class Lab:
    """One launch after another: the launches `spoiled` names had other work beside them (half of two
    CPUs, as the CPU counters around them say) and ran slow; the rest ran alone at full speed."""

    def __init__(self, spoiled: set[int]):
        self.spoiled, self.launch, self.samples, self.busy = spoiled, -1, 0, 0.0

    def result(self, spec: TrialSpec) -> TrialResult:
        self.launch += 1
        step = int(1e9 / (SPOILED if self.launch in self.spoiled else CLEAN))
        n = spec.decode_tokens
        gen = Generation(prefill_ns=1000, ttft_ns=2000, token_ids=list(range(n)),
                         token_times_ns=[2000 + step * i for i in range(n)])
        return TrialResult(run_id=spec.run_id, trial_id=spec.trial_id, status="ok", engine=spec.engine,
                           engine_version="1", harness_build="b", model=spec.model, prompt_tokens=spec.prompt_tokens,
                           chunk_width=1, trial1=gen, bytes_per_decode_token=int(BYTES))

    def cpu(self) -> CpuSample:
        self.samples += 1
        if self.samples % 2 == 0 and self.launch in self.spoiled:  # the sample after a spoiled launch
            self.busy += 1.0
        return CpuSample(t=float(self.samples), busy_s=self.busy, own_s=0.0, cpus=2,
                         others={(42, 1): ("hog", self.busy)})


def run_with(tmp_path: Path, spoiled: set[int]) -> tuple[Path, str]:
    fleet = fleet_of(sim_device("iphone17pro", chip_class="A19 Pro", bandwidth_gb_s=62.0,
                                runtimes={"coreai": {"decode_tok_s": CLEAN}, "mlx": {"decode_tok_s": 35.0}}))
    plan = plan_with(model="llama-3.2-3b-instruct-q4", probe=False, retry={"max_attempts": 1},
                     arms=[{"name": "engine", "runtime": "coreai"}, {"name": "mlx", "runtime": "mlx"}],
                     settle={"min_gap_s": 0, "flat_window_s": 0, "timeout_s": 30})
    run = core.start_run(core.new_manifest(fleet, plan, tmp_path / "f.yaml", tmp_path / "p.yaml"),
                         tmp_path / "results")
    manifest = run.manifest()
    lab = Lab(spoiled)
    device = FakeDevice("iphone17pro", lab.result, cpu=lab.cpu)
    asyncio.run(run_sessions(manifest, Journal(run.journal_path), lambda d: (device, VirtualClock()),
                             {s.device: SessionState() for s in manifest.sessions}))
    derive(RunDir(run.path))
    return tmp_path / "results", run.run_id


def dense(results: Path, run_id: str) -> tuple[dict[str, object], str]:
    res = CliRunner().invoke(app, ["rank", run_id, "--results", str(results), "--json"])
    assert res.exit_code == 0, res.output
    (row,) = [r for r in json.loads(res.output)["rows"] if r["id"] == "dense-3b"]
    table = CliRunner().invoke(app, ["rank", run_id, "--results", str(results)], terminal_width=400)
    assert table.exit_code == 0, table.output
    return row, " ".join(table.output.split())


def test_rank_reads_its_audit_from_clean_trials_only(tmp_path: Path) -> None:
    results, run_id = run_with(tmp_path, spoiled={0, 3, 4, 7, 8, 11})  # 6 of the 24 launches, in both arms
    table = pd.read_parquet(RunDir(results / run_id).path / "trials.parquet")
    out = table[table["excluded"].notna()]
    assert len(out) == 6 and out["excluded"].str.startswith("interference").all()
    assert (out["decode_tok_s"] < CLEAN / 2).all(), "the spoiled trials are the slow ones"
    row, printed = dense(results, run_id)
    assert abs(float(row["current_tok_s"]) - CLEAN) < 0.01, "the engine's median from clean trials only"
    assert abs(float(row["audit_ratio"]) - CLEAN * BYTES / 1e9 / 62.0) < 1e-3
    clean = int((table["arm"] == "engine").sum() - (out["arm"] == "engine").sum())
    assert str(row["current_source"]).endswith(f"n={clean})")
    assert "6 finished trials excluded from verdicts, the audit and rank (iphone17pro: 6 interference)" in printed


def test_rank_gives_no_audit_reading_when_every_trial_of_the_runtime_was_spoiled(tmp_path: Path) -> None:
    results, run_id = run_with(tmp_path, spoiled=set(range(24)))
    row, printed = dense(results, run_id)
    assert row["audit_reading"] == "no audit yet" and row["audit_ratio"] is None
    assert row["current_source"] == "seed", "the seed's figure, not one from spoiled trials"
    assert "24 finished trials excluded" in printed
    audit = CliRunner().invoke(app, ["audit", run_id, "--results", str(results)], terminal_width=400)
    words = " ".join(audit.output.split())
    assert audit.exit_code == 0 and "nothing to audit: no finished trial a conclusion may be drawn from" in words
    assert "24 finished trials excluded" in words and "GB/s" not in words.replace(RULE_WORDS, ""), "no reading at all"
