"""Serving backend `kpa`: each version is a Knative Service scaled by Knative's KPA on
concurrency, with a PodMonitor and a PodDisruptionBudget. By default an endpoint picker stands in
front of each version, as on the `hpa` path: it queues each tier's requests, bounded in time per
tier, and dials the picked pod's queue-proxy (QUEUE_PROXY_PORT), which counts every request it is
sent for the KPA. Without a picker (`endpointPicker.enabled: false`, the only way to scale to zero:
a picker cannot wake a revision) versions are reached through Knative's local gateway by Host
header (as KServe does), their tier subsets in one DestinationRule for that gateway, and each
replica's vLLM bounds its own queue (admission control: 503 at once). Knative's queue-proxy drains
a replica (Knative admits no lifecycle hooks); its activator sits in the data path only while no
replica is ready, with no time bound but the revision's timeout."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Iterator, Mapping
from typing import Any, ClassVar

from platform_config.errors import ConfigIssue
from platform_config.floors import FLOORS
from platform_config.models import ModelConfig, NodePoolConfig, PlatformConfig, duration_seconds
from platform_config.profiles import WorkloadProfile
from platform_config.serving import drain_chain, effective_profile, server_name

from ..constants import (
    GATEWAY_SELECTOR,
    ISTIO_SYSTEM_NAMESPACE,
    KNATIVE_ACTIVATOR_GRACE_SECONDS,
    KNATIVE_SERVING_NAMESPACE,
    PULUMI_WAIT_FOR,
    VLLM_PORT,
)
from ..shapes import Destination, MachineryName, PodShape, ServerObject, ServerPlan, ServingBackend, SubsetRule
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

# Knative names the serving port of a container http1 (or h2c), and labels every pod of a
# Knative Service with the service's name.
KNATIVE_HTTP_PORT_NAME = "http1"
KNATIVE_SERVICE_LABEL = "serving.knative.dev/service"
# ... and with its revision's name (knative/serving knative-v1.23.0 pkg/apis/serving/register.go
# RevisionLabelKey).
KNATIVE_REVISION_LABEL = "serving.knative.dev/revision"
KNATIVE_LOCAL_GATEWAY = f"knative-local-gateway.{ISTIO_SYSTEM_NAMESPACE}.svc.cluster.local"
KNATIVE_LOCAL_GATEWAY_PORT = 80

# queue-proxy, in every Knative pod, sized by the revision's annotations so quotas count it
# exactly (knative/serving knative-v1.23.0 pkg/reconciler/revision/resources/queue.go
# createQueueResources: the queue.sidecar.serving.knative.dev/* annotations; without them only
# 25m of CPU is requested).
QUEUE_PROXY_RESOURCES = {"cpu": "25m", "memory": "256Mi"}
# queue-proxy's breaker would hold 10 x containerConcurrency waiting requests with no time bound
# (pkg/queue/sharedmain/main.go buildBreaker; the request waits until the revision's timeout), and
# builds none for 0. So the platform renders 0: nothing waits in queue-proxy, every request reaches
# vLLM at once (behind a picker, which has timed its wait already; without one, vLLM's admission
# control, platform_config/serving.py ServerAdmission, answers 503 at once past its bounds, before
# the request is queued). queue-proxy still counts every request
# in flight for the KPA (pkg/queue/handler.go ProxyHandler), so the autoscaler sees all of vLLM's
# running and waiting requests.
NO_QUEUE_PROXY_BREAKER = 0
# No burst capacity: Knative takes the activator out of the request path whenever the revision wants
# a replica (knative/serving knative-v1.23.0 config/core/configmaps/autoscaler.yaml: "If this
# setting is 0, then Activator will be in the request path only when the revision is scaled to 0";
# pkg/autoscaler/scaling/autoscaler.go: excess burst capacity 0, and pkg/reconciler/autoscaling/
# kpa/kpa.go: Serve mode when want > 0 and it is >= 0; pkg/reconciler/serverlessservice/
# serverlessservice.go still forces Proxy mode while no replica is ready). With the default 211
# and the target utilization of 100 % the platform sets, the activator would stay in the path of
# every request, and its per-revision queue has no practical bound (pkg/activator/net/
# throttler.go: a breaker of depth 10000 over a capacity of 2^31-1) and no time bound: a request
# waited there until the revision's timeout (504). Without it a request goes to a replica's vLLM
# at once (NO_QUEUE_PROXY_BREAKER): the one its picker chose or, without a picker, one Knative's
# local gateway (an Istio gateway) chooses, whose admission answers overflow 503 at once (with the
# tier's Retry-After from the gateway). That gateway spreads requests
# over the ready replicas by least requests, Istio's default (istio/istio 1.30.3 pilot/pkg/
# networking/core/cluster_traffic_policy.go defaultLBAlgorithm). The autoscaler still sees every
# request vLLM runs or queues: queue-proxy counts it in (pkg/queue/handler.go ProxyHandler: ReqIn,
# with no breaker after it), and the KPA scrapes every replica's queue-proxy in either mode
# (pkg/autoscaler/metrics/collector.go, stats_scraper.go).
TARGET_BURST_CAPACITY = 0

# queue-proxy's serving port in every Knative pod (knative/serving knative-v1.23.0
# pkg/networking/constants.go BackendHTTPPort; pkg/reconciler/revision/resources/queue.go
# queueHTTPPort). An endpoint picker dials it, not vLLM's port: queue-proxy then counts every
# request the picker sends (pkg/queue/handler.go ProxyHandler), so the KPA sees the load. The
# picker holds requests once its replicas are saturated: on average 5 waiting (queueDepthThreshold),
# or 80 % of the KV cache in use (specs/endpoint_picker/picker_config.py). A replica saturated by its waiting
# requests runs all its slots and has more in flight than the KPA's target (a config check keeps
# the target at or below the slots: `_saturation_issues`), so the KPA adds replicas while the
# picker times the rest; one saturated by its KV cache may not, and the picker then sheds each
# tier past its bound (503, Retry-After) until load falls or a replica is added.
QUEUE_PROXY_PORT = 8012


def container_concurrency(profile: WorkloadProfile, model: ModelConfig) -> int:
    """Requests one replica runs at once (`kpa.containerConcurrency`, else the profile's); `profile`
    is the model's effective profile."""
    kpa = model.autoscaling.kpa
    return kpa.container_concurrency if kpa.container_concurrency is not None else profile.concurrency_per_replica


def target(profile: WorkloadProfile, model: ModelConfig) -> int:
    return model.autoscaling.kpa.target_concurrency or profile.concurrency_per_replica


def rollout_surge(min_scale: int, initial_scale: int | None) -> int:
    """A new Knative revision starts at its initial scale (1 unless set), and at least at its
    min-scale, while the old revision serves on. The preview's admission stage reads Knative
    Services with this very rule."""
    return max(min_scale, 1 if initial_scale is None else initial_scale)


def knative_service(plan: ServerPlan) -> dict[str, Any]:
    kpa = plan.model.autoscaling.kpa
    annotations = {
        "autoscaling.knative.dev/class": "kpa.autoscaling.knative.dev",
        "autoscaling.knative.dev/metric": "concurrency",
        "autoscaling.knative.dev/target": str(target(plan.profile, plan.model)),
        # Knative aims at 70 % of the target unless told otherwise (config-autoscaler
        # container-concurrency-target-percentage): scale at the target the stack names.
        "autoscaling.knative.dev/target-utilization-percentage": "100",
        "autoscaling.knative.dev/target-burst-capacity": str(TARGET_BURST_CAPACITY),
        "autoscaling.knative.dev/min-scale": str(plan.min_replicas),
        "autoscaling.knative.dev/max-scale": str(plan.max_replicas),
        "autoscaling.knative.dev/scale-down-delay": kpa.scale_down_delay,
        "autoscaling.knative.dev/window": kpa.window,
        **pod_annotations(plan),
        # queue-proxy's size, stated so quotas count it exactly (see QUEUE_PROXY_RESOURCES).
        "queue.sidecar.serving.knative.dev/cpu-resource-request": QUEUE_PROXY_RESOURCES["cpu"],
        "queue.sidecar.serving.knative.dev/memory-resource-request": QUEUE_PROXY_RESOURCES["memory"],
        "queue.sidecar.serving.knative.dev/memory-resource-limit": QUEUE_PROXY_RESOURCES["memory"],
    }
    if kpa.initial_scale is not None:
        annotations["autoscaling.knative.dev/initial-scale"] = str(kpa.initial_scale)
    # Knative marks a revision failed after its progress deadline (10 minutes by default); it
    # follows the version's expected cold start (a new node, the image, the startup probe's
    # budget), as the Deployment's progressDeadlineSeconds does.
    annotations["serving.knative.dev/progress-deadline"] = f"{progress_deadline_seconds(plan)}s"
    service: dict[str, Any] = {
        "apiVersion": "serving.knative.dev/v1",
        "kind": "Service",
        "metadata": {
            **server_metadata(plan),
            # Reached through the platform's Istio gateway only, never Knative's public ingress.
            "labels": {**plan.labels, "networking.knative.dev/visibility": "cluster-local"},
            # pulumi-kubernetes does not await custom resources by default: have `pulumi up` (and
            # the routes that depend on this) wait until Knative reports the revision ready.
            "annotations": {PULUMI_WAIT_FOR: "condition=Ready"},
        },
        "spec": {
            "template": {
                "metadata": {"labels": plan.labels, "annotations": annotations},
                "spec": {
                    # No breaker in queue-proxy, whose queue has no time bound
                    # (NO_QUEUE_PROXY_BREAKER).
                    "containerConcurrency": NO_QUEUE_PROXY_BREAKER,
                    "timeoutSeconds": plan.drain.request_timeout_seconds,
                    # Unset, Knative defaults the time to the first response byte from
                    # revision-timeout-seconds (300 s) whenever that is below timeoutSeconds
                    # (knative/serving knative-v1.23.0 pkg/apis/config/defaults.go and
                    # pkg/apis/serving/v1/revision_defaults.go): a silent batch answer would get
                    # a 504 at 300 s. A non-streamed answer may take the whole timeout.
                    "responseStartTimeoutSeconds": plan.drain.request_timeout_seconds,
                    **pod_spec(plan),
                },
            }
        },
    }
    if plan.endpoint_picker is not None:
        # Named, so the picker's pool can select this revision's pods (KnativeBackend.server_objects).
        template = service["spec"]["template"]
        template["metadata"] = {"name": revision_name(plan.name, template), **template["metadata"]}
    return service


def pod_monitor(plan: ServerPlan) -> dict[str, Any]:
    """Knative owns the Services of its revisions, so scrape the pods directly."""
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PodMonitor",
        "metadata": server_metadata(plan),
        "spec": {
            "selector": {"matchLabels": {KNATIVE_SERVICE_LABEL: plan.name}},
            "podMetricsEndpoints": [
                {
                    "path": "/stats/prometheus",
                    "interval": "15s",
                    "relabelings": [
                        {"sourceLabels": ["__meta_kubernetes_pod_container_name"], "action": "keep", "regex": "istio-proxy"},
                        *merged_metrics_relabelings(),
                    ],
                }
            ],
        },
    }


