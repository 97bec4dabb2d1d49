"""The adaptive study's bookkeeping (bench/adaptive_arms.py) on run directories written by hand
in the real formats (tests/runner/rundirs.py), with decision events as workloads/adaptive
records them: which arm a run is, the pairs by seed, a run that did not adapt said so and
kept out of the headline ratio, a damaged decision not counted. No run is started."""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

import pytest

from bench import adaptive_arms as arms
from contract.events import DECISION
from runner.results import rundir
from tests.runner.rundirs import make_run

BATCH = ("policy=batch", "compile_model=false")
FIXED = ("policy=none", "compile_model=false")


def decide(run_dir: Path, *decisions: tuple[int, str, Any, Any], value: Any = None) -> None:
    """Appends decision events (step, knob, old, new), or one event of this raw `value`."""
    values = [value] if value is not None else [
        {"step": step, "time_s": step / 10, "policy": "p", "knob": knob, "old": old,
         "new": new, "reason": "test", "evidence": {"statistic": "s", "readings": [1.0] * 5}}
        for step, knob, old, new in decisions
    ]  # fmt: skip
    with open(run_dir / rundir.EVENTS, "a", encoding="utf-8") as f:
        for v in values:
            event = {"namespace": "", "time_ms": 1_700_000_000_500, "key": DECISION,
                     "event_type": "POINT_IN_TIME", "value": v, "metadata": {}}  # fmt: skip
            f.write(json.dumps(event) + "\n")


def batch_run(root: Path, name: str, seed: int, tta_s: float | None, adaptive: bool) -> Path:
    sets = (*(BATCH if adaptive else FIXED), f"seed={seed}")
    return make_run(root, name, 2, tta_s, overrides=sets)


@pytest.fixture
def study(tmp_path: Path) -> Path:
    """Seeds 0-3: pairs whose adaptive run changed the batch; seed 4: a pair whose adaptive
    run never did (and was much faster: it must not reach the headline); seed 5: a fixed run
    alone; and a second adaptive run of seed 0."""
    for seed, (fixed_s, adaptive_s) in enumerate([(10, 6), (12, 7), (11, 6.5), (9, 5.5)]):
        batch_run(tmp_path, f"f{seed}", seed, fixed_s, adaptive=False)
        decide(batch_run(tmp_path, f"a{seed}", seed, adaptive_s, adaptive=True),
               (130, "global_batch", 16, 64), (130, "lr_factor", 1.0, 4.0))  # fmt: skip
    batch_run(tmp_path, "f4", 4, 10.0, adaptive=False)
    decide(batch_run(tmp_path, "a4", 4, 1.0, adaptive=True), (20, "lr_factor", 1.0, 2.0))
    batch_run(tmp_path, "f5", 5, 10.0, adaptive=False)
    batch_run(tmp_path, "a0-again", 0, 3.0, adaptive=True)
    return tmp_path


def test_runs_pair_by_seed_and_a_run_that_did_not_adapt_is_said_and_left_out(study):
    runs, skipped = arms.load_folder(study)
    assert skipped == []
    c = arms.compare("batch", runs)
    assert [(f.run_id, a.run_id) for f, a in c.pairs] == [
        ("f0", "a0"), ("f1", "a1"), ("f2", "a2"), ("f3", "a3"), ("f4", "a4")
    ]  # fmt: skip
    assert {r.run_id for r in c.unpaired} == {"f5", "a0-again"}
    assert c.adapted_runs == 4
    assert c.pairs[0][1].adaptation == arms.Adaptation(True, "batch 16 -> 64 at step 130")
    assert c.pairs[0][0].adaptation is None  # a fixed run decides nothing
    lone = c.pairs[4][1].adaptation
    assert lone is not None and not lone.adapted and "did not adapt" in lone.what
    # The headline is the adapted pairs alone; every pair lets seed 4's 1 s run in.
    expected = statistics.fmean([6, 7, 6.5, 5.5]) / statistics.fmean([10, 12, 11, 9])
    assert c.adapted.ratio == pytest.approx(expected)
    assert (c.adapted.runs_a, c.adapted.runs_b) == (4, 4)
    assert c.every.runs_a == 5 and c.every.ratio is not None and c.every.ratio < expected
    assert arms.ratio_text(c.adapted).startswith(f"{expected:.2f} (")


def test_too_few_adapted_pairs_give_no_ratio_whatever_every_pair_says(tmp_path):
    for seed in range(3):
        batch_run(tmp_path, f"f{seed}", seed, 10.0, adaptive=False)
        batch_run(tmp_path, f"a{seed}", seed, 5.0, adaptive=True)  # no decision at all
    c = arms.compare("batch", arms.load_folder(tmp_path)[0])
    assert c.adapted_runs == 0 and c.adapted.ratio is None
    assert c.every.ratio == pytest.approx(0.5)
    assert arms.ratio_text(c.adapted).startswith("too few runs reached the target (0 adaptive")


def test_a_sync_run_adapted_only_when_it_switched_and_a_damaged_decision_is_none(tmp_path):
    switched = make_run(tmp_path, "s", 2, 5.0, overrides=("seed=1",))
    decide(switched, (40, "sync_mode", "exact", "averaging"),
           (40, "averaging_period", 2, 2), (90, "averaging_period", 2, 4))  # fmt: skip
    never = make_run(tmp_path, "n", 2, 5.0)
    decide(never, value={"step": "40", "time_s": 1.0, "knob": "sync_mode", "new": "averaging"})
    decide(never, value=["not", "an", "object"])
    runs = {r.run_id: r for r in arms.load_folder(tmp_path)[0]}
    assert arms.decisions(runs["n"]) == []
    done = arms.adaptation("sync", arms.decisions(runs["s"]))
    assert done.adapted and done.what.startswith("mode exact -> averaging at step 40")
    assert "period 2 -> 4 at step 90" in done.what
    not_done = arms.adaptation("sync", arms.decisions(runs["n"]))
    assert not not_done.adapted and "never switched" in not_done.what


def test_an_elastic_run_adapted_only_when_a_worker_left_and_one_joined():
    left = arms.Decision(40, 3.4, "workers", 2, 1)
    joined = arms.Decision(300, 21.0, "workers", 1, 2)
    assert arms.adaptation("elastic", [left, joined]) == arms.Adaptation(
        True, "workers 2 -> 1 at 3.4 s; workers 1 -> 2 at 21.0 s"
    )
    only_left = arms.adaptation("elastic", [left])
    assert not only_left.adapted
    assert only_left.what == "did not adapt: no worker joined before the run ended " \
        "(workers 2 -> 1 at 3.4 s)"  # fmt: skip
    assert arms.adaptation("elastic", []).what == "did not adapt: no worker left"


def test_the_arm_is_the_policy_or_the_elastic_range(tmp_path):
    fixed = make_run(tmp_path, "fixed", 2, 5.0, overrides=FIXED)
    make_run(tmp_path, "adaptive", 2, 5.0, overrides=BATCH)
    elastic = make_run(tmp_path, "elastic", 2, 5.0)
    job = json.loads((elastic / rundir.JOB).read_text())
    job["placement"]["min_workers"] = 1  # as `--workers 1:2` records it
    (elastic / rundir.JOB).write_text(json.dumps(job))
    runs = {r.run_id: r for r in arms.load_folder(tmp_path)[0]}
    assert arms.arm_of(runs["fixed"]) == arms.FIXED
    assert arms.arm_of(runs["adaptive"]) == arms.ADAPTIVE
    assert arms.arm_of(runs["elastic"]) == arms.ADAPTIVE
    assert arms.seed_of(runs["fixed"]) == 0 and fixed.is_dir()
