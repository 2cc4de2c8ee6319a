"""`--json`: one document per command, its fields as documented, its rows named as the files' columns."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from conftest import ROOT, SIM_AB, SIM_LAB
from typer.testing import CliRunner

from orchestrator.cli import app
from orchestrator.report.machine import DOCUMENTS, VERSION
from orchestrator.results.history_store import NIGHT_COLUMNS

runner = CliRunner()
NIGHTLY = ROOT / "configs" / "plans" / "nightly.yaml"


def doc(command: str, *args: str, code: int = 0) -> dict[str, Any]:
    res = runner.invoke(app, list(args))
    assert res.exit_code == code, res.output
    body: dict[str, Any] = json.loads(res.stdout)  # one document: stdout holds nothing else
    assert list(body) == ["schema", "version", *DOCUMENTS[command]], list(body)
    assert body["schema"] == f"orch.{command}" and body["version"] == VERSION
    return body


def csv_header(*args: str) -> list[str]:
    res = runner.invoke(app, list(args))
    assert res.exit_code == 0, res.output
    return next(csv.reader(io.StringIO(res.stdout)))


def only_json_values(rows: list[dict[str, Any]]) -> None:
    for row in rows:
        for v in row.values():
            assert v is None or isinstance(v, str | int | float | bool | list | dict), (type(v), row)


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    results = tmp_path_factory.mktemp("json") / "results"
    res = runner.invoke(app, ["run", "--fleet", str(SIM_LAB), "--plan", str(SIM_AB), "--results", str(results)])
    assert res.exit_code in (0, 1), res.output
    (run_dir,) = [p for p in results.iterdir() if (p / "manifest.json").exists()]
    return results, run_dir.name


def test_show(run: tuple[Path, str]) -> None:
    results, run_id = run
    body = doc("show", "show", run_id, "--results", str(results), "--json")
    assert body["run_id"] == run_id and body["trials"] and body["verdicts"]
    assert list(body["trials"][0]) == list(pd.read_parquet(results / run_id / "trials.parquet").columns)
    with open(results / run_id / "verdicts.csv") as f:
        assert list(body["verdicts"][0]) == next(csv.reader(f))
    only_json_values(body["trials"] + body["verdicts"])
    assert set(body["stops"]) == {r["device"] for r in body["trials"]}


def test_audit_and_rank(run: tuple[Path, str]) -> None:
    results, run_id = run
    body = doc("audit", "audit", run_id, "--results", str(results), "--json")
    assert body["rows"] and list(body["rows"][0]) == csv_header("audit", run_id, "--results", str(results),
                                                                "--format", "csv")
    only_json_values(body["rows"])
    body = doc("rank", "rank", run_id, "--results", str(results), "--json")
    assert body["runs"] == [run_id] and body["history"] is None
    assert [r["rank"] for r in body["rows"]] == list(range(1, len(body["rows"]) + 1))
    assert list(body["rows"][0]) == csv_header("rank", run_id, "--results", str(results), "--format", "csv")
    only_json_values(body["rows"])


def test_devices_and_runtimes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    body = doc("devices", "devices", "--fleet", str(SIM_LAB), "--json")
    assert body["devices"] and all(d["kind"] == "sim" and d["health"]["state"] == "ok" for d in body["devices"])
    monkeypatch.setenv("ORCH_CACHE", str(tmp_path))
    body = doc("runtimes", "runtimes", "list", "--json")
    rows = {r["runtime"]: r for r in body["runtimes"]}
    assert rows["llamacpp"]["installed"] is False and body["failed"] is False


def test_nightly(tmp_path: Path) -> None:
    results = tmp_path / "r"
    args = ["nightly", "--fleet", str(SIM_LAB), "--plan", str(NIGHTLY), "--reference", "ref",
            "--results", str(results), "--json"]
    body = doc("nightly", *args, "--candidate", "candidate-good", "--night", "2026-02-01")
    assert body["night"] == "2026-02-01" and body["alarmed"] is False and len(body["run_ids"]) in (1, 2)
    (row,) = body["tonight"]
    assert set(row) == {*NIGHT_COLUMNS, "night", "slowdown", "streak", "status", "since", "reason"}
    history = pd.read_parquet(next((results / "history" / "nights").glob("night=*/*.parquet")))
    assert set(history.columns) <= set(row)  # the history's own column names
    only_json_values(body["tonight"])
    # The sim's candidate-slow (8% slower): confirmed the same night, an alarm on its first night, latched the
    # next; an alarm still exits 1 (the document on stdout).
    body = doc("nightly", *args, "--candidate", "candidate-slow", "--night", "2026-02-02", code=1)
    assert [(r["status"], r["since"]) for r in body["tonight"]] == [("alarm", "2026-02-02")]
    assert body["tonight"][0]["n_candidate"] == 120 and len(body["run_ids"]) == 2
    body = doc("nightly", *args, "--candidate", "candidate-slow", "--night", "2026-02-03", code=1)
    assert body["alarmed"] is True and [r["status"] for r in body["tonight"]] == ["alarm"]
    assert body["tonight"][0]["since"] == "2026-02-02"
