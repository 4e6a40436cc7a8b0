"""A batch job's objects (pure functions): the Indexed `batch/v1` Job that runs vLLM's offline
batch runner over one shard per completion index, queued through Kueue, and the ConfigMap that
ships the shard runner (components/batch_runner/batch_runner.py).

Per pod: `stage-in` (aws-cli) copies the input's JSONL files from S3 and the shard's finished
chunks back from the output; `fetch-weights` copies S3 weights (the job's own, or the weight mirror's copy of its
Hugging Face model) as the servers do, and the job's LoRA adapter is fetched by the servers' own init containers
(specs/vllm_parts.py adapter_fetch_containers); then `runner`
(the pinned vLLM image) runs `vllm run-batch` per chunk, and `uploader` (aws-cli) copies each
finished chunk to `<output>/shard-<index>/` as it appears and once more when the runner exits,
exiting with the runner's code. Kueue's objects are in specs/kueue.py.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from platform_config.models import BatchJobConfig, duration_seconds, pinned_s3_uri
from platform_config.profiles import EXPERIMENT_PRIORITY_CLASS
from platform_config.serving import MESH_PROXY_RESOURCES

from ..constants import BATCH_JOB_COMPONENT, LABEL_POOL, LABEL_TENANT, standard_labels
from ..shapes import BatchJobPlan
from .kueue import BATCH_PRIORITY_CLASS, PRIORITY_CLASS_LABEL, QUEUE_NAME_LABEL, local_queue_name
from .network import POD_IDENTITY_AGENT_CIDRS
from .pod_parts import (
    EXCLUDE_OUTBOUND_ANNOTATION,
    HF_TOKEN_KEY,
    HF_TOKEN_SECRET,
    HOME_DIR,
    aws_cli_container,
    container_security_context,
    gpu_toleration,
    mesh_sidecar_size_annotations,
    pod_security_context,
)
from .scripts import (
    INPUT_DIR,
    OUTPUT_DIR,
    STATUS_FILE,
    WORK_DIR,
    s3_sync_command,
    stage_in_script,
    uploader_script,
)
from .vllm_parts import HF_HOME, HF_HUB_OFFLINE, MODELS_DIR, adapter_fetch_containers, lora_flags, tuning_args

RUNNER_SOURCE = Path(__file__).resolve().parent.parent / "batch_runner" / "batch_runner.py"
RUNNER_KEY = "batch_runner.py"
RUNNER_DIR = "/opt/batch-runner"
WEIGHTS_DIR = f"{MODELS_DIR}/weights"
# The runner's environment variable naming a Hugging Face dataset input (batch_runner.py reads it).
BATCH_INPUT_HF_REPO = "BATCH_INPUT_HF_REPO"
# The runner's exit code for an input line that is not a batch request: retrying cannot help.
INPUT_ERROR_EXIT_CODE = 2
# Seconds a stopping pod has for the uploader's last copy (the runner stops at once; the chunk it
# was running is redone on resume).
GRACE_SECONDS = 120
# What the two aws-cli containers ask for.
AWS_CLI_RESOURCES = {"requests": {"cpu": "250m", "memory": "512Mi"}, "limits": {"memory": "512Mi"}}


def runner_config_map_name(plan: BatchJobPlan) -> str:
    return f"batch-{plan.name}-runner"


def _labels(plan: BatchJobPlan) -> dict[str, str]:
    return standard_labels(plan.name, BATCH_JOB_COMPONENT, **{LABEL_TENANT: plan.namespace, LABEL_POOL: plan.pool.name})


def runner_config_map(plan: BatchJobPlan) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": runner_config_map_name(plan), "namespace": plan.namespace, "labels": _labels(plan)},
        "data": {RUNNER_KEY: RUNNER_SOURCE.read_text(encoding="utf-8")},
    }


def model_location(plan: BatchJobPlan) -> str:
    """The engine's `--model`: a Hugging Face repository it downloads itself, else the folder `fetch-weights` fills."""
    source = plan.model_source
    return source.huggingface if source.huggingface is not None else f"{WEIGHTS_DIR}/{plan.name}"


