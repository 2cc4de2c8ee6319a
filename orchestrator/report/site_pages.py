"""The published site's pages: HTML written here, the interactive chart drawn by plotly.js in the page.

plotly.js comes from the plotly Python package (``plotly/package_data/plotly.min.js``), copied into
the site's assets: the pages open offline and from file://. Each page carries its data inline (a JSON
script element), since browsers refuse to fetch a file:// URL from a file:// page.
"""

from __future__ import annotations

import html
import json
import math
from pathlib import Path
from typing import Any

from orchestrator.report import site_imports

STATUS_ORDER = {"alarm": 0, "watch": 1, "no data": 2, "ok": 3}

CSS = """
body { font: 14px/1.45 -apple-system, "Segoe UI", Helvetica, Arial, sans-serif; color: #222; margin: 20px auto;
       max-width: 1280px; padding: 0 16px; }
h1 { font-size: 22px; margin-bottom: 2px; } h2 { font-size: 17px; margin-top: 26px; border-bottom: 1px solid #ddd; }
.sub { color: #555; font-size: 13px; }
table { border-collapse: collapse; margin: 8px 0; font-size: 13px; }
th, td { border: 1px solid #e1e4e8; padding: 3px 8px; vertical-align: middle; }
th { background: #f6f8fa; text-align: left; } td.num { text-align: right; font-variant-numeric: tabular-nums; }
.v { padding: 1px 7px; border-radius: 10px; font-weight: 600; white-space: nowrap; }
.alarm { background: #f8d7da; color: #721c24; } .watch { background: #fff3cd; color: #856404; }
.ok { background: #d4edda; color: #155724; } .nodata { background: #e2e3e5; color: #383d41; }
.counts span { margin-right: 12px; } .filters label { margin-right: 14px; } #plot { height: 520px; }
#imported-plot { height: 320px; border: 1px dashed #adb5bd; }
a { color: #0366d6; text-decoration: none; } a:hover { text-decoration: underline; }
"""

