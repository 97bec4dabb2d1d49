"""Elastic workers as real processes on gloo: kill -9 one of 3 workers and the other two go
on from their own state with 2; then a new worker joins and starts from the current state.

One scenario (tests/workloads/adaptive/elastic_worker.py, 40 steps), shared by the
assertions below: w0, w1, w2 start; the test kills w2 with SIGKILL once it has done 5 steps;
once the survivors wait before step 16 (the test holds them there) it starts w3, and when
w3 has asked to join lets them go on: w3 joins at that decision point.
The test process hosts the store, as the launcher will.
"""

from __future__ import annotations

import datetime
import itertools
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from torch.distributed import PrefixStore, TCPStore

from tests.workloads.adaptive.elastic_worker import GLOBAL_BATCH, NUM_SAMPLES, SEED
from workloads.adaptive.sampler import epoch_order

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]
STEPS, KILL_AT, JOIN_AT = 40, 5, 16  # JOIN_AT: a decision point (every 2 steps)
REPO = Path(__file__).resolve().parents[3]


def _start(port: int, member: str, out: Path, initial: int = 3) -> subprocess.Popen[bytes]:
    argv = [
        sys.executable, "-m", "tests.workloads.adaptive.elastic_worker", "--port", str(port),
        "--member", member, "--initial", str(initial), "--workers", "2:4",
        "--steps", str(STEPS), "--pace-s", "0.02", "--hold-at", str(JOIN_AT),
        "--out", str(out),
    ]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    log = (out / f"{member}.log").open("wb")
    return subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT)


def _progress(store: PrefixStore, member: str) -> int:
    key = f"progress/{member}"
    return int(store.get(key)) if store.check([key]) else -1


def _wait_until(condition: Any, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


@pytest.fixture(scope="module")
def scenario(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    out = tmp_path_factory.mktemp("elastic")
    master = TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False,
                      timeout=datetime.timedelta(seconds=60))  # fmt: skip
    store = PrefixStore("run/", master)
    procs = {m: _start(master.port, m, out) for m in ("w0", "w1", "w2")}
    try:
        _wait_until(lambda: _progress(store, "w2") >= KILL_AT, 90, "w2 to train")
        procs["w2"].send_signal(signal.SIGKILL)
        held = lambda m: _progress(store, m) >= JOIN_AT - 1  # noqa: E731
        _wait_until(lambda: held("w0") and held("w1"), 90, "the survivors to reach the hold")
        procs["w3"] = _start(master.port, "w3", out)
        _wait_until(lambda: store.add("joins", 0) == 4, 90, "w3 to ask to join")
        store.set("go", "1")
        codes = {m: p.wait(timeout=120) for m, p in procs.items()}
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.kill()
                p.wait()
    logs = {m: (out / f"{m}.log").read_text(errors="replace") for m in procs}
    results = {m: json.loads((out / f"{m}.json").read_text()) for m in ("w0", "w1", "w3")
               if (out / f"{m}.json").exists()}  # fmt: skip
    return {"codes": codes, "logs": logs, "results": results}


def test_the_survivors_and_the_joiner_finish_and_the_killed_worker_does_not(scenario):
    assert scenario["codes"] == {"w0": 0, "w1": 0, "w2": -signal.SIGKILL, "w3": 0}, scenario["logs"]
    assert all(r["steps"] == STEPS for r in scenario["results"].values())


def test_the_departure_and_the_join_are_decisions_that_say_when(scenario):
    decisions = scenario["results"]["w0"]["decisions"]
    left, joined = decisions
    assert (left["knob"], left["old"], left["new"]) == ("workers", 3, 2)
    assert left["reason"] == "w2 left" and KILL_AT <= left["step"] < JOIN_AT
    assert (joined["knob"], joined["old"], joined["new"]) == ("workers", 2, 3)
    assert joined["step"] == JOIN_AT  # the decision point where w3 was waiting
    agreed = [(d["step"], d["knob"], d["old"], d["new"]) for d in decisions]
    assert agreed == [
        (d["step"], d["knob"], d["old"], d["new"]) for d in scenario["results"]["w1"]["decisions"]
    ]


def test_the_survivors_go_on_from_their_own_state_not_from_the_start(scenario):
    w0 = scenario["results"]["w0"]
    generations = sorted(w0["adopted"], key=int)
    recovered = w0["adopted"][generations[1]]
    assert recovered["world_size"] == 2
    assert recovered["step"] >= KILL_AT  # the step reached when w2 died, not 0


def test_the_joiner_starts_from_the_current_state(scenario):
    w0, w3 = scenario["results"]["w0"], scenario["results"]["w3"]
    [(generation, joined)] = w3["adopted"].items()
    assert joined["step"] == w0["decisions"][1]["step"] > 0
    assert joined["world_size"] == 3
    assert joined["weights"] == w0["adopted"][generation]["weights"]


def test_every_worker_ends_with_the_same_model(scenario):
    weights = [r["weights"] for r in scenario["results"].values()]
    assert weights[0] == weights[1] == weights[2]


def test_every_sample_is_trained_at_most_once_across_the_changes(scenario):
    w0 = scenario["results"]["w0"]["log"]
    assert [e["step"] for e in w0] == list(range(STEPS))
    for before, after in itertools.pairwise(w0):
        assert after["consumed"] == before["consumed"] + before["taken"]  # no gap, no overlap
    order = epoch_order(NUM_SAMPLES, 0, SEED)
    for result in scenario["results"].values():
        for e in result["log"]:
            block = order[e["consumed"] : e["consumed"] + e["taken"]]
            assert e["indices"] == block[e["rank"] :: e["world_size"]].tolist()
            assert e["taken"] == GLOBAL_BATCH
    worlds = [e["world_size"] for e in w0]
    left, joined = (d["step"] for d in scenario["results"]["w0"]["decisions"])
    assert worlds == [3] * left + [2] * (joined - left) + [3] * (STEPS - joined)