def engine_command(plan: BatchJobPlan) -> list[str]:
    """`vllm run-batch` with the engine flags of `vllm serve` (vllm/entrypoints/launchers/run_batch.py
    make_arg_parser adds AsyncEngineArgs' flags; the preview's upstream stage checks each against
    vLLM 0.33.0's flags); the runner adds `-i` and `-o` per chunk."""
    model = plan.job.model
    args = model.server
    out = [
        "vllm",
        "run-batch",
        "--model",
        model_location(plan),
        "--served-model-name",
        model.served_model_name,
        "--tensor-parallel-size",
        str(plan.gpu_count if plan.gpu_resource.endswith("/gpu") else 1),
    ]
    source = plan.model_source
    if source.huggingface is not None and source.revision is not None:
        out += ["--revision", source.revision]
    if args.max_model_len is not None:
        out += ["--max-model-len", str(args.max_model_len)]
    if args.gpu_memory_utilization is not None:
        out += ["--gpu-memory-utilization", f"{args.gpu_memory_utilization:g}"]
    if args.max_num_seqs is not None:
        out += ["--max-num-seqs", str(args.max_num_seqs)]
    if args.quantization is not None:
        out += ["--quantization", args.quantization]
    if args.dtype is not None:
        out += ["--dtype", args.dtype]
    # Batch inputs often share a long instruction prefix.
    out.append("--enable-prefix-caching")
    # The job's adapter, with the servers' flags. vLLM 0.33.0's run-batch parses them all
    # (vllm/entrypoints/launchers/run_batch.py make_arg_parser: BatchFrontendArgs, a BaseFrontendArgs
    # with `lora_modules` from entrypoints/common/cli_args.py, then AsyncEngineArgs' LoRA flags) and
    # serves the modules through the API server's own state (build_endpoint_registry →
    # init_app_state), read in the 0.33.0 source release on PyPI.
    lora = lora_flags(plan.lora, plan.name) if plan.lora is not None else []
    return out + lora + tuning_args(args)


def _mounts(*names: str) -> list[dict[str, Any]]:
    paths = {"work": WORK_DIR, "models": MODELS_DIR, "home": HOME_DIR, "tmp": "/tmp", "runner": RUNNER_DIR, "dshm": "/dev/shm"}
    return [{"name": n, "mountPath": paths[n], **({"readOnly": True} if n == "runner" else {})} for n in names]


def stage_in_container(plan: BatchJobPlan) -> dict[str, Any]:
    source = plan.job.input
    script = stage_in_script(pinned_s3_uri(source) if source.s3_uri is not None else None, plan.job.output)
    return aws_cli_container(
        "stage-in", plan.aws_cli_image, ["sh", "-ec", script], _mounts("work", "home", "tmp"), AWS_CLI_RESOURCES
    )


def fetch_weights_container(plan: BatchJobPlan) -> dict[str, Any] | None:
    """Copies S3 weights (the job's own, or the weight mirror's copy of its Hugging Face model) before the runner
    starts; none where the engine downloads them from Hugging Face itself."""
    source = plan.model_source
    if source.s3_uri is None:
        return None
    return aws_cli_container(
        "fetch-weights", plan.aws_cli_image, s3_sync_command(source, model_location(plan)), _mounts("models", "home", "tmp")
    )


def fingerprint(plan: BatchJobPlan) -> str:
    """What a shard's chunks are made from. The runner keeps it beside them and refuses to resume
    into an output prefix holding chunks of another model, input or chunking (a changed Job is
    replaced, and its new pods would otherwise skip chunks the old ones wrote). The configured sources: the weight
    mirror's copy of a revision is that revision, so reading it instead resumes the same chunks."""
    job_config = plan.job
    return json.dumps(
        {
            "model": job_config.model.source.model_dump(by_alias=True, exclude_none=True),
            **(
                {"adapter": {m.name: m.source.model_dump(by_alias=True, exclude_none=True) for m in plan.lora.modules}}
                if plan.lora is not None
                else {}
            ),
            "input": job_config.input.model_dump(by_alias=True, exclude_none=True),
            "shardLines": job_config.shard_lines,
            "chunkLines": job_config.chunk_lines,
        },
        sort_keys=True,
    )


