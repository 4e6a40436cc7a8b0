"""The llm-d router's endpoint picker (EPP) in front of one model version's servers, in
standalone mode: the EPP and an Envoy proxy container in one pod, flow control on (pure builders).

The gateway sends a version's requests to that Envoy (`<name>-epp:8081`); Envoy asks the
EPP (ext_proc over loopback) which vLLM pod to use, the EPP queues the request by priority band
while the pods are saturated, and Envoy then dials that pod's IP (ORIGINAL_DST on the
`x-gateway-destination-endpoint` header the EPP sets).

Security: the EPP pod is in the mesh like every tenant pod, so mTLS and the tenant's
authorization hold on both hops with nothing relaxed. Gateway -> EPP is a mesh Service call
(auto-mTLS). EPP -> vLLM: Envoy rewrites the Host to the version's Service on the target port
(`server_host`), so the pod's Istio sidecar, which intercepts Envoy's connection to
podIP:<target port> (vLLM's 8000, or a Knative pod's queue-proxy on 8012), routes it through that
Service's cluster; a DestinationRule that only the EPP pods see makes that cluster ORIGINAL_DST
(the connection still goes to the pod the EPP picked) with Istio mTLS stated explicitly. The
vLLM pods see the EPP's SPIFFE identity, which the tenant's namespace rule admits. The EPP reads
the servers' metrics, and Prometheus the EPP's, through the sidecars' merged metrics endpoint
(15020, outside inbound capture). The NetworkPolicies state those paths (gateway and monitoring
to the EPP pods, EPP pods to this version's servers); the tenant's own policies already admit its
namespace, so they document rather than narrow what the tenant's isolation allows.

Every object follows the upstream chart at tag v0.10.0 of github.com/llm-d/llm-d-router
(LR below): `config/charts/routerlib/templates/*.yaml` and the Envoy preset of
`config/charts/llm-d-router-standalone/values.yaml` (SA below). We render them ourselves, not
through Helm, so each one goes through the preview's schema, admission and policy checks. Where
we differ from the chart, the comment says so and why. Istio's behaviour is cited from
github.com/istio/istio at tag 1.30.3 (IS below), the mesh the platform installs.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import yaml

from platform_config.pins import ENDPOINT_PICKER, ENVOY_PROXY
from platform_config.quantity import parse_quantity
from platform_config.serving import EPP_HEADER_PREFIXES

from ..constants import (
    ENDPOINT_PICKER_COMPONENT,
    GATEWAY_SELECTOR,
    ISTIO_INGRESS_NAMESPACE,
    LABEL_COMPONENT,
    LABEL_NAME,
    MONITORING_NAMESPACE,
)
from .pod_parts import container_security_context, draining_sidecar_annotations, merged_metrics_relabelings
from .tenancy import NAMESPACE_NAME_LABEL

# --- ports ----------------------------------------------------------------------------------
# Envoy's listener for the model's traffic, and the EPP Service port named "http" (SA
# extraServicePorts {name: http, port: 8081, targetPort: 8081}; listener `vllm` port_value 8081).
EPP_PROXY_PORT = 8081
# The EPP's Prometheus metrics (LR pkg/epp/server/options.go NewOptions MetricsPort 9090; routerlib
# _deployment.yaml containerPort `metrics` 9090; _service.yaml `http-metrics`).
EPP_METRICS_PORT = 9090
# ext_proc gRPC (LR options.go DefaultGrpcPort 9002; _deployment.yaml containerPort `grpc` 9002,
# hard-coded there; _service.yaml `grpc-ext-proc`, appProtocol kubernetes.io/h2c).
EPP_GRPC_PORT = 9002
# gRPC health for the kubelet's probes (LR options.go GRPCHealthPort 9003; routerlib values
# epp.grpcHealthPort 9003, rendered as --grpc-health-port).
EPP_HEALTH_PORT = 9003
# Envoy's readiness listener serving /ready, and its admin on loopback (SA envoy.yaml listener
# `envoy-proxy-ready-0.0.0.0-19001`, admin 127.0.0.1:19000).
PROXY_READY_PORT = 19001
PROXY_ADMIN_PORT = 19000

# --- the mesh -------------------------------------------------------------------------------
# The Istio sidecar's status port and the merged metrics it serves there: Envoy's, the agent's
# and the application's named by the pod's prometheus.io/port and path annotations, which the
# injector moves into the sidecar's environment and rewrites to point here (IS
# pkg/config/mesh/mesh.go DefaultProxyConfig StatusPort 15020; pkg/kube/inject/webhook.go
# applyPrometheusMerge; pilot/cmd/pilot-agent/status/server.go handleStats; merging is on mesh-wide,
# components/mesh.py istiod_values enablePrometheusMerge). The injector leaves the status port out
# of inbound capture (manifests/charts/istio-control/istio-discovery/files/injection-template.yaml,
# istio-iptables `-d`), so it takes plaintext scrapes under STRICT mTLS.
MESH_STATUS_PORT = 15020
MESH_METRICS_PATH = "/stats/prometheus"
ISTIO_PROXY_CONTAINER = "istio-proxy"  # injection-template.yaml
# The sidecar's uid: istio-iptables does not capture this uid's outbound traffic (`-u`, the
# template's `.ProxyUID | default "1337"`), so a container running as it would bypass the sidecar.
ISTIO_PROXY_UID = 1337

# --- headers --------------------------------------------------------------------------------
# The request header naming the InferenceObjective whose priority a request gets (LR
# pkg/epp/metadata/consts.go ObjectiveKey), and the response header the EPP sets when flow
# control drops a request (LR pkg/common/error/error.go RequestDroppedReasonHeaderKey).
OBJECTIVE_HEADER = "x-llm-d-inference-objective"
DROPPED_REASON_HEADER = "x-llm-d-request-dropped-reason"
# The header the EPP answers with the chosen pod's IP:port, which Envoy routes on (consts.go
# DestinationEndpointKey; SA original_dst_lb_config http_header_name).
DESTINATION_HEADER = "x-gateway-destination-endpoint"
# The flow a request joins within its priority band (consts.go FlowFairnessIDKey); the gateway
# filter sets it from the verified caller.
FAIRNESS_HEADER = "x-llm-d-inference-fairness-id"
# Every request header the EPP or its Envoy acts on, from LR pkg/epp/metadata/consts.go at
# v0.10.0 (current names and their deprecated aliases). A client must never set one: the gateway
# strips every one of them (the tests hold this list to every header of consts.go under
# EPP_CONTROL_HEADER_PREFIXES) before the routes set the objective and the filter the flow.
EPP_CONTROL_HEADERS: tuple[str, ...] = (
    DESTINATION_HEADER,  # DestinationEndpointKey: where Envoy sends the request
    "x-gateway-destination-endpoint-subset",  # SubsetFilterKey
    FAIRNESS_HEADER,  # FlowFairnessIDKey
    "x-gateway-inference-fairness-id",  # OldFlowFairnessIDKey
    OBJECTIVE_HEADER,  # ObjectiveKey: the request's priority
    "x-gateway-inference-objective",  # OldObjectiveKey
    "x-llm-d-model-name-rewrite",  # ModelNameRewriteKey: the model the request is sent as
    "x-gateway-model-name-rewrite",  # OldModelNameRewriteKey
    "x-llm-d-slo-ttft-ms",  # TTFTSLOHeaderKey
    "x-slo-ttft-ms",  # OldTTFTSLOHeaderKey
    "x-llm-d-slo-tpot-ms",  # TPOTSLOHeaderKey
    "x-slo-tpot-ms",  # OldTPOTSLOHeaderKey
    "x-llm-d-video-fps",  # VideoFPSHeaderKey
    "x-llm-d-video-duration-seconds",  # VideoDurationHeaderKey
    "x-llm-d-video-resolution",  # VideoResolutionHeaderKey
)
# Prefixes covering every one of them: the deprecated SLO aliases are `x-slo-*`.
EPP_CONTROL_HEADER_PREFIXES = EPP_HEADER_PREFIXES

# --- names and labels -----------------------------------------------------------------------
TIERS = ("premium", "standard", "batch")
POOL_GROUP = "inference.networking.k8s.io"  # LR options.go --pool-group; routerlib _deployment.yaml
OBJECTIVE_GROUP = "llm-d.ai"  # InferenceObjective, InferenceModelRewrite (LR config/crd/bases)
EPP_CONTAINER = "epp"  # routerlib _deployment.yaml
PROXY_CONTAINER = "envoy-proxy"  # SA presets.envoy.name
COMPONENT = ENDPOINT_PICKER_COMPONENT
# The pods' labels (routerlib _helpers.tpl selectorLabels and modeLabels, with
# inferencePool.create true, the standalone default).
SELECTOR_LABEL = "llm-d-router-gateway"
MODE_LABEL = ("llm-d.ai/igw-mode", "llm-d-router-gateway")
# The chart truncates the release name to 40 characters (_helpers.tpl llm-d-router.name); we
# refuse a longer one instead, so every name we derive stays a valid label value.
MAX_NAME_LENGTH = 40

EPP_CONFIG_FILE = "config.yaml"
EPP_CONFIG_DIR = "/config"  # routerlib _deployment.yaml plugins-config-volume mountPath
PROXY_CONFIG_FILE = "envoy.yaml"
PROXY_CONFIG_DIR = "/etc/envoy"  # SA presets.envoy.volumeMounts
# Both images run as 65532 (LR Dockerfile.epp `USER 65532:65532`; Envoy's distroless images are
# built on distroless `nonroot`, the same uid). Set explicitly so runAsNonRoot is checkable, and
# never ISTIO_PROXY_UID: Envoy's connections to the picked pods must go through the sidecar, or
# they would leave in plaintext and the servers' STRICT mTLS would refuse them.
RUN_AS = 65532

# How long the EPP keeps accepting new ext_proc streams after SIGTERM while the Service drops it
# (LR options.go --drain-timeout, DefaultDrainTimeout 30s); in-flight streams then finish
# (internal/runnable/grpc.go GracefulStop).
DRAIN_SECONDS = 30
# Time for the kubelet to kill what is left after the preStop sleep.
GRACE_MARGIN_SECONDS = 15
# Envoy's upstream connections end at the pod's own sidecar, which keeps an idle one open far
# longer (Envoy's default hour: IS pilot/pkg/networking/core/listener_builder.go sets the
# listener's idle timeout only from the proxy's IDLE_TIMEOUT metadata), so no close races a
# reuse; Envoy still drops one idle for 4 s, so a pod that has left the pool holds no
# connections (each picked pod IP is its own ORIGINAL_DST host).
UPSTREAM_IDLE_SECONDS = 4

# How often the EPP reads each server's metrics, and how old they may be before the saturation
# detector counts the server as full (fail closed: LR utilization/detector.go Saturation). The
# EPP's base tick is 50 ms (LR pkg/epp/server/options.go RefreshMetricsInterval), but each read
# now goes through the server's sidecar, whose agent fetches Envoy's stats and vLLM's /metrics
# for it (status/server.go handleStats) and answers with both: at 50 ms that is 20 merged scrapes
# a second per EPP replica and server, on vLLM's API process too. Every 250 ms is 4 a second.
# Staleness keeps upstream's ratio of 4 reads (50 ms tick, 200 ms DefaultMetricsStalenessThreshold,
# utilization/config.go), so one slow read does not stop dispatch to a pod.
SERVER_METRICS_INTERVAL = "250ms"
SERVER_METRICS_STALENESS = "1s"

# Resources per container, as ResourceQuota counts them (so tenant quotas count EPP pods; the
# injected sidecar adds MESH_PROXY_RESOURCES, see pod_annotations). Sized from LR
# docs/operations.md at v0.10.0 for one model version (a few requests per second, tens of
# pods), far below the chart's 8 CPU/8Gi EPP and 4 CPU/8Gi proxy:
# - EPP: 0.5-1 core per req/s of 100k-token agentic load and idle CPU growing with pods (7.5
#   cores at 100 pods); 0.26-0.65 GiB peak at 5 req/s over 100 pods, 4-6 GiB at 50-100 req/s.
#   1 core and 2Gi requested, CPU unbounded (no CPU limit, the platform's rule) and 4Gi of memory,
#   of which at most half may be queued request bodies (flow control's maxBytes, checked below).
# - Envoy: 1.2-2 cores below 10 req/s, peak memory 1.3-1.4 GiB whatever the load, "allocate at
#   least 2 GiB": 1 core and 1Gi requested, a 2Gi limit. Its workers are fixed at 2
#   (--concurrency) rather than the chart's --cpuset-threads, which without a CPU limit starts one
#   per node core.
EPP_POD_RESOURCES: dict[str, dict[str, str]] = {
    EPP_CONTAINER: {"requests.cpu": "1", "requests.memory": "2Gi", "limits.memory": "4Gi"},
    PROXY_CONTAINER: {"requests.cpu": "1", "requests.memory": "1Gi", "limits.memory": "2Gi"},
}
PROXY_WORKERS = 2
# Queued request bodies may take at most this share of the EPP's memory limit.
QUEUE_MEMORY_SHARE = Decimal("0.5")

# --- upstream tables ------------------------------------------------------------------------
# Every EPP flag we pass, with where v0.10.0 defines it (the tests hold the container's args to
# this table, and, when the mirror is present, the table to the Go source).
EPP_FLAGS: dict[str, str] = {
    "pool-name": "pkg/epp/server/options.go",
    "pool-namespace": "pkg/epp/server/options.go",
    "pool-group": "pkg/epp/server/options.go",
    "config-file": "pkg/epp/server/options.go",
    "grpc-health-port": "pkg/epp/server/options.go",
    "ha-enable-leader-election": "pkg/epp/server/options.go",
    "metrics-endpoint-auth": "pkg/epp/server/options.go",
    "health-checking": "pkg/epp/server/options.go",
    "tracing": "pkg/epp/server/options.go",
    "enable-pprof": "pkg/epp/server/options.go",
    "drain-timeout": "pkg/epp/server/options.go",
    # controller-runtime's zap flags, bound by LR pkg/common/observability/logging/options.go.
    "zap-encoder": "pkg/common/observability/logging/options.go",
}

CONFIG_TYPES = "apix/config/v1alpha1/endpointpickerconfig_types.go"
# The EndpointPickerConfig fields we may use, per place in the document: (Go type, file at
# v0.10.0, json names). The tests check the config uses nothing else and, with the mirror, that
# each Go type has exactly these json tags.
EPP_CONFIG_FIELDS: dict[str, tuple[str, str, frozenset[str]]] = {
    "": (
        "EndpointPickerConfig",
        CONFIG_TYPES,
        frozenset(
            {
                "apiVersion",
                "kind",
                "featureGates",
                "plugins",
                "schedulingProfiles",
                "dataLayer",
                "flowControl",
                "requestHandler",
                "saturationDetector",
                "parser",
            }
        ),
    ),
    "plugins[]": ("PluginSpec", CONFIG_TYPES, frozenset({"name", "type", "parameters"})),
    "schedulingProfiles[]": ("SchedulingProfile", CONFIG_TYPES, frozenset({"name", "plugins"})),
    "schedulingProfiles[].plugins[]": ("SchedulingPlugin", CONFIG_TYPES, frozenset({"pluginRef", "weight"})),
    "flowControl": (
        "FlowControlConfig",
        CONFIG_TYPES,
        frozenset(
            {
                "maxBytes",
                "maxRequests",
                "defaultRequestTTL",
                "defaultPriorityBand",
                "defaultNegativePriorityBand",
                "priorityBands",
                "usageLimitPolicyPluginRef",
                "saturationDetector",
                "enableEviction",
            }
        ),
    ),
    "flowControl.saturationDetector": ("SaturationDetectorConfig", CONFIG_TYPES, frozenset({"pluginRef"})),
}
_BAND_FIELDS = (
    "PriorityBandConfig",
    CONFIG_TYPES,
    frozenset({"priority", "maxBytes", "maxRequests", "fairnessPolicyRef", "orderingPolicyRef"}),
)
for _where in ("flowControl.priorityBands[]", "flowControl.defaultPriorityBand", "flowControl.defaultNegativePriorityBand"):
    EPP_CONFIG_FIELDS[_where] = _BAND_FIELDS

# Plugin types we configure: the files at v0.10.0 that name the type and define its parameters,
# and the parameters' json names.
EPP_PLUGINS: dict[str, tuple[tuple[str, ...], frozenset[str]]] = {
    "queue-scorer": (("pkg/epp/framework/plugins/scheduling/scorer/queuedepth/queue.go",), frozenset()),
    "kv-cache-utilization-scorer": (
        ("pkg/epp/framework/plugins/scheduling/scorer/kvcacheutilization/kvcache_utilization.go",),
        frozenset(),
    ),
    "prefix-cache-scorer": (("pkg/epp/framework/plugins/scheduling/scorer/prefix/plugin.go",), frozenset()),
    "lora-affinity-scorer": (("pkg/epp/framework/plugins/scheduling/scorer/loraaffinity/lora_affinity.go",), frozenset()),
    "metrics-data-source": (
        ("pkg/epp/framework/plugins/datalayer/source/metrics/datasource.go",),
        frozenset({"scheme", "path", "port", "interval"}),
    ),
    "core-metrics-extractor": (("pkg/epp/framework/plugins/datalayer/extractor/metrics/factories.go",), frozenset()),
    "utilization-detector": (
        (
            "pkg/epp/framework/plugins/flowcontrol/saturationdetector/utilization/detector.go",
            "pkg/epp/framework/plugins/flowcontrol/saturationdetector/utilization/config.go",
        ),
        frozenset({"queueDepthThreshold", "kvCacheUtilThreshold", "metricsStalenessThreshold", "headroom"}),
    ),
}
# The feature gate that turns flow control on (LR pkg/epp/flowcontrol/config.go FeatureGate;
# registered off by default in cmd/epp/runner/runner.go).
FLOW_CONTROL_GATE = "flowControl"
SATURATION_DETECTOR = "utilization-detector"
# What the `core-metrics-extractor`, configured without parameters, reads from each vLLM server:
# the series of llm-d-router v0.10.0's default engine, "vllm"
# (pkg/epp/framework/plugins/datalayer/extractor/metrics/factories.go defaultEngineConfigs), each
# with the labels it reads (the info gauges': extractor.go LoraInfo*MetricName,
# CacheConfig*MetricName). tests/test_vllm_metrics.py holds them to vLLM 0.33.0's source release.
PICKER_VLLM_SERIES: dict[str, frozenset[str]] = {
    "vllm:num_requests_waiting": frozenset(),
    "vllm:num_requests_running": frozenset(),
    "vllm:kv_cache_usage_perc": frozenset(),
    "vllm:lora_requests_info": frozenset({"running_lora_adapters", "waiting_lora_adapters", "max_lora"}),
    "vllm:cache_config_info": frozenset({"block_size", "num_gpu_blocks"}),
}
# The chart's default scheduling profile: queue 2, KV cache 2, prefix cache 3 (routerlib _config.yaml).
SCORER_WEIGHTS = (("queue-scorer", 2), ("kv-cache-utilization-scorer", 2), ("prefix-cache-scorer", 3))
# For servers with LoRA adapters: prefer a replica where the request's adapter is already active,
# then one with a free slot (pkg/epp/framework/plugins/scheduling/scorer/loraaffinity/README.md at
# v0.10.0: 1.0 active, 0.8 room to load, 0.6 waiting, 0 full), from vLLM's `vllm:lora_requests_info`
# that the core metrics extractor reads for vLLM by default (extractor/metrics/factories.go
# defaultEngineConfigs). vLLM 0.33.0 defines that gauge only for a server with LoRA enabled
# (vllm/v1/metrics/loggers.py PrometheusStatLogger, line 1104 of its source release; labels
# max_lora, waiting_lora_adapters, running_lora_adapters: tests/test_vllm_metrics.py). The chart
# configures no weight for it; 1, as the scorer's README and the router's integration test configs
# (test/integration/epp/testdata/default-config.yaml) use it.
LORA_AFFINITY_SCORER = ("lora-affinity-scorer", 1)


@dataclass(frozen=True)
class PickerBand:
    tier: str  # premium | standard | batch
    priority: int  # EPP priority: higher is served first; negative = sheddable (llm-d: IsSheddable p < 0)
    max_requests: int  # per-band queued requests (PriorityBandConfig.maxRequests)
    max_bytes: str  # per-band queued bytes, a Kubernetes quantity such as "256Mi" (PriorityBandConfig.maxBytes)
    # The longest a request of this tier waits for the EPP to pick a server (the tier's
    # queueTimeout): timed by the proxy per tier (`picker_routes`), since the EPP has one TTL.
    queue_seconds: int


@dataclass(frozen=True)
class EndpointPickerPlan:
    name: str  # the model version's server name; EPP objects are f"{name}-epp", the InferencePool `name`
    namespace: str  # tenant namespace (the model servers' namespace)
    server_labels: dict[str, str]  # labels selecting this version's vLLM pods (network rules; the pool's by default)
    # The FQDN of a Service on target_port over those pods (the version's own, e.g.
    # "llama-70b-v1.serving.svc.cluster.local"): the EPP pod's sidecar reaches the pods through it.
    server_host: str
    # The port the picked pod is dialled on: vLLM's (8000), or Knative queue-proxy's (8012).
    target_port: int
    replicas: int  # EPP pods, >= 1; 2+ run active-active (leader election off)
    bands: tuple[PickerBand, ...]  # one per tier the server takes
    request_timeout_seconds: int  # the longest a request may take end to end
    labels: dict[str, str]  # standard labels to put on every object
    # Where the pods run: the EKS system node group's labels; empty on a cluster the platform
    # does not build (its scheduler places them).
    node_selector: dict[str, str]
    # Whether the servers load LoRA adapters: then the picker scores adapter affinity too.
    lora_affinity: bool = False
    # What the InferencePool selects, where narrower than server_labels: a Knative version's
    # current revision (its older revisions' pods carry the same server labels until Knative
    # scales them away, and must not be picked). None: server_labels.
    pool_labels: dict[str, str] | None = None


# --- names ----------------------------------------------------------------------------------


# Each rule takes the version's server name, so routes (which know a model and a version, not
# the picker's plan) and the picker's own objects name things the same way.


def epp_name_of(server: str) -> str:
    return f"{server}-epp"


def epp_host_of(server: str, namespace: str) -> str:
    return f"{epp_name_of(server)}.{namespace}.svc.cluster.local"


def objective_of(server: str, tier: str) -> str:
    """InferenceObjectives are looked up by name alone in the namespace (LR
    pkg/epp/datastore/datastore.go), so each version's are prefixed with its pool's name."""
    return f"{server}-{tier}"


def epp_selector_of(server: str) -> dict[str, str]:
    """The labels on EPP pods (NetworkPolicy, PDB, PodMonitor, Service, the gateway's subsets)."""
    return {SELECTOR_LABEL: epp_name_of(server)}


def epp_name(plan: EndpointPickerPlan) -> str:
    return epp_name_of(plan.name)


def proxy_config_map_name(plan: EndpointPickerPlan) -> str:
    # The chart names it `envoy` whatever the release (SA presets.envoy.configMap.name), so two
    # versions in one namespace would collide: ours is per version.
    return f"{epp_name(plan)}-envoy"


def objective_name(plan: EndpointPickerPlan, tier: str) -> str:
    return objective_of(plan.name, tier)


def epp_selector(plan: EndpointPickerPlan) -> dict[str, str]:
    return epp_selector_of(plan.name)


def queue_ttl_seconds(plan: EndpointPickerPlan) -> int:
    """flowControl.defaultRequestTTL, one per EPP at v0.10.0 (LR pkg/epp/requestcontrol/admission.go:
    a request's InitialEffectiveTTL is always 0): the longest tier's bound, so the EPP never drops a
    request its tier would still let wait; the proxy times each tier's own, shorter bound."""
    return max(band.queue_seconds for band in plan.bands)


def route_timeout_seconds(plan: EndpointPickerPlan) -> int:
    """Envoy's route timeout: the queue wait plus the longest request."""
    return plan.request_timeout_seconds + queue_ttl_seconds(plan)


def proxy_pre_stop_seconds(plan: EndpointPickerPlan) -> int:
    """Envoy exits at once on SIGTERM, so it sleeps until the last request it may still have
    accepted (up to the EPP's drain window after deletion) has run its full route timeout."""
    return DRAIN_SECONDS + route_timeout_seconds(plan)


def termination_grace_seconds(plan: EndpointPickerPlan) -> int:
    # The chart fixes 130 s (routerlib _deployment.yaml); ours covers the preStop sleep.
    return proxy_pre_stop_seconds(plan) + GRACE_MARGIN_SECONDS


# --- validation -----------------------------------------------------------------------------


def _bytes(quantity: str) -> Decimal:
    return parse_quantity(quantity)


def _quantity_text(amount: Decimal) -> str:
    for suffix, factor in (("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10)):
        if amount >= factor and amount % factor == 0:
            return f"{int(amount // factor)}{suffix}"
    return str(int(amount))


def check_plan(plan: EndpointPickerPlan) -> None:
    """Refuse a plan the EPP or the API server would not take, naming the input."""
    if not plan.name or len(plan.name) > MAX_NAME_LENGTH:
        raise ValueError(f"name {plan.name!r}: 1 to {MAX_NAME_LENGTH} characters (EPP objects are named <name>-epp)")
    if plan.replicas < 1:
        raise ValueError(f"replicas {plan.replicas}: at least 1")
    if not plan.server_labels:
        raise ValueError("server_labels: the InferencePool needs a selector")
    if not 1 <= plan.target_port <= 65535:
        raise ValueError(f"target_port {plan.target_port}: not a port")
    service, _, domain = plan.server_host.partition(".")
    if not service or domain != f"{plan.namespace}.svc.cluster.local":
        # A Service selects pods of its own namespace only, and the DestinationRule on it is
        # seen in the EPP's namespace only (exportTo ".").
        raise ValueError(f"server_host {plan.server_host!r}: must be <service>.{plan.namespace}.svc.cluster.local")
    if plan.request_timeout_seconds < 1:
        raise ValueError(f"request_timeout_seconds {plan.request_timeout_seconds}: at least 1")
    if not plan.bands:
        raise ValueError("bands: at least one")
    tiers = [band.tier for band in plan.bands]
    priorities = [band.priority for band in plan.bands]
    for band in plan.bands:
        if band.tier not in TIERS:
            raise ValueError(f"bands: tier {band.tier!r} is not one of {', '.join(TIERS)}")
        if band.max_requests < 1:
            # "0" means the system default (5000), never zero (LR PriorityBandConfig.MaxRequests).
            raise ValueError(f"bands[{band.tier}].max_requests {band.max_requests}: at least 1")
        if _bytes(band.max_bytes) <= 0:
            raise ValueError(f"bands[{band.tier}].max_bytes {band.max_bytes!r}: more than 0")
        if band.queue_seconds < 1:
            # The EPP's TTL is the longest band's, and "0s" would disable it.
            raise ValueError(f"bands[{band.tier}].queue_seconds {band.queue_seconds}: at least 1")
    if len(set(tiers)) != len(tiers):
        raise ValueError(f"bands: tiers {tiers} repeat")
    if len(set(priorities)) != len(priorities):
        raise ValueError(f"bands: priorities {priorities} repeat (one band per priority)")
    by_tier = {band.tier: band.priority for band in plan.bands}
    ordered = [by_tier[tier] for tier in TIERS if tier in by_tier]
    if ordered != sorted(ordered, reverse=True):
        raise ValueError(f"bands: priorities {by_tier} must fall from premium to batch (higher is served first)")
    ceiling = _bytes(EPP_POD_RESOURCES[EPP_CONTAINER]["limits.memory"]) * QUEUE_MEMORY_SHARE
    if total_queue_bytes(plan) > ceiling:
        raise ValueError(
            f"bands: {_quantity_text(total_queue_bytes(plan))} of queued bytes in all; at most {_quantity_text(ceiling)}, "
            "half the EPP's memory limit (LR docs/operations.md: keep flow control's maxBytes under it)"
        )


def total_queue_bytes(plan: EndpointPickerPlan) -> Decimal:
    return sum((_bytes(band.max_bytes) for band in plan.bands), Decimal(0))


def sorted_bands(plan: EndpointPickerPlan) -> list[PickerBand]:
    """Highest priority first."""
    return sorted(plan.bands, key=lambda band: band.priority, reverse=True)


# --- labels and metadata --------------------------------------------------------------------


def _object_labels(plan: EndpointPickerPlan) -> dict[str, str]:
    return {**plan.labels, LABEL_NAME: epp_name(plan), LABEL_COMPONENT: COMPONENT}


def _pod_labels(plan: EndpointPickerPlan) -> dict[str, str]:
    """The standard labels, less any key the servers are selected by: an EPP pod must never
    be picked by the version's Service, DestinationRule subset, InferencePool or PDB."""
    kept = {k: v for k, v in _object_labels(plan).items() if k not in plan.server_labels}
    return {**kept, **epp_selector(plan), MODE_LABEL[0]: MODE_LABEL[1]}


def _metadata(plan: EndpointPickerPlan, name: str) -> dict[str, Any]:
    return {"name": name, "namespace": plan.namespace, "labels": _object_labels(plan)}


# --- the EPP's own configuration ------------------------------------------------------------


def _band(priority: int, band: PickerBand) -> dict[str, Any]:
    # Quantities as strings: resource.Quantity (PriorityBandConfig.maxBytes/maxRequests).
    return {"priority": priority, "maxBytes": band.max_bytes, "maxRequests": str(band.max_requests)}


def endpoint_picker_config(plan: EndpointPickerPlan) -> dict[str, Any]:
    """The EndpointPickerConfig (LR apix/config/v1alpha1, group llm-d.ai): the chart's default
    plugins and weights (routerlib _config.yaml default-plugins.yaml), plus flow control."""
    check_plan(plan)
    bands = sorted_bands(plan)
    smallest = min(plan.bands, key=lambda band: (_bytes(band.max_bytes), band.max_requests))
    flow_control: dict[str, Any] = {
        # Global caps: the sums of the bands, so all queues together stay under the memory budget.
        "maxBytes": _quantity_text(total_queue_bytes(plan)),
        "maxRequests": str(sum(band.max_requests for band in plan.bands)),
        "defaultRequestTTL": f"{queue_ttl_seconds(plan)}s",
        "saturationDetector": {"pluginRef": SATURATION_DETECTOR},
        "priorityBands": [_band(band.priority, band) for band in bands],
        # A request with no objective, or one we did not declare, has priority 0 (LR
        # pkg/epp/requestcontrol/director.go): it gets the smallest band's caps, not the system
        # default of 1G and 5000 requests (LR pkg/epp/flowcontrol/registry/config.go).
        "defaultPriorityBand": _band(0, smallest),
    }
    negative = [band for band in plan.bands if band.priority < 0]
    if negative:
        # Any other negative priority is sheddable too: it gets the lowest band's caps.
        lowest = min(negative, key=lambda band: band.priority)
        flow_control["defaultNegativePriorityBand"] = _band(lowest.priority, lowest)
        if len(negative) < len(plan.bands):
            # Shedding is more than a lower band: when higher-priority requests are held by
            # saturation, the EPP ends sheddable (priority < 0) requests already on a server to
            # make room (apix/config/v1alpha1 endpointpickerconfig_types.go EnableEviction;
            # pkg/epp/flowcontrol/eviction), answered with x-llm-d-request-dropped-reason
            # `evicted-*` (pkg/common/error/error.go), which the gateway answers 503 with
            # Retry-After. Off by default upstream; meaningless when every band is sheddable.
            flow_control["enableEviction"] = True
    return {
        "apiVersion": "llm-d.ai/v1alpha1",
        "kind": "EndpointPickerConfig",
        "featureGates": [FLOW_CONTROL_GATE],
        "plugins": [
            {"type": "queue-scorer"},
            {"type": "kv-cache-utilization-scorer"},
            {"type": "prefix-cache-scorer"},
            *([{"type": LORA_AFFINITY_SCORER[0]}] if plan.lora_affinity else []),
            # vLLM's metrics through each server's sidecar (MESH_STATUS_PORT), plain HTTP there: the
            # chart's podIP:8000/metrics is the vLLM port, which takes mTLS only. `port` overrides
            # the pool's target port for every endpoint (datasource.go; one target port per pool).
            {
                "type": "metrics-data-source",
                "parameters": {
                    "scheme": "http",
                    "path": MESH_METRICS_PATH,
                    "port": MESH_STATUS_PORT,
                    "interval": SERVER_METRICS_INTERVAL,
                },
            },
            {"type": "core-metrics-extractor"},
            # Saturation: the detector's default thresholds (config.go), stated; staleness to match
            # the scrape interval (see SERVER_METRICS_STALENESS).
            {
                "type": SATURATION_DETECTOR,
                "parameters": {
                    "queueDepthThreshold": 5,
                    "kvCacheUtilThreshold": 0.8,
                    "metricsStalenessThreshold": SERVER_METRICS_STALENESS,
                },
            },
        ],
        "schedulingProfiles": [
            {
                "name": "default",
                "plugins": [
                    {"pluginRef": ref, "weight": weight}
                    for ref, weight in (*SCORER_WEIGHTS, *((LORA_AFFINITY_SCORER,) if plan.lora_affinity else ()))
                ],
            }
        ],
        "flowControl": flow_control,
    }


# --- Envoy ----------------------------------------------------------------------------------

_HCM = "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager"
_ROUTER: dict[str, Any] = {
    "name": "envoy.filters.http.router",
    "typed_config": {"@type": "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"},
}
_HTTP_OPTIONS = "envoy.extensions.upstreams.http.v3.HttpProtocolOptions"
_ACCESS_LOG_FORMAT = (
    '{"start_time":"%START_TIME%","method":"%REQ(:METHOD)%","path":"%REQ(X-ENVOY-ORIGINAL-PATH?:PATH)%",'
    '"status":"%RESPONSE_CODE%","flags":"%RESPONSE_FLAGS%","details":"%RESPONSE_CODE_DETAILS%",'
    '"upstream":"%UPSTREAM_HOST%","duration_ms":"%DURATION%","request_id":"%REQ(X-REQUEST-ID)%"}\n'
)


def _address(host: str, port: int) -> dict[str, Any]:
    return {"socket_address": {"address": host, "port_value": port}}


def _static_cluster(name: str, host: str, port: int) -> dict[str, Any]:
    return {"cluster_name": name, "endpoints": [{"lb_endpoints": [{"endpoint": {"address": _address(host, port)}}]}]}


# The dropped reasons of the proxy's own refusals (the EPP's are in pkg/common/error/error.go): a
# request whose picker could not be asked, and one that waited its tier's whole bound.
PICKER_UNAVAILABLE = "picker-unavailable"
QUEUE_BOUND_EXCEEDED = "queue-bound-exceeded"


def queued_idle_timeout(band: PickerBand) -> str:
    """The idle timeout of a tier's `queued` route: half the tier's bound. While the EPP holds a
    request nothing moves on its stream. When the idle timer fires, Envoy's 408 goes first through
    ext_proc (FULL_DUPLEX_STREAMED, so no message timer) to the EPP, which does not read its stream
    while it holds the request (LR pkg/epp/handlers/server.go handles one message at a time, and
    HandleRequest blocks in flow control); the timer runs once more and the reply then goes to the
    client directly. So a request still unpicked at half its bound is refused (a later pick gets
    the refusal at once, no server sees it), and the client has it by the whole bound, as the
    real-Envoy tests measure with a stand-in that, like the EPP, holds its stream (tests/
    test_picker_proxy_in_envoy.py). An EPP that did read it would only refuse sooner."""
    return f"{band.queue_seconds / 2:g}s"


def picker_routes(plan: EndpointPickerPlan) -> list[dict[str, Any]]:
    """The proxy's routes, first match wins. A request is routed on arrival, by the objective
    header the gateway's route set, to its tier's `queued` route: that route only times the wait
    for the EPP (its idle timeout, `queued_idle_timeout`), so a request held longer than its tier
    allows is refused with the tier's Retry-After (`proxy_replies`), each tier after its own bound
    though the EPP has one TTL. The EPP names the pod in DESTINATION_HEADER and has the route
    chosen again (LR pkg/epp/handlers/request.go, ClearRouteCache), so a picked request takes
    `picked`, with the full route timeout. A request the EPP refuses or cannot take never reaches
    the router: the EPP answers it itself, and a failed EPP is answered by the proxy. No client
    header selects a route: the gateway strips the EPP's headers and the proxy's first filter
    DESTINATION_HEADER, before the route is chosen, and the gateway sets the objective header per
    tier (a request with an objective no tier of this version has, which the gateway never sends,
    would wait in the EPP's default band, bounded by its TTL alone)."""
    route_timeout = f"{route_timeout_seconds(plan)}s"

    def forward(idle_timeout: str) -> dict[str, Any]:
        return {
            "cluster": "original_destination_cluster",
            "host_rewrite_literal": plan.server_host,
            "timeout": route_timeout,
            "idle_timeout": idle_timeout,
        }

    picked = {"prefix": "/", "headers": [{"name": DESTINATION_HEADER, "present_match": True}]}
    routes: list[dict[str, Any]] = [{"name": "picked", "match": picked, "route": forward(route_timeout)}]
    for band in sorted_bands(plan):
        # A route action for its idle timeout. Were the EPP to let a request on without naming a
        # pod (v0.10.0 does not), the ORIGINAL_DST cluster would have no host for it (Envoy
        # original_dst_cluster.cc falls back only to a restored local address, which this
        # listener never has): 503 no healthy upstream, never an unpicked forward.
        objective = {"name": OBJECTIVE_HEADER, "string_match": {"exact": objective_of(plan.name, band.tier)}}
        routes.append(
            {
                "name": f"{band.tier}-queued",
                "match": {"prefix": "/", "headers": [objective]},
                "route": forward(queued_idle_timeout(band)),
            }
        )
    longest = queue_ttl_seconds(plan)
    routes.append(
        {
            "name": "unknown-objective",
            "match": {"prefix": "/"},
            "direct_response": {"status": 503, "body": {"inline_string": "no such tier on this version; retry\n"}},
            "response_headers_to_add": [_header("retry-after", str(longest)), _header(DROPPED_REASON_HEADER, PICKER_UNAVAILABLE)],
        }
    )
    return routes


def _header(key: str, value: str) -> dict[str, Any]:
    return {"header": {"key": key, "value": value}, "append_action": "OVERWRITE_IF_EXISTS_OR_ADD"}


# What the proxy answers for every request the picker path refuses (the EPP's own code for
# backpressure, pkg/common/error/error.go): always with DROPPED_REASON_HEADER, which the gateway
# filter answers as 503 with the tier's Retry-After. The servers never answer 429 (vLLM's
# OpenAI server has no such answer), so the picker pods' sidecar metrics count the picker
# path's refusals apart from the answers of the servers behind it (platform_tools/canary.py).
REFUSED = 429


def proxy_replies(plan: EndpointPickerPlan) -> dict[str, Any]:
    """The proxy's answers to the requests the picker path refuses, each REFUSED with a dropped
    reason, per tier with its Retry-After:
    - a request still unpicked when its `queued` route's idle timer ends it (Envoy's 408, response
      code details `stream_idle_timeout`, no destination yet): QUEUE_BOUND_EXCEEDED. A picked
      request's idle timeout is the route timeout's, and stays a 408.
    - a request whose EPP could not be asked or failed before it named a pod (Envoy's ext_proc
      answers 500, details `ext_proc_error_*`): PICKER_UNAVAILABLE. In FULL_DUPLEX_STREAMED mode
      the body has gone to the EPP, so Envoy 1.38 fails the request whatever failure_mode_allow
      says (measured: tests/test_picker_proxy_in_envoy.py). One the EPP fails after naming its pod
      stays a 500: the server may have taken it, so a retry is not the client's to make.
    - the EPP's own 503 refusals (no endpoints), and the proxy's route for an unknown objective:
      REFUSED too, their reason and Retry-After kept."""

    def refusal(expression: str, headers: list[dict[str, Any]], text: str | None) -> dict[str, Any]:
        mapper: dict[str, Any] = {
            "filter": {
                "extension_filter": {
                    "name": "envoy.access_loggers.extension_filters.cel",
                    "typed_config": {
                        "@type": "type.googleapis.com/envoy.extensions.access_loggers.filters.cel.v3.ExpressionFilter",
                        "expression": expression,
                    },
                }
            },
            "status_code": REFUSED,
        }
        if headers:
            mapper["headers_to_add"] = headers
        if text is not None:
            mapper["body"] = {"inline_string": f"{text}; retry\n"}
        return mapper

    def of_tier(band: PickerBand, condition: str, reason: str, text: str) -> dict[str, Any]:
        expression = f"{condition} && request.headers['{OBJECTIVE_HEADER}'] == '{objective_of(plan.name, band.tier)}'"
        headers = [_header("retry-after", str(band.queue_seconds)), _header(DROPPED_REASON_HEADER, reason)]
        return refusal(expression, headers, text)

    unpicked = f"!('{DESTINATION_HEADER}' in request.headers)"
    waited = f"response.code_details == 'stream_idle_timeout' && {unpicked}"
    failed = f"response.code_details.startsWith('ext_proc_error') && {unpicked}"
    return {
        "mappers": [
            *(
                of_tier(band, waited, QUEUE_BOUND_EXCEEDED, f"queued longer than the {band.tier} tier's {band.queue_seconds} s")
                for band in sorted_bands(plan)
            ),
            *(of_tier(band, failed, PICKER_UNAVAILABLE, "endpoint picker unavailable") for band in sorted_bands(plan)),
            refusal(f"response.code == 503 && '{DROPPED_REASON_HEADER}' in response.headers", [], None),
        ]
    }


# The proxy's first filter: a client's DESTINATION_HEADER is removed and the route chosen again
# without it (Envoy chooses a request's route before its filters run: a forged header would
# otherwise have it skip its tier's wait). Headers only, so it holds no body.
_ARRIVAL_FILTER = f"""function envoy_on_request(handle)
  if handle:headers():get("{DESTINATION_HEADER}") ~= nil then
    handle:headers():remove("{DESTINATION_HEADER}")
    handle:clearRouteCache()
  end
end
"""


def proxy_config(plan: EndpointPickerPlan) -> dict[str, Any]:
    """Envoy's bootstrap: the chart's standalone Envoy preset (SA presets.envoy.configMap.data
    envoy.yaml, sidecar mode), with these changes:
    - route timeout = queue TTL + request timeout (chart 86400 s); a stream may be silent that
      long (queued, then prefill), so the route's idle timeout is the same;
    - each tier's wait for the EPP is bounded by its own queueTimeout (`picker_routes`, the
      `queued` routes; `proxy_replies`): refused with the tier's Retry-After;
    - an EPP that cannot be asked fails the request, refused with the tier's Retry-After
      (`proxy_replies`; the chart lets it on with failure_mode_allow, but with the body streamed
      to the EPP Envoy 1.38 fails it all the same, with 500);
    - a client's `x-gateway-destination-endpoint` is removed, and the route chosen again, before
      ext_proc, so only the EPP names the pod Envoy dials (the gateway strips it too);
    - the Host is rewritten to the servers' Service (`server_host`): the pod's sidecar routes
      Envoy's connection to podIP:<port> by Host (IS pilot/pkg/networking/core/httproute.go, the
      0.0.0.0_<port> route's virtual hosts), and any other Host falls to its catch-all
      PassthroughCluster, plaintext, which the servers' STRICT mTLS refuses;
    - connect timeouts of seconds, not the chart's 1000 s and 86400 s; vLLM connections idle out
      before uvicorn's keep-alive closes them; IPv4 only (no `::` listeners: the cluster is
      IPv4, and binding `::` fails where a pod has IPv6 disabled)."""
    ready_listener = {
        "name": f"envoy-proxy-ready-0.0.0.0-{PROXY_READY_PORT}",
        "address": _address("0.0.0.0", PROXY_READY_PORT),
        "filter_chains": [
            {
                "filters": [
                    {
                        "name": "envoy.filters.network.http_connection_manager",
                        "typed_config": {
                            "@type": _HCM,
                            "stat_prefix": "envoy-ready-http",
                            "route_config": {
                                "name": "local_route",
                                "virtual_hosts": [
                                    {
                                        "name": "prometheus_stats",
                                        "domains": ["*"],
                                        "routes": [
                                            {"match": {"prefix": "/stats/prometheus"}, "route": {"cluster": "prometheus_stats"}}
                                        ],
                                    }
                                ],
                            },
                            "http_filters": [
                                {
                                    "name": "envoy.filters.http.health_check",
                                    "typed_config": {
                                        "@type": "type.googleapis.com/envoy.extensions.filters.http.health_check.v3.HealthCheck",
                                        "pass_through_mode": False,
                                        "headers": [{"name": ":path", "string_match": {"exact": "/ready"}}],
                                    },
                                },
                                _ROUTER,
                            ],
                        },
                    }
                ]
            }
        ],
    }
    access_log = {
        "name": "envoy.access_loggers.file",
        "typed_config": {
            "@type": "type.googleapis.com/envoy.extensions.access_loggers.file.v3.FileAccessLog",
            "path": "/dev/stdout",
            "log_format": {"text_format_source": {"inline_string": _ACCESS_LOG_FORMAT}},
        },
    }
    model_filters: list[dict[str, Any]] = [
        {
            "name": "envoy.filters.http.lua",
            "typed_config": {
                "@type": "type.googleapis.com/envoy.extensions.filters.http.lua.v3.Lua",
                "default_source_code": {"inline_string": _ARRIVAL_FILTER},
            },
        },
        {
            "name": "envoy.filters.http.ext_proc",
            "typed_config": {
                "@type": "type.googleapis.com/envoy.extensions.filters.http.ext_proc.v3.ExternalProcessor",
                # An EPP that cannot be asked fails the request (refused by proxy_replies):
                # the streamed body has gone to it, so Envoy 1.38 would fail the request even if
                # allowed to go on.
                "failure_mode_allow": False,
                "grpc_service": {
                    "envoy_grpc": {"cluster_name": "ext_proc", "authority": f"localhost:{EPP_GRPC_PORT}"},
                    "timeout": "10s",
                },
                "processing_mode": {
                    "request_header_mode": "SEND",
                    "response_header_mode": "SEND",
                    "request_body_mode": "FULL_DUPLEX_STREAMED",
                    "response_body_mode": "FULL_DUPLEX_STREAMED",
                    "request_trailer_mode": "SEND",
                    "response_trailer_mode": "SEND",
                },
                # No message_timeout: Envoy runs none for FULL_DUPLEX_STREAMED bodies, and it is
                # capped at 1 h, which a long tier timeout would exceed; each tier's `queued`
                # route, the EPP's queue TTL and the route timeout bound a request.
            },
        },
        {"name": _ROUTER["name"], "typed_config": {**_ROUTER["typed_config"], "suppress_envoy_headers": True}},
    ]
    model_listener = {
        "name": "vllm",
        "address": _address("0.0.0.0", EPP_PROXY_PORT),
        "per_connection_buffer_limit_bytes": 32768,
        "filter_chains": [
            {
                "name": "vllm",
                "filters": [
                    {
                        "name": "envoy.filters.network.http_connection_manager",
                        "typed_config": {
                            "@type": _HCM,
                            "stat_prefix": f"http-{EPP_PROXY_PORT}",
                            "route_config": {
                                "name": "vllm",
                                "virtual_hosts": [
                                    {
                                        "name": "vllm-default",
                                        "domains": ["*"],
                                        "routes": picker_routes(plan),
                                    }
                                ],
                            },
                            "http_filters": model_filters,
                            "http2_protocol_options": {
                                "max_concurrent_streams": 100,
                                "initial_stream_window_size": 65536,
                                "initial_connection_window_size": 1048576,
                            },
                            "use_remote_address": True,
                            "normalize_path": True,
                            "merge_slashes": True,
                            "server_header_transformation": "PASS_THROUGH",
                            "common_http_protocol_options": {
                                "headers_with_underscores_action": "REJECT_REQUEST",
                                # A gateway connection with no request on it for 5 minutes is closed.
                                "idle_timeout": "300s",
                            },
                            "request_headers_timeout": "10s",
                            "local_reply_config": proxy_replies(plan),
                            "path_with_escaped_slashes_action": "UNESCAPE_AND_REDIRECT",
                            "access_log": [access_log],
                        },
                    }
                ],
            }
        ],
    }
    original_destination = {
        "name": "original_destination_cluster",
        "type": "ORIGINAL_DST",
        "connect_timeout": "5s",
        "lb_policy": "CLUSTER_PROVIDED",
        "circuit_breakers": {"thresholds": [{"max_connections": 40000, "max_pending_requests": 40000, "max_requests": 40000}]},
        "original_dst_lb_config": {"use_http_header": True, "http_header_name": DESTINATION_HEADER},
        "typed_extension_protocol_options": {
            _HTTP_OPTIONS: {
                "@type": f"type.googleapis.com/{_HTTP_OPTIONS}",
                "common_http_protocol_options": {"idle_timeout": f"{UPSTREAM_IDLE_SECONDS}s"},
                "explicit_http_config": {"http_protocol_options": {}},
            }
        },
    }
    ext_proc = {
        "name": "ext_proc",
        "type": "STATIC",
        "connect_timeout": "5s",
        "lb_policy": "LEAST_REQUEST",
        "circuit_breakers": {
            "thresholds": [{"max_connections": 40000, "max_pending_requests": 40000, "max_requests": 40000, "max_retries": 1024}]
        },
        # The EPP's gRPC health service on 9002 exists only with --health-checking (LR
        # pkg/epp/server/runserver.go), which the EPP container sets.
        "health_checks": [
            {
                "timeout": "2s",
                "interval": "10s",
                "unhealthy_threshold": 3,
                "healthy_threshold": 2,
                "reuse_connection": True,
                "grpc_health_check": {"service_name": "envoy.service.ext_proc.v3.ExternalProcessor"},
                "tls_options": {"alpn_protocols": ["h2"]},
            }
        ],
        # The EPP serves ext_proc over TLS with a self-signed certificate (--secure-serving,
        # default true, options.go); over loopback, unvalidated, as the chart does.
        "transport_socket": {
            "name": "envoy.transport_sockets.tls",
            "typed_config": {
                "@type": "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext",
                "common_tls_context": {},
            },
        },
        "typed_extension_protocol_options": {
            _HTTP_OPTIONS: {
                "@type": f"type.googleapis.com/{_HTTP_OPTIONS}",
                "explicit_http_config": {
                    "http2_protocol_options": {"initial_stream_window_size": 65536, "initial_connection_window_size": 1048576}
                },
            }
        },
        "load_assignment": _static_cluster("ext_proc", "127.0.0.1", EPP_GRPC_PORT),
    }
    return {
        "admin": {
            "address": _address("127.0.0.1", PROXY_ADMIN_PORT),
            "access_log": [
                {
                    "name": "envoy.access_loggers.file",
                    "typed_config": {
                        "@type": "type.googleapis.com/envoy.extensions.access_loggers.file.v3.FileAccessLog",
                        "path": "/dev/null",
                    },
                }
            ],
        },
        "static_resources": {
            "listeners": [ready_listener, model_listener],
            "clusters": [
                {
                    "name": "prometheus_stats",
                    "type": "STATIC",
                    "connect_timeout": "0.250s",
                    "load_assignment": _static_cluster("prometheus_stats", "127.0.0.1", PROXY_ADMIN_PORT),
                },
                original_destination,
                ext_proc,
            ],
        },
    }


# --- Kubernetes objects ---------------------------------------------------------------------


def service_account(plan: EndpointPickerPlan) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": _metadata(plan, epp_name(plan))}


_READ = ["get", "watch", "list"]
# What the EPP reads at v0.10.0, all in its own namespace: pods (routerlib _rbac.yaml `-sa`
# Role), its InferencePool and the InferenceObjectives/InferenceModelRewrites that name it (SA
# templates/rbac.yaml `-non-sa` Role; the caches are LR pkg/epp/server/controller_manager.go).
# Not granted: the legacy inference.networking.x-k8s.io group (the EPP prefers llm-d.ai when
# both exist, controller_config.go, and the platform installs llm-d.ai); leases (leader election
# off); tokenreviews/subjectaccessreviews (metrics auth off). Nothing is written.
EPP_ROLE_RULES: tuple[dict[str, Any], ...] = (
    {"apiGroups": [""], "resources": ["pods"], "verbs": list(_READ)},
    {"apiGroups": [POOL_GROUP], "resources": ["inferencepools"], "verbs": list(_READ)},
    {"apiGroups": [OBJECTIVE_GROUP], "resources": ["inferenceobjectives", "inferencemodelrewrites"], "verbs": list(_READ)},
)


def role(plan: EndpointPickerPlan) -> dict[str, Any]:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": _metadata(plan, epp_name(plan)),
        "rules": json.loads(json.dumps(EPP_ROLE_RULES)),
    }


def role_binding(plan: EndpointPickerPlan) -> dict[str, Any]:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": _metadata(plan, epp_name(plan)),
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": epp_name(plan)},
        "subjects": [{"kind": "ServiceAccount", "name": epp_name(plan), "namespace": plan.namespace}],
    }


def _dump(document: dict[str, Any]) -> str:
    # Through JSON first, so a dict used twice is written twice, never as a YAML anchor.
    return yaml.safe_dump(json.loads(json.dumps(document)), sort_keys=False, default_flow_style=False, width=1000)


def epp_config_map(plan: EndpointPickerPlan) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": _metadata(plan, epp_name(plan)),
        "data": {EPP_CONFIG_FILE: _dump(endpoint_picker_config(plan))},
    }


