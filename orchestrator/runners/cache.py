"""Where orch works on a host: its cache folder (this machine's, or an SSH host's `cache`), and the
context a runtime adapter launches in."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from orchestrator.runners import LocalRunner, Runner


def cache_root() -> Path:
    root = os.environ.get("ORCH_CACHE")
    return Path(root) if root else Path.home() / ".cache" / "orch"



async def host_cache(runner: Runner) -> str:
    """Where a host keeps orch's caches (runtimes, converted models), as that host sees it: this
    machine's `cache_root()`, or an SSH host's `cache` folder."""
    if isinstance(runner, LocalRunner):
        return str(cache_root())
    return await runner.expand(runner.cache)


@dataclass(frozen=True)
class RuntimeContext:
    """Where an adapter works: the host's runner, a work directory on that host (absolute), the device."""

    runner: Runner
    workdir: str
    device_id: str
