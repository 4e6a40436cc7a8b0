"""A model version: its weights, vLLM image and engine settings, architecture and chat template."""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import Field, model_validator
from pydantic.alias_generators import to_camel

from .base import ConfigModel, NonNegativeInt, PinnedImage, PositiveInt, VersionName, _full_match, _refuse_retired_keys
from .sources import ModelSource


class ServerArgs(ConfigModel):
    """vLLM engine settings; a version's values override the model's."""

    max_model_len: PositiveInt | None = None
    """vLLM `--max-model-len`."""
    gpu_memory_utilization: Annotated[float, Field(gt=0.1, le=0.98)] | None = None
    """vLLM `--gpu-memory-utilization`. Default: 0.90, divided by the sharing pods on time-sliced pools."""
    max_num_seqs: PositiveInt | None = None
    """vLLM `--max-num-seqs`. Default: `autoscaling.kpa.containerConcurrency` (mode `kpa`), else the profile's
    concurrency per replica."""
    # vLLM 0.28.0 moved bitsandbytes out of tree (a plugin the image does not hold): not offered.
    quantization: Literal["fp8", "awq", "gptq", "compressed-tensors"] | None = None
    """vLLM `--quantization`."""
    dtype: Literal["auto", "bfloat16", "float16"] | None = None
    """vLLM `--dtype`."""
    # The settings below are the only other `vllm serve` flags a stack may set: each exists in
    # vLLM 0.33.0 and is typed as its argument is there (vllm/config/{model,cache,scheduler,
    # offload}.py at v0.33.0). Flags the platform computes (port, served names, parallelism,
    # memory share, drain, scheduling policy, prefix caching, revision) are not settable, nor are
    # credentials or code execution (`--api-key`, `--hf-token`, `--trust-remote-code`), nor
    # `--kv-cache-memory-bytes` (it overrides the memory share).
    enforce_eager: bool | None = None
    """vLLM `--enforce-eager` when true: no CUDA graphs (less memory, slower decoding)."""
    max_num_batched_tokens: PositiveInt | None = None
    """vLLM `--max-num-batched-tokens`: tokens one scheduler step may process."""
    long_prefill_token_threshold: NonNegativeInt | None = None
    """vLLM `--long-prefill-token-threshold`: a prompt longer than this counts as long (0: vLLM's default)."""
    kv_cache_dtype: Literal["auto", "float16", "bfloat16", "fp8", "fp8_e4m3", "fp8_e5m2", "fp8_inc", "fp8_ds_mla"] | None = None
    """vLLM `--kv-cache-dtype`."""
    block_size: PositiveInt | None = None
    """vLLM `--block-size`: tokens per KV-cache block."""
    # No GPU instance of the catalog has more than 2,048 GiB of CPU memory (p5.48xlarge, platform_config/gpu_catalog.py).
    cpu_offload_gb: Annotated[float, Field(ge=0, le=2048)] | None = None
    """vLLM `--cpu-offload-gb`: GiB of weights kept in CPU memory per GPU."""
    seed: NonNegativeInt | None = None
    """vLLM `--seed`."""
    # vLLM 0.31.0 removed the `slow` mode.
    tokenizer_mode: Literal["auto", "hf", "mistral", "deepseek_v32"] | None = None
    """vLLM `--tokenizer-mode`."""
    max_logprobs: NonNegativeInt | None = None
    """vLLM `--max-logprobs`: the most log probabilities a request may ask for (vLLM's -1, no cap, is refused: it
    can exhaust memory)."""
    prefill_tokens_per_second: Annotated[int, Field(ge=1, le=10_000_000)] | None = None
    """Prompt tokens one replica prefills per second, as measured on its GPU (e.g. `vllm bench serve`). Where no
    endpoint picker times the queue (a Knative model that scales to zero), vLLM then admits a request only while the
    prompts it still has to prefill take at most the shortest served tier's `queueTimeout` (`--max-num-queued-tokens`),
    and answers 503 at once otherwise. Refused where a picker times the queue (it would be ignored); a batch job has no
    such queue and refuses it."""

    @model_validator(mode="before")
    @classmethod
    def _no_retired_keys(cls, data: Any) -> Any:
        return _refuse_retired_keys(
            data,
            {
                "extraArgs": "vLLM flags are the typed settings of 'server' (enforceEager, maxNumBatchedTokens, "
                "kvCacheDtype, ...); the platform computes --port, --served-model-name, --tensor-parallel-size, "
                "--gpu-memory-utilization, --shutdown-timeout, --scheduling-policy and prefix caching, and credentials "
                "(--api-key, --hf-token) or --trust-remote-code are never arguments",
                "maxNumPartialPrefills": "vLLM 0.27.0 removed --max-num-partial-prefills, and the pinned vLLM would "
                "refuse to start with it",
            },
        )