def proxy_config_map(plan: EndpointPickerPlan) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": _metadata(plan, proxy_config_map_name(plan)),
        "data": {PROXY_CONFIG_FILE: _dump(proxy_config(plan))},
    }


def epp_args(plan: EndpointPickerPlan) -> list[str]:
    """Flags as `--name=value`, each once (see EPP_FLAGS for where each is defined)."""
    flags = {
        # The pool this EPP serves (routerlib _deployment.yaml, inferencePool.create true).
        "pool-name": plan.name,
        "pool-namespace": plan.namespace,
        "pool-group": POOL_GROUP,
        "zap-encoder": "json",
        "config-file": f"{EPP_CONFIG_DIR}/{EPP_CONFIG_FILE}",
        "grpc-health-port": str(EPP_HEALTH_PORT),
        # Active-active: every replica is Ready and serves its own Envoy (LR
        # config/charts/README.md HA section; cmd/epp/runner/health.go without leader election).
        "ha-enable-leader-election": "false",
        # The sidecar's agent fetches localhost:9090/metrics for Prometheus with no token (IS
        # status/server.go handleStats); the chart's --metrics-endpoint-auth=false when
        # monitoring.prometheus.auth.enabled is false.
        "metrics-endpoint-auth": "false",
        # Registers the gRPC health service Envoy's ext_proc cluster checks on 9002.
        "health-checking": "true",
        "tracing": "false",
        # pprof is on by default on the metrics port, which monitoring can reach.
        "enable-pprof": "false",
        "drain-timeout": f"{DRAIN_SECONDS}s",
    }
    return [f"--{name}={value}" for name, value in flags.items()]


