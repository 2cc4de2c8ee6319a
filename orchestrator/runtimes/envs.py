"""Isolated environments: each competitor runtime installs into its own virtual environment under
the cache folder (``$ORCH_CACHE/runtimes/<name>`` or ``~/.cache/orch/runtimes/<name>``), so heavy
or conflicting dependencies never enter the controller's environment. The same install runs on a
lab host over its runner (an SSH host's `cache` folder, made with its `python`).

An environment counts as installed once its stamp (``installed.json``: packages, versions, how
long the install took) is written, which happens only after every package installed and the
runtime imported: a failed or interrupted install is never mistaken for a working one.
"""

from __future__ import annotations

import json
import re
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from orchestrator.runners import Runner
from orchestrator.runners.cache import cache_root, host_cache


@dataclass(frozen=True)
class EnvSpec:
    name: str
    packages: tuple[str, ...]
    probe: str  # Python run in the environment to print {"package": "version", ...} as JSON
    how: str  # what installing costs, for people
    build_env: dict[str, str] = field(default_factory=dict)


def versions_probe(*packages: str) -> str:
    """Python printing the installed versions of `packages` as JSON: the end of an EnvSpec's probe."""
    return f"import json, importlib.metadata as m; print(json.dumps({{p: m.version(p) for p in {list(packages)!r}}}))"


def env_dir(name: str, root: Path | None = None) -> Path:
    return (root or cache_root()) / "runtimes" / name


async def host_env_dir(runner: Runner, name: str) -> str:
    return f"{await host_cache(runner)}/runtimes/{name}"


async def host_env_python(runner: Runner, name: str) -> str:
    """The environment's interpreter on the host."""
    return f"{await host_env_dir(runner, name)}/venv/bin/python"


@dataclass(frozen=True)
class Installed:
    name: str
    versions: dict[str, str]
    seconds: float | None
    path: str  # the environment's folder on its host


def _stamp(name: str, data: dict[str, object], path: str) -> Installed:
    versions = data.get("versions", {})
    seconds = data.get("seconds")
    return Installed(name, dict(versions) if isinstance(versions, dict) else {},
                     float(seconds) if isinstance(seconds, int | float) else None, path)


def installed(name: str, root: Path | None = None) -> Installed | None:
    """The environment on this machine, when its install finished (its stamp is written)."""
    d = env_dir(name, root)
    stamp = d / "installed.json"
    if not stamp.is_file() or not (d / "venv" / "bin" / "python").exists():
        return None
    return _stamp(name, json.loads(stamp.read_text()), str(d))


async def installed_on(runner: Runner, name: str) -> Installed | None:
    """The environment on the runner's host, when its install finished."""
    from orchestrator.runtimes.source import read_json

    d = await host_env_dir(runner, name)
    if not await runner.exists(f"{d}/venv/bin/python"):
        return None
    data = await read_json(runner, f"{d}/installed.json")
    return _stamp(name, data, d) if data is not None else None


async def disk_used(runner: Runner, path: str) -> int:
    """Bytes under `path` on the runner's host (`du -sk`: Linux and macOS)."""
    res = await runner.run(["du", "-sk", path], timeout=120)
    return int(res.stdout.split()[0]) * 1024 if res.ok and res.stdout.strip() else 0


class InstallError(Exception):
    def __init__(self, message: str, tail: str = ""):
        super().__init__(message)
        self.tail = tail


Progress = Callable[[str, float], None]  # (what is happening, fraction done 0..1)

_COLLECT = re.compile(r"^(Collecting|Requirement already satisfied:) (\S+)")
INSTALL_TIMEOUT_S = 3600.0


