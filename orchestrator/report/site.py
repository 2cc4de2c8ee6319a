"""`orch publish`: a static site of every run and the nightly history (works from file:// or any server).

    SITE/index.html               every device x config: latest status, ratio, sparkline; every run
    SITE/config/<config>.html     the config's series: interactive chart, alarms, change points; below, apart,
                                  other tools' results on its devices (orch import) in a chart of their own
    SITE/data/<config>.json       the same series, for machines (column names as in the history), and under
                                  "imported" other tools' results on the config's devices (never its points)
    SITE/data/overview.json       the overview table, for machines
    SITE/data/imported.json       other tools' results (orch import): shown apart on the index, never decided on
    SITE/runs/<run_id>/report.html  each run's report (the one `orch report` writes)
    SITE/assets/                  plotly.min.js (from the plotly package: no CDN), series.js, site.css

Incremental: a page is written only when its content changed, and a run's report is rendered again
only when its journal or manifest changed since the last publish (``SITE/.publish.json`` holds what
each was made from).
"""

from __future__ import annotations

import hashlib
import json
import math
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from orchestrator.config.candidates import CeilingTable
from orchestrator.derive import derive
from orchestrator.report import site_imports, site_pages
from orchestrator.results.imports import store as imports_store
from orchestrator.results.store import RUN_ID, RunDir, RunUnreadable

__all__ = ["PublishOutcome", "publish"]

STATE = ".publish.json"
POINT_COLUMNS = ["night", "device", "chip_class", "run_id", "reference_build", "candidate_build", "n_reference",
                 "n_candidate", "median_reference", "median_candidate", "ratio", "ci_low", "ci_high",
                 "p_one_sided_slower", "verdict", "streak", "status", "since", "reason"]


@dataclass
class PublishOutcome:
    site: Path
    written: list[Path] = field(default_factory=list)  # pages and reports written this time
    unchanged: int = 0  # pages and reports already up to date
    skipped_runs: list[str] = field(default_factory=list)  # runs that could not be read (why in the index)

    @property
    def index(self) -> Path:
        return self.site / "index.html"


def _clean(x: Any) -> Any:
    """JSON-safe: NaN and missing as null, numpy scalars as Python numbers."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return None
    if hasattr(x, "item"):
        x = x.item()
        return None if isinstance(x, float) and math.isnan(x) else x
    return x if not pd.isna(x) else None


def _records(frame: pd.DataFrame, cols: list[str]) -> list[dict[str, Any]]:
    present = [c for c in cols if c in frame.columns]
    return [{str(c): _clean(v) for c, v in row.items()} for row in frame[present].to_dict("records")]


def _write(path: Path, data: bytes, outcome: PublishOutcome) -> None:
    """Write ``data`` unless ``path`` already holds it (temp file, then rename)."""
    if path.exists() and path.read_bytes() == data:
        outcome.unchanged += 1
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data)
    tmp.replace(path)
    outcome.written.append(path)


def _runs(results: Path) -> list[RunDir]:
    if not results.is_dir():
        return []
    return [RunDir(p.parent) for p in sorted(results.glob("*/manifest.json")) if RUN_ID.fullmatch(p.parent.name)]


def _fingerprint(run: RunDir) -> str:
    parts = [f"{p.name}:{p.stat().st_size}:{p.stat().st_mtime_ns}" for p in (run.manifest_path, run.journal_path)
             if p.exists()]
    return hashlib.sha256("|".join(parts).encode()).hexdigest()[:16]


def _series(history: Path | None, runs: dict[str, RunDir]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Every night's comparison with the rule's status (each config's rule from its newest run), and
    the change points of every series."""
    from orchestrator.analysis import nightly
    from orchestrator.config.plan import NightlyAlarm
    from orchestrator.results import history as history_db
    from orchestrator.results.history import load_nights

    if history is None or not history_db.has(history, "nights"):
        return pd.DataFrame(columns=["config", "device", "night"]), pd.DataFrame(columns=["config", "device"])
    nights = load_nights(history)
    rules: dict[str, NightlyAlarm] = {}
    for config, run_id in nights.sort_values("night")[["config", "run_id"]].drop_duplicates("config", keep="last") \
            .itertuples(index=False):
        run = runs.get(str(run_id))
        try:
            rules[str(config)] = nightly.rule_of(run.manifest().plan) if run else NightlyAlarm()
        except RunUnreadable:
            rules[str(config)] = NightlyAlarm()
    table = nightly.alarms(nights, rules)
    table["night"] = table["night"].astype(str)
    changes = nightly.changepoints(nightly.night_medians(nights))
    changes["night"] = changes["night"].astype(str)
    return table, changes


def _run_row(run: RunDir) -> dict[str, Any]:
    m = run.manifest()
    return {"run_id": run.run_id, "plan": m.plan.name, "model": m.plan.model,
            "arms": ", ".join(f"{a.name} ({a.runtime}{' ' + a.build if a.build else ''})" for a in m.plan.arms),
            "runtime": m.plan.arms[0].runtime if m.plan.arms else None,
            "devices": ", ".join(s.device for s in m.sessions), "report": f"runs/{run.run_id}/report.html"}


