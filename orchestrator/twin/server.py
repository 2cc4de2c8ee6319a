"""Running a twin: `Twin` on the caller's event loop, `ThreadedTwin` on its own thread (for
synchronous callers: tests driving pymobiledevice3 from another loop or another process), and
`serve_forever` for ``orch twin serve`` (stops cleanly on SIGINT/SIGTERM), `serve_while` for
``orch twin serve -- COMMAND`` (the twin lives as long as the command)."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import signal
import sys
import threading
from collections.abc import Callable
from types import TracebackType

from orchestrator.twin.config import TwinConfig
from orchestrator.twin.phone import Phone
from orchestrator.twin.rsd import Rsd
from orchestrator.twin.usbmux import Usbmuxd


class Twin:
    """``async with Twin(cfg) as twin:`` — usbmuxd listening on ``twin.address`` until exit."""

    def __init__(self, cfg: TwinConfig):
        self.cfg = cfg
        self.phone: Phone | None = None
        self.rsd: Rsd | None = None
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.Task[None]] = set()
        self._writers: set[asyncio.StreamWriter] = set()

    @property
    def address(self) -> str:
        """``host:port``, the value for ``USBMUXD_SOCKET_ADDRESS`` (or a fleet's ``usbmux_address``)."""
        assert self._server is not None, "the twin is not running"
        host, port = self._server.sockets[0].getsockname()[:2]
        return f"{host}:{port}"

    @property
    def tunneld_address(self) -> str | None:
        """``host:port`` of the tunneld stand-in (a fleet's ``tunneld_address``), when the twin serves RSD."""
        if self.rsd is None:
            return None
        return f"{self.cfg.host}:{self.rsd.port('tunneld')}"

    async def start(self) -> Twin:
        self.phone = Phone(self.cfg)
        mux = Usbmuxd(self.phone)

        async def accept(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            task = asyncio.current_task()
            assert task is not None
            self._connections.add(task)
            self._writers.add(writer)
            try:
                await mux.handle(reader, writer)
            except asyncio.CancelledError:
                pass  # stop() ends every connection; asyncio would log a cancelled handler as an error
            finally:
                self._connections.discard(task)
                self._writers.discard(writer)

        self._server = await asyncio.start_server(accept, self.cfg.host, self.cfg.port)
        if self.cfg.serves_rsd:
            self.rsd = Rsd(self.phone, self.cfg.host)
            await self.rsd.start(self.cfg.tunneld_port)
        return self

    def unplug(self) -> None:
        """Pull the cable: every connection drops at once, usbmuxd lists nothing and tunneld names no
        tunnel until `replug`. The apps keep running on the phone, as they would."""
        assert self.phone is not None
        self.phone.plugged = False
        for writer in [*self._writers, *(self.rsd.writers if self.rsd else [])]:
            writer.transport.abort()

    def replug(self) -> None:
        assert self.phone is not None
        self.phone.plugged = True

    async def stop(self) -> None:
        """Close the listener, kill the app processes, drop every connection."""
        if self._server is not None:
            self._server.close()
        if self.rsd is not None:
            await self.rsd.stop()
        if self.phone is not None:
            await self.phone.close()
        for task in list(self._connections):
            task.cancel()
        for task in list(self._connections):
            with contextlib.suppress(BaseException):
                await task
        if self._server is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 2.0)
            self._server = None

    async def __aenter__(self) -> Twin:
        return await self.start()

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.stop()


class ThreadedTwin:
    """A twin on a thread of its own: ``with ThreadedTwin(cfg) as twin: ... twin.address``.

    ``call(fn)`` runs ``fn(phone)`` on the twin's loop (to change its state safely).
    """

    def __init__(self, cfg: TwinConfig):
        self.twin = Twin(cfg)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="phone-twin", daemon=True)

    @property
    def address(self) -> str:
        return self.twin.address

    @property
    def tunneld_address(self) -> str | None:
        return self.twin.tunneld_address

    @property
    def phone(self) -> Phone:
        assert self.twin.phone is not None
        return self.twin.phone

    def unplug(self) -> None:
        self.call(lambda _: self.twin.unplug())

    def replug(self) -> None:
        self.call(lambda _: self.twin.replug())

    def call(self, fn: Callable[[Phone], object]) -> object:
        async def run() -> object:
            return fn(self.phone)

        return asyncio.run_coroutine_threadsafe(run(), self._loop).result(30)

    def __enter__(self) -> ThreadedTwin:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self.twin.start(), self._loop).result(60)
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        try:
            asyncio.run_coroutine_threadsafe(self.twin.stop(), self._loop).result(30)
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)
            self._loop.close()


async def serve_forever(cfg: TwinConfig, ready: Callable[[Twin], None]) -> None:
    """Run until SIGINT or SIGTERM, then stop cleanly (app processes killed, connections closed)."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    async with Twin(cfg) as twin:
        ready(twin)
        await stop.wait()


async def serve_while(cfg: TwinConfig, command: list[str], ready: Callable[[Twin], None]) -> int:
    """Run `command` with this twin's addresses in its environment (``USBMUXD_SOCKET_ADDRESS``, and
    ``TUNNELD_ADDRESS`` from iOS 17), stop the twin when it ends and return its exit code. SIGINT and
    SIGTERM are passed on to the command; the twin stops once it has exited."""
    loop = asyncio.get_running_loop()
    async with Twin(cfg) as twin:
        ready(twin)
        env = {**os.environ, "USBMUXD_SOCKET_ADDRESS": twin.address}
        if twin.tunneld_address:
            env["TUNNELD_ADDRESS"] = twin.tunneld_address
        try:
            child = await asyncio.create_subprocess_exec(*command, env=env)
        except OSError as exc:
            print(f"orch twin serve: cannot run {command[0]}: {exc}", file=sys.stderr, flush=True)
            return 127
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, functools.partial(_forward, child, sig))
        try:
            return await child.wait()
        finally:
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.remove_signal_handler(sig)


def _forward(child: asyncio.subprocess.Process, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        child.send_signal(sig)
