"""The runner's exit codes against real processes and real faults: a Ctrl-C at any moment (while
its modules import, following logs, twice while following a run) exits 130 with at most one
line and never a traceback; a run the user names that does not fit the command is bad input
(exit 2); a reader that closes stdout early does not turn a run that succeeded into exit 1."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from contract.events import read_events
from contract.rundir import EVENTS, JobState, read_state
from runner import api
from runner.cli import main
from runner.results import rundir
from tests.conftest import submit_local
from tests.runner.rundirs import make_run

pytestmark = pytest.mark.timeout(180)
REPO = Path(__file__).resolve().parents[2]
RUNNER = Path(sys.executable).parent / "runner"  # the console script, as a user starts it
LONG_RUN = ("--set", "stop_at_target=false", "--set", "max_epochs=400")
KUBECONFIG = """apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:9"}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
users: [{name: u, user: {token: t}}]
"""


def invoke(results: Path, *args: str):  # type: ignore[no-untyped-def]
    return CliRunner(env={"COLUMNS": "250"}).invoke(
        main, ["--results-dir", str(results), *args], catch_exceptions=False
    )


def _start(results: Path, *args: str, stdout: int = subprocess.PIPE) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [str(RUNNER), "--results-dir", str(results), *args], cwd=REPO,
        stdout=stdout, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


def _interrupted_cleanly(proc: subprocess.Popen[str], err: str) -> None:
    """130, or killed by SIGINT before Python had a handler (the shell says 130 too); no
    traceback, no click `Aborted!`, at most one line."""
    assert proc.returncode in (130, -signal.SIGINT), (proc.returncode, err)
    assert "Traceback" not in err and "Aborted!" not in err, err
    assert len([line for line in err.splitlines() if line.strip()]) <= 1, err


def _training(results: Path, timeout_s: float = 90.0) -> api.Run:
    """The only run under `results`, once rank 0 trains."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        dirs = rundir.list_dirs(results)
        if dirs and "epoch_start" in [e["key"] for e in read_events(dirs[0] / EVENTS)]:
            return api.open_run(results, dirs[0].name)
        time.sleep(0.1)
    raise AssertionError("no run started training")


def _ends(results: Path, run: api.Run, timeout_s: float = 60.0) -> None:
    """The run reaches a final state (its supervisor cancels it once its command is gone)."""
    deadline = time.monotonic() + timeout_s
    while not api.status(results, run).state.finished:
        assert time.monotonic() < deadline, f"{run.run_id} outlived the command that followed it"
        time.sleep(0.2)


# ---- Ctrl-C --------------------------------------------------------------------------------


# How Python 3.11 wraps a Ctrl-C that lands while a class is created (a dataclass's field, in
# a command's own import): `RuntimeError: Error calling __set_name__`, the interrupt its cause.
LANDS_IN_A_CLASS = """
import os, signal
class Field:
    def __set_name__(self, owner, name):
        os.kill(os.getpid(), signal.SIGINT)
        sum(range(1000))  # the handler runs at a bytecode boundary, in here
def create_a_class():
    type("Config", (), {"field": Field()})
"""


def _interrupted_in_an_import(
    results: Path, module: str, interrupt: str, *args: str
) -> subprocess.CompletedProcess[str]:
    """`runner ARGS` in a process of its own whose import of `module` first runs `interrupt`
    (a line of code that sends the SIGINT): an import hook, so it lands there every time."""
    code = LANDS_IN_A_CLASS + (
        "import sys\n"
        "class Hook:\n"
        "    def find_spec(self, name, path, target=None):\n"
        f"        if name == {module!r}:\n"
        f"            {interrupt}\n"
        "sys.meta_path.insert(0, Hook())\n"
        "from runner.cli import main\n"
        "print('imported', flush=True)\n"
        "main(['--results-dir', *sys.argv[1:]])\n"
    )
    return subprocess.run(
        [sys.executable, "-c", code, str(results), *args], cwd=REPO, capture_output=True,
        text=True, timeout=60,
    )  # fmt: skip


