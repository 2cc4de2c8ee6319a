"""`orch runtimes install | list | gate`: competitor runtimes in their own environments, and the
token gate of a run. Parse, call, print.

Exit codes: 0 ok, 1 an install failed (or a gate found a mismatch), 2 bad input.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, NoReturn

import typer
from rich.console import Console
from rich.progress import BarColumn, Progress, TaskID, TextColumn, TimeElapsedColumn
from rich.table import Table

from orchestrator.report.console import gates_table
from orchestrator.results.store import RunDir, RunNotFound, find_run
from orchestrator.runtimes import RUNTIMES
from orchestrator.runtimes.envs import ENVS, InstallError, install, installed

runtimes_app = typer.Typer(no_args_is_help=True, add_completion=False, help=__doc__)
out = Console(width=None if Console().is_terminal else 160)
err = Console(stderr=True, width=None if Console().is_terminal else 160)

BUILTIN = {"rawloop-cpu": "the harness (make -C ios_harness / swift build)", "numpy": "built in (the reference)"}


def _bad_input(message: str) -> NoReturn:
    err.print(message, markup=False, highlight=False)
    raise typer.Exit(2)


def _size(n: int) -> str:
    return f"{n / 1e9:.2f} GB" if n >= 1e9 else f"{n / 1e6:.0f} MB"


@runtimes_app.command("install")
def install_cmd(
    names: Annotated[list[str], typer.Argument(help=f"Runtimes to install: {', '.join(ENVS)}")],
    force: Annotated[bool, typer.Option(help="Reinstall even when installed")] = False,
) -> None:
    """Install runtimes into their own environments under the cache folder (first use only)."""
    if bad := [n for n in names if n not in ENVS]:
        _bad_input(f"cannot install {', '.join(bad)}: installable runtimes are {', '.join(ENVS)}")
    failed = False
    for name in names:
        have = installed(name)
        if have and not force:
            versions = ", ".join(f"{k} {v}" for k, v in have.versions.items())
            out.print(f"{name}: installed ({versions})", highlight=False)
            continue
        out.print(f"{name}: installing ({ENVS[name].how})", highlight=False)
        with Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.percentage:>3.0f}%"),
                      TimeElapsedColumn(), console=out, transient=not out.is_terminal) as bar:
            task = bar.add_task(name, total=1.0)

            shown: list[str] = []

            def step(what: str, frac: float, task: TaskID = task, name: str = name, shown: list[str] = shown) -> None:
                done = max(frac, bar.tasks[0].completed)
                bar.update(task, completed=done, description=f"{name}: {what}")
                # Not a terminal (CI logs, make): one line per phase, and compiling every 10%.
                line = f"{name}: {what}" + (f" {int(done * 10) * 10}%" if what == "compiling" else "")
                if not out.is_terminal and (not shown or shown[-1] != line) and not what.startswith("resolving"):
                    shown.append(line)
                    out.print(line, highlight=False)

            try:
                got = install(name, step)
            except InstallError as exc:
                failed = True
                err.print(f"{name}: {exc}\n{exc.tail}", markup=False, highlight=False)
                continue
        out.print(f"{name}: installed in {got.seconds:.0f} s", highlight=False)
    raise typer.Exit(1 if failed else 0)


@runtimes_app.command("list")
def list_cmd(as_json: Annotated[bool, typer.Option("--json", help="One JSON object per runtime")] = False) -> None:
    """Every runtime a plan can name: installed or not, versions, disk used."""
    rows = []
    for name, what in RUNTIMES.items():
        if name in ENVS:
            have = installed(name)
            rows.append({"runtime": name, "what": what, "installed": have is not None,
                         "versions": have.versions if have else {}, "disk_bytes": have.disk_bytes() if have else 0,
                         "install": None if have else f"orch runtimes install {name}"})
        elif name in BUILTIN:
            rows.append({"runtime": name, "what": what, "installed": True, "versions": {}, "disk_bytes": 0,
                         "install": BUILTIN[name]})
        else:
            rows.append({"runtime": name, "what": what, "installed": False, "versions": {}, "disk_bytes": 0,
                         "install": "runs on Apple devices (or simulated)"})
    if as_json:
        for r in rows:
            out.print(json.dumps(r), markup=False, highlight=False, soft_wrap=True)
        return
    table = Table(title="Runtimes")
    for col in ("runtime", "installed", "versions", "disk", "how"):
        table.add_column(col)
    for r in rows:
        versions = ", ".join(f"{k} {v}" for k, v in dict(r["versions"]).items())  # type: ignore[call-overload]
        disk = _size(int(str(r["disk_bytes"]))) if r["disk_bytes"] else "-"
        table.add_row(str(r["runtime"]), "yes" if r["installed"] else "no", versions or "-", disk,
                      str(r["install"] or r["what"]))
    out.print(table)


@runtimes_app.command("prepare")
def prepare_cmd(plan: Annotated[Path, typer.Argument(help="Plan file")]) -> None:
    """Make every arm's model artifact on this machine before a run (conversions cached by content),
    so no trial's launch waits behind a conversion."""
    import asyncio

    from orchestrator.config.loader import ConfigError, load_plan
    from orchestrator.runtimes.prepare import prepare_plan

    try:
        cfg = load_plan(plan)
    except ConfigError as exc:
        _bad_input(str(exc))
    failed = False
    for arm, outcome in asyncio.run(prepare_plan(cfg)):
        failed |= outcome.startswith("failed")
        out.print(f"{arm}: {outcome}", markup=False, highlight=False)
    raise typer.Exit(1 if failed else 0)


@runtimes_app.command("gate")
def gate_cmd(
    run: Annotated[str, typer.Argument(help="Run id (or its directory)")],
    results: Annotated[Path, typer.Option("--results", help="Where runs live")] = Path("results"),
) -> None:
    """Token gates of a run, recomputed: each arm's token ids against the numpy reference decoder
    (`orch run` and `orch show` print them too; this writes token_gates.csv afresh). Exit 1 on a mismatch."""
    from orchestrator.runtimes.gating import gates_of, mismatched

    try:
        run_dir = RunDir(Path(run)) if (Path(run) / "manifest.json").is_file() else find_run(results, run)
    except RunNotFound as exc:
        _bad_input(str(exc))
    gates = gates_of(run_dir, force=True)
    if gates.empty:
        out.print("no real trials with tokens to gate (simulated devices are not gated)")
        return
    out.print(gates_table(gates))
    raise typer.Exit(1 if mismatched(gates) else 0)


def register(app: typer.Typer) -> None:
    """Add `orch runtimes ...` to the main app."""
    app.add_typer(runtimes_app, name="runtimes", help="Competitor runtimes: install, list, token gates.")


__all__ = ["register", "runtimes_app"]


if __name__ == "__main__":  # `python -m orchestrator.cli_runtimes ...` works before cli.py registers it
    runtimes_app()
