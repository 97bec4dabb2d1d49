"""Reading beneath the results directory: plain names only, no links anywhere on the path,
size caps, and tails that wait for whole lines and start over when a file is replaced."""

from __future__ import annotations

import os

import pytest

from contract.files import DamagedFile
from runner.dashboard.files import (
    ByteTail,
    InvalidPath,
    LineTail,
    open_beneath,
    read_beneath,
    scan,
    split_path,
)


@pytest.mark.parametrize(
    "path", ["..", "../x", "a/../b", "/etc/passwd", "a//b", ".hidden", "", "a\x00b"]
)
def test_paths_that_are_not_plain_names_are_invalid(path):
    with pytest.raises(InvalidPath):
        split_path(path)


def test_a_link_as_the_file_or_on_the_way_is_refused(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "f.txt").write_text("secret")
    root = tmp_path / "root"
    (root / "run").mkdir(parents=True)
    (root / "run" / "file-link").symlink_to(outside / "f.txt")
    (root / "run" / "dir-link").symlink_to(outside)

    for parts in [("run", "file-link"), ("run", "dir-link", "f.txt")]:
        with pytest.raises(DamagedFile, match="symbolic link"):
            open_beneath(root, parts)


def test_a_path_under_a_regular_file_is_refused_without_blaming_a_link(tmp_path):
    # logs/rank-0.log/x: Linux answers ENOTDIR, as it does for a link on the way.
    (tmp_path / "run" / "logs").mkdir(parents=True)
    (tmp_path / "run" / "logs" / "rank-0.log").write_text("x\n")
    (tmp_path / "run" / "file-link").symlink_to(tmp_path / "run" / "logs" / "rank-0.log")

    for parts in [("run", "logs", "rank-0.log", "x"), ("run", "file-link", "x")]:
        with pytest.raises(DamagedFile) as refused:
            open_beneath(tmp_path, parts)
        linked = parts[1] == "file-link"
        assert ("symbolic link" in refused.value.problem) == linked, refused.value.problem
    with pytest.raises(DamagedFile, match=r"lies under rank-0\.log, which is not a folder"):
        open_beneath(tmp_path, ("run", "logs", "rank-0.log", "x"))


def test_a_directory_or_a_fifo_is_not_a_file(tmp_path):
    (tmp_path / "d").mkdir()
    os.mkfifo(tmp_path / "fifo")  # opening it must not block

    for name in ("d", "fifo"):
        with pytest.raises(DamagedFile, match="not a regular file"):
            open_beneath(tmp_path, (name,))


def test_read_refuses_a_file_over_the_cap(tmp_path):
    (tmp_path / "big").write_bytes(b"x" * 101)

    assert read_beneath(tmp_path, ("big",), 101) == b"x" * 101
    with pytest.raises(DamagedFile, match="over the 100-byte cap"):
        read_beneath(tmp_path, ("big",), 100)


def test_line_tail_returns_whole_lines_only(tmp_path):
    path = tmp_path / "events.jsonl"
    path.write_text("one\ntw")
    tail = LineTail(tmp_path, ("events.jsonl",))

    assert tail.read() == (b"one\n", False)
    assert tail.read() == (b"", False)
    with open(path, "a") as f:
        f.write("o\nthree\n")
    assert tail.read() == (b"two\nthree\n", False)


def test_a_replaced_file_starts_over(tmp_path):
    path = tmp_path / "events.jsonl"
    path.write_text("old 1\nold 2\n")
    tail = LineTail(tmp_path, ("events.jsonl",))
    tail.read()
    replacement = tmp_path / "new"
    replacement.write_text("new 1\nnew 2\nnew 3\n")
    os.replace(replacement, path)  # as a fetch rewrites it

    assert tail.read() == (b"new 1\nnew 2\nnew 3\n", True)


def test_a_truncated_file_starts_over(tmp_path):
    path = tmp_path / "rank-0.log"
    path.write_text("a long first version\n")
    tail = ByteTail(tmp_path, ("rank-0.log",))
    tail.read()
    path.write_text("short\n")

    assert tail.read() == (b"short\n", True)


def test_byte_tail_can_start_near_the_end(tmp_path):
    (tmp_path / "rank-0.log").write_text("0123456789")

    assert ByteTail(tmp_path, ("rank-0.log",), last_bytes=4).read() == (b"6789", False)


def test_scan_lists_links_without_entering_them(tmp_path):
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "rank-0.log").write_text("hi")
    (tmp_path / "escape").symlink_to("/")

    entries = {e.path: (e.kind, e.size) for e in scan(tmp_path)}

    assert entries == {"escape": ("link", None), "logs/rank-0.log": ("file", 2)}
