"""Cutting a torn last line: only whole records stay, however long the torn tail."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.results.journal import _drop_torn_tail


@pytest.mark.parametrize(("data", "kept"), [
    (b"a\nb\n", b"a\nb\n"),
    (b"a\nbc", b"a\n"),
    (b"no newline at all", b""),
    (b"x" * 200_000 + b"\n" + b"y" * 100_000, b"x" * 200_000 + b"\n"),  # tail longer than one read
])
def test_torn_tail_is_cut_to_the_last_whole_line(tmp_path: Path, data: bytes, kept: bytes) -> None:
    path = tmp_path / "journal.jsonl"
    path.write_bytes(data)
    _drop_torn_tail(path)
    assert path.read_bytes() == kept
