"""The runner CLI invoked in-process as a user types it, on a terminal wide enough that table
cells are not wrapped mid-word."""

from click.testing import CliRunner

from runner.cli import main


def invoke(*args, results=None):
    prefix = ["--results-dir", str(results)] if results is not None else []
    # A wide terminal, so that table cells are not wrapped mid-word.
    return CliRunner(env={"COLUMNS": "200"}).invoke(main, [*prefix, *args], catch_exceptions=False)
