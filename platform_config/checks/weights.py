"""Model weights: where they come from (S3 and the weight mirror need EKS; a streaming pool streams from S3; in
production, Hugging Face only through the weight mirror), whether they fit the node's disk and the GPU's memory, and
how long a cold start takes to load them."""

from __future__ import annotations

from decimal import Decimal
from typing import Iterator

from ..adapters import adapter_files_bytes
from ..cold_start import (
    S3_STREAM,
    cold_start,
    instance_of,
    model_volume_size,
    node_disk,
    node_disk_gib,
    scale_up_budget_seconds,
    show_minutes,
    streams_weights,
)
from ..errors import ConfigIssue
from ..memory_fit import rank_memory, weights_bytes
from ..models import ModelSource, PlatformConfig
from ..profiles import PROFILES
from ..quantity import parse_quantity, show_gib_above
from ..serving import merged_server_args
from ..weight_mirror import mirrored_source
from .models import placed_models


def s3_needs_eks(what: str) -> str:
    """What S3 `what` (weights, adapters) on a cluster that is not EKS are told: the pod reads them with an IAM role."""
    return (
        f"S3 {what} are read with an IAM role for the pod (EKS Pod Identity or IRSA): use a Hugging Face source "
        "on a kubeconfig cluster, or run on EKS"
    )


def check_s3_weights_need_eks(config: PlatformConfig) -> Iterator[ConfigIssue]:
    for index, model, _ in placed_models(config):
        if any(v.source.s3_uri for v in model.versions) and config.cluster.mode != "eks":
            yield ConfigIssue(
                ("models", index, "versions"),
                s3_needs_eks("weights"),
            )


def check_weights_cache_fits_the_node_disk(config: PlatformConfig) -> Iterator[ConfigIssue]:
    """The model volume (`model_volume_size`) fits the disk the pool's emptyDirs are on (the instance store's RAID0,
    or the root volume): `cacheSize` where it holds the weights; on a streaming pool, which keeps one only for the LoRA
    modules a replica loads, their estimated files (`cacheSize` when the base's shape is unknown)."""
    for index, model, pool in placed_models(config):
        size = model_volume_size(config, model)
        disk = node_disk_gib(pool)
        if size is None or parse_quantity(size) <= Decimal(disk) * 2**30:
            continue
        where = f"the {disk} GiB disk of pool {pool.name!r} ({node_disk(pool)})"
        if not streams_weights(pool):
            yield ConfigIssue(("models", index, "resources", "cacheSize"), f"{size} of weights cache does not fit {where}")
        elif adapter_files_bytes(config, model) is None:
            yield ConfigIssue(
                ("models", index, "resources", "cacheSize"),
                f"{size} of model volume for the LoRA adapters does not fit {where}: the pool streams the weights, and "
                "without the base's shape the adapters' volume is cacheSize; set lora.baseShape to size it from the "
                "adapters, or lower cacheSize",
            )
        else:
            yield ConfigIssue(
                ("models", index, "adapters"), f"the LoRA adapters' files (about {size} with margin) do not fit {where}"
            )


def check_weight_mirror_needs_eks(config: PlatformConfig) -> Iterator[ConfigIssue]:
    """The mirror's Jobs write, and the servers read, the bucket with IAM roles for their pods (EKS Pod Identity or
    IRSA), which only an EKS cluster the platform creates gives them."""
    if config.weight_mirror is not None and config.cluster.mode != "eks":
        yield ConfigIssue(
            ("weightMirror",),
            "needs cluster.mode 'eks': the mirror's Jobs and the servers reach the bucket with IAM roles for their pods; "
            "on a kubeconfig cluster leave 'weightMirror' out and serve Hugging Face versions from a pool that caches "
            "weights (rootVolume)",
        )


def check_streamed_weights_come_from_s3(config: PlatformConfig) -> Iterator[ConfigIssue]:
    """On a pool that streams weights (`weightCache.medium: s3Stream`) every version's weights are in S3: vLLM 0.33.0
    streams only object-store URIs (`is_runai_obj_uri`, vllm/transformers_utils/runai_utils.py) and would download a
    Hugging Face repository to local disk first, which the pod then has no room for; with a `weightMirror` a Hugging
    Face version streams from its copy there (platform_config/weight_mirror.py). An `mlflow` source is checked once
    the registry resolved it (platform_config/loader.py runs the checks again)."""
    pool_index = {p.name: i for i, p in enumerate(config.node_pools)}
    for m_index, model, pool in placed_models(config):
        if not streams_weights(pool):
            continue
        for v_index, version in enumerate(model.versions):
            source = version.source
            if source.s3_uri is not None or source.mlflow is not None or mirrored_source(config, model, version):
                continue
            yield ConfigIssue(
                ("models", m_index, "versions", v_index, "source"),
                f"is Hugging Face ({source.huggingface!r}), but pool {pool.name!r} streams weights from S3 "
                f"(nodePools[{pool_index[pool.name]}].weightCache.medium={S3_STREAM}): allowed are 's3Uri' (with the "
                "version's subfolder as 'revision'), or 'mlflow' naming weights in S3; or set 'weightMirror' to copy "
                "Hugging Face revisions to S3; or put the model on a pool that caches weights (instanceStore, rootVolume)",
            )


