"""The inference platform: read the stack's config, build the platform, export what it offers."""

import pulumi
import pulumi_kubernetes as k8s

from components.cluster import Cluster, ClusterArgs
from components.constants import aws_tags
from components.model_route import canary_releases
from components.plan import plan_checks, resolve
from components.plan_reports import cold_start_report, cost_report, queue_bound_report, serving_shape_digests, serving_shapes
from components.platform import InferencePlatform, InferencePlatformArgs
from platform_config import load_config
from platform_config.adapters import adapters_report
from platform_config.guard_rails import security_posture

loaded = load_config(extra_checks=[plan_checks])
config = loaded.platform
plan = resolve(
    config,
    hugging_face_tenants=frozenset(loaded.hugging_face_tokens),
    registry=loaded.registry,
    region=loaded.region,
    image_lock=loaded.image_lock,
)
# What the preview's Serving performance stage judges each server by, exported and annotated on its workload.
shapes = serving_shapes(plan)
# Per running version: what the preview's Serving performance stage predicts memory, latency and cost from. Exported
# first, before any resource is registered: the preview asks aiconfigurator (or reads its answer back) at this export,
# so the prediction runs while the program registers the platform.
pulumi.export("servingShapes", shapes)

cluster = Cluster("cluster", ClusterArgs(config=config.cluster, tags=aws_tags(config)))
kubernetes = k8s.Provider("kubernetes", **cluster.provider_args())
platform = InferencePlatform(
    "platform",
    InferencePlatformArgs(
        plan=plan,
        cluster=cluster,
        serving_shapes=serving_shape_digests(shapes),
        hugging_face_tokens=loaded.hugging_face_tokens,
    ),
    opts=pulumi.ResourceOptions(providers={"kubernetes": kubernetes}),
)

pulumi.export("clusterName", cluster.name)
pulumi.export("kubernetesVersion", config.cluster.kubernetes_version)
pulumi.export("kubeconfig", cluster.kubeconfig)
pulumi.export("gpuCapacity", platform.capacity)
pulumi.export("poolAdvertisedPerNode", platform.pool_advertised)
pulumi.export("nodePools", platform.node_pool_templates)
pulumi.export("serverPeaks", platform.server_peaks)
# Per model: the expected cold start on its pool's weight cache, with the arithmetic.
pulumi.export("coldStarts", cold_start_report(plan))
# Per model, tier and path: how long and how many requests may wait for a server, and the answer past it.
pulumi.export("queueBounds", queue_bound_report(plan))
# Per pool: each tenant's nominal batch quota in Kueue, what it may borrow and what it reclaims.
pulumi.export("batchQueues", platform.batch_queues)
# Per hour at minimum and maximum scale, from the pools' pricePerHour: the environment and each tenant's share.
pulumi.export("costPerHour", cost_report(plan))
# Each model's release as deployed: what the policy pack holds the next change's canary weight to.
pulumi.export("canaryReleases", canary_releases(plan.routes))
# Who may call, tenant scoping, exposure, models and tenants: what the next change's guard rails compare.
pulumi.export("securityPosture", security_posture(config))
if any(model.adapters for model in config.models):
    # Per base model: its LoRA modules, vLLM's LoRA limits and the adapters' memory per replica.
    pulumi.export("loraAdapters", adapters_report(config))
if loaded.registry is not None:
    # Per model and version: the MLflow alias or version the stack names and the registry version it resolved to.
    pulumi.export("modelRegistry", loaded.registry.stack_output(config))
