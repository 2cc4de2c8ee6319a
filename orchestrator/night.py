"""Running a night: each nightly plan through the run machinery (manifest, journal, settle gate), its
rows appended to the history, the alarm rule applied, the reports written (JUnit XML, markdown).

The rule and change points are ``analysis/nightly.py``, the history's storage
``results/history_store.py``, the rendering ``report/nightly.py``.
"""

from __future__ import annotations

import asyncio
import contextlib
import traceback
import zlib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from shlex import quote

import pandas as pd

from orchestrator import core
from orchestrator.analysis.confirm import (
    MIN_BUDGET_LEFT,
    Cap,
    after,
    budget_left,
    extends,
    extension_plan,
    helpers_of,
    night_verdict,
    plan_extensions,
    suspicious,
    targets_of,
)
from orchestrator.analysis.nightly import (
    NightSummary,
    check_plan,
    history_rows,
    night_rows,
    pin_builds,
    rule_of,
    summary_of,
    unfinished,
)
from orchestrator.analysis.prerun import night_caps
from orchestrator.config.plan import NightlyAlarm, Plan
from orchestrator.report.nightly import junit_xml, markdown
from orchestrator.results import history as history_db
from orchestrator.results.history_rollup import refresh_rollups
from orchestrator.results.history_store import (
    SERIES_COLUMNS,
    NightlyInputError,
    append_history,
    check_night,
    compact_night,
)
from orchestrator.results.store import RunDir, find_run, read_registry, write_atomic
from orchestrator.schedule.pool import fleet_chips

__all__ = ["NightlyOutcome", "resume_command", "run_night", "summarize", "write_reports"]


def summarize(history: Path, night: str, planned: Iterable[tuple[str, str]], rules: dict[str, NightlyAlarm],
              why_missing: dict[tuple[str, str], str] | None = None) -> NightSummary:
    """Tonight's verdict per planned (config, device), from the history (tonight already appended)."""
    planned = list(dict.fromkeys(planned))
    configs = sorted({c for c, _ in planned})
    # The whole series, narrow (the rule and the change points read a few columns of every night) ...
    series = history_db.load_nights(history, configs=configs, columns=SERIES_COLUMNS, strings="category",
                                    ordered=False)
    # ... and tonight's rows whole.
    full = history_db.load_nights(history, configs=configs, night=night)
    return summary_of(series, full, night, planned, rules, why_missing)


@dataclass(frozen=True)
class NightlyOutcome:
    summary: NightSummary
    run_ids: list[str]
    junit_path: Path
    summary_path: Path


def resume_command(run_ids: Iterable[str], *, night: str, results: Path, history: Path | None = None,
                   junit: Path | None = None, summary_md: Path | None = None) -> str:
    """The command that finishes a night: every run of it (so the reports cover every config again; a
    run whose sessions all ended resumes without a trial), on the same night, results, history and
    report paths."""
    parts = ["orch nightly", *(f"--resume {r}" for r in run_ids), f"--night {night}",
             f"--results {quote(str(results))}"]
    if history is not None and history != results / "history":
        parts.append(f"--history {quote(str(history))}")
    parts += [f"--junit {quote(str(junit))}"] if junit is not None else []
    parts += [f"--summary {quote(str(summary_md))}"] if summary_md is not None else []
    return " ".join(parts)


def write_reports(summary: NightSummary, junit: Path, summary_md: Path, detail: str = "") -> None:
    """junit.xml and summary.md, each replaced whole (never half written); ``detail`` goes under the summary."""
    for path, text in ((junit, junit_xml(summary)), (summary_md, markdown(summary) + detail)):
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, text.encode())


