"""How many API requests following a Kubernetes job costs, by kind, against the tests' fake API
server (kmock, tests/runner/k8s_fake.py): a job pending for a few seconds, then running for
`--running-s` (default 60) with rank 0 printing an event a second, then complete.

A speed benchmark of our own code (not a pass/fail test). Two ways of following are counted:
`watch` (KubernetesBackend.watch on a thread and events() taken every 0.25 s, as runner.api
follows a run) and `poll` (status() every 0.25 s instead of the watch, as the runner did before
watches). `python bench/k8s_follow.py --running-s 60` prints one row per way; the watch row
should not grow with --running-s, the poll row grows by about 8 requests a second.
"""

from __future__ import annotations

import argparse
import collections
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

POLL_S = 0.25


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--running-s", type=float, default=60.0, help="how long the job runs")
    parser.add_argument("--pending-s", type=float, default=4.0, help="how long it waits first")
    parser.add_argument("--ways", default="watch,poll", help="watch, poll or both")
    args = parser.parse_args()
    print(f"job: pending {args.pending_s:.0f} s, running {args.running_s:.0f} s")
    print(f"{'way':<8}{'requests':>10}{'per_min':>10}  by kind")
    for way in args.ways.split(","):
        counts, elapsed_s = follow_one_job(way, args.pending_s, args.running_s)
        total = sum(counts.values())
        kinds = ", ".join(f"{k} {n}" for k, n in sorted(counts.items()))
        print(f"{way:<8}{total:>10}{total / elapsed_s * 60:>10.0f}  {kinds}", flush=True)


def follow_one_job(way: str, pending_s: float, running_s: float) -> tuple[dict[str, int], float]:
    from runner.backends.kubernetes.follow.reflector import WatchConfig
    from tests.runner.k8s_fake import FakeCluster
    from tests.runner.k8s_helpers import RUN_ID, make_backend, make_spec, submit

    cluster = FakeCluster("bench")
    root = Path(tempfile.mkdtemp(prefix="k8s-follow-"))
    backend = make_backend(cluster, root, "trainjob", watch_config=WatchConfig())
    handle, _ = submit(backend, root, make_spec(nodes=2, procs=1))
    before = len(cluster.emulator._requests)
    start = time.monotonic()
    job = threading.Thread(target=play_job, args=(cluster, RUN_ID, pending_s, running_s))
    job.start()
    events = backend.events(handle)
    if way == "watch":
        done = threading.Event()

        def watch_to_end() -> None:
            list(backend.watch(handle))
            done.set()

        watcher = threading.Thread(target=watch_to_end)
        watcher.start()
        while not done.is_set():
            next(events, None)
            time.sleep(POLL_S)
    else:
        while not backend.status(handle).state.finished:
            next(events, None)
            time.sleep(POLL_S)
    for _ in events:  # the rest of rank 0's log
        time.sleep(POLL_S)
    elapsed_s = time.monotonic() - start
    job.join()
    made = list(cluster.emulator._requests)[before:]
    backend.close()
    cluster.close()
    return collections.Counter(kind(r) for r in made), elapsed_s


def kind(request) -> str:
    what = request.url.path.rsplit("/", 1)[-1]
    what = "job" if "trainjobs" in request.url.path else what
    if request.params.get("watch") == "true":
        return f"watch {what}"
    return f"{request.method.value} {what}"


def play_job(cluster, name: str, pending_s: float, running_s: float) -> None:
    """The controllers and the kubelet: pods pending, then running and logging, then done."""
    from contract.events import PREFIX
    from tests.runner.k8s_helpers import pod

    unschedulable = [{"type": "PodScheduled", "status": "False", "message": "no GPUs free"}]
    time.sleep(pending_s / 2)
    for node in (0, 1):
        cluster.add_pod(pod("trainjob", name, node, "Pending", conditions=unschedulable))
    time.sleep(pending_s / 2)
    for node in (0, 1):
        cluster.add_pod(pod("trainjob", name, node, "Running"), log="")
    rank0 = pod("trainjob", name, 0)["metadata"]["name"]
    for second in range(int(running_s)):
        time.sleep(1)
        line = f'{{"key": "step", "value": {second}, "event_type": "POINT_IN_TIME", "time_ms": 1}}'
        cluster.append_log(rank0, f"[rank0]:{PREFIX}{line}\n")
    for node in (0, 1):
        cluster.add_pod(pod("trainjob", name, node, "Succeeded"))
    cluster.set_job_condition("trainjob", name, "Complete")


if __name__ == "__main__":
    main()
