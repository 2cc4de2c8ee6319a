"""`orch rank` logic: the seed's table alone, then joined with simulated runs whose truth is known."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from conftest import ROOT, fleet_of, plan_with, sim_device
from test_audit import CEILINGS, run_in_memory

from orchestrator.analysis.rank import empty_observations, observations, rank
from orchestrator.config import ConfigError
from orchestrator.config.candidates import load_candidates, load_ceilings

CANDIDATES = ROOT / "configs" / "candidates.yaml"


def a19(**runtimes: dict[str, object]) -> dict[str, object]:
    return sim_device("iphone17pro", chip_class="A19 Pro", bandwidth_gb_s=62.0, runtimes=runtimes)


def test_seed_table_alone_orders_gated_rows_last() -> None:
    table = rank(load_candidates(CANDIDATES), empty_observations(), load_ceilings(CEILINGS))
    assert list(table["id"]) == ["gemma4-e4b", "gemma4-e2b-vl", "gpt-oss-moe", "dense-3b", "bitcpm-8b"]
    rows = table.set_index("id")
    assert rows.loc["gemma4-e4b", "gain"] == pytest.approx(35 / 15.1)
    assert rows.loc["dense-3b", "gate_status"] == "audit first: no audit yet"
    assert rows.loc["dense-3b", "current_tok_s"] == 19.5 and rows.loc["dense-3b", "expected_tok_s"] == 35.5
    assert rows.loc["gpt-oss-moe", "gate_status"] == "-" and pd.isna(rows.loc["gpt-oss-moe", "gain"])


@pytest.fixture(scope="module")
def sim_obs() -> pd.DataFrame:
    # Dense 3B: engine at 19.5 tok/s reading 1.6 GB/token = 31 GB/s of a 62 GB/s stream; MLX at 35.
    dense, m1 = run_in_memory(fleet_of(a19(
        coreai={"bytes_per_token": 1.6e9, "efficiency": 19.5 * 1.6 / 62},
        mlx={"bytes_per_token": 1.6e9, "efficiency": 35 * 1.6 / 62},
    )), plan_with(model="llama-3.2-3b-instruct-q4", blocks=8, arms=[
        {"name": "engine", "runtime": "coreai"}, {"name": "mlx", "runtime": "mlx"}]))
    # Gemma 4 E4B: the engine measured at ~15 tok/s; 1.2 GB/token against the 44 GB/s mixed ceiling.
    e4b, m2 = run_in_memory(fleet_of(a19(
        coreai={"bytes_per_token": 1.2e9, "efficiency": 15.1 * 1.2 / 62},
    )), plan_with(model="gemma-4-e4b-qat-mixed", blocks=8, arms=[
        {"name": "a1", "runtime": "coreai"}, {"name": "a2", "runtime": "coreai"}]))
    return pd.concat([observations(dense, m1), observations(e4b, m2)], ignore_index=True)


def test_sim_runs_back_the_ranking(sim_obs: pd.DataFrame) -> None:
    table = rank(load_candidates(CANDIDATES), sim_obs, load_ceilings(CEILINGS))
    # The documented ordering (configs/candidates.yaml header): the audit lifts dense-3b into the ranked rows.
    assert list(table["id"]) == ["gemma4-e4b", "gemma4-e2b-vl", "dense-3b", "gpt-oss-moe", "bitcpm-8b"]
    rows = table.set_index("id")
    dense = rows.loc["dense-3b"]
    assert dense["gate_status"] == "audit first: met"
    assert dense["current_source"].startswith("measured (A19 Pro") and 18 < dense["current_tok_s"] < 21
    assert dense["expected_source"].startswith("measured mlx") and 32 < dense["expected_tok_s"] < 38
    assert 0.45 < dense["audit_ratio"] < 0.6 and dense["audit_reading"].startswith("raw-loop candidate")
    e4b = rows.loc["gemma4-e4b"]
    assert e4b["current_source"].startswith("measured") and e4b["expected_source"].startswith("seed")
    assert e4b["audit_bound_tok_s"] == pytest.approx(44e9 / 1.2e9)
    assert rows.loc["bitcpm-8b", "gate_status"] == "audit first: no audit yet"


def test_an_engine_near_the_ceiling_leaves_no_gain() -> None:
    # Never blame the model: the engine already streams 3 GB/token at 19.5 tok/s = 58.5 of 62 GB/s.
    trials, manifest = run_in_memory(fleet_of(a19(
        coreai={"bytes_per_token": 3.0e9, "efficiency": 19.5 * 3.0 / 62},
        **{"rawloop-metal": {"decode_tok_s": 19.0}},
    )), plan_with(model="smollm3-3b", blocks=6))
    rows = rank(load_candidates(CANDIDATES), observations(trials, manifest), load_ceilings(CEILINGS)).set_index("id")
    dense = rows.loc["dense-3b"]
    assert "no glue to harvest" in dense["audit_reading"]
    assert dense["expected_source"].startswith("seed, capped at the audit's bandwidth bound")
    assert dense["gain"] < 1.1


def test_unknown_field_in_candidates_is_located(tmp_path: Path) -> None:
    bad = tmp_path / "c.yaml"
    bad.write_text(CANDIDATES.read_text().replace("    gate: none\n", "    gate: none\n    colour: red\n", 1))
    with pytest.raises(ConfigError) as exc:
        load_candidates(bad)
    assert "candidates[0].colour: unknown field" in str(exc.value)


def test_a_history_ranks_in_duckdb_as_the_same_rows_do_in_memory(sim_obs: pd.DataFrame, tmp_path: Path) -> None:
    from orchestrator.analysis.rank import rank_summary, summarize_history

    history = tmp_path / "history"
    rows = sim_obs.copy()
    rows.loc[rows.index[:5], "status"] = "failed"  # failed trials and missing figures are not medians
    rows.loc[rows.index[5:8], "bytes_per_decode_token"] = float("nan")
    for i, (night, part) in enumerate(rows.groupby(rows.index % 3)):  # spread over three nights' files
        (history / "trials" / f"night=2026-01-0{night + 1}").mkdir(parents=True)
        part.drop(columns=["run_id"]).to_parquet(history / "trials" / f"night=2026-01-0{night + 1}" / f"r{i}.parquet")
    table, ceil = load_candidates(CANDIDATES), load_ceilings(CEILINGS)
    in_memory = rank(table, rows.drop(columns=["run_id"]), ceil)
    pd.testing.assert_frame_equal(rank_summary(table, summarize_history(history), ceil), in_memory)
    # Runs' rows join the history's in the same medians; each group names its runs.
    both = summarize_history(history, sim_obs.head(40))
    pooled = pd.concat([rows.drop(columns=["run_id"]), sim_obs.head(40)], ignore_index=True)
    ok = pooled[pooled["status"] == "ok"]
    dense = both[(both["model"] == "llama-3.2-3b-instruct-q4") & (both["runtime"] == "coreai")].iloc[0]
    mine = ok[(ok["model"] == "llama-3.2-3b-instruct-q4") & (ok["runtime"] == "coreai")]
    assert dense["n"] == len(mine) and dense["decode_tok_s"] == pytest.approx(mine["decode_tok_s"].median())
    assert dense["runs"] == ",".join(sorted({*mine["run_id"].dropna(), "history"}))


def test_medians_from_counts_equal_the_medians_of_the_values(tmp_path: Path) -> None:
    import numpy as np

    from orchestrator.results.history import medians_by

    rng = np.random.default_rng(3)
    n = 2001
    rows = pd.DataFrame({
        "model": rng.choice(["m1", "m2", "m3"], n), "chip_class": rng.choice(["A", "B"], n), "runtime": "r",
        "status": rng.choice(["ok", "ok", "ok", "failed"], n), "decode_tok_s": rng.normal(30, 3, n),
        "probe_gb_s": rng.choice([50.0, 55.5, 61.25, np.nan], n), "bytes_per_decode_token": rng.choice([7e8, 8e8], n),
    })
    for night, part in rows.groupby(np.arange(n) % 4):
        (tmp_path / "trials" / f"night={night}").mkdir(parents=True)
        part.to_parquet(tmp_path / "trials" / f"night={night}" / "f.parquet")
    keys, values = ["model", "chip_class", "runtime"], ["decode_tok_s", "probe_gb_s", "bytes_per_decode_token"]
    counted = medians_by(tmp_path, None, keys, values, "status = 'ok'",
                         counted=("probe_gb_s", "bytes_per_decode_token"))
    ok = rows[rows["status"] == "ok"]
    expected = ok.groupby(keys)[values].median().reset_index()
    pd.testing.assert_frame_equal(counted[[*keys, *values]], expected, check_exact=True)
    assert (counted["n"] == ok.groupby(keys).size().to_numpy()).all()
