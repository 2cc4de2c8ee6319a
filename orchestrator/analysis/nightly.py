"""Nightly regression gate: tonight's candidate build against a pinned reference, per device and config.

A *config* is one nightly plan (its name). Each night every trial is appended to the history
dataset and the night's pre-committed comparison (candidate vs reference, the plan's decision rule)
to the nights dataset, both hive-partitioned parquet under ``results/history/``:

    history/trials/night=<night>/<run_id>.parquet    one row per trial
    history/nights/night=<night>/<run_id>.parquet    one row per device: ratio, one-sided p, CI, ...

The alarm rule (``Plan.nightly``, defaults from notes/statistics.md) reads the nights dataset; a
change-point detector over each series (candidate/reference ratio and absolute tok/s, per-night
medians from the trials dataset) is the second, slower signal.
"""

from __future__ import annotations

import contextlib
import re
import zlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from shlex import quote

import numpy as np
import pandas as pd

from orchestrator.analysis.audit import chip_class, probe_gb_s
from orchestrator.analysis.changepoint import detect_many
from orchestrator.config.plan import NightlyAlarm, Plan
from orchestrator.results import history as history_db
from orchestrator.results.history import STRING_COLUMNS as HISTORY_STRINGS
from orchestrator.results.records import Manifest

NIGHT = re.compile(r"^[0-9A-Za-z_.-]+$")
ROLES = ("reference", "candidate")
TRIAL_COLUMNS = [
    "run_id", "config", "device", "chip_class", "model", "runtime", "arm", "role", "build", "block", "seq", "status",
    "failure_kind", "decode_tok_s", "prefill_tok_s", "bytes_per_decode_token", "effective_gb_s", "thermal_before",
    "thermal_after", "state_rose", "settle_waited_s", "probe_gb_s", "wall_start",
]
SERIES_COLUMNS = ["run_id", "config", "device", "ratio", "p_one_sided_slower", "median_reference", "median_candidate"]
NIGHT_COLUMNS = [
    "run_id", "config", "device", "chip_class", "reference_build", "candidate_build", "n_reference", "n_candidate",
    "median_reference", "median_candidate", "ratio", "ci_low", "ci_high", "p_value", "p_one_sided_slower", "sigma",
    "mde", "verdict",
]


class NightlyInputError(ValueError):
    """Bad input for a nightly run (the CLI exits 2)."""


def check_plan(plan: Plan) -> Plan:
    """A nightly plan: exactly two arms (reference, candidate) of one runtime."""
    if len(plan.arms) != 2:
        raise NightlyInputError(
            f"plan {plan.name!r}: a nightly plan has exactly 2 arms (reference, candidate); it has {len(plan.arms)}"
        )
    if plan.arms[0].runtime != plan.arms[1].runtime:
        raise NightlyInputError(
            f"plan {plan.name!r}: both arms must run the same runtime (got {plan.arms[0].runtime!r} and "
            f"{plan.arms[1].runtime!r}): only the build differs"
        )
    return plan


def pin_builds(plan: Plan, reference: str, candidate: str) -> Plan:
    """The plan with its first arm pinned to the reference build and its second to the candidate."""
    ref, cand = check_plan(plan).arms
    arms = [ref.model_copy(update={"build": reference}), cand.model_copy(update={"build": candidate})]
    return plan.model_copy(update={"arms": arms})


def check_night(night: str) -> str:
    if not NIGHT.match(night):
        raise NightlyInputError(f"night {night!r}: use letters, digits, '.', '_' or '-' (e.g. 2026-11-29)")
    return night


def rule_of(plan: Plan) -> NightlyAlarm:
    return plan.nightly or NightlyAlarm()


# -- writing the history ---------------------------------------------------------------------------
def history_rows(trials: pd.DataFrame, manifest: Manifest) -> pd.DataFrame:
    """A run's trial rows in the history's shape (the arm's role, chip class, model, config)."""
    plan = manifest.plan
    roles = {plan.arms[0].name: "reference", plan.arms[1].name: "candidate"}
    devices = sorted(trials["device"].unique())
    chips = {d: chip_class(manifest, d, trials) for d in devices}
    probes = {d: probe_gb_s(manifest, d, trials) for d in devices}
    if "excluded" in trials.columns:  # an excluded trial's number informs no history query either
        trials = trials.assign(status=trials["status"].where(trials["excluded"].isna(), "excluded"))
    rows = trials.assign(
        config=plan.name, model=plan.model, role=trials["arm"].map(roles), chip_class=trials["device"].map(chips),
        probe_gb_s=trials["device"].map(lambda d: probes[d] if probes[d] is not None else np.nan),
    )
    return _typed(rows[TRIAL_COLUMNS])


