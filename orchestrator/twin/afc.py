"""AFC served over a directory: the Media partition, an app container (house_arrest), or the
crash reports. Paths never leave the directory (``..`` is collapsed, links that lead out are
refused), a Documents-only view (VendDocuments) shows nothing but ``/Documents``, and writes stop
at the twin's disk capacity with NO_SPACE_LEFT.
"""

from __future__ import annotations

import asyncio
import errno
import os
import posixpath
import stat
import struct
from dataclasses import dataclass
from pathlib import Path

from orchestrator.twin.disk import Disk

MAGIC = b"CFA6LPAA"
HEADER = struct.Struct("<8sQQQQ")
MAX_PACKET = 1 << 31

# opcodes (pymobiledevice3.services.afc.AfcOpcode)
STATUS, DATA, READ_DIR, REMOVE_PATH, MAKE_DIR, GET_FILE_INFO, GET_DEVINFO = 0x1, 0x2, 0x3, 0x8, 0x9, 0xA, 0xB
FILE_OPEN, FILE_OPEN_RES, READ, WRITE, FILE_SEEK, FILE_TELL, FILE_TELL_RES = 0xD, 0xE, 0xF, 0x10, 0x11, 0x12, 0x13
FILE_CLOSE, FILE_SET_SIZE, RENAME_PATH, FILE_LOCK, SET_FILE_TIME = 0x14, 0x15, 0x18, 0x1B, 0x1E
# statuses (AfcError)
OK, INVALID_ARG, NOT_FOUND, IS_DIR, PERM_DENIED, OP_NOT_SUPPORTED, EXISTS, NO_SPACE, IO_ERROR, NOT_EMPTY = (
    0, 7, 8, 9, 10, 15, 16, 18, 20, 33)

_ERRNO = {errno.ENOENT: NOT_FOUND, errno.ENOTDIR: NOT_FOUND, errno.EISDIR: IS_DIR, errno.EACCES: PERM_DENIED,
          errno.EPERM: PERM_DENIED, errno.EEXIST: EXISTS, errno.ENOSPC: NO_SPACE, errno.EDQUOT: NO_SPACE,
          errno.ENOTEMPTY: NOT_EMPTY}
_OPEN_FLAGS = {1: os.O_RDONLY, 2: os.O_RDWR | os.O_CREAT, 3: os.O_WRONLY | os.O_CREAT | os.O_TRUNC,
               4: os.O_RDWR | os.O_CREAT | os.O_TRUNC, 5: os.O_WRONLY | os.O_APPEND | os.O_CREAT,
               6: os.O_RDWR | os.O_APPEND | os.O_CREAT}
_IFMT = {stat.S_IFDIR: "S_IFDIR", stat.S_IFREG: "S_IFREG", stat.S_IFLNK: "S_IFLNK", stat.S_IFCHR: "S_IFCHR",
         stat.S_IFBLK: "S_IFBLK", stat.S_IFIFO: "S_IFIFO", stat.S_IFSOCK: "S_IFSOCK"}


class Refused(Exception):
    def __init__(self, status: int):
        super().__init__(status)
        self.status = status


@dataclass(frozen=True)
class View:
    """What one AFC connection sees: a root directory, all of it or only its Documents."""

    root: Path
    disk: Disk
    documents_only: bool = False
    model: str = "iPhone"

    def resolve(self, afc_path: str, follow: bool = True) -> Path:
        """The host path of an AFC path; ``follow``: the path itself must not be a link leading out."""
        norm = posixpath.normpath("/" + afc_path)
        if norm.startswith("//"):
            norm = "/" + norm.lstrip("/")
        if self.documents_only and norm not in ("/", "/Documents") and not norm.startswith("/Documents/"):
            raise Refused(PERM_DENIED)
        host = self.root / norm.lstrip("/") if norm != "/" else self.root
        real_root = os.path.realpath(self.root)
        real = os.path.realpath(host if follow or norm == "/" else host.parent)
        if real != real_root and not real.startswith(real_root + os.sep):
            raise Refused(PERM_DENIED)  # a link that leads out of the container
        return host

    def listdir(self, afc_path: str) -> list[str]:
        host = self.resolve(afc_path)
        names = sorted(os.listdir(host))
        if self.documents_only and host == self.root:
            names = [n for n in names if n == "Documents"]
        return names


def _cstrings(payload: bytes) -> list[str]:
    return [s.decode("utf-8", "surrogateescape") for s in payload.split(b"\0")[:-1]]


def _kv(values: dict[str, str]) -> bytes:
    return b"".join(k.encode() + b"\0" + v.encode() + b"\0" for k, v in values.items())


