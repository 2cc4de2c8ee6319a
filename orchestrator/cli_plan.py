"""`orch plan size`: how many launches a plan needs, before the run. Parse, call analysis.sizing, print.

Exit codes: 0 the plan reaches its answers, 1 it does not (too few blocks for equivalence), 2 bad input.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated

import typer

from orchestrator.analysis.sizing import noise_of, size
from orchestrator.cli_common import bad_input, err, out
from orchestrator.config.loader import ConfigError, load_plan
from orchestrator.config.plan import Plan
from orchestrator.report.console_analysis import registry_table, sizing_table

plan_app = typer.Typer(no_args_is_help=True, help="Plans before they run.")



@plan_app.command("size")
def plan_size(
    plan: Annotated[Path, typer.Argument(help="Plan file")],
    sigma: Annotated[float | None, typer.Option(min=0.0001, max=0.9999,
                                                help="Launch-to-launch noise: SD of log tok/s (0.06 = 6%)")] = None,
    from_run: Annotated[str | None, typer.Option("--from", help="Read each device's noise from this run "
                                                 "(an aa-calibration, say)")] = None,
    registry: Annotated[bool, typer.Option("--registry", help="Each device's latest noise for the plan's "
                                           "runtime and model from the results folder's noise registry")] = False,
    results: Annotated[Path, typer.Option("--results", help="Where runs live")] = Path("results"),
    effect: Annotated[float, typer.Option(min=0.001, max=0.99, help="The effect to size for (0.05 = 5%)")] = 0.05,
) -> None:
    """Launches per arm the plan needs for a difference of EFFECT and for equivalence, and what its rule does."""
    if sum(x for x in (sigma is not None, from_run is not None, registry)) != 1:
        bad_input("orch plan size needs one of --sigma S, --from RUN or --registry")
    try:
        sized = load_plan(plan)
    except ConfigError as exc:
        bad_input(str(exc))
    if sigma is not None:
        noise = {"--sigma": sigma}
    elif registry:
        noise = _noise_registered(results, sized)
    else:
        noise = _noise_from(results, from_run or "", sized)
    rows = {who: size(sized, s, effect) for who, s in noise.items()}
    out.print(sizing_table(sized, rows, effect))
    short = [who for who, s in rows.items()
             if s.blocks_for_equivalence is None or s.blocks_for_equivalence > sized.blocks]
    if short:
        err.print(f"{', '.join(short)}: {sized.blocks} blocks are too few to show equivalence within "
                  f"±{sized.decision.equivalence_margin:.0%} with probability {sized.decision.power:.0%}; "
                  "see 'blocks needed'", markup=False, highlight=False, soft_wrap=True)
        raise typer.Exit(1)


def _noise_registered(results: Path, plan: Plan) -> dict[str, float]:
    """Per device, the latest registered noise of the plan's baseline runtime on its model, labelled with
    where it comes from, how old it is and how many launches it rests on."""
    from orchestrator.analysis.noise import age_days, entry, latest
    from orchestrator.results.store import read_registry

    now = datetime.now(UTC)
    rows = latest(read_registry(results))
    mine = rows[(rows["runtime"] == plan.arms[0].runtime) & (rows["model"] == plan.model)] if len(rows) else rows
    if not len(mine):
        bad_input(f"{results}: the noise registry holds nothing for {plan.arms[0].runtime} on {plan.model} (an A/A "
                   "run such as configs/plans/aa-calibration.yaml records it)")
    for e in (entry(read_registry(results), str(d), plan.arms[0].runtime, plan.model, now) for d in mine["device"]):
        if e is not None and e.jumped:
            err.print(f"{e.device}: NOISE JUMP: {e.jumped}", markup=False, highlight=False, soft_wrap=True)
    return {f"{r['device']} (run {r['run_id']}, {age_days(str(r['measured_at']), now):.0f} d old, {r['launches']} "
            f"launches)": float(r["sigma"]) for r in mine.to_dict("records")}


@plan_app.command("noise")
def plan_noise(
    results: Annotated[Path, typer.Option("--results", help="Where runs live")] = Path("results"),
    as_json: Annotated[bool, typer.Option("--json", help="One JSON document instead of a table")] = False,
) -> None:
    """The noise registry: each device x runtime x model's latest launch noise (from A/A runs), its age and size."""
    from orchestrator.analysis.noise import age_days, latest
    from orchestrator.results.store import read_registry

    now = datetime.now(UTC)
    rows = latest(read_registry(results))
    if as_json:
        print(json.dumps([{**r, "age_days": round(age_days(str(r["measured_at"]), now), 2)}
                          for r in rows.to_dict("records")], default=str))
        return
    out.print(registry_table(results, rows, now))


def _noise_from(results: Path, run_id: str, plan: Plan) -> dict[str, float]:
    from orchestrator.derive import derive
    from orchestrator.results.store import RunNotFound, RunUnreadable, find_run

    try:
        outcome = derive(find_run(results, run_id))  # the trial table derive wrote (derived once where stale)
    except (RunNotFound, RunUnreadable, OSError) as exc:
        bad_input(str(exc))
    arms = outcome.manifest.plan.arms
    noise = noise_of(outcome.trials, plan.decision, (arms[0].name, arms[1].name))
    if not noise:
        bad_input(f"run {run_id}: no device has both of {arms[0].name!r} and {arms[1].name!r} in a block")
    return noise


def register(app: typer.Typer) -> None:
    """Add `orch plan` to `orch` (idempotent)."""
    if not any(g.name == "plan" for g in app.registered_groups):
        app.add_typer(plan_app, name="plan")
