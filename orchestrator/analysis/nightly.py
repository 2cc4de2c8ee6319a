"""Nightly regression gate, the pure part: tonight's candidate build against a pinned reference, per
device and config (a *config* is one nightly plan, by its name).

The history's rows are shaped here (``history_rows``, ``night_rows``; stored by
``results/history_store.py``); the alarm rule (``Plan.nightly``, defaults from notes/statistics.md)
reads the nights dataset; a change-point detector over each series (candidate/reference ratio and
absolute tok/s, per-night medians) is the second, slower signal. No I/O: running a night is
``orchestrator/night.py``, rendering it ``report/nightly.py``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
import pandas as pd

from orchestrator.analysis.audit import chip_class, probe_gb_s
from orchestrator.analysis.changepoint import detect_many
from orchestrator.config.plan import NightlyAlarm, Plan
from orchestrator.results.history_store import NIGHT_COLUMNS, TRIAL_COLUMNS, NightlyInputError, typed
from orchestrator.results.records import Manifest

ROLES = ("reference", "candidate")


def check_plan(plan: Plan) -> Plan:
    """A nightly plan: exactly two arms (reference, candidate) of one runtime, and an estimator that can
    reach the confirmation's p."""
    if len(plan.arms) != 2:
        raise NightlyInputError(
            f"plan {plan.name!r}: a nightly plan has exactly 2 arms (reference, candidate); it has {len(plan.arms)}"
        )
    if plan.arms[0].runtime != plan.arms[1].runtime:
        raise NightlyInputError(
            f"plan {plan.name!r}: both arms must run the same runtime (got {plan.arms[0].runtime!r} and "
            f"{plan.arms[1].runtime!r}): only the build differs"
        )
    confirm = rule_of(plan).confirm
    rule = plan.decision
    if confirm is not None and rule.estimator == "median" and 1 / (1 + rule.resamples) >= confirm.p:
        need = int(1 / confirm.p)
        raise NightlyInputError(
            f"plan {plan.name!r}: nightly.confirm.p = {confirm.p:g} is out of reach of estimator median with "
            f"{rule.resamples} resamples (its smallest p is 1/(1 + resamples)): set decision.resamples >= {need}, "
            "estimator hodges_lehmann, or a larger nightly.confirm.p"
        )
    return plan


def pin_builds(plan: Plan, reference: str, candidate: str) -> Plan:
    """The plan with its first arm pinned to the reference build and its second to the candidate."""
    ref, cand = check_plan(plan).arms
    arms = [ref.model_copy(update={"build": reference}), cand.model_copy(update={"build": candidate})]
    return plan.model_copy(update={"arms": arms})


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
    return typed(rows[TRIAL_COLUMNS])


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
    return typed(rows[NIGHT_COLUMNS])


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
def _rule_arrays(configs: pd.Series, rules: dict[str, NightlyAlarm]) -> dict[str, np.ndarray]:
    """Each row's rule, field by field (the confirmation's as ``confirm_*``; no confirmation: never fires)."""
    default = NightlyAlarm()
    cats = configs.astype("category")
    codes = cats.cat.codes.to_numpy()
    per = [rules.get(str(c), default) for c in cats.cat.categories]
    fields = {f: [float(getattr(rule, f)) for rule in per] for f in NightlyAlarm.model_fields if f != "confirm"}
    fields["confirm_p"] = [rule.confirm.p if rule.confirm else 0.0 for rule in per]
    fields["confirm_slowdown"] = [rule.confirm.slowdown if rule.confirm else np.inf for rule in per]
    return {f: np.array(v, dtype=float)[codes] for f, v in fields.items()}


def alarms(nights: pd.DataFrame, rules: dict[str, NightlyAlarm], *, reasons: bool = True) -> pd.DataFrame:
    """Per (config, device, night): status ``alarm`` / ``watch`` / ``ok`` and the reason (``reasons=False``:
    the reason is left empty, for callers that word only the rows they show).

    ``watch``: tonight meets the consecutive-night condition but the streak is not long enough yet.
    Nights without a comparison (no p-value) neither extend nor break a streak.
    ``since``: the night the alarm was raised (a latched alarm stays raised, with its first night, until a
    night shows the configuration recovered; a night without data keeps it raised); empty when none is.
    """
    if not len(nights):
        return nights.assign(slowdown=[], streak=[], status=[], since=[], reason=[])
    out = nights.sort_values(["config", "device", "night"], kind="stable").reset_index(drop=True)
    slow = 1 - out["ratio"].to_numpy(dtype=float)
    p = out["p_one_sided_slower"].to_numpy(dtype=float)
    r = _rule_arrays(out["config"], rules)
    valid = np.isfinite(p) & np.isfinite(slow)
    hit = valid & (p < r["consecutive_p"]) & (slow >= r["consecutive_slowdown"])
    single = valid & (p < r["single_p"]) & (slow >= r["single_slowdown"])
    confirmed = valid & (p < r["confirm_p"]) & (slow >= r["confirm_slowdown"])
    # Streak of hits per series, skipping nights without data: a run-length count over the valid rows.
    series = out.groupby(["config", "device"], sort=False, observed=True).ngroup().to_numpy()
    streak = np.zeros(len(out), dtype=np.int64)
    sv = pd.Series(hit[valid].astype(np.int64))
    breaks = ((sv == 0) | pd.Series(series[valid]).ne(pd.Series(series[valid]).shift())).cumsum()
    streak[valid] = sv.groupby(breaks.to_numpy()).cumsum().to_numpy()
    fired = single | confirmed | (streak >= r["consecutive_nights"])
    since = _latched(series, out["night"].astype(str).to_numpy(), fired, valid, p, r["latch"] > 0, r["recovered_p"])
    alarm = fired | (valid & (since != ""))
    status = np.where(alarm, "alarm", np.where(hit, "watch", np.where(valid, "ok", "no data")))
    out = out.assign(slowdown=slow, streak=streak, status=status, since=since, reason="")
    return with_reasons(out, rules) if reasons else out


