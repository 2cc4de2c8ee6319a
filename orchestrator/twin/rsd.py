"""The iOS 17+ developer path, from the point where a tunnel is up: RemoteServiceDiscovery (the
RemoteXPC handshake over HTTP/2 that lists services and their ports), the services behind it
(``dtservicehub`` for DVT, ``*.shim.remote`` lockdown services after ``RSDCheckin``, the remote
lockdown), and a tunneld stand-in (``GET /`` -> this phone's RSD address) so pymobiledevice3's
``get_tunneld_device_by_udid`` finds it.

Not emulated: the tunnel itself (CoreDeviceProxy over usbmux, RemotePairing, the TUN interface or
userspace TCP stack). The RSD and service ports listen on the twin's host address directly, as if
the tunnel had handed them out.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import struct
import uuid
from functools import partial
from typing import TYPE_CHECKING, Any

from pymobiledevice3.remote.xpc_message import (
    XpcMessageType,
    XpcUInt64Type,
    XpcWrapper,
    create_xpc_wrapper,
    decode_xpc_object,
)

from orchestrator.twin.wire import PeerGone, close, read_plist, send_plist

if TYPE_CHECKING:
    from orchestrator.twin.phone import Phone

log = logging.getLogger(__name__)
HTTP2_MAGIC = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
DATA, SETTINGS, WINDOW_UPDATE = 0x0, 0x4, 0x8  # HTTP/2 frame types (RFC 9113)
DTSERVICEHUB = "com.apple.instruments.dtservicehub"
REMOTE_LOCKDOWN = "com.apple.mobile.lockdown.remote.trusted"
SHIMS = ("com.apple.afc", "com.apple.mobile.house_arrest", "com.apple.mobile.installation_proxy",
         "com.apple.mobile.diagnostics_relay", "com.apple.mobile.mobile_image_mounter",
         "com.apple.crashreportcopymobile", "com.apple.crashreportmover")
MAX_FRAME = 16384


class Rsd:
    """The RSD endpoint and its service listeners, plus the tunneld stand-in."""

    def __init__(self, phone: Phone, host: str):
        self.phone = phone
        self.host = host
        self.servers: dict[str, asyncio.Server] = {}
        self.tasks: set[asyncio.Task[None]] = set()
        self.writers: set[asyncio.StreamWriter] = set()

    def port(self, name: str) -> int:
        return int(self.servers[name].sockets[0].getsockname()[1])

    async def start(self, tunneld_port: int) -> None:
        self.servers["rsd"] = await asyncio.start_server(self._tracked(self._rsd), self.host, 0)
        for name in (DTSERVICEHUB, REMOTE_LOCKDOWN, *(f"{s}.shim.remote" for s in SHIMS)):
            self.servers[name] = await asyncio.start_server(self._tracked(partial(self._service, name)), self.host, 0)
        self.servers["tunneld"] = await asyncio.start_server(self._tracked(self._tunneld), self.host, tunneld_port)

    async def stop(self) -> None:
        for server in self.servers.values():
            server.close()
        for task in list(self.tasks):
            task.cancel()
        for task in list(self.tasks):
            with contextlib.suppress(BaseException):
                await task

    def _tracked(self, handler: Any) -> Any:
        async def run(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            task = asyncio.current_task()
            assert task is not None
            self.tasks.add(task)
            self.writers.add(writer)
            try:
                if self.phone.plugged or handler == self._tunneld:  # unplugged: the tunnel is gone
                    await handler(reader, writer)
            except (asyncio.CancelledError, PeerGone, asyncio.IncompleteReadError, ConnectionError):
                pass
            except Exception:
                log.exception("twin rsd: connection failed")
            finally:
                self.tasks.discard(task)
                self.writers.discard(writer)
                await close(writer)

        return run

    # -- tunneld --------------------------------------------------------------------------------
    async def _tunneld(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        method, path, *_ = [*head.split(b"\r\n", 1)[0].split(b" "), b"", b""]
        if method == b"GET" and path.split(b"?")[0] == b"/":
            cfg = self.phone.cfg
            tunnels = {} if not self.phone.plugged else {cfg.udid: [{
                "tunnel-address": self.host, "tunnel-port": self.port("rsd"), "interface": f"twin-{cfg.udid}"}]}
            body, status = json.dumps(tunnels).encode(), b"200 OK"
        else:
            body, status = b'{"detail": "Not Found"}', b"404 Not Found"
        writer.write(b"HTTP/1.1 " + status + b"\r\ncontent-type: application/json\r\ncontent-length: "
                     + str(len(body)).encode() + b"\r\nconnection: close\r\n\r\n" + body)
        await writer.drain()

    # -- RemoteServiceDiscovery -----------------------------------------------------------------
    def peer_info(self) -> dict[str, Any]:
        phone, cfg = self.phone, self.phone.cfg
        services = {name: {"Port": str(self.port(name)), "Properties": {}}
                    for name in self.servers if name not in ("rsd", "tunneld")}
        if not (phone.ddi_mounted and phone.developer_mode):
            services.pop(DTSERVICEHUB)  # advertised once the developer disk image is mounted
        return {
            "MessageType": "Handshake", "MessagingProtocolVersion": XpcUInt64Type(7),
            "UUID": uuid.uuid5(uuid.NAMESPACE_OID, cfg.udid),
            "Properties": {
                "UniqueDeviceID": cfg.udid, "ProductType": cfg.product_type, "OSVersion": cfg.ios,
                "BuildVersion": cfg.build_version, "UniqueChipID": XpcUInt64Type(cfg.ecid),
                "ChipID": XpcUInt64Type(cfg.chip_id), "DeviceClass": "iPhone", "ProductName": "iPhone OS",
                "HardwareModel": "D93AP", "RemoteXPCVersionFlags": XpcUInt64Type(0x0100000000000006),
                "SensitivePropertiesVisible": True,
            },
            "Services": services,
        }

    async def _rsd(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if await reader.readexactly(len(HTTP2_MAGIC)) != HTTP2_MAGIC:
            return
        # the listener's preface: SETTINGS (max streams, initial window), then more connection window
        writer.write(_frame(SETTINGS, 0, 0, struct.pack(">HIHI", 0x3, 100, 0x4, 1 << 20)))
        writer.write(_frame(WINDOW_UPDATE, 0, 0, struct.pack(">I", (1 << 24) - 65535)))
        await writer.drain()
        while True:
            kind, _flags, stream, body = await _read_frame(reader)
            if kind != DATA or not body:
                continue
            try:
                wrapper = XpcWrapper.parse(body)
            except Exception:
                continue  # not one whole message: the ones the handshake needs always are
            payload = wrapper.payload
            if payload is None or payload.type != XpcMessageType.DICTIONARY or not payload.data:
                continue
            message = decode_xpc_object(payload)
            if isinstance(message, dict) and message.get("MessageType") == "Handshake":
                data = create_xpc_wrapper(self.peer_info(), message_id=wrapper.message_id + 1)
                for offset in range(0, len(data), MAX_FRAME):
                    writer.write(_frame(DATA, 0, stream, data[offset:offset + MAX_FRAME]))
                await writer.drain()

    # -- services -------------------------------------------------------------------------------
    async def _service(self, name: str, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        from orchestrator.twin.dvt import serve_dvt
        from orchestrator.twin.lockdown import Lockdown
        from orchestrator.twin.phone import SERVICES

        phone = self.phone
        if name == DTSERVICEHUB:
            if phone.ddi_mounted and phone.developer_mode:
                await serve_dvt(phone, reader, writer)
            return
        checkin = await read_plist(reader)
        if not isinstance(checkin, dict) or checkin.get("Request") != "RSDCheckin":
            return
        await send_plist(writer, {"Request": "RSDCheckin"})
        if not phone.unlocked_since_boot and name != REMOTE_LOCKDOWN:
            await send_plist(writer, {"Request": "StartService", "Error": "PasswordProtected"})
            return
        await send_plist(writer, {"Request": "StartService"})
        if name == REMOTE_LOCKDOWN:
            lockdown = Lockdown(phone)
            lockdown.session_id = "RSD"  # the trusted tunnel is the session: no StartSession, no TLS
            await lockdown.serve(reader, writer)
            return
        await SERVICES[name.removesuffix(".shim.remote")].handler(phone, reader, writer)


def _frame(kind: int, flags: int, stream: int, body: bytes) -> bytes:
    return struct.pack(">I", len(body))[1:] + bytes([kind, flags]) + struct.pack(">I", stream) + body


async def _read_frame(reader: asyncio.StreamReader) -> tuple[int, int, int, bytes]:
    """(type, flags, stream id, payload) of the next HTTP/2 frame (padding removed from DATA)."""
    header = await reader.readexactly(9)
    length = int.from_bytes(header[:3], "big")
    kind, flags, stream = header[3], header[4], struct.unpack(">I", header[5:])[0] & 0x7FFFFFFF
    body = await reader.readexactly(length)
    if kind == DATA and flags & 0x8 and body:  # PADDED
        body = body[1:len(body) - body[0]]
    return kind, flags, stream, body
