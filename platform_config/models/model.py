"""A served model: its tenant, pool, profile, versions, release, scaling, objectives and adapters."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from ..profiles import PriorityClassName, ProfileName, TierName
from .base import ConfigModel, NamespaceName, ResourceName
from .lora import LoraAdapter, LoraSettings
from .release import ReleaseConfig
from .replicas import AutoscalingConfig, DrainSettings, EndpointPickerSettings, ReplicaResources
from .slo import SloOverride
from .tenants import MAX_TENANTS
from .versions import ModelArchitecture, ModelVersion, ServerArgs

# A model's versions: the registry's history a stack keeps at hand; two of them run (stable and canary).
MAX_VERSIONS = 32
# A model's LoRA adapters: each a name the gateway routes and a slot in vLLM's adapter cache; bounded so a stack's
# size holds the preview's time (README, Security: sizes).
MAX_ADAPTERS = 256


class ModelConfig(ConfigModel):
    name: ResourceName
    """Model name; Kubernetes names derive from it."""
    served_model_name: Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._/:-]{0,127}$")] | None = None
    """The OpenAI `model` clients send; unique across models. Default: `name`."""
    tenant: NamespaceName
    """Tenant (namespace) that runs it; callers whose token names this tenant may call it."""
    callers: Annotated[list[NamespaceName], Field(max_length=MAX_TENANTS)] = []
    """Other tenants whose members (by the token's `traffic.authentication.tenantClaim`) may call it too."""
    pool: ResourceName
    """Node pool it runs on."""
    profile: ProfileName
    """Workload profile: its defaults for tiers, concurrency, timeouts, priority and scale-to-zero (README, Workload profiles)."""
    resources: ReplicaResources
    """What one replica asks for."""
    versions: Annotated[list[ModelVersion], Field(min_length=1, max_length=MAX_VERSIONS)]
    """Every version that may run (at most 32)."""
    release: ReleaseConfig
    """Which versions run, and how traffic splits between them."""
    autoscaling: AutoscalingConfig
    """How replicas scale."""
    server: ServerArgs = ServerArgs()
    """vLLM settings for every version."""
    tiers: Annotated[list[TierName], Field(min_length=1)] | None = None
    """Tiers the model serves. Default: the profile's."""
    batch_model: ResourceName | None = None
    """Send this model's batch-tier requests to another model's servers (e.g. the same weights on a batch pool); that
    model answers to this model's name too, and loads this model's LoRA adapters, whose batch tier goes there as well
    (it must then serve the weights of one of this model's versions, in the adapters' tenant)."""
    priority_class: PriorityClassName | None = None
    """PriorityClass of its pods. Default: the profile's."""
    drain: DrainSettings = DrainSettings()
    """How a stopping replica drains."""
    endpoint_picker: EndpointPickerSettings = EndpointPickerSettings()
    """The endpoint picker in front of each version's servers."""
    slo: SloOverride = SloOverride()
    """Service level objectives the model's alerts hold it to, where they differ from its profile's."""
    architecture: ModelArchitecture | None = None
    """The model's architecture (its config.json): the preview sizes its KV cache, bounds its context length and
    predicts its latency from it. Without it none of that is checked (the report says so)."""
    adapters: Annotated[list[LoraAdapter], Field(max_length=MAX_ADAPTERS)] = []
    """LoRA adapters its servers load beside the base weights, each reached by its own OpenAI name (README, LoRA
    adapters)."""
    lora: LoraSettings = LoraSettings()
    """vLLM's LoRA limits, where they differ from what the adapters need."""

    @property
    def openai_name(self) -> str:
        return self.served_model_name or self.name
