"""The change-point detector over many series at once gives the answers one series at a time gives."""

from __future__ import annotations

import numpy as np

from orchestrator.analysis.changepoint import detect, detect_many


def test_screened_series_give_the_same_points_as_each_alone() -> None:
    rng = np.random.default_rng(7)
    series = []
    for i in range(300):
        n = int(rng.integers(2, 70))
        x = rng.standard_normal(n)
        if i % 4 == 0:  # a shift half way, from invisible to obvious
            x[n // 2:] += [0.3, 1.0, 2.0, 5.0][(i // 4) % 4]
        if i % 9 == 0:
            x[int(rng.integers(0, n))] = np.nan  # dropped first, as detect drops it
        series.append(x)
    one_by_one = [detect(x) for x in series]
    assert detect_many(series) == one_by_one
    assert sum(1 for pts in one_by_one if pts) >= 20  # the shifts are found, so the screen was tested both ways
    assert detect_many(series, alpha=0.05, screen=(4,)) == [detect(x, alpha=0.05) for x in series]


def test_a_clear_shift_is_found_where_it_starts() -> None:
    x = np.r_[np.zeros(20), np.ones(20)] + np.random.default_rng(1).normal(0, 0.05, 40)
    assert detect_many([x, np.zeros(40) + np.random.default_rng(2).normal(0, 0.05, 40)]) == [[20], []]