def test_ctrl_c_while_the_commands_import_exits_130_without_a_traceback(tmp_path):
    """The SIGINT lands inside the imports of `runner.cli` (as a Ctrl-C in the first fifth of
    a second does), as runner.cli.common starts to import (the commands' own imports,
    runner.api's among them, wait until a command runs: the test below)."""
    proc = _interrupted_in_an_import(
        tmp_path, "runner.cli.common", "os.kill(os.getpid(), signal.SIGINT)", "runs"
    )
    assert "imported" not in proc.stdout
    _interrupted_cleanly(proc, proc.stderr)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "module",
    ["runner.cli.common", "runner.api"],
    ids=["as-runner-cli-imports", "as-submit-imports"],
)
def test_ctrl_c_while_a_class_is_created_in_an_import_exits_130_without_a_traceback(
    tmp_path, module
):
    proc = _interrupted_in_an_import(tmp_path, module, "create_a_class()", "submit", "cnn-digits")
    _interrupted_cleanly(proc, proc.stderr)  # type: ignore[arg-type]
    assert not rundir.list_dirs(tmp_path)  # stopped before it made a run


def test_a_wrapped_ctrl_c_while_following_cancels_the_run_and_raises_the_interrupt(tmp_path):
    """Not left running once its follower is gone, and raised as the KeyboardInterrupt it is,
    so that submit and sweep handle it as every other Ctrl-C."""
    namespace: dict[str, object] = {}
    exec(LANDS_IN_A_CLASS, namespace)  # the code the subprocess tests run, in this process
    run = submit_local(tmp_path, ["stop_at_target=false", "max_epochs=400"], workers=1)

    def on_event(event: object) -> None:
        namespace["create_a_class"]()  # type: ignore[operator]

    with pytest.raises(KeyboardInterrupt):
        api.follow_to_end(tmp_path, run, api.Callbacks(on_event=on_event))
    state = read_state(run.run_dir)
    assert state is not None and state.state is JobState.CANCELLED, state


# Run by Python at the end of its own start-up (site's imports), from PYTHONPATH: an import
# hook that tells the test, over a pipe, when `runner ARGS` first imports runner.cli.common,
# which runner.cli imports after it took over SIGINT. It then steps aside for any
# sitecustomize it stands in front of. Children inherit PYTHONPATH, never the pipe.
SITECUSTOMIZE = """
import os, sys
from importlib import machinery, util

class _Started:
    def __init__(self, fd):
        self.fd = fd

    def find_spec(self, name, path, target=None):
        if name == "runner.cli.common" and self.fd is not None:
            os.write(self.fd, b"started")
            os.close(self.fd)
            self.fd = None

_fd = os.environ.pop("STACKBENCH_TEST_STARTED_FD", None)
if _fd is not None:
    sys.meta_path.insert(0, _Started(int(_fd)))
sys.path.remove(os.path.dirname(__file__))
_spec = machinery.PathFinder.find_spec("sitecustomize", sys.path)
if _spec is not None and _spec.loader is not None:
    _spec.loader.exec_module(util.module_from_spec(_spec))
"""


def _start_handled(results: Path, *args: str) -> subprocess.Popen[str]:
    """`runner ARGS` started, returned once the runner handles SIGINT itself. One that lands
    before (in Python's own start-up: 0.1 s and more on a busy 2-core machine; in the console
    script's first import) is Python's to report, with a traceback, before any of the runner's
    code exists to handle it: a sleep from the start lands there under load."""
    site = results.parent / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(SITECUSTOMIZE)
    read_end, write_end = os.pipe()
    path = os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "STACKBENCH_TEST_STARTED_FD": str(write_end), "PYTHONPATH": path}
    try:
        proc = subprocess.Popen(
            [str(RUNNER), "--results-dir", str(results), *args], cwd=REPO, env=env,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, pass_fds=(write_end,),
        )  # fmt: skip
        os.close(write_end)
        write_end = -1
        assert os.read(read_end, 16) == b"started", "the runner never imported its commands"
    finally:
        os.close(read_end)
        if write_end >= 0:
            os.close(write_end)
    return proc


