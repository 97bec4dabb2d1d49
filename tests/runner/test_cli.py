"""The runner CLI in-process (click's CliRunner), as a user types it: help and the benchmark
listings, usage errors that say what to change (unknown names, bad --set items and worker
counts, absurd counts, an elastic DDP run), dry runs that print the resolved job and run
nothing, a real local submit, the run commands on a finished run, and what a run's summary
says. What the CLI writes to a terminal or a pipe is in test_cli_output.py."""

import json
import re
import subprocess
import sys

import pytest
from rich.console import Console

from contract.summary import TrainSummary, parse_summary
from runner.cli import views
from runner.job.benchmarks import BENCHMARKS
from tests.runner.cli_runner import invoke
from tests.runner.rundirs import summary


def test_help_lists_the_commands_with_examples():
    result = invoke("--help")
    assert result.exit_code == 0
    for command in ("benchmarks", "submit", "runs", "status", "logs", "fetch", "cancel"):
        assert command in result.output
    assert "runner submit cnn-digits" in result.output


def test_benchmarks_lists_every_registered_benchmark():
    result = invoke("benchmarks")
    assert result.exit_code == 0
    for name in BENCHMARKS:
        assert name in result.output


def test_benchmarks_with_a_name_lists_its_keys_with_range_and_division():
    result = invoke("benchmarks", "transformer-wmt17")
    assert result.exit_code == 0
    rows = {line.split("│")[1].strip(): line for line in result.output.splitlines() if "│" in line}
    assert set(rows) - {""} == set(BENCHMARKS["transformer-wmt17"].config.flat_keys())
    assert "a finite number in (0, 1000]" in rows["lr"] and "tunable" in rows["lr"]
    assert "open" in rows["dropout"] and "free" in rows["seed"]


def test_benchmarks_with_an_unknown_name_is_a_usage_error():
    result = invoke("benchmarks", "resnet-imaginary")
    assert result.exit_code == 2 and "cnn-digits" in result.output


def test_submit_unknown_benchmark_is_a_usage_error_listing_the_names(tmp_path):
    result = invoke("submit", "resnet-imaginary", results=tmp_path)
    assert result.exit_code == 2
    assert "cnn-digits" in result.output
    assert not any(tmp_path.iterdir())  # nothing was created


@pytest.mark.parametrize(
    ("item", "expected"),
    [
        ("learning_rate=1", "valid keys"),
        ("lr=abc", "expected a finite number"),
        ("lr", "key=value"),
    ],
)
def test_submit_bad_set_is_a_usage_error_saying_what_to_change(tmp_path, item, expected):
    result = invoke("submit", "cnn-digits", "--set", item, results=tmp_path)
    assert result.exit_code == 2
    assert "--set" in result.output and expected in result.output


def test_submit_zero_workers_is_a_usage_error(tmp_path):
    result = invoke("submit", "cnn-digits", "--workers", "0", results=tmp_path)
    assert result.exit_code == 2
    assert "--workers" in result.output


@pytest.mark.parametrize(
    ("workers", "expected"),
    [
        ("0", "expected N >= 1 or 1 <= MIN <= MAX, got '0'"),
        ("3:2", "expected N >= 1 or 1 <= MIN <= MAX, got '3:2'"),
        ("a:b", "expected N or MIN:MAX (2 or 2:4), got 'a:b'"),
    ],
)
def test_a_bad_workers_value_is_one_line_saying_what_it_takes(tmp_path, workers, expected):
    result = invoke("submit", "cnn-digits", "--workers", workers, results=tmp_path)
    assert result.exit_code == 2
    [line] = [ln for ln in result.output.splitlines() if ln.startswith("Error")]
    assert line == f"Error: Invalid value for '--workers': {expected}"
    assert "Traceback" not in result.output