def _latched(series: np.ndarray, night: np.ndarray, fired: np.ndarray, valid: np.ndarray, p: np.ndarray,
             latch: np.ndarray, recovered_p: np.ndarray) -> np.ndarray:
    """Per row (sorted by series, then night): the night its alarm was raised, or "" (none raised).

    A row that clears (a comparison that did not fire, and either the rule does not latch or the night
    shows recovery) starts a new segment; within a segment a row is raised since its first firing row."""
    n = len(series)
    clear = valid & ~fired & (~latch | (p >= recovered_p))
    start = np.r_[True, series[1:] != series[:-1]] if n else np.zeros(0, dtype=bool)
    first = pd.Series(np.where(fired, np.arange(n), n)).groupby(np.cumsum(clear | start)).cummin().to_numpy()
    nights = np.append(night.astype(object), "")  # index n: no firing row
    return nights[first]


def with_reasons(table: pd.DataFrame, rules: dict[str, NightlyAlarm]) -> pd.DataFrame:
    """The rows of an ``alarms`` table with their reasons worded."""
    default = NightlyAlarm()
    n = table["n_candidate"] if "n_candidate" in table.columns else pd.Series(np.nan, index=table.index)
    reason = [
        _reason(str(st), float(s), float(pp), int(k), rules.get(str(c), default), str(since), float(nc))
        for st, s, pp, k, c, since, nc in zip(table["status"], table["slowdown"], table["p_one_sided_slower"],
                                              table["streak"], table["config"], table["since"], n, strict=True)
    ]
    return table.assign(reason=reason)


def _reason(status: str, slow: float, p: float, streak: int, rule: NightlyAlarm, since: str = "",
            n: float = float("nan")) -> str:
    if status == "no data":
        return "no comparison tonight" + (f" (alarm raised since {since})" if since else "")
    what = f"candidate {-slow:+.1%} vs reference, one-sided p(slower)={p:.2g}"
    on = f" on {n:.0f} launches per arm" if np.isfinite(n) else ""
    if status == "alarm":
        if p < rule.single_p and slow >= rule.single_slowdown:
            why = f"one night >= {rule.single_slowdown:.0%} with p < {rule.single_p:g}"
        elif rule.confirm is not None and p < rule.confirm.p and slow >= rule.confirm.slowdown:
            why = f"confirmed the same night{on}: >= {rule.confirm.slowdown:.0%} with p < {rule.confirm.p:g}"
        elif streak >= rule.consecutive_nights:
            why = f"{streak} nights in a row with p < {rule.consecutive_p:g} and >= {rule.consecutive_slowdown:.0%}"
        else:
            why = f"not recovered (p(slower) < {rule.recovered_p:g})"
        return f"{what}: {why}" + (f"; alarm raised since {since}" if since else "")
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




def summary_of(series: pd.DataFrame, full: pd.DataFrame, night: str, planned: Iterable[tuple[str, str]],
            rules: dict[str, NightlyAlarm], why_missing: dict[tuple[str, str], str] | None = None) -> NightSummary:
    """Tonight's verdict per planned (config, device): ``series`` is the planned configs' whole nights
    dataset, narrow (the rule and the change points read a few columns of every night), ``full`` tonight's
    rows whole (worded here)."""
    planned = list(dict.fromkeys(planned))  # a config resumed twice, or run twice tonight, is one series
    why_missing = why_missing or {}
    keys = set(planned)
    table = alarms(series, rules, reasons=False)
    in_series = table[_in(table, keys)] if len(table) else table
    rule_cols = ["config", "device", "slowdown", "streak", "status", "since"]
    mine = in_series[in_series["night"] == night][rule_cols].astype({"config": object, "device": object})
    if len(mine):
        rows = full.drop(columns=[c for c in ("slowdown", "streak", "status", "since", "reason")
                                if c in full.columns])
        rows = rows.merge(mine, on=["config", "device"], how="inner")
        rows = with_reasons(rows.sort_values(["config", "device"], kind="stable").reset_index(drop=True), rules)
    else:
        rows = pd.DataFrame(columns=[*NIGHT_COLUMNS, "night", "slowdown", "streak", "status", "since", "reason"])
    if len(rows):  # a comparison row without a p-value: say why the session gave none
        rows["reason"] = [
            f"{r} ({why_missing[(c, d)]})" if st == "no data" and (c, d) in why_missing else r
            for r, st, c, d in zip(rows["reason"], rows["status"], rows["config"], rows["device"], strict=True)
        ]
    have = set(zip(rows["config"], rows["device"], strict=True))
    missing = [(c, d, why_missing.get((c, d), "no comparison")) for c, d in planned if (c, d) not in have]
    changes = changepoints(night_medians(in_series))
    return NightSummary(night=night, tonight=rows, changes=changes, missing=missing)
