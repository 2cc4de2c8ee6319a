"""What a person reads in the terminal: live progress per device, the run summary, the verdict table."""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Hashable, Mapping
from typing import Any

import pandas as pd
from pydantic import BaseModel
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from orchestrator.analysis.summary import family_words
from orchestrator.results.records import (
    AttemptSpoiled,
    Manifest,
    PushProgress,
    SessionStopped,
    SettleWaiting,
    TrialRecord,
    device_chips,
)

VERDICT_STYLE = {"faster": "bold green", "slower": "bold red", "equivalent": "cyan", "inconclusive": "yellow"}


class LiveProgress:
    """One bar per device: the model's push, trials done, failures, the last trial's tok/s, and how the session
    ended."""

    def __init__(self, console: Console, manifest: Manifest, done: dict[str, int] | None = None):
        self.progress = Progress(
            TextColumn("{task.fields[device]:<14}"), BarColumn(), MofNCompleteColumn(),
            TextColumn("{task.fields[status]}"), TimeElapsedColumn(), console=console,
            disable=not console.is_terminal,
        )
        self.tasks = {
            s.device: self.progress.add_task(
                "", total=len(s.trials), completed=(done or {}).get(s.device, 0), device=s.device, status=""
            )
            for s in manifest.sessions
        }
        self.failures: Counter[str] = Counter()
        self.excluded: Counter[str] = Counter()
        self.console = console
        self.said: dict[str, str] = {}  # device -> the kind of wait last said in plain lines (no terminal)

    def __enter__(self) -> LiveProgress:
        self.progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.progress.stop()

    def observe(self, device: str, record: BaseModel) -> None:
        if not self.console.is_terminal:
            self._plain(device, record)
        task = self.tasks[device]
        if isinstance(record, TrialRecord):
            if record.failure:
                self.failures[device] += 1
                status = f"{record.arm}: {record.failure.kind}"
            else:
                rate = record.result.decode_tok_s() if record.result else None
                status = f"{record.arm}: {rate:.1f} tok/s" if rate else record.arm
                if record.excluded:
                    self.excluded[device] += 1
                    status += " (excluded)"
            if self.excluded[device]:
                status += f"  [yellow]{self.excluded[device]} excluded[/]"
            if self.failures[device]:
                status += f"  [red]{self.failures[device]} failed[/]"
            self.progress.update(task, advance=1, status=status)
        elif isinstance(record, SettleWaiting):
            self.progress.update(task, status=f"waiting: {escape(record.why)}")  # process names are not markup
        elif isinstance(record, AttemptSpoiled):
            why = escape(record.why.split(" (")[0])
            self.progress.update(task, status=f"[yellow]retrying {record.trial_id}[/]: {why}")
        elif isinstance(record, SessionStopped):
            self.progress.update(task, status=f"stopped: {record.reason}")
        elif isinstance(record, PushProgress):  # prepare putting the model on the device
            pct = 100 * record.sent // max(1, record.total)
            done = "pushed" if record.sent >= record.total else f"pushing {pct}% of"
            self.progress.update(task, status=f"{done} {record.name.rsplit('/', 1)[-1]} ({record.total / 1e6:.0f} MB)")


    def _plain(self, device: str, record: BaseModel) -> None:
        """Without a terminal (a log, CI) there is no live bar: what a person must know, one line each: a
        wait out of the ordinary (once per kind and attempt), a retried attempt, an excluded trial, a stop."""
        line = None
        if isinstance(record, SettleWaiting):
            kind = re.sub(r"[\d.]+", "#", record.why.split(":")[0])  # the same wait, whatever its figures
            if kind != self.said.get(device) and not kind.startswith(ROUTINE_WAITS):
                self.said[device] = kind
                line = record.why if record.why.startswith("waiting") else f"waiting: {record.why}"
        elif isinstance(record, AttemptSpoiled):
            self.said.pop(device, None)  # the next attempt's waits are news again
            line = f"retrying {record.trial_id} (attempt {record.attempt}): {record.why}"
        elif isinstance(record, TrialRecord):
            self.said.pop(device, None)
            if record.excluded:
                line = f"{record.trial_id} ({record.arm}) kept but excluded: {record.excluded}"
        if line is not None:
            self.console.print(f"{device}: {line}", markup=False, highlight=False, soft_wrap=True)


ROUTINE_WAITS = ("min gap", "flat window", "temperature")  # every trial's: said by the live bar only


def _fmt(x: Any, spec: str) -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, spec)


