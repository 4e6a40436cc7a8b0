"""Registering the platform's AWS resources by the pinned pulumi-aws' own type tokens rather than its typed classes,
whose modules cost a preview more to import than the resources are worth: the launch templates and the S3 gateway
endpoint (pulumi-aws' `ec2` package imports its 180 submodules, about 0.3 s), the weight mirror's bucket with its
settings (`s3`, about 0.15 s), and the cluster's EKS, IAM and Auto Scaling resources (`eks`, `iam` and `autoscaling`,
about 0.05, 0.04 and 0.035 s). The program reads the few outputs it needs by their schema names
(`output("certificateAuthority")`), as plain values."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, cast

import pulumi
from pulumi_aws import _utilities as aws_utilities

# The pinned pulumi-aws' type tokens of the resources registered here (each typed class's `super().__init__` names it).
LAUNCH_TEMPLATE = "aws:ec2/launchTemplate:LaunchTemplate"
VPC_ENDPOINT = "aws:ec2/vpcEndpoint:VpcEndpoint"
S3_BUCKET = "aws:s3/bucket:Bucket"
S3_PUBLIC_ACCESS_BLOCK = "aws:s3/bucketPublicAccessBlock:BucketPublicAccessBlock"
S3_OWNERSHIP_CONTROLS = "aws:s3/bucketOwnershipControls:BucketOwnershipControls"
S3_ENCRYPTION = "aws:s3/bucketServerSideEncryptionConfiguration:BucketServerSideEncryptionConfiguration"
S3_LIFECYCLE = "aws:s3/bucketLifecycleConfiguration:BucketLifecycleConfiguration"
S3_BUCKET_POLICY = "aws:s3/bucketPolicy:BucketPolicy"
EKS_CLUSTER = "aws:eks/cluster:Cluster"
EKS_NODE_GROUP = "aws:eks/nodeGroup:NodeGroup"
EKS_ACCESS_ENTRY = "aws:eks/accessEntry:AccessEntry"
EKS_ACCESS_POLICY_ASSOCIATION = "aws:eks/accessPolicyAssociation:AccessPolicyAssociation"
EKS_ADDON = "aws:eks/addon:Addon"
EKS_POD_IDENTITY_ASSOCIATION = "aws:eks/podIdentityAssociation:PodIdentityAssociation"
IAM_ROLE = "aws:iam/role:Role"
IAM_ROLE_POLICY = "aws:iam/rolePolicy:RolePolicy"
IAM_ROLE_POLICY_ATTACHMENT = "aws:iam/rolePolicyAttachment:RolePolicyAttachment"
IAM_OIDC_PROVIDER = "aws:iam/openIdConnectProvider:OpenIdConnectProvider"
AUTOSCALING_TAG = "aws:autoscaling/tag:Tag"

# The type aliases the typed classes register with (pulumi-aws 7.51.1: `alias_opts` in s3/bucket.py,
# s3/bucket_server_side_encryption_configuration.py and s3/bucket_lifecycle_configuration.py; the other types here
# have none): a stack created with the `V2` types of pulumi-aws 6 keeps its buckets rather than replacing them.
TYPE_ALIASES: dict[str, tuple[str, ...]] = {
    S3_BUCKET: ("aws:s3/bucketV2:BucketV2",),
    S3_ENCRYPTION: ("aws:s3/bucketServerSideEncryptionConfigurationV2:BucketServerSideEncryptionConfigurationV2",),
    S3_LIFECYCLE: ("aws:s3/bucketLifecycleConfigurationV2:BucketLifecycleConfigurationV2",),
}


class AwsResource(pulumi.CustomResource):
    """An AWS resource registered under pulumi-aws' own type token with the inputs its typed class would send: the
    provider schema's camelCase names (`metadataOptions.httpTokens`), the typed class's aliases and the installed
    package's provider version (its `get_resource_opts_defaults`). tests/test_aws_objects.py registers each one the
    platform declares both ways under the mock engine and compares them. `outputs` names the computed outputs the
    program reads, each with the type its value is converted to (None: as the engine sends it); `output(name)` reads
    one of them or an input as the provider returns it (`output("name")`); `id` is every resource's."""

    def __init__(
        self,
        token: str,
        name: str,
        inputs: dict[str, Any],
        opts: pulumi.ResourceOptions,
        outputs: Mapping[str, type | None] | None = None,
    ):
        aliases = [pulumi.Alias(type_=alias) for alias in TYPE_ALIASES.get(token, ())]
        merged = pulumi.ResourceOptions.merge(aws_utilities.get_resource_opts_defaults(), opts)
        if aliases:
            merged = pulumi.ResourceOptions.merge(merged, pulumi.ResourceOptions(aliases=aliases))
        self._output_types = dict(outputs or {})
        self._input_names = frozenset(inputs)
        super().__init__(token, name, {**inputs, **dict.fromkeys(self._output_types)}, merged)

    def output(self, name: str) -> pulumi.Output[Any]:
        """An input or a computed output named when registering (the SDK sets one attribute per property, by its
        schema name), the latter as the type it was named with: the engine sends every number as a float, which a
        typed class turns into its declared type (pulumi's `rpc.translate_output_properties`), and a launch template's
        version 3.0 written as "3.0" names no version of it."""
        if name not in self._output_types and name not in self._input_names:
            raise KeyError(f"{name!r} was not named among this resource's outputs {sorted(self._output_types)} or inputs")
        value = cast(pulumi.Output[Any], getattr(self, name))
        convert = self._output_types.get(name)
        return value.apply(convert) if convert is not None else value


def iam_role(name: str, trust_policy: pulumi.Input[str], tags: dict[str, str], opts: pulumi.ResourceOptions) -> AwsResource:
    """An IAM role trusted as `trust_policy` says, its ARN and name (computed by IAM: none is given) readable."""
    inputs = {"assumeRolePolicy": trust_policy, "tags": tags}
    return AwsResource(IAM_ROLE, name, inputs, opts, outputs={"arn": None, "name": None})
