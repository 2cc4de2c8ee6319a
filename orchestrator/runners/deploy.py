"""Artifact files onto a host: streamed, never half-written, skipped by sha256, refused without room.

Each file goes to ``<root>/<name>`` (an SSH host's root is its cache folder). Beside it a marker,
``<name>.sha256``, holds the sha256 it was verified with on the host; a file is skipped when its
marker matches and its size is right. A push writes ``<name>.part`` and renames it once every
byte is there (the SSH runner's put), then the host hashes it, and only then is the marker
written: a controller killed mid-push leaves a ``.part`` that the next push replaces, never a
file under the final name that a marker vouches for. Before anything moves, `df -Pk` on the root
says whether the files fit with `RESERVE_BYTES` to spare.

The phone's counterpart (AFC) is ``iphone/container.py``; both share the free-space rule here.
"""

from __future__ import annotations

import re
import time
from pathlib import Path

from orchestrator.protocol.device import ArtifactFile, DeviceUnavailable, NoSpace, Placed, Progress
from orchestrator.runners import Runner
from orchestrator.runners.ssh import SshRunner

RESERVE_BYTES = 256 << 20  # kept free after a push: a disk filled to the last byte fails everything else on it
MARKER = ".sha256"
PART = ".part"
PUSH_TIMEOUT_S = 120.0  # each small command around a push; the transfer itself has no deadline
HASH_TIMEOUT_S = 1800.0  # hashing a pushed file on the host (a few GB: tens of seconds)

_DF_LINE = re.compile(r"\s(\d+)\s+(\d+)\s+(\d+)\s+(\d+)%\s+\S.*$")


def parse_df(text: str) -> int:
    """Free bytes (available to an unprivileged user) from `df -Pk PATH`: a header, then one line
    `filesystem 1024-blocks used available capacity% mountpoint`. Names may hold spaces."""
    lines = [ln for ln in text.splitlines() if ln.strip()]
    m = _DF_LINE.search(lines[-1]) if len(lines) >= 2 else None
    if m is None:
        raise ValueError(f"not df -Pk output: {text.strip()[:200]!r}")
    return int(m.group(3)) * 1024


def check_room(device: str, where: str, need: int, free: int, reserve: int | None = None) -> None:
    """Refuse (NoSpace) unless `need` bytes fit in `free` with `reserve` (default RESERVE_BYTES) left over."""
    reserve = RESERVE_BYTES if reserve is None else reserve
    if need > 0 and free < need + reserve:
        raise NoSpace(device, where, need, free, reserve)


