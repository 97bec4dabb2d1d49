"""The upstream CRD schemas rendered manifests are validated against (see README.md), read
strictly: a field the schema does not declare is an error here, as it is under the API
server's strict field validation (and silently dropped by its pruning otherwise); and their
CEL rules (x-kubernetes-validations), evaluated as the API server does (cel.py)."""

from __future__ import annotations

import copy
import functools
import json
from pathlib import Path
from typing import Any

import jsonschema

HERE = Path(__file__).resolve().parent
SCHEMA_FILES = {
    "PyTorchJob": "kubeflow.org_pytorchjobs.v1.9.4.schema.json",
    "TrainJob": "trainer.kubeflow.org_trainjobs.v2.3.0.schema.json",
    "ClusterTrainingRuntime": "trainer.kubeflow.org_clustertrainingruntimes.v2.3.0.schema.json",
}
EMBEDDED_FIELDS = ("apiVersion", "kind", "metadata")


def _closed(node: Any) -> Any:
    """Every object schema that lists its properties refuses others, unless it says it keeps
    unknown fields; embedded resources also take apiVersion, kind and metadata."""
    if isinstance(node, list):
        return [_closed(n) for n in node]
    if not isinstance(node, dict):
        return node
    out = {k: _closed(v) for k, v in node.items()}
    if "properties" in out and "additionalProperties" not in out:
        if not out.get("x-kubernetes-preserve-unknown-fields"):
            out["additionalProperties"] = False
        if out.get("x-kubernetes-embedded-resource"):
            for name in EMBEDDED_FIELDS:
                out["properties"].setdefault(name, {})
    return out


@functools.cache
def strict_validator(kind: str) -> jsonschema.protocols.Validator:
    raw = json.loads((HERE / SCHEMA_FILES[kind]).read_text(encoding="utf-8"))
    schema = _closed(copy.deepcopy(raw))
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema)


def validate(manifest: dict[str, Any]) -> None:
    """jsonschema.ValidationError unless `manifest` fits its kind's upstream schema, then
    tests.schemas.cel.CelViolation unless it keeps the CRD's CEL rules."""
    from tests.schemas import cel  # it imports this module's names

    strict_validator(manifest["kind"]).validate(manifest)
    cel.check(manifest)
