"""prepare's second half: the run's files (model, tuning tables) into an app's Documents over AFC.

A file is pushed only when its marker (``Documents/<name>.sha256``) or its size says the phone does not
hold it already; the push is refused up front when the phone says it lacks the room.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from orchestrator.clock import Clock
from orchestrator.devices.iphone.container import BadResultFile, Container, VendModes
from orchestrator.devices.iphone.paths import artifact_place
from orchestrator.protocol.device import ArtifactFile, Placed, Progress
from orchestrator.runners.deploy import MARKER, Throttle, check_room

if TYPE_CHECKING:
    from pymobiledevice3.lockdown_service_provider import LockdownServiceProvider


async def place_in(lockdown: LockdownServiceProvider, bundle: str, files: list[ArtifactFile], progress: Progress | None,
                   *, device: str, vend: VendModes, timeout: float, clock: Clock) -> list[Placed]:
    """Each file into ``bundle``'s Documents (``Documents/<name>``) unless it is there already."""
    async with Container(lockdown, bundle, documents_only=vend, timeout=timeout) as box:
        todo: list[ArtifactFile] = []
        for f in files:
            try:
                marker = await box.read(artifact_place(f.name, MARKER))
            except BadResultFile:  # a directory where the marker goes: push again
                marker = None
            held = marker is not None and marker.decode("utf-8", "replace").strip() == f.sha256
            if not held or await box.size(artifact_place(f.name)) != f.size:
                todo.append(f)
        if todo and (free := await box.free_bytes()) is not None:  # a phone that does not say is tried
            check_room(device, f"{bundle}'s Documents/models", sum(f.size for f in todo), free)
        placed: list[Placed] = []
        for f in files:
            place = artifact_place(f.name)
            if f not in todo:
                placed.append(Placed(name=f.name, path=place.app, sha256=f.sha256, bytes_sent=0, app=bundle))
                continue
            t0 = clock.now()
            await box.remove(artifact_place(f.name, MARKER))
            await box.push(Path(f.source), place, f.sha256, Throttle(progress, f.name, f.size))
            await box.write(artifact_place(f.name, MARKER), f"{f.sha256}\n".encode())
            placed.append(Placed(name=f.name, path=place.app, sha256=f.sha256, bytes_sent=f.size,
                                 seconds=round(clock.now() - t0, 3), app=bundle))
    return placed