def _resources(container: str) -> dict[str, Any]:
    out: dict[str, dict[str, str]] = {}
    for key, value in EPP_POD_RESOURCES[container].items():
        kind, _, resource = key.partition(".")
        out.setdefault(kind, {})[resource] = value
    return out


def _grpc_probe(service: str, **timing: int) -> dict[str, Any]:
    return {"grpc": {"port": EPP_HEALTH_PORT, "service": service}, **timing}


def epp_container(plan: EndpointPickerPlan) -> dict[str, Any]:
    return {
        "name": EPP_CONTAINER,
        "image": ENDPOINT_PICKER.image,
        "imagePullPolicy": "IfNotPresent",
        "args": epp_args(plan),
        "env": [
            {"name": "NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
            {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        ],
        "ports": [
            {"name": "grpc", "containerPort": EPP_GRPC_PORT, "protocol": "TCP"},
            {"name": "grpc-health", "containerPort": EPP_HEALTH_PORT, "protocol": "TCP"},
            {"name": "metrics", "containerPort": EPP_METRICS_PORT, "protocol": "TCP"},
        ],
        # routerlib _deployment.yaml: gRPC probes on the health port. Without leader election
        # every service name has the same answer: the pool synced, plugins ready, not draining.
        # A new pod joins the Service only once its EPP is up (the startup probe, up to 5
        # minutes), and leaves it while its EPP is not ready (the chart's readiness probe,
        # every 2 s): its proxy would refuse every request (proxy_replies), so the gateway
        # sends them to the other replicas; the liveness probe restarts a stuck EPP.
        "startupProbe": _grpc_probe("readiness", periodSeconds=2, failureThreshold=150),
        "readinessProbe": _grpc_probe("readiness", periodSeconds=2),
        "livenessProbe": _grpc_probe("liveness", periodSeconds=10, failureThreshold=3),
        "resources": _resources(EPP_CONTAINER),
        "securityContext": container_security_context(RUN_AS),
        "volumeMounts": [{"name": "plugins-config-volume", "mountPath": EPP_CONFIG_DIR, "readOnly": True}],
    }


def proxy_container(plan: EndpointPickerPlan) -> dict[str, Any]:
    ready = {"path": "/ready", "port": PROXY_READY_PORT, "scheme": "HTTP"}
    return {
        "name": PROXY_CONTAINER,
        "image": ENVOY_PROXY.image,
        "imagePullPolicy": "IfNotPresent",
        "command": ["envoy"],
        # SA presets.envoy.args, with --concurrency for --cpuset-threads (see EPP_POD_RESOURCES).
        "args": [
            "--service-node",
            PROXY_CONTAINER,
            "--log-level",
            "warn",
            "--concurrency",
            str(PROXY_WORKERS),
            "--drain-strategy",
            "immediate",
            "--drain-time-s",
            "60",
            "-c",
            f"{PROXY_CONFIG_DIR}/{PROXY_CONFIG_FILE}",
        ],
        "ports": [
            {"name": f"http-{EPP_PROXY_PORT}", "containerPort": EPP_PROXY_PORT, "protocol": "TCP"},
            {"name": f"metrics-{PROXY_READY_PORT}", "containerPort": PROXY_READY_PORT, "protocol": "TCP"},
        ],
        # SA presets.envoy.readinessProbe; the liveness probe is ours (the chart has none).
        "readinessProbe": {
            "httpGet": ready,
            "periodSeconds": 5,
            "timeoutSeconds": 1,
            "successThreshold": 1,
            "failureThreshold": 1,
        },
        "livenessProbe": {
            "httpGet": dict(ready),
            "initialDelaySeconds": 5,
            "periodSeconds": 10,
            "timeoutSeconds": 1,
            "failureThreshold": 3,
        },
        # Envoy stops at once on SIGTERM and drops its streams (the chart has no preStop), so it
        # keeps serving until its last request is done. The image has no shell: the kubelet's
        # sleep action (Kubernetes 1.30+), not `exec sleep`.
        "lifecycle": {"preStop": {"sleep": {"seconds": proxy_pre_stop_seconds(plan)}}},
        "resources": _resources(PROXY_CONTAINER),
        "securityContext": container_security_context(RUN_AS),
        "volumeMounts": [{"name": "proxy-config", "mountPath": PROXY_CONFIG_DIR, "readOnly": True}],
    }


def _spread(plan: EndpointPickerPlan) -> list[dict[str, Any]]:
    """Replicas on different nodes (required) and, where possible, zones."""
    selector = {"matchLabels": epp_selector(plan)}
    return [
        {
            "maxSkew": 1,
            "topologyKey": key,
            "whenUnsatisfiable": when,
            "labelSelector": json.loads(json.dumps(selector)),
            "matchLabelKeys": ["pod-template-hash"],
        }
        for key, when in (("kubernetes.io/hostname", "DoNotSchedule"), ("topology.kubernetes.io/zone", "ScheduleAnyway"))
    ]


def pod_annotations(plan: EndpointPickerPlan) -> dict[str, str]:
    """What the sidecar the namespace injects needs, as the model servers state it
    (components/specs/pod.py pod_annotations)."""
    return {
        # Istio merges the EPP's own metrics into the sidecar's MESH_STATUS_PORT, where
        # Prometheus (outside the mesh) can scrape them under STRICT mTLS.
        "prometheus.io/scrape": "true",
        "prometheus.io/port": str(EPP_METRICS_PORT),
        "prometheus.io/path": "/metrics",
        # Read by the injector (IS pkg/kube/inject/webhook.go, annotation proxy.istio.io/config):
        # - start the EPP and Envoy only once the sidecar is ready, or their first API and pod
        #   connections fail (mesh-wide already, components/mesh.py istiod_values; stated so
        #   the pod does not depend on it; with native sidecars the kubelet orders them anyway,
        #   injection-template.yaml `$holdProxy`);
        # - on SIGTERM the sidecar drains only its inbound listeners (pkg/envoy/proxy.go Drain,
        #   admin.go `inboundonly`), so Envoy's requests to the servers go on, and exits once no
        #   connection is left (pkg/envoy/agent.go terminate with
        #   EXIT_ON_ZERO_ACTIVE_CONNECTIONS), within the pod's grace period: after Envoy's last
        #   request, however long its preStop keeps it serving.
        # The sidecar's size is stated so quotas count it exactly (components/plan.py counts it
        # per EPP pod).
        **draining_sidecar_annotations(termination_grace_seconds(plan)),
    }


def deployment(plan: EndpointPickerPlan) -> dict[str, Any]:
    pod: dict[str, Any] = {
        "serviceAccountName": epp_name(plan),
        # No PriorityClass: the pods run on the system nodes beside the mesh's control plane,
        # the gateway and the controllers, which run at priority 0; the model's class
        # (inference-production, PreemptLowerPriority) would let a pending picker evict them.
        # The tenant's quotas still count them (its `total` quota, and `unclassified`, which
        # allows no GPU).
        # No GPU: the system node group, where the platform's controllers run (GPU nodes are
        # tainted, and the preview's admission stage places every pod by its nodeSelector).
        **({"nodeSelector": dict(plan.node_selector)} if plan.node_selector else {}),
        "terminationGracePeriodSeconds": termination_grace_seconds(plan),
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": RUN_AS,
            "runAsGroup": RUN_AS,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "containers": [proxy_container(plan), epp_container(plan)],
        "volumes": [
            {"name": "plugins-config-volume", "configMap": {"name": epp_name(plan)}},
            {
                "name": "proxy-config",
                "configMap": {
                    "name": proxy_config_map_name(plan),
                    "items": [{"key": PROXY_CONFIG_FILE, "path": PROXY_CONFIG_FILE}],
                },
            },
        ],
    }
    if plan.replicas > 1:
        pod["topologySpreadConstraints"] = _spread(plan)
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {**_metadata(plan, epp_name(plan)), "labels": {**_object_labels(plan), MODE_LABEL[0]: MODE_LABEL[1]}},
        "spec": {
            "replicas": plan.replicas,
            # The chart uses Recreate for leader election (an old leader must go first). Active-
            # active replicas roll one at a time instead, and a replica may take the whole grace
            # period to drain, which under Recreate would be an outage.
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}},
            "selector": {"matchLabels": epp_selector(plan)},
            "template": {
                "metadata": {"labels": _pod_labels(plan), "annotations": pod_annotations(plan)},
                "spec": pod,
            },
        },
    }