def ratio_ci(row: Mapping[Hashable, Any]) -> str:
    """A verdict's ratio and its (1 - alpha) CI; where too few blocks leave that interval unbounded (the test
    cannot reach p < alpha), it says so and gives the 90% CI equivalence is judged by instead of [0, inf]."""
    lo, hi = row["ci_low"], row["ci_high"]
    if isinstance(lo, float) and isinstance(hi, float) and (lo <= 0 or math.isinf(hi)) and "ci90_low" in row:
        return (f"{_fmt(row['ratio'], '.3f')} [unbounded at alpha {_fmt(row.get('alpha'), '.2g')}; 90%: "
                f"{_fmt(row['ci90_low'], '.3f')}, {_fmt(row['ci90_high'], '.3f')}]")
    return f"{_fmt(row['ratio'], '.3f')} [{_fmt(lo, '.3f')}, {_fmt(hi, '.3f')}]"


def frame_table(title: str, frame: pd.DataFrame, cols: dict[str, str]) -> Table:
    """A rich table of `frame`: column -> format spec ('' = str); a missing number shows as '-'."""
    table = Table(title=title, title_justify="left")
    for head, spec in cols.items():
        table.add_column(head, justify="right" if spec else "left")
    for row in frame.to_dict("records"):
        table.add_row(*(_fmt(row[c], s) if s else str(row[c]) for c, s in cols.items()))
    return table


def verdict_table(verdicts: pd.DataFrame, manifest: Manifest, chips: dict[str, str] | None = None) -> Table:
    rule = manifest.plan.decision
    table = Table(
        title=f"Verdicts ({rule.statistic}; alpha {rule.alpha}{family_words(manifest.plan)}, min effect "
        f"{rule.min_effect:.0%}, equivalence ±{rule.equivalence_margin:.0%}; rule {manifest.rule_digest})",
        title_justify="left",
    )
    chips = chips or device_chips(manifest, [])
    for col in ("device", "chip", "comparison", "n", "baseline tok/s", "candidate tok/s", "ratio [CI]", "p",
                "σ", "MDE", "verdict", "device min"):
        table.add_column(col, justify="left" if col in ("device", "chip", "comparison", "verdict") else "right")
    for row in verdicts.to_dict("records"):
        ci = ratio_ci(row)
        table.add_row(
            str(row["device"]), str(chips.get(str(row["device"]), "")), f"{row['candidate']} vs {row['baseline']}",
            f"{_fmt(row['n_candidate'], '.0f')}/{_fmt(row['n_baseline'], '.0f')}",
            _fmt(row["median_baseline"], ".1f"), _fmt(row["median_candidate"], ".1f"), ci,
            _fmt(row["p_adjusted"], ".4f"), _fmt(row["sigma"], ".1%"), _fmt(row["mde"], ".1%"),
            f"[{VERDICT_STYLE.get(str(row['verdict']), '')}]{row['verdict']}[/]",
            _fmt(row.get("device_min"), ".1f"),
        )
    return table


def session_table(sessions: pd.DataFrame, manifest: Manifest) -> Table:
    """One row per session, as derive wrote it (analysis.devicetime.session_summary)."""
    table = Table(title=f"Run {manifest.run_id}: plan {manifest.plan.name}", title_justify="left")
    for col in ("device", "planned", "ok", "failed", "failures by kind", "excluded", "settle wait median s",
                "state rose", "device min", "settle %", "session"):
        table.add_column(col)
    for row in sessions.to_dict("records"):
        table.add_row(
            str(row["device"]), _fmt(row["planned"], ".0f"), _fmt(row["ok"], ".0f"), _fmt(row["failed"], ".0f"),
            _words(row["failures_by_kind"]), _words(row["excluded_by_reason"]),
            _fmt(row["settle_wait_median_s"], ".0f"), _fmt(row["state_rose"], ".0f"), _fmt(row["total_min"], ".1f"),
            _fmt(row["settle_share"], ".0%"), str(row["stop"]),
        )
    return table


def _words(value: Any) -> str:
    """A free-text cell read back from CSV (empty reads as NaN)."""
    return "-" if value is None or (isinstance(value, float) and math.isnan(value)) or value == "" else str(value)


