"""`orch audit | rank | nightly | export-tuning | report | publish | import`: what the runs are for. Parse, call, print.

Exit codes: 0 ok, 1 nightly alarm, 2 bad input, 3 the machine refused or the night failed (one line says why).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import pandas as pd
import typer
from rich.table import Table
from rich.text import Text

from orchestrator.cli_common import DEFAULT_CEILINGS, Results, bad_input, err, out
from orchestrator.config.candidates import CeilingTable
from orchestrator.config.loader import ConfigError
from orchestrator.derive import RunOutcome
from orchestrator.report.console import frame_table
from orchestrator.results.store import RunDir, RunNotFound, find_run

Ceilings = Annotated[Path, typer.Option("--ceilings", help="Bandwidth ceilings per chip class")]


class Format(StrEnum):
    table = "table"
    csv = "csv"
    json = "json"


AsJson = Annotated[bool, typer.Option("--json", help="One JSON document (the --format csv column names)")]


def _document(command: str, dest: Path | None, **fields: Any) -> None:
    from orchestrator.report.machine import document

    text = document(command, **fields)
    if dest is None:
        print(text, end="")
    else:
        dest.write_text(text)
        err.print(f"wrote {dest}")


def records(frame: pd.DataFrame) -> list[dict[str, Any]]:
    from orchestrator.report.machine import records as rows

    return rows(frame)



def _run(results: Path, run: str) -> RunDir:
    """A run by its id under --results (a run elsewhere: --results its parent folder)."""
    try:
        return find_run(results, run)
    except RunNotFound as exc:
        bad_input(str(exc))


def _derived(run: RunDir, ceilings: CeilingTable | None = None) -> RunOutcome:
    """The run's tables as derive wrote them (derived first where the journal changed since); refused when
    no trial finished."""
    from orchestrator.derive import derive

    outcome = derive(run, ceilings)
    trials = outcome.trials
    if not len(trials) or not (trials["status"] == "ok").any():
        bad_input(f"run {run.run_id} has no finished trials ({len(trials)} failed): nothing to analyse")
    return outcome


def _ceilings(path: Path) -> CeilingTable:
    from orchestrator.config.candidates import load_ceilings

    try:
        return load_ceilings(path)
    except ConfigError as exc:
        bad_input(str(exc))


def _emit(frame: pd.DataFrame, fmt: Format, dest: Path | None, table: Table) -> None:
    if fmt is Format.table:
        out.print(table)
        return
    text = frame.to_csv(index=False) if fmt is Format.csv else json.dumps(
        json.loads(frame.to_json(orient="records")), indent=2) + "\n"
    if dest is None:
        print(text, end="")
    else:
        dest.write_text(text)
        err.print(f"wrote {dest}")


def audit_cmd(
    run: Annotated[str, typer.Argument(help="Run id (under --results)")],
    results: Results = Path("results"),
    ceilings: Ceilings = DEFAULT_CEILINGS,
    fmt: Annotated[Format, typer.Option("--format")] = Format.table,
    dest: Annotated[Path | None, typer.Option("--out", help="Write CSV/JSON here instead of stdout")] = None,
    as_json: AsJson = False,
) -> None:
    """Effective GB/s vs the bandwidth ceiling per device and arm; the prefill view by chunk width."""
    from orchestrator.report.console_analysis import audit_view

    run_dir = _run(results, run)
    outcome = _derived(run_dir, _ceilings(ceilings))
    trials, manifest, frame = outcome.trials, outcome.manifest, outcome.audit
    if as_json:
        _document("audit", dest, run_id=run_dir.run_id, rows=records(frame))
        return
    if fmt is not Format.table:
        _emit(frame, fmt, dest, Table())
        return
    for part in audit_view(run_dir.run_id, manifest.plan.model, trials, frame, outcome.prefill):
        out.print(part, highlight=False, soft_wrap=isinstance(part, Text))


def rank_cmd(
    runs: Annotated[list[str] | None, typer.Argument(help="Run ids (under --results)")] = None,
    candidates: Annotated[Path, typer.Option("--candidates", help="Candidate table")] = Path(
        "configs/candidates.yaml"),
    results: Results = Path("results"),
    ceilings: Ceilings = DEFAULT_CEILINGS,
    history: Annotated[Path | None, typer.Option("--history", help="Also join a nightly history dataset")] = None,
    fmt: Annotated[Format, typer.Option("--format")] = Format.table,
    dest: Annotated[Path | None, typer.Option("--out", help="Write CSV/JSON here instead of stdout")] = None,
    as_json: AsJson = False,
) -> None:
    """Re-rank the candidate table with measured runs: measured vs expected, audit headroom, gates."""
    from orchestrator.analysis.rank import empty_observations, observations, rank, rank_summary, summarize_history
    from orchestrator.config.candidates import load_candidates, load_ceilings
    from orchestrator.results.trials import excluded_words

    try:
        table, ceil = load_candidates(candidates), load_ceilings(ceilings)
    except ConfigError as exc:
        bad_input(str(exc))
    frames = [empty_observations()]
    for r in runs or []:
        outcome = _derived(_run(results, r))
        frames.append(observations(outcome.trials, outcome.manifest))
    if history is not None and not (history / "trials").is_dir():
        bad_input(f"no nightly history under {history} (expected {history}/trials/night=*/)")
    obs = pd.concat([f for f in frames if len(f)], ignore_index=True) if any(len(f) for f in frames) else frames[0]
    # A history's rows are summarized where they lie (DuckDB over the parquet), with the runs' rows.
    ranked = rank(table, obs, ceil) if history is None else rank_summary(table, summarize_history(history, obs), ceil)
    if as_json:
        _document("rank", dest, candidates=str(candidates), runs=list(runs or []),
                  history=str(history) if history is not None else None, rows=records(ranked))
        return
    _emit(ranked, fmt, dest, frame_table(f"Candidates ({candidates}; {len(runs or [])} run(s) joined)", ranked, {
        "rank": "d", "seed_rank": "d", "target": "", "gate_status": "", "current_tok_s": ".1f", "current_source": "",
        "expected_tok_s": ".1f", "gain": ".2f", "audit_ratio": ".0%", "audit_bound_tok_s": ".1f",
        "audit_reading": "",
    }))
    if fmt is Format.table and (words := excluded_words(obs)) is not None:
        out.print(words, markup=False, highlight=False)
    if fmt is Format.table and table.non_candidates:
        out.print("Non-candidates: " + "; ".join(f"{n.target}: {n.reason}" for n in table.non_candidates),
                  highlight=False)


def nightly_cmd(
    fleet: Annotated[Path | None, typer.Option(help="Fleet file")] = None,
    plan: Annotated[list[Path] | None, typer.Option(help="Nightly plan (repeat: one config each)")] = None,
    reference: Annotated[str | None, typer.Option(help="The pinned reference build")] = None,
    candidate: Annotated[str | None, typer.Option(help="Tonight's candidate build")] = None,
    night: Annotated[str | None, typer.Option(help="Night label (default: today, UTC)")] = None,
    resume: Annotated[list[str] | None, typer.Option(help="Finish an interrupted night's run (repeat)")] = None,
    results: Results = Path("results"),
    history: Annotated[Path | None, typer.Option(help="History dataset (default RESULTS/history)")] = None,
    junit: Annotated[Path | None, typer.Option(help="JUnit XML (default RESULTS/nightly/NIGHT/junit.xml)")] = None,
    summary: Annotated[Path | None, typer.Option(help="Markdown summary (default .../summary.md)")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Tonight's verdicts as one JSON document on stdout (the "
                                                         "run ids go to stderr)")] = False,
) -> None:
    """Tonight's candidate vs the pinned reference, interleaved per device; exit 1 on a tok/s regression alarm.

    Prints each run's id, and the command that finishes the night, before the first trial.

    Exit codes: 0 no alarm; 1 alarm; 2 bad input (nothing run or written); 130 interrupted (resume it);
    3 the night failed: one line says why; junit.xml and summary.md say it did not finish (resume it).
    """
    from orchestrator.night import resume_command, run_night
    from orchestrator.results.history_store import NightlyInputError

    night = night or datetime.now(UTC).strftime("%Y-%m-%d")
    again: list[str] = []  # the command that finishes this night, once its runs exist
    written: list[Path] = []  # the night's final reports, once written

    shown: set[str] = set()

    def started(run_ids: list[str]) -> None:  # again when a same-night confirmation adds runs: those are new
        again.append(resume_command(run_ids, night=night, results=results, history=history or results / "history",
                                    junit=junit, summary_md=summary))
        for run_id in [r for r in run_ids if r not in shown]:
            shown.add(run_id)
            (err if as_json else out).print(f"run {run_id}  (resume with: {again[-1]})", markup=False,
                                            highlight=False, soft_wrap=True)

    try:
        outcome = asyncio.run(run_night(
            fleet, plan or [], reference=reference, candidate=candidate, night=night, results=results,
            history=history or results / "history", junit=junit, summary_md=summary, resume=resume,
            on_start=started, say=lambda line: (err if as_json else out).print(
                line, markup=False, highlight=False, soft_wrap=True),
        ))
        written.append(outcome.junit_path)
        s = outcome.summary
        if as_json:
            missing = [{"config": c, "device": d, "why": w} for c, d, w in s.missing]
            _document("nightly", None, night=night, alarmed=s.alarmed, run_ids=outcome.run_ids,
                      tonight=records(s.tonight), missing=missing, changes=records(s.changes),
                      junit=str(outcome.junit_path), summary=str(outcome.summary_path))
        else:
            from orchestrator.report.console_analysis import night_view

            for part in night_view(s, outcome.run_ids, outcome.junit_path, outcome.summary_path):
                out.print(part, highlight=False, soft_wrap=isinstance(part, Text))
    except (ConfigError, NightlyInputError, RunNotFound) as exc:
        bad_input(str(exc))
    except KeyboardInterrupt:
        err.print("interrupted: the journal is intact." + (f" Finish the night with: {again[-1]}" if again else ""),
                  markup=False, highlight=False, soft_wrap=True)
        raise typer.Exit(130) from None
    except Exception as exc:  # never exit 1 here: 1 means alarm
        said = " ".join(str(exc).split()) or "-"
        where = summary or results / "nightly" / night / "summary.md"
        err.print(f"nightly failed: {type(exc).__name__}: {said}" + (
            f" (after the night's reports were written: {written[0]})" if written else
            f" (traceback in {where}; finish the night with: {again[-1]})" if again else ""),
            markup=False, highlight=False, soft_wrap=True)
        raise typer.Exit(3) from None
    if s.alarmed:
        err.print("ALARM: tok/s regression (see above)")
        raise typer.Exit(1)


def export_tuning_cmd(
    run: Annotated[str, typer.Argument(help="A sweep run: its id (under --results)")],
    dest: Annotated[Path, typer.Option("--out", help="Harness tuning JSON (one chip class; else FILE.<chip>.json)")],
    results: Results = Path("results"),
) -> None:
    """Per chip class, the sweep's best configuration (default/simplest among ties) as `harness run --tuning` JSON."""
    from orchestrator.analysis import tuning

    run_dir = _run(results, run)
    outcome = _derived(run_dir)
    try:
        evidence = tuning.choose(outcome.trials, outcome.manifest)
    except tuning.TuningInputError as exc:
        bad_input(str(exc))
    paths = tuning.write(evidence, dest)
    out.print(frame_table(f"Tuning from {run_dir.run_id} (chosen per chip class)", evidence, {
        "chip_class": "", "arm": "", "params": "", "chosen": "", "median_tok_s": ".2f", "ci_low": ".2f",
        "ci_high": ".2f", "n_trials": "d", "ratio_to_best": ".3f", "p_vs_best": ".4f", "reason": "",
    }))
    for p in paths:
        out.print(f"wrote {p}", highlight=False)