# Counted from the moment the runner handles SIGINT: 0 s lands in its commands' imports (the
# tests above hold the imports to it deterministically), the others in the submit and the run.
@pytest.mark.parametrize("delay_s", [0.0, 0.15, 0.3, 1.0])
def test_ctrl_c_at_any_moment_of_a_submit_exits_130_in_at_most_one_line(tmp_path, delay_s):
    results = tmp_path / "results"
    results.mkdir()
    proc = _start_handled(results, "submit", "cnn-digits", "--workers", "1", *LONG_RUN)
    time.sleep(delay_s)  # not a measurement: a few moments of its start
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    _interrupted_cleanly(proc, err)
    for run_dir in rundir.list_dirs(results):  # a run it started ends with it
        _ends(results, api.open_run(results, run_dir.name))


@pytest.mark.slow
def test_ctrl_c_while_following_logs_exits_130(tmp_path):
    started = _start(tmp_path, "submit", "cnn-digits", "--workers", "1", *LONG_RUN, "--detach")
    assert started.wait(timeout=120) == 0
    run = _training(tmp_path)
    try:
        follower = _start(tmp_path, "logs", run.run_id, "--follow")
        assert follower.stdout is not None and follower.stdout.readline()  # it is following
        follower.send_signal(signal.SIGINT)
        _, err = follower.communicate(timeout=60)
        _interrupted_cleanly(follower, err)
    finally:
        api.cancel(tmp_path, run)


@pytest.mark.slow
def test_a_second_ctrl_c_never_leaves_a_last_line_that_says_running(tmp_path):
    """The second one lands while the first cancels: the line must say how the run ended."""
    proc = _start(tmp_path, "submit", "cnn-digits", "--workers", "2", *LONG_RUN)
    run = _training(tmp_path)
    proc.send_signal(signal.SIGINT)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    last = err.strip().splitlines()[-1]
    assert "RUNNING" not in last and "Traceback" not in err, err
    final = read_state(run.run_dir)
    assert final is not None and final.state is JobState.CANCELLED
    assert last.startswith("CANCELLED") and str(run.run_dir) in last, err


# ---- a closed stdout -------------------------------------------------------------------------


@pytest.mark.slow
def test_a_reader_that_stops_reading_does_not_fail_a_run_that_succeeded(tmp_path):
    """`runner submit ... | head -1`: the run goes on to its end, and the exit code is its."""
    proc = _start(tmp_path, "submit", "cnn-digits", "--workers", "1")
    assert proc.stdout is not None
    assert proc.stdout.readline().startswith("run cnn-digits-")
    proc.stdout.close()  # as head does once it has its line
    _, err = proc.communicate(timeout=120)
    (run_dir,) = rundir.list_dirs(tmp_path)
    final = read_state(run_dir)
    assert final is not None and final.state is JobState.SUCCEEDED, err
    assert proc.returncode == 0, err
    assert "Traceback" not in err and "Exception ignored" not in err, err


# ---- a run that does not fit the command is bad input ------------------------------------


@pytest.mark.parametrize(
    "args",
    [
        ("status", "no-such-run"),
        ("status", "cnn-digits"),  # a prefix of two runs
        ("logs", "cnn-digits-a", "--rank", "5"),
        ("join", "cnn-digits-a"),
        ("cancel", "no-such-run", "--yes"),
        ("report", "no-such-run"),
    ],
)
def test_a_run_that_does_not_fit_the_command_is_bad_input_in_one_line(tmp_path, args):
    make_run(tmp_path, "cnn-digits-a", 2, 10.0)
    make_run(tmp_path, "cnn-digits-b", 2, 10.0)
    result = invoke(tmp_path, *args)
    assert result.exit_code == 2, result.output
    assert result.output.startswith("error: ") and result.output.strip().count("\n") == 0


def test_a_damaged_run_has_the_same_keys_in_runs_json_as_any_other(tmp_path):
    make_run(tmp_path, "cnn-digits-good", 2, 10.0)
    bad = make_run(tmp_path, "cnn-digits-bad", 2, 12.0)
    (bad / "state.json").write_bytes(b'{"state": "SUCC')
    listed = {e["run_id"]: e for e in json.loads(invoke(tmp_path, "runs", "--json").output)}
    good, damaged = listed["cnn-digits-good"], listed["cnn-digits-bad"]
    assert damaged.keys() == good.keys()
    assert damaged["status"].keys() == good["status"].keys()
    assert damaged["status"]["state"] == "DAMAGED" and good["status"]["state"] == "SUCCEEDED"
    assert "state.json" in damaged["status"]["reason"] and "state.json" in damaged["damage"]
    assert good["damage"] is None


