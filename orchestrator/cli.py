"""orch: settled, fresh, interleaved LLM-runtime benchmarks on iPhone, Mac and Linux fleets.

Exit codes: 0 done, 1 a run could not complete (or an alarm / unhealthy device), 2 bad input,
3 the machine refused (a run another orch is writing, a folder that cannot be written, a full disk:
nothing recorded is lost), 130 interrupted.
"""

from __future__ import annotations

import asyncio
import json
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import typer
from typer.core import TyperGroup

from orchestrator import core
from orchestrator.analysis.gating import mismatched
from orchestrator.cli_analysis import register as register_analysis
from orchestrator.cli_common import Results, bad_input, default_ceilings, err, fail, out
from orchestrator.cli_plan import register as register_plan
from orchestrator.cli_runtimes import register as register_runtimes
from orchestrator.cli_twin import register as register_twin
from orchestrator.config import MAX_SEED, MIN_SEED
from orchestrator.config.fleet import Fleet
from orchestrator.config.loader import ConfigError, load_any, load_fleet
from orchestrator.config.plan import Plan
from orchestrator.derive import RunOutcome, derive
from orchestrator.report.console import (
    LiveProgress,
    budget_note,
    class_table,
    devices_table,
    gates_table,
    session_table,
    verdict_table,
)
from orchestrator.results.journal import JournalWriteError
from orchestrator.results.records import EARLY_STOPS
from orchestrator.results.store import TABLES, RunDir, RunLocked, RunNotFound, RunNotWritable, RunUnreadable, find_run
from orchestrator.results.trials import excluded_words, finished_by_device, self_throttled_words

BAD_INPUT = (ConfigError, RunNotFound, RunUnreadable)
REFUSED = (RunLocked, RunNotWritable, JournalWriteError, OSError)


class _Commands(TyperGroup):
    """Every command's refusals end the same way: one line on stderr and the exit code that says
    which kind (2 bad input, 3 the machine refused, 130 interrupted), never a traceback."""

    def invoke(self, ctx: Any) -> Any:
        try:
            return super().invoke(ctx)
        except BAD_INPUT as exc:
            fail(str(exc), 2)
        except REFUSED as exc:
            fail(_oserror(exc) if isinstance(exc, OSError) else str(exc), 3)
        except KeyboardInterrupt:
            fail("interrupted", 130)


def _oserror(exc: OSError) -> str:
    where = f"{exc.filename}: " if exc.filename else ""
    return f"orch: {where}{exc.strerror or exc}"



# The CLI parses, calls orchestrator.core and friends, and prints; no logic lives here.
app = typer.Typer(cls=_Commands, no_args_is_help=True, add_completion=False, help=__doc__)




@app.command()
def run(
    fleet: Annotated[Path | None, typer.Option(help="Fleet file (lab.yaml)")] = None,
    plan: Annotated[Path | None, typer.Option(help="Plan file")] = None,
    results: Results = Path("results"),
    resume: Annotated[str | None, typer.Option(help="Continue a killed run by its id")] = None,
    seed: Annotated[int | None, typer.Option(min=MIN_SEED, max=MAX_SEED, help="Override the plan's seed")] = None,
    accept_device_change: Annotated[bool, typer.Option(
        help="With --resume: continue on devices that now say they are another model, chip, OS or harness")] = False,
) -> None:
    """Run a plan on a fleet: settled, fresh, interleaved trials; verdicts by the plan's rule."""
    if resume is not None:
        if fleet or plan:
            bad_input("--resume takes the fleet and plan from the run's manifest: drop --fleet/--plan")
        run_dir = find_run(results, resume)
    elif accept_device_change:
        bad_input("--accept-device-change goes with --resume RUN_ID")
    else:
        if fleet is None or plan is None:
            bad_input("orch run needs --fleet FILE and --plan FILE (or --resume RUN_ID)")
        fleet_cfg, plan_cfg = core.load_inputs(fleet, plan)
        run_dir = core.start_run(core.new_manifest(fleet_cfg, plan_cfg, fleet, plan, seed), results)
    out.print(f"run {run_dir.run_id}  (resume with: orch run --resume {run_dir.run_id} --results {results})")
    for line in core.noise_notes(run_dir):
        out.print(line, markup=False, highlight=False, soft_wrap=True)
    _execute(run_dir, results, accept_device_change)


