"""The phone side of DVT (``DVTSecureSocketProxy``): pymobiledevice3's own `DTXConnection`
serving process control and device info, backed by the twin's real processes."""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, Any

from pymobiledevice3.dtx import DTXConnection, DTXNsError, DTXService, dtx_on_invoke
from pymobiledevice3.dtx.ns_types import NSError

from orchestrator.twin.processes import LaunchRefused

if TYPE_CHECKING:
    from orchestrator.twin.phone import Phone

LAUNCH = "launchSuspendedProcessWithDevicePath:bundleIdentifier:environment:arguments:options:"


def refused(domain: str, message: str, code: int = 1) -> DTXNsError:
    return DTXNsError(NSError(code, domain, {"NSLocalizedDescription": message}))


class ProcessControl(DTXService):
    IDENTIFIER = "com.apple.instruments.server.services.processcontrol"

    @property
    def phone(self) -> Phone:
        return self._ctx["phone"]

    @dtx_on_invoke(LAUNCH)
    async def _launch(self, path: Any, bundle: str, env: Any, args: Any, options: Any) -> int:
        phone = self.phone
        options = options if isinstance(options, dict) else {}
        problem = phone.launch_problem(str(bundle))
        if problem is not None:
            raise refused("FBSOpenApplicationServiceErrorDomain", problem, 4)
        if options.get("KillExisting", True) and (old := phone.processes.by_bundle(bundle)) is not None:
            phone.processes.signal(old.pid, 9)
            await phone.processes.wait(old.pid, 5.0)
        try:
            return await phone.launch(str(bundle), [str(a) for a in (args or [])],
                                      dict(env) if isinstance(env, dict) else {},
                                      suspended=bool(options.get("StartSuspendedKey")), observer=self)
        except LaunchRefused as exc:
            raise refused("FBSOpenApplicationServiceErrorDomain",
                          f'The request to open "{bundle}" failed. {exc}', 1) from None

    @dtx_on_invoke("sendSignal:toPid:")
    async def _send_signal(self, sig: int, pid: int) -> None:
        if not self.phone.processes.signal(int(pid), int(sig)):
            raise refused("NSPOSIXErrorDomain", f"No such process: {pid}", 3)

    @dtx_on_invoke("killPid:")
    async def _kill(self, pid: int) -> None:
        self.phone.processes.signal(int(pid), 9)

    @dtx_on_invoke("suspendPid:")
    async def _suspend(self, pid: int) -> None:
        self.phone.processes.signal(int(pid), 19)  # SIGSTOP on Linux

    @dtx_on_invoke("resumePid:")
    async def _resume(self, pid: int) -> None:
        self.phone.processes.signal(int(pid), 18)  # SIGCONT on Linux

    @dtx_on_invoke("startObservingPid:")
    async def _observe(self, pid: int) -> None:
        run = self.phone.processes.running.get(int(pid))
        if run is not None:
            run.observer = self

    @dtx_on_invoke("stopObservingPid:")
    async def _unobserve(self, pid: int) -> None:
        run = self.phone.processes.running.get(int(pid))
        if run is not None and run.observer is self:
            run.observer = None

    @dtx_on_invoke("requestDisableMemoryLimitsForPid:")
    async def _lift(self, pid: int) -> bool:
        return self.phone.processes.lift_limit(int(pid))

    @dtx_on_invoke("isPidDebuggable:")
    async def _debuggable(self, pid: int) -> bool:
        run = self.phone.processes.running.get(int(pid))
        return run is not None and run.app.development

    @dtx_on_invoke("processIdentifierForBundleIdentifier:")
    async def _pid_for(self, bundle: str) -> int:
        run = self.phone.processes.by_bundle(str(bundle))
        return run.pid if run is not None else 0

    async def output(self, pid: int, text: str) -> None:
        await self._channel.invoke("outputReceived:fromProcess:atTime:", text, pid, time.time(), expects_reply=False)

    async def terminated(self, pid: int, exit_code: int, crashing_signal: int) -> None:
        await self._channel.invoke("processWithPID:terminatedWithExitCode:orCrashingSignal:", pid, exit_code,
                                   crashing_signal, expects_reply=False)

    def on_closed(self, reason: str = "") -> None:
        self.phone.processes.detach(self)
        super().on_closed(reason)


class DeviceInfo(DTXService):
    IDENTIFIER = "com.apple.instruments.server.services.deviceinfo"

    @property
    def phone(self) -> Phone:
        return self._ctx["phone"]

    @dtx_on_invoke("isRunningPid:")
    async def _running(self, pid: int) -> bool:
        return int(pid) in self.phone.processes.running

    @dtx_on_invoke("runningProcesses")
    async def _processes(self) -> list[dict[str, Any]]:
        procs: list[dict[str, Any]] = [{"pid": 1, "name": "launchd", "realAppName": "/sbin/launchd",
                                        "isApplication": False, "startDate": self.phone.booted}]
        for run in self.phone.processes.running.values():
            procs.append({"pid": run.pid, "name": run.app.executable, "isApplication": True,
                          "realAppName": self.phone.device_path(run.app), "bundleIdentifier": run.app.bundle_id,
                          "startDate": run.started})
        return procs

    @dtx_on_invoke("execnameForPid:")
    async def _execname(self, pid: int) -> str | None:
        run = self.phone.processes.running.get(int(pid))
        return self.phone.device_path(run.app) if run is not None else None

    @dtx_on_invoke("systemInformation")
    async def _system(self) -> dict[str, Any]:
        cfg = self.phone.cfg
        return {"ProductVersion": cfg.ios, "BuildVersion": cfg.build_version, "ProductType": cfg.product_type,
                "_deviceDescription": f"{cfg.device_name} ({cfg.product_type})"}

    @dtx_on_invoke("hardwareInformation")
    async def _hardware(self) -> dict[str, Any]:
        return {"numberOfCpus": 6, "numberOfPhysicalCpus": 6, "hwCPUsubtype": 2, "hwCPUtype": 16777228,
                "speedOfCpus": 0}

    @dtx_on_invoke("nameForUID:")
    async def _uid(self, uid: int) -> str:
        return "mobile" if int(uid) == 501 else "root"


async def serve_dvt(phone: Phone, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    conn = DTXConnection(reader, writer)
    conn.ctx["phone"] = phone
    conn.register_services(ProcessControl, DeviceInfo)
    try:
        await conn.connect()
        await conn.wait_disconnected()
    except Exception:
        await conn.aclose()
