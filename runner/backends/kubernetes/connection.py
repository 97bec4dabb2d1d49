"""Where a Kubernetes run goes: a validated ClusterConnection, from a Pulumi stack or a kubeconfig.

A stack's outputs are the only way the infra talks to the runner (docs/design.md, "The seams");
they are read with `pulumi stack output --json --show-secrets` and checked at the boundary by
contract/stack.py's `parse_outputs` (the same check infra's tests apply to what the program
exports), so a missing or ill-typed output fails before anything is submitted, naming the
output and the command to check it. A stack name is first looked up in stacks/, so a typo fails
at once, listing the stacks, without starting `pulumi`. `--kubeconfig FILE` targets a cluster
made elsewhere, with the defaults documented on `connect_kubeconfig`.

The kubeconfig is a secret: it is held in memory, never logged (repr=False), and only ever
written to a 0600 file inside a private temporary directory that `kubeconfig_file` removes after
use. This module does not import the kubernetes client (the CLI imports it on its start-up path).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import re
import shutil
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

from contract.imageplugins import ImagePlugin, read_manifest
from contract.stack import (
    JOB_APIS,
    RESULTS_MOUNT_PATH,
    UPSTREAM_TRAINING_RUNTIME,
    JobApi,
    NodeResources,
    OutputError,
    image_problem,
    parse_outputs,
)
from contract.stackconfig.stackfiles import StackFileError, stack_file
from runner.backends.kubernetes.jobapis import JOB_KINDS, JobKind
from runner.errors import RunnerError, SpecError
from runner.stack import pulumi_cli

EXTERNAL = "external"  # the provider of a cluster given by --kubeconfig
DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")  # a namespace's name
# What job.json's `cluster` (ClusterConnection.reference) may hold besides pending_timeout_s.
REFERENCE_TEXTS = ("stack", "kubeconfig", "context", "job_api", "image", "training_runtime")
# A ClusterTrainingRuntime's name: a Kubernetes object name (DNS subdomain).
OBJECT_NAME = re.compile(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?")
# A kubeconfig holds a few clusters' certificates: kilobytes. Far more is the wrong file.
MAX_KUBECONFIG_BYTES = 16 << 20


@dataclass(frozen=True)
class ClusterConnection:
    """Everything the renderers and the backend need to know about one cluster."""

    kubeconfig: str = field(repr=False)  # the YAML text; a secret
    namespace: str
    job_api: JobApi
    image: str
    provider: str = EXTERNAL
    context: str | None = None
    node_selector: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    gpu_tolerations: tuple[Mapping[str, Any], ...] = ()
    gpus_per_node: int | None = None  # None: unknown (a cluster made elsewhere)
    num_nodes: int | None = None
    node_job_resources: NodeResources | None = None  # None: unknown (render's defaults apply)
    results_store: str | None = None  # gs://b, s3://b or file:///host/dir; None: logs only
    results_mount_path: str = RESULTS_MOUNT_PATH
    service_account: str | None = None
    training_runtime: str = UPSTREAM_TRAINING_RUNTIME
    bandwidth_shaping: bool | None = None  # enforces pod bandwidth annotations; None: unknown
    stack: str | None = None  # the Pulumi stack it came from, for messages and references
    # The plugins `image` carries (contract/imageplugins.py): the stack's output for its own
    # image, or --image-plugins FILE; None: not known (a run with plugins is refused).
    image_plugins: tuple[ImagePlugin, ...] | None = None
    kubeconfig_path: str | None = None  # the file it came from, for messages and references

    @property
    def kind(self) -> JobKind:
        """The job API's object: everything that differs between TrainJob and PyTorchJob."""
        return JOB_KINDS[self.job_api]

    @property
    def source(self) -> str:
        """How a person names this cluster on the command line, for messages."""
        if self.stack:
            return f"--stack {self.stack}"
        context = f" --context {self.context}" if self.context else ""
        return f"--kubeconfig {self.kubeconfig_path}{context}"

    def reference(self) -> dict[str, Any]:
        """What job.json needs to reconnect later: no secret, just where to read them again;
        and, for a TrainJob, the runtime it ran on."""
        runtime = {"training_runtime": self.training_runtime} if self.kind.has_runtime else {}
        if self.stack:
            return {"stack": self.stack, "job_api": self.job_api, **runtime}
        return {
            "kubeconfig": self.kubeconfig_path,
            "context": self.context,
            "job_api": self.job_api,
            "image": self.image,
            **runtime,
        }


