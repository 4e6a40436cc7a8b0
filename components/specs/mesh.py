"""The Istio mesh's values and objects (pure builders): istiod's and the ingress gateway's chart values, the gateway's
NLB annotations, its disruption budget and its Envoy overload bootstrap."""

from __future__ import annotations

import hashlib
import json
from decimal import Decimal
from typing import Any

from platform_config.models import LoadBalancerScheme
from platform_config.quantity import binary_quantity, parse_quantity

from ..constants import GATEWAY_SELECTOR, GATEWAY_SERVICE_ACCOUNT, ISTIO_SYSTEM_NAMESPACE, standard_labels
from .network import ISTIOD_SELECTOR
from .pod_parts import node_spread

# Envoy's overload manager: Istio's bootstrap always declares the
# `global_downstream_max_connections` resource monitor, at 2^31 - 1 connections unless the proxy
# config's `proxyMetadata` names a number (istio/istio 1.30.3 tools/packaging/common/
# envoy_bootstrap.json `overload_manager`, pkg/bootstrap/config.go
# ISTIO_META_GLOBAL_DOWNSTREAM_MAX_CONNECTIONS). Past it a proxy refuses new connections instead
# of accepting them without bound (each active one's buffer is bounded by the gateway's
# EnvoyFilter). Set for every proxy of the mesh (the gateway's chart passes pod annotations, but
# the platform's upstream check does not yet take `podAnnotations` as free-form); a model
# server's sidecar is reached through the gateway pods' connection pools (`traffic.tiers`
# maxRequests per pod and subset), so only a single replica behind a fully scaled gateway could
# meet the cap.
MAX_DOWNSTREAM_CONNECTIONS_PER_PROXY = 8192


def istiod_values(replicas: int, spread: bool = False) -> dict:
    """`replicas`: the fewest istiod pods its autoscaler keeps (the chart's `autoscaleMin`, default
    1; istio 1.30.3 manifests/charts/istio-control/istio-discovery: the HPA's minReplicas, and the
    chart's PodDisruptionBudget keeps one up through a drain). `spread` (production): one pod per
    node, and the disruption budget stated (`topologySpreadConstraints`, `pdb`: keys the chart
    reads, checked by the upstream stage)."""
    placement = {"topologySpreadConstraints": node_spread(ISTIOD_SELECTOR, required=True), "pdb": {"minAvailable": 1}}
    return {
        **(placement if spread else {}),
        "autoscaleMin": replicas,
        "pilot": {"cni": {"enabled": True}},
        "meshConfig": {
            "enablePrometheusMerge": True,
            "defaultConfig": {
                "proxyMetadata": {"ISTIO_META_GLOBAL_DOWNSTREAM_MAX_CONNECTIONS": str(MAX_DOWNSTREAM_CONNECTIONS_PER_PROXY)}
            },
        },
        # Start application containers only once the sidecar is ready (the injection template
        # reads this value: istio 1.30.3 files/injection-template.yaml).
        "global": {"proxy": {"holdApplicationUntilProxyStarts": True}},
    }


def gateway_disruption_budget() -> dict[str, Any]:
    """A drain keeps a gateway pod up. The platform's own object: the gateway chart's
    `podDisruptionBudget` at 1.30.3 is read by its templates but not as a map of the budget's
    fields as far as ../shared/upstream-facts says (charts/gateway/1.30.3.json: neither its keys nor
    free-form), so the preview's upstream stage would refuse `podDisruptionBudget.minAvailable`."""
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {
            "name": GATEWAY_SERVICE_ACCOUNT,
            "namespace": ISTIO_SYSTEM_NAMESPACE,
            "labels": standard_labels(GATEWAY_SERVICE_ACCOUNT, "mesh"),
        },
        "spec": {"minAvailable": 1, "selector": {"matchLabels": dict(GATEWAY_SELECTOR)}},
    }


# The listeners of the chart's Service ports the platform serves (80, 443).
GATEWAY_LISTENERS = ("TCP-80", "TCP-443")


def nlb_annotations(idle_timeout_seconds: int, scheme: LoadBalancerScheme) -> dict[str, str]:
    """An NLB from the AWS Load Balancer Controller (the in-tree provider ignores `external`),
    sending to pod IPs, with every listener's TCP idle timeout raised (default 350 s;
    kubernetes-sigs/aws-load-balancer-controller v3.5.0 docs/guide/service/annotations.md,
    listener-attributes). The scheme is always written: without the annotation the controller
    keeps an existing NLB's scheme (docs/guide/service/nlb.md, "Secure by default")."""
    annotations = {
        "service.beta.kubernetes.io/aws-load-balancer-type": "external",
        "service.beta.kubernetes.io/aws-load-balancer-nlb-target-type": "ip",
        "service.beta.kubernetes.io/aws-load-balancer-scheme": scheme,
    }
    for listener in GATEWAY_LISTENERS:
        annotations[f"service.beta.kubernetes.io/aws-load-balancer-listener-attributes.{listener}"] = (
            f"tcp.idle_timeout.seconds={idle_timeout_seconds}"
        )
    return annotations


