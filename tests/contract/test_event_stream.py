"""events.jsonl read a line at a time (contract.events.stream_events / stream_lines): the same
events as read_events, whatever the file holds, never more than one line in memory."""

from __future__ import annotations

import json
import os

from contract.events import read_events, stream_events, stream_lines


def _event(key: str) -> str:
    return json.dumps({"key": key, "time_ms": 1.0, "value": 1}) + "\n"


def test_a_stream_has_the_events_read_events_has(tmp_path):
    path = tmp_path / "events.jsonl"
    garbage = '\xff not json\n{"key": 3}\n'
    path.write_bytes((_event("a") + garbage + _event("b") + _event("c")[:-5]).encode())
    assert [e["key"] for e in stream_events(path)] == ["a", "b"]
    assert list(stream_events(path)) == read_events(path)


def test_a_line_over_the_cap_is_passed_over_and_the_next_is_read(tmp_path):
    path = tmp_path / "events.jsonl"
    path.write_text(_event("a") + "x" * 5000 + "\n" + _event("b"))
    assert [e["key"] for e in stream_events(path, max_line_bytes=1000)] == ["a", "b"]
    assert len(list(stream_lines(path, max_line_bytes=1000))) == 2


def test_an_overlong_last_line_without_its_newline_ends_the_stream(tmp_path):
    path = tmp_path / "events.jsonl"
    path.write_text(_event("a") + "x" * 5000)
    assert [e["key"] for e in stream_events(path, max_line_bytes=1000)] == ["a"]


def test_a_link_a_fifo_a_folder_and_a_missing_file_are_no_events(tmp_path):
    real = tmp_path / "real.jsonl"
    real.write_text(_event("a"))
    (tmp_path / "link").symlink_to(real)
    os.mkfifo(tmp_path / "fifo")  # opened without waiting for a writer, never read
    for name in ("link", "fifo", "missing"):
        assert list(stream_events(tmp_path / name)) == [], name
    assert list(stream_events(tmp_path)) == []


def test_a_name_is_opened_in_the_folder_held_open(tmp_path):
    folder = tmp_path / "run"
    folder.mkdir()
    (folder / "events.jsonl").write_text(_event("a"))
    fd = os.open(folder, os.O_RDONLY)
    try:
        folder.rename(tmp_path / "moved")  # the descriptor still names the folder
        assert [e["key"] for e in stream_events(folder / "events.jsonl", dir_fd=fd)] == ["a"]
    finally:
        os.close(fd)
