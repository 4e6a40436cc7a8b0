"""Serving backend `hpa`: each version is a Deployment (maxSurge 1, maxUnavailable 0) with a
Service, a PodDisruptionBudget, a ServiceMonitor and an autoscaling/v2 HPA on vLLM's queue depth,
DCGM's GPU activity (Pods metrics from prometheus-adapter) and its endpoint picker's queue; the
model has one Service over all its versions. Every version sits behind its endpoint picker, the
one queue on this path timed per tier (the config refuses `endpointPicker.enabled: false`): the
gateway routes to the version's picker, which picks the replica. A replica drains in its pod: a
preStop delay, then vLLM's own drain within the grace period."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, ClassVar

from platform_config.errors import ConfigIssue
from platform_config.floors import FLOORS
from platform_config.models import ModelConfig, NodePoolConfig, PlatformConfig
from platform_config.serving import drain_chain, effective_profile

from ..constants import HTTP_PORT_NAME, LABEL_MODEL, VLLM_PORT, standard_labels
from ..shapes import Destination, MachineryName, ModelPlan, PodShape, ServerObject, ServerPlan, ServingBackend, SubsetRule
from ..specs.metrics import GPU_METRIC, QUEUE_METRIC, TTFT_P99_METRIC, epp_queue_metric
from ..specs.pod import (
    pod_annotations,
    pod_disruption_budget,
    pod_spec,
    progress_deadline_seconds,
    server_metadata,
)
from ..specs.pod_parts import merged_metrics_relabelings
from .endpoint_picking import (
    endpoint_picker_server_objects,
    picker_config_issues,
    picker_destination,
    picker_subset_labels,
    picker_subset_rules,
)

# A Deployment's rollout surges one pod above the current count (maxSurge 1, maxUnavailable 0).
ROLLOUT_SURGE = 1


def model_host(model: ModelConfig) -> str:
    """The model's Service, over all its versions."""
    return f"{model.name}.{model.tenant}.svc.cluster.local"


def version_host(server: str, namespace: str) -> str:
    """One version's own Service (`service`), over that version's pods only."""
    return f"{server}.{namespace}.svc.cluster.local"


def vllm_service(metadata: dict[str, Any], selector: dict[str, str]) -> dict[str, Any]:
    """A ClusterIP Service on vLLM's port of the pods `selector` picks."""
    port = {"name": HTTP_PORT_NAME, "port": VLLM_PORT, "targetPort": HTTP_PORT_NAME, "protocol": "TCP", "appProtocol": "http"}
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": metadata,
        "spec": {"type": "ClusterIP", "selector": selector, "ports": [port]},
    }


def model_service(model: ModelConfig) -> dict[str, Any]:
    """Fronts every version of the model; Istio's DestinationRule subsets pick versions."""
    metadata = {
        "name": model.name,
        "namespace": model.tenant,
        "labels": standard_labels(model.name, "model", **{LABEL_MODEL: model.name}),
    }
    return vllm_service(metadata, {LABEL_MODEL: model.name})


def deployment(plan: ServerPlan) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": server_metadata(plan),
        "spec": {
            "replicas": plan.min_replicas,
            "selector": {"matchLabels": plan.selector},
            # Never take a serving replica away before its replacement is ready.
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 0, "maxSurge": ROLLOUT_SURGE}},
            "progressDeadlineSeconds": progress_deadline_seconds(plan),
            "template": {
                "metadata": {"labels": plan.labels, "annotations": pod_annotations(plan)},
                "spec": pod_spec(plan),
            },
        },
    }


def service(plan: ServerPlan) -> dict[str, Any]:
    """The version's own Service (what its ServiceMonitor scrapes)."""
    return vllm_service(server_metadata(plan), plan.selector)


def service_monitor(plan: ServerPlan) -> dict[str, Any]:
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "ServiceMonitor",
        "metadata": server_metadata(plan),
        "spec": {
            "selector": {"matchLabels": plan.selector},
            "endpoints": [
                {
                    "port": HTTP_PORT_NAME,
                    "path": "/stats/prometheus",
                    "interval": "15s",
                    "relabelings": merged_metrics_relabelings(),
                }
            ],
        },
    }


