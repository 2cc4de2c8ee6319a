"""The plist services behind lockdown: installation_proxy, house_arrest, diagnostics_relay,
mobile_image_mounter, and the crash report mover. Each serves one connection."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from packaging.version import Version

from orchestrator.twin.afc import AfcServer, View
from orchestrator.twin.ipa import PackageRefused
from orchestrator.twin.wire import PeerGone, read_plist, send_plist

if TYPE_CHECKING:
    from orchestrator.twin.phone import Phone


async def installation_proxy(phone: Phone, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    while True:
        request = await read_plist(reader)
        if not isinstance(request, dict):
            await send_plist(writer, {"Error": "MissingCommand"})
            continue
        command = request.get("Command")
        options = request.get("ClientOptions") or {}
        if command == "Lookup":
            await send_plist(writer, {"LookupResult": phone.apps.lookup(options), "Status": "Complete"})
        elif command == "Browse":
            apps = list(phone.apps.lookup(options).values())
            await send_plist(writer, {"CurrentIndex": 0, "CurrentAmount": len(apps), "Total": len(apps),
                                      "CurrentList": apps, "Status": "BrowsingApplications"})
            await send_plist(writer, {"Status": "Complete"})
        elif command in ("Install", "Upgrade"):
            await _install(phone, request, writer)
        elif command == "Uninstall":
            bundle = str(request.get("ApplicationIdentifier", ""))
            await send_plist(writer, {"Status": "RemovingApplication", "PercentComplete": 50})
            run = phone.processes.by_bundle(bundle)
            if run is not None:  # a phone kills an app it removes
                phone.processes.signal(run.pid, 9)
                await phone.processes.wait(run.pid, 5.0)
            phone.apps.uninstall(bundle)
            await send_plist(writer, {"Status": "Complete"})
        elif command == "CheckCapabilitiesMatch":
            await send_plist(writer, {"LookupResult": True, "Status": "Complete"})
        else:
            await send_plist(writer, {"Error": "UnknownCommand", "ErrorDescription": f"Unknown command {command!r}"})


async def _install(phone: Phone, request: dict[str, Any], writer: asyncio.StreamWriter) -> None:
    path = request.get("PackagePath")
    if not isinstance(path, str) or not path:
        await send_plist(writer, {"Error": "MissingPackagePath", "ErrorDescription": "No PackagePath"})
        return
    try:
        host = View(phone.media, phone.disk).resolve(path)
        if not host.is_file():
            raise PackageRefused("PackageExtractionFailed", f"Could not open {path}: no such file")
        for status, percent in phone.apps.install(host, phone.disk.free()):
            await send_plist(writer, {"Status": status, "PercentComplete": percent})
    except PackageRefused as exc:
        await send_plist(writer, {"Error": exc.error, "ErrorDescription": exc.description})
        return
    except Exception as exc:  # the media view refused the path
        await send_plist(writer, {"Error": "PackageExtractionFailed", "ErrorDescription": str(exc)})
        return
    await send_plist(writer, {"Status": "Complete"})


async def house_arrest(phone: Phone, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """VendContainer: the whole container, for development-signed apps only. VendDocuments: only
    Documents, for apps with UIFileSharingEnabled. Then the connection speaks AFC."""
    request = await read_plist(reader)
    command = request.get("Command") if isinstance(request, dict) else None
    bundle = str(request.get("Identifier", "")) if isinstance(request, dict) else ""
    app = phone.apps.get(bundle)
    if command not in ("VendContainer", "VendDocuments"):
        await send_plist(writer, {"Error": "UnknownCommand"})
        return
    if app is None:
        await send_plist(writer, {"Error": "ApplicationLookupFailed"})
        return
    if (command == "VendContainer" and not app.development) or (command == "VendDocuments" and not app.file_sharing):
        await send_plist(writer, {"Error": "InstallationLookupFailed"})
        return
    await send_plist(writer, {"Status": "Complete"})
    view = View(phone.apps.container(app), phone.disk, documents_only=command == "VendDocuments",
                model=phone.cfg.product_type)
    await AfcServer(view).serve(reader, writer)


async def diagnostics_relay(phone: Phone, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    while True:
        request = await read_plist(reader)
        kind = request.get("Request") if isinstance(request, dict) else None
        if kind == "IORegistry":
            entry = request.get("EntryClass") or request.get("EntryName")
            if entry in ("IOPMPowerSource", "AppleSmartBattery", "AppleARMPMUCharger"):
                await send_plist(writer, {"Status": "Success", "Diagnostics": {"IORegistry": phone.battery()}})
            else:
                await send_plist(writer, {"Status": "Success", "Diagnostics": {"IORegistry": {}}})
        elif kind == "MobileGestalt":
            if phone.cfg.version >= Version("17.4"):
                gestalt: dict[str, Any] = {"Status": "MobileGestaltDeprecated"}
            else:
                gestalt = {"Status": "Success", **{k: phone.values(True).get(k) for k in
                                                   request.get("MobileGestaltKeys", []) if k in phone.values(True)}}
            await send_plist(writer, {"Status": "Success", "Diagnostics": {"MobileGestalt": gestalt}})
        elif kind == "Goodbye":
            await send_plist(writer, {"Status": "Success"})
            return
        elif kind in ("All", "GasGauge"):
            b = phone.battery()
            gauge = {"CycleCount": b["CycleCount"], "DesignCapacity": b["DesignCapacity"],
                     "FullChargeCapacity": b["DesignCapacity"], "Status": "Success"}
            await send_plist(writer, {"Status": "Success", "Diagnostics": {"GasGauge": gauge}})
        else:  # Restart, Shutdown, Sleep and the rest: the twin does not pretend to do them
            await send_plist(writer, {"Status": "UnknownRequest"})


async def image_mounter(phone: Phone, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Lookups of the developer disk image; mounting one only flips the twin's state (there is no
    image to verify), and only with Developer Mode on."""
    wanted = phone.image_type()
    while True:
        request = await read_plist(reader)
        command = request.get("Command") if isinstance(request, dict) else None
        if command == "LookupImage":
            if phone.ddi_mounted and request.get("ImageType") == wanted:
                await send_plist(writer, {"ImagePresent": True, "ImageSignature": [phone.image_signature()],
                                          "Status": "Complete"})
            elif wanted == "Personalized":
                await send_plist(writer, {"ImageSignature": [], "Status": "Complete"})
            else:
                await send_plist(writer, {"ImagePresent": False, "Status": "Complete"})
        elif command == "CopyDevices":
            entries = [{"DiskImageType": wanted, "IsMounted": True, "ImageSignature": phone.image_signature(),
                        "MountPath": "/System/Developer" if wanted == "Developer" else "/System/Volumes/FieldService"}
                       ] if phone.ddi_mounted else []
            await send_plist(writer, {"EntryList": entries, "Status": "Complete"})
        elif command == "QueryDeveloperModeStatus":
            await send_plist(writer, {"DeveloperModeStatus": phone.developer_mode, "Status": "Complete"})
        elif command == "ReceiveBytes":
            size = int(request.get("ImageSize", 0))
            await send_plist(writer, {"Status": "ReceiveBytesAck"})
            try:
                await reader.readexactly(size)
            except asyncio.IncompleteReadError as exc:
                raise PeerGone("image upload cut short") from exc
            await send_plist(writer, {"Status": "Complete"})
        elif command == "MountImage":
            if not phone.developer_mode:
                await send_plist(writer, {"Error": "DeviceLocked", "DetailedError": "Developer mode is not enabled."})
            elif phone.ddi_mounted:
                await send_plist(writer, {"Error": "InternalError",
                                          "DetailedError": f"The {wanted} image is already mounted"})
            else:
                phone.ddi_mounted = True
                await send_plist(writer, {"Status": "Complete"})
        elif command == "UnmountImage":
            phone.ddi_mounted = False
            await send_plist(writer, {"Status": "Complete"})
        elif command == "Hangup":
            await send_plist(writer, {"Status": "Complete"})
            return
        else:
            await send_plist(writer, {"Error": "UnknownCommand"})
            return  # the legacy proxy hangs up after an unknown command


async def crash_mover(phone: Phone, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    phone.crashes.flush()
    writer.write(b"ping\x00")
    await writer.drain()