SERIES_JS = r"""
"use strict";
(function () {
  const data = JSON.parse(document.getElementById("series-data").textContent);
  const plot = document.getElementById("plot");
  const colour = {alarm: "#d62728", watch: "#ff9f1a", ok: "#2b7bba", "no data": "#999999"};
  const fields = ["device", "chip_class", "runtime", "candidate_build"];
  const chosen = {};
  function fill(field) {
    const sel = document.getElementById("f-" + field);
    const values = [...new Set(data.points.map(p => p[field]).filter(v => v !== null))].sort();
    for (const v of values) {
      const o = document.createElement("option");
      o.value = o.textContent = v;
      sel.appendChild(o);
    }
    sel.addEventListener("change", () => { chosen[field] = sel.value; draw(); });
  }
  function fmt(x, d) { return x === null || x === undefined ? "-" : Number(x).toFixed(d); }
  function draw() {
    const pts = data.points.filter(p => fields.every(f => !chosen[f] || String(p[f]) === chosen[f]));
    const devices = [...new Set(pts.map(p => p.device))].sort();
    const traces = devices.map(device => {
      const mine = pts.filter(p => p.device === device);
      return {
        type: "scatter", mode: "lines+markers", name: device, x: mine.map(p => p.night), y: mine.map(p => p.ratio),
        error_y: {type: "data", symmetric: false, visible: true, thickness: 1,
                  array: mine.map(p => p.ci_high === null ? null : p.ci_high - p.ratio),
                  arrayminus: mine.map(p => p.ci_low === null ? null : p.ratio - p.ci_low)},
        marker: {size: mine.map(p => p.status === "ok" ? 7 : 12), color: mine.map(p => colour[p.status] || "#999"),
                 symbol: mine.map(p => p.status === "alarm" ? "x" : p.status === "watch" ? "diamond" : "circle"),
                 line: {width: 0}},
        customdata: mine.map(p => [p.report, p.status]),
        text: mine.map(p =>
          `<b>${p.device}</b> (${p.chip_class || "-"}) ${p.night}<br>` +
          `ratio ${fmt(p.ratio, 4)} [${fmt(p.ci_low, 4)}, ${fmt(p.ci_high, 4)}]<br>` +
          `one-sided p(slower) ${fmt(p.p_one_sided_slower, 4)}<br>` +
          `launches ${p.n_candidate}/${p.n_reference} (candidate/reference)<br>` +
          `${p.candidate_build} vs ${p.reference_build}<br><b>${p.status}</b>: ${p.reason || ""}`),
        hovertemplate: "%{text}<extra></extra>",
      };
    });
    const shapes = data.change_points.filter(c => c.signal === "ratio" && devices.includes(c.device)).map(c => ({
      type: "line", xref: "x", yref: "paper", x0: c.night, x1: c.night, y0: 0, y1: 1,
      line: {color: "#6f42c1", width: 1.5, dash: "dot"}}));
    const notes = data.change_points.filter(c => c.signal === "ratio" && devices.includes(c.device)).map(c => ({
      xref: "x", yref: "paper", x: c.night, y: 1, yanchor: "bottom", showarrow: false,
      text: `${c.device} ${(100 * c.shift).toFixed(1)}%`, font: {size: 10, color: "#6f42c1"}}));
    Plotly.react(plot, traces, {
      margin: {l: 60, r: 20, t: 30, b: 60}, hovermode: "closest", dragmode: "zoom",
      xaxis: {title: {text: "night"}, type: "category"},
      yaxis: {title: {text: "candidate / reference (decode tok/s)"}, tickformat: ".3f"},
      shapes: [{type: "line", xref: "paper", x0: 0, x1: 1, y0: 1, y1: 1, line: {color: "#888", width: 1}}, ...shapes],
      annotations: notes, legend: {title: {text: "device"}},
    }, {displaylogo: false, responsive: true});
    document.getElementById("shown").textContent = `${pts.length} nights shown`;
  }
  function drawImported() {
    // Other tools' numbers: their own chart (tok/s as each tool reported it), never the series above.
    const box = document.getElementById("imported-plot");
    const series = (data.imported || []).filter(s => s.trend.some(t => t.tok_s !== null));
    if (!box || !series.length) return;
    const traces = series.map(s => {
      const pts = s.trend.filter(t => t.tok_s !== null);
      return {
        type: "scatter", mode: "lines+markers", name: `${s.source_format} ${s.test} (${s.device})`,
        x: pts.map(t => t.night), y: pts.map(t => t.tok_s), line: {dash: "dot", width: 1.5},
        marker: {symbol: "square-open", size: 9},
        text: pts.map(t => `<b>${s.source_format}</b> ${s.runtime || ""} ${s.model || ""}<br>${s.test} on ` +
                           `${s.device}, ${t.night}: ${fmt(t.tok_s, 2)} tok/s<br>imported: not interleaved, ` +
                           "not settled, never decision-grade"),
        hovertemplate: "%{text}<extra></extra>",
      };
    });
    Plotly.newPlot(box, traces, {
      margin: {l: 60, r: 20, t: 40, b: 50}, hovermode: "closest",
      title: {text: "imported: not interleaved, not settled, never decision-grade", font: {size: 13, color: "#6c757d"}},
      xaxis: {title: {text: "day measured"}, type: "category"},
      yaxis: {title: {text: "tok/s (the tool's own average, log scale)"}, type: "log"},
      legend: {title: {text: "tool, test (device)"}},
    }, {displaylogo: false, responsive: true});
  }
  fields.forEach(fill);
  draw();
  drawImported();
  plot.on("plotly_click", ev => {
    const target = ev.points.length ? ev.points[0].customdata[0] : null;
    if (target) window.location.href = target;
  });
})();
"""


def plotly_js() -> bytes:
    from plotly.offline import get_plotlyjs

    return get_plotlyjs().encode()


def write_assets(assets: Path) -> list[Path]:
    """The pages' scripts and style, written when missing or changed."""
    assets.mkdir(parents=True, exist_ok=True)
    written = []
    for name, data in (("series.js", SERIES_JS.encode()), ("site.css", CSS.encode())):
        path = assets / name
        if not path.exists() or path.read_bytes() != data:
            path.write_bytes(data)
            written.append(path)
    lib = assets / "plotly.min.js"
    js = plotly_js()
    if not lib.exists() or lib.stat().st_size != len(js):
        lib.write_bytes(js)
        written.append(lib)
    return written