def hpa(plan: ServerPlan) -> dict[str, Any]:
    """autoscaling/v2 on Pods metrics served by prometheus-adapter. GPU utilisation is not a
    `Resource` metric (those are cpu and memory only)."""
    settings = plan.model.autoscaling.hpa
    targets = ((QUEUE_METRIC, settings.queue_depth_target), (GPU_METRIC, settings.gpu_utilization_target))
    metrics = [
        {"type": "Pods", "pods": {"metric": {"name": name}, "target": {"type": "AverageValue", "averageValue": str(value)}}}
        for name, value in targets
        if value is not None
    ]
    # Requests the endpoint picker holds count as demand too, at the same target per replica.
    if plan.endpoint_picker is not None and settings.queue_depth_target is not None:
        metrics.append(epp_queue_metric(plan.name, settings.queue_depth_target))
    # Latency as a signal of its own: each pod's P99 TTFT in seconds, as a quantity in milli-units.
    if settings.ttft_p99_target_ms is not None:
        metrics.append(
            {
                "type": "Pods",
                "pods": {
                    "metric": {"name": TTFT_P99_METRIC},
                    "target": {"type": "AverageValue", "averageValue": f"{settings.ttft_p99_target_ms}m"},
                },
            }
        )
    return {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": server_metadata(plan),
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": plan.name},
            "minReplicas": plan.min_replicas,
            "maxReplicas": plan.max_replicas,
            "metrics": metrics,
            "behavior": {
                "scaleUp": {
                    "stabilizationWindowSeconds": settings.scale_up_stabilization_seconds,
                    "selectPolicy": "Max",
                    "policies": [
                        {"type": "Pods", "value": settings.scale_up_max_pods, "periodSeconds": settings.scale_up_period_seconds}
                    ],
                },
                "scaleDown": {
                    "stabilizationWindowSeconds": settings.scale_down_stabilization_seconds,
                    "selectPolicy": "Min",
                    "policies": [
                        {
                            "type": "Percent",
                            "value": settings.scale_down_max_percent,
                            "periodSeconds": settings.scale_down_period_seconds,
                        }
                    ],
                },
            },
        },
    }


# A P99 over five minutes still jumps with a burst of slow requests: the HPA waits this long before it follows one.
LATENCY_SCALE_UP_STABILIZATION_SECONDS = 60


def _latency_metric_issues(config: PlatformConfig, index: int, model: ModelConfig) -> Iterator[ConfigIssue]:
    """`ttftP99TargetMs` needs a profile whose latency is time to first token, and a scale-up stabilization window."""
    settings = model.autoscaling.hpa
    if settings.ttft_p99_target_ms is None:
        return
    here = ("models", index, "autoscaling", "hpa")
    profile = effective_profile(config, model)
    if profile.latency_sli != "ttft":
        yield ConfigIssue(
            (*here, "ttftP99TargetMs"),
            f"profile {model.profile!r} does not stream: its latency is the whole request, so time to first token says "
            "nothing of it; scale on queueDepthTarget",
        )
    if settings.scale_up_stabilization_seconds < LATENCY_SCALE_UP_STABILIZATION_SECONDS:
        yield ConfigIssue(
            (*here, "scaleUpStabilizationSeconds"),
            f"{settings.scale_up_stabilization_seconds} s, but with ttftP99TargetMs at least "
            f"{LATENCY_SCALE_UP_STABILIZATION_SECONDS} s: a burst of slow requests would add replicas the HPA then keeps",
        )


