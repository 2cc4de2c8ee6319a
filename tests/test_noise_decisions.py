"""The noise registry feeds decisions: `orch run` states each device's MDE from its registered noise before the
first trial (or says none is registered); `orch nightly` sizes a noisier device's same-night confirmation from
it; a device whose noise jumped is flagged wherever its entry is read."""

from __future__ import annotations

import math
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pandas as pd
import pytest
import typer
from conftest import ROOT, fleet_of, plan_with, sim_device
from scipy.stats import norm
from test_run import invoke, write_inputs
from typer.testing import CliRunner

from orchestrator.analysis.confirm import extends, launches_for, suspicious
from orchestrator.analysis.noise import REGISTRY_COLUMNS, entry
from orchestrator.analysis.prerun import mde_notes, night_caps
from orchestrator.analysis.sizing import planned_mde
from orchestrator.cli_analysis import register
from orchestrator.config import load_plan
from orchestrator.config.loader import ConfigError
from orchestrator.config.plan import NightlyAlarm, NightlyConfirm
from orchestrator.results.history import load_nights
from orchestrator.results.store import RunDir, write_registry

NOW = datetime(2026, 6, 10, 12, 0, tzinfo=UTC)
NIGHTLY = ROOT / "configs" / "plans" / "nightly.yaml"


def registry(*rows: tuple[str, float, int, str, datetime], runtime: str = "rawloop-metal",
             model: str = "m") -> pd.DataFrame:
    """Registry rows (device, sigma, launches, run id, measured at) in the file's own columns."""
    return pd.DataFrame([{"device": d, "chip_class": "A19 Pro", "runtime": runtime, "model": model, "sigma": s,
                          "launches": n, "run_id": r, "measured_at": t.isoformat()} for d, s, n, r, t in rows],
                        columns=REGISTRY_COLUMNS)


def test_an_entry_is_the_latest_reading_with_its_age_and_a_jump_flag() -> None:
    reg = registry(("p", 0.06, 120, "r1", NOW - timedelta(days=9)), ("p", 0.13, 100, "r2", NOW - timedelta(days=2)),
                   ("q", 0.05, 80, "r3", NOW - timedelta(days=1)))
    e = entry(reg, "p", "rawloop-metal", "m", NOW)
    assert e is not None and e.sigma == 0.13 and e.run_id == "r2" and e.launches == 100
    assert math.isclose(e.age_days, 2.0)
    assert e.jumped is not None and "6.0% in run r1, now 13.0% in r2" in e.jumped
    q = entry(reg, "q", "rawloop-metal", "m", NOW)
    assert q is not None and q.jumped is None and q.basis() == "5.0% (noise registry: run r3, 1 d old, 80 launches)"
    assert entry(reg, "p", "coreai", "m", NOW) is None and entry(reg, "p", "rawloop-metal", "other", NOW) is None
    assert entry(pd.DataFrame(), "p", "rawloop-metal", "m", NOW) is None


def test_the_confirmation_cap_grows_with_the_registered_noise() -> None:
    rule = NightlyAlarm()  # 120 launches per arm sized for 6.5%, at most 360
    assert launches_for(rule, None).launches_per_arm == 120
    assert launches_for(rule, 0.04).launches_per_arm == 120  # a quieter phone keeps the plan's
    nine = launches_for(rule, 0.09)
    assert nine.launches_per_arm == math.ceil(120 * (0.09 / 0.065) ** 2) == 231 and not nine.short
    # its first run's z of a slowdown is 0.065 / 0.09 of a calm phone's: suspicious at that fraction of z(0.2)
    assert math.isclose(norm.isf(nine.suspicious_p), norm.isf(0.2) * 0.065 / 0.09)
    rows = pd.DataFrame({"device": ["calm", "loud"], "p_one_sided_slower": [0.25, 0.25],
                         "n_reference": [40, 40], "n_candidate": [40, 40]})
    assert suspicious(rows, rule, {"loud": nine}) == {"loud": 40} and suspicious(rows, rule) == {}
    assert launches_for(rule, 0.04).suspicious_p == 0.2
    loud = launches_for(rule, 0.15)
    assert loud.launches_per_arm == 360 and loud.needed == 640 and loud.short
    assert launches_for(NightlyAlarm(confirm=None), 0.09).launches_per_arm == 0