class PipProgress:
    """Turn pip's output lines into progress (collecting, building: llama.cpp's [n/N] steps,
    installing) and keep the log and its tail."""

    def __init__(self, progress: Progress):
        self.progress = progress
        self.log: list[str] = []

    def __call__(self, line: str) -> None:
        line = line.rstrip("\n")
        self.log.append(line)
        if m := _COLLECT.match(line):
            self.progress(f"resolving {m.group(2)}", 0.05)
        elif m := re.search(r"\[(\d+)/(\d+)\]", line):
            self.progress("compiling", 0.1 + 0.8 * int(m.group(1)) / int(m.group(2)))
        elif line.startswith("Building wheel"):
            self.progress("building wheel", 0.1)
        elif line.startswith("Installing collected packages"):
            self.progress("installing", 0.92)

    def tail(self, lines: int = 15) -> str:
        return "\n".join(self.log[-lines:])


async def _write(runner: Runner, text: str, path: str) -> None:
    """A small text file on the host, written whole (put is atomic on both runners)."""
    with tempfile.TemporaryDirectory() as tmp:
        local = Path(tmp) / "f"
        local.write_text(text)
        await runner.put(local, path)


async def install(runner: Runner, spec: EnvSpec, progress: Progress = lambda what, frac: None) -> Installed:
    """Create the environment on the runner's host and install its packages; idempotent (pip skips
    what is there). The stamp is written last, after the runtime imported."""
    name = spec.name
    d = await host_env_dir(runner, name)
    venv_python = f"{d}/venv/bin/python"
    t0 = time.monotonic()
    res = await runner.run(["sh", "-c", 'mkdir -p "$0" && rm -f "$0/installed.json"', d], timeout=60)
    if not res.ok:
        raise InstallError(f"could not create {d} on {runner.name}", res.stderr)
    if not await runner.exists(venv_python):
        progress("creating the environment", 0.01)
        res = await runner.run([runner.python, "-m", "venv", f"{d}/venv"], timeout=600)
        if not res.ok:
            raise InstallError(f"could not create {d}/venv on {runner.name} with {runner.python}", res.stderr)
    pip = PipProgress(progress)
    env = [f"{k}={v}" for k, v in spec.build_env.items()]
    argv = ["env", *env, venv_python, "-m", "pip", "install", "--progress-bar", "off", "-v", *spec.packages]
    # stderr joins stdout so the log and the progress see pip's errors where they happened.
    res = await runner.run(["sh", "-c", 'exec "$@" 2>&1', "sh", *argv], timeout=INSTALL_TIMEOUT_S, on_line=pip)
    await _write(runner, "\n".join(pip.log) + "\n", f"{d}/install.log")
    if not res.ok:
        how = "timed out" if res.timed_out else f"exit {res.returncode}"
        raise InstallError(f"pip install failed for {name} on {runner.name} ({how}); log: {d}/install.log",
                           pip.tail())
    progress("checking", 0.97)
    res = await runner.run([venv_python, "-c", spec.probe], timeout=600)
    if not res.ok:
        raise InstallError(f"{name} installed on {runner.name} but does not import", res.stderr[-2000:])
    versions = json.loads(res.stdout.strip().splitlines()[-1])
    seconds = round(time.monotonic() - t0, 1)
    await _write(runner, json.dumps({"packages": list(spec.packages), "versions": versions, "seconds": seconds},
                                    indent=2), f"{d}/installed.json")
    progress("done", 1.0)
    return Installed(name, versions, seconds, d)


async def uninstall(runner: Runner, name: str) -> int:
    """Remove the runtime's environment and its converted models from the runner's host; the bytes freed."""
    cache = await host_cache(runner)
    paths = [await host_env_dir(runner, name), f"{cache}/artifacts/{name}"]
    freed = sum([await disk_used(runner, p) for p in paths if await runner.exists(p)])
    res = await runner.run(["rm", "-rf", *paths], timeout=600)
    if not res.ok:
        raise InstallError(f"could not remove {name} on {runner.name}", res.stderr)
    return freed


__all__ = ["EnvSpec", "InstallError", "Installed", "PipProgress", "disk_used", "env_dir",
           "host_env_dir", "host_env_python", "install", "installed", "installed_on", "uninstall", "versions_probe"]
