"""What a stack lets in and what it lets a job do in its cloud, under Pulumi mocks: the jobs'
and the nodes' cloud identities administer nothing, pods never get the nodes' credentials,
clusters are deletion-protected by default, and the Kubernetes API answers only the configured
CIDRs (the internet only by an explicit, warned opt-in). Kubernetes' own identities (the jobs'
and the runner's) are test_infra_identity.py's."""

from __future__ import annotations

import json

import pytest
from infra_harness import OPERATOR_CIDR, REPO, Evaluation, Secret, evaluate, evaluated, stack_names

from contract.stackconfig import stackfiles
from contract.stackconfig.config import ConfigError, check_deployable
from infra import kind_bandwidth

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
