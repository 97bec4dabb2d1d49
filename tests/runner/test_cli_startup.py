"""What `runner --help` (and every command's --help) and `runner benchmarks` must not import.

They should start about as fast as Python itself (bench/startup.py --cli measures the ratio;
it was 2.56x when the help path had come to import the API, the job model and the workloads'
configuration). Speed is not asserted here: the modules are, because a module on this list
that comes back on the help path is what made it slow. Each check runs in a fresh interpreter
and reads its sys.modules, so what earlier tests imported does not hide anything. A new
command (`runner plugins`, say) is covered the day it is added: every command's --help runs.
`runner benchmarks` is checked as a user meets it the second time: with its cards cached
(runner/job/cards.py; the first listing derives them, importing every benchmark's configs).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from workloads.plugins import points

REPO = Path(__file__).resolve().parents[2]

# What a command's body imports, never its --help: heavy libraries (each an extra), and our
# own modules that pull in the job model, the backends or the workloads.
HEAVY = ("torch", "numpy", "pulumi", "kubernetes", "matplotlib", "aiohttp", "yaml", "rich")
NOT_FOR_HELP = (
    *HEAVY,
    "logging",  # -v only
    "secrets",  # contract.files' temporary names; hashlib with it
    "runner.api",
    "runner.backends",
    "runner.job",
    "runner.results",
    "runner.dashboard",
    "runner.stack",
    "runner.datasets",
    "runner.cli.views",
    "runner.cli.progress",
    "workloads",
    "contract.summary",
    "contract.events",
)
# `runner benchmarks` reads its cached cards and prints them in columns: none of the
# benchmarks' components (models, data sets, tasks, optimizers, strategies), nor the
# installed distributions' metadata (the entry-point scan), nor rich, nor a run's machinery.
NOT_FOR_BENCHMARKS = (
    *HEAVY,
    "importlib.metadata",
    "logging",
    "runner.api",
    "runner.backends",
    "runner.results",
    "runner.dashboard",
    "runner.datasets",
    "runner.job.spec",
    "runner.job.benchmarks",
    "runner.cli.views",
    "workloads.configuration.train_config",
    "workloads.models",
    "workloads.data",
    "workloads.tasks",
    "workloads.optimization.optim",
    "workloads.optimization.schedule",
    "workloads.strategies",
    "workloads.adaptive",
    "workloads.compliance",
    "contract.summary",
    "contract.events",
)

IMPORTED_AFTER = """
import json, sys
from runner.cli import main
for args in {argv}:
    try:
        main(args)
    except SystemExit:
        pass
print("MODULES", json.dumps(sorted(sys.modules)))
"""


def _run(argv: list[list[str]], pyc: Path | None = None) -> tuple[set[str], str]:
    """(the modules imported, the output) after running each argv in a fresh interpreter;
    `pyc`: its bytecode tree (PYTHONPYCACHEPREFIX), where caches beside the code live."""
    code = IMPORTED_AFTER.format(argv=json.dumps(argv))
    env = dict(os.environ)
    if pyc is not None:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = str(pyc)
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True,
        timeout=120,
    )  # fmt: skip
    output, _, line = proc.stdout.rpartition("MODULES ")
    assert line, proc.stdout + proc.stderr
    return set(json.loads(line)), output


def _modules_after(argv: list[list[str]]) -> set[str]:
    return _run(argv)[0]


def _offending(modules: set[str], banned: tuple[str, ...]) -> list[str]:
    return sorted(m for m in modules if any(m == b or m.startswith(b + ".") for b in banned))


def _commands() -> list[list[str]]:
    """Every command and subcommand, as the argv of its --help."""
    import click

    from runner.cli import main

    out = [["--help"]]

    def walk(group: click.Group, prefix: list[str]) -> None:
        for name, command in group.commands.items():
            out.append([*prefix, name, "--help"])
            if isinstance(command, click.Group):
                walk(command, [*prefix, name])

    walk(main, [])
    return out


def test_help_of_the_runner_and_of_every_command_imports_none_of_the_commands_machinery():
    argv = _commands()
    assert ["submit", "--help"] in argv and ["data", "fetch", "--help"] in argv
    assert _offending(_modules_after(argv), NOT_FOR_HELP) == []


def test_benchmarks_lists_every_benchmark_from_its_cards_without_their_code(tmp_path):
    argv = [["--results-dir", str(tmp_path / "results"), "benchmarks"]]
    derived, first = _run(argv, tmp_path / "pyc")  # derives the cards, and caches them
    assert "runner.job.benchmarks" in derived
    modules, listed = _run(argv, tmp_path / "pyc")
    assert _offending(modules, NOT_FOR_BENCHMARKS) == []
    assert listed == first
    for entry in points.BENCHMARKS.entries().values():  # installed plugins' too
        assert entry.name in listed and entry.origin in listed
