"""Builders for the render tests: a stack connection that knows its node shape, a spec of any
benchmark, a link rate on a spec, and the pod templates and node resources of a rendered
manifest."""

from __future__ import annotations

import dataclasses
from typing import Any

from contract.stack import NodeResources
from runner.job.spec import JobSpec, Placement, resolve
from tests.runner.k8s_helpers import stack_connection

JOB_APIS = ("trainjob", "pytorchjob")
NODE = NodeResources(cpu_m=47000, memory_mib=180000)  # a 4-GPU node's job resources


def shaped(job_api: str = "trainjob", store: str | None = "gs://bench-results", **changes: Any):
    """A stack connection that knows its node shape and shapes bandwidth."""
    conn = stack_connection(job_api, store)
    fields = {"node_job_resources": NODE, "bandwidth_shaping": True} | changes
    return dataclasses.replace(conn, **fields)


def spec_of(benchmark: str, device: str) -> JobSpec:
    overrides = [] if benchmark == "allreduce-micro" else ["seed=7"]
    placement = Placement(num_nodes=2, procs_per_node=2, device=device)  # type: ignore[arg-type]
    return resolve(benchmark, overrides, placement, run_id=f"b{len(benchmark)}-20300101-beef")


def pod_templates(manifest: dict[str, Any]) -> list[dict[str, Any]]:
    """Every pod template (or pod patch) in a manifest, with its metadata."""
    if manifest["kind"] == "PyTorchJob":
        return [r["template"] for r in manifest["spec"]["pytorchReplicaSpecs"].values()]
    patch = manifest["spec"]["runtimePatches"][0]["trainingRuntimeSpec"]["template"]["spec"]
    return [job["template"]["spec"]["template"] for job in patch["replicatedJobs"]]


def node_resources(manifest: dict[str, Any]) -> list[dict[str, Any]]:
    if manifest["kind"] == "TrainJob":
        return [manifest["spec"]["trainer"]["resourcesPerNode"]]
    return [t["spec"]["containers"][0]["resources"] for t in pod_templates(manifest)]


def with_link(spec: JobSpec, link: str) -> JobSpec:
    return dataclasses.replace(spec, placement=dataclasses.replace(spec.placement, link=link))