# ---- options -----------------------------------------------------------------------------


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "1e400", "0.5"])
def test_a_pending_timeout_that_is_not_a_finite_number_of_seconds_is_refused(tmp_path, value):
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(KUBECONFIG)
    result = invoke(tmp_path, "submit", "cnn-digits", "--kubeconfig", str(kubeconfig),
                    "--image", "r/s:1.0", "--pending-timeout", value, "--dry-run")  # fmt: skip
    assert result.exit_code == 2, result.output
    assert "--pending-timeout" in result.output


def test_per_node_is_refused_for_an_elastic_cluster_run_not_dropped(tmp_path):
    kubeconfig = tmp_path / "kubeconfig"  # a dry run connects to nothing
    kubeconfig.write_text(KUBECONFIG)
    result = invoke(tmp_path, "submit", "cnn-digits", "--workers", "2:4", "--set",
                    "strategy=allreduce", "--per-node", "2", "--kubeconfig", str(kubeconfig),
                    "--image", "r/s:1.0", "--job-api", "pytorchjob", "--dry-run")  # fmt: skip
    assert result.exit_code == 2, result.output
    assert "--per-node" in result.output and "one worker per node" in result.output


def test_sigint_ignored_by_the_shell_stays_ignored_after_the_import(tmp_path):
    """A background job's SIGINT is ignored: importing the CLI must not start answering it."""
    code = (
        "import signal; signal.signal(signal.SIGINT, signal.SIG_IGN)\n"
        "import runner.cli\n"
        "print(signal.getsignal(signal.SIGINT) is signal.SIG_IGN)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True,
                         timeout=60, env=os.environ)  # fmt: skip
    assert out.stdout.strip() == "True", out.stderr


# ---- teardown checks what it needs before it asks or touches anything ----------------------


def _without_pulumi() -> dict[str, str]:
    return {**os.environ, "PATH": "/usr/bin:/bin", "COLUMNS": "300"}


def test_teardown_without_pulumi_says_so_before_asking(tmp_path):
    main_fd, tty = os.openpty()  # a terminal, so that it would ask
    try:
        proc = subprocess.Popen(
            [str(RUNNER), "--results-dir", str(tmp_path), "teardown", "--stack", "kind"],
            cwd=REPO, stdin=tty, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            env=_without_pulumi(),
        )  # fmt: skip
        os.write(main_fd, b"y\n")
        out, _ = proc.communicate(timeout=60)
    finally:
        os.close(main_fd)
        os.close(tty)
    assert proc.returncode == 1, out
    assert "pulumi is not installed" in out and "Destroy stack" not in out, out


def test_a_forced_teardown_without_pulumi_cancels_nothing(tmp_path):
    make_run(tmp_path, "on-kind", 2, None, stack="kind", state="RUNNING", write_summary=False)
    proc = subprocess.run(
        [str(RUNNER), "--results-dir", str(tmp_path), "teardown", "--stack", "kind", "--force",
         "--yes"],
        cwd=REPO, capture_output=True, text=True, timeout=60, env=_without_pulumi(),
    )  # fmt: skip
    assert proc.returncode == 1, proc.stderr
    assert "pulumi is not installed" in proc.stderr and "cancel" not in proc.stdout + proc.stderr
    state = read_state(tmp_path / "on-kind")
    assert state is not None and state.state is JobState.RUNNING


@pytest.mark.parametrize("command", ["status", "cancel", "logs", "fetch", "join", "report"])
def test_an_empty_run_id_names_no_run_even_where_there_is_only_one(tmp_path, command):
    """An empty id is a prefix of every id: `runner cancel "$RUN" --yes` with RUN unset."""
    make_run(tmp_path, "cnn-digits-only", 2, 10.0)
    result = invoke(tmp_path, command, "", *(["--yes"] if command == "cancel" else []))
    assert result.exit_code == 2, result.output
    assert "is empty" in result.output and "cnn-digits-only" not in result.output
