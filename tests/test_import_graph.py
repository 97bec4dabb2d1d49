"""The layering of the project's packages, from their import graph (tests/import_graph.py).

- contract/ is below everything: it imports none of runner, workloads or infra;
- the runner never imports the Pulumi program (infra/), and the program never the runner:
  what both need of a stack lives in contract/;
- backends are built in one place (runner/backends/factory.py): outside runner/backends/,
  nothing imports a backend's package, except that runner/job/target.py connects to a
  cluster when it reads the options (kubernetes/connection.py, no backend);
- the dashboard and runner/results/ never import the command line (runner.cli): what the
  CLI and they share (`runner logs`' event text, say) lives in runner/results/;
- no import cycle, counting imports inside functions: a deferred import hides a cycle from
  Python's start-up, not from a reader;
- workloads/ is layered by its folders: the commands (workloads/train.py, micro.py) are
  imported by nothing, and the run (training/launch.py, run.py) by nothing but them;
  runtime/ (process, group, device) reaches nothing above it; optimization/ only the config
  language; the config side (configuration/) never the torch side (runtime/, training/,
  telemetry/), which the runner's start-up path must not load.
"""

from __future__ import annotations

import pytest

from tests import import_graph
from tests.import_graph import Import, under

BACKEND_PACKAGES = ("runner.backends.local", "runner.backends.kubernetes")
# (importer, imported): the one reach into a backend's package from outside runner/backends/.
ALLOWED_BACKEND_IMPORTS = {("runner.job.target", "runner.backends.kubernetes.connection")}
# Cycles other sessions are removing as this is written; each has its own strict xfail below,
# which fails (XPASS) once the cycle is gone, so that its entry here is removed with it.
KNOWN_CYCLE_PLACES: tuple[str, ...] = ()


@pytest.fixture(scope="module")
def edges() -> list[Import]:
    return import_graph.imports(import_graph.modules())


def _lines(found: list[Import]) -> str:
    return "\n".join(f"{e.source} (line {e.line}) imports {e.target}" for e in found)


def test_the_graph_sees_imports_inside_functions_and_relative_ones(edges):
    """The reader itself: a function-level import (the runner's lazy ones) and a plain one."""
    pairs = {(e.source, e.target) for e in edges}
    assert ("runner.backends.factory", "runner.backends.local.backend") in pairs  # in a function
    assert ("runner.api", "runner.backends.factory") in pairs
    assert ("contract.stackconfig.config", "contract.stackconfig.config_checks") in pairs


def test_contract_imports_no_other_part(edges):
    found = [
        e for e in edges
        if under(e.source, "contract") and not under(e.target, "contract")
    ]  # fmt: skip
    assert not found, "contract/ is the seam both sides import:\n" + _lines(found)


def test_the_runner_never_imports_the_pulumi_program(edges):
    found = [e for e in edges if under(e.source, "runner") and under(e.target, "infra")]
    assert not found, (
        "the runner reads a stack through contract/ (contract/stack.py, contract/stackconfig/), "
        "never infra/:\n" + _lines(found)
    )


def test_the_pulumi_program_never_imports_the_runner_or_the_workloads(edges):
    found = [
        e for e in edges
        if under(e.source, "infra") and (under(e.target, "runner") or under(e.target, "workloads"))
    ]  # fmt: skip
    assert not found, _lines(found)


def test_backends_are_built_only_by_the_factory(edges):
    found = [
        e for e in edges
        if not under(e.source, "runner.backends")
        and any(under(e.target, package) for package in BACKEND_PACKAGES)
        and (e.source, e.target) not in ALLOWED_BACKEND_IMPORTS
    ]  # fmt: skip
    assert not found, (
        "build backends with runner/backends/factory.py and drive them through the Backend "
        "protocol (runner/backends/base.py):\n" + _lines(found)
    )


