"""Who may do what in a stack's cluster, under Pulumi mocks: the jobs' service account holds
no Kubernetes permission and no token; the runner's identity holds exactly what the runner
calls in the jobs' namespace, may read only the job controller's Deployment in the
controller's, and reaches the cluster through a kubeconfig with its own token and nothing of
the admin's. The clouds' identities and the network are test_infra_security.py's."""

from __future__ import annotations

import json

import pytest
from infra_harness import Evaluation, Secret, evaluate
from infra_mocks import MOCK_TOKEN

from contract.stack import (
    CONTROLLER_READER,
    JOB_CONTROLLERS,
    JOB_SERVICE_ACCOUNT,
    RUNNER_IDENTITY,
    controller_role_rules,
    runner_role_rules,
)
from infra import rbac

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

# ---- the jobs' identity ----------------------------------------------------------------------


def test_the_jobs_service_account_has_no_kubernetes_permissions(ev):
    """Jobs need nothing from the API server (peers come from the operator, results go to a
    volume); the RoleBindings bind the runner's identity, never the jobs'."""
    bindings = ev.of_type("kubernetes:rbac.authorization.k8s.io/v1:RoleBinding")
    subjects = [s["name"] for b in bindings for s in b.inputs["subjects"]]
    assert subjects == [RUNNER_IDENTITY, RUNNER_IDENTITY]  # the jobs' namespace, the controller's
    assert JOB_SERVICE_ACCOUNT != RUNNER_IDENTITY
    cluster_wide = ("ClusterRole", "ClusterRoleBinding")
    assert not [r for r in ev.resources if r.type.rpartition(":")[2] in cluster_wide]


def test_no_service_account_mounts_an_api_token(ev):
    accounts = ev.of_type("kubernetes:core/v1:ServiceAccount")
    assert {a.inputs["metadata"]["name"] for a in accounts} == {
        JOB_SERVICE_ACCOUNT,
        RUNNER_IDENTITY,
    }
    assert all(a.inputs["automountServiceAccountToken"] is False for a in accounts)


# ---- the runner's identity -------------------------------------------------------------------


def test_the_runner_role_allows_exactly_what_the_runner_calls_in_the_jobs_namespace(ev):
    role = ev.one("kubernetes:rbac.authorization.k8s.io/v1:Role", "-runner-role")
    namespace = ev.value("namespace")
    assert role.inputs["metadata"] == {"name": RUNNER_IDENTITY, "namespace": namespace}
    expected = [
        {k: list(v) for k, v in rule.items()} for rule in runner_role_rules(ev.value("job_api"))
    ]
    assert role.inputs["rules"] == expected
    verbs = {verb for rule in role.inputs["rules"] for verb in rule["verbs"]}
    assert not verbs & {
        "*",
        "update",
        "patch",
        "deletecollection",
        "escalate",
        "bind",
        "impersonate",
    }
    binding = ev.one("kubernetes:rbac.authorization.k8s.io/v1:RoleBinding", "-runner-binding")
    assert binding.inputs["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": RUNNER_IDENTITY
    }  # fmt: skip
    assert binding.inputs["subjects"] == [
        {"kind": "ServiceAccount", "name": RUNNER_IDENTITY, "namespace": namespace}
    ]


