"""Where the platform runs: a new EKS cluster, or an existing cluster reached by kubeconfig.

Either way the component exposes one kubeconfig (None: the local default kubeconfig/context),
from which `__main__` builds the single Kubernetes provider every Kubernetes resource uses.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pulumi
import pulumi_aws as aws

from platform_config.models import ClusterConfig, EksSettings

from .aws_objects import (
    EKS_ACCESS_ENTRY,
    EKS_ACCESS_POLICY_ASSOCIATION,
    EKS_ADDON,
    EKS_CLUSTER,
    EKS_NODE_GROUP,
    IAM_OIDC_PROVIDER,
    IAM_ROLE_POLICY_ATTACHMENT,
    LAUNCH_TEMPLATE,
    AwsResource,
    iam_role,
)
from .constants import PACKAGE, SYSTEM_NODE_SELECTOR

EKS_ADMIN_POLICY = "arn:aws:eks::aws:cluster-access-policy/AmazonEKSClusterAdminPolicy"
AWS_MANAGED = "arn:aws:iam::aws:policy/"
NODE_POLICIES = (
    "AmazonEKSWorkerNodePolicy",
    "AmazonEKS_CNI_Policy",
    "AmazonEC2ContainerRegistryReadOnly",
    "AmazonSSMManagedInstanceCore",
)
CONTROL_PLANE_LOGS = ["api", "audit", "authenticator"]


# Node instance metadata: IMDSv2 only, and a hop limit of 1 so a token's PUT answer dies on the
# pod's extra hop: pods cannot read the node role's credentials. The node's own agents and
# hostNetwork pods (kubelet, the VPC CNI, the Pod Identity Agent) are one hop away and keep it;
# the controllers that would ask IMDS for their region or VPC are given them (the load balancer
# controller's region and vpcId, the cluster autoscaler's awsRegion).
NODE_METADATA_OPTIONS = {"httpEndpoint": "enabled", "httpTokens": "required", "httpPutResponseHopLimit": 1}
# The volume EKS's `diskSize` would size, which a launch template must size instead (EKS
# CreateNodegroup: no diskSize with a launch template): the root volume, except Bottlerocket's
# data volume (/dev/xvda holds only its OS).
NODE_DISK_DEVICE = {"BOTTLEROCKET_x86_64_NVIDIA": "/dev/xvdb"}
ROOT_DISK_DEVICE = "/dev/xvda"


# nodeadm's NodeConfig that stripes the instance store's NVMe disks as RAID0 and puts the
# kubelet's and containerd's directories on it (awslabs/amazon-eks-ami
# nodeadm/api/v1alpha1/nodeconfig_types.go: spec.instance.localStorage.strategy RAID0). EKS merges
# a managed node group's MIME part of type application/node.eks.aws with its own NodeConfig.
USER_DATA_BOUNDARY = "//inference-platform//"
INSTANCE_STORE_RAID0_NODECONFIG = (
    "apiVersion: node.eks.aws/v1alpha1\nkind: NodeConfig\nspec:\n  instance:\n    localStorage:\n      strategy: RAID0\n"
)


def instance_store_user_data() -> str:
    """The launch template's user data (MIME multi-part, base64 as EC2 takes it) with the RAID0
    NodeConfig."""
    mime = (
        "MIME-Version: 1.0\n"
        f'Content-Type: multipart/mixed; boundary="{USER_DATA_BOUNDARY}"\n\n'
        f"--{USER_DATA_BOUNDARY}\nContent-Type: application/node.eks.aws\n\n---\n{INSTANCE_STORE_RAID0_NODECONFIG}\n"
        f"--{USER_DATA_BOUNDARY}--\n"
    )
    return base64.b64encode(mime.encode()).decode()


def node_launch_template(
    name: str,
    *,
    ami_type: str,
    disk_size_gib: int | None,
    tags: dict[str, str],
    opts: pulumi.ResourceOptions,
    instance_store_raid0: bool = False,
) -> dict[str, Any]:
    """A launch template for a managed node group, as the group's `launchTemplate` names it: locked-down instance
    metadata, the node disk when `disk_size_gib` is given (EKS's default otherwise), and the instance store as RAID0
    for the kubelet and containerd when `instance_store_raid0`."""
    inputs: dict[str, Any] = {"metadataOptions": NODE_METADATA_OPTIONS, "updateDefaultVersion": True, "tags": tags}
    if disk_size_gib is not None:
        ebs = {"volumeSize": disk_size_gib, "volumeType": "gp3", "encrypted": "true", "deleteOnTermination": "true"}
        inputs["blockDeviceMappings"] = [{"deviceName": NODE_DISK_DEVICE.get(ami_type, ROOT_DISK_DEVICE), "ebs": ebs}]
    if instance_store_raid0:
        inputs["userData"] = instance_store_user_data()
    template = AwsResource(LAUNCH_TEMPLATE, name, inputs, opts, outputs={"latestVersion": int})
    return {"id": template.id, "version": template.output("latestVersion").apply(str)}


def assume_role_policy(service: str, actions: tuple[str, ...] = ("sts:AssumeRole",)) -> str:
    return json.dumps(
        {
            "Version": "2012-10-17",
            "Statement": [{"Effect": "Allow", "Principal": {"Service": service}, "Action": list(actions)}],
        }
    )


@dataclass(frozen=True)
class ClusterArgs:
    config: ClusterConfig
    tags: dict[str, str]


# Enforce NetworkPolicies (the network policy agent runs beside aws-node).
VPC_CNI_CONFIGURATION = {"enableNetworkPolicy": "true"}


class Cluster(pulumi.ComponentResource):
    # Declared for the type checker only: pulumi evaluates a resource class's annotations at each registration
    # (pulumi 3.272.0 _types.resource_types, uncached), importing what they name.
    if TYPE_CHECKING:
        name: pulumi.Output[str]
        kubeconfig: pulumi.Output[str] | None
        node_role_arn: pulumi.Output[str] | None
        subnet_ids: list[str]
        oidc_provider_arn: pulumi.Output[str] | None
        oidc_issuer: pulumi.Output[str] | None
        vpc_id: pulumi.Output[str] | None
        eks_cluster: AwsResource | None

    def __init__(self, name: str, args: ClusterArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__(f"{PACKAGE}:cluster:Cluster", name, None, opts)
        config = args.config
        self.config = config
        self.eks_cluster = None
        self.kubeconfig = None
        self.node_role_arn = None
        self.oidc_provider_arn = None
        self.oidc_issuer = None
        self.vpc_id = None
        self.subnet_ids = []
        # The system node group as the scheduler sees it; None without EKS (no such group).
        # What node groups must wait for (the node role's policies); empty without EKS.
        self.node_role_dependencies: list[pulumi.Resource] = []
        if config.mode == "eks":
            self.eks_cluster = self._eks(name, config, args.tags)
            self.name = self.eks_cluster.output("name")
        else:
            self.name = pulumi.Output.from_input(config.name)
        self.register_outputs(
            {
                "name": self.name,
                "mode": config.mode,
                "kubernetesVersion": config.kubernetes_version,
                "kubeconfig": self.kubeconfig,
                "nodeRoleArn": self.node_role_arn,
                "oidcProviderArn": self.oidc_provider_arn,
            }
        )

    def provider_args(self) -> dict[str, pulumi.Input[str] | None]:
        """Arguments of the one Kubernetes provider: the EKS kubeconfig, or the local
        kubeconfig file and context of an existing cluster (None: the user's default)."""
        if self.kubeconfig is not None:
            return {"kubeconfig": self.kubeconfig}
        local = self.config.kubeconfig
        return {"kubeconfig": local.path if local else None, "context": local.context if local else None}

    def _eks(self, name: str, config: ClusterConfig, tags: dict[str, str]) -> AwsResource:
        """A new EKS cluster, in registration order: the control plane and its admins, the node
        role, the system node group, the VPC CNI with NetworkPolicies enforced, the workload
        identity (IRSA's OIDC provider or the Pod Identity Agent), then the kubeconfig."""
        eks = config.eks
        assert eks is not None
        self.subnet_ids = list(eks.subnet_ids)
        eks_cluster = self._control_plane(name, config, tags)
        self.vpc_id = eks_cluster.output("vpcConfig").apply(lambda vpc: vpc.get("vpcId"))
        self._cluster_admins(name, eks, eks_cluster, tags)
        node_role, node_policies = self._node_role(name, tags)
        self.node_role_arn = node_role.output("arn")
        self.node_role_dependencies = node_policies
        self._system_node_group(name, config, eks_cluster, node_role, node_policies, tags)
        self._vpc_cni(name, eks_cluster, tags)
        self.oidc_issuer = eks_cluster.output("identities").apply(lambda ids: ids[0]["oidcs"][0]["issuer"])
        self._workload_identity(name, eks, eks_cluster, self.oidc_issuer, tags)
        region = eks.region or aws.get_region_output().region
        self.kubeconfig = pulumi.Output.secret(pulumi.Output.json_dumps(eks_kubeconfig(config.name, eks_cluster, region)))
        return eks_cluster

    def _control_plane(self, name: str, config: ClusterConfig, tags: dict[str, str]) -> AwsResource:
        """The control plane's role and the EKS cluster, its API private (and public where the
        stack allows), authenticated by access entries only."""
        eks = config.eks
        assert eks is not None
        child = pulumi.ResourceOptions(parent=self)
        cluster_role = iam_role(
            f"{name}-control-plane", assume_role_policy("eks.amazonaws.com", ("sts:AssumeRole", "sts:TagSession")), tags, child
        )
        cluster_policy = AwsResource(
            IAM_ROLE_POLICY_ATTACHMENT,
            f"{name}-control-plane-policy",
            {"policyArn": f"{AWS_MANAGED}AmazonEKSClusterPolicy", "role": cluster_role.output("name")},
            child,
        )
        vpc_config: dict[str, Any] = {
            "endpointPrivateAccess": True,
            "endpointPublicAccess": eks.endpoint_public_access,
            "subnetIds": list(eks.subnet_ids),
        }
        if eks.public_access_cidrs:
            vpc_config["publicAccessCidrs"] = list(eks.public_access_cidrs)
        inputs = {
            # Access entries, not the aws-auth ConfigMap; the creator gets no implicit admin.
            "accessConfig": {"authenticationMode": "API", "bootstrapClusterCreatorAdminPermissions": False},
            "enabledClusterLogTypes": CONTROL_PLANE_LOGS,
            "name": config.name,
            "roleArn": cluster_role.output("arn"),
            "tags": tags,
            "version": config.kubernetes_version,
            "vpcConfig": vpc_config,
        }
        # What the kubeconfig, the workload identity and the VPC's endpoints read.
        outputs = dict.fromkeys(("endpoint", "certificateAuthority", "identities"))
        return AwsResource(
            EKS_CLUSTER, f"{name}-eks", inputs, pulumi.ResourceOptions(parent=self, depends_on=[cluster_policy]), outputs
        )

    def _cluster_admins(self, name: str, eks: EksSettings, eks_cluster: AwsResource, tags: dict[str, str]) -> None:
        """An access entry with the cluster admin policy for each of the stack's admin principals."""
        cluster_name = eks_cluster.output("name")
        for index, principal in enumerate(eks.admin_principal_arns):
            entry = AwsResource(
                EKS_ACCESS_ENTRY,
                f"{name}-admin-{index}",
                {"clusterName": cluster_name, "principalArn": principal, "tags": tags, "type": "STANDARD"},
                pulumi.ResourceOptions(parent=self),
            )
            association = {"clusterName": cluster_name, "principalArn": principal, "policyArn": EKS_ADMIN_POLICY}
            AwsResource(
                EKS_ACCESS_POLICY_ASSOCIATION,
                f"{name}-admin-{index}-policy",
                {**association, "accessScope": {"type": "cluster"}},
                pulumi.ResourceOptions(parent=self, depends_on=[entry]),
            )

    def _node_role(self, name: str, tags: dict[str, str]) -> tuple[AwsResource, list[pulumi.Resource]]:
        """Every node group's role, and its managed policies (what node groups wait for)."""
        child = pulumi.ResourceOptions(parent=self)
        node_role = iam_role(f"{name}-nodes", assume_role_policy("ec2.amazonaws.com"), tags, child)
        node_policies: list[pulumi.Resource] = [
            AwsResource(
                IAM_ROLE_POLICY_ATTACHMENT,
                f"{name}-nodes-{policy.lower().replace('_', '-')}",
                {"policyArn": f"{AWS_MANAGED}{policy}", "role": node_role.output("name")},
                child,
            )
            for policy in NODE_POLICIES
        ]
        return node_role, node_policies

    def _system_node_group(
        self,
        name: str,
        config: ClusterConfig,
        eks_cluster: AwsResource,
        node_role: AwsResource,
        node_policies: list[pulumi.Resource],
        tags: dict[str, str],
    ) -> None:
        """The system node group, where the platform's controllers and the endpoint pickers run
        (no taints; the platform exports its template as the scheduler sees it,
        components/system_nodes.py)."""
        eks = config.eks
        assert eks is not None
        system = eks.system_node_group
        inputs = {
            "amiType": "AL2023_x86_64_STANDARD",
            "clusterName": eks_cluster.output("name"),
            "instanceTypes": [system.instance_type],
            "labels": SYSTEM_NODE_SELECTOR,
            "launchTemplate": node_launch_template(
                f"{name}-system-nodes",
                ami_type="AL2023_x86_64_STANDARD",
                disk_size_gib=None,
                tags=tags,
                opts=pulumi.ResourceOptions(parent=self),
            ),
            "nodeGroupName": f"{config.name}-system",
            "nodeRoleArn": node_role.output("arn"),
            "scalingConfig": {"desiredSize": system.desired_size, "maxSize": system.max_size, "minSize": system.min_size},
            "subnetIds": list(eks.subnet_ids),
            "tags": tags,
        }
        opts = pulumi.ResourceOptions(parent=self, depends_on=node_policies, ignore_changes=["scalingConfig.desiredSize"])
        AwsResource(EKS_NODE_GROUP, f"{name}-system", inputs, opts)

    def _vpc_cni(self, name: str, eks_cluster: AwsResource, tags: dict[str, str]) -> None:
        """The VPC CNI ships with network-policy enforcement off: without this every
        NetworkPolicy the tenants declare is accepted and ignored (the aws-vpc-cni chart's
        `enableNetworkPolicy`, the add-on's configuration value of the same name, VPC CNI
        1.14+). The add-on's version stays the one EKS picks for the cluster's Kubernetes
        version; OVERWRITE takes the field over from the self-managed install EKS creates."""
        inputs = {
            "addonName": "vpc-cni",
            "clusterName": eks_cluster.output("name"),
            "configurationValues": json.dumps(VPC_CNI_CONFIGURATION),
            "resolveConflictsOnCreate": "OVERWRITE",
            "resolveConflictsOnUpdate": "OVERWRITE",
            "tags": tags,
        }
        AwsResource(EKS_ADDON, f"{name}-vpc-cni", inputs, pulumi.ResourceOptions(parent=self))

    def _workload_identity(
        self, name: str, eks: EksSettings, eks_cluster: AwsResource, issuer: pulumi.Output[str], tags: dict[str, str]
    ) -> None:
        """How pods get AWS credentials: IRSA's OIDC provider for the cluster's issuer, or the
        Pod Identity Agent add-on."""
        child = pulumi.ResourceOptions(parent=self)
        if eks.workload_identity == "irsa":
            inputs = {"clientIdLists": ["sts.amazonaws.com"], "tags": tags, "url": issuer}
            provider = AwsResource(IAM_OIDC_PROVIDER, f"{name}-oidc", inputs, child, outputs={"arn": None})
            self.oidc_provider_arn = provider.output("arn")
        else:
            inputs = {"addonName": "eks-pod-identity-agent", "clusterName": eks_cluster.output("name"), "tags": tags}
            AwsResource(EKS_ADDON, f"{name}-pod-identity-agent", inputs, child)


def eks_kubeconfig(cluster_name: str, eks_cluster: AwsResource, region: pulumi.Input[str]) -> dict[str, Any]:
    """The kubeconfig of an EKS cluster, its token from `aws eks get-token` (Outputs inside: the
    caller serialises it with Output.json_dumps)."""
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": cluster_name,
                "cluster": {
                    "server": eks_cluster.output("endpoint"),
                    "certificate-authority-data": eks_cluster.output("certificateAuthority").apply(lambda ca: ca["data"]),
                },
            }
        ],
        "contexts": [{"name": cluster_name, "context": {"cluster": cluster_name, "user": cluster_name}}],
        "current-context": cluster_name,
        "users": [
            {
                "name": cluster_name,
                "user": {
                    "exec": {
                        "apiVersion": "client.authentication.k8s.io/v1beta1",
                        "command": "aws",
                        "args": ["eks", "get-token", "--cluster-name", cluster_name, "--region", region],
                    }
                },
            }
        ],
    }
