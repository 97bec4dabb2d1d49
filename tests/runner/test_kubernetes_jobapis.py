"""One object per job API (runner/backends/kubernetes/jobapis.py): what differs between TrainJob
and PyTorchJob is asked of the connection's object, and no other module of the Kubernetes
backend branches on the API's name (a comparison with "trainjob" or "pytorchjob"). Read from
the modules' source, so that a branch added anywhere fails here."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from runner.backends.kubernetes.jobapis import JOB_KINDS
from tests.runner.k8s_helpers import make_spec, pod, stack_connection

PACKAGE = Path(__file__).resolve().parents[2] / "runner" / "backends" / "kubernetes"
NAMES = set(JOB_KINDS)


def branches_on_a_name(path: Path) -> list[int]:
    lines = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
            if any(isinstance(o, ast.Constant) and o.value in NAMES for o in operands):
                lines.append(node.lineno)
    return lines


def test_no_module_branches_on_the_job_apis_name():
    modules = sorted(p for p in PACKAGE.rglob("*.py") if p.name != "jobapis.py")
    assert len(modules) > 20
    found = {str(p.relative_to(PACKAGE)): branches_on_a_name(p) for p in modules}
    assert {path: lines for path, lines in found.items() if lines} == {}


@pytest.mark.parametrize("job_api", sorted(NAMES))
def test_the_connection_carries_its_apis_object_which_renders_and_reads_its_pods(job_api):
    conn = stack_connection(job_api)
    kind = conn.kind
    manifest = kind.render(make_spec(nodes=2, procs=2), conn)
    assert manifest["kind"] == kind.resource.kind
    assert kind.shape(manifest).world_size == 4
    assert [kind.node_rank(pod(job_api, "run", n)) for n in (0, 1)] == [0, 1]
