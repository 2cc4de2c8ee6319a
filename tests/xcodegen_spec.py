"""How XcodeGen reads a project spec: its includes (each one `enable`d or not), `${VAR}` expansion from the
environment, and the additive merge of the included specs under the including one.

XcodeGen is a macOS tool built from packages on GitHub, so it cannot run here; this is its spec loading,
followed line for line from yonaskolb/XcodeGen (commit 8d3d347) Sources/ProjectSpec/SpecFile.swift:
`SpecFile.init(filePath:...)` (load, expand, recurse into the enabled includes), `Include.resolveBoolean`
(a Bool, or a string's `NSString.boolValue`), `Dictionary.expand(variables:)` (an unset variable stays as
written) and `Dictionary.merged(onto:)` (dictionaries merge, arrays append, anything else replaces; a key
ending in `:REPLACE` replaces). Path rewriting of included specs (`relativePaths`) is not followed: the
app's include names no paths. Run as a program (`xcodegen generate` in a spec's folder), it prints the
merged spec of `project.yml` there as JSON, so a test can run the app's generate.sh against it.
"""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Mapping
from functools import reduce
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML

VARIABLE = re.compile(r"\$\{([^}]+)\}")


def expand(value: Any, env: Mapping[str, str]) -> Any:
    """`${NAME}` replaced by the variable where it is set; an unset one is left as written."""
    if isinstance(value, dict):
        return {expand(k, env): expand(v, env) for k, v in value.items()}
    if isinstance(value, list):
        return [expand(v, env) for v in value]
    if isinstance(value, str):
        return VARIABLE.sub(lambda m: env.get(m.group(1), m.group(0)), value)
    return value


def ns_bool(value: Any) -> bool:
    """`NSString.boolValue`: after blanks, a sign and zeros, true on Y, y, T, t or a digit 1-9."""
    if isinstance(value, bool):
        return value
    text = str(value).lstrip(" \t\n").lstrip("+-").lstrip("0")
    return bool(text) and (text[0] in "YyTt" or text[0] in "123456789")


def merged(top: dict[str, Any], base: dict[str, Any]) -> dict[str, Any]:
    """`top.merged(onto: base)`."""
    out = dict(base)
    for key, value in top.items():
        if key.endswith(":REPLACE"):
            out[key[: -len(":REPLACE")]] = value
        elif isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merged(value, out[key])
        elif isinstance(value, list) and isinstance(out.get(key), list):
            out[key] = out[key] + value
        else:
            out[key] = value
    return out


def includes(spec: dict[str, Any]) -> list[tuple[str, bool]]:
    """Each include's path and whether it is enabled (a string is a path, enabled)."""
    raw = spec.get("include")
    items = raw if isinstance(raw, list) else [] if raw is None else [raw]
    out = []
    for item in items:
        if isinstance(item, str):
            out.append((item, True))
        elif isinstance(item, dict) and isinstance(item.get("path"), str):
            out.append((item["path"], ns_bool(item["enable"]) if "enable" in item else True))
    return out


def load(path: Path, env: Mapping[str, str]) -> dict[str, Any]:
    """The spec at `path` with its enabled includes merged in order, then itself on top."""
    spec = expand(YAML(typ="safe").load(path.read_text()), env)
    subs = [load(path.parent / inc, env) for inc, enabled in includes(spec) if enabled]
    return merged(spec, reduce(lambda acc, sub: merged(sub, acc), subs, {}))


if __name__ == "__main__":  # `xcodegen generate [options]`: the merged project.yml of the working directory
    if sys.argv[1:2] != ["generate"]:
        sys.exit(f"xcodegen (spec loading only): unsupported command {sys.argv[1:]}")
    print(json.dumps(load(Path("project.yml"), os.environ)))
