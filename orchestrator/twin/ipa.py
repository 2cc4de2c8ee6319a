"""The twin's .ipa: a real zip with ``Payload/<Name>.app/{Info.plist, <executable>,
embedded.mobileprovision}``; the executable is a Linux build (the harness), not a Mach-O.

``make_ipa`` builds one from a harness binary; ``read_package`` is what the twin's
installation_proxy inspects, refusing (with a real phone's error names) what a phone refuses.
A development profile is a plain XML plist here, not a signed CMS envelope; the reader accepts
both, since it looks for the plist inside the bytes as tools reading real profiles do.
"""

from __future__ import annotations

import datetime as dt
import plistlib
import posixpath
import stat
import uuid
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

PROFILE = "embedded.mobileprovision"
TEAM = "TWIN000000"
INCREASED_MEMORY = "com.apple.developer.kernel.increased-memory-limit"


class PackageRefused(Exception):
    """What installation_proxy answers: ``error`` is the phone's error name."""

    def __init__(self, error: str, description: str):
        super().__init__(f"{error}: {description}")
        self.error = error
        self.description = description


@dataclass(frozen=True)
class Package:
    app_dir: str  # "Payload/HarnessApp.app"
    info: dict[str, Any]
    profile: dict[str, Any] | None
    unpacked_bytes: int
    members: list[zipfile.ZipInfo] = field(repr=False)

    @property
    def bundle_id(self) -> str:
        return str(self.info["CFBundleIdentifier"])

    @property
    def executable(self) -> str:
        return str(self.info["CFBundleExecutable"])

    @property
    def entitlements(self) -> dict[str, Any]:
        ent = (self.profile or {}).get("Entitlements")
        return dict(ent) if isinstance(ent, dict) else {}


def parse_profile(data: bytes) -> dict[str, Any] | None:
    """The plist inside a provisioning profile (CMS-wrapped or bare), or None."""
    start, end = data.find(b"<?xml"), data.rfind(b"</plist>")
    if start < 0 or end < start:
        return None
    try:
        value = plistlib.loads(data[start:end + len(b"</plist>")])
    except (plistlib.InvalidFileException, ValueError):
        return None
    return value if isinstance(value, dict) else None


def read_package(path: Path) -> Package:
    """Inspect an .ipa the way installd does before it installs anything."""
    try:
        z = zipfile.ZipFile(path)
    except (OSError, zipfile.BadZipFile) as exc:
        raise PackageRefused("PackageExtractionFailed", f"Could not open the package: {exc}") from None
    with z:
        members = z.infolist()
        for m in members:
            name = m.filename
            if name.startswith("/") or "\\" in name or ".." in name.split("/"):
                raise PackageRefused("PackageExtractionFailed", f"Unsafe path in the package: {name!r}")
        apps = sorted({"/".join(m.filename.split("/")[:2]) for m in members
                       if m.filename.startswith("Payload/") and m.filename.split("/")[1].endswith(".app")})
        if len(apps) != 1:
            raise PackageRefused("PackageInspectionFailed", f"Expected one Payload/<Name>.app, found {len(apps)}")
        app_dir = apps[0]
        try:
            info = plistlib.loads(z.read(f"{app_dir}/Info.plist"))
        except KeyError:
            raise PackageRefused("PackageInspectionFailed", f"{app_dir} has no Info.plist") from None
        except (plistlib.InvalidFileException, ValueError) as exc:
            raise PackageRefused("PackageInspectionFailed", f"{app_dir}/Info.plist: {exc}") from None
        if not isinstance(info, dict) or not isinstance(info.get("CFBundleIdentifier"), str):
            raise PackageRefused("MissingBundleIdentifier", f"{app_dir}/Info.plist has no CFBundleIdentifier")
        if not isinstance(info.get("CFBundleVersion"), str):
            raise PackageRefused("MissingBundleVersion", f"{app_dir}/Info.plist has no CFBundleVersion")
        exe = info.get("CFBundleExecutable")
        names = {m.filename for m in members}
        if not isinstance(exe, str) or "/" in exe or f"{app_dir}/{exe}" not in names:
            raise PackageRefused("MissingBundleExecutable", f"{app_dir} has no executable {exe!r}")
        profile = None
        if f"{app_dir}/{PROFILE}" in names:
            profile = parse_profile(z.read(f"{app_dir}/{PROFILE}"))
            if profile is None:
                raise PackageRefused("ApplicationVerificationFailed", f"{PROFILE} holds no profile")
        size = sum(m.file_size for m in members if not m.is_dir())
        return Package(app_dir=app_dir, info=info, profile=profile, unpacked_bytes=size, members=members)


