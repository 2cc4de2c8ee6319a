"""Rank's per-night rollups: the medians they give are the medians of every raw row, bit for bit."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from orchestrator.results import history_rollup
from orchestrator.results.history import medians_by
from orchestrator.results.history_rollup import KEYS, MEASURES, WHERE, bins, refresh_rollups, summarize
from orchestrator.results.history_store import TRIAL_COLUMNS, append_history, compact_night, typed


def raw(history: Path | None, extra: pd.DataFrame | None) -> pd.DataFrame:
    """Today's answer: DuckDB's median over every row (counted values' medians read off their counts)."""
    return medians_by(history, extra, KEYS, MEASURES, WHERE, counted=tuple(MEASURES[1:]))


def trial_rows(rng: np.random.Generator, run_id: str, n: int) -> pd.DataFrame:
    """Trial rows of several groups, with what rank must skip or keep: failed trials, missing figures,
    a bytes-per-token figure that varies, a probe that does not, ties, a null chip class, an infinite rate."""
    frame = pd.DataFrame({c: pd.Series([None] * n, dtype="object") for c in TRIAL_COLUMNS})
    frame["run_id"] = run_id
    frame["config"], frame["device"], frame["arm"], frame["role"], frame["build"] = "c", "d", "a", "reference", "b"
    frame["model"] = rng.choice(["m1", "m2", "ü-m3"], n)
    frame["chip_class"] = np.array(["A18 Pro", "A19 Pro", None], dtype=object)[rng.choice(3, n, p=[0.45, 0.45, 0.1])]
    frame["runtime"] = rng.choice(["rawloop-metal", "mlx"], n)
    frame["status"] = rng.choice(["ok", "ok", "ok", "ok", "failed"], n)
    decode = 30 * np.exp(0.06 * rng.standard_normal(n))
    decode[rng.random(n) < 0.05] = 31.25  # ties, on a bin edge
    decode[rng.random(n) < 0.03] = np.nan
    decode[(frame["model"] == "m2").to_numpy() & (rng.random(n) < 0.02)] = np.inf
    frame["decode_tok_s"] = decode
    frame["bytes_per_decode_token"] = np.where(frame["runtime"] == "mlx", 7.83e8 + rng.integers(0, 40, n) * 1e5,
                                               7.83e8)
    frame.loc[rng.random(n) < 0.1, "bytes_per_decode_token"] = np.nan
    frame["probe_gb_s"] = rng.choice([55.5, 60.0, np.nan], n)
    for c in ("block", "seq", "prefill_tok_s", "effective_gb_s", "settle_waited_s"):
        frame[c] = 1.0
    frame["state_rose"] = False
    frame["wall_start"] = pd.Timestamp("2026-01-01", tz="UTC")
    return typed(frame)


def spy_derive(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The sources ``derive`` reads from (the real function runs)."""
    derived: list[str] = []
    real = history_rollup.derive

    def spy(con: object, source: str) -> pd.DataFrame:
        derived.append(source)
        return real(con, source)

    monkeypatch.setattr(history_rollup, "derive", spy)
    return derived


def test_bins_hold_their_values_and_never_overlap() -> None:
    rng = np.random.default_rng(1)
    values = np.concatenate([rng.lognormal(3, 2, 20000), [2.0**-1074, 1.0, 2.0, 31.25, 1e300, 0.0, -3.5, np.inf]])
    lo, hi = bins(values)
    ranged = lo < hi
    assert ((lo[ranged] <= values[ranged]) & (values[ranged] < hi[ranged])).all()
    assert (lo[~ranged] == values[~ranged]).all()  # a bin of their own value where edges are no doubles
    assert list(values[~ranged]) == [2.0**-1074, 0.0, -3.5, np.inf]
    edges = np.unique(np.stack([lo[ranged], hi[ranged]], axis=1), axis=0)
    assert (edges[1:, 0] >= edges[:-1, 1]).all()  # sorted by lower edge, each bin ends before the next starts
    assert (hi[ranged] / lo[ranged] - 1 <= 2.0**-7).all()  # at most 0.8% wide


def test_rollup_medians_equal_the_medians_of_every_row(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(7)
    history = tmp_path / "history"
    for k, n in enumerate([3001, 2500, 4002, 1999, 2800]):
        append_history(history, f"2026-01-0{k + 1}", trial_rows(rng, f"r{k}", n), pd.DataFrame())
    read_back: list[int] = []
    real = history_rollup._read_back

    def counting(*args: object) -> list[float]:  # the real function, counted: some medians need the rows
        out = real(*args)  # type: ignore[arg-type]
        read_back.append(len(out))
        return out

    monkeypatch.setattr(history_rollup, "_read_back", counting)
    got = summarize(history, None)
    pd.testing.assert_frame_equal(got, raw(history, None), check_exact=True)
    assert sum(read_back) > 0 and len(got) == 3 * 3 * 2
    assert np.isinf(got.loc[got["model"] == "m2", "decode_tok_s"]).sum() == 0  # inf rows counted, not the median

    # Runs' rows join the history's in the same medians and name their runs.
    extra = trial_rows(rng, "run-x", 700).assign(excluded=None)
    extra.loc[extra.index[:300], "run_id"] = "run-y"
    pd.testing.assert_frame_equal(summarize(history, extra), raw(history, extra), check_exact=True)
    alone = summarize(None, extra)
    pd.testing.assert_frame_equal(alone, raw(None, extra), check_exact=True)
    assert set(alone.loc[alone["chip_class"].isna(), "runs"]) == {"run-x,run-y"}  # a null chip class is a group


def test_rollups_follow_the_nights_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(11)
    history = tmp_path / "history"
    append_history(history, "n1", trial_rows(rng, "r1", 1500), pd.DataFrame())
    append_history(history, "n2", trial_rows(rng, "r2", 1500), pd.DataFrame())
    assert [len(list((history / "rollups" / f"night={n}").glob("rank-*.parquet"))) for n in ("n1", "n2")] == [1, 1]

    derived = spy_derive(monkeypatch)
    pd.testing.assert_frame_equal(summarize(history, None), raw(history, None), check_exact=True)
    assert derived == []  # both nights read from their rollups

    # A run appended to n2 by another writer (no rollup written): n2 is derived from its rows, n1 is not.
    rollup = next((history / "rollups" / "night=n2").glob("rank-*.parquet"))
    trial_rows(rng, "r3", 900).to_parquet(history / "trials" / "night=n2" / "r3.parquet", index=False)
    assert summarize(history, None).equals(raw(history, None))
    assert len(derived) == 1 and "night=n2" in derived[0]
    assert rollup.exists()  # a reader writes nothing

    # Compacting the night writes its rollup again, and it alone remains.
    compact_night(history, "n2")
    assert [p.name for p in (history / "rollups" / "night=n2").iterdir()] != [rollup.name]
    derived.clear()
    pd.testing.assert_frame_equal(summarize(history, None), raw(history, None), check_exact=True)
    assert derived == []


def test_a_history_from_before_rollups_is_ranked_from_its_rows(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(5)
    history = tmp_path / "history"
    nights = history_rollup.STALE_LIMIT + 2
    for k in range(nights):
        part = history / "trials" / f"night=2026-02-{k + 1:02d}"
        part.mkdir(parents=True)
        trial_rows(rng, f"r{k}", 400).to_parquet(part / "night-1.parquet", index=False)
    derived = spy_derive(monkeypatch)
    pd.testing.assert_frame_equal(summarize(history, None), raw(history, None), check_exact=True)
    assert derived == []  # too many nights without a rollup: one scan of the rows, not one derive a night
    assert refresh_rollups(history) == [f"2026-02-{k + 1:02d}" for k in range(nights)]
    assert refresh_rollups(history) == []
    pd.testing.assert_frame_equal(summarize(history, None), raw(history, None), check_exact=True)


def test_a_rollup_that_disagrees_with_the_rows_is_refused(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    history = tmp_path / "history"
    append_history(history, "n1", trial_rows(rng, "r1", 4000), pd.DataFrame())
    path = next((history / "rollups" / "night=n1").glob("rank-*.parquet"))
    frame = pd.read_parquet(path)
    frame.loc[frame["measure"] == "decode_tok_s", "count"] += 1  # counts no row holds
    frame.to_parquet(path, index=False)
    with pytest.raises(RuntimeError, match="rollups out of date"):
        summarize(history, None)


def test_a_night_without_rank_columns_has_an_empty_rollup(tmp_path: Path) -> None:
    history = tmp_path / "history"
    append_history(history, "n1", pd.DataFrame({"run_id": ["r"], "config": ["c"], "device": ["d"]}), pd.DataFrame())
    (path,) = (history / "rollups" / "night=n1").glob("rank-*.parquet")
    assert len(pd.read_parquet(path)) == 0
    assert len(summarize(history, None)) == 0
