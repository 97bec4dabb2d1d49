"""The teardown tests' common ground: a copy of this project with a stack's deletion protection
as given (where the fake `pulumi` of the pulumi_log fixture, conftest.py, runs), the CLI
invoked on a results directory, and the calls the fake recorded."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from runner.cli import main

STACK = "gke-gpu-8"
REPO = Path(__file__).resolve().parents[2]


def project_copy(root: Path, protected: bool) -> Path:
    """This project's Pulumi.yaml and the stack's settings file, deletion protection as given."""
    (root / "stacks").mkdir(parents=True)
    (root / "Pulumi.yaml").write_text((REPO / "Pulumi.yaml").read_text())
    settings = (REPO / "stacks" / f"Pulumi.{STACK}.yaml").read_text()
    settings += f"  stackbench:deletionProtection: '{str(protected).lower()}'\n"
    (root / "stacks" / f"Pulumi.{STACK}.yaml").write_text(settings)
    return root


def invoke(results, *args):
    return CliRunner(env={"COLUMNS": "200"}).invoke(
        main, ["--results-dir", str(results), *args], catch_exceptions=False
    )


def calls(log: Path) -> list[str]:
    return log.read_text().splitlines() if log.exists() else []