class DeploymentBackend(ServingBackend):
    mode = "hpa"
    machinery: ClassVar[frozenset[MachineryName]] = frozenset({"metrics-adapter"})
    scales_to_zero = False
    picks_endpoints = True
    pod_shape = PodShape(port_name=HTTP_PORT_NAME, probe_port=HTTP_PORT_NAME, drains_in_pod=True)

    def rollout_surge(self, model: ModelConfig) -> int:
        return ROLLOUT_SURGE

    def config_issues(
        self, config: PlatformConfig, index: int, model: ModelConfig, pool: NodePoolConfig
    ) -> Iterator[ConfigIssue]:
        scaling = model.autoscaling
        if scaling.hpa.gpu_utilization_target is not None and pool.sharing.mode == "timeSlicing":
            yield ConfigIssue(
                ("models", index, "autoscaling", "hpa", "gpuUtilizationTarget"),
                f"pool {pool.name!r} is time-sliced: a GPU's activity is every sharing pod's, not this model's; "
                "scale on queueDepthTarget only (set gpuUtilizationTarget: null)",
            )
        yield from _latency_metric_issues(config, index, model)
        yield from _hpa_floor_issues(config, index, model)
        yield from _drain_floor_issues(config, index, model)
        yield from picker_config_issues(config, index, model, self.uses_endpoint_picker(model))

    def server_objects(self, plan: ServerPlan) -> list[ServerObject]:
        return [
            # The HPA owns the replica count once the Deployment exists.
            ServerObject("deployment", deployment(plan), "pods", serves=True, ignore_changes=("spec.replicas",), runs_vllm=True),
            ServerObject("service", service(plan), "plain", serves=True),
            ServerObject("pdb", pod_disruption_budget(plan, plan.selector), "plain"),
            ServerObject("service-monitor", service_monitor(plan), "monitor", custom=True),
            ServerObject("hpa", hpa(plan), "autoscaler"),
            *endpoint_picker_server_objects(plan, plan.endpoint_picker),
        ]

    def model_objects(self, model: ModelPlan) -> list[ServerObject]:
        return [ServerObject("service", model_service(model.model), "plain", serves=True)]

    def destination(self, model: ModelConfig, version: str, tier: str) -> Destination:
        return picker_destination(model, version, self.subset_name(model, version, tier), tier)

    def subset_name(self, model: ModelConfig, version: str, tier: str) -> str:
        return f"{version}-{tier}"

    def subset_labels(self, model: ModelConfig, version: str) -> dict[str, str]:
        return picker_subset_labels(model, version)

    def destination_rule_host(self, model: ModelConfig) -> str:
        return model_host(model)

    def picker_target(self, model: ModelConfig, server: str) -> tuple[str, int]:
        # The version's own Service, on vLLM's port.
        return version_host(server, model.tenant), VLLM_PORT

    def destination_rules(self, model: ModelConfig, versions: tuple[str, ...]) -> list[SubsetRule]:
        return picker_subset_rules(model, versions)


def _hpa_floor_issues(config: PlatformConfig, index: int, model: ModelConfig) -> Iterator[ConfigIssue]:
    """The hpa-behavior policy's floors, at the pack's defaults."""
    scaling, path = model.autoscaling, ("models", index, "autoscaling")
    if config.environment == "production" and scaling.min_replicas < FLOORS.hpa_min_replicas_in_production:
        yield ConfigIssue(
            (*path, "minReplicas"),
            f"production HPAs keep at least {FLOORS.hpa_min_replicas_in_production} replicas: losing the only one means "
            "minutes of model loading",
        )
    hpa = scaling.hpa
    if hpa.scale_down_stabilization_seconds < FLOORS.hpa_scale_down_stabilization_seconds:
        yield ConfigIssue(
            (*path, "hpa", "scaleDownStabilizationSeconds"),
            f"{hpa.scale_down_stabilization_seconds} s; at least {FLOORS.hpa_scale_down_stabilization_seconds} s (a model "
            "server takes minutes to come back)",
        )
    # The one Percent policy `hpa()` writes, per minute (the pack's scale_down_percent_per_minute).
    per_minute = hpa.scale_down_max_percent * 60 / hpa.scale_down_period_seconds
    if per_minute > FLOORS.hpa_scale_down_percent_per_minute:
        yield ConfigIssue(
            (*path, "hpa", "scaleDownMaxPercent"),
            f"{hpa.scale_down_max_percent}% per {hpa.scale_down_period_seconds} s is {per_minute:g}% of the replicas per "
            f"minute; at most {FLOORS.hpa_scale_down_percent_per_minute:g}% (lower it or raise scaleDownPeriodSeconds)",
        )


def _drain_floor_issues(config: PlatformConfig, index: int, model: ModelConfig) -> Iterator[ConfigIssue]:
    """The inference-graceful-drain policy's floors, at the pack's defaults (Knative pods have
    no lifecycle hooks; its queue-proxy drains them)."""
    path = ("models", index, "drain")
    if model.drain.pre_stop_delay_seconds < FLOORS.pre_stop_seconds:
        yield ConfigIssue(
            (*path, "preStopDelaySeconds"),
            f"{model.drain.pre_stop_delay_seconds} s; at least {FLOORS.pre_stop_seconds} s, for the endpoint to leave every "
            "load balancer before vLLM gets SIGTERM",
        )
    grace = drain_chain(config, model).grace_seconds
    if grace < FLOORS.termination_grace_period_seconds:
        yield ConfigIssue(
            (*path, "terminationGracePeriodSeconds"),
            f"{grace} s; at least {FLOORS.termination_grace_period_seconds} s for in-flight requests to finish",
        )
