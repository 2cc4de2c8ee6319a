"""The data partition: a capacity, and what the twin's files already take of it."""

from __future__ import annotations

import os
import shutil
from pathlib import Path


def du(path: Path) -> int:
    """Bytes held by the regular files under ``path`` (links not followed)."""
    total = 0
    stack = [str(path)]
    while stack:
        try:
            entries = list(os.scandir(stack.pop()))
        except OSError:
            continue
        for entry in entries:
            try:
                if entry.is_dir(follow_symlinks=False):
                    stack.append(entry.path)
                elif entry.is_file(follow_symlinks=False):
                    total += entry.stat(follow_symlinks=False).st_size
            except OSError:
                continue
    return total


class Disk:
    def __init__(self, root: Path, capacity: int):
        self.root = root
        self.capacity = capacity

    def used(self) -> int:
        return du(self.root)

    def free(self) -> int:
        """What a write may still take: the twin's capacity, and never more than the host has."""
        host_free = shutil.disk_usage(self.root).free
        return max(0, min(self.capacity - self.used(), host_free))
