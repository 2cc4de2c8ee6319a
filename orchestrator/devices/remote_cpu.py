"""Other processes' CPU on a host reached over plain SSH: one short remote command per sample.

Linux: `getconf CLK_TCK`, then `/proc/stat` and every `/proc/<pid>/stat` in one `cat`; the machine's busy
time comes from `/proc/stat` (work that started and ended between samples is counted), per-process times
only name the largest others. macOS: `ps -A -o pid=,ppid=,time=,comm=`, as on a local Mac (work that began
and ended between two samples is missed there).

What is ours on the remote host: every command this controller ran there (the SSH runner adds up the CPU
time the remote shell reports for each command it waited for, `times`), the per-connection sshd process that
carries them (encryption, SFTP), and whatever of ours is alive at the sample (the sample's own shell and cat).
"""

from __future__ import annotations

import contextlib
import time

from orchestrator.devices.interference import CpuSample, ps_rows, tree

SAMPLE_TAG = "ORCH_SAMPLE "
# Linux: the tick, the sampling shell's pid (to find the connection's sshd above it), then the counters.
LINUX_SAMPLE = f'getconf CLK_TCK; echo "{SAMPLE_TAG}$$"; cat /proc/stat /proc/[0-9]*/stat 2>/dev/null; true'
DARWIN_SAMPLE = f'echo "{SAMPLE_TAG}$$"; ps -A -o pid=,ppid=,time=,comm='


def sample_script(system: str) -> str | None:
    """The remote command for a host whose `uname -s` is `system`; None where there is no way to read one."""
    return {"Linux": LINUX_SAMPLE, "Darwin": DARWIN_SAMPLE}.get(system)


Procs = dict[int, tuple[int, int, str, float]]  # pid -> (ppid, start tick, name, cpu s)


def parse_linux(text: str, commands_cpu_s: float, t: float | None = None) -> CpuSample:
    """A sample from LINUX_SAMPLE's output; `commands_cpu_s`: our finished commands' CPU time on that host."""
    lines = text.splitlines()
    if not lines or not lines[0].strip().isdigit():
        raise ValueError(f"remote CPU sample: expected CLK_TCK first, got {lines[:1]!r}")
    tick = int(lines[0])
    me, busy, cpus, procs = None, None, 0, {}
    for line in lines[1:]:
        if line.startswith(SAMPLE_TAG):
            me = int(line[len(SAMPLE_TAG):])
        elif line.startswith("cpu "):
            total = [int(x) for x in line.split()[1:]]
            # user nice system idle iowait irq softirq steal (guest time is inside user already)
            busy = sum(total[i] for i in (0, 1, 2, 5, 6, 7) if i < len(total)) / tick
        elif line.startswith("cpu"):
            cpus += 1
        elif line[:1].isdigit() and "(" in line:
            with contextlib.suppress(ValueError, IndexError):
                name = line[line.index("(") + 1:line.rindex(")")]
                f = line[line.rindex(")") + 2:].split()  # from field 3 (state) on
                procs[int(line.split(None, 1)[0])] = (int(f[1]), int(f[19]), name, (int(f[11]) + int(f[12])) / tick)
    if busy is None:
        raise ValueError("remote CPU sample: no `cpu` line from /proc/stat")
    return _sample(procs, me, busy, max(1, cpus), commands_cpu_s, t, "/proc over ssh")


def parse_darwin(text: str, commands_cpu_s: float, cpus: int, t: float | None = None) -> CpuSample:
    """A sample from DARWIN_SAMPLE's output (`cpus`: the host's core count, `sysctl -n hw.ncpu`)."""
    me = None
    body = []
    for line in text.splitlines():
        if line.startswith(SAMPLE_TAG):
            me = int(line[len(SAMPLE_TAG):])
        else:
            body.append(line)
    procs = {pid: (ppid, 0, name, cpu) for pid, (ppid, name, cpu) in ps_rows("\n".join(body)).items()}
    ours = _ours(procs, me)
    busy = sum(cpu for pid, (_pp, _s, _n, cpu) in procs.items()) + commands_cpu_s  # no machine-wide counter
    return _sample(procs, me, busy, cpus, commands_cpu_s, t, "ps over ssh", ours)


def _ours(procs: Procs, me: int | None) -> set[int]:
    """The connection's sshd (the nearest ancestor of the sampling shell named sshd*) and all below it."""
    if me is None or me not in procs:
        return set()
    parents = {pid: ppid for pid, (ppid, *_rest) in procs.items()}
    def sshd(pid: int) -> bool:  # `ps` on macOS may name the executable by its path
        return pid in procs and procs[pid][2].rsplit("/", 1)[-1].startswith("sshd")

    at = me
    while at in procs and not sshd(at) and parents.get(at, 0) > 1:
        at = parents[at]
    root = at if sshd(at) else me
    return tree(root, parents)


def _sample(procs: Procs, me: int | None, busy: float, cpus: int, commands_cpu_s: float, t: float | None,
            source: str, ours: set[int] | None = None) -> CpuSample:
    ours = _ours(procs, me) if ours is None else ours
    own = commands_cpu_s + sum(procs[p][3] for p in ours if p in procs)
    others = {(pid, start): (name, cpu) for pid, (_pp, start, name, cpu) in procs.items() if pid not in ours}
    return CpuSample(t=time.monotonic() if t is None else t, busy_s=busy, own_s=own, cpus=cpus, others=others,
                     source=source)
