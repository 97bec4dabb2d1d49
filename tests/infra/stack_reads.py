"""What the stack tests read from an evaluation of the infra program (infra_harness.Evaluation):
the stacks there are, a stack file's setting, the cluster resource, and the kind cluster's
config."""

from __future__ import annotations

import json

from infra_harness import Evaluation, stack_file_config, stack_names

STACKS = stack_names()


def setting(ev: Evaluation, key: str, default=None):
    return stack_file_config(ev.stack).get(f"stackbench:{key}", default)


def cluster_resource(ev: Evaluation):
    return {
        "gke": lambda: ev.one("gcp:container/cluster:Cluster"),
        "eks": lambda: ev.one("eks:index:Cluster"),
        "kind": lambda: ev.one("command:local:Command", "-cluster"),
    }[ev.value("provider")]()


def kind_config(ev: Evaluation) -> dict:
    return json.loads(
        ev.one("command:local:Command", "-cluster").inputs["environment"]["KIND_CONFIG"]
    )