def service(plan: EndpointPickerPlan) -> dict[str, Any]:
    """routerlib _service.yaml plus the standalone chart's `http` port (SA extraServicePorts).
    Behind the sidecar every port takes mTLS only: Prometheus scrapes the merged metrics on the
    pods instead (pod_monitor), and ext_proc is reached over loopback."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _metadata(plan, epp_name(plan)),
        "spec": {
            "type": "ClusterIP",
            "selector": epp_selector(plan),
            "ports": [
                {"name": "grpc-ext-proc", "protocol": "TCP", "port": EPP_GRPC_PORT, "appProtocol": "kubernetes.io/h2c"},
                {"name": "http-metrics", "protocol": "TCP", "port": EPP_METRICS_PORT},
                {"name": "http", "protocol": "TCP", "port": EPP_PROXY_PORT, "targetPort": EPP_PROXY_PORT},
            ],
        },
    }


def pool_selector(plan: EndpointPickerPlan) -> dict[str, str]:
    """The labels of the pods the picker picks from."""
    return dict(plan.pool_labels if plan.pool_labels is not None else plan.server_labels)


def inference_pool(plan: EndpointPickerPlan) -> dict[str, Any]:
    """routerlib _inferencepool.yaml. failureMode FailClose, like our Envoy (the chart: FailOpen);
    it is read by gateways that route to the pool, which ours does not."""
    return {
        "apiVersion": f"{POOL_GROUP}/v1",
        "kind": "InferencePool",
        "metadata": _metadata(plan, plan.name),
        "spec": {
            "targetPorts": [{"number": plan.target_port}],
            "appProtocol": "http",
            "selector": {"matchLabels": pool_selector(plan)},
            "endpointPickerRef": {"name": epp_name(plan), "port": {"number": EPP_GRPC_PORT}, "failureMode": "FailClose"},
        },
    }


def inference_objectives(plan: EndpointPickerPlan) -> list[dict[str, Any]]:
    """routerlib _inferenceobjective.yaml, one per band, highest priority first."""
    return [
        {
            "apiVersion": "llm-d.ai/v1alpha2",
            "kind": "InferenceObjective",
            "metadata": _metadata(plan, objective_name(plan, band.tier)),
            "spec": {"priority": band.priority, "poolRef": {"group": POOL_GROUP, "name": plan.name}},
        }
        for band in sorted_bands(plan)
    ]


def pod_disruption_budget(plan: EndpointPickerPlan) -> dict[str, Any]:
    """One EPP pod away at a time (the chart has no PDB). With one replica a drain takes the
    version's EPP away until it is rescheduled; production runs two or more."""
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": _metadata(plan, epp_name(plan)),
        "spec": {"maxUnavailable": 1, "selector": {"matchLabels": epp_selector(plan)}},
    }


