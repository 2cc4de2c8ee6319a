"""The SSH runner (paramiko): host keys verified against known_hosts, unknown or changed keys refused.

Trusting a new host is an explicit per-host opt-in (`trust_new_host_key: true`); a changed key is
always refused, naming the host and both fingerprints. Every command word is `shlex.quote`d.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import os
import re
import select
import shlex
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import paramiko

from orchestrator.config.fleet import SshHost
from orchestrator.runners.base import (
    AuthRefused,
    CommandResult,
    ConnectionLost,
    HostKeyRejected,
    LineSink,
    Runner,
    Stream,
    Unreachable,
)

PID_TAG = "ORCH_PID "
TIMES_TAG = "ORCH_TIMES"  # on stderr, before the shell's `times` (CPU time of the command's process tree)
_TIMES = re.compile(r"(\d+)m([\d.]+)s")


def split_times(stderr: str) -> tuple[str, float | None]:
    """The command's stderr without the `times` report the wrapper appended, and the CPU seconds its children
    used (user + system, the second line), or None when there is no report (killed, or a shell without one)."""
    head, tag, tail = stderr.rpartition(TIMES_TAG + "\n")
    if not tag:
        return stderr, None
    lines = tail.splitlines()
    found = _TIMES.findall(lines[1]) if len(lines) > 1 else []
    if len(found) != 2:
        return head, None
    return head, sum(int(m) * 60 + float(s) for m, s in found)


def fingerprint(key: paramiko.PKey) -> str:
    """OpenSSH style: SHA256:base64 without padding."""
    digest = hashlib.sha256(key.asbytes()).digest()
    return "SHA256:" + base64.b64encode(digest).decode().rstrip("=")


class _UnknownHostKey(Exception):
    def __init__(self, hostname: str, key: paramiko.PKey):
        super().__init__(hostname)
        self.hostname, self.key = hostname, key


class _Refuse(paramiko.MissingHostKeyPolicy):
    def missing_host_key(self, client: paramiko.SSHClient, hostname: str, key: paramiko.PKey) -> None:
        raise _UnknownHostKey(hostname, key)


class _TrustAndRecord(paramiko.MissingHostKeyPolicy):
    """The opt-in: accept a host seen for the first time and write its key to known_hosts."""

    def __init__(self, known_hosts: Path):
        self.known_hosts = known_hosts

    def missing_host_key(self, client: paramiko.SSHClient, hostname: str, key: paramiko.PKey) -> None:
        client.get_host_keys().add(hostname, key.get_name(), key)
        self.known_hosts.parent.mkdir(parents=True, exist_ok=True)
        with open(self.known_hosts, "a") as f:
            f.write(f"{hostname} {key.get_name()} {key.get_base64()}\n")


class SshRunner(Runner):
    def __init__(self, cfg: SshHost):
        self.cfg = cfg
        self.name = cfg.id
        self.python, self.cache = cfg.python, cfg.cache
        self._client: paramiko.SSHClient | None = None
        self._home: str | None = None
        self._sftp_client: paramiko.SFTPClient | None = None
        self._lock = asyncio.Lock()
        self.commands_cpu_s: float | None = 0.0

    # -- connection --------------------------------------------------------------------------
    def _where(self) -> str:
        return f"{self.cfg.id} ({self.cfg.user}@{self.cfg.address}:{self.cfg.port})"

    def _connect_sync(self) -> paramiko.SSHClient:
        cfg = self.cfg
        known = Path(os.path.expanduser(cfg.known_hosts))
        client = paramiko.SSHClient()
        if known.exists():
            client.load_host_keys(str(known))
        client.set_missing_host_key_policy(_TrustAndRecord(known) if cfg.trust_new_host_key else _Refuse())
        try:
            client.connect(
                cfg.address, port=cfg.port, username=cfg.user,
                key_filename=os.path.expanduser(cfg.key) if cfg.key else None,
                allow_agent=cfg.key is None, look_for_keys=False, timeout=cfg.connect_timeout_s,
                banner_timeout=cfg.connect_timeout_s, auth_timeout=cfg.connect_timeout_s,
            )
        except paramiko.BadHostKeyException as exc:
            client.close()
            raise HostKeyRejected(
                f"{self._where()}: host key CHANGED: known_hosts has {fingerprint(exc.expected_key)}, the host "
                f"offered {fingerprint(exc.key)}; refusing to connect",
                fix=f"if {cfg.address} was reinstalled, verify its new key out of band and replace its line in {known}",
            ) from None
        except _UnknownHostKey as exc:
            client.close()
            raise HostKeyRejected(
                f"{self._where()}: unknown host key {fingerprint(exc.key)} ({exc.key.get_name()}) for {exc.hostname}: "
                f"not in {known}; refusing to connect",
                fix=f"check the fingerprint on the host, then: ssh-keyscan -p {cfg.port} {cfg.address} >> {known} "
                f"(or set trust_new_host_key: true for host {cfg.id!r})",
            ) from None
        except paramiko.AuthenticationException as exc:
            client.close()
            raise AuthRefused(
                f"{self._where()}: authentication refused: {exc}",
                fix=f"check user {cfg.user!r} and key {cfg.key or '(ssh agent)'}; install the public key on the host",
            ) from None
        except (OSError, paramiko.SSHException, EOFError) as exc:
            client.close()
            raise Unreachable(f"{self._where()}: cannot connect: {exc or type(exc).__name__}",
                              fix="check the address, the port and that sshd runs") from None
        transport = client.get_transport()
        assert transport is not None
        if cfg.keepalive_s:
            transport.set_keepalive(int(cfg.keepalive_s))
        return client

    def _alive(self) -> bool:
        t = self._client.get_transport() if self._client else None
        return t is not None and t.is_active()

    async def _ensure(self) -> paramiko.SSHClient:
        """Connect, or reconnect once if the connection dropped."""
        async with self._lock:
            if not self._alive():
                if self._client is not None:
                    self._client.close()
                self._sftp_client = None
                self._client = await asyncio.to_thread(self._connect_sync)
            assert self._client is not None
            return self._client

    async def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None
            self._sftp_client = None

    # -- commands ----------------------------------------------------------------------------
    async def home(self) -> str:
        if self._home is None:
            res = await self.run(["sh", "-c", 'printf %s "$HOME"'], timeout=30)
            if not res.ok or not res.stdout.startswith("/"):
                raise ConnectionLost(f"{self._where()}: cannot read $HOME: {res.stderr.strip()}")
            self._home = res.stdout
        return self._home

    async def expand(self, path: str) -> str:
        if path == "~" or path.startswith("~/"):
            return (await self.home()) + path[1:]
        return path

    async def run(
        self, argv: Sequence[str], *, timeout: float, cwd: str | None = None, on_line: LineSink | None = None
    ) -> CommandResult:
        if not argv:
            raise ValueError("empty command")
        client = await self._ensure()
        # Not `exec`: the shell waits and exits 128+N when the command dies of signal N (paramiko does not
        # report exit-signal), and on timeout it and its children are killed by PID.
        # After it, the shell's `times` on stderr: the CPU time of the command's process tree, so a host's
        # interference check can tell our work from others'.
        script = f'echo "{PID_TAG}$$"; ' + (f"cd {shlex.quote(cwd)} || exit 126; " if cwd else "") + \
            f'"$@"; rc=$?; echo {TIMES_TAG} >&2; times >&2; exit $rc'
        command = " ".join(["sh", "-c", shlex.quote(script), "orch", *(shlex.quote(a) for a in argv)])
        loop = asyncio.get_running_loop()

        def emit(line: str) -> None:
            if on_line is not None:
                loop.call_soon_threadsafe(on_line, line)

        return await asyncio.to_thread(self._exec_sync, client, command, timeout, emit)

    def _exec_sync(self, client: paramiko.SSHClient, command: str, timeout: float, emit: LineSink) -> CommandResult:
        transport = client.get_transport()
        if transport is None or not transport.is_active():
            raise ConnectionLost(f"{self._where()}: connection dropped")
        try:
            chan = transport.open_session(timeout=self.cfg.connect_timeout_s)
            chan.exec_command(command)
        except (paramiko.SSHException, OSError, EOFError) as exc:
            raise ConnectionLost(f"{self._where()}: connection dropped: {exc}") from None
        deadline = time.monotonic() + timeout
        out, err, pending, pid = [], [], b"", None
        try:
            while True:
                if chan.recv_ready():
                    pending += chan.recv(65536)
                    *lines, pending = pending.split(b"\n")
                    for raw in lines:
                        line = raw.decode("utf-8", "replace")
                        if pid is None and line.startswith(PID_TAG):
                            pid = int(line[len(PID_TAG):])
                            continue
                        out.append(line + "\n")
                        emit(line)
                if chan.recv_stderr_ready():
                    err.append(chan.recv_stderr(65536))
                if chan.exit_status_ready() and not chan.recv_ready() and not chan.recv_stderr_ready():
                    break
                if not transport.is_active():
                    raise ConnectionLost(f"{self._where()}: connection dropped mid-command")
                if time.monotonic() > deadline:
                    self._kill_sync(transport, pid)
                    return CommandResult(None, "".join(out), b"".join(err).decode("utf-8", "replace"), True)
                select.select([chan], [], [], 0.05)
        except (TimeoutError, OSError, EOFError, paramiko.SSHException) as exc:
            raise ConnectionLost(f"{self._where()}: connection dropped mid-command: {exc}") from None
        finally:
            chan.close()
        status = chan.recv_exit_status()
        if status == -1 and not transport.is_active():  # the channel closed without an exit status
            raise ConnectionLost(f"{self._where()}: connection dropped mid-command")
        if pending:
            out.append(pending.decode("utf-8", "replace"))
            emit(pending.decode("utf-8", "replace"))
        stderr, cpu = split_times(b"".join(err).decode("utf-8", "replace"))
        if cpu is not None:
            self.commands_cpu_s = (self.commands_cpu_s or 0.0) + cpu
        return CommandResult(status, "".join(out), stderr)

    def _kill_sync(self, transport: paramiko.Transport, pid: int | None) -> None:
        """Kill the command's whole process tree on the host; closing the channel alone would not.

        Each process is stopped before its children are listed, so none can spawn past the sweep;
        `pgrep -P` exists on Linux and macOS alike.
        """
        if pid is None:
            return
        tree = 't(){ kill -STOP "$1" 2>/dev/null; for c in $(pgrep -P "$1"); do t "$c"; done; kill -KILL "$1"; }'
        chan = transport.open_session(timeout=self.cfg.connect_timeout_s)
        try:
            chan.exec_command(f"{tree}; t {int(pid)} 2>/dev/null; true")
            chan.recv_exit_status()
        finally:
            chan.close()

    async def open_stream(self, argv: Sequence[str]) -> Stream:
        client = await self._ensure()
        transport = client.get_transport()
        assert transport is not None
        command = " ".join(shlex.quote(a) for a in argv)
        try:
            chan = await asyncio.to_thread(lambda: transport.open_session(timeout=self.cfg.connect_timeout_s))
            await asyncio.to_thread(chan.exec_command, command)
        except (paramiko.SSHException, OSError, EOFError) as exc:
            raise ConnectionLost(f"{self._where()}: cannot start {argv[0]}: {exc}") from None
        return _SshStream(chan, self._where())

    # -- files -------------------------------------------------------------------------------
    async def _sftp(self) -> paramiko.SFTPClient:
        """One SFTP session per connection, opened on first use."""
        client = await self._ensure()
        sftp = self._sftp_client
        chan = sftp.get_channel() if sftp is not None else None
        if sftp is None or chan is None or chan.closed:
            sftp = self._sftp_client = await asyncio.to_thread(client.open_sftp)
        return sftp

    async def put(self, local: Path, remote: str, progress: Callable[[int, int], None] | None = None) -> None:
        """Stream `local` to `remote + ".part"`, then rename it into place: the final name never holds a
        partial file, and a `.part` left by a dropped push is overwritten by the next. `progress`
        hears (bytes sent, total) on this event loop as the bytes go."""
        remote = await self.expand(remote)
        parent = remote.rsplit("/", 1)[0] or "/"
        mk = await self.run(["mkdir", "-p", parent], timeout=30)
        if not mk.ok:
            raise ConnectionLost(f"{self._where()}: mkdir {parent}: {mk.stderr.strip()}")
        sftp = await self._sftp()
        loop = asyncio.get_running_loop()

        def sent(done: int, total: int) -> None:  # called in paramiko's thread, every 32 KB
            if progress is not None:
                loop.call_soon_threadsafe(progress, done, total)

        try:
            await asyncio.to_thread(sftp.put, str(local), remote + ".part", sent)
            await asyncio.to_thread(sftp.posix_rename, remote + ".part", remote)
        except (OSError, paramiko.SSHException, EOFError) as exc:
            raise ConnectionLost(f"{self._where()}: put {remote}: {exc}") from None

    async def get(self, remote: str, local: Path) -> None:
        remote = await self.expand(remote)
        sftp = await self._sftp()
        try:
            await asyncio.to_thread(sftp.get, remote, str(local))
        except FileNotFoundError:
            raise
        except (OSError, paramiko.SSHException, EOFError) as exc:
            raise ConnectionLost(f"{self._where()}: get {remote}: {exc}") from None

    async def exists(self, remote: str) -> bool:
        remote = await self.expand(remote)
        sftp = await self._sftp()
        try:
            await asyncio.to_thread(sftp.stat, remote)
            return True
        except FileNotFoundError:
            return False


class _SshStream(Stream):
    def __init__(self, chan: paramiko.Channel, where: str):
        self.chan, self.where, self.buf = chan, where, b""

    async def send(self, line: str) -> None:
        try:
            await asyncio.to_thread(self.chan.sendall, line.encode() + b"\n")
        except (OSError, paramiko.SSHException, EOFError) as exc:
            raise ConnectionLost(f"{self.where}: stream closed: {exc}") from None

    def _recv(self, wait: float) -> bytes | None:
        """Bytes, b"" at end of stream, None when nothing arrived within `wait`."""
        if not self.chan.recv_ready():
            if self.chan.closed or self.chan.exit_status_ready():
                return self.chan.recv(65536) if self.chan.recv_ready() else b""
            select.select([self.chan], [], [], wait)
            if not self.chan.recv_ready():
                return b"" if self.chan.closed or self.chan.exit_status_ready() else None
        return self.chan.recv(65536)

    async def receive(self, timeout: float) -> str:
        deadline = time.monotonic() + timeout
        while b"\n" not in self.buf:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError
            try:
                data = await asyncio.to_thread(self._recv, min(left, 0.5))
            except (OSError, paramiko.SSHException, EOFError) as exc:
                raise ConnectionLost(f"{self.where}: stream dropped: {exc}") from None
            if data == b"":
                raise ConnectionLost(f"{self.where}: the remote command ended")
            if data:
                self.buf += data
        line, self.buf = self.buf.split(b"\n", 1)
        return line.decode("utf-8", "replace")

    async def close(self) -> None:
        self.chan.close()
