"""The phone: its state (identity, trust, apps, disk, processes, thermals, crash reports), the
services lockdown starts, and the ports they wait on."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import plistlib
import secrets
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orchestrator.twin import services
from orchestrator.twin.afc import AfcServer, View
from orchestrator.twin.apps import BUNDLE_PREFIX, App, AppStore
from orchestrator.twin.config import TwinConfig
from orchestrator.twin.crashes import CrashReports
from orchestrator.twin.disk import Disk
from orchestrator.twin.pairing import DeviceKey, HostRecords, TrustStore, mint_pair_record
from orchestrator.twin.processes import Observer, Processes
from orchestrator.twin.thermal import ThermalClock, battery_entry
from orchestrator.twin.wire import PeerGone, close

log = logging.getLogger(__name__)

LOCKDOWN_PORT = 62078
DVT = "com.apple.instruments.remoteserver.DVTSecureSocketProxy"
Handler = Callable[["Phone", asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


@dataclass(frozen=True)
class Service:
    handler: Handler
    ssl: bool = False
    developer: bool = False  # needs the developer disk image (and, from iOS 16, Developer Mode)


async def _afc(phone: Phone, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    await AfcServer(View(phone.media, phone.disk, model=phone.cfg.product_type)).serve(reader, writer)


async def _crash_copy(phone: Phone, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    await AfcServer(View(phone.crashes.visible, phone.disk, model=phone.cfg.product_type)).serve(reader, writer)


async def _dvt(phone: Phone, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    from orchestrator.twin.dvt import serve_dvt

    await serve_dvt(phone, reader, writer)


SERVICES: dict[str, Service] = {
    "com.apple.afc": Service(_afc),
    "com.apple.mobile.house_arrest": Service(services.house_arrest),
    "com.apple.mobile.installation_proxy": Service(services.installation_proxy),
    "com.apple.mobile.diagnostics_relay": Service(services.diagnostics_relay),
    "com.apple.iosdiagnostics.relay": Service(services.diagnostics_relay),
    "com.apple.mobile.mobile_image_mounter": Service(services.image_mounter),
    "com.apple.crashreportcopymobile": Service(_crash_copy),
    "com.apple.crashreportmover": Service(services.crash_mover),
    DVT: Service(_dvt, ssl=True, developer=True),
}


@dataclass
class PendingPort:
    service: str
    ssl: bool
    host_id: str
    expires: float


class Phone:
    def __init__(self, cfg: TwinConfig):
        self.cfg = cfg
        root = cfg.root
        root.mkdir(parents=True, exist_ok=True)
        self.key = DeviceKey(root)
        self.trusted = TrustStore(root, self.key)
        self.records = HostRecords(root)
        self.buid, self.wifi_mac = self._host_identity(root)
        self.media = root / "Media"
        for sub in ("PublicStaging", "Downloads", "DCIM"):
            (self.media / sub).mkdir(parents=True, exist_ok=True)
        self.disk = Disk(root, cfg.disk_bytes)
        self.apps = AppStore(root, cfg.udid, cfg.version)
        self.crashes = CrashReports(root, cfg.crash_report_delay_s, f"iPhone OS {cfg.ios} ({cfg.build_version})",
                                    cfg.product_type)
        self.processes = Processes(cfg.launch, self.crashes, cfg.memory_poll_s, self._app_environment)
        self.thermal = ThermalClock(cfg.thermal, cfg.thermal_speed, self.processes.pids)
        # state a test may change while the twin runs (`ThreadedTwin.call`); `Twin.unplug` for the cable
        self.plugged = True
        self.locked = cfg.locked
        self.unlocked_since_boot = cfg.unlocked_since_boot
        self.developer_mode = cfg.developer_mode
        self.ddi_mounted = cfg.ddi_mounted and cfg.developer_mode
        self.trust_answer = cfg.trust
        self.charging = cfg.charging
        self.booted = time.time()
        self._ports: dict[int, PendingPort] = {}
        self._next_port = 49152
        self._tasks: set[asyncio.Task[None]] = set()
        if cfg.paired and self.records.read(cfg.udid) is None:
            record = mint_pair_record(self.key, self.buid, self.wifi_mac)
            self.trusted.trust(record)
            self.records.save(cfg.udid, plistlib.dumps(record))

    @staticmethod
    def _host_identity(root: Path) -> tuple[str, str]:
        path = root / "usbmuxd" / "SystemConfiguration.plist"
        if path.exists():
            saved = plistlib.loads(path.read_bytes())
            return str(saved["SystemBUID"]), str(saved["WiFiMACAddress"])
        buid = str(uuid.uuid4()).upper()
        mac = ":".join(f"{b:02x}" for b in bytes([0x02]) + secrets.token_bytes(5))
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(plistlib.dumps({"SystemBUID": buid, "WiFiMACAddress": mac}))
        return buid, mac

    # -- lockdown values -----------------------------------------------------------------------
    def values(self, session: bool) -> dict[str, Any]:
        """GetValue with no domain: a few identity values before a session, everything in one."""
        cfg = self.cfg
        public = {
            "BuildVersion": cfg.build_version, "DeviceClass": "iPhone", "DeviceName": cfg.device_name,
            "DevicePublicKey": self.key.public_pem, "ProductName": "iPhone OS", "ProductType": cfg.product_type,
            "ProductVersion": cfg.ios, "UniqueDeviceID": cfg.udid, "UniqueChipID": cfg.ecid,
            "WiFiAddress": self.wifi_mac, "HostAttached": True, "PasswordProtected": self.locked,
        }
        if not session:
            return public
        return {**public, "ActivationState": "Activated", "BluetoothAddress": "02:00:00:00:00:01",
                "CPUArchitecture": "arm64e", "ChipID": cfg.chip_id, "DieID": cfg.ecid, "HardwareModel": "D93AP",
                "ModelNumber": "MYW13", "SerialNumber": f"TWIN{cfg.ecid % 10**8:08d}", "TimeZone": "UTC",
                "TimeIntervalSince1970": time.time(), "Uses24HourClock": True, "FirmwareVersion": "iBoot-11881",
                "HumanReadableProductVersionString": cfg.ios, "TrustedHostAttached": True}

    def domain(self, domain: str) -> dict[str, Any] | None:
        if domain == "com.apple.security.mac.amfi":
            return {"DeveloperModeStatus": self.developer_mode}
        if domain == "com.apple.disk_usage":
            free = self.disk.free()
            return {"TotalDiskCapacity": self.cfg.disk_bytes, "TotalDataCapacity": self.cfg.disk_bytes,
                    "TotalDataAvailable": free, "AmountDataAvailable": free,
                    "AmountDataReserved": 0, "TotalSystemCapacity": 0, "TotalSystemAvailable": 0}
        if domain == "com.apple.mobile.battery":
            return {"BatteryCurrentCapacity": self.cfg.battery_percent, "BatteryIsCharging": self.charging,
                    "ExternalConnected": self.charging}
        if domain == "com.apple.mobile.lockdown":
            return {"EnableWifiConnections": False}
        return None

    # -- services ------------------------------------------------------------------------------
    def image_type(self) -> str:
        return "Personalized" if self.cfg.version.major >= 17 else "Developer"

    def image_signature(self) -> bytes:
        return hashlib.sha384(f"twin-ddi-{self.cfg.ios}".encode()).digest()

    def start_service(self, name: str, host_id: str) -> tuple[int, bool] | str:
        """A port for the service, or the lockdown error a phone answers."""
        service = SERVICES.get(name)
        if service is None:
            return "InvalidService"
        if not self.unlocked_since_boot:
            return "PasswordProtected"
        if service.developer and (
            not self.ddi_mounted or not self.developer_mode
            or (self.cfg.developer_over_lockdown == "as-ios" and self.cfg.version.major >= 17)
        ):
            return "InvalidService"
        now = time.monotonic()
        self._ports = {p: v for p, v in self._ports.items() if v.expires > now}
        while self._next_port in self._ports or self._next_port == LOCKDOWN_PORT:
            self._next_port = 49152 + (self._next_port - 49152 + 1) % 16000
        port = self._next_port
        self._next_port = 49152 + (self._next_port - 49152 + 1) % 16000
        self._ports[port] = PendingPort(name, service.ssl, host_id, now + 30.0)
        return port, service.ssl

    def take_port(self, port: int) -> PendingPort | None:
        pending = self._ports.pop(port, None)
        if pending is None or pending.expires < time.monotonic():
            return None
        return pending

    async def serve(self, pending: PendingPort, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)
        try:
            await SERVICES[pending.service].handler(self, reader, writer)
        except PeerGone:
            pass
        except Exception:
            log.exception("twin: %s failed", pending.service)
        finally:
            if task is not None:
                self._tasks.discard(task)
            await close(writer)

    # -- apps ----------------------------------------------------------------------------------
    def launch_problem(self, bundle_id: str) -> str | None:
        if self.locked:
            return (f'The request to open "{bundle_id}" failed. The request was denied by service delegate '
                    "(SBMainWorkspace) for reason: Locked (\"Unable to launch because the device was not, or "
                    "could not be, unlocked\").")
        if self.apps.get(bundle_id) is None:
            return (f'The request to open "{bundle_id}" failed. Application info provider (FBSApplicationLibrary) '
                    f'returned nil for "{bundle_id}"')
        return None

    async def launch(self, bundle_id: str, arguments: list[str], environment: dict[str, str], *, suspended: bool,
                     observer: Observer | None) -> int:
        app = self.apps.get(bundle_id)
        assert app is not None
        return await self.processes.launch(
            app, self.apps.executable(app), self.apps.container(app), arguments, environment,
            suspended=suspended, limit=self.cfg.memory_limit(app.increased_memory), observer=observer)

    def device_path(self, app: App) -> str:
        return f"{BUNDLE_PREFIX}/{app.bundle_uuid}/{app.app_name}/{app.executable}"

    def _app_environment(self) -> dict[str, str]:
        """What an app reads from the OS on a phone, handed to the Linux build at launch (the seam
        ``harness app`` reads: ProcessInfo.thermalState and Low Power Mode)."""
        return {"HARNESS_THERMAL_STATE": self.thermal.state(), "HARNESS_LOW_POWER": "1" if self.cfg.low_power
                else "0"}

    def battery(self) -> dict[str, Any]:
        return battery_entry(self.thermal.battery_c(), self.cfg.battery_temperature_scale,
                             self.cfg.battery_percent, self.charging)

    async def close(self) -> None:
        await self.processes.stop_all()
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with contextlib.suppress(BaseException):
                await task
