"""Models: what they name exists, where they run suits their profile, and their servers' settings hold together.

`placed_models` is the models whose pool exists, which the rules of other domains walk too.
"""

from __future__ import annotations

import re
from typing import Iterator

from ..chat_templates import TemplateProblem, read_chat_template
from ..errors import ConfigIssue
from ..models import ModelConfig, NodePoolConfig, PlatformConfig, ServerArgs
from ..pins import VLLM
from ..profiles import PROFILES
from ..serving import DRAIN_MARGIN_SECONDS, GPU_MEMORY_UTILIZATION_MAX, effective_profile, model_tiers, time_sliced_memory_share


def placed_models(config: PlatformConfig) -> Iterator[tuple[int, ModelConfig, NodePoolConfig]]:
    """(index, model, its pool) for every model whose pool exists (check_model_references reports the rest)."""
    pools = {p.name: p for p in config.node_pools}
    for index, model in enumerate(config.models):
        if model.pool in pools:
            yield index, model, pools[model.pool]


def check_model_references(config: PlatformConfig) -> Iterator[ConfigIssue]:
    """A model names a tenant, a node pool and callers that exist."""
    tenants = [t.name for t in config.tenants]
    pools = [p.name for p in config.node_pools]
    for index, model in enumerate(config.models):
        if model.tenant not in tenants:
            yield ConfigIssue(("models", index, "tenant"), f"unknown tenant {model.tenant!r}; tenants: {', '.join(tenants)}")
        if model.pool not in pools:
            yield ConfigIssue(("models", index, "pool"), f"unknown node pool {model.pool!r}; pools: {', '.join(pools)}")
        for position, caller in enumerate(model.callers):
            if caller not in tenants:
                yield ConfigIssue(
                    ("models", index, "callers", position), f"unknown tenant {caller!r}; tenants: {', '.join(tenants)}"
                )


def check_release_versions(config: PlatformConfig) -> Iterator[ConfigIssue]:
    """A release's stable and canary are versions the model declares."""
    for index, model in enumerate(config.models):
        versions = {v.name for v in model.versions}
        for key, name in (("stable", model.release.stable), ("canary", model.release.canary)):
            if name is not None and name not in versions:
                yield ConfigIssue(
                    ("models", index, "release", key),
                    f"version {name!r} is not among the model's versions ({', '.join(sorted(versions))})",
                )


def check_latency_sensitive_not_time_sliced(config: PlatformConfig) -> Iterator[ConfigIssue]:
    """The policy of the same name enforces it on the rendered pods."""
    for index, model, pool in placed_models(config):
        if PROFILES[model.profile].latency_sensitive and pool.sharing.mode == "timeSlicing":
            yield ConfigIssue(
                ("models", index, "pool"),
                f"profile {model.profile!r} is latency-sensitive but pool {pool.name!r} shares GPUs by time-slicing, "
                "which gives no isolation; use a whole-GPU or MIG pool, or a throughput profile (summarization, batch-labelling)",
            )


def check_scale_to_zero_only_where_the_profile_allows(config: PlatformConfig) -> Iterator[ConfigIssue]:
    """Stack overrides change a profile's defaults, never its scale-to-zero rule (the
    knative-autoscaling policy holds latency-sensitive services to min-scale >= 1)."""
    for index, model, _ in placed_models(config):
        if model.autoscaling.min_replicas == 0 and not PROFILES[model.profile].scale_to_zero:
            yield ConfigIssue(
                ("models", index, "autoscaling", "minReplicas"),
                f"profile {model.profile!r} is never scaled to zero (a cold start takes minutes); minReplicas must be at least 1",
            )


def check_batch_labelling_kept_apart(config: PlatformConfig) -> Iterator[ConfigIssue]:
    latency_pools = {m.pool for m in config.models if PROFILES[m.profile].latency_sensitive}
    latency_tenants = {m.tenant for m in config.models if PROFILES[m.profile].latency_sensitive}
    for index, model, _ in placed_models(config):
        if model.profile != "batch-labelling":
            continue
        if model.pool in latency_pools:
            yield ConfigIssue(
                ("models", index, "pool"),
                f"batch labelling is kept apart from real-time work, but pool {model.pool!r} also serves latency-sensitive "
                "models",
            )
        if model.tenant in latency_tenants:
            yield ConfigIssue(
                ("models", index, "tenant"),
                f"batch labelling is kept apart from real-time work, but namespace {model.tenant!r} also serves "
                "latency-sensitive models",
            )