class Throttle:
    """Hands a push's progress on at most every 1% (and at the start and the end)."""

    def __init__(self, progress: Progress | None, name: str, total: int):
        self.progress, self.name, self.total = progress, name, total
        self.step = max(1, total // 100)
        self.last = -1

    def __call__(self, sent: int, total: int | None = None) -> None:
        if self.progress is None:
            return
        if self.last < 0 or sent >= self.total or sent - self.last >= self.step:
            self.last = sent
            self.progress(self.name, sent, self.total)


async def remote_sha256(runner: Runner, path: str, timeout: float = HASH_TIMEOUT_S) -> str | None:
    """sha256 of a file on the host (sha256sum on Linux, shasum on macOS), or None if unreadable."""
    for argv in (["sha256sum", path], ["shasum", "-a", "256", path]):
        res = await runner.run(argv, timeout=timeout)
        if res.ok and res.stdout.split():
            return res.stdout.split()[0]
    return None


# Per file: its marker's content and its size, "-" for what is missing (wc -c reads sizes from fstat).
_HELD = 'for f in "$@"; do m=$(cat "$f.sha256" 2>/dev/null); s=$(wc -c < "$f" 2>/dev/null | tr -d " "); ' \
        'echo "${m:--} ${s:--}"; done'
# The root made, stale markers and parts of what will be pushed removed (their space counted free), then df.
_ROOM = 'd="$1"; shift; mkdir -p "$d" || exit 1; for f in "$@"; do rm -f "$f.sha256" "$f.part"; done; df -Pk "$d"'
_MARK = 'printf "%s\\n" "$2" > "$1.tmp" && mv -f "$1.tmp" "$1"'


async def held(runner: Runner, paths: list[str]) -> list[tuple[str | None, int | None]]:
    """(marker sha256, size) of each path on the host; None where missing."""
    res = await runner.run(["sh", "-c", _HELD, "orch", *paths], timeout=PUSH_TIMEOUT_S)
    rows = res.stdout.splitlines()
    out: list[tuple[str | None, int | None]] = []
    for i in range(len(paths)):
        words = rows[i].split() if i < len(rows) else []
        sha = words[0] if words and words[0] != "-" else None
        size = int(words[1]) if len(words) > 1 and words[1].isdigit() else None
        out.append((sha, size))
    return out


async def _put(runner: Runner, local: Path, remote: str, progress: Throttle) -> None:
    if isinstance(runner, SshRunner):  # SFTP reports bytes as they go
        await runner.put(local, remote, progress=progress)
    else:
        await runner.put(local, remote)
    progress(progress.total)


async def push_to_host(
    runner: Runner, root: str, files: list[ArtifactFile], device: str, progress: Progress | None = None
) -> list[Placed]:
    """Put each file at `<root>/<name>` on the runner's host unless it is there already (by marker
    and size); return where each landed. Raises NoSpace before moving a byte when they do not fit."""
    root = root.rstrip("/")
    paths = [f"{root}/{f.name}" for f in files]
    for f in files:
        if not Path(f.source).is_file():
            raise DeviceUnavailable(f"{device}: {f.source} is gone from the controller", state="error",
                                    fix="make the model again (orch model make) or fix the plan's model path")
    have = await held(runner, paths) if files else []
    todo = [i for i, (f, (sha, size)) in enumerate(zip(files, have, strict=True))
            if sha != f.sha256 or size != f.size]
    if todo:
        res = await runner.run(["sh", "-c", _ROOM, "orch", root, *(paths[i] for i in todo)], timeout=PUSH_TIMEOUT_S)
        try:
            free = parse_df(res.stdout)
        except ValueError:
            raise DeviceUnavailable(f"{device}: cannot read free space at {root}: {res.stderr.strip()[:200]}",
                                    state="error", fix=f"check that {root} can be created on the host") from None
        check_room(device, root, sum(files[i].size for i in todo), free)
    placed: list[Placed] = []
    for i, (f, path) in enumerate(zip(files, paths, strict=True)):
        if i not in todo:
            placed.append(Placed(name=f.name, path=path, sha256=f.sha256, bytes_sent=0))
            continue
        t0 = time.monotonic()
        await _put(runner, Path(f.source), path, Throttle(progress, f.name, f.size))
        got = await remote_sha256(runner, path)
        if got != f.sha256:
            await runner.run(["rm", "-f", path], timeout=PUSH_TIMEOUT_S)
            raise DeviceUnavailable(f"{device}: {f.name} arrived with sha256 {got}, expected {f.sha256} "
                                    "(changed on the controller during the push?)", state="error")
        res = await runner.run(["sh", "-c", _MARK, "orch", path + MARKER, f.sha256], timeout=PUSH_TIMEOUT_S)
        if not res.ok:
            raise DeviceUnavailable(f"{device}: cannot write {path}{MARKER}: {res.stderr.strip()[:200]}", state="error")
        placed.append(Placed(name=f.name, path=path, sha256=f.sha256, bytes_sent=f.size,
                             seconds=round(time.monotonic() - t0, 3)))
    return placed


__all__ = ["MARKER", "PART", "RESERVE_BYTES", "Throttle", "check_room", "held", "parse_df", "push_to_host",
           "remote_sha256"]