def test_a_cap_below_the_plans_is_refused_with_its_location(tmp_path: Path) -> None:
    bad = tmp_path / "nightly.yaml"
    bad.write_text(NIGHTLY.read_text() + "nightly:\n  confirm: {max_launches_per_arm: 100}\n")
    with pytest.raises(ConfigError) as caught:
        load_plan(bad)
    said = str(caught.value)
    assert str(bad) in said and "nightly.confirm" in said and "max_launches_per_arm (100)" in said, said
    line = NIGHTLY.read_text().count("\n") + 2
    assert f":{line}" in said, said
    code, out = invoke("validate", str(bad))
    assert code == 2 and "max_launches_per_arm" in out, out
    with pytest.raises(ValueError, match="sigma"):
        NightlyConfirm(sigma=0)


def test_the_mde_before_a_run_names_its_registry_entry_or_says_there_is_none() -> None:
    plan = plan_with(arms=[{"name": "a", "runtime": "rawloop-metal"}, {"name": "b", "runtime": "rawloop-metal"}],
                     blocks=20)
    reg = registry(("p", 0.05, 120, "r1", NOW - timedelta(days=30)), ("p", 0.12, 96, "r2", NOW - timedelta(days=3)))
    lines = mde_notes(plan, ["p", "q"], reg, NOW)
    mde = planned_mde(plan, 0.12)
    assert lines[0] == (f"p: launch noise 12.0% (noise registry: run r2, 3 d old, 96 launches): smallest detectable "
                        f"effect {mde:.1%} at 40 launches per arm, 80% power")
    assert lines[1].startswith("p: NOISE JUMP: launch noise 5.0% in run r1, now 12.0% in r2")
    assert lines[2].startswith("q: no launch noise registered for rawloop-metal on m") and "after the run" in lines[2]
    assert math.isclose(math.log1p(mde) / math.log1p(planned_mde(plan, 0.06)), 2.0)  # linear in sigma (log units)


def test_orch_run_prints_the_mde_before_the_first_trial(tmp_path: Path) -> None:
    fleet = fleet_of(sim_device("known", seed=4), sim_device("new", seed=5))
    plan = plan_with(blocks=6)
    f, p = write_inputs(tmp_path, fleet, plan)
    results = tmp_path / "r"
    results.mkdir()
    measured = datetime.now(UTC) - timedelta(days=4)
    write_registry(results, registry(("known", 0.07, 110, "aa-1", measured), runtime="coreai"))
    code, out = invoke("run", "--fleet", str(f), "--plan", str(p), "--results", str(results))
    assert code == 0, out
    said = " ".join(out.split())
    mde = planned_mde(plan, 0.07)
    first = f"known: launch noise 7.0% (noise registry: run aa-1, 4 d old, 110 launches): smallest detectable effect " \
            f"{mde:.1%} at 12 launches per arm, 80% power"
    assert first in said, out
    assert "new: no launch noise registered for coreai on m" in said, out
    assert said.index(first) < said.index("verdict"), out  # before the run's tables


def nightly_cli() -> tuple[typer.Typer, CliRunner]:
    app = typer.Typer()
    register(app)
    return app, CliRunner()


