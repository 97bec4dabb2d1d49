"""Mock cloud answers for the infra program: plausible outputs per resource type and invoke.

Only outputs the program reads are filled in (endpoints, ARNs, digests, kubeconfigs); every
other output echoes the inputs, as the Pulumi mocks convention goes. Nothing here decides
what the program does: tests assert on what it registered.
"""

from __future__ import annotations

import hashlib
import json

from pulumi.runtime import MockCallArgs, MockResourceArgs, Mocks

ACCOUNT = "123456789012"
SA_TOKEN_TYPE = "kubernetes.io/service-account-token"
MOCK_TOKEN = "runner-token"
MOCK_TOKEN_B64 = "cnVubmVyLXRva2Vu"  # base64 of MOCK_TOKEN
PROJECT = "mock-project"


def _digest(name: str) -> str:
    return "sha256:" + hashlib.sha256(name.encode()).hexdigest()


def _kubeconfig(name: str) -> str:
    """An admin kubeconfig of the shape every cluster kind gives (kind's YAML parses the same)."""
    cluster = {"server": f"https://{name}.example:6443", "certificate-authority-data": "Q0EK"}
    return json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": name,
        "clusters": [{"name": name, "cluster": cluster}],
        "contexts": [{"name": name, "context": {"cluster": name, "user": name}}],
        "users": [{"name": name, "user": {"token": "admin-token"}}],
    })  # fmt: skip


def _outputs(args: MockResourceArgs) -> dict:
    name, inputs = args.name, args.inputs
    match args.typ:
        case "gcp:container/cluster:Cluster":
            return {
                "name": name,
                "endpoint": "203.0.113.10",
                "masterAuth": {"clusterCaCertificate": "Q0EK"},
            }
        case "eks:index:Cluster":
            issuer = f"oidc.eks.us-east-1.amazonaws.com/id/{name.upper()}"
            return {
                "kubeconfigJson": _kubeconfig(name),
                "kubeconfig": json.loads(_kubeconfig(name)),
                "oidcProviderArn": f"arn:aws:iam::{ACCOUNT}:oidc-provider/{issuer}",
                "oidcProviderUrl": f"https://{issuer}",
            }
        case "command:local:Command":
            return {"stdout": _kubeconfig(name), "stderr": ""}
        case "docker-build:index:Image":
            return {"digest": _digest(name), "ref": ""}
        case "aws:ecr/repository:Repository":
            url = f"{ACCOUNT}.dkr.ecr.us-east-1.amazonaws.com/{inputs.get('name', name)}"
            arn = f"arn:aws:ecr:us-east-1:{ACCOUNT}:repository/{inputs.get('name', name)}"
            return {"repositoryUrl": url, "registryId": ACCOUNT, "arn": arn}
        case "gcp:artifactregistry/repository:Repository":
            return {"project": PROJECT, "name": inputs.get("repositoryId", name)}
        case "gcp:storage/bucket:Bucket":
            return {"name": f"{name}-7f3a", "url": f"gs://{name}-7f3a"}
        case "aws:s3/bucket:Bucket":
            return {"bucket": f"{name}-7f3a", "arn": f"arn:aws:s3:::{name}-7f3a"}
        case "aws:ec2/launchTemplate:LaunchTemplate":
            return {"latestVersion": 1}
        case "aws:iam/role:Role":
            return {"arn": f"arn:aws:iam::{ACCOUNT}:role/{name}", "name": name}
        case "kubernetes:core/v1:Secret" if inputs.get("type") == SA_TOKEN_TYPE:
            # What the token controller fills in (pulumi-kubernetes waits for it).
            return {"data": {**inputs.get("data", {}), "token": MOCK_TOKEN_B64}}
        case "gcp:serviceaccount/account:Account":
            email = f"{inputs.get('accountId', name)}@{PROJECT}.iam.gserviceaccount.com"
            return {"email": email, "name": f"projects/{PROJECT}/serviceAccounts/{email}"}
    return {}


class CloudMocks(Mocks):
    def new_resource(self, args: MockResourceArgs):
        state = {**args.inputs, **_outputs(args)}
        return f"{args.name}-id", state

    def call(self, args: MockCallArgs):
        if args.token == "gcp:organizations/getClientConfig:getClientConfig":
            return {"project": PROJECT, "accessToken": "ya29.mock", "id": "client"}
        if args.token == "aws:ecr/getAuthorizationToken:getAuthorizationToken":
            return {"userName": "AWS", "password": "mock-password", "id": ACCOUNT}
        return {}
