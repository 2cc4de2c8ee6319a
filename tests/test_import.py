"""`orch import`: other tools' outputs (captured for real, tests/data/imports/README.md) into a history, apart."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pandas as pd
import pytest
from conftest import ROOT
from typer.testing import CliRunner

from orchestrator.cli import app
from orchestrator.report.machine import DOCUMENTS
from orchestrator.results.imports import ImportInputError, detect, parse_file, parse_text
from orchestrator.results.imports.store import COLUMNS, load

DATA = ROOT / "tests" / "data" / "imports"
LLAMA = {kind: DATA / f"llama-bench.{kind}" for kind in ("json", "jsonl", "md")}
MLX = DATA / "mlx-lm-benchmark.txt"
LITERT = DATA / "litert-lm-benchmark.txt"
LITERT_MISSING = DATA / "litert-lm-missing-model.txt"
runner = CliRunner()


def located(path: Path, fmt: str = "auto") -> ImportInputError:
    with pytest.raises(ImportInputError) as info:
        parse_file(path, fmt)
    return info.value


@pytest.mark.parametrize(("path", "fmt"), [(LLAMA["json"], "llama-bench"), (LLAMA["jsonl"], "llama-bench"),
                                           (LLAMA["md"], "llama-bench"), (MLX, "mlx-lm"), (LITERT, "litert-lm")])
def test_each_captured_output_is_recognised_by_its_content(path: Path, fmt: str) -> None:
    assert detect(path.read_text(), str(path)) == fmt


def test_llama_bench_json_holds_every_test_with_its_repetitions() -> None:
    raw = json.loads(LLAMA["json"].read_text())
    fmt, rows = parse_file(LLAMA["json"])
    assert fmt == "llama-bench" and len(rows) == len(raw) >= 2
    for row, obj in zip(rows, raw, strict=True):
        assert row.tok_s == obj["avg_ts"] and row.tok_s_stddev == obj["stddev_ts"]
        assert list(row.samples_tok_s) == obj["samples_ts"] and len(row.samples_tok_s) == len(obj["samples_ns"])
        assert row.n_prompt == obj["n_prompt"] and row.n_gen == obj["n_gen"] and row.runtime == "llamacpp"
        assert row.model == Path(obj["model_filename"]).name and row.measured_at == obj["test_time"]
        assert row.build == f"{obj['build_commit']} ({obj['build_number']})"
    assert [(r.test, r.phase) for r in rows] == [
        ("pp64", "prefill"), ("tg16", "decode"), ("pp64+tg16", "prefill+decode"), ("pp64 @ d32", "prefill"),
        ("tg16 @ d32", "decode"), ("pp64+tg16 @ d32", "prefill+decode")]  # -p 64 -n 16 -pg 64,16 -d 0,32
    # Each test object starts on its own line: the line an error or a row points at.
    lines = LLAMA["json"].read_text().splitlines()
    assert all(lines[r.line - 1].strip().startswith("{") for r in rows)


def test_llama_bench_jsonl_and_markdown_read_like_json() -> None:
    _, as_json = parse_file(LLAMA["json"])
    _, as_jsonl = parse_file(LLAMA["jsonl"])
    _, as_md = parse_file(LLAMA["md"])
    assert [r.test for r in as_jsonl] == [r.test for r in as_md] == [r.test for r in as_json]
    assert [r.line for r in as_jsonl] == list(range(1, len(as_jsonl) + 1))
    # The markdown table prints "mean ± sd" to two decimals and the build in its footer.
    for md, jl in zip(as_md, as_jsonl, strict=True):
        assert md.tok_s > 0 and md.tok_s_stddev is not None
        assert md.build == jl.build and md.settings["threads"] == jl.settings["n_threads"]
    text = LLAMA["md"].read_text().splitlines()
    assert all(text[r.line - 1].startswith("|") and r.test in text[r.line - 1] for r in as_md)


def test_mlx_lm_benchmark_gives_prefill_and_decode_over_its_trials() -> None:
    fmt, rows = parse_file(MLX)
    assert fmt == "mlx-lm"
    prefill, decode = rows
    assert (prefill.phase, decode.phase) == ("prefill", "decode")
    text = MLX.read_text()
    trials = [line for line in text.splitlines() if line.startswith("Trial ")]
    assert len(prefill.samples_tok_s) == len(trials) == int(prefill.settings["trials"])
    assert abs(sum(decode.samples_tok_s) / len(trials) - decode.tok_s) < 0.002
    assert prefill.test == f"pp{prefill.n_prompt}" and decode.test == f"tg{decode.n_gen}"
    assert prefill.model is None  # mlx_lm.benchmark never names its model: orch import --model does


def test_mlx_lm_benchmark_cut_short_is_refused_at_its_last_trial(tmp_path: Path) -> None:
    lines = MLX.read_text().splitlines()
    cut = tmp_path / "cut.txt"
    cut.write_text("\n".join(line for line in lines if not line.startswith("Averages")) + "\n")
    err = located(cut)
    last_trial = max(i for i, line in enumerate(lines, 1) if line.startswith("Trial "))
    assert err.line == last_trial and "Averages" in err.what
    edited = tmp_path / "edited.txt"
    edited.write_text(MLX.read_text().replace("Averages: prompt_tps=", "Averages: prompt_tps=9"))
    assert "not the mean" in located(edited).what


def test_litert_lm_benchmark_gives_prefill_and_decode() -> None:
    fmt, rows = parse_file(LITERT)
    assert fmt == "litert-lm" and [r.phase for r in rows] == ["prefill", "decode"]
    text = LITERT.read_text().splitlines()
    for r in rows:
        assert text[r.line - 1].startswith("Prefill speed" if r.phase == "prefill" else "Decode speed")
        assert f"{r.tok_s:.2f}" in text[r.line - 1]
    assert rows[0].settings["backend"]


def test_litert_lm_missing_model_is_a_failed_run_not_a_zero_row() -> None:
    """LiteRT-LM prints "Could not find" and exits 0 (captured): one failed row, located, with no speed."""
    assert detect(LITERT_MISSING.read_text(), "x") == "litert-lm"
    fmt, (row, *more) = parse_file(LITERT_MISSING)
    assert fmt == "litert-lm" and more == [] and row.failed and row.line == 1
    assert row.failure_kind == "model_not_found" and math.isnan(row.tok_s)
    assert row.failure is not None and "could not find the model" in row.failure and "exited 0" in row.failure
    assert row.model == "no-such-model.litertlm"


def test_litert_lm_error_during_benchmark_is_a_failed_run(tmp_path: Path) -> None:
    # The benchmark's except branch (litert_lm_cli/commands/benchmark.py): the header, then the error and a traceback.
    head = [line for line in LITERT.read_text().splitlines() if ":" in line and "speed" not in line][:4]
    bad = tmp_path / "failed.txt"
    bad.write_text("\n".join([*head, "An error occurred during benchmarking", "Traceback (most recent call last):",
                              '  File "benchmark.py", line 1, in run_benchmark',
                              "RuntimeError: Failed to create engine"]) + "\n")
    _, (row,) = parse_file(bad)
    assert row.failed and row.line == len(head) + 1 and row.failure_kind == "benchmark_error"
    assert row.failure is not None and "Failed to create engine" in row.failure
    # Cut before its results (no failure said, no speeds): refused, as any malformed file.
    cut = tmp_path / "cut.txt"
    cut.write_text("\n".join(LITERT.read_text().splitlines()[:6]) + "\n")
    assert "did not finish" in located(cut).what


def test_cut_or_broken_llama_bench_files_are_refused_at_their_line(tmp_path: Path) -> None:
    text = LLAMA["json"].read_text()
    cut = tmp_path / "cut.json"
    cut.write_text(text[: text.rindex("}") + 1] + ",\n")  # stopped after its last test, before "]"
    err = located(cut)
    assert err.line == len(cut.read_text().splitlines()) + 1 and "ends without ']'" in err.what
    # Captured: llama-bench prints the array's "[" before loading the model, then exits 1.
    missing = located(LLAMA["json"].with_name("llama-bench-missing-model.json"))
    assert missing.line == 2 and "wrote no test" in missing.what
    broken = tmp_path / "broken.jsonl"
    lines = LLAMA["jsonl"].read_text().splitlines()
    broken.write_text("\n".join([lines[0], lines[1][: len(lines[1]) // 2], *lines[2:]]) + "\n")
    assert located(broken).line == 2
    zero = tmp_path / "zero.jsonl"
    obj = json.loads(lines[0]) | {"avg_ts": 0.0}
    zero.write_text(json.dumps(obj) + "\n")
    assert "no measurement" in located(zero).what
    md = tmp_path / "bad.md"
    rows = LLAMA["md"].read_text().splitlines()
    at = next(i for i, line in enumerate(rows) if line.startswith("|") and "±" in line)
    rows[at] = rows[at].replace("±", "+-")
    md.write_text("\n".join(rows) + "\n")
    err = located(md)
    assert err.line == at + 1 and "t/s" in err.what


def test_unrecognised_input_names_the_formats(tmp_path: Path) -> None:
    for text, words in (("", "it is empty"), ("hello\n", "'hello'"), ("build_commit,build_number\n", "-o csv")):
        with pytest.raises(ImportInputError) as info:
            parse_text(text, "f.txt")
        assert words in str(info.value) and str(info.value).startswith("f.txt:1:")


def test_orch_import_writes_marked_rows_once(tmp_path: Path) -> None:
    history = tmp_path / "history"
    files = [str(LLAMA["json"]), str(MLX), str(LITERT)]
    res = runner.invoke(app, ["import", *files, "--history", str(history), "--model", "llama-m110-s0",
                              "--device", "ci-linux", "--json"])
    assert res.exit_code == 0, res.output
    body = json.loads(res.stdout)  # one document, as every command's --json (report/machine.py)
    assert list(body) == ["schema", "version", *DOCUMENTS["import"]] and list(body["rows"][0]) == [*COLUMNS, "night"]
    assert body["schema"] == "orch.import" and [f["source_format"] for f in body["files"]] == [
        "llama-bench", "mlx-lm", "litert-lm"]
    rows = load(history)
    assert list(rows.columns) == [*COLUMNS, "night"] and len(rows) == len(body["rows"]) == sum(
        f["rows"] for f in body["files"])
    assert (rows["origin"] == "imported").all() and not rows["interleaved"].any()
    assert not rows["settled"].any() and not rows["decision_grade"].any()
    assert set(rows["device"]) == {"ci-linux"} and set(rows["model"]) == {"llama-m110-s0"}
    assert (rows["tok_s"] > 0).all()
    again = runner.invoke(app, ["import", *files, "--history", str(history), "--model", "llama-m110-s0",
                                "--device", "ci-linux"])
    assert again.exit_code == 0, again.output
    assert len(load(history)) == len(rows)  # the same files again: the same rows, not a second copy


def test_one_bad_file_refuses_the_whole_import(tmp_path: Path) -> None:
    history = tmp_path / "history"
    missing = LLAMA["json"].with_name("llama-bench-missing-model.json")  # llama-bench exited 1: a cut file
    res = runner.invoke(app, ["import", str(LLAMA["md"]), str(LITERT_MISSING), str(missing),
                              str(tmp_path / "absent.json"), "--history", str(history)])
    assert res.exit_code == 2
    assert f"{missing}:2: " in res.output and "wrote no test" in res.output
    assert f"{tmp_path / 'absent.json'}:0: no such file" in res.output and "nothing imported" in res.output
    assert str(LITERT_MISSING) not in res.output  # a failed run is no malformed file
    assert not history.exists()
    forced = runner.invoke(app, ["import", str(MLX), "--format", "llama-bench", "--history", str(history)])
    assert forced.exit_code == 2 and "not a llama-bench output" in forced.output


def test_a_failed_run_is_kept_as_failed_and_never_counts_as_a_measurement(tmp_path: Path) -> None:
    from orchestrator.report.site_imports import failures, series

    history = tmp_path / "history"
    res = runner.invoke(app, ["import", str(LITERT), str(LITERT_MISSING), "--history", str(history),
                              "--device", "pixel", "--json"])
    assert res.exit_code == 0, res.output
    body = json.loads(res.stdout)
    assert [(r["status"], r["failure_kind"]) for r in body["rows"]] == [("ok", None), ("ok", None),
                                                                        ("failed", "model_not_found")]
    rows = load(history)
    bad = rows[rows["status"] == "failed"]
    assert len(bad) == 1 and bad["tok_s"].isna().all() and bad["source_line"].tolist() == [1]
    assert (rows.loc[rows["status"] == "ok", "tok_s"] > 0).all()
    # The site's series hold the measurements only; the failed run is listed as failed, with no number.
    shown = series(rows)
    ok = rows[rows["status"] == "ok"]
    assert sorted(s["test"] for s in shown) == sorted(ok["test"]) and "benchmark" not in set(ok["test"])
    assert all(s["tok_s"] > 0 and all(t["tok_s"] > 0 for t in s["trend"]) for s in shown)
    (failed,) = failures(rows)
    assert failed["status"] == "failed" and failed["failure_kind"] == "model_not_found"
    assert failed["source_line"] == 1 and "could not find" in failed["failure"]
    alone = runner.invoke(app, ["import", str(LITERT_MISSING), "--history", str(tmp_path / "h2")])
    assert alone.exit_code == 0, alone.output  # imported (as a failed run), not refused
    assert "failed" in alone.output and "model_not_found" in alone.output, "the table says it failed, and how"
    assert load(tmp_path / "h2")["status"].tolist() == ["failed"]


def test_imported_rows_enter_no_rank_alarm_or_verdict(tmp_path: Path) -> None:
    """Rank and the nightly rule read trials/ and nights/; an import changes neither answer."""
    from site_support import make_nights

    from orchestrator.analysis.rank import summarize_history
    from orchestrator.night import summarize
    from orchestrator.results import history as history_db

    results = tmp_path / "results"
    make_nights(tmp_path, results, 1, 2, total=2)
    history = results / "history"
    def answers() -> tuple[pd.DataFrame, ...]:  # each in a fixed order (DuckDB returns trial rows in any)
        trials = history_db.load_trials(history)
        trials = trials.astype({c: str for c in trials.columns if isinstance(trials[c].dtype, pd.CategoricalDtype)})
        assert not trials.duplicated(["run_id", "device", "seq"]).any()  # the order below is total
        return (summarize_history(history), history_db.load_nights(history),
                trials.sort_values(["run_id", "device", "seq"], kind="stable").reset_index(drop=True))

    before = answers()
    rank_args = ["rank", "--history", str(history), "--candidates", str(ROOT / "configs" / "candidates.yaml"),
                 "--ceilings", str(ROOT / "configs" / "ceilings.yaml"), "--json"]
    rank_before = runner.invoke(app, rank_args)
    copy = tmp_path / "imports"
    shutil.copytree(DATA, copy)
    # Labelled as the nightly series' own model and device, so a leak would land in their groups.
    res = runner.invoke(app, ["import", *map(str, sorted(copy.glob("llama-bench.*"))), str(copy / MLX.name),
                              "--history", str(history), "--device", "iphone17pro", "--model",
                              str(before[2]["model"].iloc[0])])
    assert res.exit_code == 0, res.output
    assert len(load(history)) > 0
    after = answers()
    for b, a in zip(before, after, strict=True):
        pd.testing.assert_frame_equal(b, a)
    assert runner.invoke(app, rank_args).stdout == rank_before.stdout
    summary = summarize(history, "2026-11-02", [("nightly-decode", "iphone17pro")], {})
    assert set(summary.tonight["run_id"]) <= set(before[1]["run_id"])
