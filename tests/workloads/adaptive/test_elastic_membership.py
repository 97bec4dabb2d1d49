"""Elastic generations (pure), their store records and the heartbeat watch (a real TCPStore
in this process), and the policy that admits joiners."""

from __future__ import annotations

import datetime
import time

import pytest
from torch.distributed import PrefixStore, TCPStore

from workloads.adaptive.elastic.group import ElasticConfig, ElasticPolicy
from workloads.adaptive.elastic.membership import (
    Excluded,
    Generation,
    MembershipError,
    TooFewWorkers,
    after_failure,
    check_size,
    first_generation,
    grown,
)
from workloads.adaptive.elastic.rendezvous import Heartbeat, LivenessWatch, Rendezvous
from workloads.adaptive.elastic.signing import Signer, new_secret
from workloads.adaptive.policy import View


def test_the_first_generation_is_the_first_workers_in_the_order_they_registered():
    first = first_generation(["a", "b", "c"])
    assert (first.number, first.members, first.source, first.admitted) == (0, ("a", "b", "c"), 0, 3)
    assert first.rank_of("c") == 2


def test_growth_appends_the_joiners_and_rank_zero_is_the_source():
    after = grown(first_generation(["a", "b"]), ["d"], step=16)
    assert (after.members, after.source, after.admitted, after.step) == (("a", "b", "d"), 0, 3, 16)
    assert after.joined == ("d",)


def test_after_a_failure_the_survivors_keep_their_order_and_the_furthest_is_the_source():
    current = first_generation(["a", "b", "c", "d"])
    after = after_failure(current, {"a": 6, "b": 7, "d": 7})
    assert after.members == ("a", "b", "d")  # the new rank 0 is the lowest surviving rank
    assert (after.source, after.step) == (1, 7)  # b: the first with the most steps
    assert (after.departed, after.reason) == (("c",), "c left")
    with pytest.raises(Excluded):
        after.rank_of("c")


def test_a_group_below_its_minimum_stops_with_a_reason():
    after = after_failure(first_generation(["a", "b", "c"]), {"a": 3})
    with pytest.raises(TooFewWorkers, match=r"1 worker.*at least 2"):
        check_size(after, 2, 4)


def test_generations_round_trip_and_damaged_records_are_refused():
    after = after_failure(first_generation(["a", "b", "c"]), {"a": 3, "c": 3})
    assert Generation.from_json(after.to_json()) == after
    for damaged in (
        "",
        "{",
        '{"number": 1}',
        after.to_json().replace('"source": 0', '"source": 9'),
        "[" * 100_000,  # a record from the store nested past json's recursion limit
    ):
        with pytest.raises(MembershipError):
            Generation.from_json(damaged)


def _store() -> tuple[TCPStore, PrefixStore]:
    master = TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False,
                      timeout=datetime.timedelta(seconds=10))  # fmt: skip
    return master, PrefixStore("run/", master)


def test_the_first_record_of_a_generation_stands():
    _, store = _store()
    a, b = Rendezvous(store, "a"), Rendezvous(store, "b")
    current = first_generation(["a", "b", "c"])
    mine = a.propose(after_failure(current, {"a": 5}))
    theirs = b.propose(after_failure(current, {"a": 5, "b": 5}))
    assert mine == theirs and theirs.members == ("a",)
    assert b.generation(1) == mine and b.generation(2) is None


def test_join_numbers_and_ids_come_back_in_order():
    _, store = _store()
    numbers = [Rendezvous(store, m).register() for m in ("x", "y", "z")]
    assert numbers == [1, 2, 3]
    assert Rendezvous(store, "x").join_ids(2, 3) == [(2, "y"), (3, "z")]


def test_check_ins_report_each_members_step():
    _, store = _store()
    Rendezvous(store, "a").check_in(4, 11)
    assert Rendezvous(store, "b").checked_in(4, ["a", "b"]) == {"a": 11}


def test_a_worker_whose_heartbeat_stops_is_gone_and_a_beating_one_is_not():
    master, store = _store()
    beat = Heartbeat(lambda: PrefixStore("run/", master), "alive", period_s=0.05)
    beat.start()
    Rendezvous(store, "dead").store.add("hb/dead", 1)  # beat once, then never again
    try:
        watch = LivenessWatch(Rendezvous(store, "me"), ["alive", "dead"], dead_after_s=0.5)
        assert watch.gone(["alive", "dead"]) == set()
        time.sleep(0.7)
        assert watch.gone(["alive", "dead"]) == {"dead"}
    finally:
        beat.stop()


