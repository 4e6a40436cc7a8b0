"""One version of one model served by vLLM: a Deployment with Service, PDB, ServiceMonitor and
an HPA on queue depth and GPU activity (mode `hpa`), or a Knative Service scaled by concurrency
with a PodMonitor (mode `kpa`). Drained gracefully either way."""

from __future__ import annotations

from dataclasses import dataclass

import pulumi

from .constants import PACKAGE
from .k8s_objects import KubernetesObject, custom_resource
from .specs import model_server as specs
from .specs.model_server import ServerPlan


@dataclass(frozen=True)
class ModelServerArgs:
    plan: ServerPlan
    # What every object needs first: the namespace.
    depends_on: tuple[pulumi.Resource, ...] = ()
    # What the pods need besides: sidecar injection, Knative, the tenant's quotas, limits and
    # isolation, the weights' service account.
    pod_depends_on: tuple[pulumi.Resource, ...] = ()
    # The Prometheus Operator, whose CRDs the Service/PodMonitor are, and prometheus-adapter,
    # which serves the HPA's metrics.
    monitoring: pulumi.Resource | None = None
    metrics_adapter: pulumi.Resource | None = None


class ModelServer(pulumi.ComponentResource):
    # What routes wait for before sending traffic here: the rolled-out Deployment and its
    # Service (hpa), or the Knative Service (kpa).
    serving_objects: tuple[pulumi.Resource, ...]

    def __init__(self, name: str, args: ModelServerArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__(f"{PACKAGE}:model-server:ModelServer", name, None, opts)
        plan = args.plan
        child = pulumi.ResourceOptions(parent=self, depends_on=list(args.depends_on))
        # A version is ready once its model is loaded, which can outlast Pulumi's default wait.
        rollout = f"{specs.rollout_timeout_seconds(plan)}s"
        pods = pulumi.ResourceOptions(
            parent=self,
            depends_on=[*args.depends_on, *args.pod_depends_on],
            custom_timeouts=pulumi.CustomTimeouts(create=rollout, update=rollout),
        )
        monitor = pulumi.ResourceOptions(
            parent=self, depends_on=[*args.depends_on, *([args.monitoring] if args.monitoring else [])]
        )
        if plan.mode == "kpa":
            knative_service = custom_resource(f"{name}-knative-service", specs.knative_service(plan), pods)
            self.serving_objects = (knative_service,)
            custom_resource(f"{name}-pod-monitor", specs.pod_monitor(plan), monitor)
            if plan.max_replicas > 1:
                KubernetesObject(f"{name}-pdb", specs.pod_disruption_budget(plan), child)
        else:
            deployment = KubernetesObject(
                f"{name}-deployment",
                specs.deployment(plan),
                # The HPA owns the replica count once the Deployment exists.
                pulumi.ResourceOptions.merge(pods, pulumi.ResourceOptions(ignore_changes=["spec.replicas"])),
            )
            service = KubernetesObject(f"{name}-service", specs.service(plan), child)
            self.serving_objects = (deployment, service)
            KubernetesObject(f"{name}-pdb", specs.pod_disruption_budget(plan), child)
            custom_resource(f"{name}-service-monitor", specs.service_monitor(plan), monitor)
            adapter = [args.metrics_adapter] if args.metrics_adapter else []
            KubernetesObject(
                f"{name}-hpa", specs.hpa(plan), pulumi.ResourceOptions(parent=self, depends_on=[deployment, *adapter])
            )
        self.register_outputs(
            {
                "name": plan.name,
                "namespace": plan.namespace,
                "mode": plan.mode,
                "version": plan.version.name,
                "profile": plan.profile.name,
                "gpu": {plan.gpu_resource: plan.gpu_count},
                "replicas": {"min": plan.min_replicas, "max": plan.max_replicas},
                "image": plan.image,
            }
        )
