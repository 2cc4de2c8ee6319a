"""How a device reaches its phone: a lockdown client for classic services, and a developer-service
provider for DVT (the lockdown client itself before iOS 17; an RSD through a tunnel from 17 on).

`Connector` is the seam the tests replace (with a fake lockdown provider over socket pairs); the
real one, `UsbConnector`, opens everything lazily inside the running event loop and keeps it
until `reset` (after an error) or `close`. Nothing here calls ``asyncio.run``.
"""

from __future__ import annotations

import contextlib
import os
from typing import TYPE_CHECKING, Any, Protocol

from packaging.version import Version

from orchestrator.config.fleet import IphoneDeviceConfig
from orchestrator.devices.iphone.errors import call
from orchestrator.protocol.device import DeviceUnavailable

if TYPE_CHECKING:
    from pymobiledevice3.lockdown_service_provider import LockdownServiceProvider

TUNNELD_DEFAULT = ("127.0.0.1", 49151)
# Where a fleet entry names no tunneld address: this variable (what `orch twin serve` exports for the
# command it runs), else pymobiledevice3's default port on loopback.
TUNNELD_ENV = "TUNNELD_ADDRESS"

# pmd-pytcp's stack is a process-global singleton: one userspace tunnel per process. The udid that
# holds it, so a second phone gets a clear "use tunneld" instead of a failure deep in the stack.
_userspace_holder: str | None = None


class Connector(Protocol):
    async def lockdown(self) -> LockdownServiceProvider:
        """A paired lockdown provider (install, house_arrest, diagnostics, crash reports)."""
        ...

    async def developer(self) -> LockdownServiceProvider:
        """The provider for developer services (DVT): lockdown before iOS 17, an RSD from 17 on."""
        ...

    async def reset(self) -> None:
        """Drop every cached connection (after a fault); the next call reconnects."""
        ...


def developer_needs_tunnel(product_version: str) -> bool:
    return Version(product_version).major >= 17


def parse_address(text: str | None) -> tuple[str, int]:
    """tunneld's host and port: ``text`` (the fleet's ``tunneld_address``), else $TUNNELD_ADDRESS,
    else 127.0.0.1:49151."""
    source = "tunneld_address"
    if not text:
        text, source = os.environ.get(TUNNELD_ENV), f"${TUNNELD_ENV}"
    if not text:
        return TUNNELD_DEFAULT
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"{source} {text!r} is not host:port")
    return host.strip("[]"), int(port)


