"""Where runs go and how their workers map onto nodes: this machine (the default), or a
Kubernetes cluster named by a Pulumi stack or a kubeconfig. `submit` and `sweep` build the same
Target from the same options, so `--workers` means one thing everywhere: worker processes in
all; on a cluster they are spread over nodes of `--per-node` processes each.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from contract.imageplugins import ImagePlugin
from runner import install
from runner.backends import factory
from runner.errors import BackendUnavailable, SpecError
from runner.job import threads
from runner.job.spec import Device, Placement

if TYPE_CHECKING:
    from runner.backends.base import Backend


LOCAL_MAX_WORKERS = 1024


@dataclass(frozen=True)
class ClusterOptions:
    """The options that name a cluster, as the user gave them."""

    stack: str | None = None
    kubeconfig: Path | None = None
    context: str | None = None
    job_api: str | None = None
    image: str | None = None
    pending_timeout_s: float | None = None
    runtime: str | None = None  # a TrainJob's ClusterTrainingRuntime
    image_plugins: Path | None = None  # a file: the plugins --image carries

    @property
    def given(self) -> bool:
        return self.stack is not None or self.kubeconfig is not None


@dataclass(frozen=True)
class Target:
    make_backend: Callable[[], Backend]
    where: str  # "local", "stack gke-gpu-8", "kubeconfig ~/.kube/config"
    remote: bool
    device: Device = "cpu"
    per_node: int = 1  # cluster runs only
    # Local runs: every worker's intra-op threads (--threads; a sweep fixes it for all its
    # cells). None: runner/job/threads.py's default for the run's worker count.
    threads_per_worker: int | None = None
    # Cluster runs: the plugins the training image carries; None: not known.
    image_plugins: tuple[ImagePlugin, ...] | None = None

    def placement(
        self, workers: int, link: str | None = None, min_workers: int | None = None
    ) -> Placement:
        """`workers` processes in all (`min_workers`: an elastic run's fewest, --workers
        MIN:MAX); on a cluster, one pod per node of `per_node` processes (elastic: one)."""
        if not self.remote:
            if workers > LOCAL_MAX_WORKERS:  # each is a process here, and each imports torch
                raise SpecError(
                    "--workers",
                    f"a local run starts one process per worker on this machine: at most "
                    f"{LOCAL_MAX_WORKERS}, not {workers}",
                )
            per_worker = self.threads_per_worker or threads.default(workers)
            return Placement(1, workers, self.device, link, min_workers, per_worker)
        if min_workers is not None:
            # --per-node is 1 unless given: more would be silently dropped here, as JobSpec's
            # own check never sees it (an elastic placement is built with one per node).
            if self.per_node > 1:
                raise SpecError(
                    "--per-node", "an elastic run has one worker per node (pod): drop --per-node"
                )
            return Placement(workers, 1, self.device, link, min_workers)
        if workers % self.per_node:
            raise SpecError(
                "--workers",
                f"{workers} workers do not fill nodes of {self.per_node} (--per-node); "
                f"use a multiple of {self.per_node}",
            )
        return Placement(workers // self.per_node, self.per_node, self.device, link)


def local_target(results_root: Path, device: Device = "cpu") -> Target:
    return Target(lambda: factory.local(results_root), "local", remote=False, device=device)


def make_target(
    results_root: Path,
    local: bool,
    cluster: ClusterOptions,
    per_node: int | None,
    device: Device,
    threads_per_worker: int | None = None,
) -> Target:
    """The target the options name; SpecError for options that do not go together."""
    if local and cluster.given:
        raise SpecError("--local", "--local runs here; drop it to use --stack or --kubeconfig")
    if cluster.given and threads_per_worker is not None:
        raise SpecError("--threads", "applies to local runs; a cluster's pods get their launcher's")
    if not cluster.given:
        for name, value in (
            ("--context", cluster.context),
            ("--job-api", cluster.job_api),
            ("--image", cluster.image),
            ("--runtime", cluster.runtime),
            ("--image-plugins", cluster.image_plugins),
            ("--pending-timeout", cluster.pending_timeout_s),
            ("--per-node", per_node),
        ):
            if value is not None:
                raise SpecError(name, "applies to cluster runs (--stack or --kubeconfig)")
        return replace(local_target(results_root, device), threads_per_worker=threads_per_worker)
    for module in ("kubernetes", "yaml"):
        if importlib.util.find_spec(module) is None:
            raise BackendUnavailable(
                f"cluster runs need {module}, which is not installed: {install.extra('kubernetes')}"
            )
    from runner.backends.kubernetes.connection import connect

    # Connected once, here: a bad stack or kubeconfig fails before anything is created.
    conn = connect(cluster.stack, cluster.kubeconfig, cluster.context, cluster.job_api,
                   cluster.image, cluster.runtime, cluster.image_plugins)  # fmt: skip

    def make() -> Backend:
        return factory.cluster(conn, results_root, cluster.pending_timeout_s)

    where = f"stack {cluster.stack}" if cluster.stack else f"kubeconfig {cluster.kubeconfig}"
    return Target(make, where, remote=True, device=device, per_node=per_node or 1,
                  image_plugins=conn.image_plugins)  # fmt: skip
