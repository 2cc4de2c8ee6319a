"""What every command module shares: the consoles, how a command refuses (one line on stderr, exit 2 for
bad input), and the options several commands take."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, NoReturn

import typer
from rich.console import Console

# A terminal gets its own width; a pipe or a file gets lines wide enough for the tables.
out = Console(width=None if Console().is_terminal else 200)
err = Console(stderr=True, width=None if Console().is_terminal else 200)

Results = Annotated[Path, typer.Option("--results", help="Where runs live")]


def fail(message: str, code: int) -> NoReturn:
    err.print(message, markup=False, highlight=False, soft_wrap=True)  # one problem, one line (grep-able)
    raise typer.Exit(code)


def bad_input(message: str) -> NoReturn:
    fail(message, 2)
