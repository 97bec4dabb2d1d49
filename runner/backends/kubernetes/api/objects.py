"""The fields of the API server's objects that the runner reads (follow/: observe, logs, watch),
checked where the objects enter (client.py), so that an object of the wrong shape is refused in
one line naming the field, never met later as a Python error.

A real API server validates pods and the jobs' CRDs, but the runner talks to whatever its
kubeconfig names, through whatever proxies: a cluster is not trusted. The checks are of types
and sizes only; what the values mean is observe.py's. `null` is absence, as in the API's own
JSON (a Go nil slice or time is written as null): such keys are removed before the checks, so
readers see a field either absent or of its type.

Pure functions; no I/O.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

# Shapes: a dict of key -> shape (other keys are not read, so not checked), a one-item list
# (every item has that shape), or a leaf check (a function: the problem, or None).
Shape = dict[str, Any] | list[Any] | Callable[[Any], str | None]
MAX_COUNT = 100_000  # nodes, processes or replicas: more is garbage (and a range over it, memory)


def _text(value: Any) -> str | None:
    return None if isinstance(value, str) else "is not text"


def _integer(value: Any) -> str | None:
    if isinstance(value, int) and not isinstance(value, bool):
        return None
    return "is not an integer"


def _count(value: Any) -> str | None:
    """A number of nodes, processes or replicas; a PyTorchJob writes nprocPerNode as text."""
    if isinstance(value, str) and value.isascii() and value.isdigit() and len(value) < 7:
        value = int(value)
    if _integer(value) is None and 0 <= value <= MAX_COUNT:
        return None
    return f"is not a count from 0 to {MAX_COUNT}"


def _time(value: Any) -> str | None:
    """An RFC 3339 time, as the API server writes them (`2030-01-01T00:00:00Z`): with its
    offset, which RFC 3339 requires (a time without one cannot be compared with the clock's)."""
    problem = "is not an RFC 3339 time"
    if not isinstance(value, str):
        return problem
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return problem
    return None if parsed.tzinfo is not None else f"{problem} (it has no UTC offset)"


def _boolean(value: Any) -> str | None:
    return None if isinstance(value, bool) else "is not true or false"


def _strings(value: Any) -> str | None:
    """Labels and annotations: text to text."""
    if isinstance(value, dict) and all(isinstance(v, str) for v in value.values()):
        return None
    return "is not a map of text"


METADATA = {
    "name": _text,
    "namespace": _text,
    "uid": _text,
    "resourceVersion": _text,
    "creationTimestamp": _time,
    "labels": _strings,
    "annotations": _strings,
    # Which object made this one: a pod of a PyTorchJob names the job's uid (observe.py).
    "ownerReferences": [{"kind": _text, "uid": _text, "controller": _boolean}],
}
CONDITIONS = [
    {
        "type": _text,
        "status": _text,
        "reason": _text,
        "message": _text,
        "lastTransitionTime": _time,
    }
]
CONTAINER_STATE = {
    "waiting": {"reason": _text, "message": _text},
    "running": {"startedAt": _time},
    "terminated": {"exitCode": _integer, "reason": _text, "finishedAt": _time},
}
POD = {
    "metadata": METADATA,
    "status": {
        "phase": _text,
        "startTime": _time,
        "conditions": CONDITIONS,
        "containerStatuses": [{"name": _text, "restartCount": _integer, "state": CONTAINER_STATE}],
    },
}
TRAINJOB = {
    "metadata": METADATA,
    "apiVersion": _text,
    "kind": _text,
    "spec": {"trainer": {"numNodes": _count, "numProcPerNode": _count}},
    "status": {"conditions": CONDITIONS},
}
PYTORCHJOB = {
    "metadata": METADATA,
    "apiVersion": _text,
    "kind": _text,
    "spec": {
        "nprocPerNode": _count,
        "elasticPolicy": {"minReplicas": _integer},
        # Replica specs by type (Master, Worker): a map, checked item by item in _problem.
        "pytorchReplicaSpecs": {"*": {"replicas": _count}},
    },
    "status": {"conditions": CONDITIONS},
}
# A TrainJob's JobSet: its uid, and the owner reference that names its TrainJob (owners.py).
JOBSET = {"metadata": METADATA, "apiVersion": _text, "kind": _text}
EVENT = {
    "metadata": METADATA,
    "type": _text,
    "reason": _text,
    "message": _text,
    "lastTimestamp": _time,
    "eventTime": _time,
    "involvedObject": {"kind": _text, "name": _text},
}
SHAPES: dict[str, Shape] = {
    "trainjob": TRAINJOB,
    "pytorchjob": PYTORCHJOB,
    "pods": POD,
    "events": EVENT,
    "jobsets": JOBSET,
}


def problem(kind: str, obj: Any) -> str | None:
    """What is wrong with `obj` as a `kind` ("trainjob", "pytorchjob", "pods", "events",
    "jobsets"), e.g. "status.containerStatuses[0].restartCount is not an integer"; None if
    nothing. Removes the keys that are null, the API's way of saying absent, so that readers
    need not tell them apart. A job or a pod must have a name (the watch keeps objects by it)."""
    if not isinstance(obj, dict):
        return "is not an object"
    try:
        _drop_nulls(obj)
        found = _problem(SHAPES[kind], obj, "")
    except RecursionError:  # JSON parses nesting close to the limit, and these recurse too
        return "is nested too deeply"
    if found is None and not obj.get("metadata", {}).get("name") and kind != "events":
        return "metadata.name is missing"
    if found is None and kind in MORE_CHECKS:
        found = MORE_CHECKS[kind](obj)
    return found


def another_object(
    job: dict[str, Any], api_version: str, kind: str, namespace: str, name: str
) -> str | None:
    """What `job` (checked) is, if it is not the `kind` `name` of `namespace` and `api_version`
    that was asked for, e.g. "the 'kubeflow.org/v1' 'PyTorchJob' 'x' of namespace 'bench'"
    (each value quoted and cut short: the server chose them); None if it is."""
    meta = job["metadata"]
    found = (job.get("apiVersion"), job.get("kind"), meta.get("namespace"), meta.get("name"))
    if found == (api_version, kind, namespace, name):
        return None
    shown_api, shown_kind, shown_namespace, shown_name = (f"{v!r:.60}" for v in found)
    return f"the {shown_api} {shown_kind} {shown_name} of namespace {shown_namespace}"


def selected(obj: dict[str, Any], label: str | None, field: str | None) -> bool:
    """Whether `obj` is what the selectors the runner asked with select: `key=value` terms,
    comma-separated (labels; fields by dotted path). A server or a proxy that ignores them must
    not pass another job, or another run's pods, as the run's own."""
    labels = obj.get("metadata", {}).get("labels") or {}
    if any(labels.get(key) != value for key, value in _terms(label)):
        return False
    for path, value in _terms(field):
        node: Any = obj
        for part in path.split("."):
            node = node.get(part) if isinstance(node, dict) else None
        if node != value:
            return False
    return True


def _terms(selector: str | None) -> list[tuple[str, str]]:
    return [(k, v) for k, _, v in (t.partition("=") for t in (selector or "").split(",") if t)]


def _replicas_problem(job: dict[str, Any]) -> str | None:
    """Each replica type's count is bounded, but a PyTorchJob's nodes are their sum over every
    type: many types must not add up to what no cluster runs (a range over it, memory)."""
    specs = job.get("spec", {}).get("pytorchReplicaSpecs", {})
    total = sum(int(spec.get("replicas", 1)) for spec in specs.values())
    if total > MAX_COUNT:
        return f"spec.pytorchReplicaSpecs has {total} replicas in all, more than {MAX_COUNT}"
    return None


def _problem(shape: Shape, value: Any, path: str) -> str | None:
    if callable(shape):
        found = shape(value)
        return None if found is None else f"{path} {found}"
    if isinstance(shape, list):
        if not isinstance(value, list):
            return f"{path} is not a list"
        for index, item in enumerate(value):
            found = _problem(shape[0], item, f"{path}[{index}]")
            if found:
                return found
        return None
    if not isinstance(value, dict):
        return f"{path or 'the object'} is not an object"
    for key, sub in shape.items():
        items = value.items() if key == "*" else [(key, value[key])] if key in value else []
        for name, item in items:
            found = _problem(sub, item, f"{path}.{name}" if path else name)
            if found:
                return found
    return None


def _drop_nulls(value: Any) -> None:
    if isinstance(value, dict):
        for key in [k for k, v in value.items() if v is None]:
            del value[key]
        for item in value.values():
            _drop_nulls(item)
    elif isinstance(value, list):
        for item in value:
            _drop_nulls(item)


# What a shape cannot say: a PyTorchJob's replica specs, checked one by one.
MORE_CHECKS: dict[str, Callable[[dict[str, Any]], str | None]] = {"pytorchjob": _replicas_problem}
