"""A run's events as chart series: incremental feeding, throughput, phases, damaged values."""

from __future__ import annotations

import math

from runner.dashboard.curves import Curves, series

START_MS = 1_000_000


def event(key, value=None, at_s=0.0, epoch=None):
    metadata = {} if epoch is None else {"epoch_num": epoch}
    return {
        "key": key,
        "value": value,
        "time_ms": START_MS + int(1000 * at_s),
        "metadata": metadata,
    }


def run_events():
    events = [event("train_samples", 1000, -5.0), event("train_loss", 9.0, -1.0),  # before start
              event("run_start", None, 0.0)]  # fmt: skip
    for epoch in (1, 2):
        begin = 10.0 * (epoch - 1)
        phases = {"data": 0.1, "forward": 1.0, "backward": 2.0, "communication": 3.0,
                  "optimizer": 0.5}  # fmt: skip
        events += [
            event("epoch_start", None, begin, epoch),
            event("stackbench_progress", {"epoch": epoch, "step": 5, "steps": 10}, begin + 2),
            event("train_loss", 1.0 / epoch, begin + 8, epoch),
            event("epoch_phase_times", phases, begin + 8, epoch),
            event("epoch_stop", None, begin + 8, epoch),
            event("eval_accuracy", 0.5 + 0.2 * epoch, begin + 9, epoch),
        ]
    return events


def test_series_are_seconds_since_run_start_and_ignore_what_came_before():
    s = series(run_events())

    assert s["train_loss"] == [[8.0, 1.0], [18.0, 0.5]]
    assert s["eval_accuracy"] == [[9.0, 0.7], [19.0, 0.9]]
    assert s["progress"] == {"epoch": 2, "step": 5, "steps": 10, "t": 12.0}


def test_progress_follows_a_new_epoch_before_its_first_progress_event():
    s = series([*run_events(), event("epoch_start", None, 20.0, 3)])

    assert s["progress"] == {"epoch": 3, "step": None, "steps": None, "t": 20.0}


def test_throughput_is_the_training_set_over_the_epoch_wall_time():
    s = series(run_events())

    assert s["throughput"] == [[8.0, 1000 / 8.0], [18.0, 1000 / 8.0]]


def test_phases_are_reported_per_epoch():
    phases = series(run_events())["phases"]

    assert [p["epoch"] for p in phases] == [1, 2]
    assert phases[0]["communication"] == 3.0 and phases[0]["t"] == 8.0


def test_feeding_in_pieces_adds_up_to_feeding_everything():
    events = run_events()
    curves = Curves()
    pieces = [curves.feed(events[i : i + 3]) for i in range(0, len(events), 3)]

    whole = series(events)
    for key in ("train_loss", "eval_accuracy", "throughput", "phases"):
        assert [p for piece in pieces for p in piece[key]] == whole[key]


def test_values_that_are_not_finite_numbers_are_left_out():
    events = [
        event("run_start"),
        event("train_loss", math.nan, 1.0),  # a diverged run
        event("train_loss", "0.5", 2.0),
        event("train_loss", True, 3.0),
        event("eval_accuracy", 0.8, 4.0),
        {"key": "train_loss", "value": 0.3, "time_ms": "yesterday"},
        event("epoch_phase_times", {"data": "x"}, 5.0, 1),
        event("stackbench_progress", {"epoch": 1}, 6.0),
    ]

    s = series(events)

    assert s["train_loss"] == [] and s["eval_accuracy"] == [[4.0, 0.8]]
    assert s["phases"] == [] and s["progress"] is None


def test_an_adaptive_runs_batch_noise_scale_and_workers_are_series():
    monitors = {"step": 10, "world_size": 3, "b_noise": 140.0, "global_batch": 64}
    decision = {"step": 10, "knob": "global_batch", "old": 64, "new": 128}
    events = [
        event("run_start"),
        event("stackbench_monitors", monitors, 1.0),
        event("stackbench_decision", decision, 1.5),
        event("stackbench_decision", {"knob": "workers", "old": 3, "new": 2}, 2.0),
        event("stackbench_decision", {"knob": "lr_factor", "old": 1.0, "new": 2.0}, 2.5),
        event("stackbench_monitors", {"b_noise": math.inf, "global_batch": "64"}, 3.0),
        event("stackbench_decision", {"knob": "workers", "new": None}, 3.5),
        event("run_stop", None, 4.0),
    ]

    s = series(events)

    # The knobs' series start at the run's start and end at its end, at their values then.
    assert s["global_batch"] == [[0.0, 64.0], [1.0, 64.0], [1.5, 128.0], [4.0, 128.0]]
    assert s["b_noise"] == [[1.0, 140.0]]
    assert s["workers"] == [[0.0, 3.0], [1.0, 3.0], [2.0, 2.0], [4.0, 2.0]]
    assert [(d["t"], d["knob"], d["old"], d["new"]) for d in s["decisions"]] == [
        (1.5, "global_batch", 64, 128), (2.0, "workers", 3, 2), (2.5, "lr_factor", 1.0, 2.0),
        (3.5, "workers", None, None),
    ]  # fmt: skip


def test_an_elastic_runs_workers_start_at_the_first_decisions_old_value():
    # An elastic run without monitors: its workers series comes from membership decisions.
    left = {"knob": "workers", "old": 3, "new": 2, "reason": "worker 2 left", "policy": "elastic"}
    joined = {"knob": "workers", "old": 2, "new": 3, "reason": "worker 3 joined"}
    events = [
        event("run_start"),
        event("stackbench_decision", left, 14.0),
        event("stackbench_decision", joined, 22.0),
        event("run_stop", None, 101.0),
    ]

    s = series(events)

    assert s["workers"] == [[0.0, 3.0], [14.0, 2.0], [22.0, 3.0], [101.0, 3.0]]
    assert s["decisions"][0]["reason"] == "worker 2 left"


def test_the_live_headline_is_the_time_to_target_event_and_the_last_epoch():
    events = [*run_events(), event("stackbench_time_to_target_s", 12.345, 12.4, 2)]

    headline = series(events)["headline"]

    assert headline["time_to_target_s"] == 12.345  # the very float the summary holds
    # Each epoch: 1000 samples, 10 steps (its progress event), 8 s, of which 3 s communicating.
    assert headline == {"time_to_target_s": 12.345, "epoch": 2, "throughput_samples_per_s": 125.0,
                        "step_time_ms": 800.0, "communication_share": 0.375}  # fmt: skip


def test_a_run_without_policies_has_empty_adaptive_series():
    s = series(run_events())

    assert s["global_batch"] == s["b_noise"] == s["workers"] == []


def test_the_clock_maps_seconds_to_epochs_and_steps_for_other_x_axes():
    # Epochs of 10 steps (their progress events say so), 8 s each, 2 s apart.
    assert series(run_events())["clock"] == [
        [0.0, 0, 0], [2.0, 0.5, 5], [8.0, 1, 10], [10.0, 1, 10], [12.0, 1.5, 15], [18.0, 2, 20],
    ]  # fmt: skip