def night_rows(verdicts: pd.DataFrame, manifest: Manifest, trials: pd.DataFrame | None = None) -> pd.DataFrame:
    """The night's comparisons (one per device), from the run's verdict table (chips from its trials')."""
    plan = manifest.plan
    ref, cand = plan.arms
    mine = verdicts[(verdicts["baseline"] == ref.name) & (verdicts["candidate"] == cand.name)]
    rows = mine.rename(columns={
        "n_baseline": "n_reference", "n_candidate": "n_candidate",
        "median_baseline": "median_reference", "median_candidate": "median_candidate",
    }).assign(
        run_id=manifest.run_id, config=plan.name,
        chip_class=mine["device"].map(lambda d: chip_class(manifest, d, trials)),
        reference_build=ref.build, candidate_build=cand.build,
    )
    return _typed(rows[NIGHT_COLUMNS])


def append_history(history: Path, night: str, trials: pd.DataFrame, nights: pd.DataFrame) -> None:
    """Add one run's rows under ``night=<night>/<run_id>.parquet`` (written to a temp name, then renamed)."""
    for kind, frame in (("trials", trials), ("nights", nights)):
        if not len(frame):
            continue
        run_id = str(frame["run_id"].iloc[0])
        part = history / kind / f"night={check_night(night)}"
        part.mkdir(parents=True, exist_ok=True)
        tmp = part / f".{run_id}.parquet.tmp"
        frame.to_parquet(tmp, index=False)
        tmp.replace(part / f"{run_id}.parquet")


STRING_COLUMNS = [c for c in HISTORY_STRINGS if c != "night"]
FLOAT_COLUMNS = ["decode_tok_s", "prefill_tok_s", "bytes_per_decode_token", "effective_gb_s", "settle_waited_s",
                 "probe_gb_s", "median_reference", "median_candidate", "ratio", "ci_low", "ci_high", "p_value",
                 "p_one_sided_slower", "sigma", "mde"]


def _typed(frame: pd.DataFrame) -> pd.DataFrame:
    """Fixed column types, so a column with no value tonight (a simulated device reports no bytes per
    token; every trial of a session failed) is not written as parquet's null type, which the other
    nights' files could not be read together with."""
    return frame.astype({c: ("string" if c in STRING_COLUMNS else "float64") for c in frame.columns
                         if c in STRING_COLUMNS or c in FLOAT_COLUMNS})


