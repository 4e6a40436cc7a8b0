"""A model version's vLLM server pod, whatever backend runs it (pure functions): the vLLM
container and its arguments, the weights init container (or, on a streaming pool, vLLM's own
S3 streaming loader), probes, volumes, resources, the pod's annotations and spec, and what every
backend's objects share (metadata, disruption budget, scraping the merged metrics). The backend
supplies the pod's shape (components/backends). What other workloads' pods share with it is in
pod_parts.py, and what a batch job's vLLM shares with it in vllm_parts.py."""

from __future__ import annotations

import json
import math
from typing import Any

from platform_config.cold_start import STREAM_CONCURRENCY
from platform_config.models import pinned_s3_uri
from platform_config.quantity import gib_quantity, parse_quantity

from ..constants import LABEL_POOL, VLLM_PORT
from ..shapes import ServerPlan
from .chat_template import chat_template_annotations, chat_template_args, chat_template_volumes
from .network import POD_IDENTITY_AGENT_CIDRS
from .pod_parts import (
    EXCLUDE_OUTBOUND_ANNOTATION,
    HF_TOKEN_KEY,
    HF_TOKEN_SECRET,
    HOME_DIR,
    aws_cli_container,
    aws_cli_env,
    container_security_context,
    draining_sidecar_annotations,
    gpu_toleration,
    node_spread,
    pod_security_context,
)
from .scripts import s3_sync_command
from .slo_rules import ITEM_LATENCY_BUCKETS_SECONDS
from .vllm_parts import HF_HOME, HF_HUB_OFFLINE, MODELS_DIR, adapter_fetch_containers, lora_flags, tuning_args

WEIGHTS_DIR = f"{MODELS_DIR}/weights"
STARTUP_PROBE_PERIOD = 10
# The cluster autoscaler does not remove a node whose pods hold local volumes (emptyDirs not in
# memory) unless the pod lists them here (utils/drain/drain.go HasBlockingLocalStorage and
# SafeToEvictLocalVolumesKey at cluster-autoscaler-1.33.0, the same at 1.30.0 and 1.34.2).
ANNOTATION_SAFE_TO_EVICT_LOCAL_VOLUMES = "cluster-autoscaler.kubernetes.io/safe-to-evict-local-volumes"

# On the pod template of a version whose weights the MLflow registry named: which registered model, version and
# alias, and the weights it pointed at. A moved alias changes them, so the preview's diff shows the move on the
# version's objects (the weights change the arguments too, but say nothing of the registry).
ANNOTATION_REGISTRY_MODEL = "inference.platform/registry-model"
ANNOTATION_REGISTRY_VERSION = "inference.platform/registry-version"
ANNOTATION_REGISTRY_ALIAS = "inference.platform/registry-alias"
ANNOTATION_WEIGHTS = "inference.platform/weights"
# On the pod template of a server reading the weight mirror's copy: the Hugging Face revision it copies.
ANNOTATION_WEIGHTS_MIRRORED_FROM = "inference.platform/weights-mirrored-from"
# On the pod template of a server that loads LoRA adapters: per adapter, the tenant that owns it and
# its modules, for the policies `adapter-names-unique` and `adapter-on-own-tenants-base`.
ANNOTATION_LORA_ADAPTERS = "inference.platform/lora-adapters"


# --- the container -------------------------------------------------------------------------


def weights_path(plan: ServerPlan) -> str:
    """Where the init container syncs a version's S3 weights on the node's cache, and vLLM reads them."""
    return f"{WEIGHTS_DIR}/{plan.name}"


def model_location(plan: ServerPlan) -> str:
    source = plan.version.source
    assert source.mlflow is None, f"{plan.name}: an unresolved MLflow registry source reached the pod"
    if source.huggingface is not None:
        assert not plan.weights_streamed, f"{plan.name}: a Hugging Face source on a streaming pool reached the pod"
        return source.huggingface
    if plan.weights_streamed:
        # vLLM 0.33.0 takes an s3:// model as object storage (is_runai_obj_uri): it pulls the config and tokenizer
        # files (*.json, *.model, *.py) into $VLLM_ASSETS_CACHE/model_streamer/ (under HOME here) and streams the
        # *.safetensors from S3 (vllm/config/model.py maybe_pull_model_tokenizer_for_runai; runai_streamer_loader.py).
        return pinned_s3_uri(source)
    return weights_path(plan)