def connect(
    stack: str | None = None,
    kubeconfig: Path | None = None,
    context: str | None = None,
    job_api: str | None = None,
    image: str | None = None,
    runtime: str | None = None,
    image_plugins: Path | None = None,
) -> ClusterConnection:
    """The CLI's one entry point: exactly one of --stack and --kubeconfig. `runtime`: the
    TrainJob's ClusterTrainingRuntime (default: the stack's, else torch-distributed).
    `image_plugins`: a file listing the plugins --image carries (the stack's own image's are
    its output `image_plugins`; another image's are not known without it)."""
    if stack and kubeconfig:
        raise SpecError("--stack", "give either --stack or --kubeconfig, not both")
    if stack:
        if context:
            raise SpecError("--context", "only applies with --kubeconfig; a stack names its own")
        conn = connect_stack(stack)
        if job_api is not None:
            conn = _replace(conn, job_api=_job_api(job_api, "--job-api"))
        if image is not None:  # the stack's list describes its own image, not this one
            conn = _replace(conn, image=check_image(image, "--image"), image_plugins=None)
    elif kubeconfig:
        conn = connect_kubeconfig(kubeconfig, context, job_api, image)
    else:
        raise SpecError("--stack", "name a stack (--stack NAME) or a cluster (--kubeconfig FILE)")
    if runtime is not None:
        conn = _replace(conn, training_runtime=check_runtime(runtime, conn.kind))
    if image_plugins is not None:
        if image is None:
            raise SpecError("--image-plugins", "says what --image carries; give --image too")
        try:
            conn = _replace(conn, image_plugins=read_manifest(image_plugins))
        except ValueError as err:
            raise SpecError("--image-plugins", str(err)) from None
    return conn


def check_runtime(name: str, kind: JobKind) -> str:
    """A ClusterTrainingRuntime's name, for a job API that runs against one."""
    if not kind.has_runtime:
        raise SpecError("--runtime", f"names a TrainJob's runtime; a {kind.name} has none")
    if not OBJECT_NAME.fullmatch(name):
        raise SpecError("--runtime", f"{name!r:.80} is not a Kubernetes object name (lowercase "
                        "letters, digits, '-' and '.'); `kubectl get clustertrainingruntimes` "
                        "lists the cluster's")  # fmt: skip
    return name


def reference_problem(ref: Mapping[str, Any]) -> str | None:
    """What is wrong with a `ClusterConnection.reference()` read back from job.json; None if
    nothing (a damaged one must not reach `pulumi` or the filesystem as a name)."""
    for key in REFERENCE_TEXTS:
        if ref.get(key) is not None and not isinstance(ref[key], str):
            return f"a cluster.{key} that is not text ({ref[key]!r:.40})"
    return None


def connect_reference(ref: Mapping[str, Any]) -> ClusterConnection:
    """Reconnect from `ClusterConnection.reference()` (as stored in job.json)."""
    problem = reference_problem(ref)
    if problem:
        raise RunnerError(f"job.json has {problem}; fix or remove it")
    recorded = JOB_KINDS.get(str(ref.get("job_api")))
    runtime = ref.get("training_runtime") if recorded and recorded.has_runtime else None
    if ref.get("stack"):
        return connect(stack=ref["stack"], job_api=ref.get("job_api"), runtime=runtime)
    if ref.get("kubeconfig"):
        return connect(
            kubeconfig=Path(ref["kubeconfig"]),
            context=ref.get("context"),
            job_api=ref.get("job_api"),
            image=ref.get("image"),
            runtime=runtime,
        )
    raise RunnerError(f"job.json names no cluster ({dict(ref)!r}); pass --stack or --kubeconfig")


