"""A run that ends nearer its task's chance level than its target says "did not learn" in its
last line, the runs table and its summary, not only "not reached" (issue 33: 4-worker runs at
accuracy 0.10 and 0.36 read as SUCCEEDED, their miss visible only in the summary)."""

from __future__ import annotations

import dataclasses
import io

import pytest
from rich.console import Console

from contract import files
from contract.rundir import JobState, JobStatus
from contract.summary import CHANCE, Evaluation, parse_summary
from runner import api
from runner.cli import views
from runner.results import rundir
from tests.runner.rundirs import make_run, summary


def summary_ending_at(accuracy: float, chance: object = 0.1, reached: bool = False):
    parsed = parse_summary(summary("r", 4, 3.0 if reached else None, 100))
    final = Evaluation(30, accuracy, 50.0, 2.3, {CHANCE: chance} if chance is not None else {})
    return dataclasses.replace(parsed, final=final, target_reached=reached)


@pytest.mark.parametrize("accuracy", [0.1003, 0.36, 0.5249])
def test_an_accuracy_nearer_chance_than_the_target_did_not_learn(accuracy):
    verdict = summary_ending_at(accuracy).did_not_learn
    assert verdict == f"did not learn (top1_accuracy {accuracy:.2f}, chance 0.10)"


@pytest.mark.parametrize(
    ("accuracy", "chance", "reached"),
    [(0.9, 0.1, False), (0.53, 0.1, False), (0.96, 0.1, True), (0.1, None, False),
     (0.1, "0.1", False), (0.1, 1.5, False), (0.1, True, False)],
)  # fmt: skip
def test_a_run_that_learned_or_whose_chance_is_unknown_or_garbage_gets_no_verdict(
    accuracy, chance, reached
):
    assert summary_ending_at(accuracy, chance, reached).did_not_learn is None


def test_the_last_line_of_a_followed_run_and_its_headline_say_it(tmp_path):
    run_dir = make_run(tmp_path, "r", 4, None)
    files.write_json(run_dir / rundir.SUMMARY, summary_ending_at(0.1003).to_dict())
    run = api.Run(run_dir, rundir.read_record(run_dir))
    out = io.StringIO()
    status = JobStatus(JobState.SUCCEEDED, "", None)
    views.print_outcome(Console(file=out, width=300), run, api.Outcome(run, status))
    last = out.getvalue().strip().splitlines()[-1]
    assert last.startswith("SUCCEEDED  did not learn (top1_accuracy 0.10, chance 0.10)")
    assert f"results: {run_dir}" in last
    headline = views.headline(rundir.read_summary(run_dir), status)
    assert headline.endswith("not reached; did not learn (top1_accuracy 0.10, chance 0.10)")
