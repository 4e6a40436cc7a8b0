"""The cluster: EKS (its region, subnets, endpoint access, admins, workload identity and system node group) or an
existing cluster reached by kubeconfig, and Amazon EKS's quotas."""

from __future__ import annotations

import ipaddress
from typing import Annotated, Literal

from pydantic import AfterValidator, Field, model_validator

from ..cpu_instances import CPU_INSTANCE_TYPES, cpu_catalog_summary
from .base import INSTANCE_TYPE_FORM, ConfigModel, ResourceName, _full_match


def _system_instance_type(value: str) -> str:
    """A CPU type of the system node catalog, whose vCPUs and memory size the system nodes."""
    if value not in CPU_INSTANCE_TYPES:
        raise ValueError(f"{value!r} is not an EC2 instance type in the system node catalog; allowed: {cpu_catalog_summary()}")
    return value


SystemInstanceTypeName = Annotated[
    str,
    _full_match(INSTANCE_TYPE_FORM, "is not an EC2 instance type such as 'm6i.2xlarge'"),
    AfterValidator(_system_instance_type),
]

SubnetId = Annotated[str, _full_match(r"subnet-[0-9a-f]{8,17}", "is not a subnet ID such as 'subnet-0123456789abcdef0'")]

# An IAM role's or user's ARN: its path and name of ASCII letters, digits and `+=,.@_/-` (IAM User Guide, "IAM
# object quotas": a path of at most 512 characters, a role name of 64, a user name of 64), at most 2048 in all.
IamPrincipalArn = Annotated[
    str,
    _full_match(
        r"arn:aws[a-z-]{0,16}:iam::[0-9]{12}:(role|user)/[A-Za-z0-9_+=,.@/-]{1,576}",
        "is not an IAM role or user ARN such as 'arn:aws:iam::123456789012:role/admin'",
        2048,
    ),
]


# An AWS region's name (us-east-1, ap-southeast-2, us-gov-west-1); the provider's `aws:region` is held to it too.
AWS_REGION_FORM = r"[a-z]{2}(-[a-z]{1,16}){1,3}-[0-9]{1,2}"
NOT_AN_AWS_REGION = "is not an AWS region such as 'us-east-1'"
AwsRegion = Annotated[str, _full_match(AWS_REGION_FORM, NOT_AN_AWS_REGION)]


_NOT_A_CIDR = "is not an IPv4 CIDR with no host bits set, e.g. '203.0.113.0/24'"


def _ipv4_cidr(value: str) -> str:
    try:
        ipaddress.IPv4Network(value, strict=True)
    except ValueError as error:
        raise ValueError(f"{value!r} {_NOT_A_CIDR} ({error})") from None
    if "/" not in value:
        raise ValueError(f"{value!r} has no prefix length: write it as a CIDR, e.g. '{value}/32'")
    return value


# EKS takes IPv4 CIDR blocks for its public endpoint (pulumi-aws eks.ClusterVpcConfig.public_access_cidrs).
Ipv4Cidr = Annotated[str, _full_match(r"[0-9.]{7,15}(/[0-9]{1,2})?", _NOT_A_CIDR), AfterValidator(_ipv4_cidr)]


# Amazon EKS's quotas (EKS user guide, "Amazon EKS service quotas"): nodes per managed node group (default 450, an
# account may raise it: a stack then needs no more node groups), managed node groups per cluster (default 30, the
# system node group included) and public endpoint CIDR ranges per cluster (40, not adjustable).
EKS_NODES_PER_NODE_GROUP = 450
EKS_NODE_GROUPS_PER_CLUSTER = 30
EKS_PUBLIC_ACCESS_CIDRS = 40


KubernetesVersion = Literal["1.30", "1.31", "1.32", "1.33", "1.34"]


# The pool label value of the EKS system node group's nodes (`inference.platform/pool=system`):
# no GPU pool may take it, or system pods could be placed on its nodes.
SYSTEM_POOL_NAME = "system"


