"""Watches against a failing fake API server: a dropped connection resumed from the last version
seen (no change lost or repeated, by the backend and by a bare Reflector), a 410 Gone answered
with a new list, a watch that cannot reconnect or is refused by RBAC ending in one line, the
reconnect backoff, and a bookmark of the wrong shape."""

from __future__ import annotations

import time

import pytest

from contract.rundir import JobState
from runner.backends.kubernetes.api.client import Selector
from runner.backends.kubernetes.follow.reflector import Backoff, Reflector, Store, WatchConfig
from runner.errors import RunnerError
from tests.runner.k8s_helpers import RUN_ID, complete, make_backend, make_spec, pod, submit
from tests.runner.k8s_watching import UNSCHEDULABLE, Watching, states, two_pending_pods

pytestmark = pytest.mark.timeout(60)


# ---- faults ----------------------------------------------------------------------------------


def test_a_dropped_connection_is_resumed_without_losing_or_repeating_a_change(cluster, tmp_path):
    backend = make_backend(cluster, tmp_path, "trainjob")
    handle, _ = submit(backend, tmp_path, make_spec())
    two_pending_pods(cluster)
    watching = Watching(backend, handle)
    assert UNSCHEDULABLE in watching.next().reason
    # The next three watches fail: the reflectors back off; the change meanwhile waits for them.
    cluster.fail("get", r"/(pods|trainjobs)$", 503, times=3, watch=True)
    cluster.drop_connections()
    cluster.add_pod(pod("trainjob", RUN_ID, 1, "Running"))
    assert watching.next().state is JobState.RUNNING
    cluster.set_job_condition("trainjob", RUN_ID, "Complete")
    assert states(watching.rest()) == ["SUCCEEDED"]
    # Resumed from the versions seen: one list of each, never a second.
    assert cluster.requests("get", r"/pods$", watch=False) == 1
    assert cluster.requests("get", r"/trainjobs$", watch=False) == 1
    assert cluster.requests("get", r"/(pods|trainjobs)$", watch=True) >= 5
    backend.close()


class RecordingStore(Store):
    """A Store that also keeps every change a reflector applied, in order."""

    def __init__(self) -> None:
        super().__init__()
        self.applied: list[tuple[str, str, str]] = []

    def apply(self, collection: str, kind: str, obj: dict) -> None:
        self.applied.append((kind, obj["metadata"]["name"], obj["metadata"]["resourceVersion"]))
        super().apply(collection, kind, obj)


def test_a_reflector_applies_every_change_exactly_once_across_dropped_connections(
    cluster, tmp_path
):
    backend = make_backend(cluster, tmp_path, "trainjob")
    store = RecordingStore()
    selector = Selector(label=f"stackbench/run-id={RUN_ID}")
    reflector = Reflector(backend.api, "pods", selector, store, backend.watch_config)
    reflector.start()
    try:
        with store.changed:  # listed (nothing yet): from here on, every change is a watch event
            assert store.changed.wait_for(lambda: "pods" in store.synced, timeout=10)
        changes = []
        for round_ in range(4):
            for node in range(3):
                running = pod("trainjob", RUN_ID, node, "Running")
                running["metadata"]["annotations"]["round"] = str(round_)
                cluster.add_pod(running)
                changes.append(running["metadata"]["name"])
            if round_ % 2 == 0:  # a drop, and the reconnects failing for a while
                cluster.fail("get", r"/pods$", 503, times=2, watch=True)
                cluster.drop_connections()
        deadline = time.monotonic() + 10
        while len(store.applied) < len(changes) and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.1)  # anything more (a repeat) would arrive now
    finally:
        reflector.stop()
    history = [
        (c.event["type"], c.event["object"]["metadata"]["name"], str(c.version))
        for c in cluster.emulator.history
        if c.plural == "pods"
    ]
    assert store.error is None
    assert store.applied == history
    assert [name for _, name, _ in store.applied] == changes


