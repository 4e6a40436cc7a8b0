"""LoRA adapters (platform_config/adapters.py): their names, revisions, ranks, sources, tenants and memory."""

from __future__ import annotations

from decimal import Decimal
from typing import Iterator

from ..adapters import (
    adapter_on_own_tenants_base,
    adapter_tenant,
    carried_adapters,
    lora_limits,
    lora_memory,
    on_adapter_base,
    served_names,
    smallest_rank_choice,
)
from ..cold_start import instance_of
from ..errors import ConfigIssue
from ..memory_fit import rank_memory
from ..models import LoraAdapter, ModelSource, PlatformConfig, off_the_steps
from ..profiles import GENERATING_PROFILES
from ..quantity import parse_quantity, show_amount, show_gib_above
from ..serving import GPU_MEMORY_UTILIZATION_MAX, effective_profile, model_tiers, running_versions
from .models import placed_models
from .registry import NO_TRACKING_URI
from .weights import s3_needs_eks


def check_adapter_names_unique(config: PlatformConfig) -> Iterator[ConfigIssue]:
    """The rule `adapter-names-unique` (the policy of that name enforces it on the rendered
    servers): every OpenAI name a client may send, a model's or an adapter's, names one thing
    cluster-wide, so the gateway routes it to exactly one base model. (Models' own duplicates are
    check_unique_names'.)"""
    first: dict[str, tuple[tuple[str | int, ...], str]] = {}
    for key, name, what in served_names(config):
        earlier = first.setdefault(name, (key, what))
        if earlier[0] != key and ("adapters" in key or "adapters" in earlier[0]):
            yield ConfigIssue(
                key, f"{name!r} is already the OpenAI name of {earlier[1]}: clients select models and adapters by it"
            )


def check_adapter_revisions(config: PlatformConfig) -> Iterator[ConfigIssue]:
    """An adapter revision's name differs from its base model's version names: the model's override header names
    either, and must name one thing."""
    for m_index, model in enumerate(config.models):
        versions = {v.name for v in model.versions}
        for a_index, adapter in enumerate(model.adapters):
            for v_index, revision in enumerate(adapter.versions or []):
                if revision.name in versions:
                    yield ConfigIssue(
                        ("models", m_index, "adapters", a_index, "versions", v_index, "name"),
                        f"{revision.name!r} is also a version of model {model.name!r}: the override header "
                        f"{model.release.override_header!r} names either, so name the revision otherwise",
                    )


def check_adapter_canary_steps(config: PlatformConfig) -> Iterator[ConfigIssue]:
    """An adapter's canary weight is 0 or one of its model's `release.steps`: its revisions go through the model's
    steps, and the policy `canary-weight-steps` holds each change to one step (the model's `release.stepOverride`
    lets a change skip them)."""
    for m_index, model in enumerate(config.models):
        for a_index, adapter in enumerate(model.adapters):
            release = adapter.release
            if release is not None and (off := off_the_steps(release.canary_weight, model.release.steps)) is not None:
                yield ConfigIssue(
                    ("models", m_index, "adapters", a_index, "release", "canaryWeight"),
                    f"{off} (the release.steps of model {model.name!r}, which its adapters' canaries go through)",
                )


def check_adapters_on_a_base_that_takes_them(config: PlatformConfig) -> Iterator[ConfigIssue]:
    """Adapters need a generating base: a platform rule (an embeddings profile runs `--runner pooling`; vLLM 0.33.0
    also takes LoRA on pooling models that support it, vllm/config/lora.py, which the platform does not offer)."""
    for index, model in enumerate(config.models):
        if model.adapters and effective_profile(config, model).runner != "generate":
            yield ConfigIssue(
                ("models", index, "adapters"),
                f"profile {model.profile!r} runs vLLM's {effective_profile(config, model).runner} runner, which serves no "
                f"LoRA adapters: put them on a generating model ({', '.join(GENERATING_PROFILES)})",
            )