class UsbConnector:
    """A phone on this host's usbmuxd (or the one at ``usbmux_address``)."""

    def __init__(self, cfg: IphoneDeviceConfig):
        self.cfg = cfg
        self._lockdown: Any = None
        self._rsd: Any = None
        self._tunnel: Any = None
        self._dvt_over_lockdown: bool | None = None

    async def lockdown(self) -> LockdownServiceProvider:
        if self._lockdown is not None:
            return self._lockdown
        from pymobiledevice3.exceptions import DeviceNotFoundError, NotPairedError
        from pymobiledevice3.lockdown import create_using_usbmux

        t, udid = self.cfg.connect_timeout_s, self.cfg.udid
        try:  # the same phone can be listed over USB and Wi-Fi: prefer the cable
            client = await call(
                create_using_usbmux(
                    serial=udid, autopair=False, connection_type="USB", usbmux_address=self.cfg.usbmux_address
                ), t, "lockdown over USB",
            )
        except DeviceNotFoundError:
            client = await call(
                create_using_usbmux(serial=udid, autopair=False, usbmux_address=self.cfg.usbmux_address),
                t, "lockdown over usbmux",
            )
        if not client.paired:
            with contextlib.suppress(Exception):
                await call(client.close(), self.cfg.call_timeout_s, "close lockdown")
            raise NotPairedError(f"{udid} does not trust this computer")
        self._lockdown = client
        return client

    async def developer(self) -> LockdownServiceProvider:
        """Lockdown itself where the phone serves DVT over it (before iOS 17, and wherever it does not
        refuse the service); on `InvalidService` (a real iOS 17+ phone) an RSD through a tunnel, as
        pymobiledevice3's own CLI retries."""
        lockdown = await self.lockdown()
        if not developer_needs_tunnel(lockdown.product_version):
            return lockdown
        if self._dvt_over_lockdown is None:
            self._dvt_over_lockdown = await self._serves_dvt(lockdown)
        if self._dvt_over_lockdown:
            return lockdown
        if self._rsd is None:
            self._rsd = await (self._tunneld() if self.cfg.tunnel == "tunneld" else self._userspace())
        return self._rsd

    async def _serves_dvt(self, lockdown: Any) -> bool:
        from pymobiledevice3.exceptions import InvalidServiceError
        from pymobiledevice3.services.dvt.instruments.dvt_provider import DvtProvider

        try:
            service = await call(lockdown.start_lockdown_service(DvtProvider.SERVICE_NAME), self.cfg.connect_timeout_s,
                                 "ask for DVT over lockdown")
        except InvalidServiceError:
            return False
        with contextlib.suppress(Exception):
            await call(service.close(), self.cfg.call_timeout_s, "close the DVT probe")
        return True

    async def _tunneld(self) -> Any:
        from pymobiledevice3.tunneld.api import get_tunneld_device_by_udid, get_tunneld_tunnels

        address, udid, t = parse_address(self.cfg.tunneld_address), self.cfg.udid, self.cfg.connect_timeout_s
        tunnels = await call(get_tunneld_tunnels(address), t, "ask tunneld for its tunnels")
        rsd = None
        if udid in tunnels:  # tunneld just answered: its blocking lookup inside is quick now
            try:
                rsd = await call(get_tunneld_device_by_udid(udid, address), t, "connect through tunneld")
            except IndexError:  # tunneld lists the tunnel, but connecting through it failed (skipped inside)
                raise DeviceUnavailable(
                    f"{self.cfg.id}: tunneld at {address[0]}:{address[1]} lists a tunnel for {udid} but it "
                    "could not be connected", fix="replug the phone; if it persists restart tunneld",
                    state="tunnel_unavailable",
                ) from None
        if rsd is None:
            raise DeviceUnavailable(
                f"{self.cfg.id}: tunneld at {address[0]}:{address[1]} has no tunnel for {udid}",
                fix="replug the phone and check tunneld's log (`sudo pymobiledevice3 remote tunneld`)",
                state="tunnel_unavailable",
            )
        return rsd

    async def _userspace(self) -> Any:
        global _userspace_holder
        from pymobiledevice3.remote.userspace_tunnel import UserspaceRsdTunnel

        udid = self.cfg.udid
        if _userspace_holder not in (None, udid):
            raise DeviceUnavailable(
                f"{self.cfg.id}: the userspace tunnel is already in use by {_userspace_holder} (one per process)",
                fix="with more than one iOS 17+ phone per host, set `tunnel: tunneld` and run "
                "`sudo pymobiledevice3 remote tunneld`",
                state="tunnel_unavailable",
            )
        _userspace_holder = udid
        tunnel = UserspaceRsdTunnel(serial=udid, autopair=False, remotepairing_fallback=False)
        try:
            rsd = await call(tunnel.aopen(), self.cfg.connect_timeout_s, "open the userspace tunnel")
        except BaseException:
            _userspace_holder = None
            with contextlib.suppress(Exception):
                await call(tunnel.aclose(), self.cfg.call_timeout_s, "close the userspace tunnel")
            raise
        self._tunnel = tunnel
        return rsd

    async def reset(self) -> None:
        global _userspace_holder
        rsd, tunnel, lockdown = self._rsd, self._tunnel, self._lockdown
        self._rsd = self._tunnel = self._lockdown = self._dvt_over_lockdown = None
        t = self.cfg.call_timeout_s
        if tunnel is not None:
            with contextlib.suppress(Exception):
                await call(tunnel.aclose(), t, "close the userspace tunnel")
            if _userspace_holder == self.cfg.udid:
                _userspace_holder = None
        elif rsd is not None:
            with contextlib.suppress(Exception):
                await call(rsd.close(), t, "close the RSD")
        if lockdown is not None:
            with contextlib.suppress(Exception):
                await call(lockdown.close(), t, "close lockdown")
