"""Same-night confirmation and the latched alarm: the rule on synthetic nights, the extension's pieces."""

from __future__ import annotations

import math

import pandas as pd
import pytest
from conftest import ROOT

from orchestrator.analysis.confirm import EXTENSION, after, extends, extension_blocks, extension_plan, suspicious
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
    more = extension_plan(nightly, ["a"], 40, seed=7, of="20260301-010203-nightly-decode-abcd")
    assert more.blocks == 40 and more.devices == ["a"] and more.seed == 7 and more.name == nightly.name
    assert more.decision.adaptive is None and more.decision.sequential is None
    assert more.description.startswith(EXTENSION) and more.arms == nightly.arms
    assert extends(more) == "20260301-010203-nightly-decode-abcd" and extends(nightly) is None


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
