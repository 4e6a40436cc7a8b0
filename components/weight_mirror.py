"""The weight mirror (`weightMirror`): the S3 bucket that holds a copy of every Hugging Face revision the tenants'
pods read (private, owner-enforced, TLS-only, with abandoned multipart uploads cleaned up), the S3 gateway endpoint
if the stack asks for one, and in the `model-weights` namespace one Job per revision that writes its copy
(components/specs/weight_mirror.py). A pod reading a copy waits for its Job (`jobs`, by name)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass

import pulumi

from platform_config.models import WeightMirrorConfig
from platform_config.namespaces import MIRROR_NAMESPACE
from platform_config.weight_mirror import MirroredRevision

from .aws_objects import (
    S3_BUCKET,
    S3_BUCKET_POLICY,
    S3_ENCRYPTION,
    S3_LIFECYCLE,
    S3_OWNERSHIP_CONTROLS,
    S3_PUBLIC_ACCESS_BLOCK,
    VPC_ENDPOINT,
    AwsResource,
)
from .constants import PACKAGE
from .k8s_objects import KubernetesObject
from .specs import weight_mirror as specs
from .workload_identity import WorkloadAccess, WorkloadIdentity, WorkloadIdentityArgs

# Parts of an interrupted copy stay in the bucket, billed and invisible, until a rule aborts them.
ABANDONED_UPLOAD_DAYS = 1
# pulumi-kubernetes waits for a Job to complete before it counts as created: longer than the Job's own deadline.
JOB_AWAIT_MARGIN_SECONDS = 600


@dataclass(frozen=True)
class WeightMirrorArgs:
    mirror: WeightMirrorConfig
    revisions: tuple[MirroredRevision, ...]
    access: WorkloadAccess
    region: pulumi.Input[str]
    vpc_id: pulumi.Input[str]
    tags: dict[str, str]
    # Each tenant's Hugging Face token, where it has one (gated repositories need it).
    hugging_face_tokens: Mapping[str, pulumi.Input[str]]


class WeightMirror(pulumi.ComponentResource):
    def __init__(self, name: str, args: WeightMirrorArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__(f"{PACKAGE}:weight-mirror:WeightMirror", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        mirror = args.mirror
        # What the Jobs write through: the bucket with its settings, and the route to S3 where the stack adds one.
        storage: list[pulumi.Resource] = self._bucket(name, mirror.bucket, args.tags) if mirror.create else []
        if mirror.s3_gateway_endpoint is not None:
            region = pulumi.Output.from_input(args.region)
            endpoint = AwsResource(
                VPC_ENDPOINT,
                f"{name}-s3-gateway-endpoint",
                {
                    "vpcId": args.vpc_id,
                    "serviceName": region.apply(lambda region: f"com.amazonaws.{region}.s3"),
                    "vpcEndpointType": "Gateway",
                    "routeTableIds": list(mirror.s3_gateway_endpoint.route_table_ids),
                    "tags": args.tags,
                },
                child,
            )
            storage.append(endpoint)

        namespace = KubernetesObject(f"{name}-namespace", specs.mirror_namespace(), child)
        inside = pulumi.ResourceOptions(parent=self, depends_on=[namespace])
        # The Jobs start only once their egress rules, runner, accounts, roles and tokens exist, and the storage: the
        # shared ones, and their own tenant's (not every tenant's: a Job per revision waiting on the accounts of all the
        # tenants grew as revisions x tenants, and so did the SDK's cycle check of each pod waiting on a Job).
        prerequisites: list[pulumi.Resource] = [
            *storage,
            *(KubernetesObject(f"{name}-{p['metadata']['name']}", p, inside) for p in specs.mirror_network_policies()),
        ]
        prerequisites.append(KubernetesObject(f"{name}-runner", specs.runner_config_map(), inside))
        tenants = sorted({r.tenant for r in args.revisions})
        own: dict[str, list[pulumi.Resource]] = {tenant: [] for tenant in tenants}
        for tenant in tenants:
            identity = WorkloadIdentity(
                f"{name}-{tenant}-identity",
                WorkloadIdentityArgs(
                    args.access,
                    MIRROR_NAMESPACE,
                    specs.mirror_service_account_name(tenant),
                    specs.mirror_write_policy(mirror, tenant),
                    tenant=tenant,
                    writes_mirror=True,
                ),
                opts=child,
            )
            # With EKS Pod Identity, credentials are injected at admission only where the association exists.
            own[tenant].append(identity)
            account = specs.mirror_service_account(tenant, identity.service_account_annotations)
            own[tenant].append(KubernetesObject(f"{name}-{tenant}-service-account", account, inside))
            if tenant in args.hugging_face_tokens:
                secret = specs.mirror_token_secret(tenant, args.hugging_face_tokens[tenant])
                own[tenant].append(KubernetesObject(f"{name}-{tenant}-huggingface-token", secret, inside))

        self.jobs: dict[str, pulumi.Resource] = {}
        for revision in args.revisions:
            await_seconds = f"{revision.deadline_seconds + JOB_AWAIT_MARGIN_SECONDS}s"
            self.jobs[revision.job_name] = KubernetesObject(
                f"{name}-{revision.job_name}",
                specs.mirror_job(revision, token=revision.tenant in args.hugging_face_tokens),
                pulumi.ResourceOptions(
                    parent=self,
                    depends_on=[namespace, *prerequisites, *own[revision.tenant]],
                    custom_timeouts=pulumi.CustomTimeouts(create=await_seconds, update=await_seconds),
                ),
            )
        self.register_outputs(
            {
                "bucket": mirror.bucket,
                "revisions": [
                    {"tenant": r.tenant, "source": f"{r.repo}@{r.revision}", "job": r.job_name} for r in args.revisions
                ],
            }
        )

    def _bucket(self, name: str, bucket_name: str, tags: dict[str, str]) -> list[pulumi.Resource]:
        """The bucket and its settings."""
        # Kept when the stack drops it: the copies are data, and S3 refuses to delete a bucket that holds objects.
        bucket = AwsResource(
            S3_BUCKET,
            f"{name}-bucket",
            {"bucket": bucket_name, "tags": tags},
            pulumi.ResourceOptions(parent=self, retain_on_delete=True),
        )
        # Its settings stay with it: a kept bucket must not lose its access block, encryption or TLS-only policy.
        after = pulumi.ResourceOptions(parent=self, depends_on=[bucket], retain_on_delete=True)
        blocked = {"blockPublicAcls": True, "blockPublicPolicy": True, "ignorePublicAcls": True, "restrictPublicBuckets": True}
        public_access_block = AwsResource(
            S3_PUBLIC_ACCESS_BLOCK, f"{name}-public-access-block", {"bucket": bucket.id, **blocked}, after
        )
        ownership = AwsResource(
            S3_OWNERSHIP_CONTROLS,
            f"{name}-ownership",
            {"bucket": bucket.id, "rule": {"objectOwnership": "BucketOwnerEnforced"}},
            after,
        )
        encryption = AwsResource(
            S3_ENCRYPTION,
            f"{name}-encryption",
            {"bucket": bucket.id, "rules": [{"applyServerSideEncryptionByDefault": {"sseAlgorithm": "AES256"}}]},
            after,
        )
        abandoned = {"daysAfterInitiation": ABANDONED_UPLOAD_DAYS}
        lifecycle = AwsResource(
            S3_LIFECYCLE,
            f"{name}-lifecycle",
            {
                "bucket": bucket.id,
                "rules": [
                    {
                        "id": "abort-abandoned-uploads",
                        "status": "Enabled",
                        "filter": {"prefix": ""},
                        "abortIncompleteMultipartUpload": abandoned,
                    }
                ],
            },
            after,
        )
        tls_only_policy = {
            "Version": "2012-10-17",
            "Statement": [
                {
                    "Sid": "DenyInsecureTransport",
                    "Effect": "Deny",
                    "Principal": "*",
                    "Action": "s3:*",
                    "Resource": [f"arn:aws:s3:::{bucket_name}", f"arn:aws:s3:::{bucket_name}/*"],
                    "Condition": {"Bool": {"aws:SecureTransport": "false"}},
                }
            ],
        }
        tls_only = AwsResource(
            S3_BUCKET_POLICY,
            f"{name}-tls-only",
            {"bucket": bucket.id, "policy": json.dumps(tls_only_policy)},
            # S3 answers 409 OperationAborted to a bucket policy put while the public access block is being set.
            pulumi.ResourceOptions(parent=self, depends_on=[bucket, public_access_block], retain_on_delete=True),
        )
        return [bucket, public_access_block, ownership, encryption, lifecycle, tls_only]
