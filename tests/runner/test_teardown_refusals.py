"""What `runner teardown` refuses before touching anything: a deletion-protected stack (and one
whose protection setting is wrong), a missing pyyaml, a name that is no stack; the guard knows
a stack by its short and its fully qualified name; and a teardown stopped by a signal cancels
`pulumi destroy` rather than leave it running. With the fake `pulumi` of the pulumi_log fixture."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from contract.rundir import read_state
from tests.runner.fake_pulumi import REPO, STACK, calls, invoke, project_copy
from tests.runner.rundirs import make_run

pytestmark = pytest.mark.timeout(60)


def test_teardown_refuses_a_deletion_protected_stack_before_touching_anything(
    tmp_path, pulumi_log, monkeypatch
):
    monkeypatch.chdir(project_copy(tmp_path / "protected", protected=True))
    results = tmp_path / "results"
    make_run(results, "running", 2, None, stack=STACK, state="RUNNING", write_summary=False)
    result = invoke(results, "teardown", "--stack", STACK, "--force")
    assert result.exit_code == 1
    assert "deletion-protected" in result.output
    assert f"pulumi config set stackbench:deletionProtection false --stack {STACK}" in (
        result.output.replace("\n", "")
    )
    assert calls(pulumi_log) == []  # no job cancelled, nothing destroyed
    assert read_state(results / "running").state.value == "RUNNING"


@pytest.mark.parametrize(
    ("damage", "says"),
    [
        ("  stackbench:minNodes: '9'\n", "invalid setting: stackbench:minNodes (9) exceeds"),
        ("  stackbench:deletionProtection: 'yes'\n", "invalid setting: stackbench:deletion"),
        ("  stackbench:region: [us-central1\n", "is not valid YAML, line"),
    ],
)
def test_a_protected_stack_whose_settings_are_wrong_is_bad_input_and_never_destroyed(
    tmp_path, pulumi_log, monkeypatch, damage, says
):
    # Whether it is protected cannot be read: destroying would fail halfway, or worse.
    project = project_copy(tmp_path / "protected", protected=True)
    settings = project / "stacks" / f"Pulumi.{STACK}.yaml"
    settings.write_text(settings.read_text() + damage)
    monkeypatch.chdir(project)
    for force in ([], ["--force"]):
        result = invoke(tmp_path / "results", "teardown", "--stack", STACK, "--yes", *force)
        assert result.exit_code == 2, result.output
        assert "Invalid value for --stack" in result.output and says in result.output
        assert "Traceback" not in result.output
    assert calls(pulumi_log) == []  # nothing was destroyed


def test_without_pyyaml_teardown_says_what_to_install_before_touching_anything(tmp_path):
    # sys.modules[name] = None makes `import name` fail as a missing package does.
    code = "import sys; sys.modules['yaml'] = None; from runner.cli import main; main()"
    out = subprocess.run(
        [sys.executable, "-c", code, "--results-dir", str(tmp_path), "teardown", "--stack",
         STACK, "--yes"],
        capture_output=True, text=True, timeout=30, cwd=REPO,
        env={**os.environ, "COLUMNS": "300", "PATH": "/nonexistent"},
    )  # fmt: skip
    assert out.returncode == 1, out.stderr
    assert "runner teardown needs yaml" in out.stderr and "Traceback" not in out.stderr


def test_the_stack_files_keep_cloud_clusters_deletion_protected_by_default(monkeypatch):
    from runner.stack.teardown import deletion_protected

    monkeypatch.chdir(REPO)
    assert deletion_protected("gke-gpu-8") and deletion_protected("eks-gpu-8")
    assert not deletion_protected("kind")


SLOW_DESTROY = """#!{python}
import json, os, signal, sys, time
if sys.argv[1] == "stack":  # stack export: nothing left
    print(json.dumps({{"deployment": {{}}}}))
    sys.exit(0)
with open({pid_file!r}, "w") as f:
    f.write(str(os.getpid()))
def cancel(signum, frame):  # as pulumi does on SIGINT: finish what is under way, then stop
    print("pulumi: cancelling", flush=True)
    time.sleep(0.5)
    print("pulumi: cancelled", flush=True)
    sys.exit(255)
