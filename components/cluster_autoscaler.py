"""The Kubernetes cluster autoscaler (pinned Helm release) with ASG auto-discovery, so GPU node
groups grow from zero when pods are pending and shrink when nodes sit idle."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import pulumi

from platform_config.chart_images import ChartImageValues
from platform_config.models import KubernetesVersion
from platform_config.pins import CLUSTER_AUTOSCALER

from .constants import KUBE_SYSTEM_NAMESPACE, PACKAGE, SYSTEM_NODE_SELECTOR
from .k8s_objects import helm_release
from .specs.pod_parts import node_spread
from .specs.system_charts import AUTOSCALER_POD_SELECTOR
from .workload_identity import WorkloadAccess, WorkloadIdentity, WorkloadIdentityArgs

SERVICE_ACCOUNT = "cluster-autoscaler"


def autoscaler_policy(cluster_name: str) -> str:
    """Least privilege from the autoscaler's AWS guide: read everywhere, resize only the groups
    tagged as owned by this cluster."""
    return json.dumps(
        {
            "Version": "2012-10-17",
            "Statement": [
                {
                    "Effect": "Allow",
                    "Action": [
                        "autoscaling:DescribeAutoScalingGroups",
                        "autoscaling:DescribeAutoScalingInstances",
                        "autoscaling:DescribeLaunchConfigurations",
                        "autoscaling:DescribeScalingActivities",
                        "autoscaling:DescribeTags",
                        "ec2:DescribeImages",
                        "ec2:DescribeInstanceTypes",
                        "ec2:DescribeLaunchTemplateVersions",
                        "ec2:GetInstanceTypesFromInstanceRequirements",
                        "eks:DescribeNodegroup",
                    ],
                    "Resource": "*",
                },
                {
                    "Effect": "Allow",
                    "Action": ["autoscaling:SetDesiredCapacity", "autoscaling:TerminateInstanceInAutoScalingGroup"],
                    "Resource": "*",
                    "Condition": {"StringEquals": {f"aws:ResourceTag/k8s.io/cluster-autoscaler/{cluster_name}": "owned"}},
                },
            ],
        }
    )


@dataclass(frozen=True)
class ClusterAutoscalerArgs:
    cluster_name: str
    kubernetes_version: KubernetesVersion
    region: pulumi.Input[str]
    access: WorkloadAccess
    # `--max-node-provision-time` in seconds (platform_config/cold_start.max_node_provision_seconds).
    max_node_provision_seconds: int
    # Production: FLOORS.control_plane_replicas_in_production. One replica leads, the others stand by:
    # the binary elects a leader by default (cluster-autoscaler/main.go at cluster-autoscaler-1.30.0
    # through 1.34.2, `leaderElection.LeaderElect = true`), and the chart's default
    # podDisruptionBudget (maxUnavailable: 1) keeps one through a drain.
    replicas: int = 1
    # Production: the replicas one per node, so one node lost leaves a standby to take the lease.
    spread: bool = False
    # The values that pin the charts' images to the image lock's digests (`Plan.chart_image_values`).
    chart_image_values: ChartImageValues = field(default_factory=dict)


class ClusterAutoscaler(pulumi.ComponentResource):
    def __init__(self, name: str, args: ClusterAutoscalerArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__(f"{PACKAGE}:cluster-autoscaler:ClusterAutoscaler", name, None, opts)
        identity = WorkloadIdentity(
            f"{name}-identity",
            WorkloadIdentityArgs(args.access, KUBE_SYSTEM_NAMESPACE, SERVICE_ACCOUNT, autoscaler_policy(args.cluster_name)),
            opts=pulumi.ResourceOptions(parent=self),
        )
        # The chart built for the cluster's minor version, with its own appVersion as the image.
        chart = CLUSTER_AUTOSCALER[args.kubernetes_version]
        helm_release(
            f"{name}-release",
            "cluster-autoscaler",
            KUBE_SYSTEM_NAMESPACE,
            chart,
            {
                "cloudProvider": "aws",
                "awsRegion": args.region,
                "autoDiscovery": {"clusterName": args.cluster_name},
                "rbac": {
                    "serviceAccount": {
                        "create": True,
                        "name": SERVICE_ACCOUNT,
                        "annotations": identity.service_account_annotations,
                    }
                },
                # The autoscaler's minor version must match the cluster's (platform_config/pins.py).
                "image": {"tag": chart.image_tag},
                "extraArgs": {
                    "balance-similar-node-groups": True,
                    "skip-nodes-with-system-pods": False,
                    # Pick the group that leaves the fewest GPUs idle.
                    "expander": "least-waste",
                    "scale-down-unneeded-time": "10m",
                    # Derived from the pools' expected node join. A global flag: the AWS provider
                    # reads no per-group `autoscaling-options/maxnodeprovisiontime` tag
                    # (cloudprovider/aws/aws_manager.go GetAsgOptions at cluster-autoscaler-1.30.0,
                    # 1.33.0 and 1.34.2 reads only the scale-down options).
                    "max-node-provision-time": f"{args.max_node_provision_seconds}s",
                },
                "nodeSelector": SYSTEM_NODE_SELECTOR,
                "replicaCount": args.replicas,
                # Rendered as given (templates/deployment.yaml `toYaml .Values.topologySpreadConstraints`).
                **({"topologySpreadConstraints": node_spread(AUTOSCALER_POD_SELECTOR, required=True)} if args.spread else {}),
            },
            pulumi.ResourceOptions(parent=self, depends_on=[identity]),
            chart_image_values=args.chart_image_values,
        )
        self.register_outputs({"roleArn": identity.role_arn})
