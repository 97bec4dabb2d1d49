import json
import shutil

from tests.runner.cli_runner import invoke
from tests.runner.rundirs import make_run


def copy_run(finished_run, tmp_path):
    _, run = finished_run
    results = tmp_path / "results"
    shutil.copytree(run.run_dir, results / run.run_id)
    return results, results / run.run_id


def test_check_passes_a_real_run_and_names_the_rules(finished_run):
    results, run = finished_run
    result = invoke("check", run.run_id, results=results)
    assert result.exit_code == 0, result.output
    assert "rules: cnn-digits (closed division): classification.yaml then common.yaml" in (
        result.output
    )
    assert f"compliant: {run.run_id}" in result.output


def test_check_prints_the_failed_rules_and_exits_1(finished_run, tmp_path):
    results, run_dir = copy_run(finished_run, tmp_path)
    events = run_dir / "events.jsonl"
    kept = [x for x in events.read_text().splitlines() if json.loads(x)["key"] != "run_stop"]
    events.write_text("\n".join(kept) + "\n")
    result = invoke("check", run_dir.name, results=results)
    assert result.exit_code == 1
    assert "Required EXACTLY_ONE occurrence of 'run_stop' but found 0" in result.output
    assert "not compliant" in result.output


def test_check_of_a_local_run_without_events_says_it_logged_none(finished_run, tmp_path):
    """A local run's files are all home: `runner fetch` would only fail again."""
    results, run_dir = copy_run(finished_run, tmp_path)
    (run_dir / "events.jsonl").unlink()
    result = invoke("check", run_dir.name, results=results)
    assert result.exit_code == 1
    assert "ended before its first event" in result.output
    assert "runner fetch" not in result.output


def test_check_of_a_cluster_run_without_events_says_to_fetch_it(tmp_path):
    run_dir = make_run(tmp_path, "run-k", 2, 5.0, stack="gke-gpu-8")
    (run_dir / "events.jsonl").unlink()
    result = invoke("check", run_dir.name, results=tmp_path)
    assert result.exit_code == 1
    assert f"runner fetch {run_dir.name}" in result.output
