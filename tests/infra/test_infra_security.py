"""What a stack lets in and what it lets a job do, under Pulumi mocks: the jobs' service account
holds no Kubernetes permission and no token, the runner's holds exactly what the runner calls,
clusters are deletion-protected by default, and
the Kubernetes API answers only the configured CIDRs (the internet only by an explicit,
warned opt-in)."""

from __future__ import annotations

import json

import pytest
from infra_harness import OPERATOR_CIDR, REPO, Evaluation, Secret, evaluate, evaluated, stack_names
from infra_mocks import MOCK_TOKEN

from contract.stack import (
    CONTROLLER_READER,
    JOB_CONTROLLERS,
    JOB_SERVICE_ACCOUNT,
    RUNNER_IDENTITY,
    controller_role_rules,
    runner_role_rules,
)
from contract.stackconfig import stackfiles
from contract.stackconfig.config import ConfigError, check_deployable
from infra import kind_bandwidth, rbac

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")
CLOUD_STACKS = [s for s in stack_names() if stackfiles.load(REPO, s).provider != "kind"]


def cluster(ev: Evaluation):
    provider = ev.value("provider")
    return ev.one({"gke": "gcp:container/cluster:Cluster", "eks": "eks:index:Cluster"}[provider])


def api_cidrs(ev: Evaluation) -> list[str]:
    if ev.value("provider") == "gke":
        networks = cluster(ev).inputs["masterAuthorizedNetworksConfig"]
        assert networks["gcpPublicCidrsAccessEnabled"] is False
        return [b["cidrBlock"] for b in networks["cidrBlocks"]]
    eks = cluster(ev).inputs
    assert eks["endpointPrivateAccess"] is True  # nodes reach the API inside the VPC
    return eks["publicAccessCidrs"]


def _strings(value):
    if isinstance(value, dict):
        for v in value.values():
            yield from _strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from _strings(v)
    elif isinstance(value, Secret):
        yield from _strings(value.value)
    elif isinstance(value, str):
        yield value


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


def test_the_jobs_cloud_identity_reads_and_writes_objects_and_administers_nothing(ev):
    """docs/security.md: only object read/write on the results bucket. storage.objectAdmin
    would also let a job set IAM policies on the bucket's managed folders."""
    grants = ev.of_type("gcp:storage/bucketIAMMember:BucketIAMMember")
    assert [g.inputs["role"] for g in grants] == (
        ["roles/storage.objectUser"] if ev.value("provider") == "gke" else []
    )
    assert ev.of_type("gcp:storage/bucketIAMBinding:BucketIAMBinding") == []
    for policy in ev.of_type("aws:iam/rolePolicy:RolePolicy"):
        if not policy.name.endswith("-results-writer-objects"):
            continue  # the nodes' image pulls, below
        actions = {a for s in json.loads(policy.inputs["policy"])["Statement"] for a in s["Action"]}
        assert actions <= {"s3:ListBucket", "s3:GetObject", "s3:PutObject", "s3:DeleteObject"}


def test_gke_nodes_hold_no_project_wide_role_beyond_logs_and_metrics(ev):
    """A project-wide registry reader would let a node (or a pod that reaches its token) read
    every repository of the project, not only the stack's own."""
    roles = {m.inputs["role"] for m in ev.of_type("gcp:projects/iAMMember:IAMMember")}
    assert roles <= {
        "roles/logging.logWriter",
        "roles/monitoring.metricWriter",
        "roles/monitoring.viewer",
    }


def test_gke_nodes_read_the_stacks_own_image_repository_only(ev):
    grants = ev.of_type("gcp:artifactregistry/repositoryIamMember:RepositoryIamMember")
    if ev.value("provider") != "gke":
        assert grants == []
        return
    repo = ev.one("gcp:artifactregistry/repository:Repository")
    [grant] = grants
    assert grant.inputs["role"] == "roles/artifactregistry.reader"
    assert grant.inputs["repository"] == repo.inputs["repositoryId"]
    assert grant.inputs["location"] == repo.inputs["location"]
    # The identity granted is the one every node pool runs as, and the image is in that repo.
    accounts = {
        pool.inputs["nodeConfig"]["serviceAccount"]
        for pool in ev.of_type("gcp:container/nodePool:NodePool")
    }
    assert [f"serviceAccount:{a}" for a in accounts] == [grant.inputs["member"]]
    assert f"/{repo.inputs['repositoryId']}/" in ev.value("image")
    assert ev.of_type("gcp:artifactregistry/repositoryIamBinding:RepositoryIamBinding") == []
    assert ev.of_type("gcp:artifactregistry/repositoryIamPolicy:RepositoryIamPolicy") == []