def report_cmd(
    run: Annotated[str, typer.Argument(help="Run id (under --results)")],
    results: Results = Path("results"),
    dest: Annotated[Path | None, typer.Option("--out", help="Directory (default RESULTS/RUN/report)")] = None,
    ceilings: Ceilings = DEFAULT_CEILINGS,
    history: Annotated[Path | None, typer.Option(help="Nightly history (default RESULTS/history if present)")] = None,
) -> None:
    """One self-contained HTML report (charts embedded, opens offline) plus markdown; failures included."""
    from orchestrator.derive import derive
    from orchestrator.report.html import render

    run_dir = _run(results, run)
    table = _ceilings(ceilings) if ceilings.exists() else None
    if not run_dir.journal_path.exists():
        bad_input(f"run {run_dir.run_id} has no journal yet: nothing to report")
    outcome = derive(run_dir, table)  # read back where derive wrote it for this journal; derived once where not
    hist = history if history is not None else results / "history"
    for path in render(outcome, dest or run_dir.path / "report", hist if hist.is_dir() else None):
        out.print(f"wrote {path}", highlight=False)


def publish_cmd(
    dest: Annotated[Path, typer.Option("--out", help="The site's folder (created; updated in place)")],
    results: Results = Path("results"),
    history: Annotated[Path | None, typer.Option(help="Nightly history (default RESULTS/history if present)")] = None,
    ceilings: Ceilings = DEFAULT_CEILINGS,
) -> None:
    """A static site of every run and the nightly history: open SITE/index.html (offline, file:// or a server)."""
    from orchestrator.report.site import publish

    if not results.is_dir():
        bad_input(f"no results folder {results} (orch run and orch nightly write there; --results DIR)")
    if history is not None and not history.is_dir():
        bad_input(f"no nightly history under {history} (expected {history}/nights/night=*/)")
    table = _ceilings(ceilings) if ceilings.exists() else None
    hist = history if history is not None else results / "history"
    outcome = publish(results, hist if hist.is_dir() else None, dest, table)
    for run_id in outcome.skipped_runs:
        err.print(f"run {run_id} could not be read: left out (the index says why)", markup=False, highlight=False)
    out.print(f"{len(outcome.written)} file(s) written, {outcome.unchanged} up to date; open "
              f"{outcome.index.resolve().as_uri()}", markup=False, highlight=False, soft_wrap=True)