def _e(x: Any) -> str:
    return html.escape("-" if x is None else str(x))


def _num(x: Any, digits: int) -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.{digits}f}"


def badge(status: str) -> str:
    return f'<span class="v {status.replace(" ", "")}">{_e(status)}</span>'


def sparkline(values: list[float | None], width: int = 120, height: int = 24) -> str:
    """An inline SVG of the ratios (1.0 drawn as a grey line)."""
    ys = [v for v in values if v is not None]
    if len(ys) < 2:
        return ""
    lo, hi = min([*ys, 1.0]), max([*ys, 1.0])
    span = (hi - lo) or 1.0

    def y(v: float) -> float:
        return round(height - 2 - (v - lo) / span * (height - 4), 1)

    step = width / max(1, len(values) - 1)
    pts = " ".join(f"{round(i * step, 1)},{y(v)}" for i, v in enumerate(values) if v is not None)
    return (f'<svg class="spark" width="{width}" height="{height}" viewBox="0 0 {width} {height}">'
            f'<line x1="0" x2="{width}" y1="{y(1.0)}" y2="{y(1.0)}" stroke="#bbb" stroke-width="1"/>'
            f'<polyline fill="none" stroke="#2b7bba" stroke-width="1.5" points="{pts}"/></svg>')


def _page(title: str, body: str, depth: int, scripts: tuple[str, ...] = ()) -> str:
    up = "../" * depth
    tags = "".join(f'<script src="{up}assets/{s}"></script>' for s in scripts)
    return (f'<!doctype html>\n<html lang="en"><head><meta charset="utf-8"><title>{_e(title)}</title>'
            f'<link rel="stylesheet" href="{up}assets/site.css"></head><body>\n{body}\n{tags}</body></html>\n')


def index_page(rows: list[dict[str, Any]], runs: list[dict[str, Any]], broken: list[dict[str, Any]],
               imported: str = "") -> str:
    """The overview; ``imported``: the section of other tools' results (site_imports), shown apart."""
    counts = {s: sum(1 for r in rows if r["status"] == s) for s in STATUS_ORDER}
    h = ["<h1>orch: the morning view</h1>",
         '<p class="sub">Every device x nightly config: its latest night under the pre-committed alarm rule '
         "(candidate build vs pinned reference, interleaved on the same device). Click a status for that night's "
         "run report, a config for its history.</p>",
         '<p class="counts">' + "".join(f"<span>{badge(s)} {n}</span>" for s, n in counts.items()) + "</p>"]
    if rows:
        h.append('<table id="overview"><tr><th>config</th><th>device</th><th>chip</th><th>latest night</th>'
                 "<th>status</th><th>ratio [95% CI]</th><th>p(slower)</th><th>last 30 nights</th><th>why</th></tr>")
        for r in sorted(rows, key=lambda r: (STATUS_ORDER.get(r["status"], 9), r["config"], r["device"])):
            status = badge(r["status"]) + (f' since {_e(r["since"])}' if r.get("since") else "")
            if r.get("report"):
                status = f'<a class="to-report" href="{_e(r["report"])}">{status}</a>'
            h.append(
                f'<tr class="series" data-status="{_e(r["status"])}" data-config="{_e(r["config"])}">'
                f'<td><a href="{_e(r["page"])}">{_e(r["config"])}</a></td><td>{_e(r["device"])}</td>'
                f'<td>{_e(r.get("chip_class"))}</td><td>{_e(r["night"])}</td><td>{status}</td>'
                f'<td class="num">{_num(r.get("ratio"), 3)} [{_num(r.get("ci_low"), 3)}, {_num(r.get("ci_high"), 3)}]'
                f'</td><td class="num">{_num(r.get("p_one_sided_slower"), 4)}</td>'
                f"<td>{sparkline(r['sparkline'])}</td><td>{_e(r.get('reason'))}</td></tr>")
        h.append("</table>")
    else:
        h.append("<p>No nightly history yet (orch nightly writes it).</p>")
    if imported:
        h.append(imported)
    h.append(f"<h2>Runs ({len(runs)})</h2>")
    if runs:
        h.append('<table id="runs"><tr><th>run</th><th>plan</th><th>model</th><th>arms</th><th>devices</th></tr>')
        for r in sorted(runs, key=lambda r: r["run_id"], reverse=True):
            link = f'<a href="{_e(r["report"])}">{_e(r["run_id"])}</a>' if r["report"] else _e(r["run_id"])
            h.append(f"<tr><td>{link}</td><td>{_e(r['plan'])}</td><td>{_e(r['model'])}</td><td>{_e(r['arms'])}</td>"
                     f"<td>{_e(r['devices'])}</td></tr>")
        h.append("</table>")
    for b in broken:
        h.append(f'<p class="sub">run {_e(b["run_id"])} left out: {_e(b["why"])}</p>')
    h.append('<p class="sub">Machine-readable: <a href="data/overview.json">data/overview.json</a>.</p>')
    return _page("orch: the morning view", "\n".join(h), 0)


