"""A local run's verdict from its supervisor: exit codes win over a summary written before a
crash, the failing rank's first error line is found behind torch's rank prefix, the process
that failed first is named, an elastic worker left running or a joiner never admitted is
stopped and named, a supervisor that never started leaves a failed run; and what is refused
before anything starts (cuda without a GPU, a missing or non-canonical data set)."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import psutil
import pytest
from click.testing import CliRunner

from contract import files
from contract.rundir import STATE, JobState, JobStatus
from runner import api
from runner.backends.base import LocalRequest, Process
from runner.backends.local import outcome, processes
from runner.backends.local.backend import LocalBackend
from runner.cli import main
from runner.errors import RunnerError, SpecError
from runner.job.spec import Placement, resolve
from runner.results import rundir


def test_exit_codes_win_over_a_summary_written_before_a_crash(tmp_path):
    (tmp_path / "logs").mkdir()
    files.write_json(tmp_path / "summary.json", {"target_reached": True})
    (tmp_path / "logs" / "rank-1.log").write_text(
        "[rank1]: Traceback (most recent call last):\n"
        '[rank1]:   File "x.py", line 1, in <module>\n'
        "[rank1]: RuntimeError: boom after the summary\n"
    )
    request = LocalRequest(str(tmp_path), (Process(("true",)), Process(("true",))))
    # Rank 1 failed first; rank 0 failed after it (its peer left), with another exit code.
    status = outcome.outcome(tmp_path, request, [-15, 1], cancelled=None, first_failed=1)
    assert status.state is JobState.FAILED
    assert status.failed_rank == 1
    assert status.reason == "rank 1 exited with code 1: RuntimeError: boom after the summary"
    done = outcome.outcome(tmp_path, request, [0, 0], cancelled=None)
    assert done.state is JobState.SUCCEEDED


def test_the_failing_ranks_first_error_line_is_found_behind_torchs_rank_prefix():
    log = (
        "[rank0]: Traceback (most recent call last):\n"
        '[rank0]:   File "/w/workloads/data/cifar10.py", line 147, in load_cifar10\n'
        "[rank0]:     raise DataError(\n"
        "[rank0]: workloads.data.DataError: CIFAR-10 not found in /d; run `runner data fetch "
        "cifar10 --dir /d`\n"
    )
    assert outcome.first_error_line(log) == (
        "DataError: CIFAR-10 not found in /d; run `runner data fetch cifar10 --dir /d`"
    )
    assert outcome.first_error_line("stackbench: diverged at epoch 3 step 41: loss nan\n") == (
        "diverged at epoch 3 step 41: loss nan"
    )
    assert outcome.first_error_line("all fine\n") == ""
    # An elastic worker's re-raised errors carry a prefix per layer that printed them.
    nested = "[rank0]: [rank0]: [rank0]: RuntimeError: Connection closed by peer\n"
    assert outcome.first_error_line(nested) == "RuntimeError: Connection closed by peer"
    assert outcome.first_error_line("[rank1]: [rank1]: stackbench: too few workers\n") == (
        "too few workers"
    )


def test_an_elastic_worker_still_running_after_worker_0_ended_is_stopped_and_named(tmp_path):
    """A stopped worker (SIGSTOP, or one waiting on a peer that is gone) held the run RUNNING
    for ever: the supervisor waits for every process of an elastic run."""
    spec = resolve("cnn-digits", run_id="cnn-digits-stuck")
    run_dir = rundir.create(tmp_path, rundir.RunRecord(spec, "local", "local://cnn-digits-stuck"))
    writer = Process(("sh", "-c", "echo '{}' > summary.json"), cwd=str(run_dir))
    done, stuck = Process(("true",)), Process(("sleep", "600"))
    LocalBackend(tmp_path).submit(LocalRequest(str(run_dir), (writer, done, stuck), min_workers=2))
    status = api.wait(tmp_path, api.open_run(tmp_path, spec.run_id))
    assert status.state is JobState.SUCCEEDED
    assert status.reason == (
        f"finished with 2 of 3 workers (worker 2 was still running {outcome.GRACE_S:g} s "
        "after worker 0 ended, and was stopped)"
    )
    # Nothing outlives the run (the supervisor itself exits just after recording it).
    _, alive = psutil.wait_procs(processes.members(spec.run_id, run_dir), timeout=30)
    assert alive == []


def test_a_joiner_the_run_ended_before_admitting_is_counted_out_of_max_and_says_so(tmp_path):
    """--workers 2:3, worker 2 leaves, `runner join` starts worker 3, and the run ends before
    admitting it: 2 of 3 workers finished (MAX is 3, not the 4 processes started), and the
    joiner's own line says why it did not."""
    elastic = Placement(1, 3, "cpu", min_workers=2)
    spec = resolve("cnn-digits", ["strategy=allreduce"], elastic, run_id="cnn-digits-late-joiner")
    run_dir = rundir.create(tmp_path, rundir.RunRecord(spec, "local", "local://" + spec.run_id))
    script = (  # the joiner is a copy of worker 0's command, under its own member name
        'case "$STACKBENCH_MEMBER" in '
        "w0) while [ ! -e end ]; do sleep 0.05; done; echo '{}' > summary.json ;; "
        "w1) while [ ! -e end ]; do sleep 0.05; done ;; "
        "w2) exit 1 ;; "
        '*) while [ ! -e end ]; do sleep 0.05; done; echo "stackbench: the run ended before '
        'worker $STACKBENCH_MEMBER was admitted" > logs/rank-3.log; exit 1 ;; esac'
    )
    workers = tuple(
        Process(("sh", "-c", script), {"STACKBENCH_MEMBER": f"w{i}"}, str(run_dir))
        for i in range(3)
    )
    LocalBackend(tmp_path).submit(LocalRequest(str(run_dir), workers, min_workers=2))
    run = api.open_run(tmp_path, spec.run_id)
    deadline = time.monotonic() + 30
    while True:  # worker 2 gone: the run has room for one joiner
        try:
            assert api.join(tmp_path, run).startswith("worker w3 started")
            break
        except RunnerError as err:
            assert time.monotonic() < deadline, f"the run never took a joiner: {err}"
            time.sleep(0.1)
    (run_dir / "end").touch()
    status = api.wait(tmp_path, run)
    assert status.state is JobState.SUCCEEDED
    assert status.reason == (
        "finished with 2 of 3 workers (worker 2 exited with code 1; worker 3, which joined, "
        "exited with code 1: the run ended before worker w3 was admitted)"
    )


