"""The local machine's runner: commands as subprocesses in their own process group, their output
bounded, and every process they leave behind found and killed."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import sys
from collections import deque
from collections.abc import Callable, Sequence
from pathlib import Path

from orchestrator.runners.base import CommandResult, ConnectionLost, LineSink, Runner, Stream

# What the local runner keeps of a command's output: a runaway command must not eat the controller's
# memory. stderr is for people, and its end says what went wrong; stdout is the protocol
# (`HARNESS_DONE`, `ORCH_RUNTIME` lines, read from the last one back), and on_line sees every line.
STDERR_TAIL = 64 * 1024
STDOUT_KEEP = 16 * 1024 * 1024
LINE_MAX = 16 * 1024 * 1024  # a longer line is cut to its start, which says what it is
PIPE_GRACE_S = 2.0  # how long the pipes may outlive the command: a child that left its group can hold them


class LocalRunner(Runner):
    name = "local"
    python = sys.executable

    async def run(
        self, argv: Sequence[str], *, timeout: float, cwd: str | None = None, on_line: LineSink | None = None
    ) -> CommandResult:
        if not argv:
            raise ValueError("empty command")
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        # The protocol API, not asyncio.subprocess: Process.wait() also waits for the pipes to close,
        # which a child that left the process group can hold open for as long as it lives.
        try:
            transport, out = await loop.subprocess_exec(
                lambda: _Output(on_line), argv[0], *argv[1:], cwd=cwd, stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
                start_new_session=True,  # its own process group, killed whole
            )
        except FileNotFoundError:
            return CommandResult(127, "", f"{argv[0]}: command not found")
        except PermissionError as exc:
            return CommandResult(126, "", f"{argv[0]}: {exc}")
        pipes = {i for i in (_inode(transport, 1), _inode(transport, 2)) if i is not None}
        try:
            await out.wait(deadline)
            timed_out = not out.exited.done()
        finally:  # whatever happened (timeout, on_line raised, cancelled), nothing launched is left running
            try:
                if not (out.exited.done() and out.closed.done()):
                    await _stop(transport.get_pid(), pipes, out)
            finally:  # cancelled again while stopping: close() still kills the command if it lives
                returncode = transport.get_returncode()
                out.sealed = True  # on_line is not called once run() has returned
                transport.close()
        return CommandResult(None if timed_out else returncode, out.stdout.text(), out.stderr.text(), timed_out,
                             out.stdout.dropped, out.stderr.dropped)

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
            limit=LINE_MAX,  # an agent's reply carries a whole trial result: far over asyncio's 64 KiB
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
        try:
            raw = await asyncio.wait_for(self.proc.stdout.readline(), timeout)
        except ValueError:  # over the limit: the line is lost and what follows may be its tail
            raise ConnectionLost(f"a line over {LINE_MAX} bytes from the command: the stream is out of step") from None
        if not raw:
            raise ConnectionLost(f"the command ended (exit {await self._exit()})")
        return raw.decode("utf-8", "replace").rstrip("\n")

    async def close(self) -> None:
        if self.proc.returncode is None:
            _kill_group(self.proc.pid)
            await self._exit()

    async def _exit(self) -> int | None:
        # wait() returns only once the pipes close too, which an escaped child can hold: bounded. The
        # process itself is reaped by asyncio's child watcher either way.
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.proc.wait(), PIPE_GRACE_S)
        return self.proc.returncode


class _Lines:
    """stdout split into lines: every line to on_line, the last `keep` bytes of them kept."""

    def __init__(self, on_line: LineSink | None, keep: int, line_max: int):
        self.on_line, self.keep, self.line_max = on_line, keep, line_max
        self.lines: deque[tuple[str, int]] = deque()  # (text, its size in bytes)
        self.size = 0
        self.dropped = 0
        self.partial = bytearray()

    def feed(self, data: bytes) -> None:
        *whole, rest = data.split(b"\n")
        for piece in whole:
            self._extend(piece)
            self._line(newline=True)
        self._extend(rest)

    def end(self) -> None:
        if self.partial:
            self._line(newline=False)

    def text(self) -> str:
        # A last line cut short by a kill is kept, though on_line never saw it.
        return "".join(t for t, _ in self.lines) + self.partial.decode("utf-8", "replace")

    def _extend(self, piece: bytes) -> None:
        room = max(0, self.line_max - len(self.partial))
        if len(piece) > room:
            self.dropped += len(piece) - room
            piece = piece[:room]
        self.partial += piece

    def _line(self, newline: bool) -> None:
        line = self.partial.decode("utf-8", "replace")
        size = len(self.partial) + newline
        self.partial.clear()
        self.lines.append((line + "\n" if newline else line, size))
        self.size += size
        while self.size > self.keep and len(self.lines) > 1:
            self.size -= self.lines[0][1]
            self.dropped += self.lines.popleft()[1]
        if self.on_line is not None:
            self.on_line(line)


class _Tail:
    """The last `keep` bytes of a stream."""

    def __init__(self, keep: int):
        self.keep, self.dropped, self.buf = keep, 0, bytearray()

    def feed(self, data: bytes) -> None:
        self.buf += data
        over = len(self.buf) - self.keep
        if over > 0:
            del self.buf[:over]
            self.dropped += over

    def text(self) -> str:
        return self.buf.decode("utf-8", "replace")


class _Output(asyncio.SubprocessProtocol):
    """A command's output as it arrives, and when it exits and when its pipes close: apart, since a
    child that left the process group can keep the pipes open after the command exited."""

    def __init__(self, on_line: LineSink | None):
        loop = asyncio.get_running_loop()
        self.stdout, self.stderr = _Lines(on_line, STDOUT_KEEP, LINE_MAX), _Tail(STDERR_TAIL)
        self.exited: asyncio.Future[None] = loop.create_future()  # and reaped
        self.closed: asyncio.Future[None] = loop.create_future()  # stdout and stderr both at end of file
        self.failed: asyncio.Future[None] = loop.create_future()  # holds what on_line raised
        self.open_pipes = 2
        self.sealed = False

    async def wait(self, deadline: float) -> None:
        """Until the command exits, then until its pipes close (a short grace), all within the deadline.
        Raises what on_line raised."""
        loop = asyncio.get_running_loop()
        first = asyncio.FIRST_COMPLETED
        await asyncio.wait([self.exited, self.failed], timeout=max(0.0, deadline - loop.time()), return_when=first)
        if self.exited.done():
            grace = min(deadline, loop.time() + PIPE_GRACE_S)
            await asyncio.wait([self.closed, self.failed], timeout=max(0.0, grace - loop.time()), return_when=first)
        if self.failed.done():
            self.failed.result()

    def pipe_data_received(self, fd: int, data: bytes) -> None:
        if self.sealed or self.failed.done():
            return
        if fd == 2:
            self.stderr.feed(data)
        else:
            self._calling_on_line(self.stdout.feed, data)

    def pipe_connection_lost(self, fd: int, exc: Exception | None) -> None:
        if self.sealed:
            return
        if fd == 1 and not self.failed.done():
            self._calling_on_line(self.stdout.end)
        self.open_pipes -= 1
        if self.open_pipes == 0 and not self.closed.done():
            self.closed.set_result(None)

    def process_exited(self) -> None:
        if not self.exited.done():
            self.exited.set_result(None)

    def _calling_on_line(self, step: Callable[..., None], *args: bytes) -> None:
        # Raised here, in an event loop callback, it would only be logged: run() raises it instead.
        try:
            step(*args)
        except Exception as exc:
            self.failed.set_exception(exc)


def _inode(transport: asyncio.SubprocessTransport, fd: int) -> int | None:
    """The inode of the pipe on the command's `fd`, as /proc names it (`pipe:[inode]`); None when it is
    already closed, at end of file: then nothing holds its write end any more."""
    pipe = transport.get_pipe_transport(fd)
    try:
        return os.fstat(pipe.get_extra_info("pipe").fileno()).st_ino if pipe is not None else None
    except (ValueError, OSError):
        return None


async def _stop(pid: int, pipes: set[int], out: _Output) -> None:
    """Kill the command, its descendants and whatever else still writes to its pipes; reap the command.

    The process group alone misses a child that called setsid(); once the command has exited its
    children belong to init, so what still holds the pipes is found by the pipes themselves. Where
    there is no /proc (macOS) only the group is killed, and the pipes are closed on an escaped child.
    """
    if not out.exited.done():
        for p in _descendants(pid):
            _kill(p)
        _kill_group(pid)
    for _ in range(5):  # a writer that forked as it was killed leaves a new one: look again
        await asyncio.wait([out.closed], timeout=0.1)  # the killed let go of the pipes, their last output is read
        if out.closed.done():
            break
        writers = await asyncio.to_thread(_pipe_writers, pipes)
        if not writers:
            break
        for p in writers:
            _kill(p)
    await asyncio.wait([out.exited])  # not cancelled if run() is: the command is reaped whatever happens


# -- Linux: what a command left behind, found through /proc ---------------------------------------
def _parents() -> dict[int, int]:
    """Every visible process and its parent."""
    found: dict[int, int] = {}
    with contextlib.suppress(OSError):
        for name in os.listdir("/proc"):
            if name.isdigit():
                with contextlib.suppress(OSError, IndexError, ValueError):
                    stat = Path(f"/proc/{name}/stat").read_text()
                    found[int(name)] = int(stat.rsplit(")", 1)[1].split()[1])  # after "(comm)": state, ppid
    return found


def _descendants(pid: int) -> set[int]:
    """pid and its descendants, each stopped as found so none forks a new one past the search."""
    tree: set[int] = set()
    new = {pid}
    while new:
        for p in new:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(p, signal.SIGSTOP)
        tree |= new
        new = {child for child, parent in _parents().items() if parent in tree} - tree
    return tree


def _pipe_writers(inodes: set[int]) -> set[int]:
    """The processes, other than this one, holding a write end of these pipes."""
    names = {f"pipe:[{i}]" for i in inodes}
    found: set[int] = set()
    for pid in set(_parents()) - {os.getpid()}:
        with contextlib.suppress(OSError):  # gone meanwhile, or not ours to look at
            for fd in os.listdir(f"/proc/{pid}/fd"):
                with contextlib.suppress(OSError, ValueError):
                    if os.readlink(f"/proc/{pid}/fd/{fd}") in names and _writes(pid, fd):
                        found.add(pid)
    return found


def _writes(pid: int, fd: str) -> bool:
    """Whether the descriptor is open for writing (its flags' access mode is not O_RDONLY)."""
    for line in Path(f"/proc/{pid}/fdinfo/{fd}").read_text().splitlines():
        if line.startswith("flags:"):
            return int(line.split()[1], 8) & 0o3 != os.O_RDONLY
    return False


def _kill(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, signal.SIGKILL)


def _kill_group(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)
