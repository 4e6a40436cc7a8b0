"""Registering the AWS resources whose pulumi-aws module costs a preview more to import than the resources are worth:
the launch templates and the S3 gateway endpoint (pulumi-aws' `ec2` package imports its 180 submodules, about 0.3 s)
and the weight mirror's bucket with its settings (`s3`, about 0.15 s), by the pinned pulumi-aws' own type tokens.
The EKS, IAM and Auto Scaling resources keep their typed classes (their modules import in about 0.03 s each, and the
program reads the EKS cluster's typed outputs)."""

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
    program reads, with their types (`output("latestVersion")`); `id` is every resource's."""

    def __init__(
        self,
        token: str,
        name: str,
        inputs: dict[str, Any],
        opts: pulumi.ResourceOptions,
        outputs: Mapping[str, type] | None = None,
    ):
        aliases = [pulumi.Alias(type_=alias) for alias in TYPE_ALIASES.get(token, ())]
        merged = pulumi.ResourceOptions.merge(aws_utilities.get_resource_opts_defaults(), opts)
        if aliases:
            merged = pulumi.ResourceOptions.merge(merged, pulumi.ResourceOptions(aliases=aliases))
        self._output_types = dict(outputs or {})
        super().__init__(token, name, {**inputs, **dict.fromkeys(self._output_types)}, merged)

    def output(self, name: str) -> pulumi.Output[Any]:
        """A computed output named when registering (the SDK sets one attribute per property, by its schema name), as
        the type it was named with: the engine sends every number as a float, which a typed class turns into its
        declared type (pulumi's `rpc.translate_output_properties`), and a launch template's version 3.0 written as
        "3.0" names no version of it."""
        if name not in self._output_types:
            raise KeyError(f"{name!r} was not named among this resource's outputs {sorted(self._output_types)}")
        return cast(pulumi.Output[Any], getattr(self, name)).apply(self._output_types[name])