def compact_night(history: Path, night: str) -> None:
    """Merge a night's per-run files into one per dataset (reading 400 nights then opens 400 files, not
    thousands). Written to a temp name and renamed before the per-run files are removed.

    The newest file wins: a run appended again (resumed after an interruption) replaces its earlier
    trial rows, and a config run again the same night replaces its earlier comparison per device (run
    ids only order by the second they were made in)."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    for kind, keys in (("trials", ["run_id"]), ("nights", ["config", "device"])):
        part = history / kind / f"night={check_night(night)}"
        files = sorted(part.glob("*.parquet"), key=lambda f: (f.stat().st_mtime_ns, f.name))
        if len(files) < 2:
            continue
        # pc.unique returns a plain Array, whatever the input's chunking: the keys seen are a Python set.
        tables, seen = [], set[str]()
        for f in reversed(files):
            t = pq.read_table(f, partitioning=None)
            key = pc.binary_join_element_wise(*(pc.cast(t.column(k), pa.string()) for k in keys), "\x00")
            tables.append(t.filter(pc.invert(pc.is_in(key, value_set=pa.array(sorted(seen), pa.string())))))
            seen.update(pc.unique(key).to_pylist())
        table = pa.concat_tables(tables[::-1], promote_options="default")
        tmp = part / ".compact.parquet.tmp"
        pq.write_table(table, tmp)
        name = f"night-{len(files)}-{files[-1].stem}.parquet"
        tmp.replace(part / name)
        for f in files:
            if f.name != name:
                f.unlink()


def load_nights(history: Path) -> pd.DataFrame:
    """Every night's comparison; a night run twice for a device and config keeps its latest run (one row
    once the night is compacted; before, the greatest run id). Read with DuckDB."""
    return history_db.load_nights(history)


def load_history_trials(history: Path, columns: list[str] | None = None,
                        configs: list[str] | None = None) -> pd.DataFrame:
    """Trial rows of the history (strings categorical, nights ordered). Read with DuckDB."""
    return history_db.load_trials(history, columns, configs)


def _in(frame: pd.DataFrame, keys: set[tuple[str, str]]) -> pd.Series:
    """Rows whose (config, device) is in keys, vectorized (history frames run to millions of rows)."""
    mask = pd.Series(False, index=frame.index)
    by_config: dict[str, list[str]] = {}
    for c, d in keys:
        by_config.setdefault(c, []).append(d)
    for c, devices in by_config.items():
        mask |= (frame["config"] == c) & frame["device"].isin(devices)
    return mask


# -- the alarm rule ------------------------------------------------------------------------------------
def alarms(nights: pd.DataFrame, rules: dict[str, NightlyAlarm], *, reasons: bool = True) -> pd.DataFrame:
    """Per (config, device, night): status ``alarm`` / ``watch`` / ``ok`` and the reason (``reasons=False``:
    the reason is left empty, for callers that word only the rows they show).

    ``watch``: tonight meets the consecutive-night condition but the streak is not long enough yet.
    Nights without a comparison (no p-value) neither extend nor break a streak.
    """
    if not len(nights):
        return nights.assign(slowdown=[], streak=[], status=[], reason=[])
    default = NightlyAlarm()
    out = nights.sort_values(["config", "device", "night"], kind="stable").reset_index(drop=True)
    slow = 1 - out["ratio"].to_numpy(dtype=float)
    p = out["p_one_sided_slower"].to_numpy(dtype=float)
    configs = out["config"].astype("category")
    codes = configs.cat.codes.to_numpy()
    r = {f: np.array([getattr(rules.get(str(c), default), f) for c in configs.cat.categories], dtype=float)[codes]
         for f in NightlyAlarm.model_fields}
    valid = np.isfinite(p) & np.isfinite(slow)
    hit = valid & (p < r["consecutive_p"]) & (slow >= r["consecutive_slowdown"])
    single = valid & (p < r["single_p"]) & (slow >= r["single_slowdown"])
    # Streak of hits per series, skipping nights without data: a run-length count over the valid rows.
    series = out.groupby(["config", "device"], sort=False, observed=True).ngroup().to_numpy()
    streak = np.zeros(len(out), dtype=np.int64)
    sv = pd.Series(hit[valid].astype(np.int64))
    breaks = ((sv == 0) | pd.Series(series[valid]).ne(pd.Series(series[valid]).shift())).cumsum()
    streak[valid] = sv.groupby(breaks.to_numpy()).cumsum().to_numpy()
    alarm = single | (streak >= r["consecutive_nights"])
    status = np.where(alarm, "alarm", np.where(hit, "watch", np.where(valid, "ok", "no data")))
    out = out.assign(slowdown=slow, streak=streak, status=status, reason="")
    return with_reasons(out, rules) if reasons else out


def with_reasons(table: pd.DataFrame, rules: dict[str, NightlyAlarm]) -> pd.DataFrame:
    """The rows of an ``alarms`` table with their reasons worded."""
    default = NightlyAlarm()
    reason = [
        _reason(str(st), float(s), float(pp), int(k), rules.get(str(c), default))
        for st, s, pp, k, c in zip(table["status"], table["slowdown"], table["p_one_sided_slower"], table["streak"],
                                   table["config"], strict=True)
    ]
    return table.assign(reason=reason)


def _reason(status: str, slow: float, p: float, streak: int, rule: NightlyAlarm) -> str:
    if status == "no data":
        return "no comparison tonight"
    what = f"candidate {-slow:+.1%} vs reference, one-sided p(slower)={p:.4f}"
    if status == "alarm":
        if p < rule.single_p and slow >= rule.single_slowdown:
            return f"{what}: one night >= {rule.single_slowdown:.0%} with p < {rule.single_p:g}"
        return (f"{what}: {streak} nights in a row with p < {rule.consecutive_p:g} and "
                f">= {rule.consecutive_slowdown:.0%}")
    if status == "watch":
        return f"{what}: night {streak} of {rule.consecutive_nights} needed for an alarm"
    return what


# -- change points -------------------------------------------------------------------------------------
def night_medians(nights: pd.DataFrame) -> pd.DataFrame:
    """Per (config, device, night): each role's median decode tok/s and their ratio, from the nights
    dataset (computed from the trial rows when each night ran: the detector never rescans them)."""
    out = nights[["config", "device", "night", "median_reference", "median_candidate"]].rename(
        columns={"median_reference": "reference", "median_candidate": "candidate"})
    return out.assign(ratio=out["candidate"] / out["reference"]).sort_values(["config", "device", "night"])


def changepoints(medians: pd.DataFrame, *, alpha: float = 0.01, min_size: int = 3) -> pd.DataFrame:
    """Change points of each series: the log ratio, and the candidate's log tok/s. One row per point."""
    rows = []
    series = []  # (config, device, signal, row positions, log values), finite values only
    m = medians.sort_values(["config", "device", "night"], kind="stable")
    keys = m.groupby(["config", "device"], sort=False, observed=True).ngroup().to_numpy()
    starts = np.flatnonzero(np.r_[True, keys[1:] != keys[:-1]]) if len(keys) else np.array([], dtype=int)
    configs, devices = m["config"].iloc[starts].astype(str), m["device"].iloc[starts].astype(str)
    logs = {"ratio": np.log(m["ratio"].to_numpy(dtype=float)),
            "candidate tok/s": np.log(m["candidate"].to_numpy(dtype=float))}
    ends = [*starts[1:], len(keys)] if len(keys) else []
    for lo, hi, config, device in zip(starts, ends, configs, devices, strict=True):
        for signal, values in logs.items():
            v = values[lo:hi]
            ok = np.flatnonzero(np.isfinite(v))
            series.append((config, device, signal, lo + ok, v[ok]))
    found = detect_many([v for *_, v in series], alpha=alpha, min_size=min_size)
    nights = m["night"]
    for (config, device, signal, where, v), points in zip(series, found, strict=True):
        for k in points:
            before, after = np.median(v[:k]), np.median(v[k:])
            rows.append({"config": config, "device": device, "signal": signal, "night": nights.iloc[where[k]],
                         "shift": float(np.exp(after - before) - 1)})
    return pd.DataFrame(rows, columns=["config", "device", "signal", "night", "shift"])


