"""Names that become paths inside an app container: validated here, built only here.

Nothing a fleet file, a spec or the phone says may reach outside ``Documents/``: trial ids and
bundle ids are checked against strict patterns before any path is made from them, and every path
is made by joining checked components under a fixed root, then checked again after normalising.
The app resolves the relative paths it is given against its own Documents directory.
"""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass

from orchestrator.protocol import SAFE_ID

_SAFE_ID = re.compile(SAFE_ID)
_BUNDLE_ID = re.compile(r"^[A-Za-z0-9-]+(\.[A-Za-z0-9-]+)+$")
MAX_ID = 128

DOCUMENTS = "/Documents"
SPECS = "specs"
RESULTS = "results"
ORCH = ".orch"


class UnsafeName(ValueError):
    """An id or path that could escape the container (or is not a name at all)."""


def check_id(value: str, what: str = "id") -> str:
    """A trial/run id usable as one file name: ``[A-Za-z0-9_][A-Za-z0-9_.-]*``, at most 128 chars."""
    if not isinstance(value, str) or len(value) > MAX_ID or not _SAFE_ID.fullmatch(value):
        raise UnsafeName(f"{what} {value!r} is not a safe file name")
    return value


def check_bundle_id(value: str) -> str:
    """A reverse-DNS bundle id: dot-separated ``[A-Za-z0-9-]`` labels, no slashes, no ``..``."""
    if not isinstance(value, str) or len(value) > 255 or not _BUNDLE_ID.fullmatch(value):
        raise UnsafeName(f"bundle id {value!r} is not a reverse-DNS identifier")
    return value


@dataclass(frozen=True)
class Place:
    """One file in the container: its absolute AFC path and the path the app is given."""

    afc: str
    app: str


def documents(*parts: str) -> Place:
    """``/Documents/<parts>`` from checked components; refuses anything that normalises elsewhere."""
    for part in parts:
        if not part or "/" in part or "\\" in part or part in (".", "..") or "\x00" in part:
            raise UnsafeName(f"path component {part!r}")
    rel = "/".join(parts)
    afc = posixpath.normpath(posixpath.join(DOCUMENTS, rel))
    if not afc.startswith(DOCUMENTS + "/"):
        raise UnsafeName(f"{rel!r} leaves Documents/")
    return Place(afc=afc, app=rel)


def spec_place(trial_id: str) -> Place:
    return documents(SPECS, check_id(trial_id, "trial id") + ".json")


def result_place(trial_id: str) -> Place:
    return documents(RESULTS, check_id(trial_id, "trial id") + ".json")


def artifact_place(name: str, suffix: str = "") -> Place:
    """Where an artifact file (``models/<key>/<file>``, already checked by ``ArtifactFile``) goes in
    Documents, checked again here; `suffix` names its marker (``.sha256``) beside it."""
    parts = name.split("/")
    return documents(*parts[:-1], parts[-1] + suffix)


def marker_place() -> Place:
    """Where prepare records what it installed (inside the harness app's container)."""
    return documents(ORCH, "installed.json")