# No CPU limit (throttling the gateway adds latency to every request). The chart's default
# limits.cpu (2000m) survives a values map without the key; its resources helper drops a key
# whose value is empty (istio 1.30.3 manifests/charts/gateway/templates/_helpers.tpl,
# "gateway.resources": `if $value`), so "" removes it. The memory limit sizes Envoy's heap
# monitor below.
GATEWAY_RESOURCES = {"requests": {"cpu": "500m", "memory": "512Mi"}, "limits": {"cpu": "", "memory": "1Gi"}}

# --- the gateway's memory overload triggers ---------------------------------------------------
# Istio's bootstrap gives Envoy's overload manager the connection monitor only (see
# MAX_DOWNSTREAM_CONNECTIONS_PER_PROXY), so a gateway pod whose buffered bodies and streams grow
# is OOM-killed with every stream on it instead of shedding load first. pilot-agent starts Envoy
# with the file ISTIO_BOOTSTRAP_OVERRIDE names as `--config-yaml` (istio/istio 1.30.3
# pkg/envoy/proxy.go, `args`), which Envoy merges into Istio's bootstrap proto by MergeFrom:
# repeated fields are appended, so this file's monitor and actions join the connection monitor
# (tools/packaging/common/envoy_bootstrap.json `overload_manager`) rather than replace it.
# The file is read once, when Envoy starts.
#
# Wired through the gateway chart's `env`, `volumes` and `volumeMounts` (read at 1.30.3:
# manifests/charts/gateway/templates/deployment.yaml, the istio-proxy container's `env` range
# and the pod's `volumes`/`volumeMounts`), with the same variable, volume name and mount path
# the injection template adds for the `sidecar.istio.io/bootstrapOverride` pod annotation
# (manifests/charts/istio-control/istio-discovery/files/gateway-injection-template.yaml): the
# annotation would need `podAnnotations`, which the platform's upstream check does not yet take
# as free-form. An EnvoyFilter `applyTo: BOOTSTRAP` is no way either: istiod stopped serving
# bootstrap patches when the agent's bootstrap discovery was removed (istio/istio#48693).
OVERLOAD_BOOTSTRAP_ENV = "ISTIO_BOOTSTRAP_OVERRIDE"
OVERLOAD_BOOTSTRAP_DIR = "/etc/istio/custom-bootstrap"
OVERLOAD_BOOTSTRAP_FILE = "custom_bootstrap.json"
OVERLOAD_BOOTSTRAP_VOLUME = "custom-bootstrap-volume"
FIXED_HEAP_MONITOR = "envoy.resource_monitors.fixed_heap"
# What shares the container's memory limit but is not Envoy's heap: pilot-agent (its GOMEMLIMIT
# is the whole container limit, gateway-injection-template.yaml), Envoy's binary pages and
# thread stacks. The fixed_heap monitor measures tcmalloc's heap in use only (reserved minus
# unmapped and free pages, envoyproxy/envoy source/extensions/resource_monitors/fixed_heap/
# fixed_heap_monitor.cc), so the heap it is held to is the limit less this reserve.
ENVOY_HEAP_RESERVE_BYTES = 256 << 20
# Thresholds as fractions of that heap. First release memory and stop keeping connections
# alive (each drained connection frees its buffers, and the client's next one may land on
# another pod); then refuse new requests with a 503 (Istio's health and metrics
# listeners bypass the overload manager, envoy_bootstrap.json `bypass_overload_manager`, so a
# shedding pod stays Ready and scraped). Between them, reset the streams holding the most
# buffer memory, largest first: the action works on HTTP/2 streams only and needs buffer
# accounting, tracking streams of at least 2^20 bytes (1 MiB) (Envoy docs, configuration/
# operations/overload_manager, "Reset Streams"; Envoy refuses the action without
# `buffer_factory_config`). The four actions and the fixed_heap monitor are in the Envoy that
# Istio 1.30.3 ships (istio/proxy 81864a1, the commit istio.deps pins:
# bazel/extension_config/extensions_build_config.bzl builds envoy.resource_monitors.fixed_heap).
SHRINK_HEAP_AT = 0.90
DISABLE_KEEPALIVE_AT = 0.90
STOP_ACCEPTING_REQUESTS_AT = 0.95
RESET_STREAMS_FROM, RESET_STREAMS_ALL_AT = 0.85, 0.95
TRACK_STREAM_BUFFERS_FROM_POWER_OF_TWO = 20
OVERLOAD_REFRESH_INTERVAL = "0.25s"