# The Run:ai streamer's CPU buffers together take at most this share of the container's memory limit: left alone,
# each reading process buffers up to 40 GB, and without any limit under distributed streaming (runai-model-streamer
# 0.15.7, file_streamer/requests_iterator.py DEFAULT_MEMORY_LIMIT_STRING, distributed_streamer.py).
STREAM_BUFFER_MEMORY_SHARE = 4


def stream_loader_config(plan: ServerPlan) -> dict[str, Any]:
    """vLLM's `--model-loader-extra-config` for `--load-format runai_streamer` (vllm/model_executor/model_loader/
    runai_streamer_loader.py at v0.33.0 reads `concurrency` and `memory_limit` as ints, `distributed` as a bool):
    STREAM_CONCURRENCY S3 connections per reading process, a CPU buffer of a quarter of the container's memory split
    across the tensor-parallel processes, and with tensor parallelism distributed streaming, where each rank reads its
    part of the checkpoint once and the ranks share it over NCCL instead of every rank reading all of it."""
    readers = plan.tensor_parallel_size
    memory = parse_quantity(plan.model.resources.memory)
    config: dict[str, Any] = {
        "concurrency": STREAM_CONCURRENCY,
        "memory_limit": int(memory / (STREAM_BUFFER_MEMORY_SHARE * readers)),
    }
    if readers > 1:
        config["distributed"] = True
    return config


def weights_load_args(plan: ServerPlan) -> list[str]:
    """On a streaming pool: vLLM's Run:ai streamer loader and its settings (both flags in vLLM 0.33.0's `serve`;
    the second is a dict field, parsed with json.loads: vllm/engine/arg_utils.py _compute_kwargs)."""
    if not plan.weights_streamed:
        return []
    config = json.dumps(stream_loader_config(plan), sort_keys=True, separators=(",", ":"))
    return ["--load-format", "runai_streamer", "--model-loader-extra-config", config]


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
        str(plan.drain.shutdown_timeout_seconds),
    ]
    if source.huggingface is not None and source.revision is not None:
        out += ["--revision", source.revision]
    out += weights_load_args(plan)
    if args.max_model_len is not None:
        out += ["--max-model-len", str(args.max_model_len)]
    # Sequences one replica runs at once: what its profile promises (`kpa.containerConcurrency`
    # for Knative servers), unless the stack says otherwise. Requests beyond it wait in vLLM's
    # queue, which is what the HPA scales on.
    out += ["--max-num-seqs", str(plan.max_num_seqs)]
    if plan.admission is not None:
        # No endpoint picker times this server's queue: vLLM refuses a request with 503, before
        # queueing it, when its backlog is full (platform_config/serving.py ServerAdmission).
        out += ["--max-num-queued-reqs", str(plan.admission.max_requests)]
        if plan.admission.max_prefill_tokens is not None:
            out += ["--max-num-queued-tokens", str(plan.admission.max_prefill_tokens)]
    if args.quantization is not None:
        out += ["--quantization", args.quantization]
    if args.dtype is not None:
        out += ["--dtype", args.dtype]
    if plan.profile.runner == "pooling":
        out += ["--runner", "pooling"]
        # Item latency down to milliseconds: what the per-item objective is counted at (slo_rules.py).
        buckets = json.dumps({"request_latency": list(ITEM_LATENCY_BUCKETS_SECONDS)}, separators=(",", ":"))
        out += ["--custom-histogram-buckets", buckets]
    else:
        out.append("--enable-prefix-caching" if plan.profile.prefix_caching else "--no-enable-prefix-caching")
    if plan.by_priority:
        # Several request tiers share this server: serve by the priority the gateway writes
        # into each request (lower first).
        out += ["--scheduling-policy", "priority"]
    return out + chat_template_args(plan) + lora_args(plan) + tuning_args(plan.args)


# --- LoRA adapters (vllm_parts.py: the flags and the fetch containers a batch job shares) -------


def lora_args(plan: ServerPlan) -> list[str]:
    """vLLM's LoRA flags for a server (`lora_flags`)."""
    if plan.lora is None:
        return []
    return lora_flags(plan.lora, plan.name)