async def run_night(
    fleet_path: Path | None, plan_paths: list[Path], *, reference: str | None, candidate: str | None, night: str,
    results: Path, history: Path, junit: Path | None = None, summary_md: Path | None = None,
    resume: list[str] | None = None, on_start: Callable[[list[str]], None] = lambda run_ids: None,
    say: Callable[[str], None] = lambda line: None, now: Callable[[], datetime] = lambda: datetime.now(UTC),
) -> NightlyOutcome:
    """Run each nightly plan (reference and candidate builds interleaved per device, through the run
    machinery: manifest, journal, settle gate), append to the history, apply the rule, write the reports.
    A suspicious comparison is confirmed the same night by an extension run (``_config_night``), whose id
    ``on_start`` hears too (with every id so far) before its first trial. With ``resume`` (run ids of an
    interrupted night): finish those runs instead, then the same.
    ``on_start`` hears the night's run ids as soon as their directories exist, before any trial (the
    ids a ``resume_command`` needs after a kill). ``say`` hears, before the first trial, each device's
    confirmation cap and the noise registry entry it is sized from (or that there is none), with the registry's
    flag when the device's noise jumped; the same lines close summary.md.

    The reports are replaced before the first trial by an "unfinished" version (every planned device x
    config an error), and whole at the end; a night that fails or is stopped leaves the unfinished one,
    never an earlier night's. Raises ``ConfigError`` / ``NightlyInputError`` / ``RunNotFound`` on bad
    input, before any trial and before anything is written.
    """
    check_night(night)
    runs: list[RunDir] = []
    if resume:
        if fleet_path or plan_paths or reference or candidate:
            raise NightlyInputError("--resume takes fleet, plans and builds from the runs' manifests: drop the rest")
        runs = [find_run(results, r) for r in dict.fromkeys(resume)]
        for run in runs:
            check_plan(run.manifest().plan)
    else:
        if fleet_path is None or not plan_paths or reference is None or candidate is None:
            raise NightlyInputError("orch nightly needs --fleet, --plan, --reference and --candidate "
                                    "(or --resume RUN_ID)")
        loaded = [core.load_inputs(fleet_path, p) for p in plan_paths]
        fleet = loaded[0][0]
        pinned = [pin_builds(plan, reference, candidate) for _, plan in loaded]
        names = [p.name for p in pinned]
        if len(set(names)) != len(names):
            raise NightlyInputError(f"nightly plans need distinct names (configs): {', '.join(names)}")
        # Each night its own seed (its order, its coin flips, a simulated lab's noise), reproducibly.
        seed_of = {p.name: p.seed + zlib.crc32(night.encode()) for p in pinned}
        runs = [core.start_run(core.new_manifest(fleet, plan, fleet_path, path, seed_of[plan.name]), results)
                for plan, path in zip(pinned, plan_paths, strict=True)]
    ids = [r.run_id for r in runs]
    manifests = [r.manifest() for r in runs]
    firsts = [(r, m) for r, m in zip(runs, manifests, strict=True) if extends(m.plan) is None]
    planned = [(m.plan.name, s.device) for _, m in firsts for s in m.sessions]
    out_dir = results / "nightly" / night
    junit_path = junit or out_dir / "junit.xml"
    md_path = summary_md or out_dir / "summary.md"
    again = [""]

    def announce(new: list[str]) -> None:
        """The night's runs so far to ``on_start``, and the reports say how to finish it (before any trial)."""
        ids.extend(i for i in new if i not in ids)
        on_start(list(ids))
        again[0] = resume_command(ids, night=night, results=results, history=history, junit=junit,
                                  summary_md=summary_md)
        write_reports(unfinished(night, planned, f"night {night} is running (runs {', '.join(ids)}); "
                                                 f"if it was stopped, finish it with: {again[0]}"), junit_path, md_path)

    announce([])
    registry = read_registry(results)
    caps: dict[str, dict[str, Cap]] = {}
    noise_lines: list[str] = []
    for _, m in firsts:
        caps[m.run_id], lines = night_caps(m.plan, rule_of(m.plan), [s.device for s in m.sessions], registry, now(),
                                           fleet_chips(m.fleet))
        noise_lines += [f"{m.plan.name}: {line}" for line in lines]
    for line in noise_lines:
        say(line)
    try:
        why: dict[tuple[str, str], str] = {}
        log = NightLog()
        for run, _ in firsts:
            why |= await _config_night(run, night, results, history, announce, caps[run.run_id], log)
        compact_night(history, night)
        refresh_rollups(history)  # nights from before rank's rollups get theirs once
        summary = summarize(history, night, planned, {m.plan.name: rule_of(m.plan) for _, m in firsts}, why)
    except BaseException as exc:
        stopped = isinstance(exc, KeyboardInterrupt | asyncio.CancelledError)
        what = "was interrupted" if stopped else f"failed: {type(exc).__name__}: {str(exc).strip() or '-'}"
        detail = "" if stopped else "\n```\n" + "".join(traceback.format_exception(exc)) + "```\n"
        with contextlib.suppress(Exception):  # never hide the failure behind one writing its report
            write_reports(unfinished(night, planned, f"night {night} {what.splitlines()[0]}; finish it with: "
                                                     f"{again[0]}"), junit_path, md_path, detail)
        raise
    write_reports(summary, junit_path, md_path, _section("Same-night confirmations", log.confirmed)
                  + _section("Device time tonight (settle, launches, prepare)", log.device_time())
                  + _section("Launch noise (the noise registry) and confirmation caps", noise_lines))
    return NightlyOutcome(summary=summary, run_ids=ids, junit_path=junit_path, summary_path=md_path)


