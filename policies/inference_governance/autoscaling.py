"""Autoscaling: HPAs (autoscaling/v2, slow scale-down, no GPU Resource metric) and Knative's KPA (bounded scale, no
unbounded queue in the path, slow scale-down in production)."""

from __future__ import annotations

from typing import Any, Mapping

from .kube import (
    FLOORS,
    HPA_V1,
    HPA_V2,
    KNATIVE_SERVICE,
    KNATIVE_TARGET_BURST_CAPACITY,
    Report,
    config,
    duration_seconds,
    get,
    is_list,
    is_production,
)


def hpa_behavior(args: Any, report_violation: Report) -> None:
    if args.resource_type == HPA_V1:
        report_violation(
            "autoscaling/v1 HorizontalPodAutoscaler: it has no behavior (scale-down stabilization and rate) and scales on "
            "CPU only; use autoscaling/v2 with behavior.scaleDown"
        )
        return
    if args.resource_type != HPA_V2:
        return
    settings = config(args)
    spec = get(args.props, "spec", default={})
    low, high = get(spec, "minReplicas", default=1), get(spec, "maxReplicas", default=0)
    if high < low:
        report_violation(f"maxReplicas {high} is below minReplicas {low}")
    floor = int(settings.get("minReplicasInProduction", FLOORS["minReplicasInProduction"]))
    if is_production(args) and low < floor:
        report_violation(f"minReplicas is {low}; production autoscalers keep at least {floor} replicas")
    for metric in get(spec, "metrics", default=[]):
        kind = get(metric, "type")
        if kind in ("Resource", "ContainerResource"):
            name = get(metric, "resource", "name") or get(metric, "containerResource", "name")
            if name not in ("cpu", "memory"):
                report_violation(
                    f"{kind} metric on {name!r}: Resource metrics are cpu and memory only; serve GPU metrics as "
                    "Pods/Object/External metrics through prometheus-adapter"
                )
    scale_down = get(spec, "behavior", "scaleDown")
    window = int(settings.get("minScaleDownStabilizationSeconds", FLOORS["minScaleDownStabilizationSeconds"]))
    if not scale_down:
        report_violation(f"no behavior.scaleDown: set a stabilization window of at least {window} s and scale-down policies")
        return
    stabilization = get(scale_down, "stabilizationWindowSeconds", default=0)
    if stabilization < window:
        report_violation(
            f"behavior.scaleDown.stabilizationWindowSeconds is {stabilization}; at least {window} s (model servers take "
            "minutes to come back)"
        )
    policies = get(scale_down, "policies", default=[])
    if not is_list(policies) or not policies:
        report_violation("behavior.scaleDown.policies must be a list of {type: Percent|Pods, value, periodSeconds}")
        return
    for policy in policies:
        if (
            get(policy, "type") not in ("Percent", "Pods")
            or get(policy, "value", default=0) <= 0
            or not 0 < get(policy, "periodSeconds", default=0) <= 1800
        ):
            report_violation(f"invalid scale-down policy {dict(policy)}: type Percent or Pods, value > 0, periodSeconds 1..1800")
            return
    fastest = int(settings.get("maxScaleDownPercentPerMinute", FLOORS["maxScaleDownPercentPerMinute"]))
    rate = scale_down_percent_per_minute(scale_down, high)
    if rate is not None and rate > fastest:
        report_violation(
            f"behavior.scaleDown removes up to {rate:g}% of maxReplicas per minute; at most {fastest}% (a model server "
            "takes minutes to come back)"
        )


def scale_down_percent_per_minute(scale_down: Mapping[str, Any], max_replicas: float) -> float | None:
    """The fastest the HPA may scale down, in percent of maxReplicas per minute: the policies'
    rates, of which the controller applies the largest (selectPolicy Max, the default) or the
    smallest (Min); None when scale-down is Disabled (kubernetes
    pkg/controller/podautoscaler/horizontal.go: calculateScaleDownLimitWithBehaviors)."""
    select = get(scale_down, "selectPolicy", default="Max")
    if select == "Disabled":
        return None
    rates = []
    for policy in get(scale_down, "policies", default=[]):
        per_minute = 60 / get(policy, "periodSeconds")
        value = get(policy, "value")
        rates.append(value * per_minute if get(policy, "type") == "Percent" else 100 * value / max(max_replicas, 1) * per_minute)
    return (min if select == "Min" else max)(rates)


def knative_autoscaling(args: Any, report_violation: Report) -> None:
    if args.resource_type != KNATIVE_SERVICE:
        return
    template = get(args.props, "spec", "template", default={})
    annotations = get(template, "metadata", "annotations", default={})
    prefix = "autoscaling.knative.dev/"
    for key in ("max-scale", "target"):
        value = annotations.get(prefix + key)
        if value in (None, "", "0"):
            report_violation(f"{prefix}{key} is not set: a Knative service must bound its scale and name its target")
    # Any burst capacity but the program's 0 keeps Knative's activator in the request path (with a
    # 100 % target utilization, always), whose queue has no practical bound and no time bound
    # (knative/serving knative-v1.23.0 config/core/configmaps/autoscaler.yaml, pkg/activator/net/throttler.go).
    burst = annotations.get(prefix + "target-burst-capacity")
    if burst != KNATIVE_TARGET_BURST_CAPACITY:
        report_violation(
            f"{prefix}target-burst-capacity is {burst!r}, not {KNATIVE_TARGET_BURST_CAPACITY!r}: Knative's activator "
            "would hold requests in a queue with no bound in requests or time, instead of sending them straight to a "
            "replica (picked by the version's endpoint picker, or bounded by its vLLM's admission)"
        )
    # queue-proxy's breaker holds 10 x containerConcurrency waiting requests with no time bound, and
    # builds none for 0 (knative/serving knative-v1.23.0 pkg/queue/sharedmain/main.go buildBreaker).
    concurrency = get(template, "spec", "containerConcurrency", default=0)
    if concurrency:
        report_violation(
            f"containerConcurrency is {concurrency}: queue-proxy would hold requests beyond it with no time bound, until "
            "the revision's timeout (504); set 0 (the endpoint picker times the wait, or vLLM's --max-num-queued-reqs "
            "bounds it)"
        )
    if not is_production(args):
        return
    settings = config(args)
    # Knative's own defaults are a 0s scale-down delay and a 60s window (knative/serving
    # knative-v1.23.0, pkg/apis/autoscaling/register.go and config/core/configmaps/autoscaler.yaml).
    for key, floor_key in (("scale-down-delay", "minScaleDownDelaySeconds"), ("window", "minWindowSeconds")):
        floor = int(settings.get(floor_key, FLOORS[floor_key]))
        raw = annotations.get(prefix + key)
        seconds = duration_seconds(raw) if raw is not None else 0.0
        if seconds is None:
            report_violation(f"{prefix}{key} is {raw!r}, not a duration such as '5m'")
        elif seconds < floor:
            report_violation(
                f"{prefix}{key} is {seconds:g} s; production services keep at least {floor} s so a dip in load does not "
                "tear down replicas that take minutes to load a model"
            )