def revision_name(server: str, template: Mapping[str, Any]) -> str:
    """The name a picked version gives its revision: the Knative Service's name (Knative requires it
    as the prefix: knative-v1.23.0 pkg/apis/serving/v1/revision_validation.go) and a digest of the
    template, so every change of the template names a new revision (Knative refuses a changed
    template under the same name, ibid.), and the picker's pool can select the current one."""
    digest = hashlib.sha256(json.dumps(template, sort_keys=True).encode()).hexdigest()[:10]
    return f"{server}-{digest}"


def queue_proxy_host(server: str, namespace: str) -> str:
    return f"{server}-queue-proxy.{namespace}.svc.cluster.local"


def queue_proxy_service(plan: ServerPlan, selector: Mapping[str, str]) -> dict[str, Any]:
    """A ClusterIP Service on queue-proxy's port of the pods the version's picker picks (`selector`):
    its stable name is the Host the picker's proxy sends with podIP:8012, by which the picker pod's
    sidecar finds that port's outbound route (Istio builds one only from a Service with the port;
    Knative's own Services on 8012, each revision's `-private` one, change name with the revision)."""
    metadata = server_metadata(plan)
    port = {"name": "http", "port": QUEUE_PROXY_PORT, "targetPort": QUEUE_PROXY_PORT, "protocol": "TCP", "appProtocol": "http"}
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {**metadata, "name": f"{plan.name}-queue-proxy"},
        "spec": {"type": "ClusterIP", "selector": dict(selector), "ports": [port]},
    }