def adapter_init_containers(plan: ServerPlan) -> list[dict[str, Any]]:
    """Fetch a server's adapter modules before vLLM starts (`adapter_fetch_containers`)."""
    if plan.lora is None:
        return []
    _, mounts = _volumes(plan)
    volume_mounts = [m for m in mounts if m["name"] in ("model-cache", "home", "tmp")]
    hf_env = [e for e in _env(plan) if e["name"] in ("HOME", "HF_HOME", "HF_TOKEN")]
    return adapter_fetch_containers(plan.lora, plan.image, plan.aws_cli_image, hf_env, volume_mounts)


# --- the environment, probes, rollout and volumes ------------------------------------------


def _env(plan: ServerPlan) -> list[dict[str, Any]]:
    cache = f"{HOME_DIR}/.cache"
    env: list[dict[str, Any]] = [
        {"name": "HOME", "value": HOME_DIR},
        # Without a model volume (streamed weights, no adapters) /models is read-only: the Hugging Face cache in HOME.
        {"name": "HF_HOME", "value": HF_HOME if plan.model_volume_size is not None else f"{cache}/huggingface"},
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
    if not plan.reads_hugging_face:
        env.append(HF_HUB_OFFLINE)
    if plan.weights_streamed:
        # vLLM's streamer reads S3 as the aws CLI does: boto3's default credential chain (runai-model-streamer-s3
        # 0.15.7, credentials/credentials.py) hands its C++ client the resolved keys, so the workload identity's
        # injected variables (Pod Identity's AWS_CONTAINER_CREDENTIALS_FULL_URI and token file, and the region, into
        # every container: aws/amazon-eks-pod-identity-webhook pkg/handler/testdata), never IMDS.
        env += [e for e in aws_cli_env() if e["name"] not in {v["name"] for v in env}]
    return env


def _probe(path: str, port: str | int, period: int, failures: int, timeout: int = 5) -> dict[str, Any]:
    return {
        "httpGet": {"path": path, "port": port},
        "periodSeconds": period,
        "failureThreshold": failures,
        "timeoutSeconds": timeout,
    }


def progress_deadline_seconds(plan: ServerPlan) -> int:
    """How long a rollout may make no progress before Kubernetes (or Knative) calls it failed: a
    new node for the pod, the image pull and the startup probe's budget, all from the version's
    expected cold start (platform_config/cold_start.progress_deadline)."""
    assert plan.progress_deadline_seconds is not None, f"{plan.name}: the plan derived no progress deadline"
    return plan.progress_deadline_seconds


def rollout_timeout_seconds(plan: ServerPlan) -> int:
    """How long `pulumi up` waits for a version to become ready. Pulumi's default (10 minutes for
    a Deployment) is shorter than loading a large model; waiting a minute past the progress
    deadline lets Kubernetes' own verdict, with its reason, be what fails the update."""
    return progress_deadline_seconds(plan) + 60


def startup_failure_threshold(plan: ServerPlan) -> int:
    """Probe attempts (10 s apart) allowed for downloading and loading the weights: the budget
    derived from the pool's weight cache path (platform_config/cold_start.startup_budget_seconds)."""
    assert plan.startup_budget_seconds is not None, f"{plan.name}: the plan derived no startup budget"
    return plan.startup_budget_seconds // STARTUP_PROBE_PERIOD


def _volumes(plan: ServerPlan) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(volumes, mounts): every writable path is a volume, so the root filesystem stays
    read-only; /dev/shm is memory-backed for tensor-parallel NCCL traffic."""
    shm = "16Gi" if plan.tensor_parallel_size > 1 else "2Gi"
    # None: streamed weights and no adapters, nothing for a model volume to hold.
    model = plan.model_volume_size is not None
    volumes = [
        *([{"name": "model-cache", "emptyDir": {"sizeLimit": plan.model_volume_size}}] if model else []),
        {"name": "home", "emptyDir": {"sizeLimit": "20Gi"}},
        {"name": "tmp", "emptyDir": {"sizeLimit": "10Gi"}},
        {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": shm}},
    ]
    mounts = [
        *([{"name": "model-cache", "mountPath": MODELS_DIR}] if model else []),
        {"name": "home", "mountPath": HOME_DIR},
        {"name": "tmp", "mountPath": "/tmp"},
        {"name": "dshm", "mountPath": "/dev/shm"},
    ]
    template_volumes, template_mounts = chat_template_volumes(plan)
    return volumes + template_volumes, mounts + template_mounts


# emptyDirs besides the weights cache: HOME (compile caches) and /tmp.
SCRATCH_GIB = 30


def scratch_storage(plan: ServerPlan) -> str:
    """Node disk the pod's volumes may fill: the model volume (if it has one: the weights cache, or
    on a streaming pool the adapters' files) plus scratch, so the scheduler does not put more
    caches on a node than its disk holds."""
    if plan.model_volume_size is None:
        return gib_quantity(SCRATCH_GIB)
    volume_gib = parse_quantity(plan.model_volume_size) / 2**30
    return gib_quantity(math.ceil(volume_gib) + SCRATCH_GIB)


def _resources(plan: ServerPlan) -> dict[str, Any]:
    gpu = {plan.gpu_resource: str(plan.gpu_count)}
    memory = plan.model.resources.memory
    return {
        # Extended resources need requests == limits; memory is capped, CPU is not (throttling
        # a tokenizer hurts latency more than sharing idle cores).
        "requests": {"cpu": plan.model.resources.cpu, "memory": memory, "ephemeral-storage": scratch_storage(plan), **gpu},
        "limits": {"memory": memory, **gpu},
    }


def vllm_container(plan: ServerPlan) -> dict[str, Any]:
    _, mounts = _volumes(plan)
    shape = plan.backend.pod_shape
    port_name = shape.port_name
    container: dict[str, Any] = {
        "name": "vllm",
        "image": plan.image,
        "command": ["vllm", "serve"],
        "args": vllm_args(plan),
        "ports": [{"name": port_name, "containerPort": VLLM_PORT, "protocol": "TCP"}],
        "env": _env(plan),
        "resources": _resources(plan),
        "volumeMounts": mounts,
        "securityContext": container_security_context(),
    }
    probe_port = shape.probe_port
    container["startupProbe"] = _probe("/health", probe_port, STARTUP_PROBE_PERIOD, startup_failure_threshold(plan))
    container["readinessProbe"] = _probe("/health", probe_port, 5, 3)
    container["livenessProbe"] = _probe("/health", probe_port, 15, 4, timeout=10)
    if shape.drains_in_pod:
        # Leave the load balancers first (endpoints and the mesh notice the terminating pod),
        # then vLLM gets SIGTERM and drains in-flight requests for --shutdown-timeout.
        container["lifecycle"] = {"preStop": {"exec": {"command": ["sleep", str(plan.drain.pre_stop_seconds)]}}}
    return container


def weights_init_container(plan: ServerPlan) -> dict[str, Any] | None:
    """Copies S3 weights (s3Uri/revision) to the cache volume before vLLM starts; none where
    vLLM streams them itself."""
    source = plan.version.source
    if source.s3_uri is None or plan.weights_streamed:
        return None
    _, mounts = _volumes(plan)
    return aws_cli_container(
        "fetch-weights",
        plan.aws_cli_image,
        s3_sync_command(source, weights_path(plan)),
        [m for m in mounts if m["name"] in ("model-cache", "home", "tmp")],
    )


def registry_annotations(plan: ServerPlan) -> dict[str, str]:
    entry = plan.registry_entry
    if entry is None:
        return {}
    annotations = {
        ANNOTATION_REGISTRY_MODEL: entry.registered_model,
        ANNOTATION_REGISTRY_VERSION: entry.registry_version,
        ANNOTATION_WEIGHTS: entry.weights,
    }
    if entry.alias is not None:
        annotations[ANNOTATION_REGISTRY_ALIAS] = entry.alias
    return annotations


def adapter_annotations(plan: ServerPlan) -> dict[str, str]:
    """The adapters a server loads, by OpenAI name: the tenant that owns each, the OpenAI name of the model that
    declares it (its base: another model's, which this server answers to as well, when it takes that model's batch
    tier) and its modules."""
    if plan.lora is None:
        return {}
    adapters: dict[str, dict[str, Any]] = {}
    for module in plan.lora.modules:
        entry = adapters.setdefault(module.adapter, {"tenant": module.tenant, "base": module.base_name, "modules": []})
        entry["modules"].append(module.name)
    return {ANNOTATION_LORA_ADAPTERS: json.dumps(adapters, sort_keys=True, separators=(",", ":"))}


def mirror_annotations(plan: ServerPlan) -> dict[str, str]:
    """On a server that reads the weight mirror's copy of a Hugging Face revision: which one (the copy is its
    `--model`, or what its init container copies)."""
    source = plan.mirrored_from
    if source is None:
        return {}
    return {ANNOTATION_WEIGHTS_MIRRORED_FROM: f"{source.huggingface}@{source.revision}"}


def pod_annotations(plan: ServerPlan) -> dict[str, str]:
    return {
        **registry_annotations(plan),
        **chat_template_annotations(plan),
        **mirror_annotations(plan),
        **adapter_annotations(plan),
        # Istio merges these app metrics into the sidecar's plaintext metrics endpoint, so
        # Prometheus can scrape them despite STRICT mTLS.
        "prometheus.io/scrape": "true",
        "prometheus.io/port": str(VLLM_PORT),
        "prometheus.io/path": "/metrics",
        # Keep the sidecar up while vLLM drains, and start vLLM only once the sidecar is ready.
        **draining_sidecar_annotations(plan.drain.grace_seconds),
        # The Pod Identity Agent's plain-HTTP credentials call goes around the sidecar: no Service
        # names that address, so REGISTRY_ONLY (network.egress_sidecar) would drop it. Read by the
        # injector at 1.30.3 (files/injection-template.yaml lines 56 and 105: the CNI plugin's
        # annotation and istio-iptables' `-x`).
        EXCLUDE_OUTBOUND_ANNOTATION: ",".join(POD_IDENTITY_AGENT_CIDRS),
        **scale_down_annotations(plan),
    }


def scale_down_annotations(plan: ServerPlan) -> dict[str, str]:
    """Where the pool allows it (`weightCache.allowScaleDown`), the pod's disk-backed emptyDirs
    (weights cache if any, HOME, /tmp: caches a moved replica rebuilds) do not keep the autoscaler from
    consolidating its node; /dev/shm is in memory, which never blocks."""
    if not plan.evictable_local_volumes:
        return {}
    volumes, _ = _volumes(plan)
    local = [v["name"] for v in volumes if "emptyDir" in v and v["emptyDir"].get("medium") != "Memory"]
    return {ANNOTATION_SAFE_TO_EVICT_LOCAL_VOLUMES: ",".join(local)}


def pod_spec(plan: ServerPlan) -> dict[str, Any]:
    volumes, _ = _volumes(plan)
    spec: dict[str, Any] = {
        "priorityClassName": plan.priority_class,
        "nodeSelector": {LABEL_POOL: plan.pool.name},
        "tolerations": [gpu_toleration()],
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "securityContext": pod_security_context(),
        "containers": [vllm_container(plan)],
        "volumes": volumes,
    }
    init = weights_init_container(plan)
    inits = ([init] if init is not None else []) + adapter_init_containers(plan)
    if inits:
        spec["initContainers"] = inits
    if plan.weights_service_account is not None:
        # The IRSA / Pod Identity webhooks project their own AWS token for this account; the
        # Kubernetes API token stays unmounted (Knative admits only false here anyway).
        spec["serviceAccountName"] = plan.weights_service_account
    if plan.backend.pod_shape.drains_in_pod:
        spec["terminationGracePeriodSeconds"] = plan.drain.grace_seconds
        spec["topologySpreadConstraints"] = node_spread(plan.selector)
    return spec


# --- what every backend's objects share ------------------------------------------------


def server_metadata(plan: ServerPlan) -> dict[str, Any]:
    return {"name": plan.name, "namespace": plan.namespace, "labels": plan.labels}


def pod_disruption_budget(plan: ServerPlan, selector: dict[str, str]) -> dict[str, Any]:
    """At most one replica away at a time for voluntary disruptions (node drains, upgrades)."""
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": server_metadata(plan),
        "spec": {"maxUnavailable": 1, "selector": {"matchLabels": selector}},
    }
