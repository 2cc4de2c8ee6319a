"""The crash report of a launch that died: the newest ``<Process>-*.ips`` written since it started.

Reports are chosen by the file's modification time on the phone (epoch seconds, so no time zone
guesswork), allowing for clock skew between phone and host (both normally on NTP).
"""

from __future__ import annotations

import contextlib
import posixpath
from typing import TYPE_CHECKING, Any

from orchestrator.devices.iphone.errors import call

if TYPE_CHECKING:
    from pymobiledevice3.lockdown_service_provider import LockdownServiceProvider

CLOCK_SKEW_S = 120.0
MAX_DETAIL = 2000


async def latest_crash(
    provider: LockdownServiceProvider, process_name: str, since_wall: float, timeout: float,
    seen: set[str] | None = None,
) -> str | None:
    """A short summary of the newest crash report for ``process_name`` since ``since_wall``, or None.

    ``seen``: reports already attributed to an earlier launch (updated here), never attributed twice.
    """
    from pymobiledevice3.services.crash_reports import CrashReportsManager

    seen = set() if seen is None else seen
    manager = CrashReportsManager(provider)
    try:
        with contextlib.suppress(Exception):  # move pending reports into place; failing, nothing is new
            await _flush(provider, manager.crash_mover_service_name, timeout)
        newest = await call(_newest(manager, process_name, since_wall - CLOCK_SKEW_S, seen), timeout,
                            "list crash reports")
        if newest is None:
            return None
        seen.add(newest)
        try:
            report = await call(manager.parse(newest), timeout, f"read {newest}")
        except Exception as exc:  # unparseable: say which report, so a person can pull it
            return f"{posixpath.basename(newest)} (unreadable: {exc})"
        return summarize(posixpath.basename(newest), report)
    finally:
        with contextlib.suppress(Exception):
            await call(manager.aclose(), timeout, "close crash reports")


async def _flush(provider: LockdownServiceProvider, mover: str, timeout: float) -> None:
    """What ``CrashReportsManager.flush`` does, but closing the mover's connection afterwards."""
    service = await call(provider.start_lockdown_service(mover), timeout, "start the crash report mover")
    try:
        await call(service.recvall(len(b"ping\x00")), timeout, "wait for the crash report mover")
    finally:
        with contextlib.suppress(Exception):
            await call(service.close(), timeout, "close the crash report mover")


async def _newest(manager: Any, process_name: str, since: float, seen: set[str]) -> str | None:
    best: tuple[float, str] | None = None
    async for entry in manager.afc.dirlist("/", depth=1):
        name = posixpath.basename(entry)
        if entry in seen or not (name.startswith(process_name + "-") or name.startswith(process_name + ".")):
            continue
        stat = await manager.afc.stat(entry)
        if stat.get("st_ifmt") != "S_IFREG":
            continue
        mtime = stat["st_mtime"].timestamp()
        if mtime >= since and (best is None or mtime > best[0]):
            best = (mtime, entry)
    return best[1] if best else None


def summarize(name: str, report: Any) -> str:
    parts = [name]
    for label, attr in (("exception", "exception_type"), ("subtype", "exception_subtype"),
                        ("info", "application_specific_information")):
        try:
            value = getattr(report, attr, None)
        except Exception:
            value = None
        if value:
            parts.append(f"{label}: {value}")
    try:
        frames = [f.symbol or f"{posixpath.basename(f.image_name or '?')}+{f.image_offset}" for f in report.frames[:8]]
    except Exception:
        frames = []
    if frames:
        parts.append("frames: " + " < ".join(str(f) for f in frames))
    return "; ".join(parts)[:MAX_DETAIL]
