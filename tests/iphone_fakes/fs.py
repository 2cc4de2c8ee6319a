"""An in-memory file tree with AFC's view of it, and the AFC wire protocol served over it."""

from __future__ import annotations

import asyncio
import posixpath
import struct
import time

AFC_MAGIC = b"CFA6LPAA"
HEADER = struct.Struct("<8sQQQQ")
# opcodes and statuses, as pymobiledevice3.services.afc numbers them
STATUS, DATA, READ_DIR, REMOVE_PATH, MAKE_DIR, GET_FILE_INFO = 0x01, 0x02, 0x03, 0x08, 0x09, 0x0A
GET_DEVINFO, FILE_OPEN, FILE_OPEN_RES, READ, WRITE, FILE_CLOSE, RENAME_PATH = 0x0B, 0x0D, 0x0E, 0x0F, 0x10, 0x14, 0x18
OK, OBJECT_NOT_FOUND, OBJECT_IS_DIR, OP_NOT_SUPPORTED, NO_SPACE_LEFT, DIR_NOT_EMPTY = 0, 8, 9, 15, 18, 33
RDONLY = 1


class FakeFs:
    """Files and directories by absolute path; every path asked for is logged in ``seen``."""

    def __init__(self, *dirs: str, capacity: int = 64 << 30):
        self.files: dict[str, bytes] = {}
        self.dirs: set[str] = {"/"}
        self.mtime: dict[str, float] = {}
        self.seen: list[str] = []
        self.capacity = capacity  # the volume's size: what FSFreeBytes counts down from
        for d in dirs:
            self.makedirs(d)

    def free(self) -> int:
        return self.capacity - sum(len(d) for d in self.files.values())

    def device_info(self) -> bytes:
        info = {"Model": "iPhone17,1", "FSTotalBytes": str(self.capacity), "FSFreeBytes": str(self.free()),
                "FSBlockSize": "4096"}
        return b"".join(k.encode() + b"\0" + v.encode() + b"\0" for k, v in info.items())

    @staticmethod
    def norm(path: str) -> str:
        return posixpath.normpath("/" + path.lstrip("/")) if path else "/"

    def makedirs(self, path: str) -> None:
        path = self.norm(path)
        while path not in self.dirs:
            self.dirs.add(path)
            self.mtime[path] = time.time()
            path = posixpath.dirname(path)

    def write(self, path: str, data: bytes, mtime: float | None = None) -> None:
        path = self.norm(path)
        self.makedirs(posixpath.dirname(path))
        self.files[path] = data
        self.mtime[path] = time.time() if mtime is None else mtime

    def read(self, path: str) -> bytes | None:
        return self.files.get(self.norm(path))

    def listdir(self, path: str) -> list[str] | None:
        path = self.norm(path)
        if path not in self.dirs:
            return None
        names = {p[len(path):].lstrip("/").split("/")[0] for p in [*self.files, *self.dirs] if
                 p != path and posixpath.dirname(p) == path}
        return sorted(names)

    def remove(self, path: str) -> int:
        path = self.norm(path)
        if path in self.files:
            del self.files[path]
            return OK
        if path in self.dirs and path != "/":
            if self.listdir(path):
                return DIR_NOT_EMPTY
            self.dirs.discard(path)
            return OK
        return OBJECT_NOT_FOUND

    def rename(self, src: str, dst: str) -> int:
        src, dst = self.norm(src), self.norm(dst)
        if src not in self.files or posixpath.dirname(dst) not in self.dirs:
            return OBJECT_NOT_FOUND
        if dst in self.dirs:  # rename(2) of a file onto a directory fails (EISDIR)
            return OBJECT_IS_DIR
        self.files[dst] = self.files.pop(src)
        self.mtime[dst] = time.time()
        return OK

    def stat(self, path: str) -> bytes | None:
        path = self.norm(path)
        if path in self.files:
            kind, size = "S_IFREG", len(self.files[path])
        elif path in self.dirs:
            kind, size = "S_IFDIR", 64
        else:
            return None
        ns = str(int(self.mtime.get(path, time.time()) * 1e9))
        fields = {"st_size": str(size), "st_blocks": "8", "st_nlink": "1", "st_ifmt": kind, "st_mtime": ns,
                  "st_birthtime": ns}
        return b"".join(k.encode() + b"\0" + v.encode() + b"\0" for k, v in fields.items())


