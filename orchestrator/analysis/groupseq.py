"""Group-sequential boundaries by alpha spending, and a design's operating characteristics.

Two kinds of boundary, both on the Z scale of an estimate with independent increments (the
canonical joint distribution: ``Z_k = S_k / sqrt(I_k)``, ``S`` a Brownian motion in information
``I``; Jennison & Turnbull 2000, ch. 3 and 19):

* :func:`two_sided_bounds`: reject ``theta = 0`` at look ``k`` if ``|Z_k| >= c_k``;
  ``P(reject by look k | theta = 0) = spend(t_k)``.
* :func:`one_sided_bounds`: reject at look ``k`` if ``Z_k >= b_k`` (used for each of the two
  one-sided tests of an equivalence TOST).

Lan-DeMets spending: the error spent by information fraction ``t`` is ``alpha * ln(1 + (e - 1) t)``
(Pocock-type) or ``2 - 2 Phi(z_{1-alpha/2} / sqrt t)`` (O'Brien-Fleming-type); the last look spends
whatever is left (``t = 1``), wherever it falls. Each boundary solves its crossing probability by
numerical integration over the continuation region (trapezoid rule on a grid, bisection-free root
finding by Brent), checked against published constants in the tests (e.g. O'Brien-Fleming-type,
one-sided 0.025, four equal looks: 4.333, 2.963, 2.359, 2.014).

:func:`operating` runs the same recursion for a whole design: efficacy, minimum-effect and
equivalence regions at every look, for a given true effect and standard error per look; it
returns the probability of each verdict and the expected launches. No maintained Python library
computes group-sequential *equivalence* boundaries at observed information (the mature ones,
gsDesign and rpact, are R packages), and the recursion is a few dozen lines of numpy and scipy.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from itertools import pairwise
from typing import Literal

import numpy as np
import numpy.typing as npt
from scipy.optimize import brentq
from scipy.stats import norm

Spending = Literal["pocock", "obrien_fleming"]
_GRID = 801  # points per look: boundaries to ~1e-4 on the Z scale
_ZMAX = 40.0  # a look that may spend nothing gets this boundary (never crossed)


def spent(kind: Spending, alpha: float, t: float) -> float:
    """Cumulative error spent by information fraction ``t`` (0 at 0, ``alpha`` at 1)."""
    t = min(max(t, 0.0), 1.0)
    if t == 0.0:
        return 0.0
    if kind == "pocock":
        return alpha * math.log1p((math.e - 1) * t)
    return float(2 * norm.sf(norm.isf(alpha / 2) / math.sqrt(t)))


def _phi(z: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    """Standard normal density (numpy alone: scipy's per-call overhead dominates on big grids)."""
    return np.exp(-0.5 * z * z) * _INV_SQRT_2PI


_INV_SQRT_2PI = 1 / math.sqrt(2 * math.pi)


def _grid(lo: float, hi: float) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    x = np.linspace(lo, hi, _GRID)
    w = np.full(_GRID, (hi - lo) / (_GRID - 1))
    w[0] /= 2
    w[-1] /= 2
    return x, w


def _excess(z: float, xs: npt.NDArray[np.float64], mass: npt.NDArray[np.float64], sd: float, root_i: float,
            target: float, two_sided: bool) -> float:
    """Probability of crossing ``z`` at this look (and not before), less the error to spend here."""
    hi = z * root_i
    p = float(mass @ norm.sf((hi - xs) / sd))
    if two_sided:
        p += float(mass @ norm.cdf((-hi - xs) / sd))
    return p - target


def _bounds(info: tuple[float, ...], times: tuple[float, ...], alpha: float, kind: Spending,
            two_sided: bool) -> tuple[float, ...]:
    if len(info) != len(times) or not info:
        raise ValueError("one information level and one spending time per look")
    if any(b <= a for a, b in pairwise(info)) or info[0] <= 0:
        raise ValueError(f"information must be positive and increasing: {info}")
    out: list[float] = []
    used = 0.0
    xs = ws = f = np.empty(0)
    for k, (ik, tk) in enumerate(zip(info, times, strict=True)):
        target = max(0.0, spent(kind, alpha, tk) - used)
        if k == 0:
            q = target / 2 if two_sided else target
            c = float(norm.isf(q)) if q > 0 else _ZMAX
        else:
            args = (xs, ws * f, math.sqrt(ik - info[k - 1]), math.sqrt(ik), target, two_sided)
            c = _ZMAX if target <= 0 or _excess(_ZMAX, *args) >= 0 else float(
                brentq(_excess, -_ZMAX, _ZMAX, args=args, xtol=1e-7))
        out.append(c)
        used += target
        # the sub-density of S_k = Z_k sqrt(I_k) on the continuation region
        hi = min(c, 12.0) * math.sqrt(ik)
        lo = -hi if two_sided else -12.0 * math.sqrt(ik)
        x, w = _grid(lo, max(hi, lo + 1e-9))
        if k == 0:
            f_new = _phi(x / math.sqrt(ik)) / math.sqrt(ik)
        else:
            sd = math.sqrt(ik - info[k - 1])
            f_new = (_phi((x[:, None] - xs[None, :]) / sd) / sd) @ (ws * f)
        xs, ws, f = x, w, f_new
    return tuple(out)


@lru_cache(maxsize=256)
def two_sided_bounds(info: tuple[float, ...], times: tuple[float, ...], alpha: float,
                     kind: Spending) -> tuple[float, ...]:
    """Z boundaries ``c_k`` of a two-sided test spending ``alpha`` (both tails) at ``times``.

    ``info``: information at each look (any positive increasing scale: launches per arm will do);
    ``times``: the spending time of each look (``info / info_max``, with 1 at the final look).
    """
    return _bounds(info, times, alpha, kind, two_sided=True)


@lru_cache(maxsize=256)
def one_sided_bounds(info: tuple[float, ...], times: tuple[float, ...], alpha: float,
                     kind: Spending) -> tuple[float, ...]:
    """Z boundaries ``b_k`` of a one-sided test spending ``alpha`` at ``times``."""
    return _bounds(info, times, alpha, kind, two_sided=False)


def look_times(looks: list[int], cap: int, final: int | None = None) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """(information, spending time) per look: launches per arm, and ``n / cap`` with 1 at the end.

    ``final``: launches per arm at a final analysis short of the cap (a session that ran out of
    blocks or failed some trials); it spends what is left. None: the looks as planned.
    """
    ns = [n for n in looks if n < cap] + [cap] if final is None else [n for n in looks if n < final] + [final]
    times = [n / cap for n in ns[:-1]] + [1.0]
    return tuple(float(n) for n in ns), tuple(times)


def _share(x: npt.NDArray[np.float64], h: float, lo: float, hi: float) -> npt.NDArray[np.float64]:
    """The share of each grid cell ``[x - h/2, x + h/2]`` inside ``[lo, hi]`` (0 where empty)."""
    if not lo < hi:
        return np.zeros_like(x)
    return np.clip((np.minimum(hi, x + h / 2) - np.maximum(lo, x - h / 2)) / h, 0.0, 1.0)


@dataclass(frozen=True)
class Operating:
    """What a design does for one true effect: verdict probabilities and launches per arm."""

    effect: float  # true log ratio
    faster: float
    slower: float
    equivalent: float
    inconclusive: float
    mean_launches: float  # expected launches per arm when the comparison stops (answer or cap)
    stop_by_look: tuple[float, ...]  # probability of stopping at each look


def operating(
    effect: float,
    looks: tuple[float, ...],
    se: tuple[float, ...],
    efficacy: tuple[float, ...],
    equivalence: tuple[float, ...] | None,
    *,
    min_effect: float,
    margin: float,
    grid: int = 801,
) -> Operating:
    """Verdict probabilities of a group-sequential design, by recursive numerical integration.

    At look ``k`` (launches per arm ``looks[k]``, standard error ``se[k]`` of the log-ratio
    estimate): ``faster``/``slower`` if ``|Z| >= efficacy[k]`` and ``|exp(est) - 1| >= min_effect``;
    else ``equivalent`` if ``est -+ equivalence[k] * se`` lies inside ``[log(1 - margin),
    log(1 + margin)]``; else continue (``inconclusive`` after the last look). ``equivalence`` None:
    no equivalence stops. The estimate is normal with independent increments (information
    ``1 / se**2``), which is what the boundaries assume too.
    """
    lo_m, hi_m = math.log1p(-margin), math.log1p(margin)
    up_e, dn_e = math.log1p(min_effect), math.log1p(-min_effect) if min_effect < 1 else -math.inf
    info = [1 / s**2 for s in se]
    span = 10 * se[0] + abs(effect)
    x = np.linspace(effect - span, effect + span, grid)
    h = x[1] - x[0]
    probs = {"faster": 0.0, "slower": 0.0, "equivalent": 0.0}
    stops: list[float] = []
    dens = np.empty(0)
    expected = 0.0
    for k in range(len(looks)):
        if k == 0:
            dens = norm.pdf(x, loc=effect, scale=se[0])
        else:  # est_k I_k = est_{k-1} I_{k-1} + N(effect dI, dI)
            di = info[k] - info[k - 1]
            live = np.flatnonzero(dens > 1e-12 * dens.max())
            mean = (x[live] * info[k - 1] + effect * di) / info[k]
            scale = math.sqrt(di) / info[k]
            dens = (_phi((x[:, None] - mean[None, :]) / scale) / scale) @ (dens[live] * h)
        # each region is an interval of the estimate; a grid cell counts by the share of it inside
        t_up = max(efficacy[k] * se[k], up_e)
        t_dn = min(-efficacy[k] * se[k], dn_e)
        regions = {"faster": _share(x, h, t_up, math.inf), "slower": _share(x, h, -math.inf, t_dn)}
        if equivalence is not None:
            regions["equivalent"] = _share(x, h, max(lo_m + equivalence[k] * se[k], t_dn),
                                           min(hi_m - equivalence[k] * se[k], t_up))
        step = 0.0
        cont = np.ones_like(x)
        for name, share in regions.items():
            mass = float((dens * share).sum() * h)
            probs[name] += mass
            step += mass
            cont -= share
        cont = np.clip(cont, 0.0, 1.0)
        if k == len(looks) - 1:
            step += float((dens * cont).sum() * h)
        stops.append(step)
        expected += step * looks[k]
        dens = dens * cont
    total = sum(stops)
    inconclusive = max(0.0, total - sum(probs.values()))
    return Operating(effect, probs["faster"] / total, probs["slower"] / total, probs["equivalent"] / total,
                     inconclusive / total, expected / total, tuple(s / total for s in stops))