def test_gke_pods_get_the_gke_metadata_server_never_the_nodes_credentials(ev):
    """docs/security.md: on GKE a pod asking the metadata server gets its Workload Identity
    account's tokens (the job's: results bucket only), never the node account's."""
    for pool in ev.of_type("gcp:container/nodePool:NodePool"):
        assert pool.inputs["nodeConfig"]["workloadMetadataConfig"] == {"mode": "GKE_METADATA"}


# ---- what a pod on an EKS node can reach -----------------------------------------------------


EKS_CPU = {
    "stackbench:gpusPerNode": 0,
    "stackbench:gpuType": "",
    "stackbench:nodeMachineType": "m5.xlarge",
}


@pytest.mark.parametrize("overrides", [{}, EKS_CPU], ids=["gpu", "cpu"])
def test_eks_pods_cannot_reach_the_nodes_instance_metadata(overrides):
    """IMDSv2 with a hop limit of 1 on every node group, CPU and GPU: the node (and
    host-network pods) reach the metadata service, a pod one hop further cannot, so no job can
    take the node role's credentials. Jobs reach their bucket through IRSA instead."""
    ev = evaluate("eks-gpu-8", overrides)
    groups = ev.of_type("eks:index:ManagedNodeGroup")
    amis = {g.inputs["amiType"] for g in groups}
    assert len(groups) == 2 and ("AL2023_x86_64_NVIDIA" in amis) == (overrides == {})
    templates = {f"{t.name}-id": t for t in ev.of_type("aws:ec2/launchTemplate:LaunchTemplate")}
    for group in groups:
        template = templates[group.inputs["launchTemplate"]["id"]]
        assert template.inputs["metadataOptions"] == {
            "httpEndpoint": "enabled",
            "httpTokens": "required",
            "httpPutResponseHopLimit": 1,
        }
        # EKS still picks the AMI and bootstraps the node: the template sets neither.
        assert "imageId" not in template.inputs and "userData" not in template.inputs
        # The disk moved into the template (EKS refuses a group's diskSize beside one).
        assert "diskSize" not in group.inputs
        [disk] = template.inputs["blockDeviceMappings"]
        assert disk["deviceName"] == "/dev/xvda" and disk["ebs"]["volumeSize"] == 200
        # pulumi-eks' own IMDSv2 switch sets a hop limit of 2, which lets pods in.
        assert "enableIMDSv2" not in group.inputs


def node_role_grants(ev: Evaluation) -> tuple[list[str], list[dict]]:
    """The managed policies attached to the EKS node role, and its inline statements."""
    role = ev.one("aws:iam/role:Role", "-nodes")
    role_refs = {role.name, f"{role.name}-id"}  # by name (attachments) or by id (inline)
    attached = [
        a.inputs["policyArn"]
        for a in ev.of_type("aws:iam/rolePolicyAttachment:RolePolicyAttachment")
        if a.inputs["role"] in role_refs
    ]
    statements = [
        statement
        for p in ev.of_type("aws:iam/rolePolicy:RolePolicy")
        if p.inputs["role"] in role_refs
        for statement in json.loads(p.inputs["policy"])["Statement"]
    ]
    return attached, statements


@pytest.mark.parametrize("overrides", [{}, EKS_CPU], ids=["gpu", "cpu"])
def test_eks_nodes_pull_from_the_stacks_repository_and_the_addon_registry_only(overrides):
    """A managed ECR policy (AmazonEC2ContainerRegistryReadOnly) or a wildcard repository
    would let a node, or a pod that reached its credentials, read every repository of the
    account. The nodes need the stack's repository (the training image) and the region's
    EKS add-on registry (VPC CNI, kube-proxy, CoreDNS), another account's."""
    ev = evaluate("eks-gpu-8", overrides)
    attached, statements = node_role_grants(ev)
    assert sorted(a.rsplit("/", 1)[1] for a in attached) == [
        "AmazonEKSWorkerNodePolicy",
        "AmazonEKS_CNI_Policy",
    ]
    repo = ev.one("aws:ecr/repository:Repository")
    own = f"arn:aws:ecr:us-east-1:123456789012:repository/{repo.inputs['name']}"
    pulled: set[str] = set()
    for statement in statements:
        assert statement["Effect"] == "Allow"
        if statement["Action"] == ["ecr:GetAuthorizationToken"]:
            assert statement["Resource"] == "*"  # IAM takes no repository for it
            continue
        assert sorted(statement["Action"]) == [
            "ecr:BatchCheckLayerAvailability",
            "ecr:BatchGetImage",
            "ecr:GetDownloadUrlForLayer",
        ]
        pulled |= set(statement["Resource"])
    assert pulled == {own, "arn:aws:ecr:us-east-1:602401143452:repository/*"}
    assert f"/{repo.inputs['name']}@sha256:" in ev.value("image")  # the image jobs pull
    # Both node groups wait for the role's grants: their first nodes pull the CNI at boot.
    grants = {
        r.urn
        for r in ev.resources
        if r.type
        in ("aws:iam/rolePolicy:RolePolicy", "aws:iam/rolePolicyAttachment:RolePolicyAttachment")
        and r.name.startswith("eks-gpu-8-nodes-")
    }
    for group in ev.of_type("eks:index:ManagedNodeGroup"):
        assert grants <= set(group.dependencies), group.name


