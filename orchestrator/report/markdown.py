"""A run's report: what it holds (`collect`) and its markdown form (`to_markdown`).

Everything comes from the tables derive wrote from the run's journal; a partly failed run still reports,
failures included.
"""

from __future__ import annotations

import html
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from orchestrator.analysis.audit import RULE
from orchestrator.analysis.summary import family_words
from orchestrator.derive import RunOutcome
from orchestrator.report import plots
from orchestrator.report.console import ratio_ci
from orchestrator.results.records import Manifest
from orchestrator.results.store import RunDir
from orchestrator.results.trials import self_throttled_words
from orchestrator.runtimes import catalog


@dataclass
class NightlyView:
    alarms: pd.DataFrame
    medians: pd.DataFrame
    changes: pd.DataFrame


@dataclass
class Report:
    run: RunDir
    manifest: Manifest
    trials: pd.DataFrame
    verdicts: pd.DataFrame
    stops: dict[str, str]
    audit: pd.DataFrame | None
    prefill: pd.DataFrame | None
    first_arm_gates: pd.DataFrame  # per device: the arms' tokens against the first arm's
    reference_gates: pd.DataFrame | None  # against the numpy reference (real trials only)
    failures: pd.DataFrame
    nightly: NightlyView | None
    figures: dict[str, bytes] = field(default_factory=dict)  # name -> PNG
    chips: dict[str, str] = field(default_factory=dict)  # device -> chip class (device_chips)
    sessions: pd.DataFrame = field(default_factory=pd.DataFrame)  # per session (analysis.devicetime)
    excluded: pd.DataFrame = field(default_factory=pd.DataFrame)  # finished trials kept out of the verdicts


def _nightly(history: Path | None, manifest: Manifest) -> NightlyView | None:
    from orchestrator.analysis import nightly
    from orchestrator.results.history import load_nights

    if history is None or not (history / "nights").is_dir():
        return None
    devices = {s.device for s in manifest.sessions}
    nights = load_nights(history)
    nights = nights[(nights["config"] == manifest.plan.name) & nights["device"].isin(devices)]
    if not len(nights):
        return None
    rule = nightly.rule_of(manifest.plan)
    table = nightly.alarms(nights, {manifest.plan.name: rule})
    medians = nightly.night_medians(nights)
    return NightlyView(alarms=table, medians=medians, changes=nightly.changepoints(medians))


def collect(outcome: RunOutcome, history: Path | None = None) -> Report:
    """What a run's report shows: the tables derive wrote (or derived in memory) and the nightly history's view."""
    run, manifest, trials = outcome.run, outcome.manifest, outcome.trials
    ok = trials[trials["status"] == "ok"] if len(trials) else trials
    failures = trials[trials["status"] != "ok"][["device", "trial_id", "arm", "attempts", "failure_kind",
                                                 "failure_message"]] if len(trials) else pd.DataFrame()
    kept_out = trials[(trials["status"] == "ok") & trials["excluded"].notna()][list(EXCLUDED_COLS)] if len(trials) \
        else pd.DataFrame()
    aud = outcome.audit if len(outcome.audit) else None
    report = Report(run=run, manifest=manifest, trials=trials, verdicts=outcome.verdicts,
                    stops={d: str(r) for d, r in outcome.stops.items()}, audit=aud,
                    prefill=outcome.prefill if len(outcome.prefill) else None, excluded=kept_out,
                    first_arm_gates=outcome.first_arm_gates,
                    reference_gates=outcome.gates if len(outcome.gates) else None, failures=failures,
                    nightly=_nightly(history, manifest), chips=outcome.chips, sessions=outcome.sessions)
    arms = [a.name for a in manifest.plan.arms]
    if len(trials):
        if len(ok):
            report.figures["distributions"] = plots.distributions(trials, arms)
        report.figures["trial_order"] = plots.trial_order(trials, arms)
    if aud is not None:
        report.figures["audit"] = plots.audit_bars(aud)
    if report.nightly is not None:
        n = report.nightly
        report.figures["history"] = plots.history(n.medians, n.alarms, n.changes)
    return report


# -- markdown --------------------------------------------------------------------------------------------
def _f(x: Any, spec: str) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    return format(x, spec) if spec else str(x)


def md_text(text: str) -> str:
    """Free text (a model path, a failure message) as inert markdown: one line, no raw HTML, no cell breaks."""
    return html.escape(" ".join(text.split()), quote=False).replace("|", "/")


