"""Change points in a nightly history series: the second, slower signal beside the alarm rule.

Binary segmentation with a CUSUM statistic and a permutation test (in the spirit of E-Divisive /
Hunter, simplified to shifts in the mean): in a segment of n values, the split k maximizing
``|S_k - k/n S_n| / sqrt(k (n - k) / n)`` (S = cumulative sum of centred values) is a change point if
its statistic, scaled by the segment's robust spread, beats the same maximum over ``resamples``
shuffles of the segment with p < ``alpha``; then both sides are searched again. Segments shorter
than ``2 * min_size`` are not split. Deterministic for a seed.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt


def _max_stat(x: npt.NDArray[np.float64], min_size: int) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.int64]]:
    """Row-wise max of the normalized CUSUM over allowed splits, and where it is (x: rows of series)."""
    n = x.shape[-1]
    c = x - x.mean(axis=-1, keepdims=True)
    s = np.cumsum(c, axis=-1)[..., :-1]  # S_k for k = 1..n-1
    k = np.arange(1, n, dtype=np.float64)
    stat = np.abs(s) / np.sqrt(k * (n - k) / n)
    stat = stat[..., min_size - 1 : n - min_size]
    where = np.argmax(stat, axis=-1)
    return np.take_along_axis(stat, where[..., None], axis=-1)[..., 0], where + min_size


def detect(
    values: npt.ArrayLike, *, alpha: float = 0.01, min_size: int = 3, resamples: int = 199, seed: int = 0
) -> list[int]:
    """Indices where a new segment starts (sorted); NaNs are dropped first (indices refer to the rest)."""
    x = np.asarray(values, dtype=np.float64)
    x = x[np.isfinite(x)]
    rng = np.random.default_rng(seed)
    found: list[int] = []
    stack = [(0, x.size)]
    while stack:
        lo, hi = stack.pop()
        seg = x[lo:hi]
        if seg.size < 2 * min_size:
            continue
        obs, where = _max_stat(seg[None, :], min_size)
        perms = rng.permuted(np.broadcast_to(seg, (resamples, seg.size)), axis=1)
        null, _ = _max_stat(perms, min_size)
        p = (1 + int(np.count_nonzero(null >= obs[0] - 1e-12))) / (1 + resamples)
        if p < alpha:
            k = lo + int(where[0])
            found.append(k)
            stack += [(lo, k), (k, hi)]
    return sorted(found)