def test_a_noisier_phone_is_confirmed_on_more_launches_and_the_night_says_why(tmp_path: Path) -> None:
    fleet = tmp_path / "lab.yaml"
    fleet.write_text("name: lab\ndevices:\n"
                     "  - {id: loud, kind: sim, chip_class: A19 Pro, seed: 23, bandwidth_gb_s: 60,\n"
                     "     noise: {sigma: 0.09},\n"
                     "     runtimes: {rawloop-metal: {decode_tok_s: 55.0, builds: {ref: 1.0, slow: 0.9}}}}\n"
                     "  - {id: calm, kind: sim, chip_class: A19 Pro, seed: 24, bandwidth_gb_s: 60,\n"
                     "     runtimes: {rawloop-metal: {decode_tok_s: 55.0, builds: {ref: 1.0, slow: 0.9}}}}\n")
    plan = tmp_path / "nightly.yaml"
    plan.write_text(NIGHTLY.read_text().replace("devices: [iphone17pro]", "devices: [loud, calm]"))
    model = load_plan(plan).model
    results = tmp_path / "r"
    results.mkdir()
    now = datetime.now(UTC)  # the CLI reads the registry's age against the wall clock
    write_registry(results, registry(("loud", 0.05, 120, "aa-1", now - timedelta(days=20)),
                                     ("loud", 0.09, 118, "aa-2", now - timedelta(days=1)), model=model))
    app, runner = nightly_cli()
    res = runner.invoke(app, ["nightly", "--fleet", str(fleet), "--plan", str(plan), "--reference", "ref",
                              "--candidate", "slow", "--night", "2026-06-10", "--results", str(results)])
    assert res.exit_code == 1, res.output  # 10% slower: alarmed on its first night
    said = " ".join(res.output.split())
    assert ("nightly-decode: loud: launch noise 9.0% (noise registry: run aa-2, 1 d old, 118 launches): noisier than "
            "the 6.5% the cap is sized for: a suspicious night (p(slower) < 0.27, plan: 0.2) is extended to 231 "
            "launches per arm (plan: 120)") in said, said
    assert "nightly-decode: loud: NOISE JUMP: launch noise 5.0% in run aa-1, now 9.0% in aa-2" in said
    assert (f"nightly-decode: calm: no launch noise registered for rawloop-metal on {model}" in said
            and "extended to the plan's 120 launches per arm" in said), said
    assert said.index("nightly-decode: loud: launch noise") < said.index("Nightly 2026-06-10")  # before the night
    md = (results / "nightly" / "2026-06-10" / "summary.md").read_text()
    assert "## Launch noise (the noise registry) and confirmation caps" in md and "231 launches per arm" in md
    # Both phones are A19 Pro: the night's extension is shared. The loud phone's noise needs 231 launches per arm
    # in all: 191 more (96 blocks of 2 per arm), 48 blocks on each phone; each night decided over both phones.
    assert per_device(results) == {"loud": 96, "calm": 96}
    assert "A19 Pro: loud, calm share a suspicious night's extension" in said, said
    assert "## Same-night confirmations" in md
    hours = re.search(r"## Device time tonight .*\n\n- (\w+): ([\d.]+) device-hours: nightly-decode ([\d.]+) h, "
                      r"nightly-decode's confirmation ([\d.]+) h\n", md)
    assert hours and hours[1] in ("loud", "calm"), md
    assert math.isclose(float(hours[2]), float(hours[3]) + float(hours[4]), abs_tol=0.11), md
    for device in ("loud", "calm"):
        assert re.search(rf"nightly-decode: {device}: suspicious \(p\(slower\)=.* on 40 launches per arm\); extended "
                         r"by run \S+, 48 blocks on loud, calm, \d+ device-minutes on the busiest; decided on 232 "
                         r"launches per arm over 2 phones of its class \(loud, calm\), stratified by phone", md), md
    # Without siblings each phone is extended on itself: the loud one to 232 (96 blocks: 231 rounded up to a whole
    # block), the calm one to the plan's 120 (40 blocks).
    alone = tmp_path / "alone"
    alone.mkdir()
    write_registry(alone, registry(("loud", 0.09, 118, "aa-2", now - timedelta(days=1)), model=model))
    plan.write_text(plan.read_text() + "nightly:\n  confirm: {siblings: false}\n")
    res = runner.invoke(app, ["nightly", "--fleet", str(fleet), "--plan", str(plan), "--reference", "ref",
                              "--candidate", "slow", "--night", "2026-06-10", "--results", str(alone)])
    assert res.exit_code == 1, res.output
    assert per_device(alone) == {"loud": 192, "calm": 80}
    assert "share a suspicious night's extension" not in res.output