# ---- Pulumi stacks -----------------------------------------------------------------------


def connect_stack(stack: str) -> ClusterConnection:
    check_stack_name(stack)
    return connection_from_outputs(read_stack_outputs(stack), stack)


def check_stack_name(stack: str) -> None:
    """SpecError naming the stacks that exist unless stacks/Pulumi.<stack>.yaml does: a stack
    without a settings file cannot have been deployed from this project."""
    project = pulumi_cli.project_dir()
    if project is None:
        raise SpecError(
            "--stack",
            "no Pulumi.yaml here or above; run inside the stackbench checkout, or target the "
            "cluster with --kubeconfig FILE",
        )
    try:
        stack_file(project, stack)
    except StackFileError as err:
        raise SpecError("--stack", str(err)) from None


def read_stack_outputs(stack: str) -> dict[str, Any]:
    """`pulumi stack output --json --show-secrets --stack NAME`, parsed; RunnerError if not."""
    outputs = pulumi_cli.run_json(
        ["stack", "output", "--json", "--show-secrets"],
        stack,
        why=f"the outputs of stack {stack!r} cannot be read; {pulumi_cli.INSTALL} "
        "or target the cluster with --kubeconfig FILE",
        next_step="list the stacks with `pulumi stack ls` (run it where Pulumi.yaml is)",
    )
    if not isinstance(outputs, dict):
        raise RunnerError(f"`pulumi stack output --json --stack {stack}` is not a JSON object")
    return outputs


def connection_from_outputs(outputs: Mapping[str, Any], stack: str) -> ClusterConnection:
    """The stack's outputs, checked by the contract; errors name the output and the command."""
    try:
        out = parse_outputs(outputs)
    except OutputError as err:
        raise RunnerError(
            f"stack {stack!r}: {err}; check it with `pulumi stack output --json --stack "
            f"{stack}` (and `pulumi up --stack {stack}` if it is stale)"
        ) from None
    return ClusterConnection(
        # The runner's own identity, allowed only what it calls (contract.stack's
        # runner_role_rules); the admin kubeconfig is pulumi's.
        kubeconfig=out.runner_kubeconfig,
        namespace=out.namespace,
        job_api=out.job_api,
        image=out.image,
        provider=out.provider,
        node_selector=out.node_selector,
        gpu_tolerations=out.gpu_tolerations,
        gpus_per_node=out.gpus_per_node,
        num_nodes=out.num_nodes,
        node_job_resources=out.node_job_resources,
        results_store=out.results_store,
        results_mount_path=out.results_mount_path,
        service_account=out.service_account,
        training_runtime=out.training_runtime,
        bandwidth_shaping=out.bandwidth_shaping,
        stack=stack,
        image_plugins=out.image_plugins,
    )


# ---- clusters made elsewhere -------------------------------------------------------------


def connect_kubeconfig(
    path: Path, context: str | None, job_api: str | None, image: str | None
) -> ClusterConnection:
    """A cluster made elsewhere. Defaults: the context's namespace (else "default"), TrainJob,
    no GPU node selector or tolerations, GPU and node counts unknown (not checked), no results
    store (results are rebuilt from rank 0's log), the service account of the namespace, and
    the `torch-distributed` runtime. `image` is required and must be pinned (not :latest)."""
    if image is None:
        raise SpecError("--image", "is required with --kubeconfig (a tag or @sha256 digest)")
    image = check_image(image, "--image")
    text = _read_kubeconfig(path)
    namespace = _context_namespace(text, context, path)
    return ClusterConnection(
        kubeconfig=text,
        namespace=namespace,
        job_api=_job_api(job_api or "trainjob", "--job-api"),
        image=image,
        context=context,
        kubeconfig_path=str(path.expanduser().resolve()),
    )


