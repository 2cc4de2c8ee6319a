"""The report's charts (matplotlib, Agg, headless): each function takes frames and returns PNG bytes."""

from __future__ import annotations

import io

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from orchestrator.results.trials import usable

PALETTE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22"]
THERMAL_COLOR = {"nominal": "#d9f0d3", "fair": "#fee08b", "serious": "#fc8d59", "critical": "#d73027"}
DPI = 110
# Trials kept out of the verdicts, by the reason's first word (records.TrialRecord.excluded)
EXCLUDED_STYLE: dict[str, dict[str, str]] = {"interference": {"marker": "D", "edgecolors": "#ff7f0e"},
                                             "throttled": {"marker": "s", "edgecolors": "#9467bd"}}
FROM_REST_STYLE = {"marker": "v", "color": "#9467bd"}  # ran throttled from rest: counted, marked


def _png(fig: Figure) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI, bbox_inches="tight")
    plt.close(fig)
    return buf.getvalue()


def _colors(arms: list[str]) -> dict[str, str]:
    return {a: PALETTE[i % len(PALETTE)] for i, a in enumerate(arms)}


def distributions(trials: pd.DataFrame, arms: list[str]) -> bytes:
    """Per device: each arm's trial1 decode tok/s as a box with every launch on top."""
    ok = usable(trials)
    devices = sorted(trials["device"].unique())
    colors = _colors(arms)
    fig, axes = plt.subplots(1, len(devices), figsize=(3.2 * len(devices) + 0.5, 3.6), squeeze=False)
    rng = np.random.default_rng(0)
    for ax, device in zip(axes[0], devices, strict=True):
        mine = ok[ok["device"] == device]
        data = [mine.loc[mine["arm"] == a, "decode_tok_s"].to_numpy() for a in arms]
        box = ax.boxplot([d if len(d) else [np.nan] for d in data], widths=0.55, showfliers=False,
                         patch_artist=True, medianprops={"color": "black", "linewidth": 1.6})
        for patch, a in zip(box["boxes"], arms, strict=True):
            patch.set(facecolor=colors[a], alpha=0.25, edgecolor=colors[a])
        for i, (d, a) in enumerate(zip(data, arms, strict=True)):
            ax.scatter(i + 1 + rng.uniform(-0.15, 0.15, len(d)), d, s=9, color=colors[a], alpha=0.8, zorder=3)
        ax.set_xticks(range(1, len(arms) + 1), arms, rotation=20)
        ax.set_title(device, fontsize=10)
        ax.grid(axis="y", alpha=0.3)
    axes[0][0].set_ylabel("decode tok/s (trial1)")
    fig.suptitle("tok/s per launch: box = quartiles, line = median, dots = every fresh launch", fontsize=10)
    return _png(fig)


def trial_order(trials: pd.DataFrame, arms: list[str]) -> bytes:
    """Per device: tok/s in trial order (drift, throttling), thermal state behind, settle waits below."""
    devices = sorted(trials["device"].unique())
    colors = _colors(arms)
    fig, axes = plt.subplots(2 * len(devices), 1, figsize=(11, 2.6 * len(devices) + 0.6), squeeze=False,
                             gridspec_kw={"height_ratios": [3, 1] * len(devices)}, sharex=False)
    for i, device in enumerate(devices):
        ax, wait_ax = axes[2 * i][0], axes[2 * i + 1][0]
        mine = trials[trials["device"] == device].sort_values("seq")
        for seq, state in zip(mine["seq"], mine["thermal_before"], strict=True):
            ax.axvspan(seq - 0.5, seq + 0.5, color=THERMAL_COLOR.get(str(state), "#eeeeee"), lw=0, alpha=0.6)
        ok = mine[mine["status"] == "ok"]
        for a in arms:
            s = ok[ok["arm"] == a]
            ax.plot(s["seq"], s["decode_tok_s"], "o-", ms=3, lw=0.6, color=colors[a], label=a)
        rose = ok[ok["state_rose"].astype(bool)]
        ax.scatter(rose["seq"], rose["decode_tok_s"], s=60, facecolors="none", edgecolors="black", lw=1, zorder=4)
        if "excluded" in ok.columns:
            for kind, style in EXCLUDED_STYLE.items():
                hit = ok[ok["excluded"].fillna("").astype(str).str.startswith(kind)]
                ax.scatter(hit["seq"], hit["decode_tok_s"], s=90, zorder=5, facecolors="none", lw=1.4, **style)
        if "throttled_from_rest" in ok.columns:  # counted: its arm throttles the device itself
            hit = ok[ok["throttled_from_rest"].fillna(False).astype(bool)]
            ax.scatter(hit["seq"], hit["decode_tok_s"], s=90, zorder=5, lw=1.4, **FROM_REST_STYLE)
        failed = mine[mine["status"] != "ok"]
        if len(failed):
            lo = ok["decode_tok_s"].min() if len(ok) else 0
            ax.scatter(failed["seq"], [lo * 0.97] * len(failed), marker="x", color="#d62728", s=40, zorder=5)
        ax.set_ylabel("tok/s")
        ax.set_title(f"{device}: tok/s in trial order (background = thermal state before the launch)",
                     fontsize=10, loc="left")
        ax.grid(alpha=0.25)
        ax.set_xlim(-0.5, max(mine["seq"].max(), 0) + 0.5)
        wait_ax.bar(mine["seq"], mine["settle_waited_s"], color="#777777", width=0.8)
        wait_ax.set_ylabel("settle s", fontsize=8)
        wait_ax.set_xlim(ax.get_xlim())
        wait_ax.grid(alpha=0.25)
    handles = [Line2D([], [], color=colors[a], marker="o", ms=4, label=a) for a in arms]
    handles += [Line2D([], [], ls="", marker="s", ms=9, color=c, label=s) for s, c in THERMAL_COLOR.items()]
    handles += [Line2D([], [], ls="", marker="o", ms=8, mfc="none", mec="black", label="state rose during trial"),
                Line2D([], [], ls="", marker="x", color="#d62728", label="failed launch")]
    handles += [Line2D([], [], ls="", marker=st["marker"], ms=9, mfc="none", mec=st["edgecolors"],
                       label=f"excluded: {label}") for label, st in (("other processes took the CPU",
                       EXCLUDED_STYLE["interference"]), ("throttle probe slow", EXCLUDED_STYLE["throttled"]))]
    handles.append(Line2D([], [], ls="", marker="v", ms=8, color=FROM_REST_STYLE["color"],
                          label="counted: ran throttled from rest (its own heat)"))
    fig.legend(handles=handles, loc="upper center", ncol=min(len(handles), 6), fontsize=8, frameon=False,
               bbox_to_anchor=(0.5, 1.0 + 0.25 / max(len(devices), 1)))
    axes[-1][0].set_xlabel("trial (seq) in the session")
    fig.tight_layout()
    return _png(fig)


