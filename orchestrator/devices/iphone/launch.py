"""One launch of an app through DVT process control, waited on until its result file appears.

Measuring must not disturb what is measured: while the app runs, the host waits on what the phone
pushes anyway — the sentinel line ``HARNESS_DONE <id> <path>`` on the app's stdout (printed after
the result file is written atomically) and DVT's termination notice — and reads the result file
once, after either. The termination notice is only logged by pymobiledevice3, so `TerminationTap`
reads it (exit code, signal) off that logger and keeps it off the terminal. One ``isRunningPid:``
call every ``liveness_s`` (seconds apart, not a busy poll) covers a notice that never comes; a launch
that outlives its timeout is killed and reported as hung.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import re
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from orchestrator.devices.iphone.container import BadResultFile, Container
from orchestrator.devices.iphone.errors import DeviceTimeout, call, developer_service
from orchestrator.devices.iphone.paths import Place

if TYPE_CHECKING:
    from pymobiledevice3.lockdown_service_provider import LockdownServiceProvider

PROCESS_CONTROL_LOGGER = "pymobiledevice3.services.dvt.instruments.process_control"
_TERMINATED = re.compile(r"Process with PID (\d+) terminated with exit code (\S+) or crashing signal (\S+)")
OUTPUT_LINES = 40


def _int_or_none(text: str) -> int | None:
    try:
        return int(text)
    except ValueError:
        return None


class TerminationTap(logging.Filter):
    """Turns pymobiledevice3's "Process with PID ... terminated" log record into data, and wakes
    whoever waits on that pid."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: dict[int, tuple[int | None, int | None, float]] = {}  # pid -> code, signal, when (monotonic)
        self._waiters: dict[int, tuple[asyncio.AbstractEventLoop, asyncio.Event]] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        m = _TERMINATED.search(record.getMessage())
        if m is None:
            return True
        if len(self.seen) > 1000:
            self.seen.clear()
        pid = int(m.group(1))
        self.seen[pid] = (_int_or_none(m.group(2)), _int_or_none(m.group(3)), time.monotonic())
        if (waiter := self._waiters.get(pid)) is not None:
            loop, event = waiter
            loop.call_soon_threadsafe(event.set)
        return False  # consumed: it is a result of ours, not a warning for the terminal

    def watch(self, pid: int, since: float) -> asyncio.Event:
        """An event set when the termination notice of `pid` arrives (at once if it already has, after
        `since`, the launch's monotonic time: phones reuse pids, and an earlier process's notice is stale)."""
        event = asyncio.Event()
        self._waiters[pid] = (asyncio.get_running_loop(), event)
        if pid in self.seen:
            if self.seen[pid][2] >= since:
                event.set()
            else:
                del self.seen[pid]
        return event

    def pop(self, pid: int) -> tuple[int | None, int | None]:
        self._waiters.pop(pid, None)
        code, sig, _ = self.seen.pop(pid, (None, None, 0.0))
        return code, sig


TAP = TerminationTap()


def install_tap() -> None:
    for name in (PROCESS_CONTROL_LOGGER, PROCESS_CONTROL_LOGGER + ".dtx"):
        log = logging.getLogger(name)
        if TAP not in log.filters:
            log.addFilter(TAP)


@dataclass
class Outcome:
    kind: Literal["done", "exited", "hung", "launch_failed", "disconnected", "bad_file"]
    raw: bytes | None = None
    message: str = ""
    pid: int | None = None
    exit_code: int | None = None
    signal: int | None = None
    output: list[str] = field(default_factory=list)

    def tail(self) -> str | None:
        return "\n".join(self.output[-OUTPUT_LINES:]) or None


class _Output:
    """The app's stdout as DVT forwards it: the last lines, and whether our sentinel appeared."""

    def __init__(self, token: str):
        self.prefix = f"HARNESS_DONE {token} "
        self.lines: collections.deque[str] = collections.deque(maxlen=OUTPUT_LINES)
        self.partial = ""
        self.done = asyncio.Event()
        self.closed = asyncio.Event()

    def feed(self, text: str) -> None:
        self.partial += text
        *complete, self.partial = self.partial.split("\n")
        for line in complete:
            self.lines.append(line[:400])
            if line.strip().startswith(self.prefix) or line.strip() == self.prefix.strip():
                self.done.set()

    async def pump(self, process_control: Any) -> None:
        try:
            async for event in process_control:
                self.feed(str(event.message))
        except Exception:  # the DTX channel closed (QueueShutDown) or the connection dropped
            pass
        finally:
            self.closed.set()


