"""One model version's vLLM server as Kubernetes objects (pure functions).

`plan_server` resolves everything a server needs from the typed config once (effective profile,
vLLM arguments, GPU resources, pool placement, replica bounds, drain timings); the builders turn
a plan into a Deployment + Service + PodDisruptionBudget + ServiceMonitor + HPA (mode `hpa`) or
a Knative Service + PodMonitor (mode `kpa`).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

from platform_config.capacity import instance_of
from platform_config.models import ModelConfig, ModelVersion, NodePoolConfig, PlatformConfig, ServerArgs
from platform_config.pins import AWS_CLI, VLLM
from platform_config.profiles import WorkloadProfile
from platform_config.quantity import parse_quantity
from platform_config.serving import (
    DRAIN_MARGIN_SECONDS,
    GPU_MEMORY_UTILIZATION_DEFAULT,
    MESH_PROXY_RESOURCES,
    QUEUE_PROXY_RESOURCES,
    effective_profile,
    knative_container_concurrency,
    knative_target,
    model_priority_class,
    model_tiers,
    replica_bounds,
    replica_gpu_request,
    request_timeout_seconds,
    time_sliced_memory_share,
    weights_service_account,
)

from ..constants import (
    GPU_RESOURCE,
    GPU_TAINT_EFFECT,
    GPU_TAINT_KEY,
    HTTP_PORT_NAME,
    LABEL_COMPONENT,
    LABEL_INSTANCE,
    LABEL_LATENCY_SENSITIVE,
    LABEL_MODEL,
    LABEL_MODEL_VERSION,
    LABEL_NAME,
    LABEL_PART_OF,
    LABEL_POOL,
    LABEL_PROFILE,
    LABEL_TENANT,
    LABEL_VERSION,
    PART_OF,
    VLLM_PORT,
)

# pulumi-kubernetes (4.18+): what to await on a resource it has no built-in readiness check for.
PULUMI_WAIT_FOR = "pulumi.com/waitFor"
HF_TOKEN_SECRET = "huggingface-token"
HF_TOKEN_KEY = "token"
MODELS_DIR = "/models"
HF_HOME = f"{MODELS_DIR}/hf"
WEIGHTS_DIR = f"{MODELS_DIR}/weights"
HOME_DIR = "/home/vllm"
RUN_AS = 1000
# Prometheus-adapter names (see components/specs/metrics.py).
QUEUE_METRIC = "vllm_num_requests_waiting"
GPU_METRIC = "gpu_engine_active_percent"
KNATIVE_HTTP_PORT_NAME = "http1"
# Knative labels every pod of a Knative Service with the service's name.
KNATIVE_SERVICE_LABEL = "serving.knative.dev/service"


def merged_server_args(model: ModelConfig, version: ModelVersion) -> ServerArgs:
    """The model's vLLM settings with the version's own settings on top."""
    base = model.server.model_dump(exclude_defaults=True)
    base.update(version.server.model_dump(exclude_defaults=True))
    return ServerArgs.model_validate(base)


def server_name(model: ModelConfig, version: str) -> str:
    return f"{model.name}-{version}"


@dataclass(frozen=True)
class ServerPlan:
    model: ModelConfig
    version: ModelVersion
    profile: WorkloadProfile
    pool: NodePoolConfig
    name: str
    namespace: str
    tiers: tuple[str, ...]
    priority_class: str
    args: ServerArgs
    image: str
    gpu_resource: str
    gpu_count: int
    gpu_memory_utilization: float
    min_replicas: int
    max_replicas: int
    # The longest a request to this server may take: its profile's timeout, or longer when a
    # tier it serves allows longer routes.
    request_timeout_seconds: int
    hugging_face_token: bool
    # Served names of models whose batch tier this server takes (vLLM answers to them too).
    aliases: tuple[str, ...]
    # Service account with read access to the S3 weights (workload identity), if any.
    weights_service_account: str | None
    # Knative's hard cap of requests per replica and its autoscaling target (mode kpa).
    container_concurrency: int
    knative_target: int

    @property
    def mode(self) -> str:
        return self.model.autoscaling.mode

    @property
    def tensor_parallel_size(self) -> int:
        return self.gpu_count if self.gpu_resource == GPU_RESOURCE and not self.time_sliced else 1

    @property
    def time_sliced(self) -> bool:
        return self.pool.sharing.mode == "timeSlicing"

    @property
    def grace_seconds(self) -> int:
        return self.model.drain.termination_grace_period_seconds

    @property
    def pre_stop_seconds(self) -> int:
        return self.model.drain.pre_stop_delay_seconds

    @property
    def shutdown_timeout_seconds(self) -> int:
        """How long vLLM lets in-flight requests finish after SIGTERM (arrives after preStop)."""
        return max(0, self.grace_seconds - self.pre_stop_seconds - DRAIN_MARGIN_SECONDS)

    @property
    def labels(self) -> dict[str, str]:
        return {
            LABEL_NAME: self.model.name,
            LABEL_INSTANCE: self.name,
            LABEL_VERSION: self.version.name,
            LABEL_COMPONENT: "model-server",
            LABEL_PART_OF: PART_OF,
            LABEL_MODEL: self.model.name,
            LABEL_MODEL_VERSION: self.version.name,
            LABEL_TENANT: self.namespace,
            LABEL_PROFILE: self.profile.name,
            LABEL_LATENCY_SENSITIVE: str(self.profile.latency_sensitive).lower(),
            # Istio's conventional labels: telemetry and subsets read them.
            "app": self.model.name,
            "version": self.version.name,
        }

    @property
    def selector(self) -> dict[str, str]:
        return {LABEL_INSTANCE: self.name}


def plan_server(config: PlatformConfig, model: ModelConfig, version_name: str, *, hugging_face_token: bool) -> ServerPlan:
    version = next(v for v in model.versions if v.name == version_name)
    pool = next(p for p in config.node_pools if p.name == model.pool)
    profile = effective_profile(config, model)
    args = merged_server_args(model, version)
    resource, count = replica_gpu_request(model)
    low, high = replica_bounds(model)
    tiers = model_tiers(config, model)
    if args.gpu_memory_utilization is not None:
        memory_fraction = args.gpu_memory_utilization
    elif pool.sharing.mode == "timeSlicing" and pool.sharing.replicas:
        # Shares of a time-sliced GPU split its memory: each server plans for its part only.
        memory_fraction = time_sliced_memory_share(GPU_MEMORY_UTILIZATION_DEFAULT, pool.sharing.replicas)
    else:
        memory_fraction = GPU_MEMORY_UTILIZATION_DEFAULT
    return ServerPlan(
        model=model,
        version=version,
        profile=profile,
        pool=pool,
        name=server_name(model, version_name),
        namespace=model.tenant,
        tiers=tiers,
        priority_class=model_priority_class(model),
        args=args,
        image=version.image or VLLM.image,
        gpu_resource=resource,
        gpu_count=count,
        gpu_memory_utilization=memory_fraction,
        min_replicas=low,
        max_replicas=high,
        request_timeout_seconds=request_timeout_seconds(config, model),
        hugging_face_token=hugging_face_token and version.source.huggingface is not None,
        aliases=tuple(m.openai_name for m in config.models if m.batch_model == model.name),
        weights_service_account=weights_service_account(model) if version.source.s3_uri else None,
        container_concurrency=knative_container_concurrency(config, model),
        knative_target=knative_target(config, model),
    )


# --- the container -------------------------------------------------------------------------


def model_location(plan: ServerPlan) -> str:
    source = plan.version.source
    if source.huggingface is not None:
        return source.huggingface
    return f"{WEIGHTS_DIR}/{plan.name}"


def vllm_args(plan: ServerPlan) -> list[str]:
    """`vllm serve <model> ...` arguments, from the typed config."""
    args = plan.args
    source = plan.version.source
    out = [
        model_location(plan),
        "--served-model-name",
        plan.model.openai_name,
        *plan.aliases,
        "--port",
        str(VLLM_PORT),
        "--tensor-parallel-size",
        str(plan.tensor_parallel_size),
        "--gpu-memory-utilization",
        f"{plan.gpu_memory_utilization:g}",
        # Finish in-flight requests after SIGTERM (vLLM >= 0.18); the kubelet waits longer.
        "--shutdown-timeout",
        str(plan.shutdown_timeout_seconds),
    ]
    if source.huggingface is not None:
        out += ["--revision", source.revision]
    if args.max_model_len is not None:
        out += ["--max-model-len", str(args.max_model_len)]
    # Sequences one replica runs at once: what its profile promises (Knative's hard cap for
    # Knative servers), unless the stack says otherwise. Requests beyond it wait in vLLM's queue,
    # which is what the HPA scales on.
    out += ["--max-num-seqs", str(max_num_seqs(plan))]
    if args.quantization is not None:
        out += ["--quantization", args.quantization]
    if args.dtype is not None:
        out += ["--dtype", args.dtype]
    if plan.profile.runner == "pooling":
        out += ["--runner", "pooling"]
    else:
        out.append("--enable-prefix-caching" if plan.profile.prefix_caching else "--no-enable-prefix-caching")
    if len(plan.tiers) > 1:
        # Several request tiers share this server: serve by the priority the gateway writes
        # into each request (lower first).
        out += ["--scheduling-policy", "priority"]
    return out + list(args.extra_args)


def _env(plan: ServerPlan) -> list[dict[str, Any]]:
    cache = f"{HOME_DIR}/.cache"
    env: list[dict[str, Any]] = [
        {"name": "HOME", "value": HOME_DIR},
        {"name": "HF_HOME", "value": HF_HOME},
        {"name": "XDG_CACHE_HOME", "value": cache},
        {"name": "XDG_CONFIG_HOME", "value": f"{HOME_DIR}/.config"},
        {"name": "VLLM_CACHE_ROOT", "value": f"{cache}/vllm"},
        {"name": "TRITON_CACHE_DIR", "value": f"{cache}/triton"},
        {"name": "TORCHINDUCTOR_CACHE_DIR", "value": f"{cache}/inductor"},
        {"name": "NUMBA_CACHE_DIR", "value": f"{cache}/numba"},
        {"name": "VLLM_NO_USAGE_STATS", "value": "1"},
        {"name": "DO_NOT_TRACK", "value": "1"},
    ]
    if plan.hugging_face_token:
        env.append({"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": HF_TOKEN_SECRET, "key": HF_TOKEN_KEY}}})
    return env


def _probe(path: str, port: str | int, period: int, failures: int, timeout: int = 5) -> dict[str, Any]:
    return {
        "httpGet": {"path": path, "port": port},
        "periodSeconds": period,
        "failureThreshold": failures,
        "timeoutSeconds": timeout,
    }


def progress_deadline_seconds(plan: ServerPlan) -> int:
    """How long a rollout may take before Kubernetes (or Knative) calls it failed: the startup
    probe's whole budget plus five minutes to schedule the pod and pull the image."""
    return startup_failure_threshold(plan) * 10 + 300