def _execute(run_dir: RunDir, results: Path, accept_change: bool = False) -> None:
    manifest = run_dir.manifest()
    again = f"orch run --resume {run_dir.run_id} --results {results}"
    ceilings = default_ceilings()
    try:
        with LiveProgress(out, manifest, finished_by_device(run_dir.records())) as live:
            outcome = asyncio.run(core.execute(run_dir, observe=live.observe, accept_change=accept_change,
                                               ceilings=ceilings))
    except KeyboardInterrupt:
        fail(f"interrupted: the journal is intact. Resume with: {again}", 130)
    except JournalWriteError as exc:
        fail(f"{exc}. Every trial before it is recorded whole; make room, then resume with: {again}", 3)
    _summary(outcome)
    if not outcome.completed:
        err.print("run incomplete: some sessions stopped early (see 'session' above); "
                  f"once what stopped them is fixed or gone, run: orch run --resume {run_dir.run_id}")
        raise typer.Exit(1)


def _summary(outcome: RunOutcome) -> None:
    for warning in outcome.warnings:
        err.print(f"warning: {warning}", markup=False, highlight=False)
    out.print(session_table(outcome.sessions, outcome.manifest))
    for device, reason in outcome.stops.items():
        if reason not in ("completed", *EARLY_STOPS) and device in outcome.details:
            err.print(f"{device}: {reason}: {outcome.details[device]}", markup=False, highlight=False)
    out.print(verdict_table(outcome.verdicts, outcome.manifest, outcome.chips))
    if len(outcome.class_verdicts):
        out.print(class_table(outcome.class_verdicts))
    for words in (excluded_words(outcome.trials), self_throttled_words(outcome.trials)):
        if words is not None:
            out.print(words, markup=False, highlight=False)
    for note in budget_note(outcome.sessions, dict(outcome.stops), outcome.verdicts):
        out.print(note, markup=False, highlight=False)
    files = ", ".join(["journal.jsonl", *(f for f in TABLES.values() if (outcome.run.path / f).exists())])
    if len(outcome.gates):
        out.print(gates_table(outcome.gates))
        if bad := mismatched(outcome.gates):
            err.print(f"token gate mismatch: {', '.join(bad)} decoded other tokens than the reference; "
                      "its speed is not comparable (see the gates above)", markup=False, highlight=False)
    out.print(f"results: {outcome.run.path}/  ({files})")


@app.command()
def show(
    run_id: str,
    results: Results = Path("results"),
    as_json: Annotated[bool, typer.Option("--json", help="One JSON document (trials.parquet and verdicts.csv "
                                                         "columns) instead of tables")] = False,
) -> None:
    """Print a run's summary and verdicts again (the tables derive wrote from its journal)."""
    outcome = derive(find_run(results, run_id))
    if not as_json:
        _summary(outcome)
        return
    from orchestrator.report.machine import document, records

    print(document("show", run_id=outcome.run.run_id, plan=outcome.manifest.plan.name, completed=outcome.completed,
                   stops={d: str(r) for d, r in outcome.stops.items()}, trials=records(outcome.trials),
                   sessions=records(outcome.sessions), verdicts=records(outcome.verdicts),
                   token_gates=records(outcome.gates),
                   warnings=list(outcome.warnings)), end="")