def config_page(data: dict[str, Any]) -> str:
    config = data["config"]
    pts = data["points"]
    flagged = sorted((p for p in pts if p["status"] in ("alarm", "watch")), key=lambda p: p["night"], reverse=True)
    h = ['<p class="sub"><a href="../index.html">overview</a></p>', f"<h1>{_e(config)}</h1>",
         f'<p class="sub">{len(pts)} nights x devices; runtime {_e(", ".join(data["runtimes"]) or "-")}; reference '
         f'build {_e(", ".join(data["reference_builds"]) or "-")}. Hover a night for '
         "its ratio, CI, p and launches; drag to zoom (double-click resets); click a night to open its run report. "
         "Dotted lines: change points of the ratio (the slower signal).</p>",
         '<p class="filters">' + "".join(
             f'<label>{label} <select id="f-{f}"><option value="">all</option></select></label>'
             for f, label in (("device", "device"), ("chip_class", "chip class"), ("runtime", "runtime"),
                              ("candidate_build", "build"))) + '<span id="shown" class="sub"></span></p>',
         '<div id="plot"></div>', f"<h2>Alarms and watches ({len(flagged)})</h2>"]
    if flagged:
        h.append('<table id="flagged"><tr><th>night</th><th>device</th><th>status</th><th>ratio [95% CI]</th>'
                 "<th>builds</th><th>why</th></tr>")
        for p in flagged:
            night = f'<a class="to-report" href="{_e(p["report"])}">{_e(p["night"])}</a>' if p["report"] \
                else _e(p["night"])
            h.append(f'<tr data-status="{_e(p["status"])}"><td>{night}</td><td>{_e(p["device"])}</td>'
                     f'<td>{badge(p["status"])}</td><td class="num">{_num(p["ratio"], 3)} [{_num(p["ci_low"], 3)}, '
                     f'{_num(p["ci_high"], 3)}]</td><td>{_e(p["candidate_build"])} vs {_e(p["reference_build"])}</td>'
                     f'<td>{_e(p["reason"])}</td></tr>')
        h.append("</table>")
    else:
        h.append("<p>none</p>")
    h.append(f"<h2>Change points ({len(data['change_points'])})</h2>")
    h += [f"<p>{_e(c['device'])}: {_e(c['signal'])} from {_e(c['night'])} ({100 * c['shift']:+.1f}%)</p>"
          for c in data["change_points"]] or ["<p>none detected</p>"]
    h.append(site_imports.config_section(data.get("imported", []), data.get("imported_failed", [])))
    h.append(f'<p class="sub">Machine-readable: <a href="../data/{_e(config)}.json">data/{_e(config)}.json</a>.</p>')
    payload = json.dumps(data).replace("</", "<\\/")
    h.append(f'<script id="series-data" type="application/json">{payload}</script>')
    return _page(f"{config}: nightly history", "\n".join(h), 1, ("plotly.min.js", "series.js"))
