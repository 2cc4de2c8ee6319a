"""The pre-committed rule on the simulated lab, whose ground truth is known.

Full pipeline each repetition: scheduler, settle gate, sim physics (6% lognormal launch noise,
AR(1) 0.3, -2%/h drift, 3% throttled outliers, heating), trial rows, verdict.
"""

from __future__ import annotations

import asyncio
from collections import Counter

from conftest import fleet_of, plan_with, sim_device

from orchestrator import core
from orchestrator.analysis.summary import verdicts
from orchestrator.devices import open_device
from orchestrator.results import MemoryJournal
from orchestrator.results.trials import trial_rows
from orchestrator.schedule import SessionState, run_sessions

REPS = 100


def verdict_counts(gap: float, reps: int = REPS) -> Counter[str]:
    """One device per repetition, each with its own seed; 20 ABBA blocks = 40 launches per arm."""
    devices = [
        sim_device(f"rep{i}", seed=1000 + i, runtimes={
            "coreai": {"decode_tok_s": 50.0}, "rawloop-metal": {"decode_tok_s": 50.0 * (1 + gap)},
        })
        for i in range(reps)
    ]
    fleet = fleet_of(*devices)
    plan = plan_with(blocks=20, trial={"prompt_tokens": 64, "decode_tokens": 128},
                     decision={"estimator": "median", "adaptive": None})  # the fixed design on medians
    manifest = core.new_manifest(fleet, plan, __file__, __file__)  # type: ignore[arg-type]
    journal = MemoryJournal()
    asyncio.run(run_sessions(manifest, journal, lambda d: open_device(fleet, d),
                             {s.device: SessionState() for s in manifest.sessions}))
    trials = trial_rows(manifest, journal.records)  # type: ignore[arg-type]
    assert (trials.groupby("device")["status"].count() == 80).all()
    table = verdicts(trials, plan, seed=manifest.seed)
    assert (table["candidate"] == "cand").all() and len(table) == reps
    return Counter(table["verdict"])


def test_true_8pct_gap_is_called_faster_at_least_95pct() -> None:
    counts = verdict_counts(0.08)
    assert counts["faster"] >= 0.95 * REPS, counts
    assert counts["slower"] == 0


def test_no_gap_is_called_faster_or_slower_at_most_6pct() -> None:
    counts = verdict_counts(0.0)
    assert counts["faster"] + counts["slower"] <= 0.06 * REPS, counts
