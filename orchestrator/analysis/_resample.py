"""Vectorised resampling engines behind :func:`orchestrator.analysis.decision.compare`.

Everything here works on one pair of arms already reduced to *paired blocks* (blocks holding at
least one value of each arm), in log units. There is no Python loop over resamples: each engine
builds an ``(N, R)`` matrix (values down, resamples across) and reduces it with cumulative sums.

The trick used throughout is the *weighted median over a fixed sort order*: a resample never
re-sorts values, it only changes how many times each (pre-sorted) value counts. The median of the
multiset is then read off the cumulative weights, which is exactly ``np.median`` of the expanded
sample (mean of the two middle values when the count is even).
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import permutations
from statistics import NormalDist

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]

# Blocks up to this size draw one of the m! position permutations from a table (one random integer
# per block and resample); larger blocks fall back to argsort of random keys.
_TABLE_MAX_BLOCK = 6

# Permutation statistics equal to the observed one up to float rounding count as "as extreme".
TIE_TOL = 1e-10


@dataclass(frozen=True, eq=False)
class Paired:
    """Two arms' log values laid out by (block size, block, value); blocks of equal size contiguous.

    The layout does not depend on which arm is called the candidate, so swapping the arms gives the
    same random draws and exactly negated statistics.
    """

    y: FloatArray  # log values, layout order
    is_cand: BoolArray  # True where the value belongs to the candidate arm
    block_pos: IntArray  # 0..K-1: the paired block of each position (layout order)
    block_start: IntArray  # (K,) first layout position of each block
    block_size: IntArray  # (K,) values in each block (both arms)

    @property
    def n_blocks(self) -> int:
        return int(self.block_start.size)

    @property
    def n_cand(self) -> int:
        return int(self.is_cand.sum())

    @property
    def n_base(self) -> int:
        return int(self.y.size - self.is_cand.sum())


def layout(y: FloatArray, is_cand: BoolArray, block: IntArray) -> Paired:
    """Order the pooled values by (block size, block id, value) and index the blocks."""
    _, dense, sizes = np.unique(block, return_inverse=True, return_counts=True)
    order = np.lexsort((y, dense, sizes[dense]))
    ys, cs, bs = y[order], is_cand[order], dense[order]
    new_block = np.ones(bs.size, dtype=bool)
    new_block[1:] = bs[1:] != bs[:-1]
    block_start = np.flatnonzero(new_block).astype(np.int64)
    block_size = np.diff(np.append(block_start, bs.size)).astype(np.int64)
    block_pos = (np.cumsum(new_block) - 1).astype(np.int64)
    return Paired(ys, cs, block_pos, block_start, block_size)


def _cumsum_rows(w: npt.NDArray[np.integer] | BoolArray, dtype: type[np.integer]) -> npt.NDArray[np.integer]:
    """Cumulative sum down axis 0 of an ``(N, R)`` array.

    A loop over the N rows, each a vectorised add over all R resamples: several times faster than
    ``np.cumsum(axis=0)`` for the short-and-wide arrays used here.
    """
    c = w.astype(dtype)  # always a fresh copy
    for j in range(1, c.shape[0]):
        np.add(c[j], c[j - 1], out=c[j])
    return c


def _count_dtype(total: int) -> type[np.integer]:
    return np.uint8 if total < 2**8 else np.int16 if total < 2**15 else np.int64


def weighted_medians(
    xs_sorted: FloatArray, cum_w: npt.NDArray[np.integer], total: int | npt.NDArray[np.integer]
) -> FloatArray:
    """Per-resample median of ``xs_sorted`` where value ``j`` counts ``w[j, r]`` times.

    ``cum_w`` is the ``(N, R)`` cumulative sum of the weights down axis 0 and ``total`` its last row
    (or a scalar). Exactly ``np.median`` of the expanded sample.
    """
    lo = (total - 1) // 2
    hi = total // 2
    i_lo = np.count_nonzero(cum_w <= lo, axis=0)
    i_hi = i_lo if np.array_equal(lo, hi) else np.count_nonzero(cum_w <= hi, axis=0)
    return np.asarray(0.5 * (xs_sorted[i_lo] + xs_sorted[i_hi]), dtype=np.float64)


def median_difference(p: Paired) -> float:
    """median(candidate logs) - median(baseline logs) — the observed statistic."""
    return float(np.median(p.y[p.is_cand]) - np.median(p.y[~p.is_cand]))


@dataclass(frozen=True, eq=False)
class PermutationDraws:
    """Within-block permutations of the arm labels, ``R`` of them, for every paired block.

    ``groups`` holds, per block size m, the layout indices of those blocks ``(K_g,)`` and the permuted
    candidate labels ``(K_g, R, m)`` (label of the block's o-th value in resample r).
    """

    resamples: int
    groups: list[tuple[IntArray, BoolArray]]


def draw_permutations(p: Paired, resamples: int, rng: np.random.Generator) -> PermutationDraws:
    """Shuffle the arm labels within each block, uniformly over the block's m! orderings.

    Labels move with positions (not the other way round), so swapping the arms complements every
    draw exactly.
    """
    groups = []
    for m in np.unique(p.block_size):
        ks = np.flatnonzero(p.block_size == m).astype(np.int64)
        starts = p.block_start[ks]
        if m <= _TABLE_MAX_BLOCK:
            table = np.array(list(permutations(range(int(m)))), dtype=np.int64)
            n_perm = table.shape[0]
            lab_tab = p.is_cand[starts[:, None, None] + table[None, :, :]]  # (K_g, m!, m)
            idx = rng.integers(0, n_perm, size=(ks.size, resamples), dtype=np.int32)  # small: no page faults
            idx += n_perm * np.arange(ks.size, dtype=np.int32)[:, None]
            labs = np.take(lab_tab.reshape(ks.size * n_perm, int(m)), idx, axis=0)
        else:
            local = np.argsort(rng.random((ks.size, resamples, int(m))), axis=2)
            labs = p.is_cand[starts[:, None, None] + local]
        groups.append((ks, labs))
    return PermutationDraws(resamples, groups)


def _labels_in_order(p: Paired, draws: PermutationDraws, order: IntArray) -> BoolArray:
    """``(N, R)`` permuted candidate labels of the layout positions ``order``."""
    block = p.block_pos[order]
    offset = order - p.block_start[block]
    out = np.empty((order.size, draws.resamples), dtype=bool)
    group_of = np.empty(p.n_blocks, dtype=np.int64)
    local_of = np.empty(p.n_blocks, dtype=np.int64)
    for g, (ks, _) in enumerate(draws.groups):
        group_of[ks] = g
        local_of[ks] = np.arange(ks.size)
    for g, (_, labs) in enumerate(draws.groups):
        rows = np.flatnonzero(group_of[block] == g)
        out[rows] = labs[local_of[block[rows]], :, offset[rows]]
    return out


def permuted_statistics(p: Paired, y: FloatArray, draws: PermutationDraws) -> FloatArray:
    """Difference of medians (candidate - baseline) of ``y`` (layout order) under each permutation."""
    order = np.argsort(y, kind="stable").astype(np.int64)
    n = y.size
    dtype = _count_dtype(n)
    cum_c = _cumsum_rows(_labels_in_order(p, draws, order), dtype)
    cum_b = np.arange(1, n + 1, dtype=dtype)[:, None] - cum_c
    xs = y[order]
    return weighted_medians(xs, cum_c, p.n_cand) - weighted_medians(xs, cum_b, p.n_base)


def block_bootstrap(p: Paired, resamples: int, rng: np.random.Generator) -> FloatArray:
    """Difference of medians over ``resamples`` bootstrap samples of whole paired blocks.

    Each resample draws K blocks with replacement; a drawn block brings all of its values of both
    arms (the arms move together, keeping the within-block pairing that cancels drift).
    """
    k = p.n_blocks
    draws = rng.integers(0, k, size=(resamples, k))
    flat = (draws * resamples + np.arange(resamples, dtype=np.int64)[:, None]).ravel()
    dtype = _count_dtype(k * int(p.block_size.max()))  # bounds every resample's total
    counts = np.bincount(flat, minlength=k * resamples).reshape(k, resamples).astype(dtype)  # (K, R)
    meds = []
    for arm in (p.is_cand, ~p.is_cand):
        ys, blocks = p.y[arm], p.block_pos[arm]
        order = np.argsort(ys, kind="stable")
        cum = _cumsum_rows(counts[blocks[order]], dtype)
        meds.append(weighted_medians(ys[order], cum, cum[-1]))
    return meds[0] - meds[1]


def residual_sd(p: Paired) -> float:
    """Residual SD of the additive least-squares fit ``y ~ block + arm`` (NaN without residual df).

    Computed by within-block demeaning (Frisch-Waugh-Lovell), exact for unequal block counts.
    """
    k, n = p.n_blocks, p.y.size
    df = n - k - 1
    if df <= 0:
        return float("nan")
    x = p.is_cand.astype(np.float64)
    cnt = np.bincount(p.block_pos, minlength=k).astype(np.float64)
    yt = p.y - (np.bincount(p.block_pos, p.y, minlength=k) / cnt)[p.block_pos]
    xt = x - (np.bincount(p.block_pos, x, minlength=k) / cnt)[p.block_pos]
    beta = float(xt @ yt) / float(xt @ xt)
    r = yt - beta * xt
    return float(np.sqrt(float(r @ r) / df))


def permutation_p(p: Paired, draws: PermutationDraws, delta: float) -> float:
    """Two-sided permutation p of H0 "log ratio = delta" (candidate logs shifted by -delta)."""
    y = p.y - delta * p.is_cand
    d = median_difference(Paired(y, p.is_cand, p.block_pos, p.block_start, p.block_size))
    null = permuted_statistics(p, y, draws)
    return (1 + int(np.count_nonzero(np.abs(null) >= abs(d) - TIE_TOL))) / (1 + draws.resamples)


def invert_permutation_test(
    p: Paired, draws: PermutationDraws, d: float, null: FloatArray, alphas: list[float], tol: float = 5e-4
) -> list[tuple[float, float]]:
    """``{delta : p(delta) >= alpha}`` for each alpha: the CI from inverting the permutation test.

    With the permutations held fixed, each permutation's ``|T*(delta)| - |d - delta|`` is
    non-increasing as delta moves away from ``d`` (a median moves at most as fast as the shift), so
    ``p(delta)`` is monotone on each side of ``d`` and each bound is found by a bracketed search.
    The search interpolates on ``z(p) = Phi^-1(1 - p/2)``, nearly linear in delta, with an Illinois
    safeguard, and stops when the bracket is narrower than ``tol`` (log units), returning its
    middle. Evaluated shifts are shared between the alphas. A bound that no shift within
    ``exp(+-8)`` rejects (too few blocks to reach ``p < alpha``) is returned as +-inf.
    """
    nd = NormalDist()
    cap = 1 - 0.5 / (1 + draws.resamples)
    seen: dict[float, list[tuple[float, float]]] = {-1.0: [(0.0, 1.0)], 1.0: [(0.0, 1.0)]}  # (dist, p)

    def z(pv: float) -> float:
        return nd.inv_cdf(1 - min(pv, cap) / 2)

    def p_at(side: float, dist: float) -> float:
        pv = permutation_p(p, draws, d + side * dist)
        seen[side].append((dist, pv))
        return pv

    def bound(side: float, alpha: float) -> float:
        target = nd.inv_cdf(1 - alpha / 2)
        pts = seen[side]
        inner = max(x for x, pv in pts if pv >= alpha)
        outers = [x for x, pv in pts if pv < alpha]
        if outers:
            outer = min(outers)
        else:  # first probe where the null distribution puts the bound, then widen
            step = max(float(np.quantile(np.abs(null), 1 - alpha)), 1e-3, inner * 1.25)
            while True:
                if step > 8.0:
                    return side * float("inf")
                if p_at(side, step) < alpha:
                    outer = step
                    break
                inner, step = step, 1.5 * step
        h_in = z(max(pv for x, pv in pts if x == inner)) - target
        h_out = z(max(pv for x, pv in pts if x == outer)) - target
        last = 0
        while outer - inner > tol:
            mid = inner + (outer - inner) * (-h_in) / (h_out - h_in)
            edge = (outer - inner) * 0.05  # stay strictly inside the bracket
            mid = min(max(mid, inner + edge), outer - edge)
            h_mid = z(p_at(side, mid)) - target
            if h_mid > 0:  # p < alpha: new outer end
                outer, h_out = mid, h_mid
                h_in = h_in / 2 if last > 0 else h_in  # Illinois: halve the stale end
                last = 1
            else:
                inner, h_in = mid, h_mid
                h_out = h_out / 2 if last < 0 else h_out
                last = -1
        return d + side * 0.5 * (inner + outer)

    return [(bound(-1.0, a), bound(1.0, a)) for a in alphas]
