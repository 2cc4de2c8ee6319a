"""What other processes took from the CPU while a trial ran on this machine.

A trial is measured between two samples, one just before the launch and one just after. The figure
is the machine's busy CPU time over the trial minus what this controller and its own process tree
(the trial's process, reaped or alive) used: on Linux the busy time comes from `/proc/stat`, so
work that started and ended inside the trial is counted too. Per-process deltas from `/proc/<pid>/stat`
only name the largest other processes, for people.

Inside a container `/proc/stat` counts the whole machine while `/proc/<pid>` shows only the
container's processes: the figure then includes work the names cannot account for, which is still
work competing with the trial.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from orchestrator.protocol.device import Interference

TOP = 3  # how many other processes a reading names


@dataclass(frozen=True)
class CpuSample:
    """CPU seconds at one moment: the whole machine's busy time, this controller's tree, each other process."""

    t: float  # monotonic seconds
    busy_s: float  # all CPUs' non-idle time since boot (on macOS: the sum over visible processes)
    own_s: float  # this process, its reaped children, and its live descendants
    cpus: int
    others: dict[tuple[int, int], tuple[str, float]] = field(default_factory=dict)  # (pid, start) -> (name, cpu s)
    source: str = "/proc"


def between(before: CpuSample, after: CpuSample) -> Interference:
    """The other processes' share of the machine's CPU time from `before` to `after`."""
    wall = max(after.t - before.t, 1e-9)
    other = max(0.0, (after.busy_s - before.busy_s) - (after.own_s - before.own_s))
    cpus = max(1, after.cpus)
    deltas = []
    for key, (name, cpu) in after.others.items():
        was = before.others.get(key)
        used = cpu - was[1] if was is not None else cpu  # new since `before`: all of its time is inside
        if used > 0.005:
            deltas.append((used, name, key[0]))
    deltas.sort(reverse=True)
    named = sum(d[0] for d in deltas)
    top = [f"{name} (pid {pid}): {used:.2f} s" for used, name, pid in deltas[:TOP]]
    if other - named > 0.05 and after.source.startswith("/proc"):
        top.append(f"not attributed to a visible process: {other - named:.2f} s")
    return Interference(wall_s=round(wall, 4), cpus=cpus, other_cpu_s=round(other, 4),
                        share=round(min(1.0, other / (wall * cpus)), 4), top=top, source=after.source)


def read_cpu() -> CpuSample | None:
    """A sample of this machine, or None where the platform gives no way to read one."""
    if sys.platform.startswith("linux") and Path("/proc/stat").is_file():
        return _linux()
    if sys.platform == "darwin":
        return _darwin()
    return None


# -- Linux ---------------------------------------------------------------------------------------
_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _linux() -> CpuSample:
    t = time.monotonic()
    lines = Path("/proc/stat").read_text().splitlines()
    total = [int(x) for x in lines[0].split()[1:]]
    # user nice system idle iowait irq softirq steal (guest time is inside user already)
    busy = sum(total[i] for i in (0, 1, 2, 5, 6, 7) if i < len(total)) / _TICK
    cpus = sum(1 for line in lines[1:] if line.startswith("cpu"))
    procs = _procs()
    me = os.getpid()
    tree_ = tree(me, {pid: ppid for pid, (ppid, *_rest) in procs.items()})
    mine = os.times()
    own = mine.user + mine.system + mine.children_user + mine.children_system
    own += sum(procs[p][3] for p in tree_ if p != me and p in procs)
    others = {(pid, start): (name, cpu) for pid, (_ppid, start, name, cpu) in procs.items() if pid not in tree_}
    return CpuSample(t=t, busy_s=busy, own_s=own, cpus=max(1, cpus), others=others, source="/proc")


def _procs() -> dict[int, tuple[int, int, str, float]]:
    """pid -> (ppid, start tick, name, utime + stime in s) of every visible process."""
    found: dict[int, tuple[int, int, str, float]] = {}
    with contextlib.suppress(OSError):
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            with contextlib.suppress(OSError, ValueError, IndexError):
                raw = Path(f"/proc/{entry}/stat").read_text()
                name = raw[raw.index("(") + 1:raw.rindex(")")]
                f = raw[raw.rindex(")") + 2:].split()  # from field 3 (state) on
                found[int(entry)] = (int(f[1]), int(f[19]), name, (int(f[11]) + int(f[12])) / _TICK)
    return found


def tree(root: int, parents: dict[int, int]) -> set[int]:
    """`root` and every process below it."""
    children: dict[int, list[int]] = {}
    for pid, ppid in parents.items():
        children.setdefault(ppid, []).append(pid)
    tree, todo = {root}, [root]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in tree:
                tree.add(child)
                todo.append(child)
    return tree


# -- macOS (not exercised by this project's tests: no Mac runs them) --------------------------------
def _darwin() -> CpuSample | None:
    """From `ps`: every visible process's cumulative CPU time. Work that started and ended between two
    samples is missed (there is no machine-wide counter to read without a native call)."""
    try:
        out = subprocess.run(["ps", "-A", "-o", "pid=,ppid=,time=,comm="], capture_output=True, text=True,
                             timeout=10, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    t = time.monotonic()
    rows = ps_rows(out)
    me = os.getpid()
    tree_ = tree(me, {pid: ppid for pid, (ppid, _n, _c) in rows.items()})
    mine = os.times()
    own = mine.user + mine.system + mine.children_user + mine.children_system
    own += sum(rows[p][2] for p in tree_ if p != me and p in rows)
    others = {(pid, 0): (name, cpu) for pid, (_pp, name, cpu) in rows.items() if pid not in tree_}
    busy = own + sum(cpu for _n, cpu in others.values())
    return CpuSample(t=t, busy_s=busy, own_s=own, cpus=os.cpu_count() or 1, others=others, source="ps")


def ps_rows(text: str) -> dict[int, tuple[int, str, float]]:
    """pid -> (ppid, name, cpu s) from `ps -A -o pid=,ppid=,time=,comm=` output (unreadable lines skipped)."""
    rows: dict[int, tuple[int, str, float]] = {}
    for line in text.splitlines():
        parts = line.split(None, 3)
        with contextlib.suppress(ValueError, IndexError):
            rows[int(parts[0])] = (int(parts[1]), parts[3] if len(parts) > 3 else "?", _ps_time(parts[2]))
    return rows


def _ps_time(text: str) -> float:
    """`ps` TIME: [[dd-]hh:]mm:ss[.cc]."""
    days, _, rest = text.rpartition("-")
    seconds = 0.0
    for part in rest.split(":"):
        seconds = seconds * 60 + float(part)
    return seconds + (int(days) * 86400 if days else 0)
