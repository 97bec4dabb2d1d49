"""`runner join`'s request (runner/backends/local/joins.py) in a damaged run directory: whatever
holds the name of its `requests` folder, the asker says so in one line, never with a
traceback, and creates nothing through a link."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from runner.backends.local import joins
from runner.errors import RunnerError


@pytest.mark.parametrize("damage", ["file", "dangling link", "link to a folder"])
def test_a_requests_name_that_is_not_a_folder_is_refused_in_one_line(tmp_path, damage):
    run_dir, elsewhere = tmp_path / "run", tmp_path / "elsewhere"
    run_dir.mkdir()
    folder = run_dir / joins.REQUESTS
    if damage == "file":
        folder.write_text("not a folder")
    elif damage == "dangling link":
        folder.symlink_to(tmp_path / "missing")
    else:
        elsewhere.mkdir()
        folder.symlink_to(elsewhere)
    with pytest.raises(RunnerError, match=r"requests is not a directory; remove it and ask again"):
        joins.ask(run_dir, timeout_s=0.2)
    assert not (tmp_path / "missing").exists()
    assert not elsewhere.exists() or os.listdir(elsewhere) == []


def test_a_run_directory_that_refuses_writes_is_named_in_one_line(tmp_path: Path):
    if os.geteuid() == 0:
        pytest.skip("root writes through permissions")
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    run_dir.chmod(0o500)
    try:
        with pytest.raises(RunnerError, match=r"cannot write .*requests: Permission denied"):
            joins.ask(run_dir, timeout_s=0.2)
    finally:
        run_dir.chmod(0o700)