class ModelArchitecture(ConfigModel):
    """The model's architecture, as its `config.json` at the pinned revision states it: what the preview's Serving
    performance stage sizes the KV cache from, bounds `maxModelLen` by, and predicts latency for
    (docs/design/serving-performance.md). Either the name of the config aiconfigurator-core ships for the same
    architecture (read in place from the installed package), or the config's keys declared here."""

    performance_model: (
        Annotated[str, _full_match(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}/[A-Za-z0-9_.-]{1,96}", "is not a model name 'org/name'")]
        | None
    ) = None
    """The model in aiconfigurator-core's `model_configs` whose architecture this checkpoint has, e.g.
    `meta-llama/Meta-Llama-3.1-8B` for Llama-3.1-8B-Instruct (a fine-tune keeps its base's shape): its config and,
    where the database measured it, its latency."""
    family: (
        Annotated[
            str,
            _full_match(r"[A-Z][A-Za-z0-9]{0,63}For(CausalLM|ConditionalGeneration)", "is not an HF architecture"),
        ]
        | None
    ) = None
    """`architectures[0]`, e.g. `Qwen2ForCausalLM`."""
    hidden_size: Annotated[int, Field(ge=64, le=65536)] | None = None
    """`hidden_size`."""
    intermediate_size: Annotated[int, Field(ge=64, le=262144)] | None = None
    """`intermediate_size`."""
    num_hidden_layers: Annotated[int, Field(ge=1, le=1024)] | None = None
    """`num_hidden_layers`."""
    num_attention_heads: Annotated[int, Field(ge=1, le=1024)] | None = None
    """`num_attention_heads`."""
    num_key_value_heads: Annotated[int, Field(ge=1, le=1024)] | None = None
    """`num_key_value_heads`."""
    head_dim: Annotated[int, Field(ge=8, le=1024)] | None = None
    """`head_dim`. Default: `hiddenSize / numAttentionHeads`."""
    max_position_embeddings: Annotated[int, Field(ge=128, le=16_777_216)] | None = None
    """`max_position_embeddings`: the longest context the model was trained for, which `maxModelLen` may not exceed."""
    vocab_size: Annotated[int, Field(ge=1, le=4_194_304)] | None = None
    """`vocab_size`."""
    tie_word_embeddings: bool = False
    """`tie_word_embeddings`."""

    @model_validator(mode="after")
    def _named_or_declared(self) -> ModelArchitecture:
        declared = {name: getattr(self, name) for name in DECLARED_ARCHITECTURE_KEYS}
        if self.performance_model is not None:
            given = sorted(to_camel(name) for name, value in declared.items() if value is not None)
            if given or self.head_dim is not None:
                raise ValueError(
                    f"give either performanceModel (its config is read from the package) or the config's keys, not both: "
                    f"{', '.join(given or ['headDim'])}"
                )
            return self
        missing = sorted(to_camel(name) for name, value in declared.items() if value is None)
        if missing:
            raise ValueError(f"without performanceModel, the config's keys are needed: {', '.join(missing)} missing")
        return self

    def hf_config(self) -> dict[str, Any] | None:
        """The declared keys as `config.json` writes them (None when the package's config is named instead)."""
        if self.performance_model is not None:
            return None
        config: dict[str, Any] = {"architectures": [self.family], "torch_dtype": "bfloat16"}
        for name in (*DECLARED_ARCHITECTURE_KEYS, "head_dim", "tie_word_embeddings"):
            value = getattr(self, name)
            if name != "family" and value is not None:
                config[name] = value
        return config


# What a declared architecture must state (head_dim has a default).
DECLARED_ARCHITECTURE_KEYS = (
    "family",
    "hidden_size",
    "intermediate_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "max_position_embeddings",
    "vocab_size",
)


# A chat template in the project: a .jinja file under templates/, no hidden or parent segment.
CHAT_TEMPLATE_FILE_PATTERN = re.compile(r"templates/(?:[A-Za-z0-9_-][A-Za-z0-9_.-]*/)*[A-Za-z0-9_-][A-Za-z0-9_.-]*\.jinja")


class ChatTemplate(ConfigModel):
    """The chat template a version's server applies to chat requests (vLLM's `--chat-template`): how messages become
    the prompt, and the system prompt it writes where a request has none. A file committed in the project, pinned by
    its SHA-256: a new template (or system prompt) is a new version of the model with the same weights, canaried and
    promoted like any version (header override, sticky users), and the pull request's diff shows the file, the pin
    and every server it changes."""

    file: Annotated[
        str,
        _full_match(
            CHAT_TEMPLATE_FILE_PATTERN,
            "is not a .jinja file under templates/ in the project, e.g. templates/summarizer/concise-v2.jinja",
            max_length=256,
        ),
    ]
    """The template, relative to the project, e.g. `templates/summarizer/concise-v2.jinja`."""
    sha256: Annotated[str, _full_match(r"[0-9a-f]{64}", "is not a SHA-256 in lower-case hex (`sha256sum <file>`)")]
    """The file's SHA-256: a template that changes without this pin changing is refused."""


class ModelVersion(ConfigModel):
    name: VersionName
    """Version name (a DNS label of at most 12 characters)."""
    source: ModelSource
    """Where the weights come from."""
    image: PinnedImage | None = None
    """A pinned vLLM image (tag or digest, never `latest`). Default: the pinned `vllm/vllm-openai`."""
    server: ServerArgs = ServerArgs()
    """vLLM settings of this version, over the model's."""
    architecture: ModelArchitecture | None = None
    """The version's architecture where its weights are another model's (a new base, a different size), over the
    model's `architecture`."""
    chat_template: ChatTemplate | None = None
    """The chat template (and default system prompt) its server applies; none: the one the weights ship with."""