def _cstrings(data: bytes) -> list[str]:
    return [s.decode() for s in data.split(b"\0")[:-1]]


def _packet(num: int, op: int, data: bytes = b"") -> bytes:
    return HEADER.pack(AFC_MAGIC, HEADER.size + len(data), HEADER.size + len(data), num, op) + data


async def serve_afc(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, fs: FakeFs) -> None:
    """Answer AFC requests on one connection until the client (or an unplug) closes it."""
    handles: dict[int, list[object]] = {}  # handle -> [path, buffer, position, writable]
    next_handle = 1
    while True:
        try:
            header = await reader.readexactly(HEADER.size)
            magic, entire, _this, num, op = HEADER.unpack(header)
            payload = await reader.readexactly(entire - HEADER.size)
        except (asyncio.IncompleteReadError, ConnectionError):
            return
        assert magic == AFC_MAGIC
        status, reply_op, out = OK, STATUS, b""
        if op in (GET_FILE_INFO, READ_DIR, MAKE_DIR, REMOVE_PATH):
            path = _cstrings(payload)[0]
            fs.seen.append(fs.norm(path))
            if op == GET_FILE_INFO:
                info = fs.stat(path)
                status, reply_op, out = (OBJECT_NOT_FOUND, STATUS, b"") if info is None else (OK, DATA, info)
            elif op == READ_DIR:
                names = fs.listdir(path)
                if names is None:
                    status = OBJECT_NOT_FOUND
                else:
                    reply_op, out = DATA, b"".join(n.encode() + b"\0" for n in [".", "..", *names])
            elif op == MAKE_DIR:
                fs.makedirs(path)
            else:
                status = fs.remove(path)
        elif op == RENAME_PATH:
            src, dst = _cstrings(payload)[:2]
            fs.seen += [fs.norm(src), fs.norm(dst)]
            status = fs.rename(src, dst)
        elif op == GET_DEVINFO:
            reply_op, out = DATA, fs.device_info()
        elif op == FILE_OPEN:
            (mode,) = struct.unpack("<Q", payload[:8])
            path = fs.norm(_cstrings(payload[8:])[0])
            fs.seen.append(path)
            if mode == RDONLY and path not in fs.files:
                status = OBJECT_NOT_FOUND if path not in fs.dirs else OBJECT_IS_DIR
            elif mode != RDONLY and posixpath.dirname(path) not in fs.dirs:
                status = OBJECT_NOT_FOUND
            else:
                data = fs.files.get(path, b"") if mode == RDONLY else b""
                if mode != RDONLY:  # created (truncated) now, as open(2) does: the bytes land as they arrive
                    fs.write(path, b"")
                handles[next_handle] = [path, bytearray(data), 0, mode != RDONLY]
                reply_op, out = FILE_OPEN_RES, struct.pack("<Q", next_handle)
                next_handle += 1
        elif op == READ:
            handle, size = struct.unpack("<QQ", payload[:16])
            path, buf, pos, _w = handles[handle]
            assert isinstance(buf, bytearray) and isinstance(pos, int)
            reply_op, out = DATA, bytes(buf[pos:pos + size])
            handles[handle][2] = pos + len(out)
        elif op == WRITE:
            (handle,) = struct.unpack("<Q", payload[:8])
            path = handles[handle][0]
            assert isinstance(path, str)
            data = payload[8:]
            if len(data) > fs.free():
                status = NO_SPACE_LEFT
            elif path in fs.files:  # written through: a connection cut mid-file leaves what arrived
                fs.files[path] += data
        elif op == FILE_CLOSE:
            (handle,) = struct.unpack("<Q", payload[:8])
            handles.pop(handle)
        else:
            status = OP_NOT_SUPPORTED
        if reply_op == STATUS:
            out = struct.pack("<Q", status)
        try:
            writer.write(_packet(num, reply_op, out))
            await writer.drain()
        except ConnectionError:
            return
