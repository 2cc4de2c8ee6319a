"""pymobiledevice3's exceptions -> a health state and the fix a person must make.

Every device call goes through `call`, which bounds it with a timeout: most pymobiledevice3 reads
have none of their own, and a phone that stops answering must cost seconds, not a lab night.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Iterator
from typing import Any, TypeVar

from pymobiledevice3 import exceptions as pmd

from orchestrator.protocol.device import DeviceUnavailable, HealthState

T = TypeVar("T")


class DeviceTimeout(Exception):
    """A device call that did not answer within its timeout."""


async def call(awaitable: Awaitable[T], timeout: float, what: str) -> T:
    """Await one device call with a timeout; a timeout becomes `DeviceTimeout` naming the call."""
    try:
        return await asyncio.wait_for(awaitable, timeout)
    except TimeoutError:
        raise DeviceTimeout(f"{what}: no answer within {timeout:g} s") from None


@contextlib.asynccontextmanager
async def opened(service: Any, timeout: float, what: str) -> AsyncIterator[Any]:
    """``async with`` for a pymobiledevice3 service, its start and its close each bounded by ``timeout``."""
    await call(service.connect(), timeout, f"start {what}")
    try:
        yield service
    finally:
        with contextlib.suppress(Exception):  # closing a connection that already died changes nothing
            await call(service.close(), timeout, f"close {what}")


def fixes(udid: str) -> dict[HealthState, str]:
    """What a person does about each state, with this phone's UDID filled in."""
    return {
        "not_connected": f"connect the phone ({udid}) with a USB cable (data, not charge-only) and unlock it",
        "locked": "unlock the phone and keep it unlocked (Settings > Display & Brightness > Auto-Lock > Never)",
        "not_trusted": (
            "unlock the phone and tap Trust on 'Trust This Computer?', then enter the passcode "
            f"(or run `pymobiledevice3 lockdown pair --udid {udid}` and answer on the phone)"
        ),
        "developer_mode_off": (
            "turn on Settings > Privacy & Security > Developer Mode, let the phone restart, then confirm 'Turn On'"
        ),
        "ddi_missing": f"mount the developer disk image: `pymobiledevice3 mounter auto-mount --udid {udid}`",
        "tunnel_unavailable": (
            "iOS 17+ needs a tunnel for developer services: update the phone to iOS 17.4+ for the userspace "
            "tunnel, or set `tunnel: tunneld` and run `sudo pymobiledevice3 remote tunneld` on this host"
        ),
        "harness_missing": "set `ipa:` for this device in the fleet file and run prepare (`orch run` does)",
        "error": "see the detail; rerun with the phone unlocked and connected",
    }


DEVELOPER_NOTE = "orch: raised while starting a developer service"


@contextlib.contextmanager
def developer_service() -> Iterator[None]:
    """Marks what is raised inside as a developer-service fault (DVT): only there does a refused
    service start mean the developer disk image is not mounted (house_arrest refusing is not that)."""
    try:
        yield
    except Exception as exc:
        if DEVELOPER_NOTE not in getattr(exc, "__notes__", ()):
            exc.add_note(DEVELOPER_NOTE)
        raise


def from_developer_service(exc: BaseException) -> bool:
    return DEVELOPER_NOTE in getattr(exc, "__notes__", ())


def classify(exc: BaseException, *, developer: bool = False) -> HealthState:
    """The health state an exception from pymobiledevice3 (or the transport under it) means.

    ``developer``: the call started a developer service (DVT, crash mover), where a refused start
    means the developer disk image is not mounted; an exception raised under `developer_service`
    counts as one too.
    """
    developer = developer or from_developer_service(exc)
    if isinstance(exc, pmd.PasswordRequiredError | pmd.PasscodeRequiredError):
        return "locked"
    if isinstance(
        exc,
        pmd.PairingDialogResponsePendingError | pmd.UserDeniedPairingError | pmd.NotPairedError
        | pmd.NotTrustedError | pmd.InvalidHostIDError | pmd.FatalPairingError | pmd.PairingError,
    ):
        return "not_trusted"
    if isinstance(exc, pmd.AppNotInstalledError):
        return "harness_missing"
    if isinstance(exc, pmd.DeveloperModeIsNotEnabledError | pmd.DeveloperModeError):
        return "developer_mode_off"
    if isinstance(
        exc,
        pmd.InvalidServiceError | pmd.DeveloperDiskImageNotFoundError | pmd.NotMountedError,
    ) or (developer and isinstance(exc, pmd.StartServiceError)):
        return "ddi_missing"
    if isinstance(
        exc, pmd.TunneldConnectionError | pmd.UserspaceTunnelUnavailableError | pmd.RSDRequiredError
    ):
        return "tunnel_unavailable"
    if isinstance(
        exc,
        pmd.NoDeviceConnectedError | pmd.DeviceNotFoundError | pmd.ConnectionFailedError | pmd.MuxException
        | pmd.ConnectionTerminatedError | pmd.NotConnectedError | DeviceTimeout | ConnectionError | OSError
        | EOFError | asyncio.IncompleteReadError,
    ):
        return "not_connected"
    return "error"


def unavailable(
    exc: BaseException, device_id: str, udid: str, doing: str, *, developer: bool = False
) -> DeviceUnavailable:
    """A `DeviceUnavailable` for an exception, with its state and fix."""
    if isinstance(exc, DeviceUnavailable):
        return exc
    state = classify(exc, developer=developer)
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return DeviceUnavailable(f"{device_id}: {doing}: {text}", fix=fixes(udid)[state], state=state)
