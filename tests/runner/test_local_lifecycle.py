"""A local run's record under real faults: a SIGKILLed supervisor, signals to the runner, a
forged supervisor.json, exit codes against a summary written before a crash."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from click.testing import CliRunner

from contract import files
from contract.events import read_events
from contract.rundir import EVENTS, STATE, JobState, JobStatus, read_state
from runner import api
from runner.backends.base import LocalRequest, Process
from runner.backends.local import outcome, processes, supervisor
from runner.backends.local.backend import SUPERVISOR_FILE, LocalBackend
from runner.cli import main
from runner.errors import RunnerError, SpecError
from runner.job.spec import Placement, resolve
from runner.results import report, rundir, study
from tests.conftest import submit_local

LONG_RUN = ["stop_at_target=false", "max_epochs=400"]


def _started(run: api.Run, timeout_s: float = 90.0) -> list[psutil.Process]:
    """Every process of the run once rank 0 has started training."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        keys = [e["key"] for e in read_events(run.run_dir / EVENTS)]
        if "epoch_start" in keys:
            return processes.members(run.run_id, run.run_dir)
        time.sleep(0.1)
    raise AssertionError(f"{run.run_id} did not start training within {timeout_s} s")


def _gone(procs: list[psutil.Process], timeout_s: float = 30.0) -> None:
    _, alive = psutil.wait_procs(procs, timeout=timeout_s)
    assert not [p for p in alive if p.status() != psutil.STATUS_ZOMBIE], alive


@pytest.mark.slow
def test_a_sigkilled_supervisor_takes_every_worker_with_it_and_the_run_is_failed(tmp_path):
    run = submit_local(tmp_path, LONG_RUN)
    procs = _started(run)
    assert sorted(p.environ().get("RANK") for p in procs if "RANK" in p.environ()) == ["0", "1"]
    sup = files.read_json(run.run_dir / SUPERVISOR_FILE)
    os.kill(sup["pid"], signal.SIGKILL)
    _gone(procs)  # the kernel ended torchrun and the workers (parent-death signals)
    status = api.status(tmp_path, run)
    assert status.state is JobState.FAILED
    assert "supervisor died" in status.reason
    assert read_state(run.run_dir) == status  # recorded, not only reported
    assert api.cancel(tmp_path, run).state is JobState.FAILED  # nothing left to stop


def _runner(results: Path, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "runner.cli", "--results-dir", str(results), *args],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip


def _only_run(results: Path, timeout_s: float = 60.0) -> api.Run:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        dirs = rundir.list_dirs(results)
        if dirs:
            return api.open_run(results, dirs[0].name)
        time.sleep(0.1)
    raise AssertionError("no run directory appeared")


@pytest.mark.slow
@pytest.mark.parametrize(("signum", "code"), [(signal.SIGTERM, 143), (signal.SIGHUP, 129)])
def test_sigterm_or_sighup_to_a_foreground_submit_cancels_the_run(tmp_path, signum, code):
    proc = _runner(tmp_path, "submit", "cnn-digits", *(f"--set={s}" for s in LONG_RUN))
    run = _only_run(tmp_path)
    procs = _started(run)
    proc.send_signal(signum)
    output, _ = proc.communicate(timeout=90)
    assert proc.returncode == code, output
    assert "CANCELLED" in output
    _gone(procs)
    assert read_state(run.run_dir).state is JobState.CANCELLED
    assert "run_start" in [e["key"] for e in read_events(run.run_dir / EVENTS)]  # kept


@pytest.mark.slow
def test_sigterm_to_a_sweep_cancels_its_run_and_the_study_lists_it(tmp_path):
    proc = _runner(tmp_path, "sweep", "cnn-digits", "--workers", "1,2", "--runs", "2",
                   *(f"--set={s}" for s in LONG_RUN))  # fmt: skip
    run = _only_run(tmp_path)
    procs = _started(run)
    proc.send_signal(signal.SIGTERM)
    output, _ = proc.communicate(timeout=90)
    assert proc.returncode == 143, output
    _gone(procs)
    (study_file,) = (tmp_path / "studies").glob("*/study.json")
    study = json.loads(study_file.read_text())
    assert study["state"] == "partial"
    started = [r for r in study["runs"] if r["run_id"]]
    assert [(r["run_id"], r["state"]) for r in started] == [(run.run_id, "CANCELLED")]
    assert len(rundir.list_dirs(tmp_path)) == 1  # later runs never started


