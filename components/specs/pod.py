"""A model version's vLLM server pod, whatever backend runs it (pure functions): the vLLM
container and its arguments, the weights init container (or, on a streaming pool, vLLM's own
S3 streaming loader), probes, volumes, resources, the pod's annotations and spec, and what every
backend's objects share (metadata, disruption budget, scraping the merged metrics). The backend
supplies the pod's shape (components/backends)."""

from __future__ import annotations

import json
import math
import urllib.parse
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from platform_config.adapters import AdapterModule, LoraLimits
from platform_config.cold_start import STREAM_CONCURRENCY
from platform_config.models import ModelSource, ServerArgs, pinned_s3_uri
from platform_config.pins import AWS_CLI
from platform_config.quantity import parse_quantity

from ..constants import GPU_TAINT_EFFECT, GPU_TAINT_KEY, LABEL_POOL, VLLM_PORT, standard_labels
from .chat_template import chat_template_annotations, chat_template_args, chat_template_volumes
from .pod_parts import RUN_AS, container_security_context, draining_sidecar_annotations
from .slo_rules import ITEM_LATENCY_BUCKETS_SECONDS
from .tenancy import POD_IDENTITY_AGENT_CIDRS

if TYPE_CHECKING:  # the plan imports the backends, which build their pods here
    from ..serving import ServerPlan

HF_TOKEN_SECRET = "huggingface-token"
HF_TOKEN_KEY = "token"
MODELS_DIR = "/models"
HF_HOME = f"{MODELS_DIR}/hf"
WEIGHTS_DIR = f"{MODELS_DIR}/weights"
HOME_DIR = "/home/vllm"
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


# --- LoRA adapters -------------------------------------------------------------------------
# vLLM 0.33.0 resolves a `--lora-modules` path that is not a local one as a Hugging Face repository
# and downloads it with `snapshot_download(repo_id=...)`, at no revision (vllm/lora/utils.py,
# get_adapter_absolute_path): a pinned revision cannot be given. So every module is downloaded at its
# pinned revision (or synced from S3) into the pod's model volume by an init container, and vLLM is
# given that absolute path, which it takes as it is.

ADAPTERS_DIR = f"{MODELS_DIR}/adapters"
# Downloads each (repository, revision, directory) triple of its arguments; huggingface_hub is
# vLLM's own dependency, in the image.
_HF_ADAPTER_DOWNLOAD = (
    "import sys\n"
    "from huggingface_hub import snapshot_download\n"
    "args = sys.argv[1:]\n"
    "for repo, revision, directory in zip(args[0::3], args[1::3], args[2::3]):\n"
    "    snapshot_download(repo_id=repo, revision=revision, local_dir=directory)\n"
)


def adapter_path(module: AdapterModule) -> str:
    """Where a LoRA module's files are on the model volume (its name quoted: it may hold '/' or ':')."""
    return f"{ADAPTERS_DIR}/{urllib.parse.quote(module.name, safe='')}"


def lora_args(plan: ServerPlan) -> list[str]:
    """vLLM's LoRA flags for a server (`lora_flags`)."""
    if plan.lora is None:
        return []
    return lora_flags(plan.lora, plan.name)


def lora_flags(lora: LoraLimits, owner: str) -> list[str]:
    """vLLM's LoRA flags (vllm/config/lora.py and vllm/entrypoints/common/cli_args.py at v0.33.0),
    for a server and for a batch job's `vllm run-batch` alike: `--lora-modules` takes `name=path`
    items (an item with '=' and no ',' is read that way; names never hold either, paths are
    quoted), and the limits sized from the adapters."""
    # The loader replaced every registry reference by the pinned source it names (platform_config/registry.py).
    assert all(m.source.mlflow is None for m in lora.modules), f"{owner}: an unresolved adapter source reached the pod"
    return [
        "--enable-lora",
        "--lora-modules",
        *(f"{module.name}={adapter_path(module)}" for module in lora.modules),
        "--max-loras",
        str(lora.max_loras),
        "--max-lora-rank",
        str(lora.max_lora_rank),
        "--max-cpu-loras",
        str(lora.max_cpu_loras),
    ]