# -- what a CI reads -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class NightSummary:
    night: str
    tonight: pd.DataFrame  # alarm rows for tonight (one per device x config)
    changes: pd.DataFrame  # change points in the whole history of tonight's series
    missing: list[tuple[str, str, str]]  # (config, device, why) planned tonight without a comparison
    unfinished: str | None = None  # why the night has no verdict (yet): every planned pair is then missing

    @property
    def alarmed(self) -> bool:
        return bool((self.tonight["status"] == "alarm").any())


def unfinished(night: str, planned: Iterable[tuple[str, str]], why: str) -> NightSummary:
    """What the reports say while a night runs, and after it failed: every planned pair is an error
    (a CI reading them never sees an earlier night's result as tonight's)."""
    pairs = list(dict.fromkeys(planned))
    return NightSummary(night=night, tonight=pd.DataFrame(columns=["config", "device", "status"]),
                        changes=pd.DataFrame(columns=["config", "device", "signal", "night", "shift"]),
                        missing=[(c, d, why) for c, d in pairs], unfinished=why)


def summarize(history: Path, night: str, planned: Iterable[tuple[str, str]], rules: dict[str, NightlyAlarm],
              why_missing: dict[tuple[str, str], str] | None = None) -> NightSummary:
    """Tonight's verdict per planned (config, device), from the history (tonight already appended)."""
    planned = list(dict.fromkeys(planned))  # a config resumed twice, or run twice tonight, is one series
    why_missing = why_missing or {}
    keys = set(planned)
    # The whole series, narrow (the rule and the change points read a few columns of every night) ...
    series = history_db.load_nights(history, configs=sorted({c for c, _ in keys}), columns=SERIES_COLUMNS,
                                    strings="category", ordered=False)
    table = alarms(series, rules, reasons=False)
    in_series = table[_in(table, keys)] if len(table) else table
    # ... and tonight's rows whole, worded.
    rule_cols = ["config", "device", "slowdown", "streak", "status"]
    mine = in_series[in_series["night"] == night][rule_cols].astype({"config": object, "device": object})
    full = history_db.load_nights(history, configs=sorted({c for c, _ in keys}), night=night)
    if len(mine):
        tonight = full.drop(columns=[c for c in ("slowdown", "streak", "status", "reason") if c in full.columns])
        tonight = tonight.merge(mine, on=["config", "device"], how="inner")
        tonight = with_reasons(tonight.sort_values(["config", "device"], kind="stable").reset_index(drop=True), rules)
    else:
        tonight = pd.DataFrame(columns=[*NIGHT_COLUMNS, "night", "slowdown", "streak", "status", "reason"])
    if len(tonight):  # a comparison row without a p-value: say why the session gave none
        tonight["reason"] = [
            f"{r} ({why_missing[(c, d)]})" if st == "no data" and (c, d) in why_missing else r
            for r, st, c, d in zip(tonight["reason"], tonight["status"], tonight["config"], tonight["device"],
                                   strict=True)
        ]
    have = set(zip(tonight["config"], tonight["device"], strict=True))
    missing = [(c, d, why_missing.get((c, d), "no comparison")) for c, d in planned if (c, d) not in have]
    changes = changepoints(night_medians(in_series))
    return NightSummary(night=night, tonight=tonight, changes=changes, missing=missing)