@pytest.mark.slow
def test_a_sigkilled_foreground_submit_takes_its_run_with_it(tmp_path):
    proc = _runner(tmp_path, "submit", "cnn-digits", *(f"--set={s}" for s in LONG_RUN))
    run = _only_run(tmp_path)
    procs = _started(run)
    proc.kill()  # no chance to cancel: the leash does it (runner/backends/local/leash.py)
    proc.wait()
    _gone(procs)
    state = api.wait(tmp_path, run)
    assert state.state is JobState.CANCELLED
    assert state.reason == supervisor.LEASH_SNAPPED


@pytest.mark.slow
def test_a_sigkilled_sweep_takes_its_run_with_it_and_its_study_reads_partial(tmp_path):
    proc = _runner(tmp_path, "sweep", "cnn-digits", "--workers", "1", "--runs", "2",
                   *(f"--set={s}" for s in LONG_RUN))  # fmt: skip
    run = _only_run(tmp_path)
    procs = _started(run)
    (study_file,) = (tmp_path / "studies").glob("*/study.json")
    assert study.load(study_file).state == "running"  # its sweep lives
    proc.kill()
    proc.wait()
    _gone(procs)
    assert api.wait(tmp_path, run).reason == supervisor.LEASH_SNAPPED
    assert json.loads(study_file.read_text())["state"] == "running"  # all it could write
    assert study.load(study_file).state == "partial"
    _, title, _ = report.collect(tmp_path, [study_file.parent.name])
    assert title.endswith("(partial)"), title


@pytest.mark.slow
def test_a_detached_run_goes_on_after_its_submit_returns(tmp_path):
    proc = _runner(tmp_path, "submit", "cnn-digits", "--workers", "1", "--detach",
                   *(f"--set={s}" for s in LONG_RUN))  # fmt: skip
    output, _ = proc.communicate(timeout=90)
    assert proc.returncode == 0, output
    run = _only_run(tmp_path)
    try:
        assert _started(run)  # trains with no command following it
        assert api.status(tmp_path, run).state is JobState.RUNNING
    finally:
        assert api.cancel(tmp_path, run).state is JobState.CANCELLED


def test_cancel_never_signals_a_process_a_forged_supervisor_json_names(tmp_path):
    spec = resolve("cnn-digits", run_id="cnn-digits-forged")
    run_dir = rundir.create(tmp_path, rundir.RunRecord(spec, "local", "local://cnn-digits-forged"))
    rundir.write_state(run_dir, JobStatus(JobState.RUNNING))
    bystander = subprocess.Popen(["sleep", "60"])
    try:
        created = psutil.Process(bystander.pid).create_time()
        files.write_json(run_dir / SUPERVISOR_FILE, {"pid": bystander.pid, "create_time": created})
        run = api.open_run(tmp_path, "cnn-digits-forged")
        assert api.cancel(tmp_path, run).state.finished
        time.sleep(0.5)
        assert bystander.poll() is None  # never signalled: it does not belong to the run
    finally:
        bystander.kill()
        bystander.wait()


def test_a_process_belongs_to_a_run_only_when_its_environment_names_it(tmp_path):
    env = {**os.environ, **processes.run_env("run-a", tmp_path)}
    member = subprocess.Popen(["sleep", "30"], env=env)
    other = subprocess.Popen(["sleep", "30"], env={**env, processes.RUN_ID_ENV: "run-b"})
    try:
        found = {p.pid for p in processes.members("run-a", tmp_path)}
        assert member.pid in found and other.pid not in found
    finally:
        for p in (member, other):
            p.kill()
            p.wait()


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


def test_a_process_that_left_the_runs_environment_does_not_outlive_the_run(tmp_path):
    """A worker starts a daemon with a clean environment (`setsid env -i`) and exits: no
    member of the run by its environment, the orphan came back to the supervisor (a
    subreaper) and went on to init when it exited, outliving the run."""
    spec = resolve("cnn-digits", run_id="cnn-digits-daemon")
    run_dir = rundir.create(tmp_path, rundir.RunRecord(spec, "local", "local://cnn-digits-daemon"))
    # The worker exits once the daemon has written its pid: it exists before the run ends.
    daemon = (
        "setsid env -i sh -c 'echo $$ > daemon.pid; exec sleep 600' </dev/null >/dev/null 2>&1 & "
        "while [ ! -s daemon.pid ]; do sleep 0.01; done"
    )
    LocalBackend(tmp_path).submit(
        LocalRequest(str(run_dir), (Process(("sh", "-c", daemon), cwd=str(run_dir)),))
    )
    api.wait(tmp_path, api.open_run(tmp_path, spec.run_id))
    with contextlib.suppress(psutil.Error):  # it records the outcome, then exits
        psutil.Process(files.read_json(run_dir / SUPERVISOR_FILE)["pid"]).wait(timeout=60)
    try:
        left = psutil.Process(int((run_dir / "daemon.pid").read_text()))
        alive = left.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        alive = False
    if alive:
        left.kill()
    assert not alive, "the daemon outlived the run"


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


