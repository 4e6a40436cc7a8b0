"""The IAM policy the identity that runs `pulumi up` needs, generated from what the program declares.

Each AWS resource type the program creates maps to the AWS API calls pulumi-aws makes to create,
read, update, tag and delete one (`ACTIONS`); the policy is the union over the types a stack's
preview records, with what every run needs besides (`RUN_ACTIONS`). A type without an entry is an
error (`UnmappedTypes`), so a new kind of resource cannot reach `pulumi up` with a policy that
lacks it: the preview stops (exit 3) rather than write a policy that misses one, and
tests/test_deploy_policy.py holds every committed stack's policy to what it declares.

The lists follow each AWS API's own operations for the resource, as the AWS provider's resources
call them; they have not been run against a real account here (there is none): the first `pulumi
up` in a sandbox account, with CloudTrail's AccessDenied events, is what confirms them
(docs/deploy.md says how). The preview writes each stack's as `deploy-policy.json`.
"""

from __future__ import annotations

from collections.abc import Iterable

# Per Pulumi type token: the API calls of its create, read (refresh), update, tags and delete.
ACTIONS: dict[str, tuple[str, ...]] = {
    "aws:eks/cluster:Cluster": (
        "eks:CreateCluster",
        "eks:DescribeCluster",
        "eks:DescribeUpdate",
        "eks:UpdateClusterConfig",
        "eks:UpdateClusterVersion",
        "eks:DeleteCluster",
        "eks:TagResource",
        "eks:UntagResource",
        "eks:ListTagsForResource",
        # The cluster's role is passed to EKS; the subnets and their VPC are read.
        "iam:PassRole",
        "iam:GetRole",
        "ec2:DescribeSubnets",
        "ec2:DescribeVpcs",
        "ec2:DescribeSecurityGroups",
    ),
    "aws:eks/nodeGroup:NodeGroup": (
        "eks:CreateNodegroup",
        "eks:DescribeNodegroup",
        "eks:DescribeUpdate",
        "eks:UpdateNodegroupConfig",
        "eks:UpdateNodegroupVersion",
        "eks:DeleteNodegroup",
        "eks:TagResource",
        "eks:UntagResource",
        "iam:PassRole",
        "iam:GetRole",
        "ec2:DescribeLaunchTemplateVersions",
        "ec2:DescribeSubnets",
    ),
    "aws:eks/addon:Addon": (
        "eks:CreateAddon",
        "eks:DescribeAddon",
        "eks:DescribeAddonVersions",
        "eks:UpdateAddon",
        "eks:DeleteAddon",
        "eks:TagResource",
        "eks:UntagResource",
    ),
    "aws:eks/accessEntry:AccessEntry": (
        "eks:CreateAccessEntry",
        "eks:DescribeAccessEntry",
        "eks:UpdateAccessEntry",
        "eks:DeleteAccessEntry",
        "eks:TagResource",
    ),
    "aws:eks/accessPolicyAssociation:AccessPolicyAssociation": (
        "eks:AssociateAccessPolicy",
        "eks:ListAssociatedAccessPolicies",
        "eks:DisassociateAccessPolicy",
    ),
    "aws:eks/podIdentityAssociation:PodIdentityAssociation": (
        "eks:CreatePodIdentityAssociation",
        "eks:DescribePodIdentityAssociation",
        "eks:UpdatePodIdentityAssociation",
        "eks:DeletePodIdentityAssociation",
        "eks:TagResource",
        "iam:PassRole",
        "iam:GetRole",
    ),
    "aws:ec2/launchTemplate:LaunchTemplate": (
        "ec2:CreateLaunchTemplate",
        "ec2:CreateLaunchTemplateVersion",
        "ec2:DescribeLaunchTemplates",
        "ec2:DescribeLaunchTemplateVersions",
        "ec2:ModifyLaunchTemplate",
        "ec2:DeleteLaunchTemplate",
        "ec2:CreateTags",
        "ec2:DeleteTags",
    ),
    "aws:ec2/vpcEndpoint:VpcEndpoint": (
        "ec2:CreateVpcEndpoint",
        "ec2:DescribeVpcEndpoints",
        "ec2:ModifyVpcEndpoint",
        "ec2:DeleteVpcEndpoints",
        "ec2:DescribePrefixLists",
        "ec2:DescribeRouteTables",
        "ec2:CreateTags",
        "ec2:DeleteTags",
    ),
    "aws:autoscaling/tag:Tag": ("autoscaling:CreateOrUpdateTags", "autoscaling:DescribeTags", "autoscaling:DeleteTags"),
    "aws:iam/role:Role": (
        "iam:CreateRole",
        "iam:GetRole",
        "iam:UpdateRole",
        "iam:UpdateAssumeRolePolicy",
        "iam:DeleteRole",
        "iam:TagRole",
        "iam:UntagRole",
        "iam:ListRolePolicies",
        "iam:ListAttachedRolePolicies",
        "iam:ListInstanceProfilesForRole",
    ),
    # IRSA's identity provider for the cluster's OIDC issuer (cluster.eks.workloadIdentity: irsa).
    "aws:iam/openIdConnectProvider:OpenIdConnectProvider": (
        "iam:CreateOpenIDConnectProvider",
        "iam:GetOpenIDConnectProvider",
        "iam:UpdateOpenIDConnectProviderThumbprint",
        "iam:AddClientIDToOpenIDConnectProvider",
        "iam:RemoveClientIDFromOpenIDConnectProvider",
        "iam:DeleteOpenIDConnectProvider",
        "iam:TagOpenIDConnectProvider",
        "iam:UntagOpenIDConnectProvider",
    ),
    "aws:iam/rolePolicy:RolePolicy": ("iam:PutRolePolicy", "iam:GetRolePolicy", "iam:DeleteRolePolicy"),
    "aws:iam/rolePolicyAttachment:RolePolicyAttachment": (
        "iam:AttachRolePolicy",
        "iam:ListAttachedRolePolicies",
        "iam:DetachRolePolicy",
    ),
    "aws:s3/bucket:Bucket": (
        "s3:CreateBucket",
        "s3:ListBucket",
        "s3:DeleteBucket",
        "s3:GetBucketAcl",
        "s3:GetBucketCORS",
        "s3:GetBucketLocation",
        "s3:GetBucketLogging",
        "s3:GetBucketObjectLockConfiguration",
        "s3:GetBucketPolicy",
        "s3:GetBucketRequestPayment",
        "s3:GetBucketTagging",
        "s3:GetBucketVersioning",
        "s3:GetBucketWebsite",
        "s3:GetAccelerateConfiguration",
        "s3:GetEncryptionConfiguration",
        "s3:GetLifecycleConfiguration",
        "s3:GetReplicationConfiguration",
        "s3:PutBucketTagging",
    ),
    "aws:s3/bucketLifecycleConfiguration:BucketLifecycleConfiguration": (
        "s3:PutLifecycleConfiguration",
        "s3:GetLifecycleConfiguration",
    ),
    "aws:s3/bucketOwnershipControls:BucketOwnershipControls": (
        "s3:PutBucketOwnershipControls",
        "s3:GetBucketOwnershipControls",
    ),
    "aws:s3/bucketPolicy:BucketPolicy": ("s3:PutBucketPolicy", "s3:GetBucketPolicy", "s3:DeleteBucketPolicy"),
    "aws:s3/bucketPublicAccessBlock:BucketPublicAccessBlock": (
        "s3:PutBucketPublicAccessBlock",
        "s3:GetBucketPublicAccessBlock",
    ),
    "aws:s3/bucketServerSideEncryptionConfiguration:BucketServerSideEncryptionConfiguration": (
        "s3:PutEncryptionConfiguration",
        "s3:GetEncryptionConfiguration",
    ),
}