@app.command()
def validate(files: Annotated[list[Path], typer.Argument(help="Fleet and plan files")]) -> None:
    """Check fleet and plan files; every problem as FILE:LINE: field: message. With one fleet, each plan
    is also checked against it (runtimes per device, the model and tuning tables on this machine)."""
    bad = False
    fleets: list[tuple[Path, Fleet]] = []
    plans: list[tuple[Path, Plan]] = []
    for path in files:
        try:
            model = load_any(path)
        except ConfigError as exc:
            err.print(str(exc), markup=False, highlight=False, soft_wrap=True)
            bad = True
            continue
        if isinstance(model, Fleet):
            fleets.append((path, model))
            out.print(f"{path}: ok (fleet, {len(model.devices)} devices)", highlight=False)
        else:
            plans.append((path, model))
            out.print(f"{path}: ok (plan, {len(model.arms)} arms)", highlight=False)
    if len(fleets) == 1:
        for plan_path, plan in plans:
            try:
                core.cross_check(fleets[0][1], plan, fleets[0][0], plan_path)
            except ConfigError as exc:
                err.print(str(exc), markup=False, highlight=False, soft_wrap=True)
                bad = True
    if bad:
        raise typer.Exit(2)


@app.command()
def schema(out_dir: Annotated[Path, typer.Option("--out", help="Directory for the JSON Schemas")]) -> None:
    """Write the fleet and plan JSON Schemas (for editors' YAML completion)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    for name, model in (("fleet", Fleet), ("plan", Plan)):
        path = out_dir / f"{name}.schema.json"
        path.write_text(json.dumps(model.model_json_schema(), indent=2) + "\n")
        out.print(f"wrote {path}")


@app.command()
def devices(
    fleet: Annotated[Path, typer.Option(help="Fleet file")],
    as_json: Annotated[bool, typer.Option("--json", help="One JSON document instead of a table")] = False,
) -> None:
    """Every device of a fleet: health (and the fix), model, chip, OS, harness, thermal state."""
    from orchestrator.report.machine import document

    try:
        fleet_cfg = load_fleet(fleet)
    except ConfigError as exc:
        bad_input(str(exc))
    rows = asyncio.run(core.survey(fleet_cfg))
    if as_json:
        print(document("devices", fleet=str(fleet), devices=[{
            "id": r.id, "kind": r.kind, "host": r.host, "health": r.health.model_dump(mode="json"),
            "info": r.info.model_dump(mode="json") if r.info else None,
            "telemetry": r.telemetry.model_dump(mode="json") if r.telemetry else None,
        } for r in rows]), end="")
    else:
        out.print(devices_table(rows))
    if any(r.health.state != "ok" for r in rows):
        raise typer.Exit(1)


model_app = typer.Typer(no_args_is_help=True, help="Models made locally, deterministically: no downloads.")
app.add_typer(model_app, name="model")


class Arch(StrEnum):
    llama = "llama"


@model_app.command("make")
def model_make(
    size: Annotated[str, typer.Option(help="t1, t2, s15, m110, b1")] = "s15",
    arch: Annotated[Arch, typer.Option(help="Architecture")] = Arch.llama,
    seed: Annotated[int, typer.Option(help="Weights are a function of the seed")] = 0,
    out: Annotated[Path | None, typer.Option(help="Directory (default: the model cache)")] = None,
) -> None:
    """Write a random-weight model as HF safetensors + config and as GGUF (F32, Q8_0, Q4_0)."""
    from orchestrator.models import SIZES, make_model, model_dir

    if size not in SIZES:
        bad_input(f"unknown size {size!r} (known: {', '.join(SIZES)})")
    made = make_model(arch.value, size, seed, out or model_dir(arch.value, size, seed))
    for fmt, path in made.gguf.items():
        print(f"{fmt:5} {path}")
    print(f"hf    {made.safetensors}")


@app.command()
def agent() -> None:
    """Serve this host's devices to a controller: JSON lines on stdin/stdout (started over SSH)."""
    from orchestrator.agent_server import main as serve

    raise typer.Exit(serve())


register_analysis(app)
register_plan(app)
register_runtimes(app)
register_twin(app)


def main() -> None:
    app()
