"""LoRA adapters on a base model (pure functions): the modules its servers load, vLLM's LoRA
limits sized from them, and what they hold in GPU and CPU memory.

Every running revision of every adapter is one vLLM LoRA module, loaded from the pod's model
volume (`--lora-modules <module>=<path>`): an adapter with one `source` is the module of its own
name; an adapter with `versions` loads its stable and canary revisions as `<adapter>@<revision>`
(an OpenAI name never holds '@', so no module name is ever another model's), and the gateway
filter writes the chosen module into the request (components/lua/gateway_filter.lua).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from .models import (
    VLLM_MAX_LORA_RANKS,
    BaseShape,
    BatchJobConfig,
    LoraAdapter,
    ModelConfig,
    ModelSource,
    PlatformConfig,
    weights_location,
)
from .quantity import show_gib_above

# The separator of an adapter revision's module name: never in an OpenAI model name (OpenAiModelName).
REVISION_SEPARATOR = "@"
# LoRA weights' bytes per element: vLLM 0.33.0's `lora_dtype: auto` is the base model's dtype
# (vllm/config/lora.py verify_with_model_config), bfloat16 or float16 for every served model here.
LORA_BYTES_PER_ELEMENT = 2


def module_name(adapter: str, revision: str | None) -> str:
    """A LoRA module's name in vLLM, which the request's `model` names: the adapter's, or `<adapter>@<revision>`."""
    return adapter if revision is None else f"{adapter}{REVISION_SEPARATOR}{revision}"


@dataclass(frozen=True)
class AdapterModule:
    """One LoRA module a model's servers load: an adapter's revision."""

    adapter: str
    # None for an adapter with one `source`.
    revision: str | None
    source: ModelSource
    rank: int
    # The OpenAI name of the model that declares the adapter (its base), and the tenant that owns the adapter.
    base_name: str
    tenant: str
    # The weight mirror's copy its pods fetch instead, where `source` is Hugging Face and the stack has a mirror
    # (platform_config/weight_mirror.py; the plan sets it); None where they fetch `source` itself.
    copy: ModelSource | None = None

    @property
    def name(self) -> str:
        return module_name(self.adapter, self.revision)

    @property
    def fetched_from(self) -> ModelSource:
        """Where its pods fetch its files from: the mirror's copy, else its own source."""
        return self.copy if self.copy is not None else self.source


def adapter_revisions(adapter: LoraAdapter) -> list[tuple[str | None, ModelSource]]:
    """(revision, source) of each revision the servers load: the one source, or the release's stable and canary."""
    if adapter.source is not None:
        return [(None, adapter.source)]
    assert adapter.versions is not None and adapter.release is not None  # the model's validator
    by_name = {v.name: v.source for v in adapter.versions}
    running = [adapter.release.stable] + ([adapter.release.canary] if adapter.release.canary else [])
    return [(name, by_name[name]) for name in running]


def carried_adapters(config: PlatformConfig, model: ModelConfig) -> list[tuple[ModelConfig, LoraAdapter]]:
    """Every adapter the model's servers load, with the model that declares it: its own, then those of each model
    whose batch tier they take (`batchModel`): an adapter's batch requests go where its base's do, and the config
    checks hold those servers to the adapter's base weights and tenant (`adapter_batch_servers_issue`)."""
    senders = config.batch_senders.get(model.name, ())
    return [(model, adapter) for adapter in model.adapters] + [(m, adapter) for m in senders for adapter in m.adapters]


def adapter_modules(config: PlatformConfig, model: ModelConfig) -> list[AdapterModule]:
    """Every LoRA module the model's servers load (`carried_adapters`), in declaration order."""
    return [
        AdapterModule(adapter.name, revision, source, adapter.rank, base.openai_name, adapter_tenant(base, adapter))
        for base, adapter in carried_adapters(config, model)
        for revision, source in adapter_revisions(adapter)
    ]


def adapter_tenant(model: ModelConfig, adapter: LoraAdapter) -> str:
    """The tenant that owns an adapter: its own `tenant`, else its base model's."""
    return adapter.tenant or model.tenant


def adapter_on_own_tenants_base(model: ModelConfig, adapter: LoraAdapter, servers: ModelConfig | None = None) -> bool:
    """The rule `adapter-on-own-tenants-base` (the config check and the policy of that name): an
    adapter never rides on another tenant's base model, nor on another tenant's servers that take
    its base's batch tier (`servers`, its base model's batch model)."""
    return adapter_tenant(model, adapter) == (servers or model).tenant