def junit_xml(summary: NightSummary) -> str:
    """One test case per device x config: failure on alarm, error when the night has no comparison
    (a session without enough trials, or a night that did not finish)."""
    import xml.etree.ElementTree as ET

    cases = []
    for row in summary.tonight.to_dict("records"):
        case = ET.Element("testcase", classname=f"nightly.{row['config']}", name=str(row["device"]), time="0")
        detail = (f"{row['candidate_build']} vs {row['reference_build']} on {row['device']} ({row['chip_class']}): "
                  f"ratio {row['ratio']:.4f} [{row['ci_low']:.4f}, {row['ci_high']:.4f}], "
                  f"n {row['n_candidate']}/{row['n_reference']}; {row['reason']}")
        if row["status"] == "alarm":
            ET.SubElement(case, "failure", message=f"tok/s regression: {row['reason']}", type="alarm").text = detail
        elif row["status"] == "no data":
            ET.SubElement(case, "error", message=str(row["reason"]), type="no_data").text = detail
        ET.SubElement(case, "system-out").text = f"{row['status']}: {detail}"
        cases.append(case)
    for config, device, why in summary.missing:
        case = ET.Element("testcase", classname=f"nightly.{config}", name=device, time="0")
        kind = "unfinished" if summary.unfinished is not None else "no_data"
        ET.SubElement(case, "error", message=why.splitlines()[0] if why else kind, type=kind).text = why
        cases.append(case)
    failures = sum(1 for c in cases if c.find("failure") is not None)
    errors = sum(1 for c in cases if c.find("error") is not None)
    suite = ET.Element("testsuite", name=f"orch nightly {summary.night}", tests=str(len(cases)),
                       failures=str(failures), errors=str(errors), skipped="0", time="0")
    suite.extend(cases)
    root = ET.Element("testsuites", tests=str(len(cases)), failures=str(failures), errors=str(errors))
    root.append(suite)
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def markdown(summary: NightSummary) -> str:
    if summary.unfinished is not None:
        return (f"# Nightly {summary.night}: DID NOT FINISH\n\n{summary.unfinished}\n\n"
                + "".join(f"- {c} / {d}: no verdict\n" for c, d, _ in summary.missing))
    lines = [f"# Nightly {summary.night}: {'ALARM' if summary.alarmed else 'no alarm'}", ""]
    lines += ["| config | device | chip | candidate vs reference | ratio [CI] | one-sided p | streak | status |",
              "|---|---|---|---|---|---|---|---|"]
    for r in summary.tonight.to_dict("records"):
        lines.append(
            f"| {r['config']} | {r['device']} | {r['chip_class']} | {r['candidate_build']} vs {r['reference_build']} "
            f"| {r['ratio']:.3f} [{r['ci_low']:.3f}, {r['ci_high']:.3f}] | {r['p_one_sided_slower']:.4f} "
            f"| {r['streak']} | **{r['status']}** |"
        )
    for config, device, why in summary.missing:
        lines.append(f"| {config} | {device} | | | | | | **no data**: {why} |")
    lines.append("")
    for r in summary.tonight[summary.tonight["status"] != "ok"].to_dict("records"):
        lines.append(f"- {r['config']} / {r['device']}: {r['status']}: {r['reason']}")
    lines += ["", "## Change points (the slower signal, whole history)", ""]
    if len(summary.changes):
        lines += ["| config | device | signal | from night | shift |", "|---|---|---|---|---|"]
        lines += [f"| {r['config']} | {r['device']} | {r['signal']} | {r['night']} | {r['shift']:+.1%} |"
                  for r in summary.changes.to_dict("records")]
    else:
        lines.append("none detected")
    return "\n".join(lines) + "\n"


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
    from orchestrator.results.store import write_atomic

    for path, text in ((junit, junit_xml(summary)), (summary_md, markdown(summary) + detail)):
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, text.encode())


