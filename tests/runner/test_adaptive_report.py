"""An adaptive run's curves and figure in a report, and its figures in the live view of a
followed run: read from its stackbench_monitors and stackbench_decision events, garbage in
those events ignored."""

from __future__ import annotations

import io
import json

import matplotlib
from rich.console import Console

from contract import files
from runner.cli.progress import TrainingProgress
from runner.job.spec import Placement, resolve
from runner.results import export, rundir
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
    assert "B_noise 150" in info and "batch 128" in info
    assert "1 worker" in info and "1 workers" not in info


def test_the_live_view_of_a_run_without_policies_shows_none_of_it():
    view = TrainingProgress(Console(file=io.StringIO()), 30, "top1_accuracy")
    view.on_event(_event("train_loss", 0.5, 100))
    assert view.progress.tasks[0].fields["info"] == "loss 0.500"


def _elastic_run(root, run_id, time_to_target_s):
    """A run as `--workers 2:3 --set strategy=allreduce` records it: open division with no
    --set key to say so (its range is the placement's)."""
    run_dir = make_run(root, run_id, 3, time_to_target_s, overrides=("strategy=allreduce",))
    placement = Placement(1, 3, "cpu", min_workers=2)
    spec = resolve("cnn-digits", ["strategy=allreduce"], placement, run_id=run_id)
    job = files.read_json_object(run_dir / rundir.JOB)
    files.write_json(run_dir / rundir.JOB, job | spec.to_dict() | {"created_at": job["created_at"]})
    return run_dir


def test_an_open_run_never_shares_a_cell_with_closed_runs_of_the_same_label(tmp_path):
    fixed = load_run(make_run(tmp_path, "fixed", 3, 10.0, overrides=("strategy=allreduce",)))
    elastic = load_run(_elastic_run(tmp_path, "elastic", 30.0))
    assert (fixed.division, elastic.division, elastic.world_size) == ("closed", "open", 3)
    built = reports.build([fixed, elastic], "t", allow_mixed=True)
    cells = {c.series: [r.run_id for r in c.runs] for c in built.cells}
    assert cells == {
        "strategy=allreduce, division=closed": ["fixed"],
        "strategy=allreduce, division=open": ["elastic"],
    }
    assert {c.tta.mean_s for c in built.cells} == {10.0, 30.0}  # never their mean, 20


def test_the_log_axes_of_the_figures_read_as_numbers_not_markup(tmp_path):
    """Labels are never mathtext (a --set value may hold `$`); the log axes' ticks, which
    matplotlib writes as mathtext, must still read as numbers in the files written."""
    fixed = make_run(tmp_path / "r", "fixed", 2, 12.0)
    built = reports.build([load_run(fixed), load_run(_adaptive_run(tmp_path / "r"))], "t",
                          allow_mixed=True)  # fmt: skip
    with matplotlib.rc_context({"svg.fonttype": "none"}):  # the SVG's text as text
        written = export.write_figures(built, tmp_path / "out")
    texts = {p.name: p.read_text() for p in written if p.suffix == ".svg"}
    assert {"curves.svg", "adaptive.svg"} <= set(texts)
    for name, svg in texts.items():
        assert "mathdefault" not in svg, name
    assert ">100<" in texts["adaptive.svg"]  # the global batch's 64 to 128, on a log axis
