"""A fake iPhone at pymobiledevice3's own seams: a `LockdownServiceProvider` whose services are
`ServiceConnection.from_socket` over socket pairs, the far ends served by this phone."""

from __future__ import annotations

import asyncio
import contextlib
import json
import plistlib
import posixpath
import socket
import zipfile
from pathlib import Path
from typing import Any

from pymobiledevice3 import exceptions as pmd
from pymobiledevice3.lockdown_service_provider import LockdownServiceProvider
from pymobiledevice3.service_connection import ServiceConnection

from iphone_fakes import dvt, services
from iphone_fakes import fs as afc_fs
from iphone_fakes.fs import FakeFs

DVT_SERVICE = "com.apple.instruments.remoteserver.DVTSecureSocketProxy"
DEVELOPER_SERVICES = (DVT_SERVICE, "com.apple.crashreportmover")


def make_ipa(path: Path, bundle_id: str, version: str = "1.0", build: str = "1", process: str = "HarnessApp",
             minimum_os: str = "18.0") -> Path:
    info = {"CFBundleIdentifier": bundle_id, "CFBundleShortVersionString": version, "CFBundleVersion": build,
            "CFBundleExecutable": process, "MinimumOSVersion": minimum_os}
    with zipfile.ZipFile(path, "w") as z:
        z.writestr(f"Payload/{process}.app/Info.plist", plistlib.dumps(info, fmt=plistlib.FMT_BINARY))
        z.writestr(f"Payload/{process}.app/{process}", b"\xcf\xfa\xed\xfe" + bytes([version.__len__()]))
    return path


