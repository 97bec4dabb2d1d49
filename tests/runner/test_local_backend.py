"""The local backend end to end: real ranks, real gloo, real processes."""

import time

import psutil
import pytest

from contract import files
from contract.events import read_events
from contract.rundir import JobState
from contract.summary import TrainSummary
from runner import api
from runner.results import rundir
from tests.conftest import submit_local

pytestmark = pytest.mark.slow

LONG_RUN = ["stop_at_target=false", "max_epochs=400"]


def test_two_gloo_workers_reach_the_target_on_digits(finished_run):
    _, run = finished_run
    summary = rundir.read_summary(run.run_dir)
    assert isinstance(summary, TrainSummary)
    assert summary.target_reached is True
    assert summary.final is not None and summary.final.value >= 0.95
    assert summary.time_to_target_s is not None
    assert 0 < summary.time_to_target_s <= summary.run_time_s
    assert summary.world_size == 2
    # The task reports guessing's accuracy, which a run that did not learn is told from.
    assert summary.final.chance == pytest.approx(0.1) and summary.did_not_learn is None


def test_events_have_one_run_start_then_evaluations_then_run_stop(finished_run):
    _, run = finished_run
    keys = [e["key"] for e in read_events(run.run_dir / rundir.EVENTS)]
    assert keys.count("run_start") == 1
    assert keys.count("run_stop") == 1
    start, stop = keys.index("run_start"), keys.index("run_stop")
    assert start < stop
    evals = [i for i, k in enumerate(keys) if k == "eval_accuracy"]
    assert evals and all(start < i < stop for i in evals)
    assert keys.index("init_stop") < start  # set-up happens before the clock starts


def test_summary_splits_step_time_into_phases_that_add_up(finished_run):
    _, run = finished_run
    summary = rundir.read_summary(run.run_dir)
    assert isinstance(summary, TrainSummary)
    phases = summary.phases_s
    steps = {"data", "forward", "backward", "communication", "optimizer"}
    assert set(phases) == steps | {"other"}  # other: the loop's wall time between steps
    assert all(phases[p] > 0 for p in steps) and phases["other"] >= 0
    # The phases split the training loop's wall time: the run's, less evaluation.
    assert sum(phases.values()) == pytest.approx(summary.train_time_s)
    loop_s = summary.run_time_s - summary.eval_time_s
    assert summary.train_time_s == pytest.approx(loop_s, rel=0.05)
    assert summary.communication_share == pytest.approx(
        phases["communication"] / summary.train_time_s
    )
    assert summary.throughput_samples_per_s and summary.throughput_samples_per_s > 0


def test_a_finished_run_directory_is_complete(finished_run):
    results, run = finished_run
    assert api.fetch(results, run) == []
    manifest = files.read_json(run.run_dir / rundir.MANIFEST)
    assert manifest["world_size"] == 2
    assert manifest["dist_backend"] == "gloo"
    assert manifest["packages"]["torch"].startswith("2.13.0")
    # Each worker trained with the threads job.json recorded for it (OMP_NUM_THREADS).
    assert manifest["torch_threads"] == run.record.spec.placement.threads_per_worker


def test_logs_hold_each_ranks_output(finished_run):
    results, run = finished_run
    rank0 = list(api.logs(results, run, rank=0, follow=False))
    assert any(":::MLLOG" in line and "run_stop" in line for line in rank0)
    rank1 = list(api.logs(results, run, rank=1, follow=False))
    assert not any(":::MLLOG" in line for line in rank1)  # only rank 0 logs events


def test_killing_a_worker_fails_the_run_with_its_rank_and_exit_code(tmp_path):
    run = submit_local(tmp_path, LONG_RUN)
    tree = _wait_for_epoch(run, epoch=2)
    victim = next(p for p in tree if _rank_of(p) == "1")
    victim.kill()
    status = api.wait(tmp_path, run)
    assert status.state is JobState.FAILED
    assert status.failed_rank == 1
    assert status.exit_code == -9
    assert "rank 1" in status.reason and "SIGKILL" in status.reason
    keys = [e["key"] for e in read_events(run.run_dir / rundir.EVENTS)]
    assert keys.count("run_start") == 1 and keys.count("epoch_start") >= 2  # kept
    _assert_all_gone(tree)


def test_cancel_stops_every_process_and_keeps_the_events(tmp_path):
    run = submit_local(tmp_path, LONG_RUN)
    tree = _wait_for_epoch(run, epoch=1)
    status = api.cancel(tmp_path, run)
    assert status.state is JobState.CANCELLED
    assert "run_start" in [e["key"] for e in read_events(run.run_dir / rundir.EVENTS)]
    _assert_all_gone(tree)
    assert api.cancel(tmp_path, run).state is JobState.CANCELLED  # idempotent


def test_fetch_refuses_while_the_run_is_still_going(tmp_path):
    run = submit_local(tmp_path, LONG_RUN)
    _wait_for_epoch(run, epoch=1)
    try:
        with pytest.raises(api.RunnerError, match="runner cancel"):
            api.fetch(tmp_path, run)
    finally:
        api.cancel(tmp_path, run)


def _supervisor(run):
    return psutil.Process(files.read_json(run.run_dir / "supervisor.json")["pid"])


def _rank_of(proc):
    try:
        if "workloads.train" not in " ".join(proc.cmdline()):
            return None
        return proc.environ().get("RANK")
    except psutil.Error:
        return None


def _wait_for_epoch(run, epoch, timeout_s=90.0):
    """Wait until rank 0 has started `epoch`; returns every process of the run."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        epochs = [
            e["metadata"].get("epoch_num")
            for e in read_events(run.run_dir / rundir.EVENTS)
            if e["key"] == "epoch_start"
        ]
        if epoch in epochs:
            root = _supervisor(run)
            tree = [root, *root.children(recursive=True)]
            assert sum(_rank_of(p) is not None for p in tree) == 2, "both workers run"
            return tree
        time.sleep(0.1)
    raise AssertionError(f"epoch {epoch} did not start within {timeout_s} s")


def _assert_all_gone(procs, timeout_s=30.0):
    _, alive = psutil.wait_procs(procs, timeout=timeout_s)
    assert not [p for p in alive if p.status() != psutil.STATUS_ZOMBIE], alive