class AfcServer:
    """One AFC connection: requests in order, one reply each, echoing the packet number."""

    def __init__(self, view: View):
        self.view = view
        self.handles: dict[int, int] = {}
        self.next_handle = 1

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                try:
                    header = await reader.readexactly(HEADER.size)
                    magic, entire, _this, num, op = HEADER.unpack(header)
                    if magic != MAGIC or not HEADER.size <= entire < MAX_PACKET:
                        return
                    payload = await reader.readexactly(entire - HEADER.size)
                except (asyncio.IncompleteReadError, ConnectionError):
                    return
                reply_op, data = self.handle(op, payload)
                writer.write(HEADER.pack(MAGIC, HEADER.size + len(data), HEADER.size + len(data), num, reply_op)
                             + data)
                try:
                    await writer.drain()
                except ConnectionError:
                    return
        finally:
            for fd in self.handles.values():
                os.close(fd)
            self.handles.clear()

    def handle(self, op: int, payload: bytes) -> tuple[int, bytes]:
        try:
            result = self._dispatch(op, payload)
        except Refused as exc:
            return STATUS, struct.pack("<Q", exc.status)
        except OSError as exc:
            return STATUS, struct.pack("<Q", _ERRNO.get(exc.errno or 0, IO_ERROR))
        except (struct.error, IndexError, UnicodeError, KeyError):
            return STATUS, struct.pack("<Q", INVALID_ARG)
        if isinstance(result, tuple):
            return result
        return STATUS, struct.pack("<Q", OK)

    def _dispatch(self, op: int, payload: bytes) -> tuple[int, bytes] | None:
        view = self.view
        if op == GET_FILE_INFO:
            return DATA, self._stat(_cstrings(payload)[0])
        if op == READ_DIR:
            names = view.listdir(_cstrings(payload)[0])
            return DATA, b"".join(n.encode("utf-8", "surrogateescape") + b"\0" for n in [".", "..", *names])
        if op == MAKE_DIR:
            host = view.resolve(_cstrings(payload)[0])
            if host.exists() and not host.is_dir():
                raise Refused(EXISTS)
            host.mkdir(parents=True, exist_ok=True)
            return None
        if op == REMOVE_PATH:
            host = view.resolve(_cstrings(payload)[0], follow=False)
            if host == view.root:
                raise Refused(PERM_DENIED)
            if host.is_dir() and not host.is_symlink():
                host.rmdir()
            else:
                host.unlink()
            return None
        if op == RENAME_PATH:
            src, dst = (view.resolve(p, follow=False) for p in _cstrings(payload)[:2])
            if view.root in (src, dst):
                raise Refused(PERM_DENIED)
            os.rename(src, dst)
            return None
        if op == FILE_OPEN:
            (mode,) = struct.unpack_from("<Q", payload)
            host = view.resolve(_cstrings(payload[8:])[0])
            if mode not in _OPEN_FLAGS:
                raise Refused(INVALID_ARG)
            if host.is_dir():
                raise Refused(IS_DIR)
            fd = os.open(host, _OPEN_FLAGS[mode] | getattr(os, "O_NOFOLLOW", 0), 0o644)
            handle, self.next_handle = self.next_handle, self.next_handle + 1
            self.handles[handle] = fd
            return FILE_OPEN_RES, struct.pack("<Q", handle)
        if op == READ:
            handle, size = struct.unpack_from("<QQ", payload)
            fd, chunks, left = self.handles[handle], [], size
            while left > 0 and (chunk := os.read(fd, min(left, 1 << 22))):
                chunks.append(chunk)
                left -= len(chunk)
            return DATA, b"".join(chunks)
        if op == WRITE:
            (handle,) = struct.unpack_from("<Q", payload)
            data = memoryview(payload)[8:]
            if len(data) > view.disk.free():
                raise Refused(NO_SPACE)
            fd = self.handles[handle]
            while data:
                data = data[os.write(fd, data):]
            return None
        if op == FILE_SEEK:
            handle, whence, offset = struct.unpack_from("<QQq", payload)
            os.lseek(self.handles[handle], offset, whence)
            return None
        if op == FILE_TELL:
            (handle,) = struct.unpack_from("<Q", payload)
            return FILE_TELL_RES, struct.pack("<Q", os.lseek(self.handles[handle], 0, os.SEEK_CUR))
        if op == FILE_SET_SIZE:
            handle, size = struct.unpack_from("<QQ", payload)
            os.ftruncate(self.handles[handle], size)
            return None
        if op == FILE_CLOSE:
            (handle,) = struct.unpack_from("<Q", payload)
            os.close(self.handles.pop(handle))
            return None
        if op == FILE_LOCK:
            (handle,) = struct.unpack_from("<Q", payload)
            if handle not in self.handles:
                raise Refused(INVALID_ARG)
            return None
        if op == SET_FILE_TIME:
            (mtime_ns,) = struct.unpack_from("<Q", payload)
            host = view.resolve(_cstrings(payload[8:])[0], follow=False)
            os.utime(host, ns=(mtime_ns, mtime_ns), follow_symlinks=False)
            return None
        if op == GET_DEVINFO:
            free = view.disk.free()
            return DATA, _kv({"Model": view.model, "FSTotalBytes": str(view.disk.capacity),
                              "FSFreeBytes": str(free), "FSBlockSize": "4096"})
        raise Refused(OP_NOT_SUPPORTED)  # links, legacy whole-file ops, connection options

    def _stat(self, afc_path: str) -> bytes:
        host = self.view.resolve(afc_path, follow=False)
        st = os.lstat(host)
        fields = {
            "st_size": str(st.st_size), "st_blocks": str(getattr(st, "st_blocks", (st.st_size + 511) // 512)),
            "st_nlink": str(st.st_nlink), "st_ifmt": _IFMT.get(stat.S_IFMT(st.st_mode), "S_IFREG"),
            "st_mtime": str(st.st_mtime_ns), "st_birthtime": str(st.st_ctime_ns),
        }
        if stat.S_ISLNK(st.st_mode):
            fields["LinkTarget"] = os.readlink(host)
        return _kv(fields)
