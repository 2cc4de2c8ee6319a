"""Interference on hosts reached over plain SSH: the real OpenSSH server on loopback, /proc read remotely
by one command a sample; our own commands' CPU from the remote shell's `times`; macOS `ps` output parsed."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

import pytest
from sshd import Sshd
from test_interference import _burned, _cpu_s, outsider  # noqa: F401  (a fixture, used by name)

from orchestrator.config import Fleet
from orchestrator.devices import open_device
from orchestrator.devices.host import HostDevice
from orchestrator.devices.interference import between
from orchestrator.devices.remote_cpu import parse_darwin, parse_linux
from orchestrator.runners.ssh import split_times

BURN_S = "import time\nend = time.process_time() + 0.3\nwhile time.process_time() < end: pass\n"


def remote(sshd: Sshd, tmp_path: Path) -> HostDevice:
    fleet = Fleet.model_validate({"hosts": [sshd.host().model_dump()], "devices": [
        {"id": "box", "kind": "host", "host": "loop", "workdir": str(tmp_path / "w")}]})
    device, _ = open_device(fleet, "box")
    assert isinstance(device, HostDevice)
    return device


@pytest.mark.skipif(not Path("/proc/stat").is_file(), reason="the loopback host is this Linux machine")
def test_a_host_over_ssh_names_other_work_and_counts_its_own_commands_as_its_own(
        sshd: Sshd, tmp_path: Path, outsider: int) -> None:  # noqa: F811
    device = remote(sshd, tmp_path)

    async def go() -> None:
        a = await device.cpu_sample()
        assert a is not None and a.source == "/proc over ssh" and a.cpus == os.cpu_count()
        assert outsider in {pid for pid, _ in a.others}
        since = _cpu_s(outsider)
        ours = await device.runner.run([sys.executable, "-c", BURN_S], timeout=60)  # 0.3 s of CPU over there
        assert ours.ok and "ORCH_TIMES" not in ours.stderr, "the `times` report is taken off the command's stderr"
        await asyncio.to_thread(_burned, outsider, since)
        b = await device.cpu_sample()
        assert b is not None
        got = between(a, b)
        assert b.own_s - a.own_s >= 0.3 - 0.02, "the command we ran there is ours, by the remote shell's times"
        assert any(f"(pid {outsider})" in t for t in got.top), got.top
        assert got.other_cpu_s >= 0.05 - 0.02, "the outsider's CPU time is in the figure"
        assert not any(t.startswith("python") and "0.3" in t for t in got.top)
        await device.close()

    asyncio.run(go())


def test_the_times_report_is_split_off_stderr() -> None:
    dash = "warning: x\nORCH_TIMES\n0m0.004000s 0m0.000000s\n0m1.250000s 0m0.050000s\n"
    assert split_times(dash) == ("warning: x\n", pytest.approx(1.3))
    bash = "ORCH_TIMES\n0m0.001s 0m0.002s\n1m2.500s 0m0.500s\n"
    assert split_times(bash) == ("", pytest.approx(63.0))
    assert split_times("killed before it could report\n") == ("killed before it could report\n", None)
    assert split_times("ORCH_TIMES\n")[1] is None


LINUX = """100
ORCH_SAMPLE 9000
cpu  1000 10 500 80000 20 0 30 0 0 0
cpu0 500 5 250 40000 10 0 15 0 0 0
cpu1 500 5 250 40000 10 0 15 0 0 0
intr 123
1 (systemd) S 0 1 1 0 -1 4194560 0 0 0 0 100 50 0 0 20 0 1 0 5 0 0
812 (sshd) S 1 812 812 0 -1 4194560 0 0 0 0 10 5 0 0 20 0 1 0 90 0 0
8990 (sshd-session) S 812 8990 8990 0 -1 4194560 0 0 0 0 40 20 0 0 20 0 1 0 9000 0 0
8999 (sh) S 8990 8999 8999 0 -1 4194560 0 0 0 0 0 0 0 0 20 0 1 0 9100 0 0
9000 (sh) S 8999 9000 8999 0 -1 4194560 0 0 0 0 0 0 0 0 20 0 1 0 9101 0 0
9001 (cat) R 9000 9000 8999 0 -1 4194560 0 0 0 0 1 0 0 0 20 0 1 0 9102 0 0
4242 (make (dep)) R 1 4242 4242 0 -1 4194560 0 0 0 0 300 20 0 0 20 0 1 0 700 0 0
"""


def test_a_linux_sample_tells_the_connections_sshd_tree_from_others() -> None:
    s = parse_linux(LINUX, commands_cpu_s=2.0, t=1.0)
    assert s.busy_s == pytest.approx((1000 + 10 + 500 + 0 + 30 + 0) / 100) and s.cpus == 2
    assert s.own_s == pytest.approx(2.0 + 0.6 + 0.01), "our finished commands, the connection's sshd, the sample"
    assert {pid for pid, _ in s.others} == {1, 812, 4242}, "the listening sshd is not ours: other connections"
    assert s.others[(4242, 700)] == ("make (dep)", pytest.approx(3.2))
    with pytest.raises(ValueError, match="CLK_TCK"):
        parse_linux("sh: getconf: not found\n", 0.0)
    with pytest.raises(ValueError, match="no `cpu` line"):
        parse_linux("100\nORCH_SAMPLE 1\n", 0.0)


# macOS cannot run here (this project's tests run on Linux); the text is `ps -A -o pid=,ppid=,time=,comm=`
# in the layout macOS prints it: right-aligned pids, [[dd-]hh:]mm:ss.cc times, commands by their path.
DARWIN = """ORCH_SAMPLE 5003
    1     0   1:23.45 /sbin/launchd
  310     1   0:02.10 /usr/sbin/sshd
 5001   310   0:00.40 /usr/libexec/sshd-session
 5002  5001   0:00.01 /bin/sh
 5003  5002   0:00.00 /bin/sh
 5004  5003   0:00.01 /bin/ps
  777     1 1-02:03:04.50 /Applications/Xcode.app/Contents/MacOS/Xcode
  778     1   0:10.00 /System/Library/CoreServices/Spotlight.app/Contents/MacOS/Spotlight Helper
"""


def test_a_macos_sample_from_ps_over_ssh() -> None:
    s = parse_darwin(DARWIN, commands_cpu_s=1.0, cpus=10, t=2.0)
    assert s.source == "ps over ssh" and s.cpus == 10
    assert s.own_s == pytest.approx(1.0 + 0.40 + 0.01 + 0.01), "commands, the connection's sshd-session, the sample"
    xcode = 86400 + 2 * 3600 + 3 * 60 + 4.5
    assert s.others[(777, 0)] == ("/Applications/Xcode.app/Contents/MacOS/Xcode", pytest.approx(xcode))
    assert s.others[(778, 0)][0].endswith("Spotlight Helper"), "a command with a space keeps its whole path"
    assert {pid for pid, _ in s.others} == {1, 310, 777, 778}
    later = parse_darwin(DARWIN.replace("0:10.00", "0:12.00"), commands_cpu_s=1.5, cpus=10, t=4.0)
    got = between(s, later)
    assert got.other_cpu_s == pytest.approx(2.0) and got.share == pytest.approx(2.0 / 20)
    assert got.top[0].startswith("/System/Library/CoreServices/Spotlight.app")
