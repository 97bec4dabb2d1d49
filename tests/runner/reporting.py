"""Run directories loaded as reports read them, and `runner report` invoked on them: the report
tests' common ground (a scaling study's runs, runs on shaped links)."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from contract import files
from runner.cli import main
from runner.results.runs import load_run
from tests.runner.rundirs import make_run


def load(root, *names):
    return [load_run(root / n) for n in names]


def scaling_runs(root):
    """Five runs at 1 worker, five at 2 (one of which misses the target)."""
    names = []
    for i, t in enumerate([10.0, 11.0, 12.0, 13.0, 30.0]):
        names.append(make_run(root, f"w1-{i}", 1, t, overrides=(f"seed={i}",)).name)
    for i, t in enumerate([5.0, 6.0, None, 7.0, 4.0]):
        names.append(make_run(root, f"w2-{i}", 2, t, overrides=(f"seed={i}",)).name)
    return load(root, *names)


def report_runs(results, *ids):  # type: ignore[no-untyped-def]
    """`runner report` on run ids, as a user types it."""
    return CliRunner(env={"COLUMNS": "250"}).invoke(
        main, ["--results-dir", str(results), "report", *ids, "--out", str(results / "o")],
        catch_exceptions=False,
    )  # fmt: skip


def on_link(run_dir: Path, link: str | None) -> Path:
    """The run as if submitted with --link LINK (None: no --link, the loopback unshaped)."""
    record = files.read_json_object(run_dir / "job.json")
    record["placement"]["link"] = link
    files.write_json(run_dir / "job.json", record)
    return run_dir


def link_runs(root: Path) -> list[str]:
    """Runs of cnn-digits at 1 and 2 workers on 100mbit, unshaped and 10mbit links."""
    names = []
    for link in ("100mbit", None, "10mbit"):
        for workers in (1, 2):
            name = f"{link or 'unshaped'}-w{workers}"
            on_link(make_run(root, name, workers, 10.0 / workers), link)
            names.append(name)
    return names
