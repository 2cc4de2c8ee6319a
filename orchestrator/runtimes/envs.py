"""Isolated environments: each competitor runtime installs into its own virtual environment under
the cache folder (``$ORCH_CACHE/runtimes/<name>`` or ``~/.cache/orch/runtimes/<name>``), so heavy
or conflicting dependencies never enter the controller's environment.

An environment counts as installed once its stamp (``installed.json``: packages, versions, how
long the install took) is written, which happens only after every package installed and the
runtime imported: a failed or interrupted install is never mistaken for a working one.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from orchestrator.devices.runners import LocalRunner, Runner


@dataclass(frozen=True)
class EnvSpec:
    name: str
    packages: tuple[str, ...]
    probe: str  # Python run in the environment to print {"package": "version", ...} as JSON
    how: str  # what installing costs, for people
    build_env: dict[str, str] = field(default_factory=dict)


_VERSIONS = (
    "import json, importlib.metadata as m; print(json.dumps({p: m.version(p) for p in %r}))"
)

# llama.cpp builds from source (no wheels on PyPI). Only the library is built: the examples,
# tools, server and the multimodal library (mtmd: loaded by the binding only for vision chat
# formats) add minutes and nothing the adapter uses.
ENVS: dict[str, EnvSpec] = {
    "llamacpp": EnvSpec(
        "llamacpp", ("llama-cpp-python==0.3.36",),
        "import llama_cpp; " + _VERSIONS % (["llama-cpp-python"],),
        "builds llama.cpp from source: ~4 min on 2 cores",
        {"CMAKE_ARGS": "-DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=OFF "
                       "-DLLAMA_BUILD_SERVER=OFF -DMTMD_BUILD=OFF -DLLAVA_BUILD=OFF",
         "CMAKE_BUILD_PARALLEL_LEVEL": str(os.cpu_count() or 2)},
    ),
    # The model builder converts with torch; the CPU wheel is enough.
    "ort-genai": EnvSpec(
        "ort-genai", ("onnxruntime-genai==0.18.0", "torch==2.13.0", "transformers", "onnx", "onnx-ir"),
        "import onnxruntime_genai; " + _VERSIONS % (["onnxruntime-genai", "onnxruntime", "torch"],),
        "wheels: ~1.5 min, ~1.5 GB",
    ),
    "mlx": EnvSpec(
        "mlx", ("mlx[cpu]==0.32.4", "mlx-lm==0.32.2"),
        "import mlx.core; " + _VERSIONS % (["mlx", "mlx-lm"],),
        "wheels: ~30 s (the CPU backend on Linux)",
    ),
}


def cache_root() -> Path:
    root = os.environ.get("ORCH_CACHE")
    return Path(root) if root else Path.home() / ".cache" / "orch"


def env_dir(name: str, root: Path | None = None) -> Path:
    return (root or cache_root()) / "runtimes" / name


async def host_env_python(runner: Runner, name: str) -> str:
    """The environment's interpreter as the host sees it (the host's own cache folder)."""
    if isinstance(runner, LocalRunner):
        return str(env_dir(name) / "venv" / "bin" / "python")
    return (await runner.expand("~/.cache/orch")) + f"/runtimes/{name}/venv/bin/python"


@dataclass(frozen=True)
class Installed:
    name: str
    versions: dict[str, str]
    seconds: float | None
    path: Path

    def disk_bytes(self) -> int:
        return sum(f.stat().st_size for f in self.path.rglob("*") if f.is_file() and not f.is_symlink())


def installed(name: str, root: Path | None = None) -> Installed | None:
    d = env_dir(name, root)
    stamp = d / "installed.json"
    if not stamp.is_file() or not (d / "venv" / "bin" / "python").exists():
        return None
    data = json.loads(stamp.read_text())
    return Installed(name, dict(data.get("versions", {})), data.get("seconds"), d)


class InstallError(Exception):
    def __init__(self, message: str, tail: str = ""):
        super().__init__(message)
        self.tail = tail


Progress = Callable[[str, float], None]  # (what is happening, fraction done 0..1)

_COLLECT = re.compile(r"^(Collecting|Requirement already satisfied:) (\S+)")


def _steps(lines: Iterator[str], progress: Progress, tail: list[str]) -> None:
    """Turn pip's output into progress: collecting, building (llama.cpp's [n/N] steps), installing."""
    for line in lines:
        line = line.rstrip()
        tail.append(line)
        del tail[:-40]
        if m := _COLLECT.match(line):
            progress(f"resolving {m.group(2)}", 0.05)
        elif m := re.search(r"\[(\d+)/(\d+)\]", line):
            progress("compiling", 0.1 + 0.8 * int(m.group(1)) / int(m.group(2)))
        elif line.startswith("Building wheel"):
            progress("building wheel", 0.1)
        elif line.startswith("Installing collected packages"):
            progress("installing", 0.92)


def install(name: str, progress: Progress = lambda what, frac: None, root: Path | None = None,
            python: str | None = None) -> Installed:
    """Create the environment and install its packages; idempotent (pip skips what is there)."""
    if name not in ENVS:
        raise InstallError(f"no environment for {name!r}; installable: {', '.join(ENVS)}")
    spec = ENVS[name]
    d = env_dir(name, root)
    d.mkdir(parents=True, exist_ok=True)
    (d / "installed.json").unlink(missing_ok=True)
    venv_python = d / "venv" / "bin" / "python"
    t0 = time.monotonic()
    tail: list[str] = []
    if not venv_python.exists():
        progress("creating the environment", 0.01)
        res = subprocess.run([python or sys.executable, "-m", "venv", str(d / "venv")],
                             capture_output=True, text=True, check=False)
        if res.returncode != 0:
            raise InstallError(f"could not create {d / 'venv'}", res.stderr)
    argv = [str(venv_python), "-m", "pip", "install", "--progress-bar", "off", "-v", *spec.packages]
    with (d / "install.log").open("w") as log, subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env={**os.environ, **spec.build_env},
    ) as proc:
        assert proc.stdout is not None

        def lines() -> Iterator[str]:
            assert proc.stdout is not None
            for line in proc.stdout:
                log.write(line)
                yield line

        _steps(lines(), progress, tail)
        code = proc.wait()
    if code != 0:
        raise InstallError(f"pip install failed for {name} (exit {code}); log: {d / 'install.log'}",
                           "\n".join(tail[-15:]))
    progress("checking", 0.97)
    res = subprocess.run([str(venv_python), "-c", spec.probe], capture_output=True, text=True, check=False)
    if res.returncode != 0:
        raise InstallError(f"{name} installed but does not import", res.stderr[-2000:])
    versions = json.loads(res.stdout.strip().splitlines()[-1])
    seconds = round(time.monotonic() - t0, 1)
    tmp = d / "installed.json.tmp"
    tmp.write_text(json.dumps({"packages": list(spec.packages), "versions": versions, "seconds": seconds}, indent=2))
    os.replace(tmp, d / "installed.json")
    progress("done", 1.0)
    return Installed(name, versions, seconds, d)


def uninstall(name: str, root: Path | None = None) -> None:
    shutil.rmtree(env_dir(name, root), ignore_errors=True)


__all__ = ["ENVS", "EnvSpec", "InstallError", "Installed", "cache_root", "env_dir", "host_env_python", "install",
           "installed", "uninstall"]