def _read_kubeconfig(path: Path) -> str:
    """The kubeconfig's text. A pipe is fine (`--kubeconfig <(pulumi stack output ...)`),
    but what is read is capped, so that a device given by mistake (/dev/zero) cannot fill
    memory, and bytes that are not UTF-8 are bad input, not a traceback."""
    try:
        with path.expanduser().open("rb") as f:
            data = f.read(MAX_KUBECONFIG_BYTES + 1)
    except OSError as err:
        raise SpecError("--kubeconfig", f"cannot read {path}: {err.strerror}") from None
    if len(data) > MAX_KUBECONFIG_BYTES:
        raise SpecError("--kubeconfig", f"{path} is over {MAX_KUBECONFIG_BYTES >> 20} MiB, "
                        "far larger than a kubeconfig; is it the right file?")  # fmt: skip
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise SpecError(
            "--kubeconfig", f"{path} is not a kubeconfig (not UTF-8 text); check the path"
        ) from None


def _context_namespace(text: str, context: str | None, path: Path) -> str:
    import yaml  # only for --kubeconfig; not on the runner's start-up path

    try:
        data = yaml.safe_load(text) or {}
    except yaml.YAMLError as err:
        raise SpecError("--kubeconfig", f"{path} is not valid YAML: {err}") from None
    except RecursionError:  # the parser recurses once per level of nesting
        raise SpecError("--kubeconfig", f"{path} is nested too deeply to be a kubeconfig") from None
    if not isinstance(data, dict):
        raise SpecError("--kubeconfig", f"{path} is not a kubeconfig")
    name = context or data.get("current-context")
    if not isinstance(name, str):  # garbage names no context (and cannot be looked up)
        name = None
    contexts = _contexts(data.get("contexts"), path)
    if name not in contexts:
        known = ", ".join(str(c) for c in contexts) or "none"
        param = "--context" if context else "--kubeconfig"
        raise SpecError(param, f"no context {name!r} in {path} (contexts: {known})")
    namespace = contexts[name].get("namespace") or "default"
    # The namespace names the job's API paths and its handle (k8s://<namespace>/<name>).
    if not isinstance(namespace, str) or not DNS_LABEL.fullmatch(namespace):
        raise SpecError(
            "--kubeconfig",
            f"context {name!r} in {path} has namespace {namespace!r:.80}, which is not a "
            "Kubernetes namespace name (a DNS label: lowercase letters, digits, '-')",
        )
    return namespace


def _contexts(entries: Any, path: Path) -> dict[str, Mapping[str, Any]]:
    """The kubeconfig's contexts by name; a SpecError naming the file if they are garbage."""
    if entries is None:
        return {}
    damaged = SpecError("--kubeconfig", f"{path} has a `contexts` that is not a list of "
                        "{name, context} objects; check it with `kubectl config view`")  # fmt: skip
    if not isinstance(entries, list) or not all(
        isinstance(e, dict) and isinstance(e.get("name"), str) for e in entries
    ):
        raise damaged
    contexts = {e.get("name"): e.get("context") or {} for e in entries}
    if not all(isinstance(c, dict) for c in contexts.values()):
        raise damaged
    return contexts


def check_image(image: str, param: str) -> str:
    """An image reference pinned by tag or digest; `:latest` and untagged are refused."""
    problem = image_problem(image)
    if problem:
        raise SpecError(param, f"{image!r} {problem}")
    return image


def _job_api(value: str, param: str) -> JobApi:
    if value not in JOB_APIS:
        raise SpecError(param, f"must be one of {', '.join(JOB_APIS)}, got {value!r}")
    return value


def _replace(conn: ClusterConnection, **changes: Any) -> ClusterConnection:
    return dataclasses.replace(conn, **changes)


# ---- the kubeconfig on disk, briefly -----------------------------------------------------


@contextlib.contextmanager
def kubeconfig_file(conn: ClusterConnection) -> Iterator[tuple[Path, Path]]:
    """(kubeconfig path, private directory): a 0600 file in a 0700 directory, both removed on
    exit. The directory is where the kubernetes client may write certificate data too."""
    directory = Path(tempfile.mkdtemp(prefix="stackbench-kube-"))  # mkdtemp makes it 0700
    path = directory / "config"
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(conn.kubeconfig)
        yield path, directory
    finally:
        shutil.rmtree(directory, ignore_errors=True)