def class_table(pooled: pd.DataFrame) -> Table:
    """Pooled phones: one verdict per chip class and pair, with the class's heterogeneity."""
    table = Table(title="Class verdicts (phones of a class pooled; blocks nested in devices)", title_justify="left")
    for col in ("class", "phones", "comparison", "n", "ratio [CI]", "p", "verdict", "ratio by phone",
                "heterogeneity"):
        table.add_column(col, overflow="fold")
    for row in pooled.to_dict("records"):
        table.add_row(
            str(row["chip_class"]), str(row["devices"]), f"{row['candidate']} vs {row['baseline']}",
            f"{_fmt(row['n_candidate'], '.0f')}/{_fmt(row['n_baseline'], '.0f')}",
            f"{_fmt(row['ratio'], '.3f')} [{_fmt(row['ci_low'], '.3f')}, {_fmt(row['ci_high'], '.3f')}]",
            _fmt(row["p_value"], ".4f"), f"[{VERDICT_STYLE.get(str(row['verdict']), '')}]{row['verdict']}[/]",
            str(row["effect_by_device"]), str(row["heterogeneous"] or "none found"),
        )
    return table


def budget_note(spent: pd.DataFrame, stops: dict[str, str], verdicts: pd.DataFrame) -> list[str]:
    """What the plan's device-time budget allowed, for each device it stopped."""
    notes = []
    for row in spent.to_dict("records"):
        if stops.get(str(row["device"])) != "budget":
            continue
        mine = verdicts[verdicts["device"] == row["device"]]
        n = _fmt(mine[["n_baseline", "n_candidate"]].min().min() if len(mine) else 0, ".0f")
        mde = f"; smallest detectable effect {_fmt(mine['mde'].max(), '.1%')}" if len(mine) else ""
        notes.append(f"{row['device']}: the device-time budget ({row['budget_min']:g} min) stopped it after "
                     f"{row['total_min']:.1f} device-min with {n} launches per arm: the verdicts above are what "
                     f"it allowed{mde}")
    return notes


def devices_table(rows: list[Any]) -> Table:
    """`orch devices`: one row per device, with the fix a person must make when it is not healthy."""
    table = Table(title="Devices", title_justify="left")
    for col in ("device", "kind", "host", "health", "model", "chip", "OS", "harness", "thermal", "battery C",
                "fix"):
        # the health state is the word a person (or grep) looks for: narrow terminals wrap the rest
        table.add_column(col, no_wrap=col == "health", overflow="fold")
    for r in rows:
        i, t = r.info, r.telemetry
        ok = r.health.state == "ok"
        table.add_row(
            r.id, r.kind, r.host, f"[{'green' if ok else 'red'}]{r.health.state}[/]",
            i.model if i else "-", (i.chip_class or "-") if i else "-", i.os if i else "-",
            (i.harness_version or "none") if i else "-", (t.thermal_state or "n/a") if t else "-",
            _fmt(t.battery_c if t else None, ".1f"), r.health.fix or ("" if ok else (r.health.detail or "")),
        )
    return table


def gates_table(gates: pd.DataFrame) -> Table:
    """Token gates of a run's real trials: each arm against the numpy reference decoder."""
    table = Table(title="Token gates (vs the numpy reference; decode and prefill apart)", title_justify="left")
    for col in ("device", "arm", "runtime", "class", "trials", "sequences", "prefill", "decode", "first fork",
                "worst gap (sd)"):
        table.add_column(col)
    for r in gates.to_dict("records"):
        fork = "-" if pd.isna(r["first_divergence"]) else str(int(r["first_divergence"]))
        gap = "-" if not r["worst_margin"] or pd.isna(r["worst_margin"]) else (
            f"{float(r['worst_margin']):.3f} (tie ≤ {r['tie']})")
        note = f" ({r['error']})" if isinstance(r["error"], str) else ""
        table.add_row(str(r["device"]), str(r["arm"]), str(r["runtime"]), str(r["quant_class"]), str(r["trials"]),
                      str(r["distinct_sequences"]), str(r["prefill"]), str(r["decode"]) + note, fork, gap)
    return table


def size_words(n: int) -> str:
    return f"{n / 1e9:.2f} GB" if n >= 1e9 else f"{n / 1e6:.0f} MB"


def runtimes_table(rows: list[dict[str, Any]]) -> Table:
    """`orch runtimes list`: one row per host and runtime."""
    table = Table(title="Runtimes")
    for col in ("host", "runtime", "installed", "versions", "disk", "how"):
        table.add_column(col)
    for r in rows:
        versions = ", ".join(f"{k} {v}" for k, v in dict(r["versions"]).items())
        disk = size_words(int(str(r["disk_bytes"]))) if r["disk_bytes"] else "-"
        table.add_row(str(r["host"]), str(r["runtime"]), "yes" if r["installed"] else "no", versions or "-", disk,
                      str(r.get("install") or r["what"]))
    return table