def pod_monitor(plan: EndpointPickerPlan) -> dict[str, Any]:
    """The EPP's metrics (flow control's queue sizes among them) merged into its sidecar's, as
    the Knative backend scrapes its pods (components/backends/knative.py pod_monitor): the
    sidecar's target, moved to the port Istio writes into prometheus.io/port (MESH_STATUS_PORT;
    the sidecar declares only 15090, Envoy's stats alone). The interval is the chart's
    monitoring.interval (routerlib values.yaml)."""
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PodMonitor",
        "metadata": _metadata(plan, epp_name(plan)),
        "spec": {
            "selector": {"matchLabels": epp_selector(plan)},
            "podMetricsEndpoints": [
                {
                    "path": MESH_METRICS_PATH,
                    "interval": "10s",
                    "relabelings": [
                        {
                            "sourceLabels": ["__meta_kubernetes_pod_container_name"],
                            "action": "keep",
                            "regex": ISTIO_PROXY_CONTAINER,
                        },
                        *merged_metrics_relabelings(),
                    ],
                }
            ],
        },
    }


# --- EPP -> servers over mTLS --------------------------------------------------------------


def servers_destination_rule(plan: EndpointPickerPlan) -> dict[str, Any]:
    """For the EPP pods' sidecars only, the servers' Service (`server_host`, where Envoy's
    rewritten Host sends them) becomes:
    - PASSTHROUGH: an ORIGINAL_DST cluster (IS pilot/pkg/networking/core/
      cluster_traffic_policy.go applyLoadBalancer), so each connection goes to the pod IP Envoy
      dialled, the one the EPP picked, not to one the sidecar would balance to;
    - ISTIO_MUTUAL, stated: auto-mTLS on a passthrough cluster guesses plaintext when the
      Service has no endpoints yet (pilot/pkg/model/push_context.go
      BestEffortInferServiceMTLSMode) and ORIGINAL_DST clusters get no per-endpoint TLS match
      (cluster_tls.go applyUpstreamTLSSettings); a stated mode is applied as is, with the
      Service's accounts as the names to verify (cluster_tls.go buildUpstreamTLSSettings).
    workloadSelector keeps it off every other pod, the servers' own and other clients'
    (pilot/pkg/model/sidecar.go DestinationRule); such a rule may only be exported to its own
    namespace (pkg/config/validation/validation.go)."""
    return {
        "apiVersion": "networking.istio.io/v1",
        "kind": "DestinationRule",
        "metadata": _metadata(plan, f"{epp_name(plan)}-to-servers"),
        "spec": {
            "host": plan.server_host,
            "workloadSelector": {"matchLabels": epp_selector(plan)},
            "exportTo": ["."],
            "trafficPolicy": {"loadBalancer": {"simple": "PASSTHROUGH"}, "tls": {"mode": "ISTIO_MUTUAL"}},
        },
    }


