"""The local runner against children that misbehave: real processes, each a small script run by this
interpreter. Each child writes its pid into a folder; the test looks only at those pids, and kills
any still alive when it ends, so a failing test leaks nothing."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from orchestrator.runners import CommandResult, ConnectionLost, LineSink, LocalRunner
from orchestrator.runners import local as runners

MiB = 1024 * 1024
LINUX = Path("/proc/self/fd").is_dir()  # where escaped children are found; elsewhere only the call returns

# Imported by every child: `up(name)` records its pid under the folder given as argv[1].
PIDS = """
import os, sys, time
def up(name):
    tmp = os.path.join(sys.argv[1], name + ".tmp")
    with open(tmp, "w") as f:
        f.write(str(os.getpid()))
    os.replace(tmp, os.path.join(sys.argv[1], name))
"""


@pytest.fixture
def pids(tmp_path: Path) -> Iterator[Path]:
    folder = tmp_path / "pids"
    folder.mkdir()
    yield folder
    for f in folder.iterdir():
        if f.suffix == ".tmp":  # a pid being written when the child was killed
            continue
        pid = int(f.read_text())
        if str(tmp_path) in _command_line(pid):  # still ours, not a reused pid
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)


def _command_line(pid: int) -> str:
    return subprocess.run(["ps", "-ww", "-o", "args=", "-p", str(pid)], capture_output=True, text=True).stdout


def child(tmp_path: Path, pids: Path, body: str) -> list[str]:
    script = tmp_path / "child.py"
    script.write_text(PIDS + textwrap.dedent(body))
    return [sys.executable, str(script), str(pids)]


def run(argv: list[str], timeout: float, on_line: LineSink | None = None) -> tuple[CommandResult, float]:
    t0 = time.monotonic()
    res = asyncio.run(LocalRunner().run(argv, timeout=timeout, on_line=on_line))
    return res, time.monotonic() - t0


def pid_of(pids: Path, name: str) -> int:
    return int((pids / name).read_text())


def reaped(pid: int) -> bool:
    """No such process, not even a zombie: it died and its parent (the runner) waited for it."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def dead(pid: int) -> bool:
    """Gone, or a zombie whose new parent has not reaped it yet (init in a container may not)."""
    if reaped(pid):
        return True
    return subprocess.run(["ps", "-o", "stat=", "-p", str(pid)], capture_output=True, text=True).stdout.startswith("Z")


ESCAPES = """
if os.fork() == 0:
    os.setsid()  # out of the process group, stdout and stderr still open
    up("grandchild")
    print("grandchild up", flush=True)
    time.sleep(300)
    os._exit(0)
up("child")
while not os.path.exists(os.path.join(sys.argv[1], "grandchild")):
    time.sleep(0.01)
time.sleep({child_sleeps})
"""


def test_timeout_holds_when_a_grandchild_leaves_the_group_and_keeps_the_pipes(tmp_path: Path, pids: Path) -> None:
    res, took = run(child(tmp_path, pids, ESCAPES.format(child_sleeps=300)), timeout=1)
    assert res.timed_out and res.returncode is None
    assert took < 1 + 5, f"returned {took:.1f} s after a 1 s timeout"
    assert "grandchild up" in res.stdout
    assert reaped(pid_of(pids, "child"))
    if LINUX:
        assert dead(pid_of(pids, "grandchild")), "found among the child's descendants, and killed"


def test_pipes_held_after_the_command_exits_are_waited_for_only_briefly(tmp_path: Path, pids: Path) -> None:
    res, took = run(child(tmp_path, pids, ESCAPES.format(child_sleeps=0)), timeout=30)
    assert res.ok and res.stdout == "grandchild up\n"
    assert took < runners.PIPE_GRACE_S + 5
    assert reaped(pid_of(pids, "child"))
    if LINUX:
        assert dead(pid_of(pids, "grandchild")), "found by the pipes it held, and killed"