async def run_night(
    fleet_path: Path | None, plan_paths: list[Path], *, reference: str | None, candidate: str | None, night: str,
    results: Path, history: Path, junit: Path | None = None, summary_md: Path | None = None,
    resume: list[str] | None = None, on_start: Callable[[list[str]], None] = lambda run_ids: None,
) -> NightlyOutcome:
    """Run each nightly plan (reference and candidate builds interleaved per device, through the run
    machinery: manifest, journal, settle gate), append to the history, apply the rule, write the reports.
    With ``resume`` (run ids of an interrupted night): finish those runs instead, then the same.
    ``on_start`` hears the night's run ids as soon as their directories exist, before any trial (the
    ids a ``resume_command`` needs after a kill).

    The reports are replaced before the first trial by an "unfinished" version (every planned device x
    config an error), and whole at the end; a night that fails or is stopped leaves the unfinished one,
    never an earlier night's. Raises ``ConfigError`` / ``NightlyInputError`` / ``RunNotFound`` on bad
    input, before any trial and before anything is written.
    """
    from orchestrator import app as core
    from orchestrator.results.store import RunDir, find_run, stops

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
    on_start([r.run_id for r in runs])
    manifests = [r.manifest() for r in runs]
    planned = [(m.plan.name, s.device) for m in manifests for s in m.sessions]
    again = resume_command([r.run_id for r in runs], night=night, results=results, history=history, junit=junit,
                           summary_md=summary_md)
    out_dir = results / "nightly" / night
    junit = junit or out_dir / "junit.xml"
    summary_md = summary_md or out_dir / "summary.md"
    write_reports(unfinished(night, planned, f"night {night} is running (runs {', '.join(r.run_id for r in runs)}); "
                                             f"if it was stopped, finish it with: {again}"), junit, summary_md)
    try:
        why: dict[tuple[str, str], str] = {}
        for run in runs:
            outcome = await core.execute(run)
            append_history(history, night, history_rows(outcome.trials, outcome.manifest),
                           night_rows(outcome.verdicts, outcome.manifest, outcome.trials))
            ended = {d: s.reason for d, s in stops(run.records()).items()}
            for s in outcome.manifest.sessions:
                why[(outcome.manifest.plan.name, s.device)] = (
                    f"session {ended.get(s.device, 'interrupted')} (run {run.run_id})")
        compact_night(history, night)
        summary = summarize(history, night, planned, {m.plan.name: rule_of(m.plan) for m in manifests}, why)
    except BaseException as exc:
        import asyncio
        import traceback

        stopped = isinstance(exc, KeyboardInterrupt | asyncio.CancelledError)
        what = "was interrupted" if stopped else f"failed: {type(exc).__name__}: {str(exc).strip() or '-'}"
        detail = "" if stopped else "\n```\n" + "".join(traceback.format_exception(exc)) + "```\n"
        with contextlib.suppress(Exception):  # never hide the failure behind one writing its report
            write_reports(unfinished(night, planned, f"night {night} {what.splitlines()[0]}; finish it with: {again}"),
                          junit, summary_md, detail)
        raise
    write_reports(summary, junit, summary_md)
    return NightlyOutcome(summary=summary, run_ids=[r.run_id for r in runs], junit_path=junit,
                          summary_path=summary_md)
