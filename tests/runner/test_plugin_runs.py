"""Plugins end to end: real runs of a user's code through `runner submit --plugin`, with
everything a reference run has, and a faulty plugin failing like any run."""

from __future__ import annotations

import json
from pathlib import Path

import psutil
import pytest
from click.testing import CliRunner

from contract.manifest import parse_manifest
from runner.cli import main
from tests.workloads.plugin_packages import BENCHMARK_FOLDER, isolated_registries, write_package

pytestmark = pytest.mark.slow

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "stackbench-example"

FAULTY_OPTIMIZER = """
    from dataclasses import dataclass
    from typing import Literal
    from workloads.optimization.optim import OptimizerConfig
    from workloads.plugins import points


    @points.OPTIMIZERS.register
    @dataclass(frozen=True, kw_only=True)
    class FaultyConfig(OptimizerConfig):
        name: Literal["{name}"] = "{name}"

        def build(self, params, lr, extra_weight_decay=0.0):
            from {package}.step import Faulty
            return Faulty(params, lr)
"""
FAULTY_STEP = """
    import torch


    class Faulty(torch.optim.SGD):
        @torch.no_grad()
        def step(self, closure=None):
            {body}
"""


def submit(results: Path, *args: str):
    runner = CliRunner(env={"COLUMNS": "200"})
    return runner.invoke(main, ["--results-dir", str(results), "submit", *args],
                         catch_exceptions=False)  # fmt: skip


def only_run(results: Path) -> Path:
    (run_dir,) = [p for p in results.iterdir() if p.is_dir()]
    return run_dir


def no_process_left(run_dir: Path) -> bool:
    return not any(str(run_dir) in " ".join(p.info["cmdline"] or ())
                   for p in psutil.process_iter(["cmdline"]))  # fmt: skip


def test_the_example_plugin_trains_on_two_workers_with_a_reference_runs_record(tmp_path):
    with isolated_registries(EXAMPLE):
        result = submit(
            tmp_path, "cnn-digits", "--workers", "2", "--plugin", str(EXAMPLE),
            "--set", "strategy=topk", "--set", "topk_ratio=0.1", "--set", "optimizer=lamb",
            "--set", "lr=0.01", "--set", "policy=noise-lr", "--set", "max_epochs=2",
            "--set", "stop_at_target=false",
        )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "(open division)" in result.output and "with plugin stackbench" in result.output
    assert "communication" in result.output and "SUCCEEDED" in result.output
    run_dir = only_run(tmp_path)
    manifest = parse_manifest(json.loads((run_dir / "manifest.json").read_text()))
    (plugin,) = manifest.plugins
    assert plugin.name.replace("-", "_") == "stackbench_example"
    assert len(plugin.source_sha256) == 64
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["division"] == "open" and summary["strategy"] == "topk"
    assert summary["adaptive"]["policies"] == ["noise-lr"]
    events = (run_dir / "events.jsonl").read_text()
    assert '"key": "stackbench_monitors"' in events and '"key": "eval_accuracy"' in events


def test_a_benchmark_folder_from_a_temporary_package_runs_to_its_target(tmp_path):
    write_package(tmp_path / "src", "blobsbench", BENCHMARK_FOLDER)
    with isolated_registries(tmp_path / "src"):
        result = submit(tmp_path / "results", "blobs-mlp", "--plugin",
                        str(tmp_path / "src" / "blobsbench"))  # fmt: skip
    assert result.exit_code == 0, result.output
    summary = json.loads((only_run(tmp_path / "results") / "summary.json").read_text())
    assert summary["benchmark"] == "blobs-mlp" and summary["target_reached"] is True


def test_a_plugin_that_raises_in_the_step_fails_the_run_in_one_line_naming_it(tmp_path):
    """A diverged run (NaN weights) and a hung one end as any run does (workloads/training/
    divergence.py, workloads/runtime/watchdog.py), their line naming the plugins the run
    used (train.py)."""
    package = "faulty_step"
    write_package(tmp_path / "src", package, {
        "__init__.py": FAULTY_OPTIMIZER.format(name="faulty", package=package),
        "step.py": FAULTY_STEP.format(body='raise RuntimeError("boom")'),
    })  # fmt: skip
    with isolated_registries(tmp_path / "src"):
        result = submit(tmp_path / "results", "cnn-digits", "--workers", "1", "--plugin",
                        str(tmp_path / "src" / package), "--set", "optimizer=faulty",
                        "--set", "max_epochs=1")  # fmt: skip
    assert result.exit_code == 1, result.output
    assert "plugin faulty_step: RuntimeError: boom" in result.output
    assert "Traceback" not in result.output
    assert no_process_left(only_run(tmp_path / "results"))