@pytest.mark.parametrize("how", ["error event", "http status"])
def test_a_version_too_old_to_resume_from_is_answered_with_a_new_list(cluster, tmp_path, how):
    backend = make_backend(cluster, tmp_path, "trainjob")
    handle, _ = submit(backend, tmp_path, make_spec())
    for node in (0, 1):
        cluster.add_pod(pod("trainjob", RUN_ID, node, "Running"), log="")
    watching = Watching(backend, handle)
    assert watching.next().state is JobState.RUNNING
    if how == "error event":
        cluster.compact()  # the server forgets the versions the watches would resume from
    else:
        cluster.fail("get", r"/trainjobs$", 410, watch=True, message="too old resource version")
    cluster.drop_connections()
    cluster.set_job_condition("trainjob", RUN_ID, "Complete")
    assert states(watching.rest()) == ["SUCCEEDED"]
    assert cluster.requests("get", r"/trainjobs$", watch=False) == 2  # listed again
    backend.close()


def test_a_watch_that_cannot_reconnect_gives_up_with_one_line_naming_the_cluster(cluster, tmp_path):
    config = WatchConfig(min_timeout_s=5, backoff_initial_s=0.01, backoff_max_s=0.02, jitter=0,
                         give_up_s=0.3)  # fmt: skip
    backend = make_backend(cluster, tmp_path, "trainjob", watch_config=config)
    handle, _ = submit(backend, tmp_path, make_spec())
    watching = Watching(backend, handle)
    assert watching.next().state is JobState.PENDING
    cluster.fail("get", r"/(pods|trainjobs)$", 503, times=10_000)
    cluster.drop_connections()
    with pytest.raises(RunnerError) as err:
        watching.next()
    message = str(err.value)
    assert "\n" not in message and "HTTP 503" in message and "--stack gke-gpu-8" in message
    assert "runner status" in message
    backend.close()


def test_a_watch_refused_by_rbac_fails_at_once_with_the_fix(cluster, tmp_path):
    backend = make_backend(cluster, tmp_path, "trainjob")
    handle, _ = submit(backend, tmp_path, make_spec())
    cluster.fail("get", r"/pods$", 403, watch=True, message='pods is forbidden: cannot "watch"')
    with pytest.raises(RunnerError, match=r"forbidden by RBAC.*kubectl auth can-i"):
        list(backend.watch(handle))
    backend.close()


def test_backoff_doubles_to_its_cap_and_starts_over_after_a_quiet_spell():
    now = [0.0]
    config = WatchConfig(backoff_initial_s=0.8, backoff_max_s=30, backoff_reset_s=120, jitter=0)
    backoff = Backoff(config, clock=lambda: now[0])
    assert [backoff.failure() for _ in range(8)] == [0.8, 1.6, 3.2, 6.4, 12.8, 25.6, 30, 30]
    now[0] = 50.0
    assert backoff.failing_for_s() == 50.0  # the give-up clock
    backoff.success()
    assert backoff.failing_for_s() == 0.0
    assert backoff.failure() == 30  # a success alone does not reset the delay...
    now[0] = 200.0
    assert backoff.failure() == 0.8  # ...two quiet minutes do


@pytest.mark.parametrize("metadata", ["garbage", {"resourceVersion": {"x": 1}}, None])
def test_a_bookmark_of_the_wrong_shape_is_no_version_and_the_watch_goes_on(
    cluster, tmp_path, metadata
):
    """A bookmark carries nothing but a version, so its object is not checked as a changed
    one is: one with no usable version moves nothing, rather than end the follower with a
    Python error."""
    backend = make_backend(cluster, tmp_path, "trainjob")
    handle, _ = submit(backend, tmp_path, make_spec())
    watching = Watching(backend, handle)
    assert watching.next().state is JobState.PENDING
    bookmark = {"type": "BOOKMARK", "object": {"metadata": metadata}}
    for plural in ("pods", "trainjobs"):
        cluster.send_watch_event(plural, bookmark)
    complete(cluster, "trainjob")
    assert states(watching.rest())[-1] == "SUCCEEDED"
    backend.close()