def per_device(results: Path) -> dict[str, int]:
    """Launches per arm each device ran in the night's extension runs."""
    out: dict[str, int] = {}
    for path in results.glob("*/manifest.json"):
        m = RunDir(path.parent).manifest()
        if extends(m.plan) is not None:
            for s in m.sessions:
                out[s.device] = out.get(s.device, 0) + m.plan.launches_per_arm()
    return out


def test_night_caps_say_when_the_noise_needs_more_than_the_plan_allows() -> None:
    plan = load_plan(NIGHTLY)
    rule = NightlyAlarm()
    caps, lines = night_caps(plan, rule, ["p"], registry(("p", 0.16, 100, "r", NOW), model=plan.model), NOW)
    assert caps["p"].launches_per_arm == 360 and caps["p"].short
    assert re.search(r"needs 728 launches per arm .* allows 360: a regression may need a second night", lines[0])
    assert night_caps(plan, NightlyAlarm(confirm=None), ["p"], pd.DataFrame(), NOW)[1] == []


def test_a_nights_budget_bounds_its_confirmation_and_the_summary_says_so(tmp_path: Path) -> None:
    """budget_minutes is a config's device time on a phone tonight: the extension gets what the first run left,
    stops there (the night decided on what it allowed), and with nothing left the night is not extended."""
    fleet = tmp_path / "lab.yaml"
    fleet.write_text("name: lab\ndevices:\n"
                     "  - {id: p, kind: sim, chip_class: A19 Pro, seed: 23, bandwidth_gb_s: 60,\n"
                     "     runtimes: {rawloop-metal: {decode_tok_s: 55.0, builds: {ref: 1.0, slow: 0.9}}}}\n")
    app, runner = nightly_cli()
    said = {}
    for budget in (200, 60):
        plan = tmp_path / f"nightly-{budget}.yaml"
        plan.write_text(NIGHTLY.read_text().replace("devices: [iphone17pro]", "devices: [p]")
                        + f"budget_minutes: {budget}\n")
        results = tmp_path / f"r{budget}"
        res = runner.invoke(app, ["nightly", "--fleet", str(fleet), "--plan", str(plan), "--reference", "ref",
                                  "--candidate", "slow", "--night", "2026-06-10", "--results", str(results)])
        assert res.exit_code in (0, 1), res.output
        said[budget] = " ".join((results / "nightly" / "2026-06-10" / "summary.md").read_text().split())
        runs = [RunDir(m.parent) for m in results.glob("*/manifest.json")]
        extension = [r for r in runs if extends(r.manifest().plan) is not None]
        if budget == 200:
            (ext,) = extension
            first = next(r for r in runs if r is not ext)
            left = ext.manifest().plan.budget_minutes
            assert left is not None and 0 < left < 200, left  # what the first run left of the 200 minutes
            assert first.manifest().plan.budget_minutes == 200
            (row,) = load_nights(results / "history").to_dict("records")
            assert row["run_id"] == ext.run_id and row["n_candidate"] < 120, row  # short of the cap: the budget
        else:
            assert extension == [], said[budget]
    assert re.search(r"p: suspicious \(.*\); extended by run \S+, 40 blocks on p \(p stopped at the budget_minutes "
                     r"left, \d+ min, before all its blocks\), \d+ device-minutes on the busiest; decided on \d+ "
                     r"launches per arm", said[200]), said[200]
    assert ("p: suspicious, not extended: its first run used its budget_minutes (60); the night is decided on the "
            "first run") in said[60], said[60]
