"""LoRA adapters on a base model: their revisions and release, the base's shape and vLLM's LoRA limits."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from .base import ConfigModel, NamespaceName, Percent, VersionName
from .sources import ModelSource

# What `--max-lora-rank` accepts in vLLM 0.33.0 (vllm/config/lora.py at v0.33.0, `MaxLoRARanks`).
VLLM_MAX_LORA_RANKS: tuple[int, ...] = (1, 8, 16, 32, 64, 128, 256, 320, 512)
MaxLoraRank = Literal[1, 8, 16, 32, 64, 128, 256, 320, 512]
# The OpenAI `model` a client sends: no '=' or ',' (vLLM 0.33.0 reads `--lora-modules name=path`
# as the old form only when the item holds '=' and no ',', vllm/entrypoints/common/cli_args.py
# LoRAParserAction) and no '@', which the platform keeps for adapter revisions' module names.
OpenAiModelName = Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._/:-]{0,127}$")]


class AdapterVersion(ConfigModel):
    name: VersionName
    """Revision name (a DNS label of at most 12 characters), unique within the adapter and distinct from the base
    model's version names: the model's `release.overrideHeader` names either."""
    source: ModelSource
    """Where the adapter's weights come from: a Hugging Face repository at a 40-character commit SHA, an S3 prefix and
    its version subfolder, or an MLflow registry version (resolved like a model version's)."""


class AdapterRelease(ConfigModel):
    """Which adapter revisions are loaded, and how the adapter's requests split between them: a user's sticky bucket
    (the gateway filter's, from the token's user) picks the canary for the top `canaryWeight` buckets, the base model's
    canary takes the bottom ones, so the two canaries overlap as little as their weights allow; requests without a user
    split by weight; the model's `release.overrideHeader` naming a revision forces it (only for the principals in
    `traffic.authentication.versionOverridePrincipals`)."""

    stable: VersionName
    """The revision that serves the requests the canary does not."""
    canary: VersionName | None = None
    """The revision under test, loaded beside the stable one on the same servers."""
    canary_weight: Percent = 0
    """Percent of the adapter's requests (and of its sticky users) the canary gets: 0 or one of the model's
    `release.steps`, rising one step per change unless the model's `release.stepOverride` gives a reason (policy
    `canary-weight-steps`)."""

    @model_validator(mode="after")
    def _canary(self) -> AdapterRelease:
        if self.canary is None and self.canary_weight != 0:
            raise ValueError(f"canaryWeight {self.canary_weight} needs a 'canary' revision")
        if self.canary is not None and self.canary == self.stable:
            raise ValueError(f"canary {self.canary!r} is the stable revision: name another revision")
        return self


class LoraAdapter(ConfigModel):
    """A LoRA adapter served by the base model's servers (vLLM `--lora-modules`): clients reach it by its own name,
    with the base model's tiers, canary, priorities, tenant and callers."""

    name: OpenAiModelName
    """The OpenAI `model` clients send for it; unique across every model's served name, batch alias and adapter."""
    rank: Annotated[int, Field(ge=1, le=VLLM_MAX_LORA_RANKS[-1])]
    """The adapter's LoRA rank (`r` in its adapter_config.json): sizes vLLM's `--max-lora-rank` and its memory."""
    tenant: NamespaceName | None = None
    """The tenant that owns the adapter. It must be the base model's tenant (an adapter never rides on another
    tenant's base model). Default: the base model's tenant."""
    source: ModelSource | None = None
    """Where its weights come from, for an adapter with one revision. Give this or `versions`."""
    versions: Annotated[list[AdapterVersion], Field(min_length=1)] | None = None
    """Its revisions, for an adapter with a canary (with `release`). Give this or `source`."""
    release: AdapterRelease | None = None
    """Which revisions run and how requests split between them (with `versions`)."""

    @model_validator(mode="after")
    def _source_or_versions(self) -> LoraAdapter:
        if (self.source is None) == (self.versions is None):
            raise ValueError("give exactly one of 'source' (one revision) or 'versions' with 'release' (revisions)")
        if self.versions is None:
            if self.release is not None:
                raise ValueError("'release' goes with 'versions': an adapter with one 'source' has one revision")
            return self
        if self.release is None:
            raise ValueError("'versions' needs a 'release' naming the stable revision (and the canary, if any)")
        names = [v.name for v in self.versions]
        repeated = sorted({n for n in names if names.count(n) > 1})
        if repeated:
            raise ValueError(f"revision names are listed twice: {', '.join(repeated)}")
        for key, revision in (("stable", self.release.stable), ("canary", self.release.canary)):
            if revision is not None and revision not in names:
                raise ValueError(f"release.{key} {revision!r} is not one of its versions ({', '.join(names)})")
        return self


class BaseShape(ConfigModel):
    """The base model's shape, as its Hugging Face `config.json` states it: what the adapters' memory is estimated
    from (README, LoRA adapters)."""

    hidden_size: Annotated[int, Field(ge=64, le=65536)]
    """`hidden_size`."""
    intermediate_size: Annotated[int, Field(ge=64, le=262144)]
    """`intermediate_size` (of the MLP)."""
    num_hidden_layers: Annotated[int, Field(ge=1, le=1024)]
    """`num_hidden_layers`."""
    num_attention_heads: Annotated[int, Field(ge=1, le=1024)]
    """`num_attention_heads`."""
    num_key_value_heads: Annotated[int, Field(ge=1, le=1024)]
    """`num_key_value_heads`."""


class LoraSettings(ConfigModel):
    """vLLM's LoRA limits for the base model's servers; each defaults to what its adapters need (README, LoRA
    adapters)."""

    max_lora_rank: MaxLoraRank | None = None
    """vLLM `--max-lora-rank`, one of 1, 8, 16, 32, 64, 128, 256, 320, 512 (vLLM 0.33.0's choices): no adapter may have
    a higher rank. Default: the smallest choice that holds the highest adapter rank."""
    max_loras: Annotated[int, Field(ge=1, le=64)] | None = None
    """vLLM `--max-loras`: adapter modules resident on the GPU at once (one batch mixes at most this many). Default:
    every loaded module (each adapter revision); a latency-sensitive profile needs them all resident."""
    max_cpu_loras: Annotated[int, Field(ge=1, le=1024)] | None = None
    """vLLM `--max-cpu-loras`: adapter modules cached in CPU memory, at least `maxLoras`. Default: every loaded module,
    and at least `maxLoras`."""
    base_shape: BaseShape | None = None
    """The base model's shape, for the estimate of what the adapters hold in GPU and CPU memory (the capacity report
    and checks). Without it the memory is not estimated."""
