"""YAML loading that turns every bad input into ``FILE:LINE: field.path: message``.

Every problem names a real line (>= 1): unreadable files and directories at line 1, bytes that are
not UTF-8 at the first bad byte's line, YAML errors at the parser's line (nesting too deep for it
included), values the YAML layer cannot build at their node, schema errors at their key. Strings
holding control characters or lone surrogates are refused wherever they are (they would break a
terminal, a file name or the manifest's JSON), and messages never echo such characters raw.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError
from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq
from ruamel.yaml.constructor import ConstructorError, RoundTripConstructor
from ruamel.yaml.error import MarkedYAMLError
from ruamel.yaml.events import CollectionEndEvent, CollectionStartEvent
from ruamel.yaml.reader import ReaderError

from orchestrator.config.fleet import Fleet
from orchestrator.config.plan import Plan
from orchestrator.protocol import SAFE_ID

M = TypeVar("M", bound=BaseModel)
Loc = tuple[int | str, ...]

MAX_FILE_BYTES = 4 * 2**20  # a fleet of a thousand simulated devices is well under 1 MiB
# C0 and C1 controls but tab, newline and carriage return; lone surrogates (not encodable at all).
_UNSAFE = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\ud800-\udfff]")
_UNPRINTABLE = re.compile(r"[\x00-\x1f\x7f-\x9f\ud800-\udfff]")


def _escaped(text: str) -> str:
    """``text`` with control characters and surrogates as Python escapes: prints safely, on one line."""
    return _UNPRINTABLE.sub(lambda m: m.group().encode("unicode_escape", "backslashreplace").decode("ascii"), text)


@dataclass(frozen=True)
class Problem:
    file: str
    line: int
    field: str
    message: str

    def __post_init__(self) -> None:
        for name in ("file", "field", "message"):
            object.__setattr__(self, name, _escaped(getattr(self, name)))

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: {self.field}: {self.message}" if self.field else (
            f"{self.file}:{self.line}: {self.message}"
        )


class ConfigError(Exception):
    """One or more located problems with input files. The CLI prints them and exits 2."""

    def __init__(self, problems: Sequence[Problem]):
        self.problems = list(problems)
        super().__init__("\n".join(str(p) for p in self.problems))


def _shown(path: Path) -> str:
    """The path as printed: the bytes of a file name that is not UTF-8 as escapes."""
    name = str(path)
    return name.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace") if _UNSAFE.search(name) else name


class _Constructor(RoundTripConstructor):
    """Round-trip construction that locates what it cannot build (a 5,000-digit int, a bad date)."""

    def construct_object(self, node: Any, deep: bool = False) -> Any:
        try:
            return super().construct_object(node, deep)
        except (MarkedYAMLError, RecursionError):
            raise
        except Exception as exc:
            why = str(exc).split(";")[0]
            raise ConstructorError(problem=f"cannot read this value: {why}", problem_mark=node.start_mark) from None


MAX_DEPTH = 64  # a fleet or plan nests a handful of levels; far deeper is not one (and is slow to compose)


def _deepest(text: str, stop: int | None = None) -> tuple[int, int]:
    """(line, depth) of the most deeply nested collection (the first past `stop`, if given); YAML's
    parser does not recurse, its composer does."""
    depth, deepest, line = 0, 0, 1
    try:
        for event in YAML(typ="rt").parse(text):
            if isinstance(event, CollectionStartEvent):
                depth += 1
                if depth > deepest:
                    deepest, line = depth, event.start_mark.line + 1
                    if stop is not None and deepest > stop:
                        break
            elif isinstance(event, CollectionEndEvent):
                depth -= 1
    except Exception:  # a syntax error after the deep part: what was seen up to it
        pass
    return line, deepest


def read_yaml(path: Path) -> Any:
    file = _shown(path)

    def fail(line: int, message: str) -> ConfigError:
        return ConfigError([Problem(file, max(line, 1), "", message)])

    if file != str(path):
        raise fail(1, "the file name is not UTF-8 (a run records it): rename the file")
    try:
        if path.is_dir():
            raise fail(1, "is a directory, not a fleet or plan file")
        with path.open("rb") as f:
            raw = f.read(MAX_FILE_BYTES + 1)
    except (OSError, ValueError) as exc:
        raise fail(1, f"cannot read: {getattr(exc, 'strerror', None) or exc}") from None
    if len(raw) > MAX_FILE_BYTES:
        raise fail(1, f"larger than {MAX_FILE_BYTES // 2**20} MiB: not a fleet or plan file")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        raise fail(line, f"not UTF-8: byte 0x{raw[exc.start]:02x} ({exc.reason})") from None
    line, depth = _deepest(text, stop=MAX_DEPTH)
    if depth > MAX_DEPTH:
        raise fail(line, f"YAML: nested too deeply (more than {MAX_DEPTH} levels)")
    yaml = YAML(typ="rt")
    yaml.Constructor = _Constructor
    try:
        return yaml.load(text)
    except MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        msg = " ".join(str(s) for s in (exc.context, exc.problem) if s)
        raise fail(mark.line + 1 if mark is not None else 1, f"YAML: {msg}") from None
    except ReaderError as exc:
        what = f"U+{exc.character:04X}" if isinstance(exc.character, int) else repr(exc.character)
        line = text.count("\n", 0, exc.position) + 1
        raise fail(line, f"YAML: character {what} is not allowed ({exc.reason})") from None
    except RecursionError:
        line, depth = _deepest(text)
        raise fail(line, f"YAML: nested too deeply ({depth} levels)") from None
    except Exception as exc:  # anything else ruamel raises without a position
        raise fail(1, f"YAML: {exc}") from None


def _locate(root: Any, loc: Sequence[int | str], *, missing: bool = False) -> tuple[int, str]:
    """Follow a pydantic error location through the YAML tree: (1-based line, dotted path).

    A location below what the file holds (a ``missing`` field) keeps its name and the parent's line.
    The names pydantic gives union members (`float`, `constrained-int`, `dict[...]`) are not keys of
    the file and are left out of the path.
    """
    node, line, parts = root, 1, []
    for i, key in enumerate(loc):
        if isinstance(node, CommentedMap) and key not in node and node.get("kind") == key:
            continue  # the tag of a discriminated union, not a key of the file
        if isinstance(node, CommentedMap) and key in node:
            line, node = node.lc.key(key)[0] + 1, node[key]
        elif isinstance(node, CommentedSeq) and isinstance(key, int) and 0 <= key < len(node):
            line, node = node.lc.item(key)[0] + 1, node[key]
        elif isinstance(key, str) and node is not None and not (missing and i == len(loc) - 1):
            continue  # a union member's name, not a key: only a missing field ends a location off the file
        else:
            node = None
        parts.append(f"[{key}]" if isinstance(key, int) else str(key))
    return line, ".".join(parts).replace(".[", "[")


def _unsafe_strings(root: Any) -> list[tuple[Loc, str]]:
    """Where strings (keys and values, at any depth) hold control characters or lone surrogates."""
    found: list[tuple[Loc, str]] = []
    seen: set[int] = set()
    stack: list[tuple[Loc, Any]] = [((), root)]
    while stack:
        loc, node = stack.pop()
        if isinstance(node, bytes):
            found.append((loc, "binary data (!!binary) is not allowed"))
        elif isinstance(node, str):
            if bad := _UNSAFE.search(node):
                what = "a lone surrogate" if "\ud800" <= bad.group() <= "\udfff" else "a control character"
                found.append((loc, f"text holds {what} ({_escaped(bad.group())}): not allowed"))
        elif id(node) in seen:  # anchors and aliases: each collection once, cycles included
            continue
        elif isinstance(node, dict):
            seen.add(id(node))
            for key, value in node.items():
                if isinstance(key, str) and _UNSAFE.search(key):
                    found.append(((*loc, key), "key holds a control character or a lone surrogate: not allowed"))
                stack.append(((*loc, key), value))
        elif isinstance(node, list):
            seen.add(id(node))
            stack.extend(((*loc, i), value) for i, value in enumerate(node))
        elif isinstance(node, set | frozenset | tuple):
            seen.add(id(node))
            stack.extend((loc, value) for value in node)
    return sorted(found, key=lambda f: _locate(root, f[0])[0])


def _message(err: Any) -> str:
    if err["type"] == "extra_forbidden":
        return "unknown field"
    if err["type"] == "string_pattern_mismatch" and err.get("ctx", {}).get("pattern") == SAFE_ID:
        return "not a name: letters, digits and _ . - only, not starting with . or -"
    return str(err["msg"]).removeprefix("Value error, ")


def validate(path: Path, data: Any, model: type[M]) -> M:
    file = _shown(path)
    if not isinstance(data, CommentedMap):
        raise ConfigError([Problem(file, 1, "", f"expected a mapping at the top of a {model.__name__} file")])
    problems = [Problem(file, *_locate(data, loc), why) for loc, why in _unsafe_strings(data)]
    try:
        result = model.model_validate(data)
    except ValidationError as exc:
        problems += [Problem(file, *_locate(data, err["loc"], missing=err["type"] == "missing"), _message(err))
                     for err in exc.errors(include_url=False)]
    if problems:
        raise ConfigError(list(dict.fromkeys(problems)))  # union members can repeat one complaint
    return result


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
    raise ConfigError([Problem(_shown(path), 1, "", "not a fleet (has `devices`) or a plan (has `arms`)")])


def key_line(path: Path, *loc: int | str) -> int:
    """Line of a field in a file already validated: for problems found across files."""
    return _locate(read_yaml(path), loc)[0]