def adapter_init_containers(plan: ServerPlan) -> list[dict[str, Any]]:
    """Fetch a server's adapter modules before vLLM starts (`adapter_fetch_containers`)."""
    if plan.lora is None:
        return []
    _, mounts = _volumes(plan)
    volume_mounts = [m for m in mounts if m["name"] in ("model-cache", "home", "tmp")]
    hf_env = [e for e in _env(plan) if e["name"] in ("HOME", "HF_HOME", "HF_TOKEN")]
    return adapter_fetch_containers(plan.lora, plan.image, hf_env, volume_mounts)


def adapter_fetch_containers(
    lora: LoraLimits, image: str, hf_env: list[dict[str, Any]], volume_mounts: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """Fetch the adapter modules before vLLM starts, for a server and a batch job alike: the
    Hugging Face ones at their pinned revisions in one container of the vLLM image (`image`, with
    `hf_env`), each S3 one with the CLI as the base weights are; `volume_mounts` hold MODELS_DIR."""
    containers: list[dict[str, Any]] = []
    hugging_face = [m for m in lora.modules if m.source.huggingface is not None]
    if hugging_face:
        triples = [arg for m in hugging_face for arg in (m.source.huggingface, m.source.revision, adapter_path(m))]
        containers.append(
            {
                "name": "fetch-adapters",
                "image": image,
                "command": ["python3", "-c", _HF_ADAPTER_DOWNLOAD, *triples],
                "env": hf_env,
                "resources": FETCH_RESOURCES,
                "volumeMounts": volume_mounts,
                "securityContext": container_security_context(),
            }
        )
    for index, module in enumerate(m for m in lora.modules if m.source.s3_uri is not None):
        source = module.source
        containers.append(
            aws_cli_container(f"fetch-adapter-s3-{index}", s3_sync_command(source, adapter_path(module)), volume_mounts)
        )
    return containers


# The stack's own vLLM settings (ServerArgs), in this order; each field's flag is its name in
# kebab case (`max_num_batched_tokens` -> `--max-num-batched-tokens`, vllm/engine/arg_utils.py
# at v0.33.0). A boolean is vLLM's BooleanOptionalAction: only `true` is written (`false` is
# vLLM's default).
TUNING_FIELDS = (
    "enforce_eager",
    "max_num_batched_tokens",
    "long_prefill_token_threshold",
    "kv_cache_dtype",
    "block_size",
    "cpu_offload_gb",
    "seed",
    "tokenizer_mode",
    "max_logprobs",
)


def tuning_flag(field: str) -> str:
    return "--" + field.replace("_", "-")


def tuning_args(args: ServerArgs) -> list[str]:
    out: list[str] = []
    for field in TUNING_FIELDS:
        value = getattr(args, field)
        if value is None or value is False:
            continue
        out += (
            [tuning_flag(field)]
            if value is True
            else [tuning_flag(field), f"{value:g}" if isinstance(value, float) else str(value)]
        )
    return out


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


# For a container on a GPU node that asks for no GPU: the CUDA base images set NVIDIA_VISIBLE_DEVICES=all, and where
# the node's default container runtime is NVIDIA's (the EKS NVIDIA AMIs') the toolkit would give such a container
# every GPU of the node; `void` gives it none (NVIDIA Container Toolkit, "Specialized configurations": void).
NO_GPU_ENV = ({"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"},)


def token_secret(name: str, namespace: str, token: Any, **labels: str) -> dict[str, Any]:
    """A Hugging Face token as a Secret (`token`: the stack's secret), read by pods through `env.valueFrom`."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": namespace, "labels": standard_labels(name, "credentials", **labels)},
        "type": "Opaque",
        "stringData": {HF_TOKEN_KEY: token},
    }


def gpu_toleration() -> dict[str, str]:
    """Tolerates the GPU pools' taint (components/specs/gpu_sharing.py node_taint), whatever its value."""
    return {"key": GPU_TAINT_KEY, "operator": "Exists", "effect": GPU_TAINT_EFFECT}


def pod_security_context() -> dict[str, Any]:
    """The pod-level half of pod security `restricted`; volumes writable by the containers' group."""
    return {
        "runAsNonRoot": True,
        "runAsUser": RUN_AS,
        "runAsGroup": RUN_AS,
        "fsGroup": RUN_AS,
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def restricted_namespace(name: str, component: str) -> dict[str, Any]:
    """A platform namespace whose pods must meet pod security `restricted` (enforced, audited and warned), like
    every pod the builders here make: the image pre-pull's and the weight mirror's."""
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {
            "name": name,
            "labels": {
                **standard_labels(name, component),
                "pod-security.kubernetes.io/enforce": "restricted",
                "pod-security.kubernetes.io/audit": "restricted",
                "pod-security.kubernetes.io/warn": "restricted",
            },
        },
    }


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
        return f"{SCRATCH_GIB}Gi"
    volume_gib = parse_quantity(plan.model_volume_size) / 2**30
    return f"{math.ceil(volume_gib) + SCRATCH_GIB}Gi"


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


def aws_cli_env() -> list[dict[str, str]]:
    """The aws CLI's environment in a pod: a writable HOME, and no instance metadata. Pods cannot
    reach the instance metadata service (hop limit 1, NetworkPolicy): the credentials and region
    come from the workload identity's injected variables, so the CLI must not spend its start
    probing IMDS (botocore's AWS_EC2_METADATA_DISABLED)."""
    return [{"name": "HOME", "value": HOME_DIR}, {"name": "AWS_EC2_METADATA_DISABLED", "value": "true"}]


# What copying weights or adapter modules in a pod's init container may use.
FETCH_RESOURCES = {"requests": {"cpu": "1", "memory": "2Gi"}, "limits": {"memory": "2Gi"}}


def aws_cli_container(
    name: str, command: list[str], volume_mounts: list[dict[str, Any]], resources: dict[str, Any] = FETCH_RESOURCES
) -> dict[str, Any]:
    """A container of the pinned aws CLI image running `command` with the pods' aws environment: every S3 copy of the
    servers' and batch jobs' pods (weights, adapter modules, a job's stage-in and uploader)."""
    return {
        "name": name,
        "image": AWS_CLI.image,
        "command": command,
        "env": aws_cli_env(),
        "resources": resources,
        "volumeMounts": volume_mounts,
        "securityContext": container_security_context(),
    }


def s3_sync_command(source: ModelSource, destination: str) -> list[str]:
    """The aws CLI copying a pinned S3 source (its prefix's version folder) to a local path: the
    servers' weights and adapters, and the batch jobs' weights."""
    return ["aws", "s3", "sync", "--only-show-errors", pinned_s3_uri(source), destination]


def weights_init_container(plan: ServerPlan) -> dict[str, Any] | None:
    """Copies S3 weights (s3Uri/revision) to the cache volume before vLLM starts; none where
    vLLM streams them itself."""
    source = plan.version.source
    if source.s3_uri is None or plan.weights_streamed:
        return None
    _, mounts = _volumes(plan)
    return aws_cli_container(
        "fetch-weights",
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
    """On a server that streams the weight mirror's copy of a Hugging Face revision: which one (the copy is its
    `--model`)."""
    source = plan.mirrored_from
    if source is None:
        return {}
    return {ANNOTATION_WEIGHTS_MIRRORED_FROM: f"{source.huggingface}@{source.revision}"}


# The addresses a pod's outbound traffic goes to around its sidecar (istio 1.30.3 files/injection-template.yaml).
EXCLUDE_OUTBOUND_ANNOTATION = "traffic.sidecar.istio.io/excludeOutboundIPRanges"


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
        # names that address, so REGISTRY_ONLY (tenancy.egress_sidecar) would drop it. Read by the
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


def node_spread(selector: Mapping[str, str], *, required: bool = False) -> list[dict[str, Any]]:
    """Pods matching `selector` spread over nodes, one more on a node than on any other at most: as the scheduler can
    (`ScheduleAnyway`), or `required` (`DoNotSchedule`: a replica waits for a node of its own rather than share one,
    for what every request depends on)."""
    return [
        {
            "maxSkew": 1,
            "topologyKey": "kubernetes.io/hostname",
            "whenUnsatisfiable": "DoNotSchedule" if required else "ScheduleAnyway",
            "labelSelector": {"matchLabels": dict(selector)},
        }
    ]


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