signal.signal(signal.SIGINT, cancel)
print("Destroying (gke-gpu-8):", flush=True)
time.sleep(60)
"""


def gone(pid: int, deadline_s: float = 20.0) -> bool:
    for _ in range(int(deadline_s / 0.05)):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.05)
    return False


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT, signal.SIGKILL])
def test_a_stopped_teardown_cancels_pulumi_destroy_and_never_leaves_it_running(
    tmp_path, pulumi_log, signum
):
    pid_file = tmp_path / "destroy.pid"
    fake = tmp_path / "bin" / "pulumi"
    fake.write_text(SLOW_DESTROY.format(python=sys.executable, pid_file=str(pid_file)))
    proc = subprocess.Popen(
        [sys.executable, "-c", "from runner.cli import main; main()", "--results-dir",
         str(tmp_path / "results"), "teardown", "--stack", STACK, "--yes"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        env={**os.environ, "COLUMNS": "300"},
        # As from a terminal: a test run in the background ignores SIGINT, and that is inherited.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().startswith("Destroying")  # pulumi destroy is under way
        pid = int(pid_file.read_text())
        proc.send_signal(signum)
        out, _ = proc.communicate(timeout=30)
        assert gone(pid), "pulumi destroy outlived the teardown that started it"
    finally:
        proc.kill()
        proc.wait()
        if pid_file.exists() and not gone(int(pid_file.read_text()), 0.1):
            os.kill(int(pid_file.read_text()), signal.SIGKILL)
    if signum == signal.SIGKILL:
        return  # the kernel passed pulumi the SIGINT; nobody is left to show what it said
    assert proc.returncode == 128 + signum, out
    assert "pulumi: cancelled" in out and "Traceback" not in out
    assert "teardown interrupted: pulumi has stopped" in out


@pytest.mark.parametrize(
    ("submitted", "torn_down"),
    [
        (f"acme/stackbench/{STACK}", STACK),
        (STACK, f"acme/stackbench/{STACK}"),
        # Two parts are an organisation and a stack (the project is the current one)
        (f"acme/{STACK}", f"acme/stackbench/{STACK}"),
        (f"acme/stackbench/{STACK}", f"acme/{STACK}"),
    ],
)
def test_the_guard_knows_a_stack_by_its_short_and_its_fully_qualified_name(
    tmp_path, pulumi_log, submitted, torn_down
):
    """Pulumi takes a stack as `gke-gpu-8`, `org/gke-gpu-8` or `org/project/gke-gpu-8`; a run
    submitted under one spelling still holds the stack's results when it is torn down under
    another."""
    results = tmp_path / "results"
    make_run(results, "unfetched", 2, None, stack=submitted, write_summary=False)
    make_run(results, "other-org", 2, None, stack=f"other/stackbench/{STACK}", state="RUNNING")
    make_run(results, "other-stack", 2, None, stack="acme/stackbench/eks-gpu-8", state="RUNNING")
    result = invoke(results, "teardown", "--stack", torn_down, "--yes")
    assert result.exit_code == 1, result.output
    assert "unfetched: SUCCEEDED but summary.json was never fetched" in result.output
    assert "  other-stack:" not in result.output
    if "/" in torn_down:  # another organisation's stack of the same name is another stack
        assert "  other-org:" not in result.output
    assert calls(pulumi_log) == []  # nothing was destroyed


@pytest.mark.parametrize(
    "name", ["", " ", "acme//gke-gpu-8", "gke-gpu-8/", "-gke", "a b", "a/b/c/d"]
)
def test_a_name_that_is_no_stack_is_bad_input_and_never_reaches_pulumi_destroy(
    tmp_path, pulumi_log, name
):
    # `runner teardown --stack "$STACK" --yes` with STACK unset ran `pulumi destroy --stack ""
    # --yes`, which pulumi takes as no --stack at all: the selected stack, whichever it is,
    # destroyed past a guard that looked for runs on a stack named "".
    result = invoke(tmp_path / "results", "teardown", "--stack", name, "--yes")
    assert result.exit_code == 2, result.output
    assert "Invalid value for --stack" in result.output
    assert calls(pulumi_log) == []
