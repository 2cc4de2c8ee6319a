"""usbmuxd over TCP (what ``USBMUXD_SOCKET_ADDRESS=host:port`` selects), for one phone.

Packets are ``u32 length (counting itself) | u32 version | u32 message | u32 tag`` little-endian,
then an XML plist; replies carry version 1 (plist), message 8 and the request's tag. ``Connect``
turns the connection into a raw pipe to a port on the phone (lockdownd, or a service port lockdown
handed out); its ``PortNumber`` arrives in network byte order.
"""

from __future__ import annotations

import asyncio
import logging
import plistlib
import socket
import struct
from typing import TYPE_CHECKING, Any

from orchestrator.twin.wire import close

if TYPE_CHECKING:
    from orchestrator.twin.phone import Phone

log = logging.getLogger(__name__)
HEADER = struct.Struct("<IIII")
PLIST_VERSION, PLIST_MESSAGE = 1, 8
DEVICE_ID = 1
OK, BADCOMMAND, BADDEV, CONNREFUSED = 0, 1, 2, 3


class Usbmuxd:
    def __init__(self, phone: Phone):
        self.phone = phone

    def attached(self) -> dict[str, Any]:
        udid = self.phone.cfg.udid
        return {"DeviceID": DEVICE_ID, "MessageType": "Attached", "Properties": {
            "ConnectionSpeed": 480000000, "ConnectionType": "USB", "DeviceID": DEVICE_ID, "LocationID": 0,
            "ProductID": 0x12A8, "SerialNumber": udid, "USBSerialNumber": udid.replace("-", "")}}

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        handed_over = False
        try:
            handed_over = await self._serve(reader, writer)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        except Exception:
            log.exception("twin usbmuxd: connection failed")
        finally:
            if not handed_over:
                await close(writer)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        """Answer requests until the client closes, or Connect hands the socket to the phone."""
        while True:
            length, version, message, tag = HEADER.unpack(await reader.readexactly(HEADER.size))
            if length < HEADER.size or length > 1 << 20:
                return False
            payload = await reader.readexactly(length - HEADER.size)
            if version != PLIST_VERSION or message != PLIST_MESSAGE:
                self._reply(writer, tag, {"MessageType": "Result", "Number": BADCOMMAND})
                continue
            try:
                request = plistlib.loads(payload)
            except (plistlib.InvalidFileException, ValueError):
                self._reply(writer, tag, {"MessageType": "Result", "Number": BADCOMMAND})
                continue
            kind = request.get("MessageType") if isinstance(request, dict) else None
            if kind == "Connect":
                return await self._connect(request, tag, reader, writer)
            if kind == "Listen":
                self._reply(writer, tag, _result(OK))
                if self.phone.plugged:
                    self._reply(writer, 0, self.attached())
                await writer.drain()
                await reader.read()  # device events until the client hangs up; the twin stays attached
                return False
            self._reply(writer, tag, self._answer(kind, request))
            await writer.drain()

    def _answer(self, kind: Any, request: dict[str, Any]) -> dict[str, Any]:
        phone, udid = self.phone, self.phone.cfg.udid
        if kind == "ReadBUID":
            return {"BUID": phone.buid}
        if kind == "ListDevices":
            return {"DeviceList": [self.attached()] if phone.plugged else []}
        if kind == "ReadPairRecord":
            data = phone.records.read(udid) if _same(request.get("PairRecordID"), udid) else None
            return {"PairRecordData": data} if data is not None else _result(BADDEV)
        if kind == "SavePairRecord":
            data = request.get("PairRecordData")
            if not _same(request.get("PairRecordID"), udid) or not isinstance(data, bytes):
                return _result(BADDEV)
            phone.records.save(udid, data)
            return _result(OK)
        if kind == "DeletePairRecord":
            if _same(request.get("PairRecordID"), udid):
                phone.records.delete(udid)
            return _result(OK)
        return _result(BADCOMMAND)

    async def _connect(self, request: dict[str, Any], tag: int, reader: asyncio.StreamReader,
                       writer: asyncio.StreamWriter) -> bool:
        from orchestrator.twin.lockdown import Lockdown
        from orchestrator.twin.phone import LOCKDOWN_PORT

        phone = self.phone
        port = socket.ntohs(int(request.get("PortNumber", 0)) & 0xFFFF)
        if request.get("DeviceID") != DEVICE_ID or not phone.plugged:
            self._reply(writer, tag, _result(BADDEV))
            return False
        if port == LOCKDOWN_PORT:
            self._reply(writer, tag, _result(OK))
            try:
                await Lockdown(phone).serve(reader, writer)
            finally:
                await close(writer)
            return True
        pending = phone.take_port(port)
        if pending is None:
            self._reply(writer, tag, _result(CONNREFUSED))
            return False
        self._reply(writer, tag, _result(OK))
        if pending.ssl:
            await writer.start_tls(phone.trusted.server_context(pending.host_id))  # TLS from byte 0
        await phone.serve(pending, reader, writer)
        return True

    @staticmethod
    def _reply(writer: asyncio.StreamWriter, tag: int, value: dict[str, Any]) -> None:
        data = plistlib.dumps(value)
        writer.write(HEADER.pack(HEADER.size + len(data), PLIST_VERSION, PLIST_MESSAGE, tag) + data)


def _result(number: int) -> dict[str, Any]:
    return {"MessageType": "Result", "Number": number}


def _same(a: Any, udid: str) -> bool:
    return isinstance(a, str) and a.replace("-", "") == udid.replace("-", "")
