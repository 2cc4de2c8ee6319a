"""installd's view: installed apps, their bundles and data containers, on disk under the root.

``<root>/Bundle/Application/<UUID>/<Name>.app`` holds the unpacked bundle,
``<root>/Data/Application/<UUID>`` the data container (Documents, Library, tmp), and
``<root>/installd.plist`` the registry. Reinstalling keeps the container, as a phone does.
"""

from __future__ import annotations

import plistlib
import shutil
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from packaging.version import InvalidVersion, Version

from orchestrator.twin.ipa import INCREASED_MEMORY, Package, PackageRefused, check_profile, extract, read_package

BUNDLE_PREFIX = "/private/var/containers/Bundle/Application"
DATA_PREFIX = "/private/var/mobile/Containers/Data/Application"
CONTAINER_DIRS = ("Documents", "Library/Caches", "Library/Preferences", "SystemData", "tmp")
STAGES = (("CreatingStagingDirectory", 5), ("ExtractingPackage", 15), ("InspectingPackage", 20),
          ("TakingInstallLock", 20), ("PreflightingApplication", 30), ("InstallingEmbeddedProfile", 30),
          ("VerifyingApplication", 40), ("CreatingContainer", 50), ("InstallingApplication", 60),
          ("PostflightingApplication", 70), ("SandboxingApplication", 80), ("GeneratingApplicationMap", 90))


@dataclass
class App:
    bundle_id: str
    bundle_uuid: str
    data_uuid: str
    app_name: str  # "HarnessApp.app"
    info: dict[str, Any]
    entitlements: dict[str, Any]
    installed: float

    @property
    def executable(self) -> str:
        return str(self.info["CFBundleExecutable"])

    @property
    def development(self) -> bool:
        """Signed with a development profile (get-task-allow): house_arrest vends its whole container."""
        return self.entitlements.get("get-task-allow") is True

    @property
    def file_sharing(self) -> bool:
        return self.info.get("UIFileSharingEnabled") is True

    @property
    def increased_memory(self) -> bool:
        return self.entitlements.get(INCREASED_MEMORY) is True

    def record(self) -> dict[str, Any]:
        """What installation_proxy's Lookup returns for it."""
        container = f"{DATA_PREFIX}/{self.data_uuid}"
        rec = dict(self.info)
        rec.update({
            "ApplicationType": "User", "Path": f"{BUNDLE_PREFIX}/{self.bundle_uuid}/{self.app_name}",
            "Container": container, "Entitlements": dict(self.entitlements), "IsUpgradeable": True,
            "SignerIdentity": "Apple Development: Twin (TWIN000000)" if self.development
            else "Apple iPhone OS Application Signing",
            "EnvironmentVariables": {"HOME": container, "CFFIXED_USER_HOME": container, "TMPDIR": f"{container}/tmp"},
        })
        return rec


class AppStore:
    def __init__(self, root: Path, udid: str, ios: Version):
        self.root = root
        self.udid = udid
        self.ios = ios
        self.registry = root / "installd.plist"
        self.apps: dict[str, App] = {}
        if self.registry.exists():
            for bundle, raw in plistlib.loads(self.registry.read_bytes()).items():
                self.apps[bundle] = App(**raw)

    def _save(self) -> None:
        tmp = self.registry.with_name(self.registry.name + ".tmp")
        tmp.write_bytes(plistlib.dumps({b: vars(a) for b, a in self.apps.items()}))
        tmp.replace(self.registry)

    def bundle_dir(self, app: App) -> Path:
        return self.root / "Bundle" / "Application" / app.bundle_uuid / app.app_name

    def container(self, app: App) -> Path:
        return self.root / "Data" / "Application" / app.data_uuid

    def executable(self, app: App) -> Path:
        return self.bundle_dir(app) / app.executable

    def get(self, bundle_id: str) -> App | None:
        return self.apps.get(bundle_id)

    def lookup(self, options: dict[str, Any]) -> dict[str, dict[str, Any]]:
        kind = options.get("ApplicationType", "Any")
        wanted = options.get("BundleIDs")
        attrs = options.get("ReturnAttributes")
        found = {}
        for bundle, app in self.apps.items():
            if kind not in ("Any", "User") or (isinstance(wanted, list) and bundle not in wanted):
                continue
            rec = app.record()
            if isinstance(attrs, list):
                rec = {k: v for k, v in rec.items() if k in attrs or k == "CFBundleIdentifier"}
            found[bundle] = rec
        return found

    def inspect(self, path: Path, free_bytes: int) -> Package:
        """Every check a phone makes before it touches its disk; raises `PackageRefused`."""
        package = read_package(path)
        minimum = package.info.get("MinimumOSVersion")
        if isinstance(minimum, str):
            try:
                too_low = Version(minimum) > self.ios
            except InvalidVersion:
                raise PackageRefused("PackageInspectionFailed", f"MinimumOSVersion {minimum!r} is not a version") \
                    from None
            if too_low:
                raise PackageRefused(
                    "DeviceOSVersionTooLow",
                    f"The system version is lower than the minimum OS version specified for bundle at path "
                    f"{package.app_dir}: {self.ios} < {minimum}")
        family = package.info.get("UIDeviceFamily")
        if isinstance(family, list) and family and 1 not in family:
            raise PackageRefused("DeviceFamilyNotSupported",
                                 f"The app's UIDeviceFamily {family} does not include the iPhone (1)")
        check_profile(package, self.udid)
        if package.unpacked_bytes > free_bytes:
            raise PackageRefused(
                "APIInternalError",
                f"Unable to Install “{package.info.get('CFBundleName', package.bundle_id)}”: This app can’t be "
                "installed because there isn’t enough storage. (No space left on device)")
        return package

    def install(self, path: Path, free_bytes: int) -> Iterator[tuple[str, int]]:
        """Install (or upgrade, keeping the container) in stages; yields (status, percent)."""
        package = self.inspect(path, free_bytes)
        yield STAGES[0]
        old = self.apps.get(package.bundle_id)
        bundle_uuid = str(uuid.uuid4()).upper()
        staging = self.root / "Bundle" / "Application" / f".staging-{bundle_uuid}"
        try:
            app_dir = extract(package, path, staging)
        except OSError as exc:
            shutil.rmtree(staging, ignore_errors=True)
            raise PackageRefused("PackageExtractionFailed", str(exc)) from None
        yield from STAGES[1:8]
        data_uuid = old.data_uuid if old else str(uuid.uuid4()).upper()
        app = App(bundle_id=package.bundle_id, bundle_uuid=bundle_uuid, data_uuid=data_uuid,
                  app_name=app_dir.name, info=package.info, entitlements=package.entitlements,
                  installed=time.time())
        container = self.container(app)
        for sub in CONTAINER_DIRS:
            (container / sub).mkdir(parents=True, exist_ok=True)
        staging.replace(staging.with_name(bundle_uuid))
        if old is not None:
            shutil.rmtree(self.bundle_dir(old).parent, ignore_errors=True)
        self.apps[app.bundle_id] = app
        self._save()
        yield from STAGES[8:]

    def uninstall(self, bundle_id: str) -> bool:
        app = self.apps.pop(bundle_id, None)
        if app is None:
            return False  # "not found in user apps, ignoring": the uninstall still completes
        self._save()
        shutil.rmtree(self.bundle_dir(app).parent, ignore_errors=True)
        shutil.rmtree(self.container(app), ignore_errors=True)
        return True