class SystemNodeGroup(ConfigModel):
    """CPU nodes for the platform's own controllers (Istio, Knative, operators, autoscaler)."""

    instance_type: SystemInstanceTypeName = "m6i.2xlarge"
    """EC2 instance type of the CPU nodes, from the platform's catalog of CPU types (m5, m6i, m6a, m7i, m7a, c6i, c7i,
    r6i, r7i; large to 16xlarge)."""
    min_size: Annotated[int, Field(ge=1, le=EKS_NODES_PER_NODE_GROUP)] = 2
    """Fewest system nodes."""
    max_size: Annotated[int, Field(ge=1, le=EKS_NODES_PER_NODE_GROUP)] = 4
    """Most system nodes (at most 450, EKS's default quota of nodes per managed node group)."""
    desired_size: Annotated[int, Field(ge=1, le=EKS_NODES_PER_NODE_GROUP)] = 2
    """System nodes at creation."""
    price_per_hour: Annotated[float, Field(gt=0, le=10_000)] | None = None
    """USD per node-hour, for the cost report. Default: the dated AWS on-demand list price of the instance type in
    the cluster's region (platform_config/prices.py), where the list covers it."""


class EksSettings(ConfigModel):
    region: AwsRegion | None = None
    """Region of the cluster, for the kubeconfig and the controllers; must equal `aws:region` when both are set.
    Default: `aws:region`."""
    subnet_ids: Annotated[list[SubnetId], Field(min_length=2)]
    """Existing VPC subnets (at least two) for the control plane and every node group; the gateway's load balancer finds
    its subnets by their `kubernetes.io/role/elb` tags."""
    endpoint_public_access: bool = False
    """Expose the Kubernetes API endpoint publicly (restrict it with `publicAccessCidrs`)."""
    public_access_cidrs: Annotated[list[Ipv4Cidr], Field(max_length=EKS_PUBLIC_ACCESS_CIDRS)] = []
    """CIDRs allowed to reach a public API endpoint."""
    admin_principal_arns: list[IamPrincipalArn] = []
    """IAM roles or users given cluster-admin through EKS access entries."""
    workload_identity: Literal["podIdentity", "irsa"] = "podIdentity"
    """How pods get IAM roles (the autoscaler, the load balancer controller, S3 weights): EKS Pod Identity or IRSA."""
    system_node_group: SystemNodeGroup = SystemNodeGroup()
    """CPU nodes for the platform's own controllers."""


class KubeconfigSettings(ConfigModel):
    path: (
        Annotated[str, _full_match(r"[A-Za-z0-9_./~-]{1,1024}", "is not a file path of letters, digits and '_./~-'", 1024)] | None
    ) = None
    """Kubeconfig file. Default: the user's default kubeconfig."""
    context: (
        Annotated[str, _full_match(r"[A-Za-z0-9_.@:/-]{1,253}", "is not a kubeconfig context name: letters, digits, '_.@:/-'")]
        | None
    ) = None
    """Context in it. Default: its current context."""


class ClusterConfig(ConfigModel):
    name: ResourceName
    """Cluster name (the EKS cluster's name in mode `eks`)."""
    mode: Literal["eks", "kubeconfig"]
    """`eks`: create an EKS cluster; `kubeconfig`: use an existing cluster."""
    kubernetes_version: KubernetesVersion = "1.33"
    """Kubernetes minor version: the EKS version, the cluster autoscaler chart and image, and the version objects are
    validated against."""
    eks: EksSettings | None = None
    """EKS settings (mode `eks` only)."""
    kubeconfig: KubeconfigSettings | None = None
    """How to reach the existing cluster (mode `kubeconfig` only)."""

    @model_validator(mode="after")
    def _mode_block(self) -> ClusterConfig:
        if self.mode == "eks" and self.eks is None:
            raise ValueError("mode 'eks' needs an 'eks' block (subnetIds, ...)")
        if self.mode == "eks" and self.kubeconfig is not None:
            raise ValueError("mode 'eks' takes no 'kubeconfig' block: the provider is built from the EKS cluster")
        if self.mode == "kubeconfig" and self.eks is not None:
            raise ValueError("mode 'kubeconfig' takes no 'eks' block: the cluster already exists")
        return self
