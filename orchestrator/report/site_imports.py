"""The site's section of imported results (``orch import``): other tools' numbers, shown apart.

They are that tool's averages, taken without a settle gate or interleaving, so they stand in their
own table under their own heading, never in the overview's status rows, a config's series or a
rule's alarm. One row per series (tool, model, device, test): its latest number and its trend.
"""

from __future__ import annotations

import html
import math
from typing import Any

import pandas as pd

__all__ = ["TITLE", "config_section", "document", "failures", "section", "series"]

TITLE = "Imported from other tools: not interleaved, not settled, never decision-grade"
KEYS = ["source_format", "runtime", "model", "device", "test"]


def _e(x: Any) -> str:
    return html.escape("-" if x is None else str(x))


def _clean(x: Any) -> Any:
    if hasattr(x, "item"):
        x = x.item()
    return None if x is None or (isinstance(x, float) and math.isnan(x)) else x


def _ok(rows: pd.DataFrame) -> pd.Series:
    return rows["status"].fillna("ok") == "ok" if "status" in rows.columns else pd.Series(True, index=rows.index)


def series(rows: pd.DataFrame) -> list[dict[str, Any]]:
    """One entry per (tool, runtime, model, device, test) of the imported ``rows``: the latest import's
    numbers and every night's. Failed runs are no measurement: they are in ``failures``, never here."""
    out: list[dict[str, Any]] = []
    if len(rows):
        rows = rows[_ok(rows)]
    if not len(rows):
        return out
    rows = rows.assign(night=rows["night"].astype(str))
    for key, g in rows.groupby(KEYS, sort=True):
        g = g.sort_values(["night", "imported_at"], kind="stable")
        last = g.iloc[-1]
        out.append(dict(zip(KEYS, key, strict=True)) | {
            "phase": last["phase"], "night": last["night"], "tok_s": _clean(last["tok_s"]),
            "tok_s_stddev": _clean(last["tok_s_stddev"]), "n_samples": _clean(last["n_samples"]),
            "build": _clean(last["build"]), "source_file": last["source_file"],
            "source_line": _clean(last["source_line"]),
            "import_id": last["import_id"], "imports": len(g),
            "trend": [{"night": n, "tok_s": _clean(t)} for n, t in zip(g["night"], g["tok_s"], strict=True)],
            "decision_grade": False,
        })
    return out


def failures(rows: pd.DataFrame) -> list[dict[str, Any]]:
    """Every imported run the tool reported as failed, newest first."""
    if not len(rows):
        return []
    bad = rows[~_ok(rows)].assign(night=lambda f: f["night"].astype(str))
    bad = bad.sort_values(["night", "imported_at"], ascending=False, kind="stable")
    cols = ["source_format", "runtime", "model", "device", "night", "failure_kind", "failure", "source_file",
            "source_line", "import_id"]
    return [{c: _clean(r[c]) for c in cols} | {"status": "failed", "decision_grade": False}
            for _, r in bad.iterrows()]


def failed_table(entries: list[dict[str, Any]]) -> str:
    """Failed runs: listed as failed, with what the tool said; no number, no chart."""
    if not entries:
        return ""
    h = [f'<h3 id="imported-failed">Failed runs ({len(entries)}): the tool measured nothing</h3>',
         '<table id="imported-failures"><tr><th>tool</th><th>model</th><th>device</th><th>day</th><th>status</th>'
         "<th>what the tool said</th><th>from</th></tr>"]
    for r in entries:
        h.append(f'<tr class="imported-failed" data-source="{_e(r["source_format"])}" '
                 f'data-kind="{_e(r["failure_kind"])}"><td>{_e(r["source_format"])}</td><td>{_e(r["model"])}</td>'
                 f'<td>{_e(r["device"])}</td><td>{_e(r["night"])}</td><td><span class="v alarm">failed</span> '
                 f'{_e(r["failure_kind"])}</td><td>{_e(r["failure"])}</td>'
                 f'<td class="sub">{_e(r["source_file"])}:{_e(r["source_line"])}</td></tr>')
    h.append("</table>")
    return "\n".join(h)