class KnativeBackend(ServingBackend):
    mode = "kpa"
    machinery: ClassVar[frozenset[MachineryName]] = frozenset({"knative"})
    scales_to_zero = True
    picks_endpoints = True
    # Knative probes its container through queue-proxy and takes the port from the container.
    pod_shape = PodShape(port_name=KNATIVE_HTTP_PORT_NAME, probe_port=VLLM_PORT, drains_in_pod=False)
    # (object name, resource name suffix) of the gateway-wide DestinationRule of the subsets of
    # every Knative model without a picker, on the one host they are all reached through.
    shared_destination_rule = ("knative-model-tiers", "knative-tiers")
    # Knative's local gateway serves ISTIO_MUTUAL only (specs/knative.py local_gateway): its pods
    # carry no tlsMode label, so auto mTLS would send plaintext and be refused. The rule is in the
    # root namespace, so every proxy calling the local gateway uses mTLS; only the gateway's own
    # identity is admitted there.
    shared_traffic_policy: ClassVar[Mapping[str, Any]] = {"tls": {"mode": "ISTIO_MUTUAL"}}
    subsets_are_servers = False

    def rollout_surge(self, model: ModelConfig) -> int:
        return rollout_surge(model.autoscaling.min_replicas, model.autoscaling.kpa.initial_scale)

    def request_cap(self, config: PlatformConfig, model: ModelConfig) -> int | None:
        return container_concurrency(effective_profile(config, model), model)

    # Without a picker: each replica's vLLM (NO_QUEUE_PROXY_BREAKER); Knative's activator only
    # while no replica is ready (TARGET_BURST_CAPACITY), with no time bound.
    queue_holder = "each replica's vLLM (Knative's activator while no replica is ready)"

    def injected_containers(self) -> tuple[Mapping[str, str], ...]:
        return (QUEUE_PROXY_RESOURCES,)

    def config_issues(
        self, config: PlatformConfig, index: int, model: ModelConfig, pool: NodePoolConfig
    ) -> Iterator[ConfigIssue]:
        if model.autoscaling.hpa.ttft_p99_target_ms is not None:
            # knative-v1.23.0 pkg/apis/autoscaling/annotation_validation.go validateMetric: the KPA class takes
            # `concurrency` or `rps` only.
            yield ConfigIssue(
                ("models", index, "autoscaling", "hpa", "ttftP99TargetMs"),
                "mode kpa: Knative's KPA scales on concurrency or requests per second only, not on latency; use mode hpa",
            )
        timeout = drain_chain(config, model).request_timeout_seconds
        if timeout > KNATIVE_ACTIVATOR_GRACE_SECONDS:
            yield ConfigIssue(
                ("models", index, "autoscaling", "mode"),
                f"requests to this model may take {timeout} s (its profile's or a tier's timeout), but Knative refuses a "
                "revision timeout above its max-revision-timeout-seconds, which the platform keeps at what Knative's "
                "activator (in the path of a revision while no replica is ready) drains for only "
                f"{KNATIVE_ACTIVATOR_GRACE_SECONDS} s and the operator cannot raise it: use mode 'hpa', or lower the "
                "timeouts (profiles.<name>.requestTimeoutSeconds, traffic.tiers.<tier>.timeout)",
            )
        # Knative scales on requests in flight, vLLM's waiting ones included: a target above what a
        # replica runs would add replicas only once requests wait.
        profile = effective_profile(config, model)
        cap, aim = container_concurrency(profile, model), target(profile, model)
        if aim > cap:
            yield ConfigIssue(
                ("models", index, "autoscaling", "kpa", "targetConcurrency"),
                f"target {aim} is above containerConcurrency {cap}, the requests one replica runs: Knative would add "
                "replicas only once requests wait; raise autoscaling.kpa.containerConcurrency or lower the target",
            )

        picked = self.uses_endpoint_picker(model)
        if picked and model.autoscaling.min_replicas == 0:
            yield ConfigIssue(
                ("models", index, "autoscaling", "minReplicas"),
                "0 behind an endpoint picker: the picker dials ready pods only and cannot wake a revision at zero "
                "(Knative's activator does, and times nothing below the revision's timeout: knative/serving "
                "knative-v1.23.0 cmd/activator/main.go); keep at least 1, or set endpointPicker.enabled: false to "
                "scale to zero untimed",
            )
        # Scaling to zero is the one thing a picker cannot do (it cannot wake a revision).
        yield from picker_config_issues(config, index, model, picked, needs_no_picker=model.autoscaling.min_replicas == 0)
        if picked:
            yield from _saturation_issues(index, model, aim)
        if config.environment == "production":
            yield from _production_floor_issues(index, model)

    def server_objects(self, plan: ServerPlan) -> list[ServerObject]:
        service = knative_service(plan)
        objects = [
            ServerObject("knative-service", service, "pods", custom=True, serves=True, runs_vllm=True),
            ServerObject("pod-monitor", pod_monitor(plan), "monitor", custom=True),
        ]
        if plan.max_replicas > 1:
            objects.append(ServerObject("pdb", pod_disruption_budget(plan, {KNATIVE_SERVICE_LABEL: plan.name}), "plain"))
        if plan.endpoint_picker is None:
            return objects
        # The picker picks from the current revision's pods only: an older revision's carry the same
        # labels until Knative scales it away, which traffic the picker sent it would prevent (Knative
        # routes to the latest ready revision, the picker does not go through Knative's route). The
        # pool moves to a new revision once `pulumi up` has seen it ready (the Knative Service's wait).
        revision = {KNATIVE_REVISION_LABEL: service["spec"]["template"]["metadata"]["name"]}
        queue_proxy = queue_proxy_service(plan, revision)
        objects.append(ServerObject("queue-proxy-service", queue_proxy, "plain", serves=True, after_pods=True))
        picker = dataclasses.replace(plan.endpoint_picker, pool_labels=revision)
        return [*objects, *endpoint_picker_server_objects(plan, picker, pool_after_pods=True)]

    def picker_target(self, model: ModelConfig, server: str) -> tuple[str, int]:
        return queue_proxy_host(server, model.tenant), QUEUE_PROXY_PORT

    def shared_rule(self, model: ModelConfig) -> tuple[str, str] | None:
        # A picked model's subsets are its pickers', one rule per version in its namespace.
        return None if self.uses_endpoint_picker(model) else self.shared_destination_rule

    def destination(self, model: ModelConfig, version: str, tier: str) -> Destination:
        if self.uses_endpoint_picker(model):
            return picker_destination(model, version, self.subset_name(model, version, tier), tier)
        service_host = f"{server_name(model, version)}.{model.tenant}.svc.cluster.local"
        return Destination(
            KNATIVE_LOCAL_GATEWAY, self.subset_name(model, version, tier), KNATIVE_LOCAL_GATEWAY_PORT, (("Host", service_host),)
        )

    def subset_name(self, model: ModelConfig, version: str, tier: str) -> str:
        # One DestinationRule holds every Knative model's subsets: the model name keeps them apart.
        return f"{model.name}-{version}-{tier}"

    def subset_labels(self, model: ModelConfig, version: str) -> dict[str, str]:
        if self.uses_endpoint_picker(model):
            return picker_subset_labels(model, version)
        # The local gateway's pods: Knative's knative-local-gateway Service selects them.
        return GATEWAY_SELECTOR

    def destination_rule_host(self, model: ModelConfig) -> str:
        return KNATIVE_LOCAL_GATEWAY

    def destination_rules(self, model: ModelConfig, versions: tuple[str, ...]) -> list[SubsetRule]:
        if self.uses_endpoint_picker(model):
            return picker_subset_rules(model, versions)
        return super().destination_rules(model, versions)

    def tenant_ingress(self) -> tuple[tuple[str, str], ...]:
        return (("allow-knative-system", KNATIVE_SERVING_NAMESPACE),)