def gateway_overload_config_map(memory_limit: str = GATEWAY_RESOURCES["limits"]["memory"]) -> dict[str, Any]:
    """The ConfigMap holding the gateway's bootstrap override: a fixed_heap monitor held to the
    container's memory limit less ENVOY_HEAP_RESERVE_BYTES, and the overload actions it drives.
    Its name carries a hash of the content, so a changed bootstrap rolls the gateway pods
    (Envoy reads it only at start)."""
    limit = parse_quantity(memory_limit)
    heap = int(limit) - ENVOY_HEAP_RESERVE_BYTES
    if limit != int(limit) or heap < ENVOY_HEAP_RESERVE_BYTES:
        raise ValueError(
            f"gateway memory limit {memory_limit!r} leaves Envoy's heap less than the "
            f"{binary_quantity(Decimal(ENVOY_HEAP_RESERVE_BYTES))} kept for the rest of the container"
        )

    def threshold(value: float) -> list[dict[str, Any]]:
        return [{"name": FIXED_HEAP_MONITOR, "threshold": {"value": value}}]

    bootstrap = {
        "overload_manager": {
            "refresh_interval": OVERLOAD_REFRESH_INTERVAL,
            "resource_monitors": [
                {
                    "name": FIXED_HEAP_MONITOR,
                    "typed_config": {
                        "@type": "type.googleapis.com/envoy.extensions.resource_monitors.fixed_heap.v3.FixedHeapConfig",
                        "max_heap_size_bytes": heap,
                    },
                }
            ],
            "buffer_factory_config": {"minimum_account_to_track_power_of_two": TRACK_STREAM_BUFFERS_FROM_POWER_OF_TWO},
            "actions": [
                {"name": "envoy.overload_actions.shrink_heap", "triggers": threshold(SHRINK_HEAP_AT)},
                {"name": "envoy.overload_actions.disable_http_keepalive", "triggers": threshold(DISABLE_KEEPALIVE_AT)},
                {"name": "envoy.overload_actions.stop_accepting_requests", "triggers": threshold(STOP_ACCEPTING_REQUESTS_AT)},
                {
                    "name": "envoy.overload_actions.reset_high_memory_stream",
                    "triggers": [
                        {
                            "name": FIXED_HEAP_MONITOR,
                            "scaled": {"scaling_threshold": RESET_STREAMS_FROM, "saturation_threshold": RESET_STREAMS_ALL_AT},
                        }
                    ],
                },
            ],
        }
    }
    content = json.dumps(bootstrap, indent=2, sort_keys=True) + "\n"
    name = f"{GATEWAY_SERVICE_ACCOUNT}-overload-{hashlib.sha256(content.encode()).hexdigest()[:10]}"
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": ISTIO_SYSTEM_NAMESPACE, "labels": standard_labels(name, "mesh")},
        "data": {OVERLOAD_BOOTSTRAP_FILE: content},
    }


def gateway_values(nlb_idle_timeout_seconds: int | None, scheme: LoadBalancerScheme, spread: bool = False) -> dict:
    """`spread` (production): one gateway pod per node (the chart's `topologySpreadConstraints`);
    its disruption budget is the platform's own (gateway_disruption_budget)."""
    placement = {"topologySpreadConstraints": node_spread(GATEWAY_SELECTOR, required=True)}
    service: dict = {"type": "LoadBalancer"}
    if nlb_idle_timeout_seconds is not None:
        service["annotations"] = nlb_annotations(nlb_idle_timeout_seconds, scheme)
    overload = gateway_overload_config_map()
    return {
        **(placement if spread else {}),
        "labels": {**GATEWAY_SELECTOR, "app": GATEWAY_SERVICE_ACCOUNT},
        "service": service,
        "autoscaling": {"enabled": True, "minReplicas": 2, "maxReplicas": 10},
        "resources": GATEWAY_RESOURCES,
        "env": {OVERLOAD_BOOTSTRAP_ENV: f"{OVERLOAD_BOOTSTRAP_DIR}/{OVERLOAD_BOOTSTRAP_FILE}"},
        "volumes": [{"name": OVERLOAD_BOOTSTRAP_VOLUME, "configMap": {"name": overload["metadata"]["name"]}}],
        "volumeMounts": [{"name": OVERLOAD_BOOTSTRAP_VOLUME, "mountPath": OVERLOAD_BOOTSTRAP_DIR, "readOnly": True}],
    }