# What every run needs whatever it declares: who is calling (the provider's account check), the
# cluster's endpoint and token for the Kubernetes provider and Helm, and the service-linked roles
# EKS, its node groups and Auto Scaling create on first use in an account.
RUN_ACTIONS = ("sts:GetCallerIdentity", "eks:DescribeCluster", "iam:CreateServiceLinkedRole")


# Where the preview writes it, beside report.json: the policy for exactly what that stack declares.
DEPLOY_POLICY_FILE = "deploy-policy.json"


class UnmappedTypes(Exception):
    """The program declares AWS resources this module has no API calls for."""


def deploying_identity_policy(types: Iterable[str]) -> dict[str, object] | None:
    """The IAM policy document for a run that declares resources of `types` (Pulumi type tokens; non-AWS ones are
    ignored): one statement per AWS service, its actions sorted. None where the run declares nothing of AWS (a
    `kubeconfig` cluster: the deploying identity needs no AWS permission)."""
    aws = sorted({t for t in types if t.startswith("aws:")})
    if not aws:
        return None
    unmapped = [t for t in aws if t not in ACTIONS]
    if unmapped:
        raise UnmappedTypes(f"no IAM actions for {', '.join(unmapped)}: add them to preview/deploy_policy.py ACTIONS")
    by_service: dict[str, set[str]] = {}
    for action in [*RUN_ACTIONS, *(a for t in aws for a in ACTIONS[t])]:
        by_service.setdefault(action.split(":", 1)[0], set()).add(action)
    return {
        "Version": "2012-10-17",
        "Statement": [
            {"Sid": f"PulumiUp{service.capitalize()}", "Effect": "Allow", "Action": sorted(actions), "Resource": "*"}
            for service, actions in sorted(by_service.items())
        ],
    }