def rollout_timeout_seconds(plan: ServerPlan) -> int:
    """How long `pulumi up` waits for a version to become ready. Pulumi's default (10 minutes for
    a Deployment) is shorter than loading a large model; waiting a minute past the progress
    deadline lets Kubernetes' own verdict, with its reason, be what fails the update."""
    return progress_deadline_seconds(plan) + 60


def startup_failure_threshold(plan: ServerPlan) -> int:
    """Probe attempts (10 s apart) allowed for downloading and loading the weights: 10 minutes
    plus 2 minutes per 20 GiB of GPU memory the replica spans (the weights fill most of it),
    at least 15 minutes."""
    minutes = max(15, 10 + 2 * math.ceil(gpu_memory_per_replica_gib(plan) / 20))
    return minutes * 6


def _security_context() -> dict[str, Any]:
    return {
        "runAsNonRoot": True,
        "runAsUser": RUN_AS,
        "runAsGroup": RUN_AS,
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def _volumes(plan: ServerPlan) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(volumes, mounts): every writable path is a volume, so the root filesystem stays
    read-only; /dev/shm is memory-backed for tensor-parallel NCCL traffic."""
    shm = "16Gi" if plan.tensor_parallel_size > 1 else "2Gi"
    volumes = [
        {"name": "model-cache", "emptyDir": {"sizeLimit": plan.model.resources.cache_size}},
        {"name": "home", "emptyDir": {"sizeLimit": "20Gi"}},
        {"name": "tmp", "emptyDir": {"sizeLimit": "10Gi"}},
        {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": shm}},
    ]
    mounts = [
        {"name": "model-cache", "mountPath": MODELS_DIR},
        {"name": "home", "mountPath": HOME_DIR},
        {"name": "tmp", "mountPath": "/tmp"},
        {"name": "dshm", "mountPath": "/dev/shm"},
    ]
    return volumes, mounts


# emptyDirs besides the weights cache: HOME (compile caches) and /tmp.
SCRATCH_GIB = 30


def scratch_storage(plan: ServerPlan) -> str:
    """Node disk the pod's volumes may fill: the weights cache plus scratch, so the scheduler
    does not put more caches on a node than its disk holds."""
    cache_gib = parse_quantity(plan.model.resources.cache_size) / 2**30
    return f"{math.ceil(cache_gib) + SCRATCH_GIB}Gi"


def _resources(plan: ServerPlan) -> dict[str, Any]:
    gpu = {plan.gpu_resource: str(plan.gpu_count)}
    memory = plan.model.resources.memory
    return {
        # Extended resources need requests == limits; memory is capped, CPU is not (throttling
        # a tokenizer hurts latency more than sharing idle cores).
        "requests": {"cpu": plan.model.resources.cpu, "memory": memory, "ephemeral-storage": scratch_storage(plan), **gpu},
        "limits": {"memory": memory, **gpu},
    }


def vllm_container(plan: ServerPlan, *, knative: bool) -> dict[str, Any]:
    _, mounts = _volumes(plan)
    port_name = KNATIVE_HTTP_PORT_NAME if knative else HTTP_PORT_NAME
    container: dict[str, Any] = {
        "name": "vllm",
        "image": plan.image,
        "command": ["vllm", "serve"],
        "args": vllm_args(plan),
        "ports": [{"name": port_name, "containerPort": VLLM_PORT, "protocol": "TCP"}],
        "env": _env(plan),
        "resources": _resources(plan),
        "volumeMounts": mounts,
        "securityContext": _security_context(),
    }
    # Knative probes its container through queue-proxy and takes the port from the container.
    probe_port: str | int = VLLM_PORT if knative else HTTP_PORT_NAME
    container["startupProbe"] = _probe("/health", probe_port, 10, startup_failure_threshold(plan))
    container["readinessProbe"] = _probe("/health", probe_port, 5, 3)
    container["livenessProbe"] = _probe("/health", probe_port, 15, 4, timeout=10)
    if not knative:
        # Knative has no lifecycle hooks: its queue-proxy drains the revision's requests.
        # Leave the load balancers first (endpoints and the mesh notice the terminating pod),
        # then vLLM gets SIGTERM and drains in-flight requests for --shutdown-timeout.
        container["lifecycle"] = {"preStop": {"exec": {"command": ["sleep", str(plan.pre_stop_seconds)]}}}
    return container


def weights_init_container(plan: ServerPlan) -> dict[str, Any] | None:
    """Copies S3 weights (s3Uri/revision) to the cache volume before vLLM starts."""
    source = plan.version.source
    if source.s3_uri is None:
        return None
    _, mounts = _volumes(plan)
    return {
        "name": "fetch-weights",
        "image": AWS_CLI.image,
        "command": [
            "aws",
            "s3",
            "sync",
            "--only-show-errors",
            f"{source.s3_uri.rstrip('/')}/{source.revision}/",
            f"{WEIGHTS_DIR}/{plan.name}",
        ],
        "env": [{"name": "HOME", "value": HOME_DIR}],
        "resources": {"requests": {"cpu": "1", "memory": "2Gi"}, "limits": {"memory": "2Gi"}},
        "volumeMounts": [m for m in mounts if m["name"] in ("model-cache", "home", "tmp")],
        "securityContext": _security_context(),
    }


def pod_annotations(plan: ServerPlan) -> dict[str, str]:
    return {
        # Istio merges these app metrics into the sidecar's plaintext metrics endpoint, so
        # Prometheus can scrape them despite STRICT mTLS.
        "prometheus.io/scrape": "true",
        "prometheus.io/port": str(VLLM_PORT),
        "prometheus.io/path": "/metrics",
        # Keep the sidecar up while vLLM drains (and no longer: it exits once the last
        # connection closes), and start vLLM only once the sidecar is ready.
        "proxy.istio.io/config": json.dumps(
            {
                "terminationDrainDuration": f"{plan.grace_seconds}s",
                "holdApplicationUntilProxyStarts": True,
                "proxyMetadata": {"EXIT_ON_ZERO_ACTIVE_CONNECTIONS": "true"},
            }
        ),
        # The sidecar's size, stated so quotas count it exactly (see MESH_PROXY_RESOURCES).
        "sidecar.istio.io/proxyCPU": MESH_PROXY_RESOURCES["cpu"],
        "sidecar.istio.io/proxyMemory": MESH_PROXY_RESOURCES["memory"],
        "sidecar.istio.io/proxyMemoryLimit": MESH_PROXY_RESOURCES["memory"],
    }


def pod_spec(plan: ServerPlan, *, knative: bool) -> dict[str, Any]:
    volumes, _ = _volumes(plan)
    spec: dict[str, Any] = {
        "priorityClassName": plan.priority_class,
        "nodeSelector": {LABEL_POOL: plan.pool.name},
        "tolerations": [{"key": GPU_TAINT_KEY, "operator": "Exists", "effect": GPU_TAINT_EFFECT}],
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": RUN_AS,
            "runAsGroup": RUN_AS,
            "fsGroup": RUN_AS,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "containers": [vllm_container(plan, knative=knative)],
        "volumes": volumes,
    }
    init = weights_init_container(plan)
    if init is not None:
        spec["initContainers"] = [init]
        # The IRSA / Pod Identity webhooks project their own AWS token for this account; the
        # Kubernetes API token stays unmounted (Knative admits only false here anyway).
        spec["serviceAccountName"] = plan.weights_service_account
    if not knative:
        spec["terminationGracePeriodSeconds"] = plan.grace_seconds
        spec["topologySpreadConstraints"] = [
            {
                "maxSkew": 1,
                "topologyKey": "kubernetes.io/hostname",
                "whenUnsatisfiable": "ScheduleAnyway",
                "labelSelector": {"matchLabels": plan.selector},
            }
        ]
    return spec


# --- HPA mode: Deployment, Service, PDB, ServiceMonitor, HPA ---------------------------------


def _metadata(plan: ServerPlan, name: str | None = None) -> dict[str, Any]:
    return {"name": name or plan.name, "namespace": plan.namespace, "labels": plan.labels}


def deployment(plan: ServerPlan) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": _metadata(plan),
        "spec": {
            "replicas": plan.min_replicas,
            "selector": {"matchLabels": plan.selector},
            # Never take a serving replica away before its replacement is ready.
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1}},
            "progressDeadlineSeconds": progress_deadline_seconds(plan),
            "template": {
                "metadata": {"labels": plan.labels, "annotations": pod_annotations(plan)},
                "spec": pod_spec(plan, knative=False),
            },
        },
    }


def service(plan: ServerPlan) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _metadata(plan),
        "spec": {
            "type": "ClusterIP",
            "selector": plan.selector,
            "ports": [
                {
                    "name": HTTP_PORT_NAME,
                    "port": VLLM_PORT,
                    "targetPort": HTTP_PORT_NAME,
                    "protocol": "TCP",
                    "appProtocol": "http",
                }
            ],
        },
    }


def pod_disruption_budget(plan: ServerPlan) -> dict[str, Any]:
    """At most one replica away at a time for voluntary disruptions (node drains, upgrades)."""
    selector = {KNATIVE_SERVICE_LABEL: plan.name} if plan.mode == "kpa" else plan.selector
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": _metadata(plan),
        "spec": {"maxUnavailable": 1, "selector": {"matchLabels": selector}},
    }


def _merged_metrics_relabelings() -> list[dict[str, Any]]:
    """Scrape the Istio sidecar's merged metrics (app metrics included) at the port Istio
    writes into the pod's prometheus.io/port annotation."""
    return [
        {
            "sourceLabels": ["__address__", "__meta_kubernetes_pod_annotation_prometheus_io_port"],
            "action": "replace",
            "regex": "([^:]+)(?::\\d+)?;(\\d+)",
            "replacement": "$1:$2",
            "targetLabel": "__address__",
        },
        {"sourceLabels": ["__meta_kubernetes_pod_label_inference_platform_model_version"], "targetLabel": "model_version"},
    ]


def service_monitor(plan: ServerPlan) -> dict[str, Any]:
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "ServiceMonitor",
        "metadata": _metadata(plan),
        "spec": {
            "selector": {"matchLabels": plan.selector},
            "endpoints": [
                {
                    "port": HTTP_PORT_NAME,
                    "path": "/stats/prometheus",
                    "interval": "15s",
                    "relabelings": _merged_metrics_relabelings(),
                }
            ],
        },
    }


