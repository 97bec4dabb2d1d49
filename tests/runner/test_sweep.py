"""Studies: the grid and its seeds, the study record, and one real sweep followed by a report."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from click.testing import CliRunner

from runner import sweep as sweeps
from runner.cli import main
from runner.errors import SpecError
from runner.results import study as studies
from tests.disks import fill, leftovers, read_only, runner, tmpfs


def test_workers_parse_as_a_list_of_distinct_positive_counts():
    assert studies.parse_workers("1,2,4,8") == (1, 2, 4, 8)
    for bad in ("0,1", "a", "", "2,2"):
        with pytest.raises(SpecError):
            studies.parse_workers(bad)


def test_set_with_commas_sweeps_and_without_applies_to_every_run():
    grid, fixed = studies.parse_grid(["strategy=ddp,allreduce", "lr=0.1", "lr_milestones=[2,3]"])
    assert grid == {"strategy": ("ddp", "allreduce")}
    assert fixed == ("lr=0.1", "lr_milestones=[2,3]")


def test_plan_gives_run_i_of_every_cell_seed_base_plus_i():
    planned = studies.plan((1, 2), {"strategy": ("ddp", "allreduce")}, 3, base_seed=10)
    assert len(planned) == 2 * 2 * 3
    cells = {}
    for run in planned:
        cells.setdefault(run.cell, []).append(run.seed)
    assert all(seeds == [10, 11, 12] for seeds in cells.values())
    assert len(cells) == 4


def test_study_record_round_trips_through_study_json(tmp_path):
    planned = studies.plan((1,), {"strategy": ("ddp",)}, 2, 0)
    study = studies.Study("study-a", "cnn-digits", (1,), {"strategy": ("ddp",)}, ("lr=0.1",), 2,
                          "local", planned)  # fmt: skip
    with studies.sweeping(tmp_path, "study-a"):  # "running" is true while a sweep holds it
        path = studies.save(tmp_path, studies.with_run(study, 0, run_id="r0", state="SUCCEEDED"))
        assert path == tmp_path / "studies" / "study-a" / "study.json"
        loaded = studies.load(studies.find(tmp_path, "study-"))
    assert loaded.run_ids == ["r0"]
    assert loaded == studies.with_run(study, 0, run_id="r0", state="SUCCEEDED")
    assert studies.load(path).state == "partial"  # its sweep is gone without finishing it


def test_sweep_refuses_local_with_a_stack_and_an_invalid_grid_before_running(tmp_path):
    runner = CliRunner()
    args = ["--results-dir", str(tmp_path), "sweep", "cnn-digits", "--workers", "1,2"]
    both = runner.invoke(main, [*args, "--local", "--stack", "kind"])
    assert both.exit_code == 2 and "--local runs here" in both.output
    bad = runner.invoke(main, [*args, "--set", "lr=a,b"])
    assert bad.exit_code == 2 and "--set" in bad.output
    assert not (tmp_path / "studies").exists()  # every cell is checked before anything runs


@pytest.mark.parametrize(
    "sets",
    [
        ["lr=0.1,0.1"],  # one cell run twice on the same seeds, as two cells
        ["lr=0.1", "lr=0.2,0.3"],  # the fixed lr was recorded and never used
        ["lr=0.2,0.3", "lr=0.1"],  # the later one, which wins everywhere else, was dropped
        ["strategy=ddp,allreduce", "strategy=allreduce,gather-scatter"],  # an axis replaced
    ],
)
def test_a_swept_key_given_twice_or_repeating_a_value_is_refused_before_running(tmp_path, sets):
    args = ["--results-dir", str(tmp_path), "sweep", "cnn-digits", "--workers", "1"]
    result = CliRunner().invoke(main, [*args, *(a for s in sets for a in ("--set", s))])
    assert result.exit_code == 2, result.output
    assert "Invalid value for --set" in result.output and "give" in result.output
    assert not (tmp_path / "studies").exists() and not list(tmp_path.iterdir())


def test_the_last_fixed_seed_is_the_base_as_the_last_set_wins_everywhere():
    assert sweeps.base_seed(["seed=1", "lr=0.1", "seed=5"]) == 5
    assert sweeps.base_seed(["lr=0.1"]) == 0


@pytest.mark.parametrize("fault", ["read-only", "full"])
def test_a_sweep_on_a_disk_that_refuses_writes_fails_in_one_line_announcing_nothing(
    tmp_path, fault
):
    # It printed the study's header and a progress bar, then "cannot write .../studies".
    with tmpfs(tmp_path / "disk", "1m") as disk:
        (disk / "results").mkdir()
        read_only(disk) if fault == "read-only" else fill(disk)
        done = runner(disk / "results", "sweep", "cnn-digits", "--workers", "1", "--runs", "1")
        assert leftovers(disk / "results") == []  # no studies/, no probe
    out = (done.stdout + done.stderr).strip()
    assert done.returncode == 1, out
    assert "Traceback" not in out and len(out.splitlines()) == 1, out
    assert out.startswith(f"error: cannot write {disk / 'results'}")
    assert ("Read-only file system" if fault == "read-only" else "No space left") in out


def test_the_cli_starts_without_importing_matplotlib():
    code = (
        "import sys; from click.testing import CliRunner; from runner.cli import main; "
        "CliRunner().invoke(main, ['--help']); CliRunner().invoke(main, ['report', '--help']); "
        "print('matplotlib' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_a_local_sweep_then_report_writes_the_speedup_and_compute_communication_figures(tmp_path):
    invoke = CliRunner(env={"COLUMNS": "200"}).invoke
    # Two runs a cell (there were three): what is checked is a study's lifecycle, seeds and
    # figures, which two show as well, for 2 fewer runs to target in the suite's time.
    args = ["sweep", "cnn-digits", "--workers", "1,2", "--runs", "2", "--local"]
    swept = invoke(main, ["--results-dir", str(tmp_path), *args], catch_exceptions=False)
    assert swept.exit_code == 0, swept.output
    (study_dir,) = (tmp_path / "studies").iterdir()
    record = json.loads((study_dir / "study.json").read_text())
    assert record["state"] == "complete"
    assert [r["seed"] for r in record["runs"]] == [0, 1, 0, 1]
    assert all(r["state"] == "SUCCEEDED" for r in record["runs"])
    # Every worker of every cell had the same threads, 1 worker as 2 (runner/job/threads.py).
    jobs = [json.loads((tmp_path / r["run_id"] / "job.json").read_text()) for r in record["runs"]]
    assert len({job["placement"]["threads_per_worker"] for job in jobs}) == 1
    reported = invoke(main, ["--results-dir", str(tmp_path), "report", study_dir.name],
                      catch_exceptions=False)  # fmt: skip
    assert reported.exit_code == 0, reported.output
    for name in ("speedup.png", "speedup.svg", "compute_communication.png", "report.md"):
        assert (study_dir / "report" / name).stat().st_size > 0
    assert "2/2" in reported.output
    assert "only between runs whose workers had equal resources" in reported.output
