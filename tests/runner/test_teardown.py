"""`runner teardown`: the unfetched-runs guard, and the order of its steps (cancel remaining
jobs, `pulumi destroy`, leftover check), with a fake `pulumi` on PATH recording each call (the
pulumi_log fixture, conftest.py) and a kmock API server standing in for the cluster; and the
leftovers as Pulumi's state lists them, damaged or odd. What teardown refuses before touching
anything, and a teardown stopped mid-way, are in test_teardown_refusals.py."""

from __future__ import annotations

import json

import pytest

from contract.rundir import read_state
from runner.results import rundir
from tests.runner.damaged_runs import unix_socket_at
from tests.runner.fake_pulumi import STACK, calls, invoke
from tests.runner.k8s_fake import FakeCluster
from tests.runner.rundirs import make_run
from tests.runner.test_cluster import OUTPUTS

pytestmark = pytest.mark.timeout(60)


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
