"""`orch runtimes install | list | prepare | uninstall | gate`: competitor runtimes in their own
environments, here or on a fleet's hosts, and the token gate of a run. Parse, call, print.

Exit codes: 0 ok, 1 an install, conversion or removal failed, a host was unreachable, or a gate found
a mismatch; 2 bad input.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Annotated

import typer
from rich.progress import BarColumn, Progress, TaskID, TextColumn, TimeElapsedColumn

from orchestrator.cli_common import bad_input, err, out
from orchestrator.report.console import gates_table, runtimes_table, size_words
from orchestrator.results.store import RunNotFound, find_run
from orchestrator.runners import LocalRunner, Runner, RunnerError
from orchestrator.runtimes import catalog
from orchestrator.runtimes.envs import InstallError, disk_used, install, installed_on, uninstall

runtimes_app = typer.Typer(no_args_is_help=True, add_completion=False, help=__doc__)




FleetOpt = Annotated[Path | None, typer.Option("--fleet", help="Fleet file: act on its hosts (default: this machine)")]
HostOpt = Annotated[list[str] | None, typer.Option("--host", help="A fleet host id (repeatable); default: every host "
                                                   "with a host device")]


def _runners(fleet: Path | None, hosts: list[str] | None) -> list[Runner]:
    """This machine, or the chosen hosts of a fleet (SSH hosts over SSH)."""
    from orchestrator.config.loader import ConfigError, load_fleet
    from orchestrator.devices import open_runner

    hosts = hosts or []
    if fleet is None:
        if set(hosts) - {"local"}:
            bad_input(f"--host {', '.join(hosts)} needs --fleet FILE (the file that defines the host)")
        return [LocalRunner()]
    try:
        cfg = load_fleet(fleet)
    except ConfigError as exc:
        bad_input(str(exc))
    known = ["local", *(h.id for h in cfg.hosts)]
    if bad := [h for h in hosts if h not in known]:
        bad_input(f"{fleet}: no host {', '.join(bad)} (hosts: {', '.join(known)})")
    chosen = hosts or sorted({d.host for d in cfg.devices if d.kind == "host"}) or ["local"]
    return [open_runner(cfg, h) for h in chosen]


def _where(name: str, runner: Runner) -> str:
    return name if isinstance(runner, LocalRunner) else f"{name} on {runner.name}"


async def _on_hosts(runners: list[Runner], work: Callable[[Runner], Awaitable[bool]]) -> bool:
    """`work` on every host in turn (each connection closed after); True when any failed or was unreachable."""
    failed = False
    for runner in runners:
        try:
            failed |= not await work(runner)
        except RunnerError as exc:
            failed = True
            err.print(f"{exc}" + (f" ({exc.fix})" if exc.fix else ""), markup=False, highlight=False)
        finally:
            await runner.close()
    return failed


async def _install_one(runner: Runner, name: str, force: bool) -> bool:
    where = _where(name, runner)
    have = await installed_on(runner, name)
    if have and not force:
        versions = ", ".join(f"{k} {v}" for k, v in have.versions.items())
        out.print(f"{where}: installed ({versions})", highlight=False)
        return True
    out.print(f"{where}: installing ({catalog.installable()[name].how})", highlight=False)
    with Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.percentage:>3.0f}%"),
                  TimeElapsedColumn(), console=out, transient=not out.is_terminal) as bar:
        task = bar.add_task(where, total=1.0)
        shown: list[str] = []

        def step(what: str, frac: float, task: TaskID = task) -> None:
            done = max(frac, bar.tasks[0].completed)
            bar.update(task, completed=done, description=f"{where}: {what}")
            # Not a terminal (CI logs, make): one line per phase, and compiling every 10%.
            line = f"{where}: {what}" + (f" {int(done * 10) * 10}%" if what == "compiling" else "")
            if not out.is_terminal and (not shown or shown[-1] != line) and not what.startswith("resolving"):
                shown.append(line)
                out.print(line, highlight=False)

        try:
            got = await install(runner, catalog.installable()[name], step)
        except InstallError as exc:
            err.print(f"{where}: {exc}\n{exc.tail}", markup=False, highlight=False)
            return False
    out.print(f"{where}: installed in {got.seconds:.0f} s", highlight=False)
    return True


@runtimes_app.command("install")
def install_cmd(
    names: Annotated[list[str], typer.Argument(help=f"Runtimes to install: {', '.join(catalog.installable())}")],
    force: Annotated[bool, typer.Option(help="Reinstall even when installed")] = False,
    fleet: FleetOpt = None,
    host: HostOpt = None,
) -> None:
    """Install runtimes into their own environments under the cache folder, here or on a fleet's
    hosts (first use only: installed ones are skipped)."""
    if bad := [n for n in names if n not in catalog.installable()]:
        bad_input(f"cannot install {', '.join(bad)}: installable runtimes are {', '.join(catalog.installable())}")
    async def each(runner: Runner) -> bool:
        return all([await _install_one(runner, name, force) for name in names])

    raise typer.Exit(1 if asyncio.run(_on_hosts(_runners(fleet, host), each)) else 0)


@runtimes_app.command("uninstall")
def uninstall_cmd(
    names: Annotated[list[str], typer.Argument(help=f"Runtimes to remove: {', '.join(catalog.installable())}")],
    fleet: FleetOpt = None,
    host: HostOpt = None,
) -> None:
    """Remove runtimes' environments and their converted models, here or on a fleet's hosts."""
    if bad := [n for n in names if n not in catalog.installable()]:
        bad_input(f"cannot uninstall {', '.join(bad)}: installable runtimes are {', '.join(catalog.installable())}")

    async def each(runner: Runner) -> bool:
        for name in names:
            try:
                freed = await uninstall(runner, name)
            except InstallError as exc:
                err.print(f"{exc}\n{exc.tail}", markup=False, highlight=False)
                return False
            out.print(f"{_where(name, runner)}: removed ({size_words(freed)} freed)" if freed else
                      f"{_where(name, runner)}: not installed", highlight=False)
        return True

    raise typer.Exit(1 if asyncio.run(_on_hosts(_runners(fleet, host), each)) else 0)


async def _list_rows(runner: Runner, rows: list[dict[str, object]]) -> bool:
    """The host's rows, added only once all are known (an unreachable host shows none)."""
    mine: list[dict[str, object]] = []
    for name, entry in catalog.CATALOG.items():
        row: dict[str, object] = {"host": runner.name, "runtime": name, "what": entry.what, "installed": False,
                                  "versions": {}, "disk_bytes": 0}
        if entry.env is not None:
            have = await installed_on(runner, name)
            fleet = "" if isinstance(runner, LocalRunner) else f" --fleet F --host {runner.name}"
            row.update(installed=have is not None, versions=have.versions if have else {},
                       disk_bytes=await disk_used(runner, have.path) if have else 0,
                       install=None if have else f"orch runtimes install {name}{fleet}")
        elif entry.builtin is not None:
            row.update(installed=True, install=entry.builtin)
        else:
            row.update(install="runs on Apple devices (or simulated)")
        mine.append(row)
    rows += mine
    return True