def _hugging_face_sources(config: PlatformConfig) -> Iterator[tuple[tuple[str | int, ...], ModelSource]]:
    """Every Hugging Face source of weights the config names, under its key: the models' versions, their adapters
    (and the adapters' revisions), the batch jobs' models (after registry resolution, what the registry named)."""
    for m_index, model in enumerate(config.models):
        for v_index, version in enumerate(model.versions):
            yield ("models", m_index, "versions", v_index, "source"), version.source
        for a_index, adapter in enumerate(model.adapters):
            if adapter.source is not None:
                yield ("models", m_index, "adapters", a_index, "source"), adapter.source
            for r_index, revision in enumerate(adapter.versions or []):
                yield ("models", m_index, "adapters", a_index, "versions", r_index, "source"), revision.source
    for j_index, job in enumerate(config.batch_jobs):
        yield ("batchJobs", j_index, "model", "source"), job.model.source


def check_production_reads_hugging_face_from_the_mirror(config: PlatformConfig) -> Iterator[ConfigIssue]:
    """In production no pod of a tenant's downloads from Hugging Face, so that no tenant's namespace needs HTTPS to
    any address (Hugging Face's CDN hosts are wildcards the egress gateway cannot forward: docs/design/security.md):
    the weight mirror copies every Hugging Face revision a server, an adapter's fetcher or a batch job reads, and its
    pods read the copy (platform_config/weight_mirror.py), so a Hugging Face source there needs `weightMirror`. A batch
    job's Hugging Face dataset, which the mirror does not copy, is refused: its files go to the tenant's S3."""
    if config.environment != "production":
        return
    if config.weight_mirror is None:
        for key, source in _hugging_face_sources(config):
            if source.huggingface is not None:
                yield ConfigIssue(
                    key,
                    f"is Hugging Face ({source.huggingface!r}), which a production stack's pods do not download "
                    "themselves (their namespace would need HTTPS to any address): set 'weightMirror' to copy it to "
                    "S3 first, where they read it, or give an 's3Uri' source",
                )
    for j_index, job in enumerate(config.batch_jobs):
        if job.input.huggingface is not None:
            yield ConfigIssue(
                ("batchJobs", j_index, "input", "huggingface"),
                f"is a Hugging Face dataset ({job.input.huggingface!r}), which a production stack's pods do not "
                "download themselves and the weight mirror does not copy: put its files under the tenant's s3Prefixes "
                "and give 'input.s3Uri' with the folder as 'revision'",
            )


def check_cold_start_within_scale_up_budget(config: PlatformConfig) -> Iterator[ConfigIssue]:
    """A latency-sensitive model whose expected cold start (image, weights, engine start on its pool's weight cache)
    is longer than the scale-up budget (`coldStart.scaleUpBudget`) keeps a warm minimum: a peak must not wait for its
    first replica."""
    budget = scale_up_budget_seconds(config)
    for index, model, _ in placed_models(config):
        if not PROFILES[model.profile].latency_sensitive or model.autoscaling.min_replicas > 0:
            continue
        start = cold_start(config, model)
        if start.total_seconds > budget:
            yield ConfigIssue(
                ("models", index, "autoscaling", "minReplicas"),
                f"profile {model.profile!r} is latency-sensitive and a new replica takes {show_minutes(start.total_seconds)} "
                f"on pool {start.pool!r} ({start.arithmetic()}), more than the scale-up budget "
                f"coldStart.scaleUpBudget={config.cold_start.scale_up_budget}: keep a warm minimum (minReplicas > 0), or "
                "a faster weight cache (nodePools[].weightCache)",
            )


def check_weights_fit_gpu_memory(config: PlatformConfig) -> Iterator[ConfigIssue]:
    """A replica's share of the weights (`resources.weightsSize` over its GPUs) fits in what vLLM takes of one GPU, MIG
    slice or time-sliced share (platform_config/memory_fit.py): otherwise vLLM stops at load with CUDA out of
    memory, before any KV cache. The KV cache is sized, from the model's architecture, by the preview's Serving
    performance stage."""
    for index, model, pool in placed_models(config):
        weights = weights_bytes(model)
        if weights is None:
            continue
        instance = instance_of(pool)
        for version_index, version in enumerate(model.versions):
            memory = rank_memory(instance.gpu, pool, model, merged_server_args(model, version))
            if weights / memory.ranks <= memory.budget_bytes:
                continue
            device = {
                "mig": f"on its {memory.mig_profile} slice",
                "timeSliced": f"on its share of a GPU ({memory.shared_by} pods)",
            }.get(memory.kind, f"per GPU ({memory.ranks} per replica)")
            # Named where the share that does not hold them is set: the version's, the model's, else the weights.
            path: tuple[str | int, ...] = ("models", index, "resources", "weightsSize")
            if version.server.gpu_memory_utilization is not None:
                path = ("models", index, "versions", version_index, "server", "gpuMemoryUtilization")
            elif model.server.gpu_memory_utilization is not None:
                path = ("models", index, "server", "gpuMemoryUtilization")
            yield ConfigIssue(
                path,
                f"version {version.name!r}: the weights ({model.resources.weights_size}) need "
                f"{show_gib_above(weights // memory.ranks)} "
                f"{device} on pool {pool.name!r}, but vLLM takes {memory.fraction:g} of the "
                f"{show_gib_above(memory.capacity_bytes)} of {instance.gpu.name}"
                f"{' (its slice)' if memory.kind == 'mig' else ''}: "
                f"{show_gib_above(memory.budget_bytes)}, so they cannot load; give a replica more GPUs (resources.gpus, tensor "
                "parallel), a larger GPU or a quantized checkpoint",
            )
            break