def check_profile(package: Package, udid: str, now: dt.datetime | None = None) -> None:
    """A profile that does not cover this phone, or has expired, stops the install."""
    profile = package.profile
    if profile is None:
        return
    now = now or dt.datetime.now(dt.UTC)
    expires = profile.get("ExpirationDate")
    if isinstance(expires, dt.datetime):
        expires = expires if expires.tzinfo else expires.replace(tzinfo=dt.UTC)
        if expires < now:
            raise PackageRefused("ApplicationVerificationFailed",
                                 f"The provisioning profile expired on {expires:%Y-%m-%d}")
    devices = profile.get("ProvisionedDevices")
    if not profile.get("ProvisionsAllDevices") and isinstance(devices, list) and udid not in devices:
        raise PackageRefused("ApplicationVerificationFailed",
                             "A valid provisioning profile for this executable was not found "
                             f"(the profile does not list {udid})")


def extract(package: Package, source: Path, dest: Path) -> Path:
    """Unpack the .app into ``dest`` (the bundle directory); the executable is made executable."""
    prefix = package.app_dir + "/"
    app = dest / posixpath.basename(package.app_dir)
    with zipfile.ZipFile(source) as z:
        for m in package.members:
            if not m.filename.startswith(prefix) or m.is_dir():
                continue
            target = app / m.filename[len(prefix):]
            target.parent.mkdir(parents=True, exist_ok=True)
            with z.open(m) as src, open(target, "wb") as out:
                while block := src.read(1 << 20):
                    out.write(block)
            mode = (m.external_attr >> 16) & 0o777
            if mode:
                target.chmod(mode)
    exe = app / package.executable
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return app


def development_profile(bundle_id: str, devices: list[str] | None = None, days: int = 365,
                        increased_memory: bool = True) -> dict[str, Any]:
    now = dt.datetime.now(dt.UTC).replace(microsecond=0)
    entitlements: dict[str, Any] = {
        "application-identifier": f"{TEAM}.{bundle_id}", "com.apple.developer.team-identifier": TEAM,
        "get-task-allow": True, "keychain-access-groups": [f"{TEAM}.*"],
    }
    if increased_memory:
        entitlements[INCREASED_MEMORY] = True
    profile: dict[str, Any] = {
        "AppIDName": bundle_id, "ApplicationIdentifierPrefix": [TEAM], "CreationDate": now,
        "ExpirationDate": now + dt.timedelta(days=days), "Entitlements": entitlements,
        "Name": "Twin Development", "Platform": ["iOS"], "TeamIdentifier": [TEAM], "TeamName": "Twin",
        "UUID": str(uuid.uuid4()).upper(), "Version": 1,
    }
    if devices:
        profile["ProvisionedDevices"] = list(devices)
    else:
        profile["ProvisionsAllDevices"] = True
    return profile


def make_ipa(
    out: Path, executable: Path, bundle_id: str, *, name: str = "HarnessApp", version: str = "1.0",
    build: str = "1", minimum_os: str = "17.0", file_sharing: bool = True, development: bool = True,
    devices: list[str] | None = None, increased_memory: bool = True, extra_info: dict[str, Any] | None = None,
) -> Path:
    """Write an .ipa whose executable is ``executable`` (a Linux harness build, or any program)."""
    info: dict[str, Any] = {
        "CFBundleIdentifier": bundle_id, "CFBundleExecutable": name, "CFBundleName": name,
        "CFBundleDisplayName": name, "CFBundlePackageType": "APPL", "CFBundleShortVersionString": version,
        "CFBundleVersion": build, "CFBundleSupportedPlatforms": ["iPhoneOS"], "DTPlatformName": "iphoneos",
        "MinimumOSVersion": minimum_os, "UIDeviceFamily": [1], "UIFileSharingEnabled": file_sharing,
        "LSSupportsOpeningDocumentsInPlace": file_sharing,
    }
    info.update(extra_info or {})
    app = f"Payload/{name}.app"
    out.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr(f"{app}/Info.plist", plistlib.dumps(info, fmt=plistlib.FMT_BINARY))
        exe = zipfile.ZipInfo.from_file(executable, f"{app}/{name}")
        exe.external_attr = (0o100755 << 16)
        exe.compress_type = zipfile.ZIP_DEFLATED
        with open(executable, "rb") as src, z.open(exe, "w") as dst:
            while block := src.read(1 << 20):
                dst.write(block)
        if development:
            profile = development_profile(bundle_id, devices, increased_memory=increased_memory)
            z.writestr(f"{app}/{PROFILE}", plistlib.dumps(profile))
    return out
