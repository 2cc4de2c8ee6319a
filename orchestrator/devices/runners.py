"""Where commands run: the local machine (subprocess) or a host over SSH (``ssh.py``).

Commands are argv lists, never shell strings: the local runner execs them directly, the SSH runner
quotes every word with ``shlex.quote`` so names with spaces, quotes or ``$(...)`` arrive intact and
execute nothing.
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
import os
import shutil
import signal
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from orchestrator.devices.base import HealthState

LineSink = Callable[[str], None]


@dataclass(frozen=True)
class CommandResult:
    returncode: int | None  # None when killed on timeout
    stdout: str
    stderr: str
    timed_out: bool = False

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.timed_out


class RunnerError(Exception):
    """The runner could not do its job. `state` and `fix` feed the device's Health."""

    state: HealthState = "unreachable"
    fix: str | None = None

    def __init__(self, message: str, fix: str | None = None):
        super().__init__(message)
        if fix is not None:
            self.fix = fix


class Unreachable(RunnerError):
    state: HealthState = "unreachable"


class AuthRefused(RunnerError):
    state: HealthState = "auth_refused"


class HostKeyRejected(RunnerError):
    state: HealthState = "host_key_rejected"


class ConnectionLost(RunnerError):
    """The connection dropped mid-operation (after one reconnect attempt)."""

    state: HealthState = "unreachable"


class Stream(abc.ABC):
    """A long-lived command spoken to in lines (stdin/stdout), e.g. `orch agent` on a lab host."""

    @abc.abstractmethod
    async def send(self, line: str) -> None: ...

    @abc.abstractmethod
    async def receive(self, timeout: float) -> str:
        """The next stdout line; ConnectionLost when the command ended or the link dropped."""

    @abc.abstractmethod
    async def close(self) -> None: ...


class Runner(abc.ABC):
    """Run commands and move files on one host."""

    name: str
    python: str = "python3"  # the host's interpreter, for runtime environments
    cache: str = "~/.cache/orch"  # the host's cache folder (runtimes, converted models)

    @abc.abstractmethod
    async def run(
        self, argv: Sequence[str], *, timeout: float, cwd: str | None = None, on_line: LineSink | None = None
    ) -> CommandResult:
        """Run argv; kill it (and its children) when `timeout` expires; stream stdout lines to on_line."""

    @abc.abstractmethod
    async def put(self, local: Path, remote: str) -> None: ...

    @abc.abstractmethod
    async def get(self, remote: str, local: Path) -> None: ...

    @abc.abstractmethod
    async def exists(self, remote: str) -> bool: ...

    @abc.abstractmethod
    async def open_stream(self, argv: Sequence[str]) -> Stream:
        """Start argv and talk to it in lines."""

    @abc.abstractmethod
    async def expand(self, path: str) -> str:
        """A leading `~` made absolute for this host (quoted words are never tilde-expanded)."""

    async def close(self) -> None:
        return None


class LocalRunner(Runner):
    name = "local"
    python = sys.executable

    async def run(
        self, argv: Sequence[str], *, timeout: float, cwd: str | None = None, on_line: LineSink | None = None
    ) -> CommandResult:
        if not argv:
            raise ValueError("empty command")
        try:
            proc = await asyncio.create_subprocess_exec(
                *argv, cwd=cwd, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
                stdin=asyncio.subprocess.DEVNULL, start_new_session=True,  # its own process group, killed whole
            )
        except FileNotFoundError:
            return CommandResult(127, "", f"{argv[0]}: command not found")
        except PermissionError as exc:
            return CommandResult(126, "", f"{argv[0]}: {exc}")
        assert proc.stdout is not None and proc.stderr is not None
        out: list[str] = []

        async def pump() -> None:
            assert proc.stdout is not None
            async for raw in proc.stdout:
                line = raw.decode("utf-8", "replace")
                out.append(line)
                if on_line is not None:
                    on_line(line.rstrip("\n"))

        err_task = asyncio.ensure_future(proc.stderr.read())
        try:
            await asyncio.wait_for(asyncio.gather(pump(), proc.wait()), timeout)
        except TimeoutError:
            _kill_group(proc.pid)
            await proc.wait()
            err = await err_task
            return CommandResult(None, "".join(out), err.decode("utf-8", "replace"), timed_out=True)
        except asyncio.CancelledError:
            _kill_group(proc.pid)
            raise
        err = await err_task
        return CommandResult(proc.returncode, "".join(out), err.decode("utf-8", "replace"))

    async def put(self, local: Path, remote: str) -> None:
        dest = Path(os.path.expanduser(remote))
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp = dest.with_name(dest.name + ".part")
        await asyncio.to_thread(shutil.copyfile, local, tmp)
        os.replace(tmp, dest)

    async def get(self, remote: str, local: Path) -> None:
        await asyncio.to_thread(shutil.copyfile, os.path.expanduser(remote), local)

    async def exists(self, remote: str) -> bool:
        return Path(os.path.expanduser(remote)).exists()

    async def expand(self, path: str) -> str:
        return os.path.expanduser(path)

    async def open_stream(self, argv: Sequence[str]) -> Stream:
        proc = await asyncio.create_subprocess_exec(
            *argv, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, start_new_session=True,
        )
        return _LocalStream(proc)


class _LocalStream(Stream):
    def __init__(self, proc: asyncio.subprocess.Process):
        self.proc = proc

    async def send(self, line: str) -> None:
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write(line.encode() + b"\n")
            await self.proc.stdin.drain()
        except (BrokenPipeError, ConnectionResetError) as exc:
            raise ConnectionLost(f"stream closed: {exc}") from None

    async def receive(self, timeout: float) -> str:
        assert self.proc.stdout is not None
        raw = await asyncio.wait_for(self.proc.stdout.readline(), timeout)
        if not raw:
            raise ConnectionLost(f"the command ended (exit {await self.proc.wait()})")
        return raw.decode("utf-8", "replace").rstrip("\n")

    async def close(self) -> None:
        if self.proc.returncode is None:
            _kill_group(self.proc.pid)
            await self.proc.wait()


def _kill_group(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)
