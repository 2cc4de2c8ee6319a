"""Runners against the real thing: subprocesses here, a real OpenSSH server on loopback."""

from __future__ import annotations

import asyncio
import subprocess
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from sshd import Sshd, _keygen, free_port

from orchestrator.runners import AuthRefused, ConnectionLost, HostKeyRejected, LocalRunner, Runner, Unreachable
from orchestrator.runners.ssh import SshRunner

NASTY = ["a b", "it's", 'say "hi"', "$(touch {marker})", "`touch {marker}`", "; touch {marker}", "*", "~", "-n", ""]


def runners(sshd: Sshd) -> dict[str, Callable[[], Runner]]:
    return {"local": LocalRunner, "ssh": lambda: SshRunner(sshd.host())}


@pytest.fixture(params=["local", "ssh"])
def make_runner(request: pytest.FixtureRequest, sshd: Sshd) -> Callable[[], Runner]:
    return runners(sshd)[request.param]


def go(coro):  # type: ignore[no-untyped-def]
    return asyncio.run(coro)


async def closing(runner: Runner, coro):  # type: ignore[no-untyped-def]
    try:
        return await coro
    finally:
        await runner.close()


def test_every_word_arrives_intact_and_nothing_executes(make_runner: Callable[[], Runner], tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    words = [w.format(marker=marker) for w in NASTY]
    runner = make_runner()
    res = go(closing(runner, runner.run(["printf", "%s\\n", *words], timeout=30)))
    assert res.ok, res.stderr
    assert res.stdout.split("\n")[:-1] == words
    assert not marker.exists()


def test_timeout_kills_the_command_and_its_children(make_runner: Callable[[], Runner], tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    runner = make_runner()
    t0 = time.monotonic()
    script = f'sleep 300 & echo $! > "{pids}"; echo $$ >> "{pids}"; sleep 301'
    res = go(closing(runner, runner.run(["sh", "-c", script], timeout=1.0)))
    assert res.timed_out and res.returncode is None and not res.ok
    assert time.monotonic() - t0 < 20
    started = [int(p) for p in pids.read_text().split()]
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and any(_alive(p) for p in started):
        time.sleep(0.05)
    assert not [p for p in started if _alive(p)], "the command and its children are killed"


def _alive(pid: int) -> bool:
    """Running (a zombie waiting for its parent counts as gone)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False


def test_lines_stream_as_they_come(make_runner: Callable[[], Runner]) -> None:
    seen: list[tuple[float, str]] = []
    runner = make_runner()
    script = "echo one; sleep 0.6; echo two"
    res = go(closing(runner, runner.run(["sh", "-c", script], timeout=30, on_line=lambda s: seen.append(
        (time.monotonic(), s)))))
    assert res.ok and [s for _, s in seen] == ["one", "two"]
    assert seen[1][0] - seen[0][0] > 0.3, "the first line arrived before the command ended"


def test_exit_codes_stderr_cwd_and_missing_commands(make_runner: Callable[[], Runner], tmp_path: Path) -> None:
    runner = make_runner()

    async def body() -> None:
        res = await runner.run(["sh", "-c", "echo oops >&2; exit 3"], timeout=30)
        assert res.returncode == 3 and res.stderr.strip() == "oops"
        weird = tmp_path / "dir with 'quotes' and $(x)"
        weird.mkdir()
        res = await runner.run(["pwd"], timeout=30, cwd=str(weird))
        assert res.stdout.strip() == str(weird)
        res = await runner.run(["no-such-command-here"], timeout=30)
        assert res.returncode == 127

    go(closing(runner, body()))


def test_put_get_exists_with_awkward_names(make_runner: Callable[[], Runner], tmp_path: Path) -> None:
    runner = make_runner()
    src = tmp_path / "src.bin"
    src.write_bytes(bytes(range(256)) * 1000)
    remote = str(tmp_path / "far away" / "it's $(here).bin")

    async def body() -> None:
        assert not await runner.exists(remote)
        await runner.put(src, remote)
        assert await runner.exists(remote)
        back = tmp_path / "back.bin"
        await runner.get(remote, back)
        assert back.read_bytes() == src.read_bytes()
        assert await runner.expand("~/x") != "~/x"

    go(closing(runner, body()))


def test_unknown_host_key_is_refused_and_nothing_runs(sshd: Sshd, tmp_path: Path) -> None:
    empty = tmp_path / "known_hosts"
    empty.write_text("")
    marker = tmp_path / f"ran-{uuid.uuid4().hex}"
    runner = SshRunner(sshd.host(known_hosts=str(empty)))
    with pytest.raises(HostKeyRejected) as exc:
        go(runner.run(["touch", str(marker)], timeout=10))
    assert "unknown host key SHA256:" in str(exc.value) and "refusing" in str(exc.value)
    assert exc.value.fix is not None and "ssh-keyscan" in exc.value.fix
    assert not marker.exists() and empty.read_text() == ""


def test_changed_host_key_is_refused_naming_both_fingerprints(sshd: Sshd, tmp_path: Path) -> None:
    _keygen(tmp_path / "other")
    key_type, b64 = (tmp_path / "other.pub").read_text().split()[:2]
    wrong = tmp_path / "known_hosts"
    wrong.write_text(f"[127.0.0.1]:{sshd.port} {key_type} {b64}\n")
    want = subprocess.run(["ssh-keygen", "-lf", str(tmp_path / "other.pub")], capture_output=True, text=True)
    got = subprocess.run(["ssh-keygen", "-lf", str(sshd.dir / "host_key.pub")], capture_output=True, text=True)
    for trust in (False, True):  # a changed key is refused even where new hosts are trusted
        with pytest.raises(HostKeyRejected) as exc:
            go(SshRunner(sshd.host(known_hosts=str(wrong), trust_new_host_key=trust)).run(["true"], timeout=10))
        msg = str(exc.value)
        assert "CHANGED" in msg and "loop (" in msg
        assert want.stdout.split()[1] in msg and got.stdout.split()[1] in msg


def test_trusting_a_new_host_is_an_explicit_opt_in_that_records_the_key(sshd: Sshd, tmp_path: Path) -> None:
    known = tmp_path / "kh" / "known_hosts"
    runner = SshRunner(sshd.host(known_hosts=str(known), trust_new_host_key=True))
    assert go(closing(runner, runner.run(["true"], timeout=10))).ok
    assert known.read_text().strip() == sshd.host_key_line
    strict = SshRunner(sshd.host(known_hosts=str(known)))
    assert go(closing(strict, strict.run(["true"], timeout=10))).ok


def test_refused_auth_and_unreachable_host(sshd: Sshd, tmp_path: Path) -> None:
    _keygen(tmp_path / "stranger")
    with pytest.raises(AuthRefused) as exc:
        go(SshRunner(sshd.host(key=str(tmp_path / "stranger"))).run(["true"], timeout=10))
    assert exc.value.state == "auth_refused"
    with pytest.raises(Unreachable):
        go(SshRunner(sshd.host(port=free_port(), connect_timeout_s=2)).run(["true"], timeout=10))


def test_dropped_connection_fails_the_command_then_reconnects(sshd: Sshd) -> None:
    runner = SshRunner(sshd.host())

    async def body() -> None:
        assert (await runner.run(["true"], timeout=10)).ok
        client = runner._client
        assert client is not None
        running = asyncio.ensure_future(runner.run(["sleep", "5"], timeout=30))
        await asyncio.sleep(0.5)
        transport = client.get_transport()
        assert transport is not None
        transport.close()  # the cable is pulled
        with pytest.raises(ConnectionLost):
            await running
        assert (await runner.run(["echo", "back"], timeout=10)).stdout == "back\n", "one reconnect"

    go(closing(runner, body()))