def _sleeping_run(results: Path, run_id: str) -> api.Run:
    """A live local run with a real supervisor whose one process sleeps (cheap to cancel)."""
    spec = resolve("cnn-digits", run_id=run_id)
    backend = LocalBackend(results)
    run_dir = rundir.create(results, rundir.RunRecord(spec, "local", f"local://{run_id}"))
    backend.submit(LocalRequest(str(run_dir.absolute()), (Process(("sleep", "60")),)))
    return api.open_run(results, run_id)


def test_a_copied_run_directory_is_damaged_and_never_reaches_the_original_run(tmp_path):
    run = _sleeping_run(tmp_path, "cnn-digits-original")
    try:
        shutil.copytree(
            run.run_dir, tmp_path / "cnn-digits-backup"
        )  # its job.json is the original's
        result = CliRunner().invoke(
            main, ["--results-dir", str(tmp_path), "cancel", "cnn-digits-backup", "--yes"]
        )
        assert result.exit_code == 1, result.output
        assert "not its directory" in result.output
        (copy,) = [i for i in api.list_runs(tmp_path) if i.run_dir.name == "cnn-digits-backup"]
        assert copy.damage is not None and "not its directory" in copy.damage
        assert api.status(tmp_path, run).state is not JobState.CANCELLED  # still going
    finally:
        assert api.cancel(tmp_path, run).state is JobState.CANCELLED


def test_a_local_handle_names_its_run_exactly_never_by_a_prefix(tmp_path):
    run = _sleeping_run(tmp_path, "cnn-digits-original")
    try:
        with pytest.raises(RunnerError):
            LocalBackend(tmp_path).status("local://cnn-digits-orig")
    finally:
        api.cancel(tmp_path, run)


# Submits a run whose one process sleeps, says so, then waits to be killed; `release` lets the
# run go on alone first, as `runner submit --detach` does.
SUBMIT_AND_WAIT = """
import sys, time
from pathlib import Path
from runner import api
from runner.backends.base import LocalRequest, Process
from runner.backends.local import leash
from runner.backends.local.backend import LocalBackend
from runner.job.spec import resolve
from runner.results import rundir
results, release = Path(sys.argv[1]), sys.argv[2] == "release"
spec = resolve("cnn-digits", run_id="cnn-digits-leashed")
run_dir = rundir.create(results, rundir.RunRecord(spec, "local", "local://cnn-digits-leashed"))
LocalBackend(results).submit(LocalRequest(str(run_dir), (Process(("sleep", "60")),)))
if release:
    leash.release(run_dir)
while api.status(results, api.open_run(results, spec.run_id)).state.value != "RUNNING":
    time.sleep(0.05)
print("running", flush=True)
time.sleep(60)
"""


