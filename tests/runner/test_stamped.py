"""runner/stamped.py in this process: what the subprocess tests of its two caches
(test_benchmark_cards.py, test_cli_replies.py) do not reach: a FIFO in a cache's place, a file
of another key at a key's path, a file changed while its cache was being derived, and a name's
caches kept to the newest few."""

from __future__ import annotations

import importlib
import os
import sys
import time

import pytest

from runner import stamped


@pytest.fixture
def writing(monkeypatch: pytest.MonkeyPatch) -> None:
    """Caches written whatever this shell says (the suite runs with PYTHONDONTWRITEBYTECODE)."""
    monkeypatch.setattr(sys, "dont_write_bytecode", False)


def test_a_fifo_in_a_cache_s_place_is_a_miss_at_once(tmp_path):
    fifo = tmp_path / "reply.cache"
    os.mkfifo(fifo)  # opened for reading without O_NONBLOCK, it would wait for a writer
    assert stamped.load(str(fifo)) is None
    assert stamped.read(str(fifo)) is None


def test_a_cache_is_read_back_for_its_own_key_only(tmp_path, writing):
    path = str(tmp_path / "x.cache")
    stamped.write(path, ["payload"], time.time_ns(), key=("--help", 80))
    assert stamped.read(path, key=("--help", 80)) == ["payload"]
    assert stamped.read(path, key=("--help", 120)) is None  # a name shared by two keys


def test_no_cache_is_written_from_a_file_changed_while_it_was_derived(
    tmp_path, writing, monkeypatch
):
    path = str(tmp_path / "x.cache")
    started_ns = time.time_ns()
    module = tmp_path / "edited_meanwhile.py"
    module.write_text("VALUE = 1\n")  # which version the derivation read is unknown
    monkeypatch.syspath_prepend(str(tmp_path))
    imported = importlib.import_module("edited_meanwhile")
    monkeypatch.setitem(sys.modules, "edited_meanwhile", imported)  # removed after the test
    stamped.write(path, ["payload"], started_ns)
    assert not os.path.exists(path)
    stamped.write(path, ["payload"], time.time_ns())  # begun after it: written
    assert stamped.load(path)["payload"] == ["payload"]


def test_a_name_keeps_its_newest_caches_only_and_touches_nothing_else(
    tmp_path, writing, monkeypatch
):
    # One reply per terminal width asked at, with no end: the folder grew by 50-60 KB a key.
    def cache(key: int) -> str:
        return str(tmp_path / f"reply.{key:08x}.cache")

    for key in range(5):
        stamped.write(cache(key), [key], time.time_ns(), key=key)
        os.utime(cache(key), ns=(key * 10**9, key * 10**9))  # written in this order
    others = [tmp_path / "replyx.00000000.cache", tmp_path / "cards.00000000.cache",
              tmp_path / "reply.txt"]  # fmt: skip
    for other in others:
        other.write_bytes(b"not ours to prune")
    (tmp_path / "reply.00000010.cache").symlink_to(tmp_path / "cards.00000000.cache")
    stamped.prune(cache(4), keep=3)
    left = sorted(p.name for p in tmp_path.iterdir())
    assert left == sorted([*(os.path.basename(cache(k)) for k in (2, 3, 4)),
                           *(p.name for p in others), "reply.00000010.cache"])  # fmt: skip
    assert stamped.read(cache(4), key=4) == [4]
    monkeypatch.setattr(stamped, "KEEP", 2)
    stamped.write(cache(9), [9], time.time_ns(), key=9)  # every write prunes, to KEEP
    assert sorted(p.name for p in tmp_path.glob("reply.*.cache")) == [
        os.path.basename(cache(4)),
        os.path.basename(cache(9)),
        "reply.00000010.cache",
    ]
