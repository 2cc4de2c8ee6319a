"""The audit: effective bandwidth against the ceiling (the seed's never-blame-the-model rule).

Effective GB/s = engine-reported bytes read per decode token x measured decode tok/s (trial1
medians). The ceiling is what clean weight streams reach on the same silicon for this kind of
workload (``configs/ceilings.yaml``; a stream probe in the same run wins where there is one).
Near the ceiling there is no glue left to harvest; well below it, the gap is glue that a raw loop
can remove. Blame the engine's glue before the model, and only after measuring.

The prefill view: weights are read once per chunk of M prompt tokens, so bytes per prefill token
~ weight bytes / M, and the bandwidth bound on prefill is ceiling x M / weight bytes.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import pandas as pd

from orchestrator.config.candidates import CeilingTable, Thresholds
from orchestrator.config.sim import SimDeviceConfig
from orchestrator.results.records import Manifest, device_chips
from orchestrator.results.trials import usable

RULE = (
    "effective GB/s = bytes read per decode token x measured decode tok/s, against what clean weight "
    "streams reach on the same silicon. Near the ceiling: no glue to harvest (never blame the model). "
    "Well below it: the gap is glue between the ops, which a raw loop removes."
)

AUDIT_COLUMNS = [
    "device", "chip_class", "model", "workload", "arm", "runtime", "build", "n", "decode_tok_s", "decode_ci_low",
    "decode_ci_high", "bytes_per_token", "effective_gb_s", "effective_ci_low", "effective_ci_high", "ceiling_gb_s",
    "ceiling_source", "ratio", "ratio_ci_low", "ratio_ci_high", "ceiling_tok_s", "headroom", "reading", "n_excluded",
]
PREFILL_WIDTHS = (1, 4, 16, 128)


@dataclass(frozen=True)
class Ceiling:
    gb_s: float | None
    source: str
    workload: str


def chip_class(manifest: Manifest, device: str, trials: pd.DataFrame | None = None) -> str:
    """The device's chip class: what the run's trial table says, else by the one rule of ``device_chips``
    (what the device said at its session's start, e.g. an iPhone's, else the fleet's, else its kind)."""
    if trials is not None and "chip_class" in trials:
        said = trials.loc[trials["device"] == device, "chip_class"].dropna()
        if len(said):
            return str(said.iloc[0])
    return device_chips(manifest, []).get(device, device)


def probe_gb_s(manifest: Manifest, device: str, trials: pd.DataFrame | None = None) -> float | None:
    """The device's stream probe in this run (journaled at session start); simulated devices carry theirs."""
    if trials is not None and "probe_gb_s" in trials:
        measured = trials.loc[trials["device"] == device, "probe_gb_s"].dropna()
        if len(measured):
            return float(measured.iloc[0])
    cfg = next((d for d in manifest.fleet.devices if d.id == device), None)
    return cfg.bandwidth_gb_s if isinstance(cfg, SimDeviceConfig) else None


def ceiling_for(table: CeilingTable, chip: str, model: str, probe: float | None = None) -> Ceiling:
    workload = table.workload(model)
    w = table.workloads[workload]
    spec = table.chips.get(chip)
    if spec is not None and workload in spec.workloads:
        return Ceiling(spec.workloads[workload], f"ceilings.yaml: {chip} {workload}", workload)
    if w.fraction_of_stream is not None:
        frac = "" if w.fraction_of_stream == 1 else f" x {w.fraction_of_stream:g} ({workload})"
        if probe is not None:
            return Ceiling(probe * w.fraction_of_stream, f"stream probe {probe:g} GB/s{frac}", workload)
        if spec is not None and spec.stream_gb_s is not None:
            return Ceiling(spec.stream_gb_s * w.fraction_of_stream,
                           f"ceilings.yaml: {chip} stream {spec.stream_gb_s:g} GB/s{frac}", workload)
    return Ceiling(None, f"no ceiling for {chip} / {workload}: run the stream probe or add it to ceilings.yaml",
                   workload)


def reading(ratio: float | None, t: Thresholds) -> str:
    if ratio is None or not np.isfinite(ratio):
        return "no ceiling: cannot audit"
    if ratio > 1.05:
        return f"above the ceiling ({ratio:.0%}): no glue to harvest; the ceiling looks low, probe it"
    if ratio >= t.near:
        return f"near the ceiling ({ratio:.0%}): no glue to harvest"
    if ratio < t.candidate:
        return f"raw-loop candidate: at {ratio:.0%} of the ceiling, {1 / ratio - 1:.0%} headroom"
    return f"some headroom ({ratio:.0%}): profile the glue before committing to a raw loop"


def too_wide(ratio: float, low: float, high: float) -> bool:
    """A reading whose 95% CI is wider than the reading itself says nothing about headroom."""
    return bool(np.isfinite(ratio) and ratio > 0 and (not np.isfinite(high - low) or high - low > ratio))


def noisy_reading(ratio: float, low: float, high: float, n: int) -> str:
    return (f"too noisy to read: {ratio:.0%} of the ceiling, 95% CI [{low:.0%}, {high:.0%}] is wider than the "
            f"reading itself (n={n}); no headroom figure")


def median_ci(
    values: npt.ArrayLike, *, level: float = 0.95, resamples: int = 1000, seed: int = 0
) -> tuple[float, float, float]:
    """Median and a percentile bootstrap CI over launches (seeded). NaNs for no data."""
    x = np.asarray(values, dtype=np.float64)
    x = x[np.isfinite(x)]
    if x.size == 0:
        return (float("nan"),) * 3
    med = float(np.median(x))
    if x.size == 1:
        return med, med, med
    rng = np.random.default_rng(seed)
    boots = np.median(x[rng.integers(0, x.size, (resamples, x.size))], axis=1)
    lo, hi = np.quantile(boots, [(1 - level) / 2, (1 + level) / 2])
    return med, float(lo), float(hi)


def audit(trials: pd.DataFrame, manifest: Manifest, table: CeilingTable, *, seed: int = 0) -> pd.DataFrame:
    """One row per device and arm with finished trials: effective GB/s, ceiling, ratio, reading."""
    model = manifest.plan.model
    ok = usable(trials)
    kept_out = trials[(trials["status"] == "ok") & trials["excluded"].notna()] if "excluded" in trials else trials[:0]
    dropped = kept_out.groupby(["device", "arm"]).size().to_dict()
    rows = []
    for (device, arm), g in ok.groupby(["device", "arm"], sort=True):
        chip = chip_class(manifest, str(device), trials)
        ceil = ceiling_for(table, chip, model, probe_gb_s(manifest, str(device), trials))
        rate, rate_lo, rate_hi = median_ci(g["decode_tok_s"], seed=seed)
        bpt = g["bytes_per_decode_token"].dropna()
        bytes_pt = float(bpt.median()) if len(bpt) else float("nan")
        eff, eff_lo, eff_hi = (v * bytes_pt / 1e9 for v in (rate, rate_lo, rate_hi))
        c = ceil.gb_s if ceil.gb_s is not None else float("nan")
        ratio = eff / c
        ceiling_tok_s = c * 1e9 / bytes_pt
        rows.append({
            "device": device, "chip_class": chip, "model": model, "workload": ceil.workload, "arm": arm,
            "runtime": g["runtime"].iloc[0], "build": g["build"].iloc[0], "n": len(g),
            "decode_tok_s": rate, "decode_ci_low": rate_lo, "decode_ci_high": rate_hi,
            "bytes_per_token": bytes_pt, "effective_gb_s": eff, "effective_ci_low": eff_lo,
            "effective_ci_high": eff_hi, "ceiling_gb_s": c, "ceiling_source": ceil.source, "ratio": ratio,
            "ratio_ci_low": eff_lo / c, "ratio_ci_high": eff_hi / c, "ceiling_tok_s": ceiling_tok_s,
            "headroom": ceiling_tok_s / rate - 1,
            "reading": reading(ratio, table.thresholds) if np.isfinite(bytes_pt) else
            "no bytes per token reported: cannot audit",
            "n_excluded": int(dropped.get((device, arm), 0)),
        })
        row = rows[-1]
        if too_wide(ratio, row["ratio_ci_low"], row["ratio_ci_high"]):
            row["headroom"] = float("nan")
            row["reading"] = noisy_reading(ratio, row["ratio_ci_low"], row["ratio_ci_high"], len(g))
    return pd.DataFrame(rows, columns=AUDIT_COLUMNS)


def prefill_regime(m: int) -> str:
    """The seed's three prefill regimes, by chunk width M."""
    if m == 1:
        return "S=1 sequential: bit-exact"
    if m <= 4:
        return "small chunks (verify-lane reuse): bit-exact"
    if m <= 16:
        return "K-order-fixed tiles: bit-exact preservable"
    return "GEMM tiles: quality-class (near-tie forks)"


PREFILL_COLUMNS = [
    "device", "chip_class", "arm", "runtime", "chunk_width", "measured", "weight_bytes", "bytes_per_prefill_token",
    "bound_tok_s", "prefill_tok_s", "effective_gb_s", "regime",
]


def prefill_view(trials: pd.DataFrame, manifest: Manifest, table: CeilingTable) -> pd.DataFrame:
    """Per device and arm: bytes per prefill token vs M (1, 4, 16, 128 and the run's own), the
    bandwidth bound at each M, and the measured prefill tok/s at the M the run used."""
    model = manifest.plan.model
    ok = usable(trials, "prefill_tok_s")
    rows = []
    for (device, arm), g in ok.groupby(["device", "arm"], sort=True):
        weights = g["bytes_per_decode_token"].dropna()
        if not len(weights):
            continue
        w = float(weights.median())
        chip = chip_class(manifest, str(device), trials)
        ceil = ceiling_for(table, chip, model, probe_gb_s(manifest, str(device), trials)).gb_s
        measured = {int(str(m)): float(s["prefill_tok_s"].median()) for m, s in g.groupby("chunk_width")}
        for m in sorted(set(PREFILL_WIDTHS) | set(measured)):
            rate = measured.get(m, float("nan"))
            rows.append({
                "device": device, "chip_class": chip, "arm": arm, "runtime": g["runtime"].iloc[0], "chunk_width": m,
                "measured": m in measured, "weight_bytes": w, "bytes_per_prefill_token": w / m,
                "bound_tok_s": ceil * 1e9 * m / w if ceil else float("nan"), "prefill_tok_s": rate,
                "effective_gb_s": rate * w / m / 1e9, "regime": prefill_regime(m),
            })
    return pd.DataFrame(rows, columns=PREFILL_COLUMNS)