async def launch_and_wait(
    developer: LockdownServiceProvider, container: Container, *, bundle_id: str, arguments: list[str],
    result: Place, token: str, timeout: float, liveness_s: float, call_timeout: float,
) -> Outcome:
    """Launch, wait for ``result`` within ``timeout`` (from the launch), kill on hang, never raise."""
    from pymobiledevice3.dtx import DTXNsError
    from pymobiledevice3.services.dvt.instruments.device_info import DeviceInfo
    from pymobiledevice3.services.dvt.instruments.dvt_provider import DvtProvider
    from pymobiledevice3.services.dvt.instruments.process_control import ProcessControl

    install_tap()
    output = _Output(token)
    loop = asyncio.get_running_loop()
    dvt = DvtProvider(developer)
    reader: asyncio.Task[None] | None = None
    try:
        # Faults before the launch propagate: the caller knows what a refused DVT start means.
        with developer_service():
            await call(dvt.connect(), call_timeout, "connect to DVT")
            pc, di = ProcessControl(dvt), DeviceInfo(dvt)
            await call(pc.connect(), call_timeout, "open process control")
            await call(di.connect(), call_timeout, "open device info")
        reader = asyncio.create_task(output.pump(pc), name=f"dvt-output-{token}")
        since = time.monotonic()
        try:
            pid = await call(pc.launch(bundle_id, arguments=arguments, kill_existing=True), call_timeout, "launch")
        except AssertionError:
            return Outcome("launch_failed", message=f"the phone did not start {bundle_id} (pid 0)")
        except DTXNsError as exc:
            return Outcome("launch_failed", message=f"the phone refused to launch {bundle_id}: {exc}")
        try:
            return await _wait(pc, di, container, output, pid, result, loop.time() + timeout, timeout, liveness_s,
                               call_timeout, since)
        except BadResultFile as exc:
            return Outcome("bad_file", message=str(exc), pid=pid, output=list(output.lines))
        except Exception as exc:  # after the launch, any transport fault means the phone went away
            if not _is_transport_fault(exc):
                raise
            return Outcome("disconnected", message=f"{type(exc).__name__}: {exc}", pid=pid, output=list(output.lines))
    finally:
        if reader is not None:
            reader.cancel()
            with contextlib.suppress(BaseException):
                await reader
        with contextlib.suppress(Exception):
            await call(dvt.close(), call_timeout, "close DVT")


async def _wait(
    pc: Any, di: Any, container: Container, output: _Output, pid: int, result: Place, deadline: float,
    timeout: float, liveness_s: float, call_timeout: float, since: float,
) -> Outcome:
    loop = asyncio.get_running_loop()
    ended = TAP.watch(pid, since)
    try:
        next_look = loop.time() + liveness_s
        while True:
            if output.done.is_set():
                raw = await container.read(result)
                if raw is not None:
                    return Outcome("done", raw=raw, pid=pid, output=list(output.lines))
            if not ended.is_set() and loop.time() >= next_look:
                next_look = loop.time() + liveness_s
                if not await call(di.is_running_pid(pid), call_timeout, "is the app running"):
                    await asyncio.sleep(0)  # let a termination notice already on the wire be logged
                    ended.set()
            if ended.is_set():
                raw = await container.read(result)  # written, then the app exited
                if raw is not None:
                    return Outcome("done", raw=raw, pid=pid, output=list(output.lines))
                code, sig = TAP.pop(pid)
                return Outcome("exited", pid=pid, exit_code=code, signal=sig, output=list(output.lines))
            if output.closed.is_set():
                return Outcome("disconnected", message="the DVT connection closed", pid=pid,
                               output=list(output.lines))
            remaining = deadline - loop.time()
            if remaining <= 0:
                note = ""
                try:
                    await call(pc.kill(pid), call_timeout, "kill")
                except Exception as exc:
                    note = f"; kill failed: {exc}"
                return Outcome("hung", message=f"no result after {timeout:g} s; killed{note}", pid=pid,
                               output=list(output.lines))
            wake = (ended, output.closed) if output.done.is_set() else (output.done, ended, output.closed)
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(_first(*wake), max(0.0, min(next_look - loop.time(), remaining)))
    finally:
        TAP.pop(pid)


def _is_transport_fault(exc: BaseException) -> bool:
    from pymobiledevice3.dtx import DTXNsError, DTXProtocolError
    from pymobiledevice3.exceptions import PyMobileDevice3Exception

    return isinstance(
        exc, DeviceTimeout | OSError | EOFError | DTXNsError | DTXProtocolError | PyMobileDevice3Exception
    ) or type(exc).__name__ == "QueueShutDown"


async def _first(*events: asyncio.Event) -> None:
    waits = [asyncio.ensure_future(e.wait()) for e in events]
    try:
        await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for w in waits:
            w.cancel()