def audit_bars(audit: pd.DataFrame) -> bytes:
    """Effective GB/s per device and arm (95% CI), against the device's ceiling."""
    rows = audit.reset_index(drop=True)
    labels = [f"{d} / {a}" for d, a in zip(rows["device"], rows["arm"], strict=True)]
    y = np.arange(len(rows))[::-1]
    fig, ax = plt.subplots(figsize=(9, 0.45 * len(rows) + 1.4))
    colors = ["#d62728" if r.startswith("raw-loop candidate") else "#2ca02c" if "no glue" in r else "#ff7f0e"
              for r in rows["reading"]]
    eff = rows["effective_gb_s"]
    err = np.vstack([eff - rows["effective_ci_low"], rows["effective_ci_high"] - eff])
    ax.barh(y, rows["effective_gb_s"], xerr=err, color=colors, alpha=0.8, height=0.6, capsize=3)
    for yi, c, r in zip(y, rows["ceiling_gb_s"], rows["ratio"], strict=True):
        if np.isfinite(c):
            ax.plot([c, c], [yi - 0.4, yi + 0.4], color="black", lw=2)
            ax.text(c, yi, f"  {r:.0%}", va="center", fontsize=8)
    ax.set_yticks(y, labels, fontsize=8)
    ax.set_xlabel("effective GB/s (bytes per token x decode tok/s); black tick = ceiling")
    ax.set_title("Audit: green = near the ceiling (no glue to harvest), red = raw-loop candidate", fontsize=10,
                 loc="left")
    ax.grid(axis="x", alpha=0.3)
    return _png(fig)


def history(medians: pd.DataFrame, alarms: pd.DataFrame, changes: pd.DataFrame) -> bytes:
    """Per (config, device): candidate/reference ratio per night with CI, alarms, change points."""
    series = sorted(set(zip(alarms["config"], alarms["device"], strict=True)))
    fig, axes = plt.subplots(len(series), 1, figsize=(11, 2.8 * len(series) + 0.4), squeeze=False)
    for ax, (config, device) in zip(axes[:, 0], series, strict=True):
        a = alarms[(alarms["config"] == config) & (alarms["device"] == device)].sort_values("night")
        x = np.arange(len(a))
        ax.axhline(1.0, color="black", lw=0.8)
        ax.axhspan(0.97, 1.03, color="#eeeeee", zorder=0)
        ax.errorbar(x, a["ratio"], yerr=[a["ratio"] - a["ci_low"], a["ci_high"] - a["ratio"]], fmt="o-", ms=4,
                    color="#1f77b4", lw=0.8, capsize=2, label="candidate / reference (95% CI)")
        for status, style in (("watch", {"color": "#ff7f0e", "marker": "D"}), ("alarm", {"color": "#d62728",
                                                                                         "marker": "X"})):
            hit = a["status"].to_numpy() == status
            ax.scatter(x[hit], a["ratio"].to_numpy()[hit], s=90, zorder=5, label=status, **style)
        nights = list(a["night"])
        cps = changes[(changes["config"] == config) & (changes["device"] == device)]
        for night, g in cps.groupby("night", sort=True, observed=True):
            if night in nights:
                k = nights.index(night)
                label = ", ".join(f"{sig} {sh:+.1%}" for sig, sh in zip(g["signal"], g["shift"], strict=True))
                ax.axvline(k - 0.5, color="#9467bd", ls="--", lw=1.2)
                ax.text(k - 0.45, ax.get_ylim()[1], f" change point: {label}", color="#9467bd", fontsize=8,
                        va="top")
        step = max(1, len(nights) // 15)
        ax.set_xticks(x[::step], nights[::step], rotation=30, fontsize=8)
        ax.set_ylabel("ratio")
        ax.set_title(f"{config} / {device}: nightly history", fontsize=10, loc="left")
        ax.grid(alpha=0.25)
        ax.legend(fontsize=8, loc="lower left", ncol=4)
    fig.tight_layout()
    return _png(fig)
