"""The endpoint picker's pods: the EPP and Envoy containers (their flags, probes, sizes and drain)
and the Deployment that runs them. LR, SA and IS name the upstream sources the package's docstring
cites."""

from __future__ import annotations

import json
from typing import Any

from ...picker_plan import EndpointPickerPlan
from ..pod_parts import container_security_context, draining_sidecar_annotations, pod_security_context
from .names import (
    EPP_CONFIG_DIR,
    EPP_CONFIG_FILE,
    EPP_CONTAINER,
    EPP_GRPC_PORT,
    EPP_HEALTH_PORT,
    EPP_METRICS_PORT,
    EPP_PROXY_PORT,
    MODE_LABEL,
    POOL_GROUP,
    PROXY_CONFIG_DIR,
    PROXY_CONFIG_FILE,
    PROXY_CONTAINER,
    PROXY_READY_PORT,
    epp_name,
    epp_selector,
    metadata,
    object_labels,
    pod_labels,
    proxy_config_map_name,
)
from .plan_rules import DRAIN_SECONDS, EPP_POD_RESOURCES, PROXY_WORKERS, proxy_pre_stop_seconds, termination_grace_seconds

# Both images run as 65532 (LR Dockerfile.epp `USER 65532:65532`; Envoy's distroless images are
# built on distroless `nonroot`, the same uid). Set explicitly so runAsNonRoot is checkable, and
# never ISTIO_PROXY_UID: Envoy's connections to the picked pods must go through the sidecar, or
# they would leave in plaintext and the servers' STRICT mTLS would refuse them.
RUN_AS = 65532

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
        "image": plan.image,
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
        "image": plan.proxy_image,
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
        #   connections fail (mesh-wide already, components/specs/mesh.py istiod_values; stated so
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
        "securityContext": pod_security_context(RUN_AS, volumes_writable=False),
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
        "metadata": {**metadata(plan, epp_name(plan)), "labels": {**object_labels(plan), MODE_LABEL[0]: MODE_LABEL[1]}},
        "spec": {
            "replicas": plan.replicas,
            # The chart uses Recreate for leader election (an old leader must go first). Active-
            # active replicas roll one at a time instead, and a replica may take the whole grace
            # period to drain, which under Recreate would be an outage.
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}},
            "selector": {"matchLabels": epp_selector(plan)},
            "template": {
                "metadata": {"labels": pod_labels(plan), "annotations": pod_annotations(plan)},
                "spec": pod,
            },
        },
    }
