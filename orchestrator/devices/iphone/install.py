"""prepare: install the harness .ipa (and competitor apps) only when what is installed differs.

What "installed" means: the app is on the phone with the bundle version we recorded, and the
marker in the harness app's container (``Documents/.orch/installed.json``) names the sha256 of the
package we installed. Any mismatch (a rebuild, an Xcode install over ours, a wiped container)
reinstalls. InstallationProxyService draws rich progress bars with no switch to turn them off;
`quiet_progress` swaps them for disabled ones while our installs run.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import plistlib
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from packaging.version import InvalidVersion, Version

from orchestrator.config.fleet import IphoneDeviceConfig
from orchestrator.devices.iphone.container import Container, VendModes
from orchestrator.devices.iphone.errors import call, fixes, opened
from orchestrator.devices.iphone.paths import check_bundle_id, marker_place
from orchestrator.protocol.device import DeviceUnavailable, PrepareReport

if TYPE_CHECKING:
    from pymobiledevice3.lockdown_service_provider import LockdownServiceProvider


@dataclass(frozen=True)
class Wanted:
    bundle_id: str
    package: Path | None
    sha256: str | None


class PackageError(ValueError):
    """A package that cannot be what the fleet file says it is."""


def sha256_of(path: Path) -> str:
    """sha256 of an .ipa, or of an .app directory's files (relative names and contents, sorted)."""
    h = hashlib.sha256()
    if path.is_dir():
        for f in sorted(p for p in path.rglob("*") if p.is_file()):
            h.update(f.relative_to(path).as_posix().encode() + b"\0")
            h.update(f.read_bytes())
        return h.hexdigest()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def package_info(path: Path) -> dict[str, Any]:
    """The package's Info.plist (``Payload/X.app/Info.plist`` in an .ipa)."""
    try:
        if path.is_dir():
            info = plistlib.loads((path / "Info.plist").read_bytes())
        else:
            with zipfile.ZipFile(path) as z:
                names = [n for n in z.namelist() if n.count("/") == 2 and n.endswith(".app/Info.plist")]
                if not names or not names[0].startswith("Payload/"):
                    raise PackageError(f"{path}: no Payload/<App>.app/Info.plist")
                info = plistlib.loads(z.read(names[0]))
    except (OSError, zipfile.BadZipFile, plistlib.InvalidFileException) as exc:
        raise PackageError(f"{path}: not an .ipa or .app: {exc}") from None
    if not isinstance(info, dict):
        raise PackageError(f"{path}: Info.plist is not a dictionary")
    return info


def package_bundle_id(path: Path) -> str:
    """CFBundleIdentifier from the package's Info.plist."""
    bundle = package_info(path).get("CFBundleIdentifier")
    if not isinstance(bundle, str):
        raise PackageError(f"{path}: Info.plist has no CFBundleIdentifier")
    return bundle


def check_os(path: Path, product_version: str) -> None:
    """Refuse, before installing, a package whose MinimumOSVersion the phone's iOS does not reach
    (installation_proxy would fail with a generic error; the app's target is iOS 18 for Metal's mathMode)."""
    need = package_info(path).get("MinimumOSVersion")
    if not isinstance(need, str):
        return
    try:
        too_old = Version(product_version) < Version(need)
    except InvalidVersion:
        return
    if too_old:
        raise DeviceUnavailable(
            f"{path.name} needs iOS {need} or later (its MinimumOSVersion); this phone runs iOS {product_version}",
            fix=f"update the phone to iOS {need} or later, or build the app with a deployment target of "
                f"iOS {product_version}", state="error")


def bundle_version(app: dict[str, Any]) -> str:
    short, build = app.get("CFBundleShortVersionString"), app.get("CFBundleVersion")
    return f"{short} ({build})" if short and build else str(short or build or "unknown")


_quiet_depth = 0
_saved_bar: Any = None


@contextlib.contextmanager
def quiet_progress() -> Iterator[None]:
    """Silence installation_proxy's progress bars for the duration (re-entrant, one event loop)."""
    global _quiet_depth, _saved_bar
    from pymobiledevice3.services import installation_proxy

    if _quiet_depth == 0:
        _saved_bar = installation_proxy.ProgressBar
        base = _saved_bar

        class _Quiet(base):  # type: ignore[misc, valid-type]
            def __init__(self, *args: Any, **kwargs: Any) -> None:
                kwargs["disable"] = True
                super().__init__(*args, **kwargs)

        setattr(installation_proxy, "ProgressBar", _Quiet)  # noqa: B010 (a module global, on purpose)
    _quiet_depth += 1
    try:
        yield
    finally:
        _quiet_depth -= 1
        if _quiet_depth == 0:
            setattr(installation_proxy, "ProgressBar", _saved_bar)  # noqa: B010