def extensions_of(results: Path, run: RunDir, config: str) -> list[RunDir]:
    """The same-night confirmations already started for ``run`` (an interrupted night's), oldest first."""
    found = []
    since = run.run_id[:15]  # run ids begin with the second they were made: a confirmation's is no earlier
    for path in sorted(results.glob(f"*-{config}-*/manifest.json")):
        if path.parent.name[:15] < since or path.parent.name == run.run_id:
            continue
        other = RunDir(path.parent)
        with contextlib.suppress(Exception):  # a run that cannot be read is no confirmation of this one
            if extends(other.manifest().plan) == run.run_id:
                found.append(other)
    return found


@dataclass
class NightLog:
    """What summary.md says of the night beyond the verdicts: each confirmation, each phone's device time."""

    confirmed: list[str] = field(default_factory=list)
    minutes: dict[str, dict[str, float]] = field(default_factory=dict)  # device -> what it ran -> device minutes

    def spend(self, what: str, used: dict[str, float]) -> None:
        for device, m in used.items():
            mine = self.minutes.setdefault(device, {})
            mine[what] = mine.get(what, 0.0) + m

    def device_time(self) -> list[str]:
        """A line per phone, busiest first: its device-hours tonight, and what they went to."""
        busiest = sorted(self.minutes.items(), key=lambda kv: -sum(kv[1].values()))
        return [f"{d}: {sum(m.values()) / 60:.1f} device-hours: "
                + ", ".join(f"{what} {v / 60:.1f} h" for what, v in m.items()) for d, m in busiest]


def _section(title: str, lines: list[str]) -> str:
    """One of summary.md's closing sections (none without lines)."""
    if not lines:
        return ""
    return f"\n## {title}\n\n" + "".join(f"- {x}\n" for x in lines)