@pytest.mark.parametrize(
    "args",
    [
        ("submit", "cnn-digits", "--workers", "99999999999", "--dry-run"),
        ("submit", "cnn-digits", "--workers", "1:99999999999", "--dry-run"),
        ("sweep", "cnn-digits", "--workers", "1,99999999999", "--runs", "1"),
        ("sweep", "cnn-digits", "--workers", "1", "--runs", "100000000"),
    ],
)
def test_absurd_worker_and_run_counts_are_refused_before_anything_is_built(tmp_path, args):
    # Unrefused, each of these builds (then starts) billions of processes or runs: the command
    # never returns and eats the machine's memory.
    result = invoke(*args, results=tmp_path)
    assert result.exit_code == 2, result.output
    assert "1024" in result.output or "1<=x<=1000" in result.output
    assert not tmp_path.exists() or not any(tmp_path.iterdir())


def test_an_elastic_run_with_a_ddp_strategy_is_refused_naming_the_fix(tmp_path):
    result = invoke("submit", "cnn-digits", "--workers", "2:3", "--dry-run", results=tmp_path)
    assert result.exit_code == 2
    assert "--set strategy=allreduce" in result.output


def test_an_elastic_dry_run_prints_each_worker_on_the_supervisors_store(tmp_path):
    result = invoke("submit", "cnn-digits", "--workers", "2:3", "--set", "strategy=allreduce",
                    "--dry-run", results=tmp_path)  # fmt: skip
    assert result.exit_code == 0, result.output
    job, end = json.JSONDecoder().raw_decode(result.output)
    assert job["division"] == "open" and job["placement"]["min_workers"] == 2
    lines = result.output[end:].strip().splitlines()
    port = re.search(r"store on 127\.0\.0\.1:(\d+); the run goes on while 2 are left", lines[0])
    assert port is not None
    workers = [ln for ln in lines[1:] if ln.startswith("cd ")]
    assert len(workers) == 3 and all("torchrun" not in w for w in workers)
    for i, line in enumerate(workers):
        assert f"MASTER_PORT={port.group(1)}" in line and f"STACKBENCH_MEMBER=w{i}" in line
        assert "WORLD_SIZE=3" in line and "-m workloads.train " in line
        assert "--elastic 2:3" in line


def test_dry_run_prints_the_resolved_job_and_command_and_runs_nothing(tmp_path):
    result = invoke("submit", "cnn-digits", "--dry-run", "--set", "momentum=0.5", results=tmp_path)
    assert result.exit_code == 0
    job, end = json.JSONDecoder().raw_decode(result.output)
    assert job["division"] == "open"
    assert job["config"]["optimizer"]["momentum"] == 0.5
    command = result.output[end:].strip()
    # One process per rank, started directly with torchrun's variables (no agent between).
    ranks = [ln for ln in command.splitlines() if ln.startswith("cd ")]
    assert len(ranks) == 2 and all("torchrun" not in ln for ln in ranks)
    port = re.search(r"MASTER_PORT=(\d+)", ranks[0])
    assert port is not None
    for rank, line in enumerate(ranks):
        assert f"RANK={rank} " in line and f"LOCAL_RANK={rank} " in line
        assert f"MASTER_ADDR=127.0.0.1 MASTER_PORT={port.group(1)} " in line
        assert "WORLD_SIZE=2" in line and "-m workloads.train " in line
    assert f"--run-id {job['run_id']}" in command
    # The LR the run will use, and how it follows from the benchmark's (linear scaling, 2 workers).
    assert "lr 0.05 -> 0.1 (linear x 2 workers" in result.stderr
    assert not tmp_path.exists() or not any(tmp_path.iterdir())


@pytest.mark.slow
def test_submit_runs_locally_and_prints_the_summary(tmp_path):
    result = invoke("submit", "cnn-digits", "--workers", "2", results=tmp_path)
    assert result.exit_code == 0, result.output
    assert "Summary of cnn-digits-" in result.output
    assert "time to target" in result.output
    assert "communication share" in result.output
    assert "SUCCEEDED" in result.output


def test_runs_json_reports_state_and_headline_metric(finished_run):
    results, run = finished_run
    result = invoke("runs", "--json", results=results)
    assert result.exit_code == 0
    (entry,) = [r for r in json.loads(result.output) if r["run_id"] == run.run_id]
    assert entry["status"]["state"] == "SUCCEEDED"
    assert entry["summary"]["target_reached"] is True
    table = invoke("runs", results=results).output
    assert "target in" in table