def check_controller_reader(ev: Evaluation) -> None:
    """The runner's second Role: `get` of the job controller's one Deployment, in the
    controller's namespace, bound to the runner's account, made after that namespace is."""
    job_api = ev.value("job_api")
    controller = JOB_CONTROLLERS[job_api]
    role = ev.one("kubernetes:rbac.authorization.k8s.io/v1:Role", "-runner-controller-role")
    meta = {"name": CONTROLLER_READER, "namespace": controller.namespace}
    assert role.inputs["metadata"] == meta
    assert role.inputs["rules"] == [{
        "apiGroups": ["apps"], "resources": ["deployments"], "verbs": ["get"],
        "resourceNames": [controller.deployment],
    }]  # fmt: skip
    assert role.inputs["rules"] == [
        {k: list(v) for k, v in rule.items()} for rule in controller_role_rules(job_api)
    ]
    binding = ev.one(
        "kubernetes:rbac.authorization.k8s.io/v1:RoleBinding", "-runner-controller-binding"
    )
    assert binding.inputs["metadata"] == meta
    assert binding.inputs["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": CONTROLLER_READER
    }  # fmt: skip
    assert binding.inputs["subjects"] == [
        {"kind": "ServiceAccount", "name": RUNNER_IDENTITY, "namespace": ev.value("namespace")}
    ]
    # Made once its namespace is: the Trainer's Namespace, or the training-operator's manifests.
    maker = (
        ev.one("kubernetes:core/v1:Namespace", "-trainer-ns")
        if job_api == "trainjob"
        else ev.one("kubernetes:kustomize/v2:Directory")
    )
    if job_api == "trainjob":
        assert maker.inputs["metadata"]["name"] == controller.namespace
        # The chart names the Deployment after the release (contract/stack.py says how).
        trainer = ev.one("kubernetes:helm.sh/v3:Release", "-trainer")
        assert trainer.inputs["namespace"] == controller.namespace
        assert f"{trainer.inputs['name']}-controller-manager" == controller.deployment
    assert maker.urn in role.dependencies and maker.urn in binding.dependencies


def test_the_runner_may_read_the_job_controllers_deployment_and_nothing_else_there(ev):
    check_controller_reader(ev)


def test_a_pytorchjob_stack_lets_the_runner_read_the_training_operators_deployment():
    ev = evaluate("kind", {"stackbench:jobApi": "pytorchjob"})
    assert ev.value("job_api") == "pytorchjob"
    check_controller_reader(ev)


def test_the_runner_kubeconfig_is_a_secret_holding_the_runners_token_and_no_admin_user(ev):
    assert isinstance(ev.outputs["runner_kubeconfig"], Secret)
    config = json.loads(ev.value("runner_kubeconfig"))
    admin = json.loads(ev.value("kubeconfig")) if ev.value("kubeconfig").startswith("{") else None
    assert config["users"] == [{"name": RUNNER_IDENTITY, "user": {"token": MOCK_TOKEN}}]
    [context] = config["contexts"]
    assert context["context"]["namespace"] == ev.value("namespace")
    [cluster] = config["clusters"]
    assert set(cluster["cluster"]) <= {"server", "certificate-authority-data", "tls-server-name"}
    if admin is not None:  # the same server and CA as the admin's, none of its user
        assert cluster["cluster"]["server"] == admin["clusters"][0]["cluster"]["server"]
    token = ev.one("kubernetes:core/v1:Secret", "-runner-token")
    assert token.inputs["type"] == "kubernetes.io/service-account-token"
    assert token.inputs["metadata"]["annotations"] == {
        "kubernetes.io/service-account.name": RUNNER_IDENTITY
    }


def test_a_runner_kubeconfig_keeps_the_admins_server_and_ca_only():
    admin = """
apiVersion: v1
kind: Config
current-context: kind-x
clusters:
- name: kind-x
  cluster: {server: "https://127.0.0.1:6443", certificate-authority-data: Q0EK}
- name: other
  cluster: {server: "https://elsewhere:6443"}
contexts:
- name: kind-x
  context: {cluster: kind-x, user: kind-x}
users:
- name: kind-x
  user: {client-certificate-data: QURNSU4K, client-key-data: S0VZCg==}
"""
    config = json.loads(rbac.token_kubeconfig(admin, "t0ken", "bench"))
    assert config["clusters"][0]["cluster"] == {
        "server": "https://127.0.0.1:6443", "certificate-authority-data": "Q0EK"
    }  # fmt: skip
    assert "QURNSU4K" not in json.dumps(config) and "S0VZCg==" not in json.dumps(config)
    assert config["users"][0]["user"] == {"token": "t0ken"}
