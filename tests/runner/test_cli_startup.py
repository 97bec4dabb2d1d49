"""What `runner`, `runner --help` and `runner benchmarks` print and must not import.

They should start about as fast as Python itself (bench/startup.py --cli measures the ratio:
2.7x and 2.9x while they went through click, which alone is 2.1x). So the console script and
`python -m runner.cli` answer them, the second time, with the reply the click group gave the
first time (runner/cli/start.py), importing none of click: the first test holds each such reply
to the click group's own, byte for byte, exit code and stderr included, at two terminal widths,
and lists what a served reply must not import. Speed is not asserted: the modules are, because
a module on these lists that comes back is what makes a start slow. The click group itself
(every other command line, and every reply the first time) is held to its own lists: every
command's --help, and `runner benchmarks` with its cards cached (runner/job/cards.py; the first
listing derives them, importing every benchmark's configs). Each check runs in a fresh
interpreter, so what earlier tests imported does not hide anything.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from runner.cli import start
from tests.runner import startup_runs
from workloads.plugins import points

REPO = Path(__file__).resolve().parents[2]

# What a reply from the cache must not import: click and the group, the job model, the
# workloads, json and hashlib (contract.files' writer imports them; a reply is only read).
NOT_FOR_A_SERVED_REPLY = (
    "click", "rich", "runner.cli.app", "runner.cli.common", "runner.job", "runner.api",
    "workloads", "contract", "json", "hashlib", "typing", "logging",
)  # fmt: skip
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


@pytest.fixture(scope="module")
def pyc(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The bytecode tree the runs share (Python compiles the standard library into it once)."""
    return tmp_path_factory.mktemp("pyc")


def test_every_served_reply_is_the_click_group_s_own_and_imports_no_click(tmp_path, pyc):
    """At two widths (click wraps help to the terminal's, up to 78 columns), the second after
    the first's replies are cached (a reply of another width must not be served): the click
    group alone (the reference), then the console script twice: its first reply is the
    group's, recorded; its second is replayed, and imports none of click."""
    startup_runs.fresh(pyc)
    click_only = startup_runs.click_only(tmp_path)
    assert [list(args) for args in start.SERVED] == [[], ["--help"], ["-h"], ["benchmarks"]]
    for columns in ("60", "120"):
        env = startup_runs.environment(pyc, COLUMNS=columns)
        for args in map(list, start.SERVED):
            clicked = startup_runs.run(args, tmp_path, env, script=click_only)
            first = startup_runs.run(args, tmp_path, env)
            second = startup_runs.run(args, tmp_path, env)
            assert first.reply == clicked.reply, (columns, args)
            assert second.reply == clicked.reply, (columns, args)
            assert "click" in first.modules
            assert startup_runs.offending(second.modules, NOT_FOR_A_SERVED_REPLY) == [], args
        # What the replies are, so that one equal to the reference's is not an empty one.
        assert clicked.code == 0 and "cnn-digits" in clicked.stdout and clicked.stderr == ""
        bare = startup_runs.run([], tmp_path, env)
        assert bare.code == 2 and bare.stdout == "" and bare.stderr.startswith("Usage: runner [")
        helped = startup_runs.run(["--help"], tmp_path, env).stdout
        wrapped = "cluster and\n  collect comparable" in helped
        assert wrapped == (columns == "60")  # wider than 78 columns: on one line


def test_a_terminal_is_served_the_reply_click_gives_a_terminal_of_its_width(tmp_path, pyc):
    """Without COLUMNS click wraps help to the terminal on stdout (its width asked of the
    terminal itself), and styles what it writes to one: a reply recorded for a pipe is not
    served to a terminal, nor one of another width."""
    startup_runs.fresh(pyc)
    env = startup_runs.environment(pyc)
    click_only = startup_runs.click_only(tmp_path)
    piped = startup_runs.run(["--help"], tmp_path, env)  # cached for a pipe, 80 columns
    assert "\r\n" not in piped.stdout
    clicked = startup_runs.run(["--help"], tmp_path, env, click_only, terminal_columns=64)
    first = startup_runs.run(["--help"], tmp_path, env, terminal_columns=64)
    second = startup_runs.run(["--help"], tmp_path, env, terminal_columns=64)
    assert first.reply == clicked.reply and second.reply == clicked.reply
    assert "click" in first.modules and "click" not in second.modules
    assert "cluster and\r\n  collect comparable" in clicked.stdout  # wrapped to 62
