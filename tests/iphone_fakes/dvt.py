"""The phone side of DVT: a real pymobiledevice3 `DTXConnection` on the far end of a socket pair,
serving process control and device info, plus the harness app those launches run."""

from __future__ import annotations

import asyncio
import json
import posixpath
import time
from typing import TYPE_CHECKING, Any

from pymobiledevice3.dtx import DTXConnection, DTXNsError, DTXService, dtx_on_invoke
from pymobiledevice3.dtx.ns_types import NSError

if TYPE_CHECKING:
    from iphone_fakes.phone import FakePhone

LAUNCH_SELECTOR = "launchSuspendedProcessWithDevicePath:bundleIdentifier:environment:arguments:options:"


class PhoneProcessControl(DTXService):
    IDENTIFIER = "com.apple.instruments.server.services.processcontrol"

    @property
    def phone(self) -> FakePhone:
        return self._ctx["phone"]  # type: ignore[no-any-return]

    @dtx_on_invoke(LAUNCH_SELECTOR)
    async def _launch(
        self, path: str, bundle: str, env: dict[str, Any], args: list[str], options: dict[str, Any]
    ) -> int:
        return self.phone.launch(self, bundle, list(args), dict(options))

    @dtx_on_invoke("sendSignal:toPid:")
    async def _signal(self, sig: int, pid: int) -> None:
        self.phone.signal(pid, int(sig))

    async def output(self, pid: int, text: str) -> None:
        await self._channel.invoke("outputReceived:fromProcess:atTime:", text, pid, time.time(), expects_reply=False)

    async def terminated(self, pid: int, code: int | None, sig: int | None) -> None:
        await self._channel.invoke("processWithPID:terminatedWithExitCode:orCrashingSignal:", pid, code, sig,
                                   expects_reply=False)


class PhoneDeviceInfo(DTXService):
    IDENTIFIER = "com.apple.instruments.server.services.deviceinfo"

    @dtx_on_invoke("isRunningPid:")
    async def _running(self, pid: int) -> bool:
        phone: FakePhone = self._ctx["phone"]
        phone.liveness_checks += 1
        return int(pid) in phone.running


async def serve_dvt(phone: FakePhone, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> DTXConnection:
    conn = DTXConnection(reader, writer)
    conn.ctx["phone"] = phone
    conn.register_services(PhoneProcessControl, PhoneDeviceInfo)
    await conn.connect()
    return conn


def refuse(message: str) -> DTXNsError:
    return DTXNsError(NSError(1, "FBSOpenApplicationErrorDomain", {"NSLocalizedDescription": message}))


def crash_report(process: str, exception: str = "EXC_BAD_ACCESS", signal: str = "SIGSEGV") -> bytes:
    """An .ips as iOS writes it: a JSON metadata line, then the JSON body."""
    meta = {"bug_type": "309", "name": process, "timestamp": "2026-01-01 00:00:00.00 +0000", "incident_id": "X"}
    body = {
        "exception": {"type": exception, "subtype": "KERN_INVALID_ADDRESS at 0x0", "signal": signal},
        "faultingThread": 0,
        "threads": [{"frames": [{"imageIndex": 0, "imageOffset": 4096, "symbol": "RawLoop.decodeStep"}]}],
        "usedImages": [{"path": f"/private/var/containers/Bundle/Application/X/{process}.app/{process}", "base": 1}],
    }
    return (json.dumps(meta) + "\n" + json.dumps(body)).encode()


def jetsam_report(process: str, pages: int = 163840) -> bytes:
    """A JetsamEvent .ips (bug_type 298): every process listed, the killed one with its reason."""
    meta = {"bug_type": "298", "timestamp": "2026-01-01 00:00:00.00 +0000", "incident_id": "J"}
    body = {"pageSize": 16384, "largestProcess": process, "processes": [
        {"name": "SpringBoard", "rpages": 9000, "pid": 34},
        {"name": process, "rpages": pages, "pid": 900, "reason": "per-process-limit"},
    ]}
    return (json.dumps(meta) + "\n" + json.dumps(body)).encode()


def app_path(argument: str) -> str | None:
    """The app shell's rule: paths are relative to Documents and stay inside it."""
    if argument.startswith("/") or ".." in argument.split("/"):
        return None
    return posixpath.join("/Documents", argument)