class ImportFormat(StrEnum):
    auto = "auto"
    llama_bench = "llama-bench"
    mlx_lm = "mlx-lm"
    litert_lm = "litert-lm"


def import_cmd(
    files: Annotated[list[Path], typer.Argument(help="llama-bench -o json|jsonl|md, mlx_lm.benchmark or litert-lm "
                                                     "benchmark output files")],
    fmt: Annotated[ImportFormat, typer.Option("--format", help="Which tool printed them (auto: by content)")] = (
        ImportFormat.auto),
    history: Annotated[Path, typer.Option(help="History dataset")] = Path("results/history"),
    model: Annotated[str | None, typer.Option(help="The model (mlx-lm names none; overrides a file's)")] = None,
    device: Annotated[str | None, typer.Option(help="The device measured (overrides llama-bench's CPU name)")] = None,
    as_json: AsJson = False,
) -> None:
    """Bring other tools' results into a history, marked imported: shown apart, never in an alarm, verdict or rank."""
    from orchestrator.results.imports import ImportRefused, import_files

    try:
        done = import_files(files, history, lambda: datetime.now(UTC), fmt.value, model, device)
    except ImportRefused as exc:  # one line per bad file (grep-able), then what became of the rest
        err.print(f"{exc}\nnothing imported", markup=False, highlight=False, soft_wrap=True)
        raise typer.Exit(2) from None
    rows = pd.concat([f.rows for f in done], ignore_index=True)
    if as_json:
        _document("import", None, history=str(history), files=[
            {"source_file": f.source_file, "source_format": f.source_format, "import_id": f.import_id,
             "rows": len(f.rows), "written": [str(p) for p in f.written]} for f in done], rows=records(rows))
        return
    out.print(frame_table(f"Imported into {history} (not interleaved, not settled: never decision-grade)", rows, {
        "source_file": "", "source_line": "d", "source_format": "", "model": "", "device": "", "test": "",
        "status": "", "failure_kind": "", "tok_s": ".2f", "tok_s_stddev": ".2f", "night": ""}))


COMMANDS: dict[str, Callable[..., None]] = {"audit": audit_cmd, "rank": rank_cmd, "nightly": nightly_cmd,
                                             "export-tuning": export_tuning_cmd, "report": report_cmd,
                                             "publish": publish_cmd, "import": import_cmd}


def register(app: typer.Typer) -> None:
    """Add the analysis commands to `orch` (idempotent)."""
    have = {c.name for c in app.registered_commands}
    for name, fn in COMMANDS.items():
        if name not in have:
            app.command(name)(fn)
