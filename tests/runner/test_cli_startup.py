"""What `runner --help` (and every command's --help) and `runner benchmarks` must not import.

They should start about as fast as Python itself (bench/startup.py --cli measures the ratio;
it was 2.56x when the help path had come to import the API, the job model and the workloads'
configuration). Speed is not asserted here: the modules are, because a module on this list
that comes back on the help path is what made it slow. Each check runs in a fresh interpreter
and reads its sys.modules, so what earlier tests imported does not hide anything. A new
command (`runner plugins`, say) is covered the day it is added: every command's --help runs.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

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
# `runner benchmarks` reads the registry and draws a table: rich and the benchmarks' own
# configuration, but nothing of a run's machinery.
NOT_FOR_BENCHMARKS = (
    "torch",
    "numpy",
    "pulumi",
    "kubernetes",
    "matplotlib",
    "aiohttp",
    "runner.api",
    "runner.backends",
    "runner.results",
    "runner.dashboard",
    "runner.job.spec",
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


def _modules_after(argv: list[list[str]]) -> set[str]:
    code = IMPORTED_AFTER.format(argv=json.dumps(argv))
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    line = next((x for x in proc.stdout.splitlines() if x.startswith("MODULES ")), None)
    assert line is not None, proc.stdout + proc.stderr
    return set(json.loads(line.removeprefix("MODULES ")))


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


def test_benchmarks_lists_the_registry_without_the_api_backends_or_torch(tmp_path):
    modules = _modules_after([["--results-dir", str(tmp_path), "benchmarks"]])
    assert "runner.job.benchmarks" in modules  # it did list them
    assert _offending(modules, NOT_FOR_BENCHMARKS) == []
