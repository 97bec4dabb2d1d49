"""The CRDs' `x-kubernetes-validations` (CEL) rules, evaluated on a manifest as the API server
does on create, with cel-python (celpy): the vendored schemas keep every rule.

What the API server does, and so this: the schema's defaults are applied first (structural
defaulting); each rule runs with `self` bound to the value at its node, typed by the schema
(an integer field is a CEL int, a number a double), only where that value is present, once per
item under a list's items and per value under a map's additionalProperties; a rule at the root
sees the object itself. Transition rules (those naming `oldSelf`) never run on a create; here
they run with `oldSelf` the same object (the manifest applied again), which must hold too.

A rule passes only if it evaluates to true. False is a violation; anything else (a function
celpy lacks, an error, a value that is not a bool) fails as "cannot be evaluated", never
passes. The rules of the vendored CRDs use has(), size(), filter/exists/all, matches() and
`in`, all of which celpy implements as Kubernetes' CEL does (tests/schemas/test_cel.py holds
each to it); a Kubernetes library function (isURL, quantity, ...) in a future CRD would fail
as "cannot be evaluated" until it is implemented here.
"""

from __future__ import annotations

import copy
import functools
import json
from collections.abc import Iterator
from typing import Any

import celpy
from celpy import celtypes

from tests.schemas import HERE, SCHEMA_FILES


class CelViolation(ValueError):
    """A manifest breaks (or cannot be checked against) a CRD's CEL rules; one line each."""


@functools.cache
def _schema(kind: str) -> dict[str, Any]:
    return json.loads((HERE / SCHEMA_FILES[kind]).read_text(encoding="utf-8"))


@functools.cache
def _program(rule: str) -> Any:
    env = celpy.Environment()
    return env.program(env.compile(rule))


def check(manifest: dict[str, Any]) -> None:
    """CelViolation listing every rule `manifest` breaks or that cannot be evaluated."""
    problems = violations(manifest, _schema(manifest["kind"]))
    if problems:
        raise CelViolation(f"{manifest['kind']} breaks CEL rules:\n" + "\n".join(problems))


def violations(manifest: dict[str, Any], schema: dict[str, Any]) -> list[str]:
    obj = with_defaults(copy.deepcopy(manifest), schema)
    return [problem for path, node, value in _nodes(schema, obj, "") for problem in
            _problems(path, node, value)]  # fmt: skip


def with_defaults(value: Any, schema: dict[str, Any]) -> Any:
    """`value` with the schema's defaults filled in where absent (structural defaulting)."""
    if isinstance(value, dict):
        for name, prop in schema.get("properties", {}).items():
            if name not in value and "default" in prop:
                value[name] = copy.deepcopy(prop["default"])
            if name in value:
                value[name] = with_defaults(value[name], prop)
        extra = schema.get("additionalProperties")
        if isinstance(extra, dict):
            for name in value:
                if name not in schema.get("properties", {}):
                    value[name] = with_defaults(value[name], extra)
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        return [with_defaults(item, schema["items"]) for item in value]
    return value


def _nodes(schema: dict[str, Any], value: Any, path: str) -> Iterator[tuple[str, dict, Any]]:
    """(path, schema node, value) for every present value, depth first."""
    yield path or "<root>", schema, value
    if isinstance(value, dict):
        props = schema.get("properties", {})
        for name, child in value.items():
            if name in props:
                yield from _nodes(props[name], child, f"{path}.{name}")
            elif isinstance(schema.get("additionalProperties"), dict):
                yield from _nodes(schema["additionalProperties"], child, f"{path}[{name}]")
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for i, item in enumerate(value):
            yield from _nodes(schema["items"], item, f"{path}[{i}]")


def rules_run(manifest: dict[str, Any]) -> list[tuple[str, str]]:
    """(path, rule) of every rule check() evaluates on `manifest`: what it covers."""
    schema = _schema(manifest["kind"])
    obj = with_defaults(copy.deepcopy(manifest), schema)
    return [(path, v["rule"]) for path, node, _ in _nodes(schema, obj, "")
            for v in node.get("x-kubernetes-validations", ())]  # fmt: skip


def _problems(path: str, node: dict[str, Any], value: Any) -> list[str]:
    found = []
    for validation in node.get("x-kubernetes-validations", ()):
        rule = validation["rule"]
        typed = to_cel(value, node)
        activation = {"self": typed} | ({"oldSelf": typed} if "oldSelf" in rule else {})
        try:
            result = _program(rule).evaluate(activation)
        except Exception as err:  # celpy raises CELEvalError and others: never a pass
            found.append(f"{path}: `{rule}` cannot be evaluated ({type(err).__name__}: {err})")
            continue
        if not isinstance(result, celtypes.BoolType):
            found.append(f"{path}: `{rule}` cannot be evaluated (gave {result!r})")
        elif not result:
            found.append(f"{path}: {validation.get('message') or rule} (`{rule}`)")
    return found


def to_cel(value: Any, schema: dict[str, Any]) -> Any:
    """A JSON value as the CEL value the API server binds for it, typed by its schema."""
    kind = schema.get("type")
    if isinstance(value, dict):
        props, extra = schema.get("properties", {}), schema.get("additionalProperties")
        other = extra if isinstance(extra, dict) else {}
        return celtypes.MapType(
            {celtypes.StringType(k): to_cel(v, props.get(k, other)) for k, v in value.items()}
        )
    if isinstance(value, list):
        items = schema.get("items") if isinstance(schema.get("items"), dict) else {}
        return celtypes.ListType([to_cel(v, items) for v in value])
    if kind == "number" and isinstance(value, int) and not isinstance(value, bool):
        return celtypes.DoubleType(value)
    return celpy.json_to_cel(value)
