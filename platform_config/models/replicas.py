"""A model's replicas: what one asks for, how they scale (HPA or Knative's KPA), the endpoint picker in front of
them and how a stopping one drains."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, model_validator

from ..profiles import AutoscalingMode
from .base import ConfigModel, Duration, MigProfileName, NonNegativeInt, PositiveInt, PositiveQuantity, _duration_between

# Knative refuses a containerConcurrency above its `container-concurrency-max-limit`, 1000 by
# default (knative/serving knative-v1.23.0: pkg/apis/config/defaults.go
# DefaultMaxRevisionContainerConcurrency, checked in pkg/apis/serving/metadata_validation.go).
KNATIVE_MAX_CONTAINER_CONCURRENCY = 1000


class ReplicaResources(ConfigModel):
    """What one replica asks for: `gpus` whole GPUs (or time-sliced shares) or one MIG slice."""

    gpus: PositiveInt | None = None
    """Whole GPUs (or time-sliced shares) per replica: the tensor-parallel size."""
    mig_profile: MigProfileName | None = None
    """One MIG slice per replica instead of `gpus`, e.g. `1g.10gb`."""
    cpu: PositiveQuantity = "4"
    """CPU request per replica (no CPU limit: throttling a tokenizer costs latency)."""
    memory: PositiveQuantity = "32Gi"
    """Memory request and limit per replica."""
    cache_size: PositiveQuantity = "100Gi"
    """Node-local volume the weights are downloaded to: must hold the checkpoint. On a pool that streams weights
    (`weightCache.medium: s3Stream`) the volume holds only the LoRA adapters' files and is sized from them (their
    ranks and `lora.baseShape`, with a margin); `cacheSize` sizes it there only when the base's shape is unknown."""
    weights_size: PositiveQuantity | None = None
    """The checkpoint's size on disk (its safetensors files), from which the expected cold start is derived. Default:
    `cacheSize` (an upper bound)."""

    @model_validator(mode="after")
    def _one_gpu_kind(self) -> ReplicaResources:
        if (self.gpus is None) == (self.mig_profile is None):
            raise ValueError("give exactly one of 'gpus' (whole GPUs per replica) or 'migProfile' (e.g. '1g.10gb')")
        return self


class HpaSettings(ConfigModel):
    gpu_utilization_target: Annotated[int, Field(ge=1, le=100)] | None = 70
    """Average GPU activity (DCGM, percent) the HPA aims at; null to scale on queue depth only."""
    queue_depth_target: PositiveInt | None = 5
    """Average waiting requests per replica (vLLM) the HPA aims at; null to scale on GPU activity only."""
    ttft_p99_target_ms: Annotated[int, Field(ge=10, le=600_000)] | None = None
    """Also scale on latency: the P99 time to first token (ms) each version's pods average, over 5 minutes of
    requests (prometheus-adapter, from vLLM's histogram), beside queue depth and GPU activity; the HPA takes the most
    replicas any of them asks for. Needs a streaming profile (its latency is TTFT) and `scaleUpStabilizationSeconds`
    of at least 60, so that a burst of slow requests does not add replicas it then keeps. Default: none. Knative's KPA
    cannot: it scales on concurrency or requests per second only."""
    scale_up_stabilization_seconds: Annotated[int, Field(ge=0, le=3600)] = 0
    """HPA scale-up stabilization window."""
    scale_down_stabilization_seconds: Annotated[int, Field(ge=0, le=3600)] = 300
    """HPA scale-down stabilization window."""
    scale_down_max_percent: Annotated[int, Field(ge=1, le=100)] = 50
    """At most this percent of replicas removed per `scaleDownPeriodSeconds`."""
    scale_down_period_seconds: Annotated[int, Field(ge=1, le=1800)] = 60
    """Period of the scale-down policy."""
    scale_up_max_pods: PositiveInt = 4
    """At most this many replicas added per `scaleUpPeriodSeconds`."""
    scale_up_period_seconds: Annotated[int, Field(ge=1, le=1800)] = 60
    """Period of the scale-up policy."""

    @model_validator(mode="after")
    def _some_metric(self) -> HpaSettings:
        if self.gpu_utilization_target is None and self.queue_depth_target is None:
            raise ValueError("give at least one of 'gpuUtilizationTarget' or 'queueDepthTarget'")
        return self


class KpaSettings(ConfigModel):
    target_concurrency: PositiveInt | None = None
    """Requests in flight per replica Knative aims at. Default: the profile's concurrency per replica."""
    container_concurrency: Annotated[int, Field(ge=1, le=KNATIVE_MAX_CONTAINER_CONCURRENCY)] | None = None
    """Requests one replica runs at once (vLLM `--max-num-seqs` unless `server.maxNumSeqs` says otherwise); without an
    endpoint picker its vLLM takes 10 times as many waiting, then answers 503 at once. Default: the profile's
    concurrency per replica. The Knative Service's own `containerConcurrency` is always 0: queue-proxy's queue has no
    time bound."""
    scale_down_delay: Annotated[Duration, _duration_between(0, 3600)] = "5m"
    """How long Knative keeps replicas after load drops (0s-1h)."""
    window: Annotated[Duration, _duration_between(6, 3600)] = "60s"
    """Knative's stable window (6s-1h)."""
    initial_scale: NonNegativeInt | None = None
    """Replicas a new revision starts with."""


class AutoscalingConfig(ConfigModel):
    mode: AutoscalingMode
    """`hpa`: a Deployment scaled by an HPA on queue depth and GPU activity; `kpa`: a Knative Service scaled on
    concurrency (it may scale to zero only with `endpointPicker.enabled: false`)."""
    min_replicas: NonNegativeInt
    """Fewest replicas of each running version."""
    max_replicas: PositiveInt
    """Most replicas of each running version (versions split one model's traffic by weight: at peak the heaviest
    runs at its maximum, the others at their share)."""
    hpa: HpaSettings = HpaSettings()
    """Mode `hpa` settings."""
    kpa: KpaSettings = KpaSettings()
    """Mode `kpa` settings."""

    @model_validator(mode="after")
    def _bounds(self) -> AutoscalingConfig:
        if self.max_replicas < self.min_replicas:
            raise ValueError(f"maxReplicas {self.max_replicas} is below minReplicas {self.min_replicas}")
        return self


class EndpointPickerSettings(ConfigModel):
    enabled: bool | None = None
    """Put the llm-d endpoint picker (flow control per tier, queue-, KV-cache- and prefix-cache-aware endpoint
    picking) in front of each version's servers: on, and refused off (the picker's queue is the only one bounded in
    time per tier) but for a Knative model that scales to zero outside production. In mode `kpa` the picker dials
    each pod's queue-proxy, so Knative still counts the load; it dials ready pods only and cannot wake a revision at
    zero, so `minReplicas: 0` needs the picker off (Knative's activator then holds a request from zero, untimed, and
    each replica's vLLM bounds its queue in requests)."""
    replicas: Annotated[int, Field(ge=1, le=16)] = 2
    """Endpoint picker pods per version, active-active (each holds its own queues); at least 2 in production."""


class DrainSettings(ConfigModel):
    termination_grace_period_seconds: Annotated[int, Field(ge=30, le=3600)] = 300
    """Seconds a stopping replica has to finish in-flight requests; raised where needed to cover the preStop delay, the
    longest request the server takes (its profile's or a tier's timeout) and a margin."""
    pre_stop_delay_seconds: Annotated[int, Field(ge=0, le=120)] = 15
    """Seconds for the endpoint to leave every load balancer before vLLM gets SIGTERM."""
