"""The apps the twin runs: real child processes, one per launch, in the app's container.

A launch runs ``launch`` (``{exe} app --container {container} --`` by default) followed by the
exact arguments DVT sent. Output (stdout and stderr, merged as a phone's console is) goes to the
DVT channel that launched the process; its death becomes a termination notice, and a crash report
when a crashing signal killed it. Jetsam: a watchdog reads the process's resident memory
(``/proc/<pid>/statm``) every ``memory_poll_s`` and kills it with SIGKILL past its limit, writing
a JetsamEvent report, as iOS does for an app over its memory limit.
"""

from __future__ import annotations

import asyncio
import codecs
import collections
import contextlib
import os
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from orchestrator.twin.apps import App
from orchestrator.twin.crashes import CRASHING, CrashReports

_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
TAIL_LINES = 20
# What the Swift runtime prints before it traps: a phone puts it in the report's application info.
FATAL_MARKS = ("Fatal error", "Assertion failed", "Precondition failed", "fatal error")


class Observer(Protocol):
    """The DVT process-control channel that launched a process (or any that observes it)."""

    async def output(self, pid: int, text: str) -> None: ...

    async def terminated(self, pid: int, exit_code: int, crashing_signal: int) -> None: ...


class LaunchRefused(Exception):
    """The launch did not start a process (what FrontBoard would refuse with)."""


def resident_bytes(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/statm", "rb") as fh:
            return int(fh.read().split()[1]) * _PAGE
    except (OSError, IndexError, ValueError):
        return None


@dataclass
class Running:
    pid: int
    app: App
    argv: list[str]
    proc: asyncio.subprocess.Process
    started: float
    observer: Observer | None
    limit: float | None
    jetsam_rss: int | None = None
    tail: collections.deque[str] = field(default_factory=lambda: collections.deque(maxlen=TAIL_LINES))
    tasks: list[asyncio.Task[None]] = field(default_factory=list)
    exited: asyncio.Event = field(default_factory=asyncio.Event)


class Processes:
    def __init__(self, launch: tuple[str, ...], crashes: CrashReports, memory_poll_s: float,
                 environment: Callable[[], dict[str, str]]):
        self.launch_template = launch
        self.crashes = crashes
        self.memory_poll_s = memory_poll_s
        self.environment = environment
        self.running: dict[int, Running] = {}
        self.launches: list[tuple[str, list[str]]] = []  # (bundle id, argv), for people and tests

    def argv(self, executable: Path, container: Path, arguments: list[str]) -> list[str]:
        fill = {"exe": str(executable), "container": str(container)}
        return [part.format(**fill) for part in self.launch_template] + [str(a) for a in arguments]

    def pids(self) -> list[int]:
        return list(self.running)

    def by_bundle(self, bundle_id: str) -> Running | None:
        return next((r for r in self.running.values() if r.app.bundle_id == bundle_id), None)

    async def launch(self, app: App, executable: Path, container: Path, arguments: list[str],
                     environment: dict[str, str], *, suspended: bool, limit: float | None,
                     observer: Observer | None) -> int:
        argv = self.argv(executable, container, arguments)
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C.UTF-8", "HOME": str(container),
               "CFFIXED_USER_HOME": str(container), "TMPDIR": str(container / "tmp"), **self.environment()}
        env.update({str(k): str(v) for k, v in environment.items()})
        # Suspended (StartSuspendedKey): a shell that stops itself, then on resumePid: (SIGCONT) execs
        # the app in its place, same pid. (Stopping before exec would hang the spawn: Popen waits for it.)
        spawn = ["/bin/sh", "-c", 'kill -STOP $$ && exec "$@"', "twin-suspended", *argv] if suspended else argv
        try:
            proc = await asyncio.create_subprocess_exec(
                *spawn, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.STDOUT, cwd=container, env=env, start_new_session=True,
            )
        except OSError as exc:
            raise LaunchRefused(f"{argv[0]}: {exc.strerror or exc}") from None
        run = Running(pid=proc.pid, app=app, argv=argv, proc=proc, started=time.time(), observer=observer,
                      limit=limit)
        self.running[proc.pid] = run
        self.launches.append((app.bundle_id, argv))
        run.tasks.append(asyncio.create_task(self._watch(run), name=f"twin-app-{proc.pid}"))
        if limit is not None:
            run.tasks.append(asyncio.create_task(self._jetsam(run), name=f"twin-jetsam-{proc.pid}"))
        return proc.pid

    def signal(self, pid: int, sig: int) -> bool:
        run = self.running.get(pid)
        if run is None:
            return False
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)
        return True

    def detach(self, observer: Observer) -> None:
        """The DVT connection went away: its processes keep running, their output goes nowhere."""
        for run in self.running.values():
            if run.observer is observer:
                run.observer = None

    async def wait(self, pid: int, timeout: float) -> bool:
        run = self.running.get(pid)
        if run is None:
            return True
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(run.exited.wait(), timeout)
        return run.exited.is_set()

    async def _pump(self, run: Running) -> None:
        assert run.proc.stdout is not None
        decoder = codecs.getincrementaldecoder("utf-8")("replace")
        partial = ""
        while chunk := await run.proc.stdout.read(65536):
            text = decoder.decode(chunk)
            if not text:
                continue
            partial += text
            *lines, partial = partial.split("\n")
            run.tail.extend(line[:500] for line in lines)
            partial = partial[-4000:]
            if run.observer is not None:
                with contextlib.suppress(Exception):
                    await run.observer.output(run.pid, text)

    async def _watch(self, run: Running) -> None:
        pump = asyncio.create_task(self._pump(run))
        code = await run.proc.wait()
        with contextlib.suppress(asyncio.TimeoutError, Exception):
            await asyncio.wait_for(pump, 2.0)  # a grandchild holding the pipe must not hold the notice
        pump.cancel()
        self.running.pop(run.pid, None)
        for task in run.tasks:
            if task is not asyncio.current_task():
                task.cancel()
        sig = -code if code < 0 else 0
        exit_code = code if code >= 0 else 0
        app = run.app
        if run.jetsam_rss is not None and run.limit is not None:
            self.crashes.jetsam(app.executable, run.pid, run.jetsam_rss, int(run.limit))
        elif sig in CRASHING:
            fatal = [line for line in run.tail if any(m in line for m in FATAL_MARKS)][-3:]
            self.crashes.crash(app.executable, app.bundle_id, str(app.info.get("CFBundleShortVersionString", "")),
                               run.pid, sig, run.argv[0], fatal)
        run.exited.set()
        if run.observer is not None:
            with contextlib.suppress(Exception):
                await run.observer.terminated(run.pid, exit_code, sig)

    async def _jetsam(self, run: Running) -> None:
        assert run.limit is not None
        while run.pid in self.running:
            rss = resident_bytes(run.pid)
            if rss is not None and rss > run.limit:
                run.jetsam_rss = rss
                with contextlib.suppress(ProcessLookupError):
                    os.kill(run.pid, signal.SIGKILL)
                return
            await asyncio.sleep(self.memory_poll_s)

    def lift_limit(self, pid: int) -> bool:
        """``requestDisableMemoryLimitsForPid:``: stop the watchdog for this process."""
        run = self.running.get(pid)
        if run is None:
            return False
        run.limit = None
        for task in run.tasks[1:]:
            task.cancel()
        return True

    async def stop_all(self) -> None:
        for run in list(self.running.values()):
            with contextlib.suppress(ProcessLookupError):
                os.kill(run.pid, signal.SIGKILL)
        for run in list(self.running.values()):
            with contextlib.suppress(Exception):
                await asyncio.wait_for(run.exited.wait(), 5.0)