def hpa(plan: ServerPlan) -> dict[str, Any]:
    """autoscaling/v2 on Pods metrics served by prometheus-adapter. GPU utilisation is not a
    `Resource` metric (those are cpu and memory only)."""
    settings = plan.model.autoscaling.hpa
    metrics: list[dict[str, Any]] = []
    if settings.queue_depth_target is not None:
        metrics.append(
            {
                "type": "Pods",
                "pods": {
                    "metric": {"name": QUEUE_METRIC},
                    "target": {"type": "AverageValue", "averageValue": str(settings.queue_depth_target)},
                },
            }
        )
    if settings.gpu_utilization_target is not None:
        metrics.append(
            {
                "type": "Pods",
                "pods": {
                    "metric": {"name": GPU_METRIC},
                    "target": {"type": "AverageValue", "averageValue": str(settings.gpu_utilization_target)},
                },
            }
        )
    return {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": _metadata(plan),
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


# --- KPA mode: Knative Service, PodMonitor, PDB ----------------------------------------------


def max_num_seqs(plan: ServerPlan) -> int:
    if plan.args.max_num_seqs is not None:
        return plan.args.max_num_seqs
    if plan.mode == "kpa" and plan.container_concurrency:
        return plan.container_concurrency
    return plan.profile.concurrency_per_replica


def knative_service(plan: ServerPlan) -> dict[str, Any]:
    kpa = plan.model.autoscaling.kpa
    annotations = {
        "autoscaling.knative.dev/class": "kpa.autoscaling.knative.dev",
        "autoscaling.knative.dev/metric": "concurrency",
        "autoscaling.knative.dev/target": str(plan.knative_target),
        # Knative aims at 70 % of the target unless told otherwise (config-autoscaler
        # container-concurrency-target-percentage): scale at the target the stack names.
        "autoscaling.knative.dev/target-utilization-percentage": "100",
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
    # Knative marks a revision failed after its progress deadline (10 minutes by default);
    # loading a model can take longer, so the deadline outlasts the startup probe.
    annotations["serving.knative.dev/progress-deadline"] = f"{progress_deadline_seconds(plan)}s"
    return {
        "apiVersion": "serving.knative.dev/v1",
        "kind": "Service",
        "metadata": {
            **_metadata(plan),
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
                    # Hard cap per replica: beyond it requests queue in the activator/queue-proxy,
                    # which answers 503 when its bounded queue is full.
                    "containerConcurrency": plan.container_concurrency,
                    "timeoutSeconds": plan.request_timeout_seconds,
                    # Unset, Knative defaults the time to the first response byte from
                    # revision-timeout-seconds (300 s) whenever that is below timeoutSeconds
                    # (knative/serving knative-v1.23.0 pkg/apis/config/defaults.go and
                    # pkg/apis/serving/v1/revision_defaults.go): a silent batch answer would get
                    # a 504 at 300 s. A non-streamed answer may take the whole timeout.
                    "responseStartTimeoutSeconds": plan.request_timeout_seconds,
                    **pod_spec(plan, knative=True),
                },
            }
        },
    }


def pod_monitor(plan: ServerPlan) -> dict[str, Any]:
    """Knative owns the Services of its revisions, so scrape the pods directly."""
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PodMonitor",
        "metadata": _metadata(plan),
        "spec": {
            "selector": {"matchLabels": {KNATIVE_SERVICE_LABEL: plan.name}},
            "podMetricsEndpoints": [
                {
                    "path": "/stats/prometheus",
                    "interval": "15s",
                    "relabelings": [
                        {"sourceLabels": ["__meta_kubernetes_pod_container_name"], "action": "keep", "regex": "istio-proxy"},
                        *_merged_metrics_relabelings(),
                    ],
                }
            ],
        },
    }


def gpu_memory_per_replica_gib(plan: ServerPlan) -> float:
    gpu = instance_of(plan.pool).gpu
    if plan.gpu_resource != GPU_RESOURCE:
        profile = gpu.mig_profiles[plan.gpu_resource.rsplit("-", 1)[-1]]
        return gpu.memory_gib * profile.memory_slices / 8
    return gpu.memory_gib * plan.gpu_count
