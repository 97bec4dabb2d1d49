"""`runner teardown`: the unfetched-runs guard, and the order of its steps (cancel remaining
jobs, `pulumi destroy`, leftover check), with a fake `pulumi` on PATH recording each call and
a kmock API server standing in for the cluster."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from contract.rundir import read_state
from runner.cli import main
from runner.results import rundir
from tests.runner.k8s_fake import FakeCluster
from tests.runner.rundirs import make_run
from tests.runner.test_cluster import OUTPUTS

pytestmark = pytest.mark.timeout(60)
STACK = "gke-gpu-8"
REPO = Path(__file__).resolve().parents[2]


def project_copy(root: Path, protected: bool) -> Path:
    """This project's Pulumi.yaml and the stack's settings file, deletion protection as given."""
    (root / "stacks").mkdir(parents=True)
    (root / "Pulumi.yaml").write_text((REPO / "Pulumi.yaml").read_text())
    settings = (REPO / "stacks" / f"Pulumi.{STACK}.yaml").read_text()
    settings += f"  stackbench:deletionProtection: '{str(protected).lower()}'\n"
    (root / "stacks" / f"Pulumi.{STACK}.yaml").write_text(settings)
    return root


@pytest.fixture
def pulumi_log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """A `pulumi` that logs every call (one line each) and answers `stack output`, `destroy`
    and `stack export` from files the test writes; run from a copy of the project whose stack
    has deletion protection off, as before a teardown."""
    monkeypatch.chdir(project_copy(tmp_path / "project", protected=False))
    bin_dir, log = tmp_path / "bin", tmp_path / "pulumi.log"
    bin_dir.mkdir()
    (tmp_path / "outputs.json").write_text(json.dumps(OUTPUTS))
    (tmp_path / "export.json").write_text(json.dumps({"deployment": {"resources": []}}))
    (tmp_path / "destroy_rc").write_text("0")
    script = bin_dir / "pulumi"
    script.write_text(f"""#!/bin/sh
echo "$@" >> {log}
case "$1 $2" in
  "stack output") cat {tmp_path}/outputs.json ;;
  "stack export") cat {tmp_path}/export.json ;;
  destroy*) echo "Destroying (gke-gpu-8):"; cat {tmp_path}/destroy_out 2>/dev/null;
            echo "Resources: 12 deleted";
            exit $(cat {tmp_path}/destroy_rc) ;;