def runner_container(plan: BatchJobPlan) -> dict[str, Any]:
    job = plan.job
    env: list[dict[str, Any]] = [
        {"name": "HOME", "value": HOME_DIR},
        {"name": "HF_HOME", "value": HF_HOME},
        {"name": "XDG_CACHE_HOME", "value": f"{HOME_DIR}/.cache"},
        {"name": "VLLM_CACHE_ROOT", "value": f"{HOME_DIR}/.cache/vllm"},
        {"name": "TRITON_CACHE_DIR", "value": f"{HOME_DIR}/.cache/triton"},
        {"name": "VLLM_NO_USAGE_STATS", "value": "1"},
        {"name": "DO_NOT_TRACK", "value": "1"},
        {"name": "BATCH_SHARD_LINES", "value": str(job.shard_lines)},
        {"name": "BATCH_CHUNK_LINES", "value": str(job.chunk_lines)},
        {"name": "BATCH_TOTAL_LINES", "value": str(job.lines)},
        {"name": "BATCH_OUTPUT_DIR", "value": OUTPUT_DIR},
        {"name": "BATCH_SCRATCH_DIR", "value": "/tmp"},
        {"name": "BATCH_STATUS_FILE", "value": STATUS_FILE},
        {"name": "BATCH_FINGERPRINT", "value": fingerprint(plan)},
    ]
    if job.input.huggingface is not None:
        env += [
            {"name": BATCH_INPUT_HF_REPO, "value": job.input.huggingface},
            {"name": "BATCH_INPUT_HF_REVISION", "value": str(job.input.revision)},
            {"name": "BATCH_INPUT_FILES", "value": json.dumps(job.input.files)},
        ]
    else:
        env.append({"name": "BATCH_INPUT_DIR", "value": INPUT_DIR})
    if plan.hugging_face_token:
        env.append({"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": HF_TOKEN_SECRET, "key": HF_TOKEN_KEY}}})
    if not plan.reads_hugging_face:
        env.append(HF_HUB_OFFLINE)
    gpu = {plan.gpu_resource: str(plan.gpu_count)}
    resources = job.model.resources
    return {
        "name": "runner",
        "image": plan.image,
        "command": ["python3", f"{RUNNER_DIR}/{RUNNER_KEY}"],
        "args": engine_command(plan),
        "env": env,
        # No ephemeral-storage request: Kueue's ClusterQueues do not cover it (specs/kueue.py);
        # the volumes' sizeLimits bound the disk.
        "resources": {
            "requests": {"cpu": resources.cpu, "memory": resources.memory, **gpu},
            "limits": {"memory": resources.memory, **gpu},
        },
        "volumeMounts": _mounts("work", "models", "home", "tmp", "runner", "dshm"),
        "securityContext": container_security_context(),
    }


def uploader_container(plan: BatchJobPlan) -> dict[str, Any]:
    script = uploader_script(plan.job.output)
    return aws_cli_container(
        "uploader", plan.aws_cli_image, ["sh", "-c", script], _mounts("work", "home", "tmp"), AWS_CLI_RESOURCES
    )


