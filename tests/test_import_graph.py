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
  Python's start-up, not from a reader.
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
