"""An IAM role a Kubernetes service account assumes: EKS Pod Identity or IRSA."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import pulumi

from .aws_objects import EKS_POD_IDENTITY_ASSOCIATION, IAM_ROLE_POLICY, AwsResource, iam_role
from .constants import PACKAGE, TAG_MIRROR_FOR, TAG_TENANT


@dataclass(frozen=True)
class WorkloadAccess:
    """How a cluster's workloads get AWS roles: the EKS cluster, the mechanism, the tags roles
    carry and, for IRSA, the OIDC provider. Built once by the platform for every component."""

    cluster_name: pulumi.Input[str]
    # "podIdentity" or "irsa"
    mode: str
    tags: dict[str, str]
    oidc_provider_arn: pulumi.Input[str] | None = None
    oidc_issuer: pulumi.Input[str] | None = None


@dataclass(frozen=True)
class WorkloadIdentityArgs:
    access: WorkloadAccess
    namespace: str
    service_account: str
    # IAM policy document (JSON string or Output of one) the role gets inline.
    policy: pulumi.Input[str]
    # The tenant whose workloads assume it (tagged, for the pack's tenant-s3-scoping), or the
    # tenant the weight mirror writes for; None: a role of the platform's own controllers.
    tenant: str | None = None
    writes_mirror: bool = False


class WorkloadIdentity(pulumi.ComponentResource):
    # Declared for the type checker only: pulumi evaluates a resource class's annotations at each registration
    # (pulumi 3.272.0 _types.resource_types, uncached), importing what they name.
    if TYPE_CHECKING:
        role_arn: pulumi.Output[str]
        # Annotations the service account needs (IRSA); empty for Pod Identity.
        service_account_annotations: pulumi.Output[dict[str, str]]

    def __init__(self, name: str, args: WorkloadIdentityArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__(f"{PACKAGE}:workload-identity:WorkloadIdentity", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        subject = f"system:serviceaccount:{args.namespace}:{args.service_account}"
        access = args.access
        if access.mode == "irsa":
            if access.oidc_provider_arn is None or access.oidc_issuer is None:
                raise ValueError("WorkloadAccess: mode 'irsa' needs oidc_provider_arn and oidc_issuer")
            issuer_host = pulumi.Output.from_input(access.oidc_issuer).apply(lambda url: url.removeprefix("https://"))
            trust = pulumi.Output.json_dumps(
                {
                    "Version": "2012-10-17",
                    "Statement": [
                        {
                            "Effect": "Allow",
                            "Principal": {"Federated": access.oidc_provider_arn},
                            "Action": "sts:AssumeRoleWithWebIdentity",
                            "Condition": issuer_host.apply(
                                lambda host: {"StringEquals": {f"{host}:sub": subject, f"{host}:aud": "sts.amazonaws.com"}}
                            ),
                        }
                    ],
                }
            )
        else:
            trust = pulumi.Output.json_dumps(
                {
                    "Version": "2012-10-17",
                    "Statement": [
                        {
                            "Effect": "Allow",
                            "Principal": {"Service": "pods.eks.amazonaws.com"},
                            "Action": ["sts:AssumeRole", "sts:TagSession"],
                        }
                    ],
                }
            )
        owner = {} if args.tenant is None else {TAG_MIRROR_FOR if args.writes_mirror else TAG_TENANT: args.tenant}
        role = iam_role(f"{name}-role", trust, {**access.tags, **owner}, child)
        AwsResource(IAM_ROLE_POLICY, f"{name}-policy", {"policy": args.policy, "role": role.id}, child)
        self.role_arn = role.output("arn")
        if access.mode == "irsa":
            self.service_account_annotations = self.role_arn.apply(lambda arn: {"eks.amazonaws.com/role-arn": arn})
        else:
            inputs = {
                "clusterName": access.cluster_name,
                "namespace": args.namespace,
                "roleArn": self.role_arn,
                "serviceAccount": args.service_account,
                "tags": access.tags,
            }
            AwsResource(EKS_POD_IDENTITY_ASSOCIATION, f"{name}-association", inputs, child)
            self.service_account_annotations = pulumi.Output.from_input({})
        self.register_outputs({"roleArn": self.role_arn})