def test_a_line_of_a_mebibyte_arrives_whole(tmp_path: Path, pids: Path) -> None:
    seen: list[str] = []
    argv = child(tmp_path, pids, f"""
        sys.stdout.write("HARNESS_DONE " + "x" * {MiB} + "\\nafter\\n")
    """)
    res, _ = run(argv, timeout=30, on_line=seen.append)
    big = "HARNESS_DONE " + "x" * MiB
    assert res.ok, res.stderr
    assert seen == [big, "after"]
    assert res.stdout == big + "\nafter\n"


def test_a_long_line_then_a_hang_is_killed_at_the_timeout(tmp_path: Path, pids: Path) -> None:
    seen: list[str] = []
    argv = child(tmp_path, pids, f"""
        up("child")
        print("y" * {MiB}, flush=True)
        time.sleep(300)
    """)
    res, took = run(argv, timeout=1, on_line=seen.append)
    assert res.timed_out and took < 1 + 5
    assert seen == ["y" * MiB]
    assert reaped(pid_of(pids, "child"))


def test_only_a_tail_of_a_flood_of_stderr_is_kept(tmp_path: Path, pids: Path) -> None:
    argv = child(tmp_path, pids, """
        chunk = b"e" * (1024 * 1024)
        for _ in range(200):
            sys.stderr.buffer.write(chunk)
        sys.stderr.buffer.write(b"\\nthe last words\\n")
    """)
    res, _ = run(argv, timeout=60)
    assert res.ok
    assert len(res.stderr) == runners.STDERR_TAIL
    assert res.stderr.endswith("e\nthe last words\n")
    assert res.stderr_dropped == 200 * MiB + len("\nthe last words\n") - runners.STDERR_TAIL


def test_stdout_kept_is_bounded_while_on_line_sees_every_line(
    tmp_path: Path, pids: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(runners, "STDOUT_KEEP", MiB)
    monkeypatch.setattr(runners, "LINE_MAX", 256 * 1024)
    argv = child(tmp_path, pids, """
        for i in range(100_000):
            print(f"line {i:06d} " + "z" * 50)
        print("w" * (1024 * 1024))
        print("last")
    """)
    count = 0

    def on_line(line: str) -> None:
        nonlocal count
        count += 1

    res, _ = run(argv, timeout=60, on_line=on_line)
    assert res.ok and count == 100_002
    assert len(res.stdout) <= MiB and res.stdout.endswith("\n" + "w" * 256 * 1024 + "\nlast\n")
    written = 100_000 * len(f"line {0:06d} " + "z" * 50 + "\n") + MiB + 1 + len("last\n")
    assert res.stdout_dropped == written - len(res.stdout)


def test_an_error_in_on_line_kills_the_command_and_is_raised(tmp_path: Path, pids: Path) -> None:
    argv = child(tmp_path, pids, """
        up("child")
        print("hello", flush=True)
        time.sleep(300)
    """)

    def on_line(line: str) -> None:
        raise RuntimeError(f"cannot take {line!r}")

    t0 = time.monotonic()
    with pytest.raises(RuntimeError, match="cannot take 'hello'"):
        run(argv, timeout=30, on_line=on_line)
    assert time.monotonic() - t0 < 10, "raised at once, not at the timeout"
    assert reaped(pid_of(pids, "child"))


def test_a_cancelled_run_kills_the_command(tmp_path: Path, pids: Path) -> None:
    argv = child(tmp_path, pids, """
        up("child")
        time.sleep(300)
    """)

    async def body() -> None:
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(LocalRunner().run(argv, timeout=30), 1)

    asyncio.run(body())
    assert reaped(pid_of(pids, "child"))


def test_a_stream_takes_long_lines_and_an_overlong_one_is_a_lost_connection(
    tmp_path: Path, pids: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(runners, "LINE_MAX", 2 * MiB)
    argv = child(tmp_path, pids, f"""
        up("child")
        print("a" * {MiB}, flush=True)
        print("b" * {3 * MiB}, flush=True)
        time.sleep(300)
    """)

    async def body() -> None:
        stream = await LocalRunner().open_stream(argv)
        try:
            assert await stream.receive(30) == "a" * MiB
            with pytest.raises(ConnectionLost, match="out of step"):
                await stream.receive(30)
        finally:
            await stream.close()

    asyncio.run(body())
    assert reaped(pid_of(pids, "child"))