def on_adapter_base(model: ModelConfig, source: ModelSource) -> bool:
    """Whether weights from `source` are the base an adapter of `model` was trained on: those of one
    of the model's versions. vLLM never checks it: vLLM 0.33.0 loads a LoRA module on any base
    whose layer names it matches (vllm/lora/peft_helper.py validate_legal checks the rank and bias,
    vllm/lora/lora_model.py from_lora_tensors only the module names; `base_model_name_or_path` is
    never read), so on other weights of one architecture it answers, wrongly. A batch job's base
    and a batch model's servers are held to it."""
    return source in [v.source for v in model.versions]


def smallest_rank_choice(rank: int) -> int | None:
    """The smallest `--max-lora-rank` vLLM 0.33.0 accepts that holds `rank`; None above its largest."""
    return next((choice for choice in VLLM_MAX_LORA_RANKS if choice >= rank), None)


@dataclass(frozen=True)
class LoraLimits:
    """vLLM's LoRA flags for a base model's servers."""

    modules: tuple[AdapterModule, ...]
    max_lora_rank: int
    max_loras: int
    max_cpu_loras: int


def lora_limits(config: PlatformConfig, model: ModelConfig) -> LoraLimits | None:
    """vLLM's LoRA limits for a model whose servers load adapters (None without; `adapter_modules`):
    the model's configured ones, else what its modules need. By default every module is resident
    on the GPU (`--max-loras` = modules) and cached in CPU memory (`--max-cpu-loras` at least
    that): a request for a module that is not resident waits for a slot. The rank is the smallest
    vLLM choice holding the highest adapter rank (the config checks refuse a rank above a configured maximum, or above vLLM's)."""
    modules = adapter_modules(config, model)
    if not modules:
        return None
    settings = model.lora
    highest = max(m.rank for m in modules)
    max_rank = settings.max_lora_rank or smallest_rank_choice(highest) or VLLM_MAX_LORA_RANKS[-1]
    max_loras = settings.max_loras or len(modules)
    max_cpu_loras = settings.max_cpu_loras or max(max_loras, len(modules))
    return LoraLimits(tuple(modules), max_rank, max_loras, max_cpu_loras)


def batch_job_adapter(config: PlatformConfig, job: BatchJobConfig) -> tuple[ModelConfig, LoraAdapter] | None:
    """The adapter a batch job runs (`batchJobs[].model.adapter`, an adapter's OpenAI name in
    `models[]`) and the model that declares it; None without one or when no model declares it."""
    if job.model.adapter is None:
        return None
    return next(((m, a) for m in config.models for a in m.adapters if a.name == job.model.adapter), None)


def batch_lora_limits(model: ModelConfig, adapter: LoraAdapter) -> LoraLimits:
    """vLLM's LoRA flags for a batch job running one adapter: its stable revision (a job has no
    traffic to split), loaded as the module of the adapter's own name, which the input lines send;
    one GPU slot, one CPU slot, the smallest rank choice that holds it."""
    _, source = adapter_revisions(adapter)[0]
    module = AdapterModule(adapter.name, None, source, adapter.rank, model.openai_name, adapter_tenant(model, adapter))
    return LoraLimits((module,), smallest_rank_choice(adapter.rank) or VLLM_MAX_LORA_RANKS[-1], 1, 1)


def lora_elements_per_rank(shape: BaseShape) -> int:
    """LoRA weight elements per unit of rank over the whole base model, when the adapter (or vLLM's
    slot) covers every projection of every layer: A is rank x input and B is output x rank, so a
    projection holds rank x (input + output). Per layer: q (h + h), k and v (h + kv each), o (h + h),
    gate and up (h + i each), down (i + h): 9h + 2kv + 3i, with kv = num_key_value_heads x h /
    num_attention_heads. (vLLM 0.33.0 vllm/lora/layers/base_linear.py create_lora_weights allocates
    `lora_a_stacked` (max_loras, 1, max_lora_rank, input) and `lora_b_stacked` (max_loras, 1, output,
    max_lora_rank) per LoRA-wrapped linear layer.)"""
    h, i = shape.hidden_size, shape.intermediate_size
    kv = shape.num_key_value_heads * h // shape.num_attention_heads
    return shape.num_hidden_layers * (9 * h + 2 * kv + 3 * i)


@dataclass(frozen=True)
class LoraMemory:
    """What a model's adapters hold per replica, in bytes: vLLM's GPU slots (max_loras x
    max_lora_rank, whatever the adapters' own ranks; preallocated at start, before the KV cache)
    and its CPU cache of modules (max_cpu_loras modules at their own rank; the largest ones)."""

    gpu_bytes: int
    cpu_bytes: int