def check_time_sliced_memory_share(config: PlatformConfig) -> Iterator[ConfigIssue]:
    for index, model, pool in placed_models(config):
        if pool.sharing.mode != "timeSlicing" or not pool.sharing.replicas:
            continue
        limit = time_sliced_memory_share(GPU_MEMORY_UTILIZATION_MAX, pool.sharing.replicas)
        servers: list[tuple[tuple[str | int, ...], ServerArgs]] = [(("models", index, "server"), model.server)]
        servers += [(("models", index, "versions", i, "server"), v.server) for i, v in enumerate(model.versions)]
        for path, server in servers:
            share = server.gpu_memory_utilization
            if share is not None and share > limit:
                yield ConfigIssue(
                    (*path, "gpuMemoryUtilization"),
                    f"{share} of the GPU's memory, but {pool.sharing.replicas} pods share each GPU of pool {pool.name!r}: "
                    f"at most {limit}",
                )


def check_inference_graceful_drain(config: PlatformConfig) -> Iterator[ConfigIssue]:
    """The inference-graceful-drain policy's chain: preStop, then vLLM's drain, within the grace."""
    for index, model, _ in placed_models(config):
        drain = model.drain
        if drain.pre_stop_delay_seconds + DRAIN_MARGIN_SECONDS >= drain.termination_grace_period_seconds:
            yield ConfigIssue(
                ("models", index, "drain"),
                f"preStopDelaySeconds {drain.pre_stop_delay_seconds} + {DRAIN_MARGIN_SECONDS} s leaves vLLM no time to drain "
                f"within terminationGracePeriodSeconds {drain.termination_grace_period_seconds}",
            )


def check_chat_templates(config: PlatformConfig) -> Iterator[ConfigIssue]:
    """A version's chat template is a committed file that matches its pin, on a server that answers chat: an embeddings
    server (`--runner pooling`) applies none."""
    for m_index, model in enumerate(config.models):
        for v_index, version in enumerate(model.versions):
            template = version.chat_template
            if template is None:
                continue
            here = ("models", m_index, "versions", v_index, "chatTemplate")
            if effective_profile(config, model).runner == "pooling":
                yield ConfigIssue(here, f"profile {model.profile!r} serves embeddings: no chat request reaches a template")
                continue
            read = read_chat_template(template)
            if isinstance(read, TemplateProblem):
                yield ConfigIssue((*here, read.key), read.message)


def check_batch_models(config: PlatformConfig) -> Iterator[ConfigIssue]:
    """A model's batch model exists, is another model, serves the batch tier and keeps it."""
    models = config.models_by_name
    for index, model in enumerate(config.models):
        if model.batch_model is None:
            continue
        here = ("models", index, "batchModel")
        target = models.get(model.batch_model)
        if target is None:
            yield ConfigIssue(here, f"unknown model {model.batch_model!r}; models: {', '.join(models)}")
        elif target.name == model.name:
            yield ConfigIssue(here, "a model cannot be its own batch model")
        elif "batch" not in model_tiers(config, target):
            yield ConfigIssue(
                here, f"model {target.name!r} does not serve the batch tier (its tiers: {', '.join(model_tiers(config, target))})"
            )
        elif target.batch_model is not None:
            yield ConfigIssue(
                here, f"model {target.name!r} sends its own batch tier elsewhere; point at the model that serves it"
            )


# A vLLM release image: `vllm/vllm-openai` on Docker Hub or under a mirror of it (an ECR pull-through cache, a
# registry of one's own), tagged with a release, a digest after the tag or not.
_RELEASE_TAG = re.compile(r"v[0-9]+\.[0-9]+\.[0-9]+")


def vllm_release_version(image: str) -> str | None:
    """The vLLM release an image names (`vllm/vllm-openai:v0.33.0`, under a mirror's registry or Docker Hub's, a
    digest after the tag or not): `0.33.0`; None for any other image, whose flags no release can be checked against."""
    name, _, tag = image.split("@", 1)[0].rpartition(":")
    if not name or "/" in tag or not (name == VLLM.repository or name.endswith("/" + VLLM.repository)):
        return None
    return tag.removeprefix("v") if _RELEASE_TAG.fullmatch(tag) else None


def check_production_server_images(config: PlatformConfig) -> Iterator[ConfigIssue]:
    """In production a version's own image is a vLLM release: its repository ends in `vllm/vllm-openai` (Docker
    Hub's, or a mirror's such as an ECR pull-through cache, which the pack's allowedRepositories must also list),
    tagged `v<version>`. An image of anyone's would run on the GPU nodes with the server's roles, and a build of one's
    own has flags no release can be checked against."""
    if config.environment != "production":
        return
    for m_index, model in enumerate(config.models):
        for v_index, version in enumerate(model.versions):
            if version.image is not None and vllm_release_version(version.image) is None:
                yield ConfigIssue(
                    ("models", m_index, "versions", v_index, "image"),
                    f"{version.image!r} is not a vLLM release image: production runs {VLLM.repository}:v<version> "
                    f"(such as {VLLM.image}), from Docker Hub or a mirror of it, whose flags the preview checks against "
                    "that release",
                )
