"""Other tools' benchmark results, brought into a history beside orch's own (``orch import``).

One module per tool: ``llama_bench`` (its -o json, -o jsonl and markdown outputs), ``mlx_lm``
(``python -m mlx_lm.benchmark``), ``litert_lm`` (``litert-lm benchmark``). ``detect`` tells them
apart by content. ``store`` writes the rows to ``HISTORY/imported/`` and reads them back.

What an imported number is: that tool's own average over its own repetitions, taken without a
settle gate, without interleaving and without a fresh process per repetition. Such rows are
marked (``origin`` = imported, ``interleaved``, ``settled`` and ``decision_grade`` false) and live
in their own dataset: no nightly alarm, verdict or rank reads them (those read ``trials/`` and
``nights/``); the published site shows them in a section of their own.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from pathlib import Path

from orchestrator.results.imports import litert_lm, llama_bench, mlx_lm
from orchestrator.results.imports._common import ImportInputError, Measurement
from orchestrator.results.imports.store import ImportedFile

__all__ = ["FORMATS", "ImportInputError", "ImportRefused", "ImportedFile", "Measurement", "detect", "import_files",
           "parse_file", "parse_text", "read"]

FORMATS = ("llama-bench", "mlx-lm", "litert-lm")
PARSERS: dict[str, Callable[[str, str], list[Measurement]]] = {
    "llama-bench": llama_bench.parse, "mlx-lm": mlx_lm.parse, "litert-lm": litert_lm.parse,
}


class ImportRefused(ValueError):
    """Files that cannot be imported, each as ``FILE:LINE: what`` on a line of its own."""

    def __init__(self, errors: list[ImportInputError]):
        self.errors = errors
        super().__init__("\n".join(str(e) for e in errors))


def detect(text: str, path: str) -> str:
    """Which tool printed ``text``, by what only that tool prints; a located error when none did."""
    if litert_lm.looks_like(text):
        return "litert-lm"
    if mlx_lm.looks_like(text):
        return "mlx-lm"
    if llama_bench.kind_of(text) is not None:
        return "llama-bench"
    first = next((line.strip() for line in text.splitlines() if line.strip()), "")
    if first.startswith("build_commit,"):
        raise ImportInputError(path, 1, "llama-bench's -o csv is not read: capture it with -o json, -o jsonl or "
                                        "-o md")
    if first.startswith("CREATE TABLE"):
        raise ImportInputError(path, 1, "llama-bench's -o sql is not read: capture it with -o json, -o jsonl or "
                                        "-o md")
    what = f"it begins {first[:60]!r}" if first else "it is empty"
    raise ImportInputError(path, 1, f"not recognised as {', '.join(FORMATS)} output ({what}); name it with --format")


def parse_text(text: str, path: str, fmt: str = "auto") -> tuple[str, list[Measurement]]:
    """The format (detected when ``auto``) and the measurements in ``text`` (read from ``path``)."""
    if fmt != "auto" and fmt not in PARSERS:
        raise ValueError(f"unknown format {fmt!r} (known: auto, {', '.join(FORMATS)})")
    fmt = detect(text, path) if fmt == "auto" else fmt
    return fmt, PARSERS[fmt](text, path)


def read(path: Path) -> str:
    """A file's text, or a located error saying why it cannot be read."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ImportInputError(str(path), 0, "no such file") from None
    except UnicodeDecodeError as exc:
        line = path.read_bytes()[: exc.start].count(b"\n") + 1
        raise ImportInputError(str(path), line, "not UTF-8 text (a tool's printed output is)") from None
    except IsADirectoryError:
        raise ImportInputError(str(path), 0, "a folder, not a file") from None
    return text


def parse_file(path: Path, fmt: str = "auto") -> tuple[str, list[Measurement]]:
    return parse_text(read(path), str(path), fmt)


def import_files(paths: list[Path], history: Path, now: Callable[[], datetime], fmt: str = "auto",
                 model: str | None = None, device: str | None = None) -> list[ImportedFile]:
    """Parse every file, then write them all to ``history`` (a bad file: ``ImportRefused`` naming every
    bad one, and nothing is written). ``now`` stamps the import (and dates rows whose file gives no time)."""
    from orchestrator.results.imports import store

    parsed, errors = [], []
    for path in paths:
        try:
            text = read(path)
            parsed.append((path, text, *parse_text(text, str(path), fmt)))
        except ImportInputError as exc:
            errors.append(exc)
    if errors:
        raise ImportRefused(errors)
    stamp = now()
    out = []
    for path, text, found, measurements in parsed:
        ident = store.import_id(text.encode(), found, {"model": model, "device": device})
        frame = store.rows(measurements, ident=ident, source_file=str(path), imported=stamp, model=model,
                           device=device)
        out.append(ImportedFile(str(path), found, ident, frame, ()))
    return [ImportedFile(f.source_file, f.source_format, f.import_id, f.rows, store.write(history, f.rows))
            for f in out]
