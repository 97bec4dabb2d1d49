"""ResultsStore: where jobs write results, and the cloud identity that may write there.

gke: a private GCS bucket (uniform access, public access prevented, force destroy) and a
Google service account with object read/write on it (not object admin, which may also set
IAM policies on the bucket's managed folders), which the job's Kubernetes service account
impersonates through Workload Identity. eks: a private S3 bucket (public access blocked,
force destroy) and an IAM role with read/write on it, assumed through IRSA. kind: the host
directory the nodes mount at /results; no identity. The Kubernetes service account itself is
made by addons.py with `service_account_annotations` from here.
"""

from __future__ import annotations

import json

import pulumi
import pulumi_aws as aws
import pulumi_gcp as gcp

from contract.stack import JOB_SERVICE_ACCOUNT
from contract.stackconfig.config import StackConfig, gke_account_id
from infra.cluster import ClusterComponent
from infra.kind import kind_cluster

# Create, read, list, overwrite and delete objects (and managed folders), no IAM: what the
# FUSE mount of the job pods does, and what docs/security.md promises.
GCS_WRITER_ROLE = "roles/storage.objectUser"


class ResultsStore(pulumi.ComponentResource):
    """`uri` (gs://, s3:// or file://) and the annotations that bind the job identity to it."""

    def __init__(self, name: str, cfg: StackConfig, cluster: ClusterComponent, opts=None):
        super().__init__("stackbench:index:ResultsStore", name, None, opts)
        self._opts = pulumi.ResourceOptions(parent=self, provider=cluster.cloud_provider)
        self.subject = f"system:serviceaccount:{cfg.namespace}:{JOB_SERVICE_ACCOUNT}"
        if cfg.provider == "gke":
            self.uri, self.service_account_annotations = self._gcs(name, cfg, cluster)
        elif cfg.provider == "eks":
            self.uri, self.service_account_annotations = self._s3(name, cluster)
        else:
            self.uri = pulumi.Output.from_input(kind_cluster(cluster).results_uri)
            self.service_account_annotations = {}
        self.register_outputs(
            {"uri": self.uri, "service_account_annotations": self.service_account_annotations}
        )

    def _gcs(self, name: str, cfg: StackConfig, cluster):
        bucket = gcp.storage.Bucket(
            f"{name}-bucket",
            location=cfg.region,
            force_destroy=True,
            uniform_bucket_level_access=True,
            public_access_prevention="enforced",
            opts=self._opts,
        )
        account = gcp.serviceaccount.Account(
            f"{name}-writer",
            account_id=gke_account_id(cfg.stack, "-results"),
            display_name=f"stackbench {cfg.stack} results writer",
            opts=self._opts,
        )
        gcp.storage.BucketIAMMember(
            f"{name}-writer-objects",
            bucket=bucket.name,
            role=GCS_WRITER_ROLE,
            member=account.email.apply(lambda email: f"serviceAccount:{email}"),
            opts=self._opts,
        )
        # Workload Identity: the Kubernetes service account may act as the Google one.
        gcp.serviceaccount.IAMMember(
            f"{name}-writer-wi",
            service_account_id=account.name,
            role="roles/iam.workloadIdentityUser",
            member=pulumi.Output.concat(
                "serviceAccount:",
                cluster.workload_pool,
                f"[{cfg.namespace}/{JOB_SERVICE_ACCOUNT}]",
            ),
            opts=self._opts,
        )
        annotations = {"iam.gke.io/gcp-service-account": account.email}
        return pulumi.Output.concat("gs://", bucket.name), annotations

    def _s3(self, name: str, cluster):
        bucket = aws.s3.Bucket(f"{name}-bucket", force_destroy=True, opts=self._opts)
        aws.s3.BucketPublicAccessBlock(
            f"{name}-bucket-private",
            bucket=bucket.id,
            block_public_acls=True,
            block_public_policy=True,
            ignore_public_acls=True,
            restrict_public_buckets=True,
            opts=self._opts,
        )
        role = aws.iam.Role(
            f"{name}-writer",
            assume_role_policy=pulumi.Output.all(
                cluster.oidc_provider_arn, cluster.oidc_provider_url
            ).apply(lambda v: irsa_trust_policy(v[0], v[1], self.subject)),
            opts=self._opts,
        )
        aws.iam.RolePolicy(
            f"{name}-writer-objects",
            role=role.id,
            policy=bucket.arn.apply(bucket_rw_policy),
            opts=self._opts,
        )
        annotations = {"eks.amazonaws.com/role-arn": role.arn}
        return pulumi.Output.concat("s3://", bucket.bucket), annotations


def irsa_trust_policy(provider_arn: str, provider_url: str, subject: str) -> str:
    """Only this service account, through this cluster's OIDC provider, may assume the role."""
    issuer = provider_url.removeprefix("https://")
    condition = {f"{issuer}:sub": subject, f"{issuer}:aud": "sts.amazonaws.com"}
    statement = {
        "Effect": "Allow",
        "Principal": {"Federated": provider_arn},
        "Action": "sts:AssumeRoleWithWebIdentity",
        "Condition": {"StringEquals": condition},
    }
    return json.dumps({"Version": "2012-10-17", "Statement": [statement]})


def bucket_rw_policy(bucket_arn: str) -> str:
    statements = [
        {"Effect": "Allow", "Action": ["s3:ListBucket"], "Resource": bucket_arn},
        {
            "Effect": "Allow",
            "Action": ["s3:GetObject", "s3:PutObject", "s3:DeleteObject"],
            "Resource": f"{bucket_arn}/*",
        },
    ]
    return json.dumps({"Version": "2012-10-17", "Statement": statements})
