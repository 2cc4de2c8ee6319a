"""`orch publish`: the static site of runs and nightly history; what it holds and what it rewrites."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
import typer
from site_support import SLOW_FROM, make_nights, night_label
from typer.testing import CliRunner

from orchestrator.cli_analysis import register
from orchestrator.report.site import publish


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str]]:
    """Six nights of a two-device lab (the iPhone 12% slower from night 4); results and run ids."""
    tmp = tmp_path_factory.mktemp("lab")
    results = tmp / "results"
    return results, make_nights(tmp, results, 1, 6)


@pytest.fixture(scope="module")
def site(lab: tuple[Path, list[str]], tmp_path_factory: pytest.TempPathFactory) -> Path:
    results, _ = lab
    out = tmp_path_factory.mktemp("site") / "site"
    publish(results, results / "history", out, None)
    return out


def test_the_site_holds_every_series_night_and_run(site: Path, lab: tuple[Path, list[str]]) -> None:
    _, run_ids = lab
    over = json.loads((site / "data" / "overview.json").read_text())
    status = {(r["config"], r["device"]): r["status"] for r in over["series"]}
    assert status == {("nightly-decode", "iphone17pro"): "alarm", ("nightly-decode", "mac-m4"): "ok"}
    assert sorted(r["run_id"] for r in over["runs"]) == sorted(run_ids)
    data = json.loads((site / "data" / "nightly-decode.json").read_text())
    assert len(data["points"]) == 2 * 6
    for p in data["points"]:  # every night links to its run's report, which is there
        assert (site / "config" / p["report"]).resolve().is_file()
        assert p["runtime"] == "rawloop-metal"
    alarms = sorted(p["night"] for p in data["points"] if p["status"] == "alarm")
    assert alarms and alarms[0] == night_label(SLOW_FROM) and {p["device"] for p in data["points"]
                                                                 if p["status"] == "alarm"} == {"iphone17pro"}


def test_pages_load_nothing_from_the_network(site: Path) -> None:
    pages = [site / "index.html", site / "config" / "nightly-decode.html"]
    for page in pages:
        text = page.read_text()
        assert not re.search(r"""(src|href)=["']?(https?:)?//""", text), page
    config = pages[1].read_text()
    assert 'src="../assets/plotly.min.js"' in config
    assert (site / "assets" / "plotly.min.js").stat().st_size > 1_000_000


def test_publishing_again_rewrites_only_what_changed(lab: tuple[Path, list[str]], tmp_path: Path) -> None:
    results0, run_ids = lab  # six nights' runs and their same-night confirmations (the slow nights')
    results = tmp_path / "results"
    shutil.copytree(results0, results)
    out = tmp_path / "site"
    first = publish(results, results / "history", out, None)
    assert len([p for p in first.written if p.name == "report.html"]) == len(run_ids) >= 6
    again = publish(results, results / "history", out, None)
    assert again.written == [] and again.unchanged >= len(run_ids) + 4
    new = make_nights(tmp_path, results, 7, 7, total=7)
    after = publish(results, results / "history", out, None)
    rebuilt = {p.relative_to(out).as_posix() for p in after.written}
    assert rebuilt == {*(f"runs/{r}/report.html" for r in new), "config/nightly-decode.html",
                       "data/nightly-decode.json", "data/overview.json", "index.html"}
    # A run removed from the results leaves the site.
    shutil.rmtree(results / new[0])
    publish(results, results / "history", out, None)
    assert not (out / "runs" / new[0]).exists()


def test_cli_publish(lab: tuple[Path, list[str]], tmp_path: Path) -> None:
    results, _ = lab
    app = typer.Typer()
    register(app)
    runner = CliRunner()
    res = runner.invoke(app, ["publish", "--results", str(results), "--out", str(tmp_path / "s")])
    assert res.exit_code == 0, res.output
    assert (tmp_path / "s" / "index.html").as_uri() in res.output.replace("\n", "")
    res = runner.invoke(app, ["publish", "--results", str(tmp_path / "nowhere"), "--out", str(tmp_path / "t")])
    assert res.exit_code == 2 and "no results folder" in res.output and not (tmp_path / "t").exists()
    res = runner.invoke(app, ["publish", "--results", str(results), "--history", str(tmp_path / "nohist"),
                              "--out", str(tmp_path / "t")])
    assert res.exit_code == 2 and "no nightly history" in res.output


def test_a_device_missing_from_the_latest_night_shows_no_data() -> None:
    import pandas as pd

    from orchestrator.report.site import overview

    table = pd.DataFrame({
        "config": "c", "device": ["d1", "d1", "d2"], "night": ["n1", "n2", "n1"], "run_id": ["r1", "r2", "r1"],
        "ratio": [1.0, 0.9, 1.0], "status": ["ok", "alarm", "ok"], "reason": ["", "slow", ""],
    })
    rows = {r["device"]: r for r in overview(table, reports={"r1", "r2"})}
    assert rows["d1"]["status"] == "alarm" and rows["d1"]["report"] == "runs/r2/report.html"
    assert rows["d2"]["status"] == "no data" and "no comparison on n2" in rows["d2"]["reason"]
    assert rows["d2"]["report"] is None and rows["d1"]["sparkline"] == [1.0, 0.9]
