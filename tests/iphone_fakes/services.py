"""The phone side of the lockdown services the backend uses, speaking 4-byte big-endian length + plist."""

from __future__ import annotations

import asyncio
import io
import plistlib
import struct
import zipfile
from typing import TYPE_CHECKING, Any

from iphone_fakes.fs import FakeFs, serve_afc

if TYPE_CHECKING:
    from iphone_fakes.phone import FakePhone


async def recv_plist(reader: asyncio.StreamReader) -> Any:
    (size,) = struct.unpack(">L", await reader.readexactly(4))
    return plistlib.loads(await reader.readexactly(size))


async def send_plist(writer: asyncio.StreamWriter, value: Any) -> None:
    data = plistlib.dumps(value)
    writer.write(struct.pack(">L", len(data)) + data)
    await writer.drain()


async def serve(name: str, phone: FakePhone, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """One service connection, by lockdown service name (``.shim.remote`` names are the same service)."""
    name = name.removesuffix(".shim.remote")
    try:
        if name == "com.apple.afc":
            await serve_afc(reader, writer, phone.media)
        elif name == "com.apple.crashreportcopymobile":
            await serve_afc(reader, writer, phone.crashes)
        elif name == "com.apple.crashreportmover":
            writer.write(b"ping\x00")
            await writer.drain()
        elif name == "com.apple.mobile.house_arrest":
            await _house_arrest(phone, reader, writer)
        else:
            handler = {
                "com.apple.mobile.diagnostics_relay": _diagnostics,
                "com.apple.mobile.installation_proxy": _installation_proxy,
                "com.apple.mobile.mobile_image_mounter": _image_mounter,
            }[name]
            while True:
                request = await recv_plist(reader)
                for reply in handler(phone, request):
                    await send_plist(writer, reply)
    except (asyncio.IncompleteReadError, ConnectionError):
        pass
    finally:
        writer.close()


def _diagnostics(phone: FakePhone, request: dict[str, Any]) -> list[dict[str, Any]]:
    if request.get("Request") == "IORegistry" and request.get("EntryClass") == "IOPMPowerSource":
        return [{"Status": "Success", "Diagnostics": {"IORegistry": dict(phone.battery)}}]
    return [{"Status": "Failure"}]


def _app_record(app: dict[str, Any]) -> dict[str, Any]:
    keys = ("CFBundleIdentifier", "CFBundleShortVersionString", "CFBundleVersion", "CFBundleExecutable")
    return {k: app[k] for k in keys if k in app}


def _installation_proxy(phone: FakePhone, request: dict[str, Any]) -> list[dict[str, Any]]:
    command, options = request.get("Command"), request.get("ClientOptions") or {}
    if command == "Lookup":
        wanted = options.get("BundleIDs")
        found = {b: _app_record(a) for b, a in phone.apps.items() if wanted is None or b in wanted}
        return [{"LookupResult": found, "Status": "Complete"}]
    if command in ("Install", "Upgrade"):
        package = phone.media.read(request["PackagePath"])
        try:
            with zipfile.ZipFile(io.BytesIO(package or b"")) as z:
                name = next(n for n in z.namelist() if n.endswith(".app/Info.plist") and n.count("/") == 2)
                info = plistlib.loads(z.read(name))
        except (zipfile.BadZipFile, StopIteration):
            return [{"Error": "ApplicationVerificationFailed", "ErrorDescription": "not an app package"}]
        phone.install(info)
        return [
            {"Status": "CreatingStagingDirectory", "PercentComplete": 5},
            {"Status": "InstallingApplication", "PercentComplete": 60},
            {"Status": "Complete"},
        ]
    return [{"Error": "UnknownCommand", "ErrorDescription": str(command)}]


def _image_mounter(phone: FakePhone, request: dict[str, Any]) -> list[dict[str, Any]]:
    if request.get("Command") == "LookupImage":
        if phone.ddi_mounted:
            return [{"ImagePresent": True, "ImageSignature": [b"signature"], "Status": "Complete"}]
        return [{"ImagePresent": False, "Status": "Complete"}]
    if request.get("Command") == "CopyDevices":
        entries = [{"DiskImageType": "Personalized", "IsMounted": True}] if phone.ddi_mounted else []
        return [{"EntryList": entries, "Status": "Complete"}]
    return [{"Error": "UnknownCommand"}]


async def _house_arrest(phone: FakePhone, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    request = await recv_plist(reader)
    bundle = request.get("Identifier")
    if request.get("Command") not in ("VendContainer", "VendDocuments") or bundle not in phone.apps:
        await send_plist(writer, {"Error": "ApplicationLookupFailed"})
        return
    await send_plist(writer, {"Status": "Complete"})
    fs: FakeFs = phone.containers[bundle]
    await serve_afc(reader, writer, fs)