def test_status_logs_and_fetch_work_on_a_finished_run(finished_run):
    results, run = finished_run
    assert "SUCCEEDED" in invoke("status", run.run_id, results=results).output
    logs = invoke("logs", run.run_id, "--rank", "0", results=results)
    assert logs.exit_code == 0 and "run_stop" in logs.output
    assert ":::MLLOG" not in logs.output  # events are rendered as readable lines
    raw = invoke("logs", run.run_id, "--rank", "0", "--raw", results=results)
    assert ':::MLLOG {"namespace"' in raw.output
    fetched = invoke("fetch", run.run_id[:-2], results=results)  # a prefix is enough
    assert fetched.exit_code == 0 and "complete" in fetched.output


def test_logs_of_a_rank_that_does_not_exist_names_the_valid_ranks(finished_run):
    results, run = finished_run
    result = invoke("logs", run.run_id, "--rank", "5", results=results)
    assert result.exit_code == 2  # the user's input, said in one line
    assert "ranks 0-1" in result.output


def test_unknown_run_says_how_to_list_runs(tmp_path):
    result = invoke("status", "no-such-run", results=tmp_path)
    assert result.exit_code == 2
    assert "runner runs" in result.output


def test_cancel_of_a_finished_run_changes_nothing(finished_run):
    results, run = finished_run
    assert "SUCCEEDED" in invoke("cancel", run.run_id, "--yes", results=results).output


def test_join_refuses_a_run_that_is_not_elastic_in_one_line(finished_run):
    results, run = finished_run
    result = invoke("join", run.run_id, results=results)
    assert result.exit_code == 2
    assert result.output.strip().count("\n") == 0
    assert "is not elastic; only a run submitted with --workers MIN:MAX" in result.output


def test_the_cli_starts_without_importing_torch():
    code = (
        "import sys; from click.testing import CliRunner; from runner.cli import main; "
        "CliRunner().invoke(main, ['--help']); CliRunner().invoke(main, ['benchmarks']); "
        "print('torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_the_summary_of_an_adaptive_run_says_what_its_policies_did():
    written = summary("adaptive-1", 2, 12.5, steps=100) | {
        "adaptive": {
            "policies": ["batch"], "monitor_interval_steps": 10, "decisions": 2,
            "decisions_by_knob": {"global_batch": 2}, "final": {"global_batch": 128},
            "b_noise": 66.4,
        }
    }  # fmt: skip
    record = parse_summary(written)
    assert isinstance(record, TrainSummary)
    console = Console(record=True, width=200)
    console.print(views.summary_table(record))
    text = " ".join(console.export_text().split())
    assert "(global batch 64 samples at the start)" in text
    assert "batch: 2 decisions (global_batch 2); at the end global_batch 128; B_noise 66" in text


def test_a_run_its_time_budget_stopped_says_so_where_its_target_is_missed():
    record = parse_summary(
        summary("budget-1", 2, None, steps=100) | {"stopped_by_time_budget": True}
    )
    assert isinstance(record, TrainSummary)
    line = views.headline(record)
    assert line.endswith("target 0.95 not reached: the time budget stopped it"), line
    console = Console(record=True, width=200)
    console.print(views.summary_table(record))
    assert "│ stopped │ by its time budget (--set time_budget_s) │" in " ".join(
        console.export_text().split()
    )
    # A run that ran out its epochs says nothing of a budget.
    plain_miss = parse_summary(summary("budget-2", 2, None, steps=100))
    assert isinstance(plain_miss, TrainSummary)
    assert views.headline(plain_miss).endswith("not reached")


def test_the_summary_names_a_precision_other_than_fp32():
    console = Console(record=True, width=200)
    for precision in ("bf16", "fp32"):
        record = parse_summary(summary("p-1", 2, 3.0, steps=10) | {"precision": precision})
        assert isinstance(record, TrainSummary)
        console.print(views.summary_table(record))
    text = " ".join(console.export_text().split())
    assert text.count("│ precision │ bf16 │") == 1 and "│ precision │ fp32" not in text
