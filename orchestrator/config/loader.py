"""YAML loading that turns every bad input into ``FILE:LINE: field.path: message``."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError
from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq
from ruamel.yaml.error import MarkedYAMLError

from orchestrator.config.fleet import Fleet
from orchestrator.config.plan import Plan

M = TypeVar("M", bound=BaseModel)


@dataclass(frozen=True)
class Problem:
    file: str
    line: int
    field: str
    message: str

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: {self.field}: {self.message}" if self.field else (
            f"{self.file}:{self.line}: {self.message}"
        )


class ConfigError(Exception):
    """One or more located problems with input files. The CLI prints them and exits 2."""

    def __init__(self, problems: Sequence[Problem]):
        self.problems = list(problems)
        super().__init__("\n".join(str(p) for p in self.problems))


def read_yaml(path: Path) -> Any:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError([Problem(str(path), 0, "", f"cannot read: {exc}")]) from None
    try:
        return YAML(typ="rt").load(text)
    except MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark is not None else 0
        msg = " ".join(str(s) for s in (exc.context, exc.problem) if s)
        raise ConfigError([Problem(str(path), line, "", f"YAML: {msg}")]) from None
    except Exception as exc:  # ruamel raises a few unmarked errors (e.g. bad unicode)
        raise ConfigError([Problem(str(path), 0, "", f"YAML: {exc}")]) from None


def _locate(root: Any, loc: Sequence[int | str]) -> tuple[int, str]:
    """Follow a pydantic error location through the YAML tree: (1-based line, dotted path).

    A location below what the file holds (a missing field) keeps its name and the parent's line.
    """
    node, line, parts = root, 1, []
    for key in loc:
        if isinstance(node, CommentedMap) and key not in node and node.get("kind") == key:
            continue  # the tag of a discriminated union, not a key of the file
        if isinstance(node, CommentedMap) and key in node:
            line, node = node.lc.key(key)[0] + 1, node[key]
        elif isinstance(node, CommentedSeq) and isinstance(key, int) and 0 <= key < len(node):
            line, node = node.lc.item(key)[0] + 1, node[key]
        else:
            node = None
        parts.append(f"[{key}]" if isinstance(key, int) else str(key))
    return line, ".".join(parts).replace(".[", "[")


def validate(path: Path, data: Any, model: type[M]) -> M:
    if not isinstance(data, CommentedMap):
        raise ConfigError([Problem(str(path), 1, "", f"expected a mapping at the top of a {model.__name__} file")])
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        problems = []
        for err in exc.errors(include_url=False):
            line, field = _locate(data, err["loc"])
            msg = err["msg"].removeprefix("Value error, ")
            if err["type"] == "extra_forbidden":
                msg = "unknown field"
            problems.append(Problem(str(path), line, field, msg))
        raise ConfigError(problems) from None


def load_fleet(path: Path) -> Fleet:
    return validate(path, read_yaml(path), Fleet)


def load_plan(path: Path) -> Plan:
    return validate(path, read_yaml(path), Plan)


def load_any(path: Path) -> Fleet | Plan:
    """For `orch validate`: a file with `arms` is a plan, else one with `devices` a fleet."""
    data = read_yaml(path)
    if isinstance(data, CommentedMap) and "arms" in data:
        return validate(path, data, Plan)
    if isinstance(data, CommentedMap) and "devices" in data:
        return validate(path, data, Fleet)
    raise ConfigError([Problem(str(path), 1, "", "not a fleet (has `devices`) or a plan (has `arms`)")])


def key_line(path: Path, *loc: int | str) -> int:
    """Line of a field in a file already validated: for problems found across files."""
    return _locate(read_yaml(path), loc)[0]