async def _config_night(run: RunDir, night: str, results: Path, history: Path,
                        announce: Callable[[list[str]], None], caps: dict[str, Cap],
                        log: NightLog) -> dict[tuple[str, str], str]:
    """One config's night: its run, appended to the history; a suspicious comparison extended (by the
    extension runs an interrupted night already started, else new ones, ``plan_extensions``: on the same phone
    up to its cap in ``caps``, or shared with its siblings of the class) and decided on every launch of the
    night, that row appended after the first (the history keeps a night's newest row per device). ``log``
    gets a line per confirmed device (what was extended where, what the night was decided on) and each
    phone's device minutes."""
    outcome = await core.execute(run)
    manifest = outcome.manifest
    plan, rule = manifest.plan, rule_of(manifest.plan)
    rows = night_rows(outcome.verdicts, manifest, outcome.trials)
    append_history(history, night, history_rows(outcome.trials, manifest), rows)
    why = _ended(run.run_id, plan.name, outcome.stops)
    used = _used_minutes(outcome.sessions)
    log.spend(plan.name, used)
    extensions = extensions_of(results, run, plan.name)
    chips = fleet_chips(manifest.fleet)
    if not extensions:
        planned = plan_extensions(plan, rule, suspicious(rows, rule, caps), caps, chips,
                                  [s.device for s in manifest.sessions])
        for k, one in enumerate(planned):
            left = budget_left(plan, one, used)
            if left is not None and left < MIN_BUDGET_LEFT:
                log.confirmed.extend(f"{plan.name}: {d}: suspicious, not extended: its first run used its "
                                     f"budget_minutes ({plan.budget_minutes:g}); the night is decided on the first run"
                                     for d in one.targets)
                continue
            more = extension_plan(plan, one, seed=manifest.seed + 1 + k, of=run.run_id, minutes_left=left)
            extensions.append(core.start_run(core.new_manifest(
                manifest.fleet, more, Path(manifest.fleet_file), Path(manifest.plan_file)), results))
    if extensions:
        announce([e.run_id for e in extensions])
    first = rows.set_index("device")
    for ext in extensions:
        more_out = await core.execute(ext)
        devices = [s.device for s in more_out.manifest.sessions]
        later = after(outcome.trials, more_out.trials)
        spent = _used_minutes(more_out.sessions)
        budget = [d for d, why in more_out.stops.items() if why == "budget"]
        decided = []
        for target in targets_of(more_out.manifest.plan):
            helpers = helpers_of(rule, target, devices, chips)
            table, tonight = night_verdict(outcome.trials, later, target, helpers, plan, seed=manifest.seed)
            decided.append(night_rows(table, manifest, tonight).assign(run_id=ext.run_id))
            took = max((spent.get(d, 0.0) for d in helpers), default=0.0)
            log.confirmed.append(_confirmed(plan.name, target, first, decided[-1], helpers, ext.run_id,
                                            more_out.manifest.plan, [d for d in helpers if d in budget], took))
        log.spend(f"{plan.name}'s confirmation", spent)
        append_history(history, night, history_rows(later, manifest), pd.concat(decided, ignore_index=True))
        why |= _ended(ext.run_id, plan.name, more_out.stops)
    return why


def _used_minutes(sessions: pd.DataFrame) -> dict[str, float]:
    """Each session's device minutes (the run's session table)."""
    if not len(sessions):
        return {}
    return {str(d): float(m) for d, m in zip(sessions["device"], sessions["total_min"].fillna(0.0), strict=True)}


def _confirmed(config: str, target: str, first: pd.DataFrame, row: pd.DataFrame, helpers: list[str], run_id: str,
               more: Plan, spent: list[str], took: float) -> str:
    """A confirmed device's line: its first run's suspicion, where it was extended (and which phones' budget
    stopped it short; ``took``: the device minutes of its busiest phone's extension), what the night rests on."""
    was = first.loc[target] if target in first.index else None
    before = (f"p(slower)={was['p_one_sided_slower']:.2g} on {was['n_candidate']:.0f} launches per arm"
              if was is not None else "its first run")
    r = row.iloc[0]
    over = (f" over {len(helpers)} phones of its class ({', '.join(helpers)}), stratified by phone"
            if len(helpers) > 1 else "")
    short = (f" ({', '.join(spent)} stopped at the budget_minutes left, {more.budget_minutes:.0f} min, before all "
             "its blocks)" if spent and more.budget_minutes is not None else "")
    return (f"{config}: {target}: suspicious ({before}); extended by run {run_id}, {more.blocks} blocks on "
            f"{', '.join(helpers)}{short}, {took:.0f} device-minutes on the busiest; decided on "
            f"{r['n_candidate']:.0f} launches per arm{over}: ratio {r['ratio']:.3f}, "
            f"p(slower)={r['p_one_sided_slower']:.2g}")


def _ended(run_id: str, config: str, stops: Mapping[str, str]) -> dict[tuple[str, str], str]:
    """Why each session of a run ended (its outcome's ``stops``: every session, `interrupted` when it has no end)."""
    return {(config, d): f"session {why} (run {run_id})" for d, why in stops.items()}
