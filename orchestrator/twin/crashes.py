"""Crash reports as iOS writes them: ``<Process>-<date>.ips`` when an app dies by a crashing
signal, ``JetsamEvent-<date>.ips`` when jetsam kills it for its memory. A report is pending until
``crash_report_delay_s`` passes or crashreportmover runs (its ``ping`` means "moved"), then it
shows in ``crashreportcopymobile``'s AFC root.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import json
import os
import signal
import uuid
from pathlib import Path
from typing import Any

# Signals after which iOS writes a crash report, and the exception type it names.
CRASHING: dict[int, str] = {
    signal.SIGSEGV: "EXC_BAD_ACCESS", signal.SIGBUS: "EXC_BAD_ACCESS", signal.SIGILL: "EXC_BAD_INSTRUCTION",
    signal.SIGTRAP: "EXC_BREAKPOINT", signal.SIGFPE: "EXC_ARITHMETIC", signal.SIGABRT: "EXC_CRASH",
    signal.SIGSYS: "EXC_CRASH",
}
PAGE = 16384  # an iPhone's page size


def _stamp(now: dt.datetime) -> tuple[str, str]:
    """(file name date, report timestamp) as iOS writes them."""
    return now.strftime("%Y-%m-%d-%H%M%S"), now.strftime("%Y-%m-%d %H:%M:%S.%f")[:-4] + " +0000"


class CrashReports:
    def __init__(self, root: Path, delay_s: float, os_version: str, product_type: str):
        self.visible = root / "CrashReports"
        self.pending = root / "CrashReports.pending"
        self.visible.mkdir(parents=True, exist_ok=True)
        self.pending.mkdir(parents=True, exist_ok=True)
        self.delay_s = delay_s
        self.os_version = os_version
        self.product_type = product_type

    def _write(self, name: str, meta: dict[str, Any], body: dict[str, Any], when: dt.datetime) -> Path:
        path = self.pending / name
        n = 1
        while path.exists() or (self.visible / path.name).exists():
            n += 1
            path = self.pending / name.replace(".ips", f"-{n}.ips")
        path.write_text(json.dumps(meta) + "\n" + json.dumps(body, indent=2))
        os.utime(path, (when.timestamp(), when.timestamp()))
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return path
        loop.call_later(self.delay_s, self._move, path)
        return path

    def crash(self, process: str, bundle_id: str, version: str, pid: int, sig: int, executable: str,
              fatal: list[str]) -> Path:
        now = dt.datetime.now(dt.UTC)
        day, stamp = _stamp(now)
        name = signal.Signals(sig).name
        meta = {"app_name": process, "timestamp": stamp, "app_version": version, "name": process,
                "bug_type": "309", "os_version": self.os_version, "bundleID": bundle_id,
                "incident_id": str(uuid.uuid4()).upper()}
        body: dict[str, Any] = {
            "procName": process, "pid": pid, "procPath": executable, "modelCode": self.product_type,
            "bundleInfo": {"CFBundleIdentifier": bundle_id, "CFBundleShortVersionString": version},
            "exception": {"type": CRASHING.get(sig, "EXC_CRASH"), "signal": name},
            "termination": {"namespace": "SIGNAL", "indicator": f"{name.title().replace('Sig', '')}: {sig}",
                            "code": sig},
            # No backtrace: the app ran as a Linux process the twin cannot walk after its death.
            "faultingThread": 0, "threads": [{"triggered": True, "frames": []}],
            "usedImages": [{"path": executable, "name": process}],
        }
        if fatal:
            body["asi"] = {"libswiftCore.dylib": fatal}
        return self._write(f"{process}-{day}.ips", meta, body, now)

    def jetsam(self, process: str, pid: int, rss: int, limit: int) -> Path:
        now = dt.datetime.now(dt.UTC)
        day, stamp = _stamp(now)
        meta = {"bug_type": "298", "timestamp": stamp, "os_version": self.os_version,
                "incident_id": str(uuid.uuid4()).upper()}
        body = {
            "crashReporterKey": "twin", "product": self.product_type, "build": self.os_version,
            "date": stamp, "largestProcess": process, "pageSize": PAGE,
            "memoryStatus": {"pageSize": PAGE, "memoryPages": {"active": rss // PAGE}},
            "processes": [{"name": process, "pid": pid, "rpages": rss // PAGE, "lifetimeMax": rss // PAGE,
                           "reason": "per-process-limit", "states": ["frontmost"], "limitMB": limit >> 20}],
        }
        return self._write(f"JetsamEvent-{day}.ips", meta, body, now)

    def _move(self, path: Path) -> None:
        with contextlib.suppress(FileNotFoundError):  # moved already (crashreportmover)
            path.replace(self.visible / path.name)

    def flush(self) -> None:
        """What crashreportmover does before it says ``ping``."""
        for path in sorted(self.pending.iterdir()):
            self._move(path)
