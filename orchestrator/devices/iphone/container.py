"""An app's container over house_arrest (AFC): push a spec, look for a result, pull it, clean up;
stream a large file (a model) in and read the free space.

Only `Place`s made by ``paths`` are accepted, so every path is already inside ``/Documents``, which
both house_arrest commands reach: VendContainer (the whole container: a phone grants it only to apps
installed with a development profile) and VendDocuments (only Documents: apps with
UIFileSharingEnabled). Which one an app gets is learnt per app (`VendModes`).
"""

from __future__ import annotations

import contextlib
import hashlib
import posixpath
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

from orchestrator.devices.iphone.errors import call
from orchestrator.devices.iphone.paths import DOCUMENTS, Place, check_bundle_id

if TYPE_CHECKING:
    from pymobiledevice3.lockdown_service_provider import LockdownServiceProvider

MAX_RESULT_BYTES = 64 << 20  # a result is a few hundred KB; anything far bigger is not one
CHUNK = 4 << 20  # one AFC write: what pymobiledevice3 streams large files in


class BadResultFile(Exception):
    """The result path holds something that is not a plausible result file."""


class VendModes:
    """Which house_arrest command opens each app's container, learnt per bundle id: the preferred one
    first (VendContainer unless `prefer_documents`), the other when the phone refuses it, and the one
    that worked from then on. Paths stay the same either way (``/Documents/...``)."""

    def __init__(self, prefer_documents: bool = False):
        self.prefer_documents = prefer_documents
        self.known: dict[str, bool] = {}  # bundle id -> documents_only that the phone granted

    def order(self, bundle_id: str) -> list[bool]:
        first = self.known.get(bundle_id, self.prefer_documents)
        return [first, not first]


def _refused(exc: BaseException) -> bool:
    """The phone's vend refusal (pymobiledevice3 raises exactly PyMobileDevice3Exception for an error
    status other than ApplicationLookupFailed; connection faults are subclasses)."""
    from pymobiledevice3.exceptions import PyMobileDevice3Exception

    return type(exc) is PyMobileDevice3Exception