@runtimes_app.command("list")
def list_cmd(
    as_json: Annotated[bool, typer.Option("--json", help="One JSON document instead of a table")] = False,
    fleet: FleetOpt = None,
    host: HostOpt = None,
) -> None:
    """Every runtime a plan can name: installed or not, versions, disk used (here or on a fleet's hosts)."""
    rows: list[dict[str, object]] = []
    failed = asyncio.run(_on_hosts(_runners(fleet, host), lambda runner: _list_rows(runner, rows)))
    if as_json:
        from orchestrator.report.machine import document

        print(document("runtimes", runtimes=rows, failed=failed), end="")
        raise typer.Exit(1 if failed else 0)
    out.print(runtimes_table(rows))
    raise typer.Exit(1 if failed else 0)


@runtimes_app.command("prepare")
def prepare_cmd(
    plan: Annotated[Path, typer.Argument(help="Plan file")],
    fleet: FleetOpt = None,
    host: HostOpt = None,
) -> None:
    """Make every arm's model artifact before a run, here or on a fleet's hosts (conversions cached
    by content), so no trial's launch waits behind a conversion."""
    from orchestrator.config.loader import ConfigError, load_plan
    from orchestrator.runtimes.prepare import prepare_plan

    try:
        cfg = load_plan(plan)
    except ConfigError as exc:
        bad_input(str(exc))

    async def each(runner: Runner) -> bool:
        ok = True
        for arm, message, failed in await prepare_plan(cfg, runner):
            ok &= not failed
            out.print(f"{arm}: {message}", markup=False, highlight=False)
        return ok

    raise typer.Exit(1 if asyncio.run(_on_hosts(_runners(fleet, host), each)) else 0)


@runtimes_app.command("gate")
def gate_cmd(
    run: Annotated[str, typer.Argument(help="Run id (under --results)")],
    results: Annotated[Path, typer.Option("--results", help="Where runs live")] = Path("results"),
) -> None:
    """Token gates of a run, recomputed: each arm's token ids against the numpy reference decoder
    (`orch run` and `orch show` print them too; this writes token_gates.csv afresh). Exit 1 on a mismatch."""
    from orchestrator.analysis.gating import gates_of, mismatched
    from orchestrator.runtimes.gater import Gater

    try:
        run_dir = find_run(results, run)
    except RunNotFound as exc:
        bad_input(str(exc))
    gates = gates_of(run_dir, Gater(), force=True)
    if gates.empty:
        out.print("no real trials with tokens to gate (simulated devices are not gated)")
        return
    out.print(gates_table(gates))
    raise typer.Exit(1 if mismatched(gates) else 0)


def register(app: typer.Typer) -> None:
    """Add `orch runtimes ...` to the main app."""
    app.add_typer(runtimes_app, name="runtimes", help="Competitor runtimes: install, list, prepare, uninstall, "
                  "token gates.")


__all__ = ["register", "runtimes_app"]


if __name__ == "__main__":  # `python -m orchestrator.cli_runtimes ...` works before cli.py registers it
    runtimes_app()
