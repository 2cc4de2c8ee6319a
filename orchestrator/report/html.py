"""One self-contained HTML file (charts embedded as base64 PNG, inline CSS, no scripts): opens offline."""

from __future__ import annotations

import base64
import html
from pathlib import Path

import pandas as pd

from orchestrator.analysis.audit import RULE
from orchestrator.derive import RunOutcome
from orchestrator.report.markdown import (
    AUDIT_COLS,
    EXCLUDED_COLS,
    FAIL_COLS,
    FIRST_ARM_GATE_COLS,
    REF_GATE_COLS,
    SESSION_COLS,
    VERDICT_COLS,
    Report,
    _f,
    arms_text,
    collect,
    headline,
    rule_text,
    sessions_frame,
    title,
    to_markdown,
    verdict_frame,
)

CSS = """
body { font: 14px/1.45 -apple-system, "Segoe UI", Helvetica, Arial, sans-serif; color: #222; margin: 24px auto;
       max-width: 1180px; padding: 0 16px; }
h1 { font-size: 22px; margin-bottom: 4px; } h2 { font-size: 17px; margin-top: 28px; border-bottom: 1px solid #ddd; }
.rule { color: #555; font-size: 13px; }
.headline { background: #f6f8fa; border: 1px solid #e1e4e8; border-radius: 6px; padding: 8px 14px; }
table { border-collapse: collapse; margin: 8px 0; font-size: 13px; }
th, td { border: 1px solid #e1e4e8; padding: 3px 8px; } th { background: #f6f8fa; text-align: left; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
.v { padding: 1px 7px; border-radius: 10px; font-weight: 600; }
.faster { background: #d4edda; color: #155724; } .slower { background: #f8d7da; color: #721c24; }
.equivalent { background: #d1ecf1; color: #0c5460; } .inconclusive { background: #fff3cd; color: #856404; }
.alarm { background: #f8d7da; color: #721c24; } .watch { background: #fff3cd; color: #856404; }
.ok { background: #d4edda; color: #155724; }
img { max-width: 100%; border: 1px solid #eee; margin: 6px 0; }
.fail { color: #721c24; }
"""
BADGES = {"faster", "slower", "equivalent", "inconclusive", "alarm", "watch", "ok"}


def _table(frame: pd.DataFrame, cols: dict[str, tuple[str, str]]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h, _ in cols.values())
    body = []
    for row in frame.to_dict("records"):
        cells = []
        for c, (_, spec) in cols.items():
            text = html.escape(_f(row[c], spec))
            if text in BADGES:
                text = f'<span class="v {text}">{text}</span>'
            cells.append(f'<td class="num">{text}</td>' if spec else f"<td>{text}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    return f"<table><tr>{head}</tr>{''.join(body)}</table>"


def _img(report: Report, name: str, alt: str) -> str:
    if name not in report.figures:
        return ""
    data = base64.b64encode(report.figures[name]).decode()
    return f'<img alt="{html.escape(alt)}" src="data:image/png;base64,{data}">'


def to_html(report: Report) -> str:
    h = [f"<h1>{html.escape(title(report))}</h1>", f'<p class="rule">{html.escape(rule_text(report))}</p>',
         f'<p class="rule">{html.escape(arms_text(report))}</p>']
    lines = headline(report) or ["no verdicts: no finished trials"]
    h.append('<div class="headline">' + "<br>".join(
        html.escape(x).replace("**", "") for x in lines) + "</div>")
    h += ["<h2>Verdicts</h2>", _table(verdict_frame(report), VERDICT_COLS)]
    h += ["<h2>Sessions</h2>", _table(sessions_frame(report), SESSION_COLS)]
    if not report.failures.empty:
        h += ['<h2 class="fail">Failures (kept as data)</h2>', _table(report.failures, FAIL_COLS)]
    if not report.excluded.empty:
        h += ["<h2>Excluded from verdicts, audit and rank (kept as data)</h2>", _table(report.excluded, EXCLUDED_COLS)]
    h += ["<h2>tok/s per device and arm</h2>", _img(report, "distributions", "tok/s distributions")]
    h += ["<h2>tok/s in trial order, thermal state and settle waits</h2>",
          _img(report, "trial_order", "tok/s in trial order")]
    if report.audit is not None:
        h += ["<h2>Audit: effective bandwidth against the ceiling</h2>", f'<p class="rule">{html.escape(RULE)}</p>',
              _img(report, "audit", "audit bars"), _table(report.audit, AUDIT_COLS)]
    if report.prefill is not None and len(report.prefill):
        pre = report.prefill.drop_duplicates(["device", "chunk_width"]).assign(
            mb=report.prefill["bytes_per_prefill_token"] / 1e6)
        h += ["<h3>Prefill: weights read once per M tokens</h3>", _table(pre, {
            "device": ("device", ""), "chunk_width": ("M", "d"), "mb": ("MB per prefill token", ".1f"),
            "bound_tok_s": ("bandwidth bound tok/s", ".0f"), "regime": ("regime", "")})]
    h += ["<h2>Token gates</h2>", _table(report.first_arm_gates, FIRST_ARM_GATE_COLS)]
    if report.reference_gates is not None:
        h += ["<h3>Against the numpy reference decoder (decode and prefill apart)</h3>",
              _table(report.reference_gates, REF_GATE_COLS)]
    if report.nightly is not None:
        n = report.nightly
        h += ["<h2>Nightly history: alarms and change points (table: last 10 nights)</h2>",
              _img(report, "history", "nightly history"),
              _table(n.alarms.sort_values(["device", "night"]).groupby("device").tail(10), {
                  "device": ("device", ""), "night": ("night", ""), "ratio": ("ratio", ".3f"),
                  "p_one_sided_slower": ("one-sided p", ".4f"), "streak": ("streak", "d"), "status": ("status", ""),
                  "reason": ("reason", "")})]
    body = "\n".join(x for x in h if x)
    return (f'<!doctype html>\n<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title(report))}'
            f"</title><style>{CSS}</style></head><body>\n{body}\n</body></html>\n")


def render(outcome: RunOutcome, out_dir: Path, history: Path | None = None) -> list[Path]:
    """Write report.html (self-contained) and report.md (+ figures/*.png) into out_dir."""
    report = collect(outcome, history)
    out_dir.mkdir(parents=True, exist_ok=True)
    figures = out_dir / "figures"
    figures.mkdir(exist_ok=True)
    for name, png in report.figures.items():
        (figures / f"{name}.png").write_bytes(png)
    html_path, md_path = out_dir / "report.html", out_dir / "report.md"
    html_path.write_text(to_html(report))
    md_path.write_text(to_markdown(report, lambda name: f"figures/{name}.png"))
    return [html_path, md_path]