def test_a_supervisor_that_never_started_leaves_a_failed_run_not_a_pending_one(tmp_path):
    spec = resolve("cnn-digits", run_id="cnn-digits-unstarted")
    run_dir = rundir.create(
        tmp_path, rundir.RunRecord(spec, "local", "local://cnn-digits-unstarted")
    )
    rundir.write_state(run_dir, JobStatus(JobState.PENDING, "submitting"))
    status = LocalBackend(tmp_path).status("local://cnn-digits-unstarted")
    assert status.state is JobState.FAILED
    assert "stopped before the run started" in status.reason
    assert json.loads((run_dir / STATE).read_text())["state"] == "FAILED"


def test_cuda_without_a_gpu_is_refused_before_anything_exists(tmp_path, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")  # hides any GPU this machine might have
    spec = resolve("cnn-digits", placement=Placement(1, 1, "cuda"))
    with pytest.raises(SpecError, match="no NVIDIA GPU is visible"):
        api.submit(spec, LocalBackend(tmp_path), tmp_path)
    assert not any(tmp_path.iterdir())


def test_a_missing_data_set_is_refused_before_anything_starts_naming_the_fetch(tmp_path):
    data = tmp_path / "empty"
    data.mkdir()
    args = ["--results-dir", str(tmp_path / "results"), "submit", "resnet20-cifar10"]
    result = CliRunner().invoke(main, [*args, "--set", f"data_dir={data}"])
    assert result.exit_code == 2  # bad input, as the README's exit codes say
    assert f"runner data fetch cifar10 --dir {data}" in result.output
    assert len(result.output.strip().splitlines()) == 1
    assert not (tmp_path / "results").exists()


def test_the_closed_division_refuses_a_data_set_that_is_not_the_canonical_one(tmp_path):
    from tests.datagen import write_cifar10

    write_cifar10(tmp_path / "data", per_train_batch=64, num_test=64)
    args = ["--results-dir", str(tmp_path / "results"), "submit", "resnet20-cifar10", "--dry-run",
            "--set", f"data_dir={tmp_path / 'data'}"]  # fmt: skip
    closed = CliRunner().invoke(main, args)
    assert closed.exit_code == 2 and "not the canonical 50,000/10,000 split" in closed.output
    opened = CliRunner().invoke(main, [*args, "--set", "momentum=0.5"])  # open division
    assert opened.exit_code == 0, opened.output


def test_exits_names_the_process_that_failed_first_not_the_lowest_index(tmp_path):
    exits = processes.Exits()
    late = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(0.6); exit(1)"])
    early = subprocess.Popen([sys.executable, "-c", "exit(3)"])
    ok = subprocess.Popen([sys.executable, "-c", "pass"])
    for proc in (late, early, ok):
        exits.add(proc)
    while not exits.all_exited():
        exits.wait(5.0)
    assert exits.first_failure() == 1  # `early`, though `late` is process 0
    assert exits.codes() == [1, 3, 0]
