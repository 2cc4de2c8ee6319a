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
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

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

    state = "unreachable"
    fix: str | None = None

    def __init__(self, message: str, fix: str | None = None):
        super().__init__(message)
        if fix is not None:
            self.fix = fix


class Unreachable(RunnerError):
    state = "unreachable"


class AuthRefused(RunnerError):
    state = "auth_refused"


class HostKeyRejected(RunnerError):
    state = "host_key_rejected"


class ConnectionLost(RunnerError):
    """The connection dropped mid-operation (after one reconnect attempt)."""

    state = "unreachable"


class Runner(abc.ABC):
    """Run commands and move files on one host."""

    name: str

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
    async def expand(self, path: str) -> str:
        """A leading `~` made absolute for this host (quoted words are never tilde-expanded)."""

    async def close(self) -> None:
        return None


class LocalRunner(Runner):
    name = "local"

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


def _kill_group(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)
