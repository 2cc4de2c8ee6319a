"""What a runner is: run a command (argv, never a shell string) or open a line stream on a host, put and
get files; and the errors that say why a host could not be reached."""


from __future__ import annotations

import abc
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from orchestrator.protocol.device import HealthState

LineSink = Callable[[str], None]


@dataclass(frozen=True)
class CommandResult:
    returncode: int | None  # None when killed on timeout
    stdout: str
    stderr: str
    timed_out: bool = False
    stdout_dropped: int = 0  # bytes read but not kept (the earliest lines, the ends of overlong lines)
    stderr_dropped: int = 0  # bytes before the kept tail

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
    # CPU seconds the host reported for the commands this runner ran and waited for (None: not measured);
    # what the interference check counts as ours on a remote host
    commands_cpu_s: float | None = None

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
