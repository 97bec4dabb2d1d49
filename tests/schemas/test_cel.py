"""The CRDs' CEL rules (tests/schemas/cel.py) on what the runner and the stack render: every
benchmark on both job APIs (tests/runner/test_render.py validates each through
tests.schemas.validate, which runs these rules), the stack's ClusterTrainingRuntime, and
planted breaches; and the CEL the rules use, held to Kubernetes' semantics one construct at
a time."""

from __future__ import annotations

import copy
import re

import pytest
from celpy import celtypes

from infra.runtime import runtime_manifest
from runner.backends.kubernetes.render import render
from runner.job.benchmarks import BENCHMARKS
from tests.runner.manifests import shaped, spec_of
from tests.schemas import cel

IMAGE = "registry.example/stackbench@sha256:" + "0" * 64


def trainjob() -> dict:
    return render(spec_of("cnn-digits", "cpu"), shaped("trainjob"))


@pytest.mark.parametrize("job_api", ["trainjob", "pytorchjob"])
@pytest.mark.parametrize("benchmark", sorted(BENCHMARKS))
def test_every_benchmarks_job_keeps_the_crds_cel_rules(benchmark, job_api):
    cel.check(render(spec_of(benchmark, "cpu"), shaped(job_api)))


def test_the_rules_a_trainjob_meets_are_run_not_skipped():
    """Its name's rules at the root, a defaulted field's (managedBy), transition rules."""
    run = cel.rules_run(trainjob())
    paths = [path for path, _ in run]
    assert paths.count("<root>") == 2
    assert ".spec.managedBy" in paths and ".spec.runtimeRef" in paths
    assert len(run) >= 10


def test_the_stacks_runtime_keeps_the_crds_cel_rules_and_meets_them():
    runtime = runtime_manifest(IMAGE)
    cel.check(runtime)
    assert {path for path, _ in cel.rules_run(runtime)} == {".spec.mlPolicy", ".spec.template.spec"}


@pytest.mark.parametrize(
    ("name", "broken"),
    [("Cnn_Digits", "matches"), ("x" * 64, "size(self.metadata.name) <= 63"), ("-a", "matches")],
)
def test_a_trainjob_name_the_api_server_refuses_is_refused(name, broken):
    job = trainjob()
    job["metadata"]["name"] = name
    with pytest.raises(cel.CelViolation, match=r"<root>: .*" + re.escape(broken)):
        cel.check(job)


def test_a_runtime_with_two_ml_policies_is_refused():
    runtime = runtime_manifest(IMAGE)
    runtime["spec"]["mlPolicy"]["mpi"] = {}
    with pytest.raises(cel.CelViolation, match=r"\.spec\.mlPolicy: "):
        cel.check(runtime)


def test_a_manager_other_than_the_two_known_is_refused():
    job = trainjob()
    job["spec"]["managedBy"] = "someone/else"
    with pytest.raises(cel.CelViolation, match=r"\.spec\.managedBy: "):
        cel.check(job)


def _schema(rule: str, kind: str = "string") -> dict:
    return {"type": "object", "properties": {"f": {"type": kind, "x-kubernetes-validations":
                                                   [{"rule": rule}]}}}  # fmt: skip


@pytest.mark.parametrize(
    ("rule", "value", "why"),
    [
        ("isURL(self)", "https://x", "KeyError"),  # a Kubernetes library function celpy lacks
        ("size(self)", "abc", "gave IntType"),  # not a bool
        ("self.matches('[')", "abc", "CELEvalError"),  # a regex RE2 refuses
        ("self.nosuch == 1", "abc", "cannot be evaluated"),
    ],
)
def test_a_rule_that_cannot_be_evaluated_fails_never_passes(rule, value, why):
    [problem] = cel.violations({"f": value}, _schema(rule))
    assert "cannot be evaluated" in problem and why in problem


def test_a_rule_runs_only_where_its_value_is_present_and_on_each_item():
    schema = {"type": "object", "properties": {"l": {"type": "array", "items": {
        "type": "string", "x-kubernetes-validations": [{"rule": "self != 'bad'"}]}}}}  # fmt: skip
    assert cel.violations({}, schema) == []
    assert cel.violations({"l": ["ok", "bad", "bad"]}, schema) == [
        ".l[1]: self != 'bad' (`self != 'bad'`)", ".l[2]: self != 'bad' (`self != 'bad'`)"
    ]  # fmt: skip


def test_defaults_are_applied_before_the_rules_as_the_api_server_does():
    schema = _schema("self == 'given'")
    schema["properties"]["f"]["default"] = "defaulted"
    assert cel.violations({}, schema) == [".f: self == 'given' (`self == 'given'`)"]


# ---- CEL as Kubernetes evaluates it: each construct the vendored rules use ------------------


@pytest.mark.parametrize(
    ("rule", "value", "expected"),
    [
        ("self.matches('b')", "abc", True),  # RE2, unanchored: a search, not a full match
        ("self.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$')", "a-", False),
        ("size(self) == 1", "é", True),  # size of a string counts code points, not bytes
        ("self.size() == 2", ["a", "b"], True),  # size() as a method on a list
        ("has(self.a) && !has(self.b)", {"a": 1}, True),  # has(): presence of a field
        ("[true, false, true].filter(x, x).size() == 2", None, True),
        ("self.exists(c, c == 'node') && !self.all(c, c == 'node')", ["node", "x"], True),
        ("self in ['a', 'b']", "b", True),
        ("self == oldSelf", {"k": [1]}, True),  # transition rules: the object applied again
    ],
)
def test_cel_constructs_behave_as_in_kubernetes(rule, value, expected):
    node = {"x-kubernetes-validations": [{"rule": rule}]}
    assert (cel.violations(value, node) == []) is expected


def test_a_number_field_is_a_double_and_an_integer_field_an_int():
    assert isinstance(cel.to_cel(2, {"type": "number"}), celtypes.DoubleType)
    assert isinstance(cel.to_cel(2, {"type": "integer"}), celtypes.IntType)
    node = {"type": "number", "x-kubernetes-validations": [{"rule": "self >= 1.5"}]}
    assert cel.violations(2, node) == []  # an int here would be no overload: not evaluable
    assert copy.deepcopy(node) == node
