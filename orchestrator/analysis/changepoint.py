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


def _first_perms(n: int, resamples: int, seed: int) -> npt.NDArray[np.intp]:
    """The index shuffles ``detect`` draws for its first test of a series of n values: the shuffle does
    not depend on the values, so every series of one length shares them."""
    rng = np.random.default_rng(seed)
    return rng.permuted(np.broadcast_to(np.arange(n), (resamples, n)), axis=1)


def detect_many(
    series: list[npt.ArrayLike], *, alpha: float = 0.01, min_size: int = 3, resamples: int = 199, seed: int = 0,
    screen: tuple[int, ...] = (8, 32, 199),
) -> list[list[int]]:
    """``detect`` on each series, the same answers, faster over thousands of series.

    Most series hold no change: their first test fails, which is certain as soon as enough shuffles
    beat the observed statistic. Series of one length are screened together on the first ``screen``
    shuffles (clear wins only, with a margin); every series that might hold a change goes through
    ``detect`` itself.
    """
    xs = [np.asarray(v, dtype=np.float64) for v in series]
    xs = [x[np.isfinite(x)] for x in xs]
    out: list[list[int] | None] = [None] * len(xs)
    need = max(0, int(np.ceil(alpha * (1 + resamples) - 1 - 1e-9)))  # shuffles at or above obs for p >= alpha
    by_len: dict[int, list[int]] = {}
    for i, x in enumerate(xs):
        if x.size < 2 * min_size:
            out[i] = []
        else:
            by_len.setdefault(x.size, []).append(i)
    for n, members in by_len.items():
        perms = _first_perms(n, resamples, seed)
        k = np.arange(1, n, dtype=np.float64)
        weight = (1 / np.sqrt(k * (n - k) / n))[min_size - 1 : n - min_size]
        for chunk in range(0, len(members), 512):  # ~512 x 32 x n floats at a time
            rows = members[chunk : chunk + 512]
            data = np.stack([xs[i] for i in rows])
            obs, _ = _max_stat(data, min_size)
            centred = data - data.mean(axis=-1, keepdims=True)  # a shuffle keeps the mean
            seen = np.zeros(len(rows), dtype=np.int64)
            open_ = np.arange(len(rows))
            lo = 0
            for upto in screen:
                hi = min(upto, resamples)
                if hi <= lo or not open_.size:
                    break
                sums = np.cumsum(centred[open_][:, perms[lo:hi]], axis=-1)[..., min_size - 1 : n - min_size]
                null = (np.abs(sums) * weight).max(axis=-1)
                # Clear wins only: a shuffle that beats the observed value by more than rounding could.
                seen[open_] += np.count_nonzero(null > obs[open_, None] * (1 + 1e-9) + 1e-12, axis=1)
                for j in open_[seen[open_] >= max(need, 1)]:
                    out[rows[j]] = []
                open_ = open_[seen[open_] < max(need, 1)]
                lo = hi
    return [o if o is not None else detect(x, alpha=alpha, min_size=min_size, resamples=resamples, seed=seed)
            for o, x in zip(out, xs, strict=True)]
