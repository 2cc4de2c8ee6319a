"""A real OpenSSH server on 127.0.0.1 at a free port, with throwaway host and user keys."""

from __future__ import annotations

import getpass
import os
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from orchestrator.config import SshHost


@dataclass
class Sshd:
    dir: Path
    port: int
    user: str
    client_key: Path
    known_hosts: Path
    host_key_line: str
    proc: subprocess.Popen[bytes]

    def host(self, **over: object) -> SshHost:
        fields: dict[str, object] = {
            "id": "loop", "kind": "ssh", "address": "127.0.0.1", "port": self.port, "user": self.user,
            "key": str(self.client_key), "known_hosts": str(self.known_hosts), "connect_timeout_s": 5,
        }
        fields.update(over)
        return SshHost.model_validate(fields)

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)


def _keygen(path: Path) -> None:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)], check=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_sshd(root: Path) -> Sshd:
    sshd = shutil.which("sshd") or "/usr/sbin/sshd"
    if not os.access(sshd, os.X_OK):
        raise RuntimeError("sshd not installed: `make test` installs Debian's openssh-server")
    root.mkdir(parents=True, exist_ok=True)
    for name in ("host_key", "client_key"):
        _keygen(root / name)
    shutil.copy(root / "client_key.pub", root / "authorized_keys")
    port = free_port()
    config = root / "sshd_config"
    config.write_text(f"""\
Port {port}
ListenAddress 127.0.0.1
HostKey {root}/host_key
PidFile {root}/sshd.pid
AuthorizedKeysFile {root}/authorized_keys
StrictModes no
UsePAM no
PasswordAuthentication no
KbdInteractiveAuthentication no
PubkeyAuthentication yes
PermitRootLogin prohibit-password
Subsystem sftp internal-sftp
LogLevel ERROR
""")
    if os.geteuid() == 0:
        Path("/run/sshd").mkdir(exist_ok=True)  # the privilege-separation directory
    proc = subprocess.Popen([sshd, "-D", "-e", "-f", str(config)], stderr=open(root / "sshd.log", "wb"))  # noqa: SIM115
    deadline = time.monotonic() + 10
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            break
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"sshd did not start: {(root / 'sshd.log').read_text()}") from None
            time.sleep(0.05)
    key_type, key_b64 = (root / "host_key.pub").read_text().split()[:2]
    line = f"[127.0.0.1]:{port} {key_type} {key_b64}"
    (root / "known_hosts").write_text(line + "\n")
    return Sshd(root, port, getpass.getuser(), root / "client_key", root / "known_hosts", line, proc)