def md_table(frame: pd.DataFrame, cols: dict[str, tuple[str, str]]) -> str:
    """`cols`: column -> (header, format spec)."""
    lines = ["| " + " | ".join(h for h, _ in cols.values()) + " |", "|" + "---|" * len(cols)]
    for row in frame.to_dict("records"):
        lines.append("| " + " | ".join(md_text(_f(row[c], s)) for c, (_, s) in cols.items()) + " |")
    return "\n".join(lines)


def headline(report: Report) -> list[str]:
    """One line per device and pair: what the rule decided."""
    out = []
    for r in report.verdicts.to_dict("records"):
        ratio = _f(r["ratio"], ".3f")
        out.append(f"**{r['device']}** ({report.chips.get(str(r['device']), '')}): {r['candidate']} vs "
                   f"{r['baseline']}: **{r['verdict']}** (ratio {ratio}, p={_f(r['p_adjusted'], '.4f')}; "
                   f"{_f(r.get('device_min'), '.0f')} device-min)")
    return out


VERDICT_COLS = {
    "device": ("device", ""), "comparison": ("comparison", ""), "n": ("n (cand/base)", ""),
    "median_baseline": ("baseline tok/s", ".1f"), "median_candidate": ("candidate tok/s", ".1f"),
    "ci": ("ratio [CI]", ""), "p_adjusted": ("p", ".4f"), "sigma": ("σ", ".1%"), "mde": ("MDE", ".1%"),
    "verdict": ("verdict", ""), "device_min": ("device min", ".1f"),
}


def verdict_frame(report: Report) -> pd.DataFrame:
    v = report.verdicts
    if not len(v):
        return pd.DataFrame(columns=list(VERDICT_COLS))
    return v.assign(
        comparison=v["candidate"] + " vs " + v["baseline"],
        n=[f"{_f(c, '.0f')}/{_f(b, '.0f')}" for c, b in zip(v["n_candidate"], v["n_baseline"], strict=True)],
        ci=[ratio_ci(r) for r in v.to_dict("records")],
    )


def sessions_frame(report: Report) -> pd.DataFrame:
    s = report.sessions
    if not len(s):
        return pd.DataFrame(columns=list(SESSION_COLS))
    return s.assign(
        chip=s["chip_class"], settle=[_f(x, ".0f") for x in s["settle_wait_median_s"]], rose=s["state_rose"],
        session=s["stop"], device_min=[_f(x, ".1f") for x in s["total_min"]],
        settle_share=[_f(x, ".0%") for x in s["settle_share"]],
        split=[" / ".join(_f(r[k], ".1f") for k in ("prepare_min", "settle_min", "launch_min", "measured_min",
                                                    "retry_min")) for r in s.to_dict("records")],
    )


SESSION_COLS = {"device": ("device", ""), "chip": ("chip", ""), "planned": ("planned", "d"), "ok": ("ok", "d"),
                "failed": ("failed", "d"), "settle": ("median settle wait s", ""),
                "rose": ("thermal state rose", "d"), "device_min": ("device min", ""),
                "settle_share": ("settle share", ""),
                "split": ("prepare / settle / launch / measured / retry min", ""), "session": ("session ended", "")}
AUDIT_COLS = {"device": ("device", ""), "arm": ("arm", ""), "decode_tok_s": ("tok/s", ".1f"),
              "effective_gb_s": ("effective GB/s", ".1f"), "ceiling_gb_s": ("ceiling GB/s", ".1f"),
              "ratio": ("of ceiling", ".0%"), "ceiling_tok_s": ("tok/s at ceiling", ".1f"),
              "reading": ("reading", ""), "ceiling_source": ("ceiling from", "")}
FIRST_ARM_GATE_COLS = {"device": ("device", ""), "arm": ("arm", ""), "launches": ("launches", "d"),
             "tokens": ("tokens", "d"), "gate": ("token gate vs the first arm", "")}
REF_GATE_COLS = {"device": ("device", ""), "arm": ("arm", ""), "runtime": ("runtime", ""),
                 "quant_class": ("class", ""), "trials": ("trials", "d"), "prefill": ("prefill gate", ""),
                 "decode": ("decode gate", ""), "first_divergence": ("first fork", ".0f")}
EXCLUDED_COLS = {"device": ("device", ""), "trial_id": ("trial", ""), "arm": ("arm", ""),
                 "decode_tok_s": ("tok/s", ".1f"), "other_cpu_share": ("others' CPU", ".0%"),
                 "throttle_slowdown": ("probe slowdown", ".1%"),
                 "throttle_after_slowdown": ("probe after", ".1%"), "excluded": ("why", "")}
FAIL_COLS = {"device": ("device", ""), "trial_id": ("trial", ""), "arm": ("arm", ""), "attempts": ("attempts", "d"),
             "failure_kind": ("kind", ""), "failure_message": ("message", "")}