class FakePhone:
    """State a test sets, and the behaviour of the harness app on it.

    ``mode`` of an app: ``ok`` | ``crash`` | ``oom`` | ``hang`` | ``garbage`` | ``exit0`` | ``unplug``.
    """

    def __init__(self, udid: str = "00008140-000A1B2C3D4E5F60", product_type: str = "iPhone17,1",
                 ios: str = "18.5"):
        self.udid, self.product_type, self.ios = udid, product_type, ios
        self.plugged = True
        self.developer_mode = True
        self.ddi_mounted = True
        self.refused: set[str] = set()  # services whose start the phone refuses (StartServiceError)
        self.battery: dict[str, Any] = {"Temperature": 3050, "IsCharging": False, "ExternalConnected": True,
                                        "CurrentCapacity": 80}
        self.thermal = "nominal"
        self.engines = {"rawloop-metal", "rawloop-cpu"}
        self.per_token_s = 1e-4
        self.apps: dict[str, dict[str, Any]] = {}
        self.modes: dict[str, str] = {}
        self.containers: dict[str, FakeFs] = {}
        self.media = FakeFs("/PublicStaging")
        self.crashes = FakeFs()
        self.installs: list[str] = []
        self.launches: list[tuple[str, list[str]]] = []
        self.running: set[int] = set()
        self.liveness_checks = 0  # isRunningPid calls
        self.termination_notices = True  # False: DVT's termination message is lost
        self.report_delay_s = 0.0  # how long after a death its crash report appears
        self.signals: list[tuple[int, int]] = []
        self._tasks: dict[int, asyncio.Task[None]] = {}
        self._writers: list[asyncio.StreamWriter] = []
        self._dtx: list[Any] = []
        self._next_pid = 500

    # -- state changes a test makes ----------------------------------------------------------------
    def install(self, info: dict[str, Any]) -> None:
        bundle = info["CFBundleIdentifier"]
        self.apps[bundle] = dict(info)
        self.containers.setdefault(bundle, FakeFs("/Documents", "/Library", "/tmp"))
        self.installs.append(bundle)

    def unplug(self) -> None:
        self.plugged = False
        for w in self._writers:
            with contextlib.suppress(Exception):
                w.transport.abort()
        for conn in self._dtx:
            asyncio.get_running_loop().create_task(conn.aclose())
        for task in self._tasks.values():
            task.cancel()

    # -- lockdown --------------------------------------------------------------------------------
    def check(self, name: str | None = None) -> None:
        if not self.plugged:
            raise pmd.ConnectionTerminatedError()
        if name is None:
            return
        if name.removesuffix(".shim.remote") in DEVELOPER_SERVICES and not self.ddi_mounted:
            raise pmd.InvalidServiceError("InvalidService", self.udid, self.ios)
        if name.removesuffix(".shim.remote") in self.refused:
            raise pmd.StartServiceError(name, "ServiceProhibited")

    async def connect(self, name: str) -> ServiceConnection:
        self.check(name)
        near, far = socket.socketpair()
        reader, writer = await asyncio.open_connection(sock=far)
        self._writers.append(writer)
        if name == DVT_SERVICE:
            asyncio.get_running_loop().create_task(self._serve_dvt(reader, writer))
        else:
            asyncio.get_running_loop().create_task(services.serve(name, self, reader, writer))
        return await ServiceConnection.from_socket(near)

    async def _serve_dvt(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._dtx.append(await dvt.serve_dvt(self, reader, writer))

    # -- the app ---------------------------------------------------------------------------------
    def launch(self, pc: dvt.PhoneProcessControl, bundle: str, args: list[str], options: dict[str, Any]) -> int:
        if bundle not in self.apps:
            raise dvt.refuse(f"Unable to launch {bundle}: no such application")
        self._next_pid += 1
        pid = self._next_pid
        self.launches.append((bundle, args))
        self.running.add(pid)
        self._tasks[pid] = asyncio.get_running_loop().create_task(self._run_app(pc, bundle, pid, args))
        return pid

    def signal(self, pid: int, sig: int) -> None:
        self.signals.append((pid, sig))
        task = self._tasks.get(pid)
        if task is not None:
            task.cancel()

    async def _exit(self, pc: dvt.PhoneProcessControl, pid: int, code: int | None, sig: int | None) -> None:
        self.running.discard(pid)
        self._tasks.pop(pid, None)
        if self.termination_notices:
            with contextlib.suppress(Exception):
                await pc.terminated(pid, code, sig)

    async def _run_app(self, pc: dvt.PhoneProcessControl, bundle: str, pid: int, args: list[str]) -> None:
        try:
            await self._app(pc, bundle, pid, args)
        except asyncio.CancelledError:
            self.running.discard(pid)
            self._tasks.pop(pid, None)
            with contextlib.suppress(Exception):
                await asyncio.shield(pc.terminated(pid, None, 9))

    async def _app(self, pc: dvt.PhoneProcessControl, bundle: str, pid: int, args: list[str]) -> None:
        fs, mode = self.containers[bundle], self.modes.get(bundle, "ok")
        process = self.apps[bundle].get("CFBundleExecutable", "HarnessApp")
        await asyncio.sleep(0.001)
        if mode in ("crash", "oom"):  # ReportCrash writes the report a moment after the death
            name, report = ((f"/{process}-2026-01-01-000000.ips", dvt.crash_report(process)) if mode == "crash"
                            else ("/JetsamEvent-2026-01-01-000000.ips", dvt.jetsam_report(process)))
            if self.report_delay_s:
                asyncio.get_running_loop().call_later(self.report_delay_s, self.crashes.write, name, report)
            else:
                self.crashes.write(name, report)
            await self._exit(pc, pid, None, 11 if mode == "crash" else 9)
            return
        if mode == "exit0":
            await self._exit(pc, pid, 0, None)
            return
        if mode == "unplug":
            self.unplug()
            return
        opts = dict(zip(args[::2], args[1::2], strict=False))
        out = dvt.app_path(opts.get("--out", ""))
        if out is None:
            await self._exit(pc, pid, 64, None)
            return
        if opts.get("--probe") == "thermal":
            fs.write(out, json.dumps({"thermal_state": self.thermal, "low_power": False}).encode())
            probe_id = posixpath.basename(out).removesuffix(".json")  # the id the app prints: the file's stem
            await pc.output(pid, f"HARNESS_DONE {probe_id} {out}\n")
            await self._exit(pc, pid, 0, None)
            return
        spec_path = dvt.app_path(opts.get("--spec", ""))
        raw = fs.read(spec_path) if spec_path else None
        if raw is None:
            await self._exit(pc, pid, 64, None)
            return
        spec = json.loads(raw)
        await asyncio.sleep(spec["decode_tokens"] * self.per_token_s)
        if mode == "hang":
            await asyncio.sleep(3600)
        data = b'{"schema_version": 1, "trial_id": \x00\xff' if mode == "garbage" else self.result(spec, fs)
        fs.write(out + ".tmp", data)
        if fs.rename(out + ".tmp", out) != afc_fs.OK:  # the app's atomic write failed: no sentinel
            await self._exit(pc, pid, 1, None)
            return
        await pc.output(pid, f"loaded {spec['model']}\nHARNESS_DONE {spec['trial_id']} {opts['--out']}\n")
        await self._exit(pc, pid, 0 if b'"ok"' in data else 2, None)

    def result(self, spec: dict[str, Any], fs: FakeFs | None = None) -> bytes:
        base: dict[str, Any] = {
            "schema_version": 1, "run_id": spec["run_id"], "trial_id": spec["trial_id"], "engine": spec["engine"],
            "engine_version": "fake-1", "harness_build": "fake-build", "model": spec["model"],
            "prompt_tokens": spec["prompt_tokens"], "chunk_width": spec["chunk_width"],
        }
        # as the real app (HarnessCore's AppDocuments): the model is relative to Documents and must be there
        if spec["model"].startswith("/"):
            return json.dumps({**base, "status": "error", "error": {
                "kind": "bad_spec", "message": f"model: '{spec['model']}' is absolute; paths are relative to the "
                "app's Documents"}}).encode()
        if fs is None or fs.read("/Documents/" + spec["model"]) is None:
            return json.dumps({**base, "status": "error", "error": {
                "kind": "model_not_found", "message": f"no model at {spec['model']}"}}).encode()
        if spec["engine"] not in self.engines:
            return json.dumps({**base, "status": "error", "error": {
                "kind": "bad_spec", "message": f"engine '{spec['engine']}' is not in this build"}}).encode()
        n = spec["decode_tokens"]
        times = [2_000_000 + 10_000_000 * i for i in range(n)]
        gen = {"prefill_ns": 1_000_000, "ttft_ns": times[0], "token_ids": [(7 * i) % 32000 for i in range(n)],
               "token_times_ns": times}
        return json.dumps({**base, "status": "ok", "trial1": gen, "bytes_per_decode_token": 1_000_000,
                           "thermal": [{"t_ns": 0, "state": "nominal"}, {"t_ns": times[-1], "state": self.thermal}],
                           }).encode()


class FakeLockdown(LockdownServiceProvider):
    """The phone's lockdownd, as pymobiledevice3 sees any provider."""

    def __init__(self, phone: FakePhone):
        super().__init__()
        self.phone = phone
        self.udid = phone.udid
        self.product_type = phone.product_type
        self.all_values = {"UniqueDeviceID": phone.udid, "ProductType": phone.product_type,
                           "ProductVersion": phone.ios, "BuildVersion": "22F76", "ChipID": 0x8140}
        self._ports: dict[int, str] = {}

    @property
    def product_version(self) -> str:
        return self.phone.ios

    @property
    def product_build_version(self) -> str | None:
        return "22F76"

    @property
    def ecid(self) -> int:
        return 1

    async def get_value(self, domain: str | None = None, key: str | None = None) -> Any:
        self.phone.check()
        if domain == "com.apple.security.mac.amfi" and key == "DeveloperModeStatus":
            return self.phone.developer_mode
        if domain is None and key is None:
            return dict(self.all_values)
        if domain is None and key in self.all_values:
            return self.all_values[key]
        raise pmd.MissingValueError("MissingValue", self.udid, self.phone.ios)

    async def set_value(self, value: Any, domain: str | None = None, key: str | None = None) -> dict[str, Any]:
        raise pmd.SetProhibitedError("SetProhibited", self.udid, self.phone.ios)

    async def remove_value(self, domain: str | None = None, key: str | None = None) -> dict[str, Any]:
        raise pmd.SetProhibitedError("SetProhibited", self.udid, self.phone.ios)

    async def start_lockdown_service(self, name: str, include_escrow_bag: bool = False) -> ServiceConnection:
        return await self.phone.connect(name)

    async def get_service_connection_attributes(self, name: str, include_escrow_bag: bool = False) -> dict[str, Any]:
        self.phone.check(name)
        port = 62000 + len(self._ports)
        self._ports[port] = name
        return {"Port": port, "EnableServiceSSL": False, "Service": name}

    async def create_service_connection(self, port: int, ssl_context: Any = None,
                                        strip_ssl: bool = False) -> ServiceConnection:
        return await self.phone.connect(self._ports.pop(port))


class FakeConnector:
    """What `UsbConnector` does, for a fake phone: the failures a test sets come out of it."""

    def __init__(self, phone: FakePhone):
        self.phone = phone
        self.tunnel_error: Exception | None = None
        self._lockdown: FakeLockdown | None = None

    async def lockdown(self) -> LockdownServiceProvider:
        if not self.phone.plugged:
            raise pmd.NoDeviceConnectedError()
        if self._lockdown is None:
            self._lockdown = FakeLockdown(self.phone)
        return self._lockdown

    async def developer(self) -> LockdownServiceProvider:
        lockdown = await self.lockdown()
        if self.tunnel_error is not None:
            raise self.tunnel_error
        return lockdown

    async def reset(self) -> None:
        self._lockdown = None



HARNESS = "dev.orch.harness"


def make_device(phone: FakePhone, tmp_path: Path, **over: Any) -> tuple[Any, FakeConnector]:
    """An `IphoneDevice` on ``phone`` with a harness .ipa in ``tmp_path`` and test-speed polling."""
    from orchestrator.config.fleet import IphoneDeviceConfig
    from orchestrator.devices.iphone import IphoneDevice

    fields: dict[str, Any] = {
        "id": "phone", "kind": "iphone", "udid": phone.udid, "ipa": str(make_ipa(tmp_path / "harness.ipa", HARNESS)),
        "poll_s": 0.01, "call_timeout_s": 5.0, "crash_report_wait_s": 2.0,
    }
    fields.update(over)
    connector = FakeConnector(phone)
    return IphoneDevice(IphoneDeviceConfig.model_validate(fields), connector=connector), connector