def test_the_policy_admits_waiting_joiners_up_to_the_maximum():
    view = View(8, 0.1, {"workers": 3})
    assert ElasticPolicy(lambda: 0, 4).propose("before_step", view) == ()
    [proposal] = ElasticPolicy(lambda: 2, 4).propose("before_step", view)
    assert (proposal.knob, proposal.value) == ("workers", 4)
    assert ElasticPolicy(lambda: 1, 3).propose("before_step", view) == ()


def test_elastic_bounds_and_timeouts_are_validated():
    with pytest.raises(ValueError, match="min <= max"):
        ElasticConfig(3, 2)
    with pytest.raises(ValueError, match="two heartbeat"):
        ElasticConfig(1, 2, heartbeat_s=1.0, dead_after_s=1.5)


def test_an_elastic_run_takes_a_time_budget_and_its_cluster_deadline_follows_it():
    # The budget is agreed at the run's step count (session.py), so an elastic run takes one;
    # on a cluster its job's activeDeadlineSeconds is then the budget plus the slack, as a
    # fixed run's, and a job stopped there says how to give the run longer.
    from runner.backends.kubernetes.follow.overtime import deadline_note
    from runner.backends.kubernetes.render.common import DEADLINE_SLACK_S, deadline_s
    from runner.job.spec import Placement, resolve

    spec = resolve("cnn-digits", ["strategy=allreduce", "time_budget_s=60"],
                   Placement(procs_per_node=2, min_workers=1))  # fmt: skip
    assert spec.config.run.time_budget_s == 60.0
    assert deadline_s(spec) == 60 + DEADLINE_SLACK_S
    job = {"spec": {"elasticPolicy": {"minReplicas": 1},
                    "runPolicy": {"activeDeadlineSeconds": deadline_s(spec)}}}  # fmt: skip
    note = deadline_note(job)
    assert note.startswith(
        f"activeDeadlineSeconds {60 + DEADLINE_SLACK_S} s: the run's time_budget_s"
    )
    assert "--set time_budget_s=SECONDS" in note


def test_damaged_join_records_and_latest_are_left_out_or_membership_errors_not_crashes():
    # Anything that reaches the store (a local program on its loopback port, a damaged
    # write) is left out or read back as a MembershipError, never a traceback.
    _, store = _store()
    rdzv = Rendezvous(store, "x")
    rdzv.register()
    store.add("joins", 1)
    store.set("join/2", b"\xff\xfe")  # not UTF-8
    assert rdzv.join_ids(1, 2, wait_s=0) == [(1, "x")]
    store.set("latest", "not a number")
    with pytest.raises(MembershipError, match="damaged record latest"):
        rdzv.latest()


def test_records_not_signed_with_the_runs_secret_are_ignored(capfd):
    # A real foreign client of the store (no secret) writes a join, a check-in, the next
    # generation and `ended`; and copies a signed check-in to another member's key.
    master, store = _store()
    signer = Signer(new_secret())
    a = Rendezvous(store, "a", signer)
    a.register()
    current = a.propose(first_generation(["a", "b"]))
    foreign = PrefixStore("run/", TCPStore("127.0.0.1", master.port, is_master=False))
    foreign.add("joins", 1)
    foreign.set("join/2", "intruder")
    foreign.set("gen/0/in/b", "7")
    forged = after_failure(current, {"b": 7})  # b alone: a dropped
    foreign.set("gen/1", forged.to_json())
    foreign.set("ended", "1")
    a.check_in(0, 3)
    foreign.set("gen/0/in/b", store.get("gen/0/in/a"))  # a's tag, on b's key
    assert a.join_ids(1, 2, wait_s=0) == [(1, "a")]
    assert a.checked_in(0, ["a", "b"]) == {"a": 3}
    assert a.generation(1) is None and not a.ended()
    mine = a.propose(after_failure(current, {"a": 3}))  # replaces the forged record
    assert mine.members == ("a",) and a.generation(1) == mine
    assert "ignored record 'join/2'" in capfd.readouterr().err


def test_a_joiner_whose_id_is_taken_already_is_a_damaged_record():
    # Two processes under one id would both take the same rank of the grown group.
    current = first_generation(["a", "b"])
    for joiners in (["a"], ["d", "d"], [""]):
        with pytest.raises(MembershipError, match="damaged join record"):
            grown(current, joiners, step=3)