esac
""")
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}/usr/bin:/bin")
    return log


@contextlib.contextmanager
def unix_socket_at(path: Path) -> Iterator[None]:
    """A listening UNIX socket in place of a file (open() fails on it with ENXIO, as on a file
    of another user with EACCES); bound from its directory, as a path may be too long."""
    path.unlink(missing_ok=True)
    here = Path.cwd()
    with socket.socket(socket.AF_UNIX) as sock:
        os.chdir(path.parent)
        try:
            sock.bind(path.name)
        finally:
            os.chdir(here)
        yield


def invoke(results, *args):
    return CliRunner(env={"COLUMNS": "200"}).invoke(
        main, ["--results-dir", str(results), *args], catch_exceptions=False
    )


def calls(log: Path) -> list[str]:
    return log.read_text().splitlines() if log.exists() else []


def test_teardown_refuses_while_runs_on_the_stack_are_unfetched_and_lists_them(
    tmp_path, pulumi_log
):
    results = tmp_path / "results"
    make_run(results, "running", 2, None, stack=STACK, state="RUNNING", write_summary=False)
    make_run(results, "unfetched", 2, None, stack=STACK, write_summary=False)
    make_run(results, "fetched", 2, 5.0, stack=STACK)
    make_run(results, "cancelled", 2, None, stack=STACK, state="CANCELLED", write_summary=False)
    make_run(results, "other-stack", 2, None, stack="eks-gpu-8", state="RUNNING")
    result = invoke(results, "teardown", "--stack", STACK, "--yes")
    assert result.exit_code == 1
    assert "running: last recorded state RUNNING" in result.output
    assert "unfetched: SUCCEEDED but summary.json was never fetched" in result.output
    for name in ("fetched", "cancelled", "other-stack"):
        assert f"  {name}:" not in result.output
    assert "--force" in result.output
    assert calls(pulumi_log) == []  # nothing was touched


def test_a_run_whose_state_cannot_be_opened_is_unfetched_and_the_guard_still_answers(
    tmp_path, pulumi_log
):
    results = tmp_path / "results"
    make_run(results, "fetched", 2, 5.0, stack=STACK)
    unreadable = make_run(results, "unreadable", 2, 5.0, stack=STACK)
    with unix_socket_at(unreadable / "state.json"):
        result = invoke(results, "teardown", "--stack", STACK, "--yes")
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert "unreadable: state.json cannot be read (No such device or address)" in result.output
    assert "  fetched:" not in result.output and calls(pulumi_log) == []


def test_teardown_of_a_fully_fetched_stack_destroys_and_checks_leftovers_in_order(
    tmp_path, pulumi_log
):
    results = tmp_path / "results"
    make_run(results, "fetched", 2, 5.0, stack=STACK)
    result = invoke(results, "teardown", "--stack", STACK, "--yes")
    assert result.exit_code == 0, result.output
    assert calls(pulumi_log) == [f"destroy --stack {STACK} --yes", f"stack export --stack {STACK}"]
    assert "Resources: 12 deleted" in result.output  # destroy's output is streamed
    assert "no resources left" in result.output and "not checked" in result.output


def test_forced_teardown_cancels_running_jobs_before_destroy(tmp_path, pulumi_log):
    cluster = FakeCluster(namespace="bench")
    try:
        (tmp_path / "outputs.json").write_text(
            json.dumps(OUTPUTS | {"runner_kubeconfig": cluster.kubeconfig()})
        )
        results = tmp_path / "results"
        submitted = invoke(results, "submit", "cnn-digits", "--stack", STACK, "--device", "cuda",
                           "--workers", "1", "--detach")  # fmt: skip
        assert submitted.exit_code == 0, submitted.output
        (run_dir,) = rundir.list_dirs(results)
        assert cluster.job("trainjob", run_dir.name) is not None
        pulumi_log.unlink()

        assert invoke(results, "teardown", "--stack", STACK, "--yes").exit_code == 1  # guarded
        result = invoke(results, "teardown", "--stack", STACK, "--force", "--yes")
        assert result.exit_code == 0, result.output
        assert cluster.job("trainjob", run_dir.name) is None
        assert read_state(run_dir).state.value == "CANCELLED"
        log = calls(pulumi_log)
        # reconnecting to cancel reads the stack outputs; destroy only after; export last
        assert log[0].startswith("stack output")
        assert log[-2:] == [f"destroy --stack {STACK} --yes", f"stack export --stack {STACK}"]
        assert result.output.index(f"cancelled {run_dir.name}") < result.output.index("Destroying")
    finally:
        cluster.close()


def test_a_run_with_a_damaged_state_is_unfetched_and_does_not_block_a_forced_teardown(
    tmp_path, pulumi_log
):
    cluster = FakeCluster(namespace="bench")
    try:
        (tmp_path / "outputs.json").write_text(
            json.dumps(OUTPUTS | {"runner_kubeconfig": cluster.kubeconfig()})
        )
        results = tmp_path / "results"
        make_run(results, "fetched", 2, 5.0, stack=STACK)
        damaged = make_run(results, "damaged", 2, 5.0, stack=STACK)
        (damaged / "state.json").write_text("{garbage")
        result = invoke(results, "teardown", "--stack", STACK, "--yes")
        assert result.exit_code == 1
        assert "damaged: state.json is not valid JSON" in result.output
        assert "--force" in result.output and calls(pulumi_log) == []
        result = invoke(results, "teardown", "--stack", STACK, "--force", "--yes")
        assert result.exit_code == 0, result.output
        assert calls(pulumi_log)[-2:] == [
            f"destroy --stack {STACK} --yes",
            f"stack export --stack {STACK}",
        ]
    finally:
        cluster.close()


def test_leftover_resources_after_destroy_are_listed_and_fail_the_command(tmp_path, pulumi_log):
    types = {"s": "pulumi:pulumi:Stack", "p": "pulumi:providers:gcp",
             "results": "gcp:storage/bucket:Bucket"}  # fmt: skip
    resources = [
        {"urn": f"urn:pulumi:{STACK}::stackbench::{t}::{name}", "type": t}
        for name, t in types.items()
    ]
    (tmp_path / "export.json").write_text(json.dumps({"deployment": {"resources": resources}}))
    result = invoke(tmp_path / "results", "teardown", "--stack", STACK, "--yes")
    assert result.exit_code == 1
    assert "1 resource(s) still in stack" in result.output
    assert "Bucket::results" in result.output and "providers:gcp" not in result.output


def test_leftovers_are_shown_as_pulumi_wrote_them_never_as_markup(tmp_path, pulumi_log):
    urns = ["urn:pulumi:gke-gpu-8::stackbench::gcp:container/cluster:Cluster::c[/red]x",
            "urn:pulumi:gke-gpu-8::x::[bold]disk[link=https://attacker.example]"]  # fmt: skip
    state = {"deployment": {"resources": [{"type": "t", "urn": urn} for urn in urns]}}
    (tmp_path / "export.json").write_text(json.dumps(state))
    result = invoke(tmp_path / "results", "teardown", "--stack", STACK, "--yes")
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert "2 resource(s) still in stack gke-gpu-8's state" in result.output
    assert all(f"  {urn}\n" in result.output for urn in urns), result.output


@pytest.mark.parametrize(
    "state",
    [[1], {"deployment": "x"}, {"deployment": {"resources": {"urn": "u"}}}, "no state"],
)
def test_a_state_without_a_resource_list_is_never_taken_for_a_clean_teardown(
    tmp_path, pulumi_log, state
):
    (tmp_path / "export.json").write_text(json.dumps(state))
    result = invoke(tmp_path / "results", "teardown", "--stack", STACK, "--yes")
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert "printed no list of resources" in result.output and "destroyed" not in result.output


def test_resource_entries_without_a_urn_are_still_listed_as_leftovers(tmp_path, pulumi_log):
    resources = [{"type": "gcp:compute/disk:Disk"}, 7, {"type": "pulumi:pulumi:Stack", "urn": "s"}]
    (tmp_path / "export.json").write_text(json.dumps({"deployment": {"resources": resources}}))
    result = invoke(tmp_path / "results", "teardown", "--stack", STACK, "--yes")
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert "2 resource(s) still in stack" in result.output
    assert "(an entry without a URN: {'type': 'gcp:compute/disk:Disk'})" in result.output


def test_bytes_pulumi_passes_on_undecoded_are_shown_replaced_never_a_traceback(
    tmp_path, pulumi_log
):
    # What a provider or the cluster says reaches pulumi's output byte for byte: a byte that
    # is no UTF-8, in destroy's stream or in the exported state, must not cut the teardown
    # short (its outcome unread, the leftover check never run).
    (tmp_path / "destroy_out").write_bytes(b"  error: \xff\xfe from the cloud\n")
    leftover = {"type": "gcp:storage/bucket:Bucket", "urn": "urn:pulumi:s::p::bucket::results-X"}
    export = json.dumps({"deployment": {"resources": [leftover]}}).encode()
    (tmp_path / "export.json").write_bytes(export.replace(b"-X", b"-\xff"))
    result = invoke(tmp_path / "results", "teardown", "--stack", STACK, "--yes")
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert "error: \ufffd\ufffd from the cloud" in result.output
    assert "Resources: 12 deleted" in result.output
    assert "urn:pulumi:s::p::bucket::results-\ufffd" in result.output  # the leftover still listed


def test_a_failed_destroy_stops_before_the_leftover_check_and_says_what_next(tmp_path, pulumi_log):
    (tmp_path / "destroy_rc").write_text("255")
    result = invoke(tmp_path / "results", "teardown", "--stack", STACK, "--yes")
    assert result.exit_code == 1
    assert "pulumi destroy --stack gke-gpu-8 --yes` failed (exit 255)" in result.output
    assert calls(pulumi_log) == [f"destroy --stack {STACK} --yes"]


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
