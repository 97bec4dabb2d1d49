"""Pod logs that forge other ranks' lines: a rank prefix is believed only from the node that runs
that rank, an over-long line cannot pass its rest off as another rank's, rank 0's summary for
another run is refused with the reason, and the fetch caps a user gives reach the backend."""

from __future__ import annotations

import json

import pytest

from contract.rundir import EVENTS, SUMMARY, rank_log
from runner.backends.kubernetes import demux
from runner.backends.kubernetes.api import streams
from runner.backends.kubernetes.results_store import StoreLimits
from runner.results import rundir
from tests.runner.k8s_helpers import RUN_ID, make_backend, make_spec, pod, submit
from tests.runner.k8s_runlogs import SUMMARY as GOOD_SUMMARY
from tests.runner.k8s_runlogs import pod_log, rank0_stdout

pytestmark = pytest.mark.timeout(60)


# ---- pod logs: a rank prefix is believed only from its own node ------------------------------


NODE = demux.NodeRanks(node=1, procs_per_node=2, world_size=4)


@pytest.mark.parametrize(
    ("line", "rank", "text"),
    [
        ("[rank2]:hello", 2, "hello"),
        ("[rank3]:[rank0]:nested", 3, "[rank0]:nested"),
        ("[rank0]:forged", None, "[rank0]:forged"),  # another node's rank
        ("[rank4]:past the world", None, "[rank4]:past the world"),
        ("[rank99999999999999999999]:huge", None, "[rank99999999999999999999]:huge"),
        ("[rank\u0662]:arabic-indic two", None, "[rank\u0662]:arabic-indic two"),
        ("launcher line", None, "launcher line"),
    ],
)
def test_a_line_is_a_ranks_only_if_that_rank_runs_on_the_node(line, rank, text):
    assert demux.attribute(line, NODE) == (rank, text)


def test_a_node_past_the_world_size_owns_no_rank():
    assert list(demux.NodeRanks(node=2, procs_per_node=2, world_size=4).ranks) == []


def test_forged_lines_never_reach_another_ranks_log_the_events_or_the_summary(cluster, tmp_path):
    backend = make_backend(cluster, tmp_path, "trainjob")
    handle, run_dir = submit(backend, tmp_path, make_spec())
    forged = {"forged": "by node 1"}
    node1 = pod_log(range(2, 4), "") + "".join(
        [
            f'[rank0]::::MLLOG {{"key": "stackbench_summary", "value": {json.dumps(forged)}, '
            '"event_type": "POINT_IN_TIME", "time_ms": 1, "metadata": {}}\n',
            "[rank0]:rank 0 never said this\n",
            "[rank99999999999999999999]:x\n",
            *(f"[rank{r}]:spam\n" for r in range(4, 204)),
        ]
    )
    cluster.add_pod(pod("trainjob", RUN_ID, 0, "Succeeded"), log=pod_log(range(2), rank0_stdout()))
    cluster.add_pod(pod("trainjob", RUN_ID, 1, "Succeeded"), log=node1)
    cluster.set_job_condition("trainjob", RUN_ID, "Complete")
    assert backend.fetch(handle, run_dir) == []
    assert rundir.read_summary(run_dir).to_dict() == GOOD_SUMMARY
    assert "forged" not in (run_dir / EVENTS).read_text()
    assert "never said" not in rank_log(run_dir, 0).read_text()
    logs = sorted(p.name for p in (run_dir / "logs").iterdir())
    assert logs == [
        "node-0.unattributed.log", "node-1.unattributed.log",
        "rank-0.log", "rank-1.log", "rank-2.log", "rank-3.log",
    ]  # fmt: skip
    kept = demux.unattributed_log(run_dir, 1).read_text()
    assert "[rank0]:rank 0 never said this" in kept and kept.count("spam") == 200


def test_an_over_long_line_cannot_pass_its_rest_off_as_another_ranks_line(cluster, tmp_path):
    """Rank 1 shares node 0 with rank 0; torchrun prefixes its lines `[rank1]:`, but a line
    longer than the runner's cap must not be cut into a second line starting `[rank0]:`."""
    backend = make_backend(cluster, tmp_path, "trainjob")
    handle, run_dir = submit(backend, tmp_path, make_spec())
    forged = {**GOOD_SUMMARY, "time_to_target_s": 0.125}
    event = {"key": "stackbench_summary", "value": forged, "event_type": "POINT_IN_TIME",
             "time_ms": 1, "metadata": {}}  # fmt: skip
    padding = "[rank1]:" + "A" * (streams.MAX_LINE_BYTES - len("[rank1]:"))
    # Padded past what one read brings, so that the cap is met before the line's end.
    tail = f"[rank0]::::MLLOG {json.dumps(event)}" + " " * (2 * streams.CHUNK_BYTES) + "\n"
    node0 = pod_log(range(2), rank0_stdout()) + padding + tail
    cluster.add_pod(pod("trainjob", RUN_ID, 0, "Succeeded"), log=node0)
    cluster.add_pod(pod("trainjob", RUN_ID, 1, "Succeeded"), log=pod_log(range(2, 4), ""))
    cluster.set_job_condition("trainjob", RUN_ID, "Complete")
    assert backend.fetch(handle, run_dir) == []
    assert rundir.read_summary(run_dir).to_dict() == GOOD_SUMMARY
    assert "0.125" not in rank_log(run_dir, 0).read_text()
    rank1 = rank_log(run_dir, 1).read_text().splitlines()
    assert rank1[-1] == padding[len("[rank1]:") :]  # cut at the cap, the rest dropped


def test_rank0s_own_summary_for_another_run_is_refused_with_the_reason(cluster, tmp_path):
    backend = make_backend(cluster, tmp_path, "trainjob")
    handle, run_dir = submit(backend, tmp_path, make_spec())
    wrong = rank0_stdout().replace(f'"run_id": "{RUN_ID}"', '"run_id": "some-other-run"')
    for node in (0, 1):
        text = wrong if node == 0 else ""
        cluster.add_pod(
            pod("trainjob", RUN_ID, node, "Succeeded"),
            log=pod_log(range(node * 2, node * 2 + 2), text),
        )
    cluster.set_job_condition("trainjob", RUN_ID, "Complete")
    missing = backend.fetch(handle, run_dir)
    assert any(m.startswith("summary.json (") and "some-other-run" in m for m in missing)
    assert not (run_dir / SUMMARY).exists()
    assert cluster.job("trainjob", RUN_ID) is not None  # incomplete: the job is kept


def test_the_fetch_caps_a_user_gives_reach_the_backend(tmp_path):
    from runner import api
    from tests.runner.rundirs import make_run

    make_run(tmp_path, "cnn-digits-capped", 2, 10.0, stack="gke-gpu-8")
    run = api.open_run(tmp_path, "cnn-digits-capped")
    backend = api.backend_for(run, tmp_path, (1, 3))
    assert backend.store_limits == StoreLimits(1 << 20, 3 << 20)  # type: ignore[attr-defined]
    assert api.backend_for(run, tmp_path).store_limits == StoreLimits()  # type: ignore[attr-defined]
