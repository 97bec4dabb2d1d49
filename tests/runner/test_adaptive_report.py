"""An adaptive run's curves and figure in a report, and its figures in the live view of a
followed run: read from its stackbench_monitors and stackbench_decision events, garbage in
those events ignored."""

from __future__ import annotations

import io
import json

from rich.console import Console

from runner.cli.progress import TrainingProgress
from runner.results import export
from runner.results import report as reports
from runner.results.runs import curves, load_run
from tests.runner.rundirs import make_run

START_MS = 1_700_000_000_000  # rundirs.write_events' run_start


def _event(key, value, offset_ms):
    return {"namespace": "", "time_ms": START_MS + offset_ms, "key": key,
            "event_type": "POINT_IN_TIME", "value": value, "metadata": {}}  # fmt: skip


def _monitors(step, b_noise, global_batch, world_size=2, lr=0.1):
    knobs = {"global_batch": global_batch}
    return {"step": step, "world_size": world_size, "b_noise": b_noise,
            "global_batch": global_batch, "lr": lr, "knobs": knobs}  # fmt: skip


def _decision(step, knob, old, new):
    return {"step": step, "time_s": 1.0, "policy": "adaptive-batch", "knob": knob, "old": old,
            "new": new, "reason": "B_noise 140 >= 2 x global batch 64"}  # fmt: skip


ADAPTIVE_EVENTS = [
    _event("stackbench_monitors", _monitors(0, 40.0, 64), 1000),
    _event("stackbench_monitors", _monitors(10, 140.0, 64), 2000),
    _event("stackbench_decision", _decision(10, "global_batch", 64, 128), 2001),
    _event("stackbench_monitors", _monitors(20, 150.0, 128, lr=0.2), 3000),
    _event("stackbench_decision", _decision(25, "workers", 2, 1), 3500),
    # garbage a damaged or hostile file may hold: never a point, never an error
    _event("stackbench_monitors", {"b_noise": "NaN", "global_batch": True}, 3600),
    _event("stackbench_monitors", [1, 2], 3700),
    _event("stackbench_decision", _decision(30, "global_batch", 128, None), 3800),
]


def _adaptive_run(root, run_id="adaptive"):
    run_dir = make_run(root, run_id, 2, 10.0, overrides=("policy=batch",))
    with open(run_dir / "events.jsonl", "a", encoding="utf-8") as f:
        for event in ADAPTIVE_EVENTS:
            f.write(json.dumps(event) + "\n")
    return run_dir


def test_an_adaptive_runs_curves_hold_its_batch_noise_scale_workers_and_lr(tmp_path):
    got = curves(_adaptive_run(tmp_path) / "events.jsonl")
    assert got["global_batch"] == ((1.0, 64.0), (2.0, 64.0), (2.001, 128.0), (3.0, 128.0))
    assert got["b_noise"] == ((1.0, 40.0), (2.0, 140.0), (3.0, 150.0))
    assert got["workers"] == ((1.0, 2.0), (2.0, 2.0), (3.0, 2.0), (3.5, 1.0))
    assert got["lr"] == ((1.0, 0.1), (2.0, 0.1), (3.0, 0.2))


def test_a_run_without_policies_has_no_adaptive_curves(tmp_path):
    got = curves(make_run(tmp_path, "fixed", 2, 10.0) / "events.jsonl")
    assert set(got) == {"train_loss", "eval_accuracy"}


def test_the_report_draws_the_adaptive_figure_only_when_a_run_adapted(tmp_path):
    fixed = make_run(tmp_path / "r", "fixed", 2, 12.0)
    adaptive = _adaptive_run(tmp_path / "r")
    built = reports.build([load_run(fixed), load_run(adaptive)], "t", allow_mixed=True)
    names = {p.name for p in export.write_figures(built, tmp_path / "out")}
    assert {"adaptive.png", "adaptive.svg"} <= names
    assert (tmp_path / "out" / "adaptive.png").stat().st_size > 10_000
    alone = reports.build([load_run(fixed)], "t")
    assert "adaptive.png" not in {p.name for p in export.write_figures(alone, tmp_path / "o2")}


def test_an_adaptive_run_is_open_division_and_stands_apart_from_a_fixed_one(tmp_path):
    fixed = load_run(make_run(tmp_path, "fixed", 2, 12.0, overrides=("policy=none",)))
    adaptive = load_run(_adaptive_run(tmp_path))
    assert (fixed.division, adaptive.division) == ("closed", "open")
    assert adaptive.open_keys == ("policy",)
    built = reports.build([fixed, adaptive], "t", allow_mixed=True)
    assert {c.series for c in built.cells} == {"policy=none", "policy=batch"}


def test_the_live_view_shows_the_noise_scale_the_global_batch_and_the_workers():
    view = TrainingProgress(Console(file=io.StringIO()), 30, "top1_accuracy")
    for event in ADAPTIVE_EVENTS[:3]:
        view.on_event(event)
    info = view.progress.tasks[0].fields["info"]
    assert "B_noise 140" in info and "batch 128" in info and "2 workers" in info
    for event in ADAPTIVE_EVENTS[3:]:  # garbage after it changes nothing it showed
        view.on_event(event)
    info = view.progress.tasks[0].fields["info"]
    assert "B_noise 150" in info and "batch 128" in info and "1 workers" in info


def test_the_live_view_of_a_run_without_policies_shows_none_of_it():
    view = TrainingProgress(Console(file=io.StringIO()), 30, "top1_accuracy")
    view.on_event(_event("train_loss", 0.5, 100))
    assert view.progress.tasks[0].fields["info"] == "loss 0.500"
