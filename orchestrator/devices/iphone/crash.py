"""Why a launch died: the newest ``<Process>-*.ips`` crash report written since it started, or a
``JetsamEvent-*.ips`` that names the process (the OS killed it for memory: the likely end of an LLM
that does not fit).

ReportCrash writes a report a moment after the process dies, so the reports are looked for again
for up to ``wait_s``. Reports are chosen by the file's modification time on the phone (epoch
seconds, so no time zone guesswork), allowing for clock skew between phone and host (both normally
on NTP).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import posixpath
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from orchestrator.devices.iphone.errors import call

if TYPE_CHECKING:
    from pymobiledevice3.lockdown_service_provider import LockdownServiceProvider

CLOCK_SKEW_S = 120.0
MAX_DETAIL = 2000
LOOK_AGAIN_S = 0.5
JETSAM = "JetsamEvent"


async def latest_crash(
    provider: LockdownServiceProvider, process_name: str, since_wall: float, timeout: float,
    seen: set[str] | None = None, *, wait_s: float = 0.0, sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
) -> str | None:
    """A short summary of the newest crash or memory-kill report for ``process_name`` since
    ``since_wall``, looked for again every `LOOK_AGAIN_S` for up to ``wait_s``; None if none came.

    ``seen``: reports already attributed to an earlier launch (updated here), never attributed twice.
    """
    from pymobiledevice3.services.crash_reports import CrashReportsManager

    seen = set() if seen is None else seen
    manager = CrashReportsManager(provider)
    waited = 0.0
    try:
        while True:
            found = await _look(provider, manager, process_name, since_wall - CLOCK_SKEW_S, timeout, seen)
            if found is not None or waited >= wait_s:
                return found
            await sleep(LOOK_AGAIN_S)
            waited += LOOK_AGAIN_S
    finally:
        with contextlib.suppress(Exception):
            await call(manager.aclose(), timeout, "close crash reports")


async def _look(
    provider: LockdownServiceProvider, manager: Any, process_name: str, since: float, timeout: float, seen: set[str]
) -> str | None:
    with contextlib.suppress(Exception):  # move pending reports into place; failing, nothing is new
        await _flush(provider, manager.crash_mover_service_name, timeout)
    newest = await call(_newest(manager, process_name, since, seen), timeout, "list crash reports")
    if newest is not None:
        seen.add(newest)
        try:
            report = await call(manager.parse(newest), timeout, f"read {newest}")
        except Exception as exc:  # unparseable: say which report, so a person can pull it
            return f"{posixpath.basename(newest)} (unreadable: {exc})"
        return summarize(posixpath.basename(newest), report)
    for name in await call(_newest_all(manager, JETSAM, since, seen), timeout, "list memory reports"):
        raw = await call(manager.afc.get_file_contents(name), timeout, f"read {name}")
        if (why := jetsam_reason(raw, process_name)) is not None:
            seen.add(name)
            return f"{posixpath.basename(name)}: {why}"
    return None


async def _flush(provider: LockdownServiceProvider, mover: str, timeout: float) -> None:
    """What ``CrashReportsManager.flush`` does, but closing the mover's connection afterwards."""
    service = await call(provider.start_lockdown_service(mover), timeout, "start the crash report mover")
    try:
        await call(service.recvall(len(b"ping\x00")), timeout, "wait for the crash report mover")
    finally:
        with contextlib.suppress(Exception):
            await call(service.close(), timeout, "close the crash report mover")


async def _newest(manager: Any, process_name: str, since: float, seen: set[str]) -> str | None:
    found = await _newest_all(manager, process_name, since, seen)
    return found[0] if found else None


async def _newest_all(manager: Any, process_name: str, since: float, seen: set[str]) -> list[str]:
    """Reports named ``<process_name>-*`` or ``<process_name>.*`` since ``since``, newest first."""
    found: list[tuple[float, str]] = []
    async for entry in manager.afc.dirlist("/", depth=1):
        name = posixpath.basename(entry)
        if entry in seen or not (name.startswith(process_name + "-") or name.startswith(process_name + ".")):
            continue
        stat = await manager.afc.stat(entry)
        if stat.get("st_ifmt") != "S_IFREG":
            continue
        mtime = stat["st_mtime"].timestamp()
        if mtime >= since:
            found.append((mtime, entry))
    return [entry for _, entry in sorted(found, reverse=True)]


def jetsam_reason(raw: bytes, process_name: str) -> str | None:
    """What a JetsamEvent report says about ``process_name``: killed for memory, and why; None if it
    does not name the process as killed. The report is a JSON header line, then a JSON body whose
    ``processes`` lists every process, the killed ones with a ``reason``."""
    try:
        body = json.loads(raw.split(b"\n", 1)[1])
        processes = body.get("processes", [])
    except (IndexError, ValueError, AttributeError):
        return None
    page = body.get("pageSize", 16384) if isinstance(body, dict) else 16384
    for proc in processes if isinstance(processes, list) else []:
        if not isinstance(proc, dict) or proc.get("name") != process_name or not proc.get("reason"):
            continue
        pages = proc.get("rpages")
        footprint = f", {pages * page / 2**20:.0f} MiB resident" if isinstance(pages, int) else ""
        return f"killed by the OS for memory (jetsam reason: {proc['reason']}{footprint})"
    return None


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