def _submitted_then_killed(results: Path, how: str) -> tuple[api.Run, psutil.Process]:
    """The run SUBMIT_AND_WAIT started, and its sleeping process, once its submitter is
    SIGKILLed."""
    starter = subprocess.Popen(
        [sys.executable, "-c", SUBMIT_AND_WAIT, str(results), how],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert starter.stdout is not None and starter.stdout.readline() == "running\n"
        run = api.open_run(results, "cnn-digits-leashed")
        (sleeper,) = [p for p in processes.members(run.run_id, run.run_dir) if p.name() == "sleep"]
    finally:
        starter.kill()
        starter.wait()
    return run, sleeper


def test_a_run_ends_cancelled_when_the_command_that_follows_it_is_sigkilled(tmp_path):
    run, sleeper = _submitted_then_killed(tmp_path, "keep")
    status = api.wait(tmp_path, run)
    assert status.state is JobState.CANCELLED
    assert status.reason == supervisor.LEASH_SNAPPED
    _gone([sleeper])


def test_a_released_run_goes_on_when_the_command_that_started_it_ends(tmp_path):
    run, sleeper = _submitted_then_killed(tmp_path, "release")
    try:
        time.sleep(20 * supervisor.POLL_S)  # a snapped leash is seen within one poll
        assert sleeper.is_running()
        assert api.status(tmp_path, run).state is JobState.RUNNING
    finally:
        assert api.cancel(tmp_path, run).state is JobState.CANCELLED


HOLD_START_LOCK = """
import sys, time
from pathlib import Path
from runner import flock
with flock.hold(Path(sys.argv[1])):
    print("locked", flush=True)
    time.sleep(60)
"""


def test_a_run_being_started_stays_pending_to_others_until_its_starter_is_killed(tmp_path):
    spec = resolve("cnn-digits", run_id="cnn-digits-starting")
    run_dir = rundir.create(
        tmp_path, rundir.RunRecord(spec, "local", "local://cnn-digits-starting")
    )
    rundir.write_state(run_dir, JobStatus(JobState.PENDING, "submitting"))
    starter = subprocess.Popen(
        [sys.executable, "-c", HOLD_START_LOCK, str(run_dir / "logs" / "supervisor.log")],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert starter.stdout is not None and starter.stdout.readline() == "locked\n"
        backend = LocalBackend(tmp_path)
        assert backend.status("local://cnn-digits-starting").state is JobState.PENDING
        assert read_state(run_dir).state is JobState.PENDING  # nothing recorded over it
    finally:
        starter.kill()  # as a SIGKILLed `runner submit` before the supervisor started
        starter.wait()
    status = LocalBackend(tmp_path).status("local://cnn-digits-starting")
    assert status.state is JobState.FAILED
    assert "stopped before the run started" in status.reason


LIST_RUNS_FOREVER = """
import sys
from pathlib import Path
from runner import api
print("listing", flush=True)
while True:
    api.list_runs(Path(sys.argv[1]))
"""


def test_runs_listed_while_they_start_are_neither_failed_nor_killed(tmp_path):
    lister = subprocess.Popen(
        [sys.executable, "-c", LIST_RUNS_FOREVER, str(tmp_path)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert lister.stdout is not None and lister.stdout.readline() == "listing\n"
        runs = []
        for i in range(4):
            spec = resolve("cnn-digits", run_id=f"cnn-digits-listed-{i}")
            run_dir = rundir.create(
                tmp_path, rundir.RunRecord(spec, "local", f"local://{spec.run_id}")
            )
            rundir.write_state(run_dir, JobStatus(JobState.PENDING, "submitting"))
            writes_summary = Process(("sh", "-c", "echo '{}' > summary.json"), cwd=str(run_dir))
            LocalBackend(tmp_path).submit(LocalRequest(str(run_dir), (writes_summary,)))
            runs.append(api.open_run(tmp_path, spec.run_id))
        states = [api.wait(tmp_path, run) for run in runs]
        assert [s.state for s in states] == [JobState.SUCCEEDED] * 4, states
    finally:
        lister.kill()
        lister.wait()


def test_a_stopped_process_is_ended_by_its_sigterm_not_left_for_the_sigkill(tmp_path):
    """A rank stopped with SIGSTOP (a debugger, Ctrl-Z) never acts on SIGTERM until it is
    continued: ending the run waited out the grace and killed it, its handler unrun."""
    handled = tmp_path / "sigterm-handled"
    code = (
        "import pathlib, signal, sys, time\n"
        "def done(*_):\n"
        f"    pathlib.Path({str(handled)!r}).touch(); sys.exit(0)\n"
        "signal.signal(signal.SIGTERM, done)\n"
        f"pathlib.Path({str(tmp_path / 'ready')!r}).touch()\n"
        "time.sleep(600)\n"
    )
    child = subprocess.Popen([sys.executable, "-c", code])
    try:
        while not (tmp_path / "ready").exists():
            assert child.poll() is None
            time.sleep(0.05)
        os.kill(child.pid, signal.SIGSTOP)
        processes.end([psutil.Process(child.pid)], grace_s=20)  # reaps it (psutil waits)
        assert handled.exists(), "the stopped process was SIGKILLed, its SIGTERM never handled"
    finally:
        child.kill()
        child.wait()


def test_a_run_whose_directory_is_deleted_ends_taking_its_processes_with_it(tmp_path):
    """`rm -r` of a live run's directory: nothing could follow or cancel the run any more
    (`runner cancel` finds no run), so its processes trained on, owned by nobody."""
    run = _sleeping_run(tmp_path, "cnn-digits-deleted")
    sup = psutil.Process(files.read_json(run.run_dir / SUPERVISOR_FILE)["pid"])
    deadline = time.monotonic() + 30
    while not (sleeping := [p for p in sup.children() if p.name() == "sleep"]):
        assert time.monotonic() < deadline, "the run's process never started"
        time.sleep(0.05)
    assert api.status(tmp_path, run).state is JobState.RUNNING
    shutil.rmtree(run.run_dir)
    _gone([*sleeping, sup])
    assert not run.run_dir.exists()  # not made again to hold a state.json alone