class Container:
    """``async with Container(provider, bundle_id, ...) as c:`` — one house_arrest session.

    `documents_only`: a bool opens the container that way only; a `VendModes` picks per app."""

    def __init__(self, provider: LockdownServiceProvider, bundle_id: str, *, documents_only: bool | VendModes,
                 timeout: float):
        self.provider = provider
        self.bundle_id = check_bundle_id(bundle_id)
        self.modes = documents_only if isinstance(documents_only, VendModes) else None
        self.documents_only = documents_only if isinstance(documents_only, bool) else None
        self.timeout = timeout
        self._afc: Any = None

    async def __aenter__(self) -> Container:
        from pymobiledevice3.services.house_arrest import HouseArrestService

        if self.modes is None:
            assert self.documents_only is not None
            order = [self.documents_only]
        else:
            order = self.modes.order(self.bundle_id)
        for i, documents_only in enumerate(order):
            try:
                self._afc = await call(
                    HouseArrestService.create(self.provider, self.bundle_id, documents_only=documents_only),
                    self.timeout, f"open the container of {self.bundle_id}",
                )
            except Exception as exc:
                if i + 1 < len(order) and _refused(exc):
                    continue  # VendContainer for an app without a development profile, or the reverse
                raise
            self.documents_only = documents_only
            if self.modes is not None:
                self.modes.known[self.bundle_id] = documents_only
            break
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        afc, self._afc = self._afc, None
        if afc is not None:
            with contextlib.suppress(Exception):  # closing a connection that already died changes nothing
                await call(afc.aclose(), self.timeout, "close house_arrest")

    @property
    def afc(self) -> Any:
        if self._afc is None:
            raise RuntimeError("container not open")
        # Once AFC's reader has seen the connection end, a new request restarts it and races its
        # failure (pymobiledevice3 then logs an orphaned future): fail fast instead.
        terminated = getattr(self._afc, "_afc_terminated", None)
        if terminated is not None and terminated.is_set():
            from pymobiledevice3.exceptions import ConnectionTerminatedError

            raise ConnectionTerminatedError("the container connection closed")
        return self._afc

    async def _makedirs(self, directory: str) -> None:
        assert directory == DOCUMENTS or directory.startswith(DOCUMENTS + "/")
        await call(self.afc.makedirs(directory), self.timeout, f"mkdir {directory}")

    async def write(self, place: Place, data: bytes) -> None:
        """Write atomically: a temp name in the same directory, then rename over the target."""
        directory = posixpath.dirname(place.afc)
        await self._makedirs(directory)
        tmp = place.afc + ".tmp"
        await call(self.afc.set_file_contents(tmp, data), self.timeout, f"write {tmp}")
        await call(self.afc.rename(tmp, place.afc), self.timeout, f"rename {tmp}")

    async def exists(self, place: Place) -> bool:
        return bool(await call(self.afc.exists(place.afc), self.timeout, f"stat {place.afc}"))

    async def read(self, place: Place) -> bytes | None:
        """The file's bytes, or None when it does not exist."""
        from pymobiledevice3.exceptions import AfcFileNotFoundError

        try:
            info = await call(self.afc.stat(place.afc), self.timeout, f"stat {place.afc}")
        except AfcFileNotFoundError:
            return None
        if info.get("st_ifmt") != "S_IFREG":  # a link or directory is not a result: never follow it
            raise BadResultFile(f"{place.afc} is {info.get('st_ifmt')}, not a regular file")
        if int(info.get("st_size", 0)) > MAX_RESULT_BYTES:
            raise BadResultFile(f"{place.afc} is {info['st_size']} bytes")
        return bytes(await call(self.afc.get_file_contents(place.afc), self.timeout, f"read {place.afc}"))

    async def remove(self, place: Place) -> None:
        """Remove if present (best effort is the caller's choice)."""
        await call(self.afc.rm_single(place.afc, force=True), self.timeout, f"rm {place.afc}")

    async def size(self, place: Place) -> int | None:
        """A regular file's size; None when absent or not a regular file."""
        from pymobiledevice3.exceptions import AfcFileNotFoundError

        try:
            info = await call(self.afc.stat(place.afc), self.timeout, f"stat {place.afc}")
        except AfcFileNotFoundError:
            return None
        return int(info.get("st_size", 0)) if info.get("st_ifmt") == "S_IFREG" else None

    async def free_bytes(self) -> int | None:
        """Free space of the phone's data volume (AFC device info FSFreeBytes); None if it does not say."""
        info = await call(self.afc.get_device_info(), self.timeout, "read free space")
        try:
            return int(info["FSFreeBytes"])
        except (KeyError, TypeError, ValueError):
            return None

    async def push(self, local: Path, place: Place, sha256: str, progress: Callable[[int], None]) -> None:
        """Stream `local` in `CHUNK`s to ``<place>.part``, hashing what is sent, then rename it into place.

        The final name never holds a partial file; an interrupted push leaves ``.part``, which the next
        push truncates. A file whose bytes do not hash to `sha256` (changed on the controller since it
        was hashed) is not renamed into place.
        """
        await self._makedirs(posixpath.dirname(place.afc))
        part = place.afc + ".part"
        h, sent = hashlib.sha256(), 0
        handle = await call(self.afc.fopen(part, "w"), self.timeout, f"open {part}")
        try:
            with open(local, "rb") as f:
                while chunk := f.read(CHUNK):
                    await call(self.afc.fwrite(handle, chunk), self.timeout, f"write {part}")
                    h.update(chunk)
                    sent += len(chunk)
                    progress(sent)
        finally:
            with contextlib.suppress(Exception):  # a dead connection has no handle left to close
                await call(self.afc.fclose(handle), self.timeout, f"close {part}")
        if h.hexdigest() != sha256:
            await self.remove(Place(afc=part, app=place.app + ".part"))
            raise BadPush(f"{local} changed since it was hashed: sent sha256 {h.hexdigest()}, expected {sha256}")
        await call(self.afc.rename(part, place.afc), self.timeout, f"rename {part}")


class BadPush(Exception):
    """The bytes pushed were not the file the controller hashed."""