def _volumes(plan: BatchJobPlan) -> list[dict[str, Any]]:
    resources = plan.job.model.resources
    shm = "16Gi" if plan.gpu_count > 1 else "2Gi"
    return [
        {"name": "work", "emptyDir": {"sizeLimit": "20Gi"}},
        {"name": "models", "emptyDir": {"sizeLimit": resources.cache_size}},
        {"name": "home", "emptyDir": {"sizeLimit": "20Gi"}},
        {"name": "tmp", "emptyDir": {"sizeLimit": "10Gi"}},
        {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": shm}},
        {"name": "runner", "configMap": {"name": runner_config_map_name(plan), "defaultMode": 0o444}},
    ]


def pod_annotations() -> dict[str, str]:
    """The mesh's sidecar, so a batch pod reaches outside the cluster only the hosts its namespace's
    ServiceEntries name (network.egress_sidecar). As a native sidecar (an init container with
    restartPolicy Always, Kubernetes 1.29+; the platform's versions are 1.30 to 1.34) it ends with
    the pod's containers, so the Job completes, and it starts first, so `stage-in` and `fetch-weights`
    are in the mesh too (istio 1.30.3 files/injection-template.yaml line 29 reads the annotation;
    pkg/kube/inject/webhook.go reorderPod: "{istio-init/istio-validation} => proxy => rest"); on
    SIGTERM the kubelet stops it after the uploader's last copy. Its size is stated, as the servers'
    is, and declared in the template (MESH_SIDECAR_STUB), so Kueue counts it as the namespace's
    quotas do; the Pod Identity Agent's credentials call goes around it (pod.py pod_annotations)."""
    return {
        "sidecar.istio.io/nativeSidecar": "true",
        **mesh_sidecar_size_annotations(),
        EXCLUDE_OUTBOUND_ANNOTATION: ",".join(POD_IDENTITY_AGENT_CIDRS),
    }


# The mesh's sidecar as the Job's template declares it, so Kueue counts it: Kueue sums the template's
# requests (v0.19.2 pkg/controller/jobs/job/job_controller.go PodSets, pkg/workload/workload.go
# through component-helpers' PodRequests, which adds restartPolicy-Always init containers to the pod's
# total), and the injector adds its sidecar only to the pod, at creation. Istio merges a container of
# the injected one's name into it (1.30.3 pkg/kube/inject/webhook.go: FindContainerFromPod, then
# applyInitContainer; `image: auto` keeps the injector's image), so this stub only states the size.
MESH_SIDECAR_STUB = {
    "name": "istio-proxy",
    "image": "auto",
    "restartPolicy": "Always",
    "resources": {
        "requests": {"cpu": MESH_PROXY_RESOURCES["cpu"], "memory": MESH_PROXY_RESOURCES["memory"]},
        "limits": {"memory": MESH_PROXY_RESOURCES["memory"]},
    },
    # What the injector's own sets too (files/injection-template.yaml), stated for the checks that read
    # the template; its user (1337, which istio-iptables lets out) is the injector's to set.
    "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}, "runAsNonRoot": True},
}


def pod_spec(plan: BatchJobPlan) -> dict[str, Any]:
    init = [json.loads(json.dumps(MESH_SIDECAR_STUB)), stage_in_container(plan)]
    weights = fetch_weights_container(plan)
    if weights is not None:
        init.append(weights)
    if plan.lora is not None:
        hf_env = [e for e in runner_container(plan)["env"] if e["name"] in ("HOME", "HF_HOME", "HF_TOKEN")]
        init += adapter_fetch_containers(plan.lora, plan.image, plan.aws_cli_image, hf_env, _mounts("models", "home", "tmp"))
    return {
        "restartPolicy": "Never",
        # Batch pods are experiments to the scheduler and the namespace quotas (`<tenant>-experiment`).
        "priorityClassName": EXPERIMENT_PRIORITY_CLASS,
        # The pool's flavor (specs/kueue.py) has these node labels and taints: Kueue assigns it.
        "nodeSelector": {LABEL_POOL: plan.pool.name},
        "tolerations": [gpu_toleration()],
        "serviceAccountName": plan.service_account,
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "terminationGracePeriodSeconds": GRACE_SECONDS,
        "securityContext": pod_security_context(),
        "initContainers": init,
        "containers": [runner_container(plan), uploader_container(plan)],
        "volumes": _volumes(plan),
    }


def job_name(job_config: BatchJobConfig) -> str:
    """The Job's name (what kube-state-metrics labels its series `job_name` with)."""
    return f"batch-{job_config.name}"


def job(plan: BatchJobPlan) -> dict[str, Any]:
    """The Indexed Job. No `spec.suspend`: Kueue's webhook creates it suspended and Kueue owns
    the field from then on (it unsuspends on admission and suspends on eviction); pausing is the
    job's LocalQueue's stopPolicy (specs/kueue.py)."""
    job_config = plan.job
    labels = {**_labels(plan), QUEUE_NAME_LABEL: local_queue_name(job_config), PRIORITY_CLASS_LABEL: BATCH_PRIORITY_CLASS}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": job_name(job_config),
            "namespace": plan.namespace,
            "labels": labels,
            # `pulumi up` must not wait hours for the job to finish (pulumi-kubernetes awaits Jobs).
            "annotations": {"pulumi.com/skipAwait": "true"},
        },
        "spec": {
            "completionMode": "Indexed",
            "completions": plan.shards,
            "parallelism": min(job_config.parallelism, plan.shards),
            "backoffLimitPerIndex": job_config.retries_per_shard,
            # The clock restarts whenever Kueue resumes the job (the Job's startTime is reset on unsuspend).
            "activeDeadlineSeconds": math.ceil(duration_seconds(job_config.deadline)),
            "podFailurePolicy": {
                "rules": [
                    # Preempted or evicted pods are not failures of the shard.
                    {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]},
                    # A malformed input line fails its shard at once.
                    {
                        "action": "FailIndex",
                        "onExitCodes": {"containerName": "runner", "operator": "In", "values": [INPUT_ERROR_EXIT_CODE]},
                    },
                ]
            },
            "template": {
                "metadata": {"labels": _labels(plan), "annotations": pod_annotations()},
                "spec": pod_spec(plan),
            },
        },
    }
