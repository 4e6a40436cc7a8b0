"""A pool of GPU nodes: an EKS managed node group on a GPU AMI, tainted, labelled for GPU
sharing, and tagged so the cluster autoscaler can scale it up from zero.

On an existing cluster (kubeconfig mode) the nodes already exist; the component then only
records what they must carry (labels, taint) and what they advertise.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import pulumi

from platform_config.cold_start import INSTANCE_STORE, node_disk, node_disk_gib
from platform_config.quantity import gib_quantity

from .aws_objects import AUTOSCALING_TAG, EKS_NODE_GROUP, AwsResource
from .cluster import node_launch_template
from .constants import PACKAGE
from .pool_plan import PoolPlan

CA_TAG_PREFIX = "k8s.io/cluster-autoscaler"
# EKS spells taint effects in its API as NO_SCHEDULE; Kubernetes and the autoscaler as NoSchedule.
EKS_TAINT_EFFECT = {"NoSchedule": "NO_SCHEDULE", "NoExecute": "NO_EXECUTE", "PreferNoSchedule": "PREFER_NO_SCHEDULE"}


def autoscaler_tags(cluster_name: str, plan: PoolPlan) -> dict[str, str]:
    """ASG tags the cluster autoscaler reads to discover the group and to build a node template
    while the group has no nodes (labels, taints and extended resources)."""
    tags = {
        f"{CA_TAG_PREFIX}/enabled": "true",
        f"{CA_TAG_PREFIX}/{cluster_name}": "owned",
    }
    for key, value in plan.labels.items():
        tags[f"{CA_TAG_PREFIX}/node-template/label/{key}"] = value
    taint = plan.taint
    tags[f"{CA_TAG_PREFIX}/node-template/taint/{taint['key']}"] = f"{taint['value']}:{taint['effect']}"
    for resource, count in plan.capacity.advertised.items():
        tags[f"{CA_TAG_PREFIX}/node-template/resources/{resource}"] = str(count)
    # The kubelet's disk: the instance store's RAID0 where the weight cache is there.
    tags[f"{CA_TAG_PREFIX}/node-template/resources/ephemeral-storage"] = gib_quantity(node_disk_gib(plan.pool))
    return tags


@dataclass(frozen=True)
class GpuNodePoolArgs:
    # The pool, what its nodes offer and carry (Plan.pools).
    plan: PoolPlan
    cluster_mode: str
    cluster_name: str
    tags: dict[str, str]
    # EKS only:
    eks_cluster_name: pulumi.Input[str] | None = None
    node_role_arn: pulumi.Input[str] | None = None
    subnet_ids: tuple[str, ...] = ()
    depends_on: tuple[pulumi.Resource, ...] = ()


class GpuNodePool(pulumi.ComponentResource):
    # Declared for the type checker only: pulumi evaluates a resource class's annotations at each registration
    # (pulumi 3.272.0 _types.resource_types, uncached), importing what they name.
    if TYPE_CHECKING:
        advertised: dict[str, int]
        labels: dict[str, str]

    def __init__(self, name: str, args: GpuNodePoolArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__(f"{PACKAGE}:gpu-node-pool:GpuNodePool", name, None, opts)
        plan = args.plan
        pool = plan.pool
        instance = plan.capacity.supply.instance
        self.pool_name = pool.name
        self.advertised = plan.capacity.advertised
        self.labels = dict(plan.labels)
        taint = dict(plan.taint)
        self.scheduling_template = plan.scheduling_template
        node_group_name: pulumi.Output[str] | None = None

        if args.cluster_mode == "eks":
            inputs = {
                "amiType": pool.ami_type,
                "capacityType": pool.capacity_type,
                "clusterName": args.eks_cluster_name,
                "instanceTypes": [pool.instance_type],
                "labels": self.labels,
                "launchTemplate": node_launch_template(
                    f"{name}-nodes",
                    ami_type=pool.ami_type,
                    disk_size_gib=pool.disk_size_gib,
                    tags=args.tags,
                    opts=pulumi.ResourceOptions(parent=self),
                    instance_store_raid0=node_disk(pool) == INSTANCE_STORE,
                ),
                "nodeGroupName": f"{args.cluster_name}-{pool.name}",
                "nodeRoleArn": args.node_role_arn,
                "scalingConfig": {"desiredSize": pool.initial_size, "maxSize": pool.max_size, "minSize": pool.min_size},
                "subnetIds": list(args.subnet_ids),
                "tags": {**args.tags, **autoscaler_tags(args.cluster_name, plan)},
                "taints": [{"effect": EKS_TAINT_EFFECT[taint["effect"]], "key": taint["key"], "value": taint["value"]}],
                "updateConfig": {"maxUnavailable": 1},
            }
            # The cluster autoscaler owns the desired size once the group exists.
            options = pulumi.ResourceOptions(
                parent=self, depends_on=list(args.depends_on), ignore_changes=["scalingConfig.desiredSize"]
            )
            group = AwsResource(EKS_NODE_GROUP, f"{name}-nodes", inputs, options, outputs={"resources": None})
            node_group_name = group.output("nodeGroupName")
            # Managed node group tags do not reach the Auto Scaling group, where the autoscaler
            # reads node templates; tag the ASG itself.
            asg_name = group.output("resources").apply(lambda resources: resources[0]["autoscalingGroups"][0]["name"])
            for index, (key, value) in enumerate(sorted(autoscaler_tags(args.cluster_name, plan).items())):
                AwsResource(
                    AUTOSCALING_TAG,
                    f"{name}-asg-tag-{index}",
                    {"autoscalingGroupName": asg_name, "tag": {"key": key, "propagateAtLaunch": False, "value": value}},
                    pulumi.ResourceOptions(parent=self),
                )

        self.register_outputs(
            {
                "pool": pool.name,
                "instanceType": pool.instance_type,
                "gpuModel": instance.gpu.name,
                "gpuMemoryGiB": instance.gpu.memory_gib,
                "gpusPerNode": instance.gpus,
                "minSize": pool.min_size,
                "maxSize": pool.max_size,
                "sharing": pool.sharing.mode,
                "nodeLabels": self.labels,
                "nodeTaint": taint,
                "advertisedPerNode": self.advertised,
                "nodeGroupName": node_group_name,
            }
        )
