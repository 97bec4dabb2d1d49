"""The runner's identity in the cluster: a ServiceAccount, a Role in the jobs' namespace with
exactly the verbs the runner uses (contract.stack.runner_role_rules), a RoleBinding, a second
Role and RoleBinding in the job controller's namespace that let it read that one Deployment
(contract.stack.controller_role_rules: submit records the controller's version), and the
kubeconfig the runner reads from the stack's `runner_kubeconfig` output.

The kubeconfig is the admin kubeconfig's cluster (server and CA, nothing of its user) with the
account's token from a `kubernetes.io/service-account-token` Secret: the token controller
fills it in, and pulumi-kubernetes waits for that before it reads the Secret back. The token
does not expire by itself (a TokenRequest token would, and a stack output cannot renew it);
it is revoked with the Secret (`pulumi up` after deleting it makes another) and is only as
secret as the stack's state, where the admin kubeconfig already lives. The admin credentials
stay with `pulumi`: the runner never reads them (runner/backends/kubernetes/connection.py).
"""

from __future__ import annotations

import base64
import json
from typing import Any

import pulumi
import pulumi_kubernetes as k8s
import yaml

from contract.stack import (
    CONTROLLER_READER,
    JOB_CONTROLLERS,
    RUNNER_IDENTITY,
    JobApi,
    controller_role_rules,
    runner_role_rules,
)
from contract.stackconfig.config import StackConfig
from infra.cluster import ClusterComponent

TOKEN_SECRET = f"{RUNNER_IDENTITY}-token"
SERVICE_ACCOUNT_ANNOTATION = "kubernetes.io/service-account.name"


class RunnerIdentity(pulumi.ComponentResource):
    """The runner's ServiceAccount, Role, RoleBinding and token; `kubeconfig` (secret) is the
    runner's way in. `after`: what makes the jobs' namespace (the add-ons); `controller_after`:
    what makes the job controller's (Addons.controller_namespace)."""

    def __init__(
        self,
        name: str,
        cfg: StackConfig,
        cluster: ClusterComponent,
        after: pulumi.Resource,
        controller_after: pulumi.Resource,
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        super().__init__("stackbench:index:RunnerIdentity", name, None, opts)
        k8s_opts = pulumi.ResourceOptions(
            parent=self,
            provider=cluster.k8s_provider,
            deleted_with=cluster.cluster_resource,
            depends_on=[after],
        )
        meta: k8s.meta.v1.ObjectMetaArgsDict = {"name": RUNNER_IDENTITY, "namespace": cfg.namespace}
        account = k8s.core.v1.ServiceAccount(
            f"{name}-sa",
            metadata=meta,
            automount_service_account_token=False,  # the runner is no pod; nothing mounts it
            opts=k8s_opts,
        )
        role = k8s.rbac.v1.Role(f"{name}-role", metadata=meta, rules=role_rules(cfg.job_api),
                                opts=k8s_opts)  # fmt: skip
        _bind(f"{name}-binding", meta, cfg.namespace, role, k8s_opts)
        controller_opts = pulumi.ResourceOptions.merge(
            k8s_opts, pulumi.ResourceOptions(depends_on=[controller_after])
        )
        controller_meta: k8s.meta.v1.ObjectMetaArgsDict = {
            "name": CONTROLLER_READER,
            "namespace": JOB_CONTROLLERS[cfg.job_api].namespace,
        }
        controller_role = k8s.rbac.v1.Role(f"{name}-controller-role", metadata=controller_meta,
                                           rules=_spelled(controller_role_rules(cfg.job_api)),
                                           opts=controller_opts)  # fmt: skip
        _bind(f"{name}-controller-binding", controller_meta, cfg.namespace, controller_role,
              controller_opts)  # fmt: skip
        token = k8s.core.v1.Secret(
            f"{name}-token",
            metadata={
                "name": TOKEN_SECRET,
                "namespace": cfg.namespace,
                "annotations": {SERVICE_ACCOUNT_ANNOTATION: RUNNER_IDENTITY},
            },
            type="kubernetes.io/service-account-token",
            # The token controller fills the Secret only once the account exists.
            opts=pulumi.ResourceOptions.merge(
                k8s_opts, pulumi.ResourceOptions(depends_on=[account])
            ),
        )
        self.kubeconfig: pulumi.Output[str] = pulumi.Output.secret(
            pulumi.Output.all(cluster.kubeconfig, token.data).apply(
                lambda args: token_kubeconfig(args[0], _token(args[1]), cfg.namespace)
            )
        )
        self.register_outputs({"service_account": RUNNER_IDENTITY, "kubeconfig": self.kubeconfig})


def role_rules(job_api: JobApi) -> list[dict[str, Any]]:
    """The Role's rules as the Kubernetes API spells them."""
    return _spelled(runner_role_rules(job_api))


def _spelled(rules: tuple[dict[str, tuple[str, ...]], ...]) -> list[dict[str, Any]]:
    return [{key: list(values) for key, values in rule.items()} for rule in rules]


def _bind(
    name: str,
    meta: k8s.meta.v1.ObjectMetaArgsDict,
    account_namespace: str,
    role: k8s.rbac.v1.Role,
    opts: pulumi.ResourceOptions,
) -> k8s.rbac.v1.RoleBinding:
    """A RoleBinding of `meta`'s name and namespace granting the Role of that name to the
    runner's ServiceAccount (in `account_namespace`, the jobs')."""
    return k8s.rbac.v1.RoleBinding(
        name,
        metadata=meta,
        role_ref={"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": meta["name"]},
        subjects=[
            {"kind": "ServiceAccount", "name": RUNNER_IDENTITY, "namespace": account_namespace}
        ],
        opts=pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(depends_on=[role])),
    )


def _token(data: Any) -> str:
    encoded = (data or {}).get("token") if isinstance(data, dict) else None
    if not isinstance(encoded, str) or not encoded:
        raise ValueError(
            f"Secret {TOKEN_SECRET} has no token: the token controller did not fill it"
        )
    return base64.b64decode(encoded).decode("ascii")


def token_kubeconfig(admin_kubeconfig: str, token: str, namespace: str) -> str:
    """A one-context kubeconfig for the runner: the admin kubeconfig's current cluster (its
    server and CA: what the runner must trust) with the runner's token and namespace."""
    admin = yaml.safe_load(admin_kubeconfig)  # YAML (kind) or JSON (gke, eks)
    current = admin.get("current-context")
    context = next(c["context"] for c in admin["contexts"] if c["name"] == current)
    cluster = next(c["cluster"] for c in admin["clusters"] if c["name"] == context["cluster"])
    server = {k: v for k, v in cluster.items()
              if k in ("server", "certificate-authority-data", "tls-server-name")}  # fmt: skip
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": RUNNER_IDENTITY, "cluster": server}],
        "users": [{"name": RUNNER_IDENTITY, "user": {"token": token}}],
        "contexts": [{"name": RUNNER_IDENTITY, "context": {
            "cluster": RUNNER_IDENTITY, "user": RUNNER_IDENTITY, "namespace": namespace}}],
        "current-context": RUNNER_IDENTITY,
    }  # fmt: skip
    return json.dumps(config, indent=2)
