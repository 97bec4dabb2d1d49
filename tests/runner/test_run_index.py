"""The run index (runner/results/index.py) behind `runner runs` and the dashboard's table:
a row is reused only while its run's files are the very same, and nothing on disk (a
damaged or forged index, a link, a run still going) can make a listing show what the
run's records do not say."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from contract import files
from contract.rundir import JobState, JobStatus
from runner.cli import listing, main
from runner.dashboard.data import RunTable
from runner.results import index, rundir
from tests.runner.rundirs import make_run


def _table(root: Path) -> dict[str, list[str]]:
    """run id -> the table's cells, through the CLI."""
    result = CliRunner().invoke(main, ["--results-dir", str(root), "runs"])
    assert result.exit_code == 0, result.output
    return {line.split()[0]: line.split() for line in result.output.splitlines()[1:]}


def _rewrite_in_place(path: Path, text: str) -> None:
    """New content with the same inode, size and mtime: what the signature cannot see (no
    writer of ours does this: records are replaced by rename). Only a reused row still shows
    the old content, which is how these tests see that a row was reused."""
    before = os.lstat(path)
    data = text.encode().ljust(before.st_size)[: before.st_size]
    with path.open("r+b") as f:
        f.write(data)
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))


def _forge_summary(run_dir: Path) -> None:
    data = json.loads((run_dir / rundir.SUMMARY).read_text())
    data["final"]["value"] = 0.123456
    _rewrite_in_place(run_dir / rundir.SUMMARY, json.dumps(data))


def test_a_finished_runs_row_is_reused_until_one_of_its_files_changes(tmp_path):
    run_dir = make_run(tmp_path, "run-a", 2, 5.0)
    first = _table(tmp_path)["run-a"]
    assert (tmp_path / ".stackbench-index-runs.json").is_file()
    _forge_summary(run_dir)
    assert _table(tmp_path)["run-a"] == first  # reused: no record was read
    rundir.write_state(run_dir, JobStatus(JobState.FAILED, "rank 1 exited with code 1"))
    changed = " ".join(_table(tmp_path)["run-a"])
    assert "FAILED" in changed and "0.1235" in changed  # both files read again


def test_a_damaged_or_linked_index_is_rebuilt_never_followed(tmp_path):
    make_run(tmp_path, "run-a", 2, 5.0)
    make_run(tmp_path, "run-b", 4, None)
    expected = _table(tmp_path)
    path = tmp_path / ".stackbench-index-runs.json"
    for garbage in (b"\x00\xff not json", b"[]", b'{"schema_version": 1, "rows": 7}', b""):
        path.write_bytes(garbage)
        assert _table(tmp_path) == expected, garbage
        assert json.loads(path.read_text())["rows"].keys() == {"run-a", "run-b"}
    outside = tmp_path.parent / f"{tmp_path.name}-elsewhere.json"
    outside.write_text("{}")
    path.unlink()
    path.symlink_to(outside)
    assert _table(tmp_path) == expected
    assert not path.is_symlink() and outside.read_text() == "{}"  # replaced, not written through


def test_a_forged_row_is_used_only_with_its_runs_signature_and_a_rows_shape(tmp_path):
    run_dir = make_run(tmp_path, "run-a", 2, 5.0)
    expected = _table(tmp_path)
    path = tmp_path / ".stackbench-index-runs.json"
    document = json.loads(path.read_text())
    sig, row = document["rows"]["run-a"]
    forged = dict(row, cells=["run-a", "x", "local", "2", "SUCCEEDED", "forged"])
    stale = [sig[0], *([[1, 2, 3]] * (len(sig) - 1))]
    for entry in ([stale, forged], [sig, {"cells": "not a list"}], [sig[:-1], row]):
        files.write_json(path, dict(document, rows={"run-a": entry}))
        assert _table(tmp_path) == expected, entry
    # A run directory replaced by another of the same name is another directory.
    files.write_json(path, dict(document, rows={"run-a": [sig, forged]}))
    (run_dir.parent / "moved").mkdir()
    run_dir.rename(run_dir.parent / "moved" / "run-a")
    make_run(tmp_path, "run-a", 2, 5.0)
    assert _table(tmp_path) == expected


def test_rows_built_by_other_code_are_not_reused(tmp_path):
    make_run(tmp_path, "run-a", 2, 5.0)
    built: list[str] = []

    def build(name: str) -> dict[str, str]:
        built.append(name)
        return {"name": name}

    def table(key: str) -> index.RowIndex:
        return index.RowIndex(tmp_path, "t", ("job.json",), key, build, lambda r: False,
                              lambda r: isinstance(r, dict))  # fmt: skip

    entries = [("run-a", os.lstat(tmp_path / "run-a").st_ino)]
    table("v1").rows(entries)
    table("v1").rows(entries)
    table("v2").rows(entries)
    assert built == ["run-a", "run-a"]  # once for v1 (reused the second time), once for v2