def trend(values: list[float], width: int = 120, height: int = 24) -> str:
    """An inline SVG of a series' tok/s, low to high (no reference line: there is no ratio here)."""
    if len(values) < 2:
        return ""
    lo, hi = min(values), max(values)
    span = (hi - lo) or 1.0
    step = width / (len(values) - 1)
    pts = " ".join(f"{round(i * step, 1)},{round(height - 2 - (v - lo) / span * (height - 4), 1)}"
                   for i, v in enumerate(values))
    return (f'<svg class="trend" width="{width}" height="{height}" viewBox="0 0 {width} {height}">'
            f'<polyline fill="none" stroke="#6c757d" stroke-width="1.5" points="{pts}"/></svg>')


def _table(entries: list[dict[str, Any]], *, runtime: bool, trend_column: bool) -> str:
    """The imported results, one row each: the tool, (its runtime,) model, device, test, tok/s, (a trend,) where
    it came from."""
    heads = ["tool", *(["runtime"] if runtime else []), "model", "device", "test", "tok/s (± sd)", "latest",
             "imports", *(["trend"] if trend_column else []), "from"]
    h = ['<table id="imported"><tr>' + "".join(f"<th>{x}</th>" for x in heads) + "</tr>"]
    for r in entries:
        sd = f" ± {r['tok_s_stddev']:.2f}" if r["tok_s_stddev"] is not None else ""
        line = trend([t["tok_s"] for t in r["trend"] if t["tok_s"] is not None]) if trend_column else None
        h.append(f'<tr class="imported" data-source="{_e(r["source_format"])}" data-test="{_e(r["test"])}">'
                 f'<td>{_e(r["source_format"])}</td>' + (f'<td>{_e(r["runtime"])}</td>' if runtime else "")
                 + f'<td>{_e(r["model"])}</td><td>{_e(r["device"])}</td><td>{_e(r["test"])}</td>'
                 f'<td class="num">{r["tok_s"]:.2f}{sd}</td><td>{_e(r["night"])}</td>'
                 f'<td class="num">{r["imports"]}</td>' + (f"<td>{line}</td>" if line is not None else "")
                 + f'<td class="sub">{_e(r["source_file"])}:{_e(r["source_line"])}</td></tr>')
    h.append("</table>")
    return "\n".join(h)


def section(entries: list[dict[str, Any]], failed: list[dict[str, Any]] | None = None) -> str:
    """The overview page's section (empty when nothing was imported)."""
    if not entries and not failed:
        return ""
    h = [f'<h2 id="imported-results">{_e(TITLE)} ({len(entries)})</h2>',
         '<p class="sub">Each tool\'s own average over its own repetitions, brought in with <code>orch import</code>. '
         "No settle gate, no interleaving, no fresh process per repetition: read them as that tool's claim, not "
         "as a measurement of this lab. They enter no alarm, verdict or rank. Machine-readable: "
         '<a href="data/imported.json">data/imported.json</a>.</p>',
         _table(entries, runtime=False, trend_column=True), failed_table(failed or [])]
    return "\n".join(h)


def config_section(entries: list[dict[str, Any]], failed: list[dict[str, Any]] | None = None) -> str:
    """A config page's section: other tools' results on its devices, in a chart of their own (tok/s as the
    tool reported it, no ratio, no alarm) and a table, under the same heading as on the overview."""
    if not entries and not failed:
        return ""
    h = [f'<h2 id="imported-results">{_e(TITLE)} ({len(entries)})</h2>',
         '<p class="sub">Other tools\' numbers on this config\'s devices (<code>orch import</code>), each the tool\'s '
         "own average: no settle gate, no interleaving, no pinned reference. Drawn here apart, in tok/s, never in "
         "the chart above: they enter no ratio, alarm, verdict or rank.</p>",
         '<div id="imported-plot" class="imported-plot"></div>',
         _table(entries, runtime=True, trend_column=False), failed_table(failed or [])]
    return "\n".join(h)


def document(entries: list[dict[str, Any]], rows: pd.DataFrame) -> dict[str, Any]:
    """``data/imported.json``: the series, and every imported row (the history's column names)."""
    from orchestrator.report.machine import records

    frame = rows.assign(night=rows["night"].astype(str)) if len(rows) else rows
    return {"title": TITLE, "series": entries, "failed": failures(rows), "rows": records(frame)}
