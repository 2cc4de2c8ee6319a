"""What every command module shares: the consoles, how a command refuses (one line on stderr, exit 2 for
bad input), and the options several commands take."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, NoReturn

import typer
from rich.console import Console

from orchestrator.config.candidates import CeilingTable, load_ceilings
from orchestrator.config.loader import ConfigError

# A terminal gets its own width; a pipe or a file gets lines wide enough for the tables.
out = Console(width=None if Console().is_terminal else 200)
err = Console(stderr=True, width=None if Console().is_terminal else 200)

Results = Annotated[Path, typer.Option("--results", help="Where runs live")]


def fail(message: str, code: int) -> NoReturn:
    err.print(message, markup=False, highlight=False, soft_wrap=True)  # one problem, one line (grep-able)
    raise typer.Exit(code)


def bad_input(message: str) -> NoReturn:
    fail(message, 2)


DEFAULT_CEILINGS = Path("configs/ceilings.yaml")


def default_ceilings() -> CeilingTable | None:
    """The lab's ceilings table (configs/ceilings.yaml under the working folder), for the audit a run's derive
    writes; None (no audit table, said on stderr when the file is broken) when there is none."""
    if not DEFAULT_CEILINGS.is_file():
        return None
    try:
        return load_ceilings(DEFAULT_CEILINGS)
    except ConfigError as exc:
        err.print(f"warning: no audit table: {exc}", markup=False, highlight=False)
        return None
