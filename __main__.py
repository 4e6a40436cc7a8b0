"""The inference platform: read the stack's config, build the platform, export what it offers."""

import pulumi
import pulumi_kubernetes as k8s

from components.cluster import Cluster, ClusterArgs
from components.platform import InferencePlatform, InferencePlatformArgs, aws_tags
from platform_config import load_config

loaded = load_config()
config = loaded.platform

cluster = Cluster("cluster", ClusterArgs(config=config.cluster, tags=aws_tags(config)))
kubernetes = k8s.Provider("kubernetes", **cluster.provider_args())
platform = InferencePlatform(
    "platform",
    InferencePlatformArgs(config=config, cluster=cluster, hugging_face_token=loaded.hugging_face_token),
    opts=pulumi.ResourceOptions(providers={"kubernetes": kubernetes}),
)

pulumi.export("clusterName", cluster.name)
pulumi.export("kubernetesVersion", config.cluster.kubernetes_version)
pulumi.export("kubeconfig", cluster.kubeconfig)
pulumi.export("gpuCapacity", platform.capacity)
pulumi.export("poolAdvertisedPerNode", platform.pool_advertised)
pulumi.export("nodePools", platform.node_pool_templates)