def overview(table: pd.DataFrame, reports: set[str]) -> list[dict[str, Any]]:
    """One row per config x device: its latest night's status; ``no data`` when the config ran a later
    night without a comparison for this device."""
    rows: list[dict[str, Any]] = []
    if not len(table):
        return rows
    latest_of_config = table.groupby("config")["night"].max().to_dict()
    for (config, device), g in table.groupby(["config", "device"], sort=True):
        last = g.sort_values("night").iloc[-1]
        row = {c: _clean(last[c]) for c in POINT_COLUMNS if c in last.index}
        row |= {"config": config, "device": device, "nights": len(g),
                "sparkline": [_clean(x) for x in g.sort_values("night")["ratio"].tail(30)],
                "page": f"config/{config}.html",
                "report": f"runs/{last['run_id']}/report.html" if last["run_id"] in reports else None}
        if latest_of_config[config] != last["night"]:
            row |= {"status": "no data", "reason": f"no comparison on {latest_of_config[config]} "
                                                   f"(last: {last['night']})", "report": None}
        rows.append(row)
    return rows


def publish(results: Path, history: Path | None, out: Path, ceilings: CeilingTable | None) -> PublishOutcome:
    """Build or update the site under ``out`` (see the module's docstring)."""
    from orchestrator.report.html import render

    outcome = PublishOutcome(site=out)
    out.mkdir(parents=True, exist_ok=True)
    state_path = out / STATE
    state: dict[str, Any] = json.loads(state_path.read_text()) if state_path.exists() else {}
    made: dict[str, str] = dict(state.get("runs", {}))
    runs = {r.run_id: r for r in _runs(results)}
    run_rows, broken = [], []
    for run_id, run in runs.items():
        try:
            row = _run_row(run)
        except RunUnreadable as exc:
            broken.append({"run_id": run_id, "why": str(exc)})
            continue
        dest = out / "runs" / run_id
        fp = _fingerprint(run)
        if made.get(run_id) == fp and (dest / "report.html").exists():
            outcome.unchanged += 1
        elif run.journal_path.exists():
            outcome.written += render(derive(run, ceilings), dest)[:1]
            made[run_id] = fp
        else:
            row["report"] = None  # a run created but not started: nothing to report yet
        run_rows.append(row)
    outcome.skipped_runs = [b["run_id"] for b in broken]
    reports = {r["run_id"] for r in run_rows if r["report"]}
    table, changes = _series(history, runs)
    configs = sorted(table["config"].unique()) if len(table) else []
    over = overview(table, reports)
    assets = site_pages.write_assets(out / "assets")
    outcome.written += assets
    imported_rows = imports_store.load(history)
    imported = site_imports.series(imported_rows)
    failed = site_imports.failures(imported_rows)  # runs the tool reported as failed: listed, never a number
    for config in configs:
        mine = table[table["config"] == config].sort_values(["device", "night"])
        points = _records(mine, POINT_COLUMNS)
        runtime_of = {r["run_id"]: r["runtime"] for r in run_rows}
        for p in points:
            p["report"] = f"../runs/{p['run_id']}/report.html" if p["run_id"] in reports else None
            p["runtime"] = runtime_of.get(p["run_id"])
        cps = _records(changes[changes["config"] == config], ["device", "signal", "night", "shift"])
        devices = {p["device"] for p in points}
        data = {"config": config, "points": points, "change_points": cps,
                "runtimes": sorted({p["runtime"] for p in points if p["runtime"]}),
                "reference_builds": sorted({p["reference_build"] for p in points if p["reference_build"]}),
                # Other tools' results on this config's devices: their own chart and table, never these points.
                "imported": [e for e in imported if e["device"] in devices],
                "imported_failed": [e for e in failed if e["device"] in devices]}
        _write(out / "data" / f"{config}.json", (json.dumps(data, indent=1) + "\n").encode(), outcome)
        _write(out / "config" / f"{config}.html", site_pages.config_page(data).encode(), outcome)
    _write(out / "data" / "overview.json", (json.dumps({"series": over, "runs": run_rows, "unreadable": broken},
                                                       indent=1) + "\n").encode(), outcome)
    _write(out / "data" / "imported.json", (json.dumps(site_imports.document(imported, imported_rows), indent=1)
                                            + "\n").encode(), outcome)
    index = site_pages.index_page(over, run_rows, broken, site_imports.section(imported, failed))
    _write(out / "index.html", index.encode(), outcome)
    for stale in set(made) - set(runs):  # a run removed from the results folder leaves the site too
        shutil.rmtree(out / "runs" / stale, ignore_errors=True)
        made.pop(stale)
    state_path.write_text(json.dumps({"runs": made}, indent=1, sort_keys=True) + "\n")
    return outcome