def _network_policy(
    plan: EndpointPickerPlan, name: str, pods: dict[str, str], kind: str, rules: list[dict[str, Any]]
) -> dict[str, Any]:
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": _metadata(plan, name),
        "spec": {"podSelector": {"matchLabels": pods}, "policyTypes": [kind], kind.lower(): rules},
    }


def _tcp(*ports: int) -> list[dict[str, Any]]:
    return [{"protocol": "TCP", "port": port} for port in ports]


def network_policies(plan: EndpointPickerPlan) -> list[dict[str, Any]]:
    """On top of the tenant's default deny (tenancy.network_policies): EPP pods take the
    gateway's requests on 8081 and monitoring's scrapes of their sidecars' merged metrics, and
    reach this version's vLLM pods on the target port and their sidecars' metrics (the API server,
    DNS, istiod and HTTPS are already open to every tenant pod); the vLLM pods take both ports
    from EPP pods."""
    epp = epp_selector(plan)
    gateway = {
        "namespaceSelector": {"matchLabels": {NAMESPACE_NAME_LABEL: ISTIO_INGRESS_NAMESPACE}},
        "podSelector": {"matchLabels": dict(GATEWAY_SELECTOR)},
    }
    monitoring = {"namespaceSelector": {"matchLabels": {NAMESPACE_NAME_LABEL: MONITORING_NAMESPACE}}}
    return [
        _network_policy(
            plan,
            f"{epp_name(plan)}-ingress",
            epp,
            "Ingress",
            [{"from": [gateway], "ports": _tcp(EPP_PROXY_PORT)}, {"from": [monitoring], "ports": _tcp(MESH_STATUS_PORT)}],
        ),
        _network_policy(
            plan,
            f"{epp_name(plan)}-to-servers",
            epp,
            "Egress",
            [
                {
                    "to": [{"podSelector": {"matchLabels": dict(plan.server_labels)}}],
                    "ports": _tcp(plan.target_port, MESH_STATUS_PORT),
                }
            ],
        ),
        _network_policy(
            plan,
            f"{epp_name(plan)}-servers-from-epp",
            dict(plan.server_labels),
            "Ingress",
            [{"from": [{"podSelector": {"matchLabels": epp}}], "ports": _tcp(plan.target_port, MESH_STATUS_PORT)}],
        ),
    ]


def endpoint_picker_objects(plan: EndpointPickerPlan) -> list[dict[str, Any]]:
    """Every object, in apply order: identity and config, then the network and mesh rules the
    pods need (the DestinationRule before any request leaves a pod), the pool and objectives
    the EPP waits for, then the pods and what watches them."""
    check_plan(plan)
    return [
        service_account(plan),
        role(plan),
        role_binding(plan),
        epp_config_map(plan),
        proxy_config_map(plan),
        *network_policies(plan),
        servers_destination_rule(plan),
        inference_pool(plan),
        *inference_objectives(plan),
        service(plan),
        deployment(plan),
        pod_disruption_budget(plan),
        pod_monitor(plan),
    ]
