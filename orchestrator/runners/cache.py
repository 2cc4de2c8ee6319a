"""Where orch keeps its files on a host: this machine's cache folder, or an SSH host's `cache`."""

from __future__ import annotations

import os
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