def check_adapter_ranks(config: PlatformConfig) -> Iterator[ConfigIssue]:
    """No adapter a model's servers load (its own, and those of the models whose batch tier they take) has a rank above
    the model's configured `lora.maxLoraRank` (vLLM refuses to load it)."""
    indexes = {m.name: i for i, m in enumerate(config.models)}
    for m_index, model in enumerate(config.models):
        configured = model.lora.max_lora_rank
        if configured is None:
            continue
        for base, adapter in carried_adapters(config, model):
            if adapter.rank <= configured:
                continue
            fix = f"raise maxLoraRank to {smallest_rank_choice(adapter.rank)} or use a lower-rank adapter"
            if base is model:
                a_index = model.adapters.index(adapter)
                yield ConfigIssue(
                    ("models", m_index, "adapters", a_index, "rank"),
                    f"rank {adapter.rank} is above the model's lora.maxLoraRank {configured}: vLLM would refuse the "
                    f"adapter; {fix}",
                )
            else:
                yield ConfigIssue(
                    ("models", m_index, "lora", "maxLoraRank"),
                    f"{configured} is below the rank {adapter.rank} of adapter {adapter.name!r} of model {base.name!r} "
                    f"(models[{indexes[base.name]}]), whose batch tier this model's servers take: vLLM would refuse the "
                    f"adapter; {fix}",
                )


def check_adapters_resident(config: PlatformConfig) -> Iterator[ConfigIssue]:
    """A latency-sensitive profile needs every adapter module resident on the GPU (`lora.maxLoras` at least the
    modules, each adapter's stable and canary revision): a request for a module without a GPU slot waits until a
    running batch lets one go. `maxCpuLoras` is at least `maxLoras` (vLLM 0.33.0 refuses less, vllm/config/lora.py)."""
    for index, model in enumerate(config.models):
        limits = lora_limits(config, model)
        if limits is None:
            continue
        here = ("models", index, "lora")
        profile = effective_profile(config, model)
        if profile.latency_sensitive and limits.max_loras < len(limits.modules):
            yield ConfigIssue(
                (*here, "maxLoras"),
                f"{limits.max_loras} GPU slots for {len(limits.modules)} adapter modules "
                f"({', '.join(m.name for m in limits.modules)}): profile {model.profile!r} is latency-sensitive and needs "
                f"them all resident; raise maxLoras to {len(limits.modules)} or leave it unset",
            )
        if limits.max_cpu_loras < limits.max_loras:
            yield ConfigIssue(
                (*here, "maxCpuLoras"),
                f"{limits.max_cpu_loras} is below maxLoras {limits.max_loras}: vLLM refuses it (max_cpu_loras must be >= "
                "max_loras)",
            )


def check_adapter_on_own_tenants_base(config: PlatformConfig) -> Iterator[ConfigIssue]:
    """The rule `adapter-on-own-tenants-base` (the policy of that name enforces it on the rendered servers)."""
    for m_index, model in enumerate(config.models):
        for a_index, adapter in enumerate(model.adapters):
            if not adapter_on_own_tenants_base(model, adapter):
                yield ConfigIssue(
                    ("models", m_index, "adapters", a_index, "tenant"),
                    f"{adapter.tenant!r} does not run model {model.name!r} (tenant {model.tenant!r}): an adapter never "
                    "rides on another tenant's base model; declare it on a model of its own tenant",
                )


