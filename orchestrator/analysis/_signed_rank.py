"""Hodges-Lehmann shift of paired blocks with its Wilcoxon signed-rank p-value and interval.

Each paired block gives one difference ``d_k = mean(log candidate) - mean(log baseline)`` over the
block's values (ABBA: two of each; a Williams row: one of each; a failed trial leaves fewer). The
estimate is the median of the Walsh averages ``(d_i + d_j) / 2, i <= j``; the p-value is the
Wilcoxon signed-rank test of ``median d = 0`` and the interval is its inversion (order statistics
of the Walsh averages), so ``p < alpha`` exactly when the ``1 - alpha`` interval excludes 0.

Valid because, with arms exchangeable within a block, each ``d_k`` is symmetric about the true
shift (swapping a block's labels negates it; a throttled launch is as likely in either arm). The
null distribution of ``W+`` is exact (dynamic programming over ranks) up to ``EXACT_MAX`` blocks
and when no two ``|d_k|`` tie; otherwise the normal approximation with the tie correction.
Nothing is resampled: the result is deterministic and costs a sort of ``K (K + 1) / 2`` values.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import numpy.typing as npt
from scipy.stats import norm, rankdata

from orchestrator.analysis._resample import Paired

FloatArray = npt.NDArray[np.float64]
EXACT_MAX = 400


def block_differences(p: Paired) -> FloatArray:
    """``mean(candidate) - mean(baseline)`` of the log values in each paired block."""
    k = p.n_blocks
    c = p.is_cand.astype(np.float64)
    n_c = np.bincount(p.block_pos, c, minlength=k)
    n_b = np.bincount(p.block_pos, 1 - c, minlength=k)
    s_c = np.bincount(p.block_pos, p.y * c, minlength=k)
    s_b = np.bincount(p.block_pos, p.y * (1 - c), minlength=k)
    return np.asarray(s_c / n_c - s_b / n_b, dtype=np.float64)


@lru_cache(maxsize=64)
def _null_cdf(k: int) -> FloatArray:
    """``P(W+ <= w)`` for w = 0 .. K(K+1)/2 under the null, K differences without ties."""
    f = np.ones(1)
    for r in range(1, k + 1):
        g = np.zeros(f.size + r)
        g[: f.size] += f
        g[r:] += f
        f = g / 2
    cdf: FloatArray = np.minimum(np.cumsum(f), 1.0)
    cdf.setflags(write=False)
    return cdf


@dataclass(frozen=True)
class SignedRank:
    """The shift estimate and what the signed-rank test says of the blocks' differences."""

    d: FloatArray  # per-block differences
    walsh: FloatArray  # sorted Walsh averages
    estimate: float  # Hodges-Lehmann: median of the Walsh averages
    w_plus: float  # sum of the ranks of |d| over positive d (zeros dropped)
    n_nonzero: int
    exact: bool
    tie_var: float  # variance of W+ under the null, tie-corrected (normal approximation)

    def _cdf(self, w: float) -> float:
        """``P(W+ <= w)`` under the null."""
        k = self.n_nonzero
        if k == 0:
            return 1.0
        if self.exact:
            i = math.floor(w + 1e-9)
            return 0.0 if i < 0 else float(_null_cdf(k)[min(i, k * (k + 1) // 2)])
        mu = k * (k + 1) / 4
        return float(norm.cdf((w + 0.5 - mu) / math.sqrt(self.tie_var))) if self.tie_var > 0 else 1.0

    def p_two_sided(self) -> float:
        m = self.n_nonzero * (self.n_nonzero + 1) / 2
        low, high = self._cdf(self.w_plus), self._cdf(m - self.w_plus)  # P(W+ <= w), P(W+ >= w) by symmetry
        return min(1.0, 2 * min(low, high))

    def p_slower(self) -> float:
        """One-sided p that the candidate is slower (small W+)."""
        return min(1.0, self._cdf(self.w_plus))

    def interval(self, gamma: float) -> tuple[float, float]:
        """``1 - 2 gamma`` interval of the shift: ``gamma`` in each tail (inf where no bound exists)."""
        k = self.d.size
        m = self.walsh.size
        if k == 0:
            return -math.inf, math.inf
        if k <= EXACT_MAX:
            cdf = _null_cdf(k)
            below = np.flatnonzero(cdf <= gamma)
            a = int(below[-1]) if below.size else -1
        else:
            mu, sd = k * (k + 1) / 4, math.sqrt(k * (k + 1) * (2 * k + 1) / 24)
            a = math.floor(mu - 0.5 + sd * float(norm.ppf(gamma)))
        if a < 0 or m - a - 1 < a:
            return -math.inf, math.inf
        return float(self.walsh[a]), float(self.walsh[m - a - 1])


def signed_rank(d: FloatArray) -> SignedRank:
    i, j = np.triu_indices(d.size)
    walsh = np.sort((d[i] + d[j]) / 2)
    nz = d[d != 0]
    ranks = rankdata(np.abs(nz))
    k = int(nz.size)
    _, counts = np.unique(ranks, return_counts=True)
    ties = bool((counts > 1).any())
    tie_var = k * (k + 1) * (2 * k + 1) / 24 - float((counts**3 - counts).sum()) / 48
    return SignedRank(
        d=d, walsh=walsh, estimate=float(np.median(walsh)) if walsh.size else math.nan,
        w_plus=float(ranks[nz > 0].sum()), n_nonzero=k,
        exact=k <= EXACT_MAX and not ties and k == d.size, tie_var=tie_var,
    )