def test_eks_nodes_pull_add_ons_from_their_regions_registry_in_its_partition():
    ev = evaluate("eks-gpu-8", {"stackbench:region": "cn-north-1"})
    attached, statements = node_role_grants(ev)
    assert all(a.startswith("arn:aws-cn:iam::aws:policy/") for a in attached)
    resources = {r for s in statements if s["Resource"] != "*" for r in s["Resource"]}
    assert "arn:aws-cn:ecr:cn-north-1:918309763551:repository/*" in resources


def test_an_eks_region_without_a_known_addon_registry_is_refused_before_anything_is_made():
    registered: list = []
    with pytest.raises(ConfigError) as err:
        evaluate("eks-gpu-8", {"stackbench:region": "xx-east-9"}, record=registered)
    assert err.value.key == "region" and "add-on image registry" in str(err.value)
    assert registered == []


# ---- deletion protection ---------------------------------------------------------------------


@pytest.mark.parametrize("stack", CLOUD_STACKS)
def test_cloud_clusters_are_deletion_protected_by_default(stack):
    ev = evaluated(stack)
    assert cluster(ev).inputs["deletionProtection"] is True


@pytest.mark.parametrize("stack", ["gke-gpu-8", "eks-gpu-8"])
def test_deletion_protection_is_a_stack_setting(stack):
    ev = evaluate(stack, {"stackbench:deletionProtection": False})
    assert cluster(ev).inputs["deletionProtection"] is False


# ---- who reaches the Kubernetes API ----------------------------------------------------------


def test_nothing_is_open_to_the_whole_internet_by_default(ev):
    # kind's CNI chain holds the pods' default route (0.0.0.0/0), which opens nothing.
    route_table = kind_bandwidth.conflist_template()
    for resource in ev.resources:
        strings = [s for s in _strings(resource.inputs) if s != route_table]
        assert not any("0.0.0.0/0" in s for s in strings), resource.name
    if ev.value("provider") == "kind":
        config = json.loads(
            ev.one("command:local:Command", "-cluster").inputs["environment"]["KIND_CONFIG"]
        )
        assert config["networking"]["apiServerAddress"] == "127.0.0.1"
    else:
        assert api_cidrs(ev) == [OPERATOR_CIDR]


@pytest.mark.parametrize("stack", ["gke-gpu-8", "eks-gpu-8"])
def test_api_cidrs_reach_the_cluster_exactly_as_configured(stack):
    cidrs = ["203.0.113.0/28", "198.51.100.9/32"]
    assert api_cidrs(evaluate(stack, {"stackbench:apiAllowedCidrs": cidrs})) == cidrs


@pytest.mark.parametrize("cidrs", [["0.0.0.0/0"], ["0.0.0.0/1", "128.0.0.0/1"], ["64.0.0.0/2"]])
@pytest.mark.parametrize("stack", ["gke-cpu-16", "eks-gpu-8"])
def test_the_internet_is_refused_without_the_opt_in(stack, cidrs):
    registered = []
    with pytest.raises(ConfigError) as err:
        evaluate(stack, {"stackbench:apiAllowedCidrs": cidrs}, record=registered)
    assert err.value.key == "apiAllowedCidrs" and "apiOpenToInternet" in str(err.value)
    assert registered == []


def test_the_internet_opt_in_opens_the_api_and_warns(caplog):
    ev = evaluate(
        "gke-cpu-16",
        {"stackbench:apiAllowedCidrs": ["0.0.0.0/0"], "stackbench:apiOpenToInternet": True},
    )
    assert api_cidrs(ev) == ["0.0.0.0/0"]
    # The mock engine logs what `pulumi up` would print as a warning.
    [warning] = [r for r in caplog.records if r.levelname == "WARNING"]
    assert warning.getMessage().startswith(
        "the Kubernetes API of stack gke-cpu-16 accepts connections from 0.0.0.0/0"
    )


def test_a_private_range_needs_no_opt_in():
    ev = evaluate("eks-gpu-8", {"stackbench:apiAllowedCidrs": ["10.0.0.0/8"]})
    assert api_cidrs(ev) == ["10.0.0.0/8"]


@pytest.mark.parametrize("stack", CLOUD_STACKS)
def test_stack_files_leave_api_cidrs_to_the_operator_and_up_refuses_without_them(stack):
    cfg = stackfiles.load(REPO, stack)  # readable as is (runner cost reads it)
    assert cfg.api_allowed_cidrs == ()
    with pytest.raises(ConfigError) as err:
        check_deployable(cfg)
    assert err.value.key == "apiAllowedCidrs"
