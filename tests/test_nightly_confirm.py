"""Same-night confirmation and the latched alarm: the rule on synthetic nights, the extension's pieces."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from conftest import ROOT

from orchestrator.analysis.confirm import (
    EXTENSION,
    Extension,
    after,
    extends,
    extension_blocks,
    extension_plan,
    launches_for,
    night_verdict,
    plan_extensions,
    suspicious,
    targets_of,
)
from orchestrator.analysis.nightly import alarms, check_plan
from orchestrator.config import Plan, load_plan
from orchestrator.config.plan import NightlyAlarm, NightlyConfirm
from orchestrator.results.history_store import NightlyInputError

NAN = math.nan


def series(slow: list[float], p: list[float], device: str = "d", n: float = 120) -> pd.DataFrame:
    return pd.DataFrame({
        "config": "c", "device": device, "night": [f"2026-03-{i + 1:02d}" for i in range(len(slow))], "run_id": "r",
        "ratio": [1 - s for s in slow], "p_one_sided_slower": p, "n_candidate": n,
    })


def test_a_confirmed_night_alarms_and_stays_raised_until_a_night_shows_recovery() -> None:
    nights = series([0.0, 0.05, 0.02, NAN, 0.03, 0.0, 0.01], [0.6, 0.00005, 0.05, NAN, 0.15, 0.5, 0.1])
    table = alarms(nights, {"c": NightlyAlarm()})
    assert list(table["status"]) == ["ok", "alarm", "alarm", "no data", "alarm", "ok", "ok"], table
    assert list(table["since"]) == ["", *["2026-03-02"] * 4, "", ""], table
    assert "confirmed the same night on 120 launches per arm" in table["reason"][1]
    assert "not recovered (p(slower) < 0.2); alarm raised since 2026-03-02" in table["reason"][2]
    assert table["reason"][3] == "no comparison tonight (alarm raised since 2026-03-02)"
    assert "since" not in table["reason"][5]


def test_without_latch_or_confirmation_the_old_rule_holds() -> None:
    nights = series([0.05, 0.02], [0.00005, 0.05])
    unlatched = alarms(nights, {"c": NightlyAlarm(latch=False)})
    assert list(unlatched["status"]) == ["alarm", "ok"] and list(unlatched["since"]) == ["2026-03-01", ""]
    # No confirmation: 5% at p 0.00005 is under the single-night 10%; one night of the two needed.
    old = alarms(nights, {"c": NightlyAlarm(confirm=None, latch=False)})
    assert list(old["status"]) == ["watch", "ok"], old
    strict = alarms(nights, {"c": NightlyAlarm(confirm=NightlyConfirm(p=0.00001))})
    assert list(strict["status"]) == ["watch", "ok"], strict


def test_latching_is_per_series() -> None:
    nights = pd.concat([series([0.05, 0.0], [0.00005, 0.1], "a"), series([0.0, 0.0], [0.5, 0.1], "b")])
    table = alarms(nights, {"c": NightlyAlarm()})
    got = {(d, n): (s, since) for d, n, s, since in zip(table["device"], table["night"], table["status"],
                                                       table["since"], strict=True)}
    assert got[("a", "2026-03-02")] == ("alarm", "2026-03-01") and got[("b", "2026-03-01")] == ("ok", "")
    assert got[("b", "2026-03-02")] == ("ok", "")


@pytest.fixture(scope="module")
def nightly() -> Plan:
    return load_plan(ROOT / "configs" / "plans" / "nightly.yaml")


def test_which_nights_are_extended_and_by_how_much(nightly: Plan) -> None:
    rows = pd.DataFrame({"device": ["a", "b", "c", "d"], "p_one_sided_slower": [0.19, 0.2, NAN, 0.01],
                         "n_reference": [40, 40, 0, 116], "n_candidate": [40, 39, 0, 116]})
    rule = NightlyAlarm()
    assert suspicious(rows, rule) == {"a": 40, "d": 116}
    assert suspicious(rows, NightlyAlarm(confirm=None)) == {}
    assert nightly.order in ("abba", "abba-baab")  # two launches per arm a block
    assert extension_blocks(nightly, rule, 40) == 40  # to 120 per arm
    assert extension_blocks(nightly, rule, 116) == 0  # 2 blocks left: fewer than a plan may have
    assert extension_blocks(nightly, NightlyAlarm(confirm=None), 40) == 0
    more = extension_plan(nightly, Extension(("a",), 40, ("a",)), seed=7, of="20260301-010203-nightly-decode-abcd")
    assert more.blocks == 40 and more.devices == ["a"] and more.seed == 7 and more.name == nightly.name
    assert more.decision.adaptive is None and more.decision.sequential is None
    assert more.description.startswith(EXTENSION) and more.arms == nightly.arms
    assert extends(more) == "20260301-010203-nightly-decode-abcd" and extends(nightly) is None
    assert targets_of(more) == ["a"]
    shared = extension_plan(nightly, Extension(("a", "b", "c"), 14, ("a",)), seed=7, of="r1")
    assert shared.devices == ["a", "b", "c"] and targets_of(shared) == ["a"]
    assert "shared with b, c" in shared.description
    old = nightly.model_copy(update={"description": f"{EXTENSION}r1: 40 more blocks of x", "devices": ["a", "b"]})
    assert targets_of(old) == ["a", "b"]  # written before siblings shared: every device it ran on decides


def test_siblings_share_a_suspicious_nights_extension(nightly: Plan) -> None:
    rule = NightlyAlarm()
    chips = {"a": "A19", "b": "A19", "c": "A19", "d": "A19", "solo": "A17"}
    devices = list(chips)
    caps = {d: launches_for(rule, None) for d in devices}
    # One suspicious phone of four: the 80 launches per arm it lacks (40 blocks of 2 per arm) over 4 phones.
    (ext,) = plan_extensions(nightly, rule, {"b": 40}, caps, chips, devices)
    assert ext == Extension(("b", "a", "c", "d"), 10, ("b",))
    # The solo phone alone in its class runs its own 40 blocks; without siblings every suspect runs its own.
    got = plan_extensions(nightly, rule, {"b": 40, "solo": 40}, caps, chips, devices)
    assert got == [Extension(("b", "a", "c", "d"), 10, ("b",)), Extension(("solo",), 40, ("solo",))]
    alone = NightlyAlarm(confirm=NightlyConfirm(siblings=False))
    assert plan_extensions(nightly, alone, {"b": 40, "c": 40}, caps, chips, devices) == [
        Extension(("b", "c"), 40, ("b", "c"))]
    # A noisy phone's need (232 per arm: 96 blocks) no longer waits on one phone's night: 24 blocks each.
    noisy = {**caps, "a": launches_for(rule, 0.09)}
    assert plan_extensions(nightly, rule, {"a": 40}, noisy, chips, devices) == [
        Extension(("a", "b", "c", "d"), 24, ("a",))]
    # Only as many phones as can run a whole plan's least blocks (6): 10 blocks left -> one phone.
    assert plan_extensions(nightly, rule, {"a": 100}, caps, chips, devices) == [Extension(("a",), 10, ("a",))]
    assert plan_extensions(nightly, rule, {"a": 116}, caps, chips, devices) == []
    assert plan_extensions(nightly, NightlyAlarm(confirm=None), {"a": 40}, caps, chips, devices) == []


def test_a_night_confirmed_over_siblings_is_stratified_by_phone(nightly: Plan) -> None:
    """Two phones whose speeds differ by 30% but whose candidate is 5% slower on both: stratified by phone the
    night sees the 5% (pooling the phones' launches unstratified would drown it in the 30%)."""
    rng = np.random.default_rng(3)
    rows = []
    for device, speed in (("a", 50.0), ("b", 65.0)):
        for block in range(30):
            for seq, (arm, f) in enumerate((("reference", 1.0), ("candidate", 0.95))):
                rows.append({"device": device, "block": block, "seq": 2 * block + seq, "arm": arm,
                             "decode_tok_s": speed * f * math.exp(rng.normal(0, 0.03)),
                             "status": "ok", "excluded": None})
    trials = pd.DataFrame(rows)
    plan = nightly.model_copy(update={"arms": [nightly.arms[0].model_copy(update={"name": "reference"}),
                                               nightly.arms[1].model_copy(update={"name": "candidate"})]})
    first, later = trials[trials["block"] < 10], trials[trials["block"] >= 10]
    row, tonight = night_verdict(first, later, "a", ["a", "b"], plan, seed=1)
    assert len(tonight) == 20 + 40 + 40 and set(tonight["device"]) == {"a", "b"}
    (r,) = row.to_dict("records")
    assert r["device"] == "a" and r["n_candidate"] == 50 and 0.93 < r["ratio"] < 0.97 and r["p_one_sided_slower"] < 1e-3
    alone, mine = night_verdict(first, later, "a", ["a"], plan, seed=1)
    assert set(mine["device"]) == {"a"} and alone.iloc[0]["n_candidate"] == 30


def test_the_extension_follows_the_first_runs_blocks_per_device() -> None:
    first = pd.DataFrame({"device": ["a", "a", "b"], "block": [0, 19, 5], "seq": [0, 79, 23]})
    ext = pd.DataFrame({"device": ["a", "b", "b"], "block": [0, 0, 3], "seq": [0, 0, 11]})
    got = after(first, ext).sort_values(["device", "seq"]).reset_index(drop=True)
    assert list(got["block"]) == [20, 6, 9] and list(got["seq"]) == [80, 24, 35]


def test_a_median_plan_that_cannot_reach_the_confirmation_p_is_refused(nightly: Plan) -> None:
    median = nightly.model_copy(update={"decision": nightly.decision.model_copy(update={"estimator": "median"})})
    with pytest.raises(NightlyInputError, match=r"out of reach of estimator median with 2000 resamples.*>= 10000"):
        check_plan(median)
    enough = median.model_copy(update={"decision": median.decision.model_copy(update={"resamples": 10000})})
    assert check_plan(enough) is enough
    assert check_plan(median.model_copy(update={"nightly": NightlyAlarm(confirm=None)}))