def title(report: Report) -> str:
    return f"Run {report.run.run_id}: {report.manifest.plan.name} ({report.manifest.plan.model})"


def rule_text(report: Report) -> str:
    r = report.manifest.plan.decision
    return (f"Pre-committed rule {report.manifest.rule_digest}: {r.statistic}, alpha {r.alpha}"
            f"{family_words(report.manifest.plan)}, min effect "
            f"{r.min_effect:.0%}, equivalence ±{r.equivalence_margin:.0%}, CI {r.ci_method}; "
            f"{report.manifest.plan.order.upper()} x {report.manifest.plan.blocks} blocks.")


def arms_text(report: Report) -> str:
    """Each arm with what its runtime is (the runtime catalog's label)."""
    def label(runtime: str) -> str:
        entry = catalog.get(runtime)
        return f"{runtime}: {entry.label}" if entry is not None else runtime

    return "Arms: " + "; ".join(f"{a.name} ({label(a.runtime)}{', build ' + a.build if a.build else ''})"
                                for a in report.manifest.plan.arms) + "."


def to_markdown(report: Report, image: Callable[[str], str]) -> str:
    """`image(name)` gives the link for a figure (a file beside the markdown)."""
    parts = [f"# {md_text(title(report))}", "", rule_text(report), "", md_text(arms_text(report)), ""]
    parts += [f"- {line}" for line in headline(report)] or ["- no verdicts: no finished trials"]
    parts += ["", "## Verdicts", "", md_table(verdict_frame(report), VERDICT_COLS), "",
              "## Sessions", "", md_table(sessions_frame(report), SESSION_COLS), ""]
    if not report.failures.empty:
        parts += ["## Failures (kept as data)", "", md_table(report.failures, FAIL_COLS), ""]
    if not report.excluded.empty:
        parts += ["## Excluded from verdicts, audit and rank (kept as data)", "",
                  md_table(report.excluded, EXCLUDED_COLS), ""]
    if (words := self_throttled_words(report.trials)) is not None:
        parts += [md_text(words), ""]
    for name, head in (("distributions", "tok/s per device and arm"),
                       ("trial_order", "tok/s in trial order, thermal state and settle waits")):
        if name in report.figures:
            parts += [f"## {head[0].upper() + head[1:]}", "", f"![{head}]({image(name)})", ""]
    if report.audit is not None:
        parts += ["## Audit: effective bandwidth against the ceiling", "", RULE, "",
                  md_table(report.audit, AUDIT_COLS), ""]
        if "audit" in report.figures:
            parts += [f"![audit]({image('audit')})", ""]
    if report.prefill is not None and len(report.prefill):
        pre = report.prefill.drop_duplicates(["device", "chunk_width"]).assign(
            mb=report.prefill["bytes_per_prefill_token"] / 1e6)
        parts += ["### Prefill: weights read once per M tokens", "", md_table(pre, {
            "device": ("device", ""), "chunk_width": ("M", "d"), "mb": ("MB per prefill token", ".1f"),
            "bound_tok_s": ("bandwidth bound tok/s", ".0f"), "regime": ("regime", "")}), ""]
    parts += ["## Token gates", "", md_table(report.first_arm_gates, FIRST_ARM_GATE_COLS), ""]
    if report.reference_gates is not None:
        parts += ["### Against the numpy reference decoder (decode and prefill apart)", "",
                  md_table(report.reference_gates, REF_GATE_COLS), ""]
    if report.nightly is not None:
        n = report.nightly
        last = n.alarms.sort_values("night").groupby(["config", "device"]).tail(1)
        parts += ["## Nightly history", "", md_table(last, {
            "config": ("config", ""), "device": ("device", ""), "night": ("last night", ""),
            "ratio": ("ratio", ".3f"), "p_one_sided_slower": ("one-sided p", ".4f"), "status": ("status", ""),
            "reason": ("reason", "")}), ""]
        alarmed = n.alarms[n.alarms["status"] == "alarm"]
        parts += [f"Alarms in history: {len(alarmed)} night(s)" + (
            ": " + ", ".join(f"{r['device']} {r['night']}" for r in alarmed.to_dict("records")) if len(alarmed)
            else ""), ""]
        parts += ["Change points: " + (", ".join(f"{r['device']} {r['signal']} from {r['night']} ({r['shift']:+.1%})"
                                                 for r in n.changes.to_dict("records")) or "none"), ""]
        if "history" in report.figures:
            parts += [f"![history]({image('history')})", ""]
    return "\n".join(parts) + "\n"