def test_the_api_and_the_dashboard_import_no_backend_package(edges):
    found = [
        e for e in edges
        if (e.source == "runner.api" or under(e.source, "runner.dashboard"))
        and any(under(e.target, package) for package in BACKEND_PACKAGES)
    ]  # fmt: skip
    assert not found, _lines(found)


def test_the_dashboard_and_the_results_never_import_the_command_line(edges):
    found = [
        e for e in edges
        if (under(e.source, "runner.dashboard") or under(e.source, "runner.results"))
        and under(e.target, "runner.cli")
    ]  # fmt: skip
    assert not found, (
        "the command line sits above the dashboard and the results: move what both need into "
        "runner/results/:\n" + _lines(found)
    )


def _cycles_at(edges: list[Import], place: str) -> list[list[str]]:
    return [c for c in import_graph.cycles(edges) if any(under(m, place) for m in c)]


def test_no_import_cycle_outside_the_places_being_restructured(edges):
    found = [
        cycle for cycle in import_graph.cycles(edges)
        if not any(under(m, place) for m in cycle for place in KNOWN_CYCLE_PLACES)
    ]  # fmt: skip
    assert not found, f"import cycles: {found}"


def test_no_import_cycle_in_the_workloads(edges):
    assert not _cycles_at(edges, "workloads")


def test_a_cycle_is_found_where_one_is_planted():
    """The cycle finder itself, on a small graph with one cycle of three and a tail."""
    pairs = [("a", "b", False), ("b", "c", False), ("c", "a", False), ("c", "d", False),
             ("d", "e", True), ("e", "d", False)]  # fmt: skip
    planted = [Import(source, target, 1, typing_only) for source, target, typing_only in pairs]
    assert import_graph.cycles(planted) == [["a", "b", "c"]]  # d <-> e only while type checking


ENTRY_MODULES = ("workloads.train", "workloads.micro")
RUN_MODULES = ("workloads.training.launch", "workloads.training.run")


def _reaching(edges: list[Import], source: str, allowed: tuple[str, ...]) -> list[Import]:
    """Imports from inside `source` of a workloads module outside `source` and `allowed`."""
    return [
        e for e in edges
        if under(e.source, source) and under(e.target, "workloads")
        and not any(under(e.target, place) for place in (source, *allowed))
    ]  # fmt: skip


def test_the_workload_commands_are_imported_by_nothing(edges):
    """What the commands share lives below them (training/launch.py), not in one of them."""
    found = [e for e in edges if e.target in ENTRY_MODULES]
    assert not found, _lines(found)


def test_the_training_run_is_imported_only_by_the_commands(edges):
    found = [e for e in edges if e.target in RUN_MODULES and e.source not in ENTRY_MODULES]
    found = [e for e in found if e.source not in RUN_MODULES]  # launch and run side by side
    assert not found, "training/launch.py and run.py are the top of a run:\n" + _lines(found)


def test_the_runtime_reaches_nothing_above_it(edges):
    """The process, its group and its device are what everything else runs on (DataError,
    which a refused cache directory raises, is the data package's)."""
    found = _reaching(edges, "workloads.runtime", ("workloads.data",))
    assert not found, _lines(found)


def test_the_optimization_reaches_only_the_config_language(edges):
    allowed = ("workloads.configuration.fields", "workloads.configuration.components",
               "workloads.plugins")  # fmt: skip
    found = _reaching(edges, "workloads.optimization", allowed)
    assert not found, _lines(found)


def test_the_configuration_never_reaches_the_torch_side(edges):
    """The runner loads the configuration on its start-up path (runner benchmarks, --help):
    it may reach the components beside their code, never the run's machinery."""
    torch_side = ("workloads.runtime", "workloads.training", "workloads.telemetry",
                  *ENTRY_MODULES)  # fmt: skip
    found = [
        e for e in edges
        if under(e.source, "workloads.configuration")
        and any(under(e.target, place) for place in torch_side)
    ]  # fmt: skip
    assert not found, _lines(found)
