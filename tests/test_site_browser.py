"""The published site in a real browser (Debian's headless Chromium, driven over the DevTools pipe)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from browser import Browser, find_chromium
from site_support import SLOW_FROM, make_nights, night_label

from orchestrator.report.site import publish
from orchestrator.report.site_imports import TITLE
from orchestrator.results.imports import import_files

IMPORTS = Path(__file__).parent / "data" / "imports"


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("browser-lab")
    results = tmp / "results"
    make_nights(tmp, results, 1, 6)
    # Other tools' results in the same history (real captured outputs): shown apart, never in the series.
    # And a run LiteRT-LM reported as failed (it still exited 0): listed as failed, never a number.
    files = [IMPORTS / "llama-bench.json", IMPORTS / "mlx-lm-benchmark.txt", IMPORTS / "litert-lm-benchmark.txt",
             IMPORTS / "litert-lm-missing-model.txt"]
    import_files(files, results / "history", lambda: datetime(2026, 11, 6, 7, 0, tzinfo=UTC), device="iphone17pro")
    out = tmp / "site"
    publish(results, results / "history", out, None)
    return out


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Browser]:
    if find_chromium() is None:  # as the SSH tests need sshd: make test installs Debian's chromium
        pytest.fail("no chromium: run make test (it installs Debian's) or apt-get install chromium")
    with Browser.start(tmp_path_factory.mktemp("profile")) as b:
        yield b


def series_of(site: Path) -> dict[str, object]:
    data: dict[str, object] = json.loads((site / "data" / "nightly-decode.json").read_text())
    return data


def test_pages_render_without_errors_and_list_the_series(site: Path, browser: Browser, tmp_path: Path) -> None:
    page = browser.open((site / "index.html").as_uri())
    rows = page.eval("[...document.querySelectorAll('#overview tr.series')].map(r => "
                     "[r.dataset.config, r.cells[1].textContent, r.dataset.status])")
    assert rows == [["nightly-decode", "iphone17pro", "alarm"], ["nightly-decode", "mac-m4", "ok"]]
    assert page.eval("document.querySelectorAll('#overview svg.spark polyline').length") == 2
    assert page.errors == []
    page.screenshot(tmp_path / "index.png")
    assert (tmp_path / "index.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    page.navigate((site / "config" / "nightly-decode.html").as_uri())
    assert page.errors == []
    assert page.eval("typeof Plotly") == "object"  # the vendored library loaded from the site's assets
    assert page.eval("document.querySelectorAll('#plot .scatterlayer .trace').length") == 2
    assert page.eval("document.querySelectorAll('#plot .scatterlayer .point').length") == 12
    assert page.eval("document.getElementById('shown').textContent") == "12 nights shown"
    # Filtering by device redraws the chart with that device's nights only.
    page.eval("(() => { const s = document.getElementById('f-device'); s.value = 'mac-m4'; "
              "s.dispatchEvent(new Event('change')); })()")
    assert page.eval("document.querySelectorAll('#plot .scatterlayer .point').length") == 6
    assert page.eval("document.getElementById('shown').textContent") == "6 nights shown"
    assert page.errors == []


def test_a_click_from_an_alarm_reaches_its_run_report(site: Path, browser: Browser) -> None:
    points = series_of(site)["points"]
    assert isinstance(points, list)
    latest = max((p for p in points if p["device"] == "iphone17pro"), key=lambda p: p["night"])
    first_alarm = min((p for p in points if p["status"] == "alarm"), key=lambda p: p["night"])
    assert first_alarm["night"] == night_label(SLOW_FROM)

    page = browser.open((site / "index.html").as_uri())
    page.click('#overview tr[data-status="alarm"] a.to-report')
    assert page.eval("location.href").endswith(f"/runs/{latest['run_id']}/report.html")
    assert latest["run_id"] in page.eval("document.title")
    assert page.errors == []

    page.navigate((site / "config" / "nightly-decode.html").as_uri())
    page.click('#flagged tr[data-status="alarm"]:last-child a.to-report')  # the first night it alarmed
    assert page.eval("location.href").endswith(f"/runs/{first_alarm['run_id']}/report.html")
    assert page.errors == []


def test_a_click_on_a_point_of_the_chart_opens_that_nights_report(site: Path, browser: Browser) -> None:
    points = series_of(site)["points"]
    assert isinstance(points, list)
    page = browser.open((site / "config" / "nightly-decode.html").as_uri())
    # The alarm markers are drawn as crosses on the iPhone's trace; click the last one (tonight's).
    box = page.eval("""(() => { const t = document.querySelectorAll('#plot .scatterlayer .trace');
        for (const trace of t) { const pts = trace.querySelectorAll('.point');
          if (pts.length && trace.__data__[0].trace.name === 'iphone17pro') {
            const r = pts[pts.length - 1].getBoundingClientRect(); return [r.left + r.width / 2, r.top + r.height / 2];
          } } return null; })()""")
    assert box is not None
    page.browser.loaded.discard(page.session)
    page.send("Input.dispatchMouseEvent", type="mouseMoved", x=box[0], y=box[1])
    for kind in ("mousePressed", "mouseReleased"):
        page.send("Input.dispatchMouseEvent", type=kind, x=box[0], y=box[1], button="left", clickCount=1)
    page.wait_loaded()
    tonight = max((p for p in points if p["device"] == "iphone17pro"), key=lambda p: p["night"])
    assert page.eval("location.href").endswith(f"/runs/{tonight['run_id']}/report.html")


def test_imported_results_stand_apart_under_their_own_heading(site: Path, browser: Browser) -> None:
    imported = json.loads((site / "data" / "imported.json").read_text())
    page = browser.open((site / "index.html").as_uri())
    heading = page.eval("document.getElementById('imported-results').textContent")
    assert heading.startswith(TITLE) and "never decision-grade" in heading
    rows = page.eval("[...document.querySelectorAll('#imported tr.imported')].map(r => "
                     "[r.dataset.source, r.dataset.test, r.cells[2].textContent])")
    assert rows == [[s["source_format"], s["test"], "iphone17pro"] for s in imported["series"]]
    assert {r[0] for r in rows} == {"llama-bench", "mlx-lm", "litert-lm"}
    # The section comes after the nightly overview, whose rows hold only orch's own series.
    assert page.eval("document.getElementById('overview').compareDocumentPosition("
                     "document.getElementById('imported')) & Node.DOCUMENT_POSITION_FOLLOWING") != 0
    assert page.eval("document.querySelectorAll('#overview tr.series').length") == 2
    assert page.errors == []
    page.navigate((site / "config" / "nightly-decode.html").as_uri())
    assert page.eval("document.querySelectorAll('#plot .scatterlayer .point').length") == 12  # no imported point
    assert page.errors == []


def test_a_config_page_shows_other_tools_results_on_its_devices_in_a_chart_of_their_own(
        site: Path, browser: Browser) -> None:
    data = series_of(site)
    imported = data["imported"]
    assert isinstance(imported, list) and imported
    assert {s["device"] for s in imported} == {"iphone17pro"} and not any(s["decision_grade"] for s in imported)
    page = browser.open((site / "config" / "nightly-decode.html").as_uri())
    heading = page.eval("document.getElementById('imported-results').textContent")
    assert heading.startswith(TITLE) and "not interleaved" in heading and "not settled" in heading
    # Orch's own series keep their points (ratios, alarms); the imported ones are drawn in their own chart.
    assert page.eval("document.querySelectorAll('#plot .scatterlayer .point').length") == 12
    drawn = page.eval("[...document.querySelectorAll('#imported-plot .scatterlayer .trace')].map(t => "
                      "[t.__data__[0].trace.name, t.__data__[0].trace.y])")
    assert [d[0] for d in drawn] == [f"{s['source_format']} {s['test']} ({s['device']})" for s in imported]
    assert [d[1] for d in drawn] == [[t["tok_s"] for t in s["trend"]] for s in imported]
    assert "never decision-grade" in page.eval("document.querySelector('#imported-plot .gtitle').textContent")
    rows = page.eval("[...document.querySelectorAll('#imported tr.imported')].map(r => r.dataset.source)")
    assert rows == [s["source_format"] for s in imported]
    assert "benchmark" not in {s["test"] for s in imported}  # the failed run is no series and no point
    failed = page.eval("[...document.querySelectorAll('#imported-failures tr.imported-failed')].map(r => "
                       "[r.dataset.source, r.dataset.kind, r.cells[4].textContent])")
    assert failed == [["litert-lm", "model_not_found", "failed model_not_found"]]
    assert data["imported_failed"] == json.loads((site / "data" / "imported.json").read_text())["failed"]
    assert page.errors == []
    page.navigate((site / "index.html").as_uri())
    assert page.eval("document.querySelectorAll('#imported-failures tr.imported-failed').length") == 1
    assert page.errors == []