def lora_memory(config: PlatformConfig, model: ModelConfig) -> LoraMemory | None:
    """The estimate, per replica, for a model whose servers load adapters and whose shape is known
    (its `lora.baseShape`, else that of a model whose batch tier it takes: the same base weights);
    None otherwise. GPU = max_loras x max_lora_rank x E x 2 bytes; CPU = the max_cpu_loras largest
    modules' rank x E x 2 bytes, where E = lora_elements_per_rank(baseShape)."""
    limits = lora_limits(config, model)
    shape = adapters_base_shape(config, model)
    if limits is None or shape is None:
        return None
    per_rank = lora_elements_per_rank(shape) * LORA_BYTES_PER_ELEMENT
    cached = sorted((m.rank for m in limits.modules), reverse=True)[: limits.max_cpu_loras]
    return LoraMemory(limits.max_loras * limits.max_lora_rank * per_rank, sum(cached) * per_rank)


def adapters_base_shape(config: PlatformConfig, model: ModelConfig) -> BaseShape | None:
    """The shape of the base weights the model's servers load adapters on: its `lora.baseShape`, else that of a model
    whose batch tier it takes (the same base weights); None when neither states it."""
    return model.lora.base_shape or next(
        (base.lora.base_shape for base, _ in carried_adapters(config, model) if base.lora.base_shape is not None), None
    )


# The adapter files' size on disk against the estimate of their LoRA weights in the base's dtype (rank x E x 2 bytes,
# every projection of every layer, the most an adapter of its rank holds): PEFT saves the weights in the dtype they
# were trained in, and LoRA weights trained in float32 (as QLoRA keeps them) take twice the bytes; the files beside
# them (adapter_config.json, a tokenizer copy, a README) get ADAPTER_FILES_HEADROOM_BYTES for the whole volume. Not
# covered: an adapter that also saves embedding layers (PEFT `save_embedding_layers`, about 1 GiB per layer on an 8B
# Llama 3) or other large files in its folder or repository: a pod whose volume outgrows its sizeLimit is evicted, so
# such adapters need a pool that caches weights, where the volume is `cacheSize`.
ADAPTER_FILES_MARGIN = 2
ADAPTER_FILES_HEADROOM_BYTES = 2**30


def adapter_files_bytes(config: PlatformConfig, model: ModelConfig) -> int | None:
    """What the files of the LoRA modules the model's servers load (`adapter_modules`) take on the model volume, with
    ADAPTER_FILES_MARGIN and ADAPTER_FILES_HEADROOM_BYTES: each module's rank x E x LORA_BYTES_PER_ELEMENT, where
    E = lora_elements_per_rank(base shape). None without modules or without the base's shape (`adapters_base_shape`)."""
    modules = adapter_modules(config, model)
    shape = adapters_base_shape(config, model)
    if not modules or shape is None:
        return None
    per_rank = lora_elements_per_rank(shape) * LORA_BYTES_PER_ELEMENT
    return sum(m.rank for m in modules) * per_rank * ADAPTER_FILES_MARGIN + ADAPTER_FILES_HEADROOM_BYTES


def served_names(config: PlatformConfig) -> Iterator[tuple[tuple[str | int, ...], str, str]]:
    """(key, name, what it is) of every OpenAI name a client may send: each model's served name and
    each adapter's, the models' first. (A batch model answers to its chat model's name too, which is
    that model's.)"""
    for m_index, model in enumerate(config.models):
        yield ("models", m_index, "servedModelName"), model.openai_name, f"model {model.name!r}"
    for m_index, model in enumerate(config.models):
        for a_index, adapter in enumerate(model.adapters):
            yield ("models", m_index, "adapters", a_index, "name"), adapter.name, f"an adapter of model {model.name!r}"


def adapters_report(config: PlatformConfig) -> dict[str, dict[str, object]]:
    """Per model with adapters: its modules (name, adapter, revision, rank, weights), vLLM's LoRA
    limits, and the memory estimate per replica (`lora_memory`; null without `lora.baseShape`):
    the `loraAdapters` stack output and the preview report's section."""

    report: dict[str, dict[str, object]] = {}
    for model in config.models:
        limits = lora_limits(config, model)
        if limits is None:
            continue
        memory = lora_memory(config, model)
        report[model.name] = {
            "tenant": model.tenant,
            "modules": [
                {
                    "module": m.name,
                    "adapter": m.adapter,
                    "revision": m.revision,
                    "rank": m.rank,
                    "weights": weights_location(m.source),
                }
                for m in limits.modules
            ],
            "maxLoras": limits.max_loras,
            "maxLoraRank": limits.max_lora_rank,
            "maxCpuLoras": limits.max_cpu_loras,
            "gpuMemoryPerReplica": show_gib_above(memory.gpu_bytes) if memory else None,
            "cpuMemoryPerReplica": show_gib_above(memory.cpu_bytes) if memory else None,
        }
    return report