def check_batch_model_adapters(config: PlatformConfig) -> Iterator[ConfigIssue]:
    """A model's adapters take its batch tier to its batch model's servers, which load them (README, LoRA adapters):
    those servers must run the adapters' base weights (`on_adapter_base`: each running version serves the source of
    one of the base model's versions), belong to the adapters' tenant (`adapter-on-own-tenants-base`) and run vLLM's
    generate runner. Otherwise the batch tier of its adapters is refused here, naming the key."""
    models = config.models_by_name
    for index, model in enumerate(config.models):
        target = models.get(model.batch_model) if model.batch_model is not None else None
        if not model.adapters or target is None or target is model:
            continue  # check_batch_models reports an unknown batch model, or the model itself
        if "batch" not in model_tiers(config, target) or target.batch_model is not None:
            continue  # and one that does not take the batch tier
        here = ("models", index, "batchModel")
        names = ", ".join(a.name for a in model.adapters)
        carried = f"its adapters ({names}) take the batch tier to the servers of model {target.name!r}, which load them"
        versions = {v.name: v.source for v in target.versions}
        for version in running_versions(target):
            if version in versions and not on_adapter_base(model, versions[version]):
                yield ConfigIssue(
                    here,
                    f"{carried}, but its version {version!r} serves other weights than every version of model "
                    f"{model.name!r}: an adapter answers correctly only on the base it was trained on (vLLM does not "
                    f"check it); give {target.name!r} the source of a version of {model.name!r}, or remove batchModel",
                )
        for adapter in model.adapters:
            # An adapter of another tenant than its base's is check_adapter_on_own_tenants_base's.
            if adapter_on_own_tenants_base(model, adapter, target) or not adapter_on_own_tenants_base(model, adapter):
                continue
            yield ConfigIssue(
                here,
                f"{carried}, but model {target.name!r} runs in tenant {target.tenant!r}, not the tenant "
                f"{adapter_tenant(model, adapter)!r} of adapter {adapter.name!r}: an adapter never rides on another "
                "tenant's servers (adapter-on-own-tenants-base); send the batch tier to a model of its tenant",
            )
        runner = effective_profile(config, target).runner
        if runner != "generate":
            yield ConfigIssue(
                here,
                f"{carried}, but profile {target.profile!r} runs vLLM's {runner} runner, which serves no LoRA adapters",
            )


def check_adapter_sources(config: PlatformConfig) -> Iterator[ConfigIssue]:
    """S3 adapters need EKS (the workload role reads them); MLflow adapters need the registry."""
    for m_index, model in enumerate(config.models):
        for a_index, adapter in enumerate(model.adapters):
            for v_index, (_, source) in enumerate(_declared_adapter_sources(adapter)):
                key = ("models", m_index, "adapters", a_index, *(("versions", v_index) if adapter.versions else ()), "source")
                if source.s3_uri is not None and config.cluster.mode != "eks":
                    yield ConfigIssue(
                        (*key, "s3Uri"),
                        s3_needs_eks("adapters"),
                    )
                if source.mlflow is not None and config.registry.tracking_uri is None:
                    yield ConfigIssue(
                        (*key, "mlflow"),
                        NO_TRACKING_URI,
                    )


def _declared_adapter_sources(adapter: LoraAdapter) -> list[tuple[str | None, ModelSource]]:
    """Every (revision, source) an adapter declares, running or not."""
    if adapter.source is not None:
        return [(None, adapter.source)]
    return [(v.name, v.source) for v in adapter.versions or []]


def check_adapter_memory(config: PlatformConfig) -> Iterator[ConfigIssue]:
    """With `lora.baseShape`, the adapters' estimated memory (platform_config/adapters.py lora_memory) fits the replica:
    vLLM's GPU slots within the replica's GPU memory share (it preallocates them before the KV cache) and its CPU cache
    of modules within the replica's memory."""
    for index, model, pool in placed_models(config):
        memory = lora_memory(config, model)
        if memory is None:
            continue
        replica = rank_memory(instance_of(pool).gpu, pool, model, model.server).replica_bytes
        gpu = Decimal(replica) * Decimal(str(GPU_MEMORY_UTILIZATION_MAX))
        if memory.gpu_bytes >= gpu:
            yield ConfigIssue(
                ("models", index, "lora"),
                f"the adapters' GPU slots need about {show_gib_above(memory.gpu_bytes)} per replica (maxLoras x maxLoraRank), "
                f"more than the replica's GPU memory share ({show_amount('memory', gpu)}): lower maxLoras or maxLoraRank",
            )
        if memory.cpu_bytes >= parse_quantity(model.resources.memory):
            yield ConfigIssue(
                ("models", index, "resources", "memory"),
                f"{model.resources.memory} does not hold the adapters' CPU cache (about {show_gib_above(memory.cpu_bytes)}, "
                "maxCpuLoras modules): raise the memory or lower lora.maxCpuLoras",
            )
