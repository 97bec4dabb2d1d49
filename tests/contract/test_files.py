"""The defensive readers of contract/files.py and contract/events.py against files a crash, a
full disk or a hostile writer left: each problem is a DamagedFile (or no event), never another
exception, and no descriptor is left open."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from contract.events import parse_line, read_events
from contract.files import DamagedFile, LinkedPath, open_append, read_json, write_json
from contract.records import finite_number

HUGE = "1" + "0" * 400  # a valid JSON integer that no float holds


def open_descriptors() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_a_directory_in_place_of_a_record_is_damaged_and_leaves_no_descriptor_open(tmp_path):
    (tmp_path / "summary.json").mkdir()
    before = open_descriptors()
    for _ in range(20):
        with pytest.raises(DamagedFile, match="is not a regular file"):
            read_json(tmp_path / "summary.json")
    assert open_descriptors() == before


def test_a_fifo_in_place_of_a_record_is_damaged_without_waiting_for_a_writer(tmp_path):
    os.mkfifo(tmp_path / "state.json")
    with pytest.raises(DamagedFile, match="is not a regular file"):
        read_json(tmp_path / "state.json")


def test_nesting_deeper_than_the_recursion_limit_is_damaged(tmp_path: Path):
    path = tmp_path / "job.json"
    path.write_text('{"a": ' + "[" * 100_000 + "]" * 100_000 + "}")
    with pytest.raises(DamagedFile, match="nested too deeply"):
        read_json(path)


def test_an_event_line_nested_too_deeply_or_with_a_huge_time_is_no_event(tmp_path):
    deep = '{"key": "x", "time_ms": 1, "v": ' + "[" * 100_000 + "]" * 100_000 + "}"
    assert parse_line(deep) is None
    assert parse_line(f'{{"key": "x", "time_ms": {HUGE}}}') is None
    assert parse_line('{"key": "x", "time_ms": NaN}') is None
    path = tmp_path / "events.jsonl"
    path.write_text(f'{deep}\n{{"key": "run_start", "time_ms": 5}}\n')
    assert [e["key"] for e in read_events(path)] == ["run_start"]


@pytest.mark.parametrize(
    ("value", "number"),
    [(1, 1.0), (2.5, 2.5), (int(HUGE), None), (float("nan"), None), (True, None), ("1", None)],
)
def test_finite_number_says_no_rather_than_raising(value, number):
    assert finite_number(value) == number


def test_a_record_that_cannot_be_opened_is_damaged_and_a_missing_one_is_missing(tmp_path):
    import socket

    # A UNIX socket cannot be open()ed at all (ENXIO): that escaped every reader as OSError.
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(tmp_path / "job.json"))
        before = open_descriptors()
        with pytest.raises(DamagedFile, match=r"cannot be read \(No such device or address\)"):
            read_json(tmp_path / "job.json")
        assert open_descriptors() == before
    with pytest.raises(FileNotFoundError):  # callers tell "none yet" from "damaged"
        read_json(tmp_path / "state.json")
    (tmp_path / "file").write_text("{}")
    with pytest.raises(DamagedFile, match=r"cannot be read \(Not a directory\)"):
        read_json(tmp_path / "file" / "state.json")  # a file where the run directory was


@pytest.mark.parametrize("where", ["logs", "logs/deeper"])
def test_a_writer_never_writes_through_a_folder_that_is_a_planted_link(tmp_path, where):
    """run_dir/logs -> elsewhere: a write under it would land outside the run directory."""
    run_dir, elsewhere = tmp_path / "run", tmp_path / "elsewhere"
    run_dir.mkdir()
    elsewhere.mkdir()
    (run_dir / "logs").symlink_to(elsewhere)
    with pytest.raises(LinkedPath, match="is a symbolic link, which is never written through"):
        write_json(run_dir / where / "state.json", {"state": "SUCCEEDED"})
    with pytest.raises(LinkedPath) as raised:
        os.close(open_append(run_dir / where / "rank-0.log"))
    assert raised.value.filename == str(run_dir / "logs")  # the link, named in full
    assert list(elsewhere.iterdir()) == []


def test_a_writer_makes_missing_folders_and_replaces_a_link_at_its_name(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "state.json").symlink_to(victim)
    write_json(tmp_path / "run" / "state.json", {"a": 1})
    write_json(tmp_path / "run" / "new" / "deeper" / "summary.json", {"b": 2})
    assert victim.read_text() == "precious\n"
    assert read_json(tmp_path / "run" / "state.json") == {"a": 1}
    assert read_json(tmp_path / "run" / "new" / "deeper" / "summary.json") == {"b": 2}
    assert [p.name for p in (tmp_path / "run").iterdir() if p.name.endswith(".tmp")] == []
    (tmp_path / "run" / "rank-0.log").symlink_to(victim)
    with pytest.raises(LinkedPath):  # a log is appended to, so its link is refused
        open_append(tmp_path / "run" / "rank-0.log")
    assert victim.read_text() == "precious\n"


# Writes into a folder "box" of the working directory, as the writers of a run do.
_WRITES_INTO_BOX = """
import os
from pathlib import Path
from contract.files import open_append, write_json
write_json(Path("box/state.json"), {"a": 1})
write_json(Path("box/made/summary.json"), {"b": 2})
os.close(open_append(Path("box/rank-0.log")))
"""


def _as_a_user() -> None:
    """(In a child, before exec.) Root without the capabilities to read and search any
    folder (CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH): a folder's mode then binds it as it
    binds a user. Exit 77 where root may not drop them."""
    import ctypes

    if os.geteuid() != 0:
        return
    libc = ctypes.CDLL(None, use_errno=True)
    for capability in (1, 2):
        if libc.prctl(24, capability, 0, 0, 0) != 0:  # PR_CAPBSET_DROP
            os._exit(77)


def test_a_folder_one_may_write_but_not_list_takes_writes(tmp_path):
    """A folder of mode 0o300 (write and search, not read): the writers opened it O_RDONLY
    for a descriptor to name files by, and the system refused (EACCES) a write it allows.
    Root reads any folder, so the writer runs as root without that power."""
    import subprocess
    import sys

    box = tmp_path / "box"
    box.mkdir()
    box.chmod(0o300)
    repo = Path(__file__).resolve().parents[2]
    try:
        done = subprocess.run(
            [sys.executable, "-c", _WRITES_INTO_BOX], cwd=tmp_path, capture_output=True,
            text=True, timeout=60, env={**os.environ, "PYTHONPATH": str(repo)},
            preexec_fn=_as_a_user,
        )  # fmt: skip
    finally:
        box.chmod(0o700)
    if done.returncode == 77:
        pytest.skip("root here cannot drop CAP_DAC_OVERRIDE, so a folder's mode binds it not")
    assert done.returncode == 0, done.stderr
    assert read_json(box / "state.json") == {"a": 1}
    assert read_json(box / "made" / "summary.json") == {"b": 2}
    assert (box / "rank-0.log").is_file()


def test_a_folder_a_read_only_disk_refuses_to_make_is_named_in_full(tmp_path):
    """The folders are made relative to their parent's descriptor, whose errors name the
    folder by its name alone: the one line a user sees must still say where."""
    from tests.disks import read_only, tmpfs

    with tmpfs(tmp_path / "disk", "1m") as disk:
        read_only(disk)
        target = disk / "run" / "logs" / "rank-0.log"
        for write in (lambda: write_json(target, {}), lambda: open_append(target)):
            with pytest.raises(OSError, match="Read-only file system") as caught:
                write()
            assert caught.value.filename == str(disk / "run")