def _saturation_issues(index: int, model: ModelConfig, aim: int) -> Iterator[ConfigIssue]:
    """Behind a picker the KPA sees only what the picker dispatches: the picker holds requests once
    a replica's vLLM has some waiting, so a replica that runs fewer requests than the KPA's target
    can saturate below it, and the KPA would never add one while the picker sheds."""
    path: tuple[str | int, ...]
    for i, version in enumerate(model.versions):
        if version.server.max_num_seqs is not None:
            running, path = version.server.max_num_seqs, ("models", index, "versions", i, "server", "maxNumSeqs")
        elif model.server.max_num_seqs is not None:
            running, path = model.server.max_num_seqs, ("models", index, "server", "maxNumSeqs")
        else:
            continue  # containerConcurrency, which the target may not exceed (above)
        if running < aim:
            yield ConfigIssue(
                path,
                f"{running} requests run per replica of version {version.name!r}, below the KPA's target {aim}: behind "
                "its endpoint picker a replica saturates with fewer requests in flight than the target, and Knative "
                "would not add replicas while the picker sheds; raise it or lower autoscaling.kpa.targetConcurrency",
            )


def _production_floor_issues(index: int, model: ModelConfig) -> Iterator[ConfigIssue]:
    """The knative-autoscaling policy's production floors, at the pack's defaults (production's
    queue bound on this path is the endpoint picker's: `picker_config_issues`)."""
    kpa, path = model.autoscaling.kpa, ("models", index, "autoscaling", "kpa")
    for key, value, floor in (
        ("scaleDownDelay", kpa.scale_down_delay, FLOORS.knative_scale_down_delay_seconds),
        ("window", kpa.window, FLOORS.knative_window_seconds),
    ):
        if duration_seconds(value) < floor:
            yield ConfigIssue(
                (*path, key),
                f"{value}; production keeps at least {floor} s, so a dip in load does not tear down replicas that take "
                "minutes to load a model",
            )
