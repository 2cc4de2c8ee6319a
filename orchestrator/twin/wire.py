"""Framing shared by the services: lockdown-style plists (u32 big-endian length + plist)."""

from __future__ import annotations

import asyncio
import contextlib
import plistlib
import struct
from typing import Any

MAX_PLIST = 64 << 20


class PeerGone(Exception):
    """The client closed the connection (or it broke): the service ends quietly."""


async def read_plist(reader: asyncio.StreamReader) -> Any:
    try:
        (size,) = struct.unpack(">L", await reader.readexactly(4))
        if size > MAX_PLIST:
            raise PeerGone(f"a {size}-byte plist")
        data = await reader.readexactly(size)
    except (asyncio.IncompleteReadError, ConnectionError) as exc:
        raise PeerGone(str(exc)) from None
    try:
        return plistlib.loads(data)
    except (plistlib.InvalidFileException, ValueError) as exc:
        raise PeerGone(f"not a plist: {exc}") from None


def plist_frame(value: Any) -> bytes:
    data = plistlib.dumps(value)
    return struct.pack(">L", len(data)) + data


async def send_plist(writer: asyncio.StreamWriter, value: Any) -> None:
    writer.write(plist_frame(value))
    try:
        await writer.drain()
    except ConnectionError as exc:
        raise PeerGone(str(exc)) from None


async def close(writer: asyncio.StreamWriter) -> None:
    """Close without waiting long on a peer that does not answer (or a TLS shutdown that hangs)."""
    with contextlib.suppress(Exception):
        writer.close()
    with contextlib.suppress(Exception):
        await asyncio.wait_for(writer.wait_closed(), 1.0)
    with contextlib.suppress(Exception):
        writer.transport.abort()
