"""Kueue (pinned Helm release) and the cluster-wide queueing objects of the batch jobs: a
ResourceFlavor per GPU pool, the WorkloadPriorityClasses, and a ClusterQueue per tenant with a
batch budget, all in one cohort, with a LocalQueue `batch` in the tenant's namespace for the work
its members submit (components/specs/kueue.py); the admission policy that holds the tenants' own GPU
Jobs to a queue (components/specs/batch_admission.py); with Prometheus, the batch queues' recording rules
and alerts (components/specs/batch_rules.py)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import pulumi

from platform_config.capacity import BatchQueueRow, batch_tenants
from platform_config.chart_images import ChartImageValues
from platform_config.models import NodePoolConfig
from platform_config.namespaces import KUEUE_NAMESPACE
from platform_config.pins import KUEUE

from .constants import PACKAGE
from .k8s_objects import KubernetesObject, custom_resource, helm_release, system_namespace
from .shapes import BatchJobPlan
from .specs.batch_admission import gpu_jobs_policy, gpu_jobs_policy_binding
from .specs.batch_rules import batch_prometheus_rule
from .specs.kueue import (
    cluster_queue,
    kueue_values,
    resource_flavor,
    tenant_local_queue,
    workload_priority_classes,
)


@dataclass(frozen=True)
class KueueArgs:
    # Each tenant's batch quota per pool, as the plan resolved it (`Plan.batch_queues`).
    queues: tuple[BatchQueueRow, ...]
    # The pools those quotas are on, each a ResourceFlavor.
    pools: tuple[NodePoolConfig, ...]
    # The batch jobs, whose queues' rules and alerts come with Prometheus.
    jobs: tuple[BatchJobPlan, ...] = ()
    system_node_selector: dict[str, str] | None = None
    # Production: the managers one per node.
    spread: bool = False
    # The Prometheus Operator (its ServiceMonitor CRD), when installed.
    monitoring: pulumi.Resource | None = None
    # Each tenant's Namespace object, which its own LocalQueue lives in.
    namespaces: Mapping[str, pulumi.Resource] = field(default_factory=dict)
    # The values that pin the charts' images to the image lock's digests (`Plan.chart_image_values`).
    chart_image_values: ChartImageValues = field(default_factory=dict)


class Kueue(pulumi.ComponentResource):
    # Declared for the type checker only: pulumi evaluates a resource class's annotations at each registration
    # (pulumi 3.272.0 _types.resource_types, uncached), importing what they name.
    if TYPE_CHECKING:
        # What a LocalQueue and a queued Job wait for: the CRDs, webhooks and ClusterQueues.
        ready: list[pulumi.Resource]

    def __init__(self, name: str, args: KueueArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__(f"{PACKAGE}:kueue:Kueue", name, None, opts)
        namespace = system_namespace(f"{name}-namespace", KUEUE_NAMESPACE, "kueue", pulumi.ResourceOptions(parent=self))
        release = helm_release(
            f"{name}-release",
            "kueue",
            KUEUE_NAMESPACE,
            KUEUE,
            kueue_values(args.system_node_selector, prometheus=args.monitoring is not None, spread=args.spread),
            pulumi.ResourceOptions(parent=self, depends_on=[namespace, *([args.monitoring] if args.monitoring else [])]),
            chart_image_values=args.chart_image_values,
        )
        after = pulumi.ResourceOptions(parent=self, depends_on=[release])
        flavors = [custom_resource(f"{name}-flavor-{pool.name}", resource_flavor(pool), after) for pool in args.pools]
        # A WorkloadPriorityClass has no `spec` (its `value` is top level), which
        # apiextensions.CustomResource cannot carry: registered from its manifest under the same
        # type token (kubernetes:kueue.x-k8s.io/v1beta2:WorkloadPriorityClass).
        classes = [
            KubernetesObject(f"{name}-priority-{spec['metadata']['name']}", spec, after) for spec in workload_priority_classes()
        ]
        # The tenants with a batch quota, in the stack's order.
        tenants = batch_tenants(args.queues)
        queues = []
        for tenant in tenants:
            queue = custom_resource(
                f"{name}-queue-{tenant}",
                cluster_queue(tenant, args.queues),
                pulumi.ResourceOptions(parent=self, depends_on=[release, *flavors]),
            )
            namespace_object = args.namespaces.get(tenant)
            custom_resource(
                f"{name}-local-queue-{tenant}",
                tenant_local_queue(tenant),
                pulumi.ResourceOptions(parent=self, depends_on=[queue, *([namespace_object] if namespace_object else [])]),
            )
            queues.append(queue)
        # A tenant's own GPU Job must name a queue, or the API server refuses it. No ordering
        # against the platform's batch Jobs: each carries its queue's label
        # (components/specs/batch_job.py), so the policy admits them whenever it is in place.
        policy = KubernetesObject(f"{name}-gpu-jobs-policy", gpu_jobs_policy(), pulumi.ResourceOptions(parent=self))
        KubernetesObject(
            f"{name}-gpu-jobs-policy-binding",
            gpu_jobs_policy_binding(),
            pulumi.ResourceOptions(parent=self, depends_on=[policy]),
        )
        if args.monitoring is not None:
            # Kueue's metrics are scraped only with the Prometheus Operator installed (its
            # ServiceMonitor): the batch queues' rules and alerts come with them.
            custom_resource(
                f"{name}-rules",
                batch_prometheus_rule(args.queues, [job.job for job in args.jobs]),
                pulumi.ResourceOptions(parent=self, depends_on=[release]),
            )
        self.ready = [release, *classes, *queues]
        self.register_outputs({"chart": KUEUE.chart, "version": KUEUE.version})