async def installed_apps(lockdown: LockdownServiceProvider, bundle_ids: list[str], timeout: float) -> dict[str, Any]:
    from pymobiledevice3.services.installation_proxy import InstallationProxyService

    async with opened(InstallationProxyService(lockdown=lockdown), timeout, "installation_proxy") as proxy:
        apps = await call(proxy.get_apps(application_type="Any", bundle_identifiers=bundle_ids), timeout, "list apps")
    return {k: v for k, v in apps.items() if k in bundle_ids and isinstance(v, dict)}


async def install(lockdown: LockdownServiceProvider, package: Path, timeout: float) -> None:
    from pymobiledevice3.services.installation_proxy import InstallationProxyService

    check_os(package, lockdown.product_version)
    with quiet_progress():
        async with opened(InstallationProxyService(lockdown=lockdown), timeout, "installation_proxy") as proxy:
            await call(proxy.install_from_local(package), timeout, f"install {package.name}")


def parse_marker(raw: bytes | None) -> dict[str, dict[str, str]]:
    """The marker's apps, or {} when absent or unreadable (then everything reinstalls)."""
    if not raw:
        return {}
    try:
        data = json.loads(raw)
        apps = data["apps"]
        return {
            check_bundle_id(b): {"sha256": str(v["sha256"]), "version": str(v["version"])} for b, v in apps.items()
        }
    except (ValueError, KeyError, TypeError, AttributeError):
        return {}


async def read_marker(
    lockdown: LockdownServiceProvider, harness: str, documents_only: bool | VendModes, timeout: float
) -> bytes | None:
    async with Container(lockdown, harness, documents_only=documents_only, timeout=timeout) as c:
        return await c.read(marker_place())


async def write_marker(
    lockdown: LockdownServiceProvider, harness: str, apps: dict[str, dict[str, str]], documents_only: bool | VendModes,
    timeout: float,
) -> None:
    data = json.dumps({"schema": 1, "apps": apps}, indent=1, sort_keys=True).encode()
    async with Container(lockdown, harness, documents_only=documents_only, timeout=timeout) as c:
        await c.write(marker_place(), data)


async def reconcile(lockdown: LockdownServiceProvider, wanted: list[Wanted], cfg: IphoneDeviceConfig, vend: VendModes,
                    device: str) -> PrepareReport:
    """Install each wanted app whose installed copy is not the one recorded (the marker's sha256 and
    bundle version), then record what is installed; the report says whether anything was installed."""
    t = cfg.call_timeout_s
    bundles = [w.bundle_id for w in wanted]
    apps = await installed_apps(lockdown, bundles, t)
    marker: dict[str, dict[str, str]] = {}
    if cfg.bundle_id in apps:
        marker = parse_marker(await read_marker(lockdown, cfg.bundle_id, vend, t))

    def current(w: Wanted) -> bool:
        if w.bundle_id not in apps:
            return False
        if w.sha256 is None:
            return True  # nothing to compare with: what is installed stays
        seen = marker.get(w.bundle_id, {})
        return seen.get("sha256") == w.sha256 and seen.get("version") == bundle_version(apps[w.bundle_id])

    todo = [w for w in wanted if not current(w)]
    for w in todo:
        if w.package is None:
            raise DeviceUnavailable(f"{device}: {w.bundle_id} is not installed and no .ipa is configured",
                                    fixes(cfg.udid)["harness_missing"], "harness_missing")
        found = package_bundle_id(w.package)
        if found != w.bundle_id:
            raise DeviceUnavailable(f"{device}: {w.package} is {found}, not {w.bundle_id}",
                                    "point the fleet file at the right .ipa", "harness_missing")
        await install(lockdown, w.package, cfg.install_timeout_s)
    if todo:
        apps = await installed_apps(lockdown, bundles, t)
        for w in wanted:
            if w.bundle_id not in apps:
                raise DeviceUnavailable(f"{device}: {w.bundle_id} missing after install", state="error")
            version = bundle_version(apps[w.bundle_id])
            marker[w.bundle_id] = {"sha256": w.sha256 or "unknown", "version": version}
        await write_marker(lockdown, cfg.bundle_id, marker, vend, t)
    harness = wanted[0]
    installed = harness.sha256 or bundle_version(apps[harness.bundle_id])
    return PrepareReport(installed=installed, skipped=not todo)