def test_a_local_run_recorded_running_is_asked_not_trusted_from_its_record(tmp_path):
    make_run(tmp_path, "run-live", 1, None, state="RUNNING", finished_at=None,
             write_summary=False)  # fmt: skip
    (tmp_path / "run-live" / "supervisor.json").write_text('{"pid": 1, "create_time": 0}')
    rows = index.RowIndex(tmp_path, "runs", listing.FILES, "k",
                          lambda name: listing._build(tmp_path, name, False),
                          listing.volatile, listing.valid_table)  # fmt: skip
    entries = [("run-live", os.lstat(tmp_path / "run-live").st_ino)]
    # Built while state.json said RUNNING: asked (pid 1 is not its supervisor, whose start
    # time differs, so the local backend records it FAILED), and not kept as it was asked.
    (_, row) = rows.rows(entries)["run-live"]
    assert row["state"] == "FAILED" and "supervisor died" in row["cells"][4]
    stored = json.loads((tmp_path / ".stackbench-index-runs.json").read_text())["rows"]
    # Kept with the signature it was built from (state.json then RUNNING), so the next
    # listing reads the FAILED record itself rather than trusting what it was told.
    assert stored["run-live"][0][2] != index.signature(str(tmp_path / "run-live"), 0,
                                                       listing.FILES)[2]  # fmt: skip
    assert listing.volatile({"backend": "local", "state": "RUNNING"})
    assert not listing.volatile({"backend": "kubernetes", "state": "RUNNING"})


def test_a_run_directory_that_is_a_link_is_not_listed_or_followed(tmp_path):
    elsewhere = tmp_path / "elsewhere"
    make_run(elsewhere, "run-x", 2, 5.0)
    results = tmp_path / "results"
    results.mkdir()
    (results / "run-x").symlink_to(elsewhere / "run-x")
    make_run(results, "run-a", 2, 5.0)
    assert set(_table(results)) == {"run-a"}


def test_runs_json_comes_from_its_own_index_with_the_callers_folder(tmp_path, monkeypatch):
    make_run(tmp_path, "run-a", 2, 5.0)
    result = CliRunner().invoke(main, ["--results-dir", str(tmp_path), "runs", "--json"])
    (entry,) = json.loads(result.output)
    assert entry["run_dir"] == str(tmp_path / "run-a") and entry["summary"]["target_reached"]
    assert (tmp_path / ".stackbench-index-runs-json.json").is_file()
    monkeypatch.chdir(tmp_path)  # the same runs under another name of the folder
    result = CliRunner().invoke(main, ["--results-dir", ".", "runs", "--json"])
    assert json.loads(result.output)[0]["run_dir"] == "run-a"


def test_the_dashboards_table_keeps_its_rows_in_the_index_too(tmp_path):
    run_dir = make_run(tmp_path, "run-a", 2, 5.0)
    (first,) = RunTable(tmp_path).rows()
    _forge_summary(run_dir)
    assert RunTable(tmp_path).rows() == [first]  # a new server reads no record it knows
    rundir.write_state(run_dir, JobStatus(JobState.FAILED, "rank 1 exited with code 1"))
    (changed,) = RunTable(tmp_path).rows()
    assert changed["state"] == "FAILED" and changed["value"] == 0.123456


def test_a_dashboard_row_of_another_shape_in_the_index_is_built_again(tmp_path):
    make_run(tmp_path, "run-a", 2, 5.0)
    (first,) = RunTable(tmp_path).rows()
    path = tmp_path / ".stackbench-index-dashboard.json"
    document = json.loads(path.read_text())
    sig, _ = document["rows"]["run-a"]
    files.write_json(path, dict(document, rows={"run-a": [sig, {"run_id": "run-a"}]}))
    assert RunTable(tmp_path).rows() == [first]


def test_the_dashboard_lists_a_folder_holding_a_runs_files_and_no_other(tmp_path):
    # Whether a folder is a run is read from the signature the index takes anyway: one of
    # its records or its events, else its logs/ folder; an empty folder or one of a
    # supervisor record alone is no run (a run being submitted writes job.json first).
    make_run(tmp_path, "run-a", 2, 5.0)
    (tmp_path / "logs-only" / rundir.LOGS).mkdir(parents=True)
    (tmp_path / "empty").mkdir()
    (tmp_path / "supervised").mkdir()
    (tmp_path / "supervised" / "supervisor.json").write_text("{}")
    (tmp_path / "state-only").mkdir()
    rundir.write_state(tmp_path / "state-only", JobStatus(JobState.RUNNING, ""))
    rows = {row["run_id"]: row for row in RunTable(tmp_path).rows()}
    assert set(rows) == {"run-a", "logs-only", "state-only"}
    assert rows["logs-only"]["state"] == rows["state-only"]["state"] == "DAMAGED"


def test_a_listing_leaves_the_cycle_collector_as_it_found_it(tmp_path):
    # The collector is paused while the rows are read; a build that fails must not leave it
    # off for the rest of the process (a server runs for days).
    import gc

    make_run(tmp_path, "run-a", 2, 5.0)

    def failing(name: str) -> None:
        raise OSError("the disk went away")

    table = index.RowIndex(tmp_path, "test", ("job.json",), "k", failing, lambda row: False,
                           lambda row: True)  # fmt: skip
    assert gc.isenabled()
    with pytest.raises(OSError, match="went away"):
        table.rows([("run-a", None)])
    assert gc.isenabled()
    gc.disable()
    try:
        assert list(RunTable(tmp_path).rows()) and not gc.isenabled()  # left off, as it was
    finally:
        gc.enable()
