"""Job manifests for Kubernetes: `render(spec, connection) -> dict`, and its YAML for --dry-run.

The connection's job API (jobapis.py) renders: TrainJob (Kubeflow Trainer 2.x, the default) or
PyTorchJob (training-operator 1.9). Both are pure functions; submitting is the backend's job.
The job's link (`--link`, its placement's) caps each pod's ingress and egress (the CNI
bandwidth plugin's annotations), on clusters whose network enforces them; elsewhere it is
refused (common.bandwidth_annotations).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from runner.backends.kubernetes.render.pytorchjob import render_pytorchjob
from runner.backends.kubernetes.render.trainjob import render_trainjob
from runner.job.spec import JobSpec

if TYPE_CHECKING:  # annotations only: the connection imports jobapis, which renders
    from runner.backends.kubernetes.connection import ClusterConnection


def render(spec: JobSpec, conn: ClusterConnection) -> dict[str, Any]:
    return conn.kind.render(spec, conn)


def to_yaml(manifest: dict[str, Any]) -> str:
    """The manifest as YAML, keys in the order rendered (the order a person reads them)."""
    import yaml  # only for --dry-run and tests; not on the runner's start-up path

    class Dumper(yaml.SafeDumper):
        def ignore_aliases(self, data: Any) -> bool:
            return True  # a person reads this: repeat the labels rather than &id001 them

    return yaml.dump(manifest, Dumper=Dumper, sort_keys=False, default_flow_style=False, width=100)


__all__ = ["render", "render_pytorchjob", "render_trainjob", "to_yaml"]
