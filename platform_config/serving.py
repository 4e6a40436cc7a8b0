"""What a model asks of the platform: its effective profile and tiers, its GPU request, its
replica bounds per version and what all of it holds at peak (pure functions)."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import get_args

from .gpu_catalog import GPU_RESOURCE, mig_resource
from .models import ModelConfig, ModelVersion, PlatformConfig, ReleaseConfig, ServerArgs, TierPolicy, duration_seconds
from .profiles import EXPERIMENT_PRIORITY_CLASS, PROFILES, TierName, WorkloadProfile
from .quantity import parse_quantity

# Request headers other components act on, by prefix: the endpoint pickers' and their proxies'
# (llm-d-router v0.10.0 pkg/epp/metadata/consts.go: `x-llm-d-*`, `x-gateway-*` and the deprecated
# `x-slo-*`) and vLLM's (0.28.0 and later read `X-Vllm-Priority`, vllm/entrypoints/generate/base/
# serving.py). The gateway filter strips every client value under them, so none can be a header
# the platform's own config names (the filter would strip it too).
EPP_HEADER_PREFIXES: tuple[str, ...] = ("x-llm-d-", "x-gateway-", "x-slo-")
VLLM_HEADER_PREFIX = "x-vllm-"
# The request priority vLLM's generate endpoints read over the body's (vLLM 0.33.0
# vllm/entrypoints/generate/base/serving.py PRIORITY_HEADER "X-Vllm-Priority", `_get_priority`: an integer
# there wins, anything else falls back to the body). Under the prefix above, so a client's is always stripped
# before the gateway sets its own.
VLLM_PRIORITY_HEADER = "x-vllm-priority"
CONTROL_HEADER_PREFIXES: tuple[str, ...] = (*EPP_HEADER_PREFIXES, VLLM_HEADER_PREFIX)

# Seconds kept between vLLM's drain deadline and the kubelet's SIGKILL.
DRAIN_MARGIN_SECONDS = 10


def effective_profile(config: PlatformConfig, model: ModelConfig) -> WorkloadProfile:
    """The model's profile with the stack's overrides for that profile applied."""
    profile = PROFILES[model.profile]
    override = config.profiles.get(model.profile)
    if override is None:
        return profile
    changes = {k: v for k, v in override.model_dump(exclude={"peak"}).items() if v is not None}
    if "tiers" in changes:
        changes["tiers"] = tuple(changes["tiers"])
    return dataclasses.replace(profile, **changes)


@dataclass(frozen=True)
class ResolvedPeak:
    """The load a model is judged at: its peak's requests per second (None: no peak stated) and a typical
    request's prompt and output tokens (the peak's, else the profile's)."""

    requests_per_second: float | None
    prompt_tokens: int
    output_tokens: int


def workload_peak(config: PlatformConfig, model: ModelConfig) -> ResolvedPeak:
    """The model's `slo.peak`, else its profile's (`profiles.<name>.peak`), with the profile's typical lengths where
    the peak states none."""
    profile = PROFILES[model.profile]
    override = config.profiles.get(model.profile)
    peak = model.slo.peak or (override.peak if override is not None else None)
    if peak is None:
        return ResolvedPeak(None, profile.prompt_tokens, profile.output_tokens)
    return ResolvedPeak(
        peak.requests_per_second, peak.prompt_tokens or profile.prompt_tokens, peak.output_tokens or profile.output_tokens
    )


def latency_target_ms(config: PlatformConfig, model: ModelConfig) -> int | None:
    """The model's latency target: its `slo.latencyTargetMs`, else its profile's."""
    return model.slo.latency_target_ms or effective_profile(config, model).ttft_target_ms


def model_tiers(config: PlatformConfig, model: ModelConfig) -> tuple[TierName, ...]:
    """Tiers the model's own servers take: its own list, or its profile's."""
    return tuple(model.tiers) if model.tiers else effective_profile(config, model).tiers


def served_tiers(config: PlatformConfig, model: ModelConfig) -> tuple[TierName, ...]:
    """Tiers requests reach the model's servers with, in tier order: its own tiers, less batch
    when its batch tier goes to its batch model, plus batch when another model sends its batch
    tier here. What its servers schedule by, drain for and offer subsets for."""
    tiers = set(model_tiers(config, model))
    if model.batch_model is not None:
        tiers.discard("batch")
    if model.name in config.batch_senders:
        tiers.add("batch")
    return tuple(t for t in get_args(TierName) if t in tiers)


def schedules_by_priority(config: PlatformConfig, model: ModelConfig) -> bool:
    """Whether the model's servers schedule by the priority the gateway writes into each
    request (vLLM's --scheduling-policy priority): when several tiers share them."""
    return len(served_tiers(config, model)) > 1


def route_timeout_seconds(policy: TierPolicy) -> int:
    """Whole seconds a tier's route waits for a response: the gateway's route and per-try
    timeouts, the drain chain and the gateway's stream idle timeout all read this one figure."""
    return math.ceil(duration_seconds(policy.timeout))


@dataclass(frozen=True)
class DrainChain:
    """A request's time bounds and a replica's drain, which must fit together: the gateway's
    route timeout per tier (Envoy), the longest a request to the server may take (Knative's
    revision and response-start timeouts), the preStop delay, vLLM's --shutdown-timeout and the
    pod's grace period (also the sidecar's drain duration)."""

    route_timeout_seconds: dict[TierName, int]
    request_timeout_seconds: int
    pre_stop_seconds: int
    shutdown_timeout_seconds: int
    grace_seconds: int


def drain_chain(config: PlatformConfig, model: ModelConfig) -> DrainChain:
    """The chain, derived in this one place from the tier timeouts: a request may take its
    profile's timeout, or longer when a tier the server takes allows longer routes; vLLM lets
    in-flight requests finish for that long after SIGTERM (which comes after the preStop delay),
    so the grace period is at least preStop + the longest request + a margin before SIGKILL."""
    routes = {t: route_timeout_seconds(config.traffic.tiers[t]) for t in served_tiers(config, model)}
    request = max([effective_profile(config, model).request_timeout_seconds, *routes.values()])
    pre_stop = model.drain.pre_stop_delay_seconds
    grace = max(model.drain.termination_grace_period_seconds, pre_stop + request + DRAIN_MARGIN_SECONDS)
    return DrainChain(routes, request, pre_stop, grace - pre_stop - DRAIN_MARGIN_SECONDS, grace)


# The share of a GPU's memory vLLM takes by default. On a time-sliced pool the GPU's memory is
# split between the pods that share it: the default is split, and the MAX split by the same count
# caps what a stack may set (`check_time_sliced_memory_share`); elsewhere vLLM's own bound holds.
GPU_MEMORY_UTILIZATION_DEFAULT = 0.90
GPU_MEMORY_UTILIZATION_MAX = 0.95


def time_sliced_memory_share(fraction: float, replicas: int) -> float:
    return round(fraction / replicas, 3)


def merged_server_args(model: ModelConfig, version: ModelVersion) -> ServerArgs:
    """The model's vLLM settings with the version's own settings on top."""
    base = model.server.model_dump(exclude_defaults=True)
    base.update(version.server.model_dump(exclude_defaults=True))
    return ServerArgs.model_validate(base)


def replica_gpu_request(model: ModelConfig) -> tuple[str, int]:
    """The GPU resource and count one replica of a model asks for."""
    if model.resources.mig_profile is not None:
        return mig_resource(model.resources.mig_profile), 1
    return GPU_RESOURCE, model.resources.gpus or 1


def replica_bounds(model: ModelConfig) -> tuple[int, int]:
    """(min, max) replicas of each version's server: the model's bounds, whatever the canary
    weight. The bounds live in each version's pod template under Knative (min-scale/max-scale
    annotations), so deriving them from the weight would make every weight step a new revision
    and restart every replica of both versions; a weight change must touch routes only. The
    versions split one model's traffic, so their autoscalers together follow its load (see
    `version_peaks`)."""
    return model.autoscaling.min_replicas, model.autoscaling.max_replicas


def version_weights(model: ModelConfig) -> dict[str, int]:
    """Percent of the model's traffic each running version takes (stable and canary)."""
    release = model.release
    if release.canary is None:
        return {release.stable: 100}
    return {release.stable: 100 - release.canary_weight, release.canary: release.canary_weight}


def release_weights(model: ModelConfig) -> list[int]:
    """The canary weights the release may still take: today's and every configured step above it
    (the canary command moves it one step at a time, the policy pack refuses a longer jump)."""
    release = model.release
    return [release.canary_weight, *(step for step in release.steps if step > release.canary_weight)]


def version_peaks(model: ModelConfig, surge: int) -> dict[str, int]:
    """Pods of each running version at the model's peak, rollouts included. The gateway splits
    the model's load by the versions' weights, and each version's autoscaler follows its share:
    when the heaviest version reaches its maximum, another one of weight w runs
    ceil(max x w / heaviest weight) replicas (at least its minimum, at most its maximum); every
    version may be rolling out (its surge) meanwhile. A canary's peak is that of the heaviest
    split among its remaining steps (50/50 runs both versions at their maximum), so the checks
    hold the quotas and pools to every step the canary command may write: a release is refused
    when it is declared, not stuck half-way. A weight step changes no pod template. (Requests a
    tester forces to a version with the override header are left out: a handful.)"""
    low, high = replica_bounds(model)
    release = model.release
    canary = release.canary
    if canary is None:
        return {release.stable: high + surge}

    def split(canary_weight: int) -> dict[str, int]:
        weights = {release.stable: 100 - canary_weight, canary: canary_weight}
        heaviest = max(weights.values())
        # The heaviest version's share is 1: it runs at its maximum.
        return {v: max(low, min(high, math.ceil(high * w / heaviest))) + surge for v, w in weights.items()}

    return max((split(weight) for weight in release_weights(model)), key=lambda pods: sum(pods.values()))


def server_name(model: ModelConfig, version: str) -> str:
    """The name of a version's server objects (and of its Knative Service's host)."""
    return f"{model.name}-{version}"


def weights_service_account(model: ModelConfig) -> str:
    """The service account whose workload role reads the model's S3 weights."""
    return f"{model.name}-weights"


def running_versions(model: ModelConfig) -> list[str]:
    release = model.release
    return [release.stable] + ([release.canary] if release.canary else [])


def model_priority_class(model: ModelConfig) -> str:
    return model.priority_class or PROFILES[model.profile].priority_class


def is_experiment(model: ModelConfig) -> bool:
    return model_priority_class(model) == EXPERIMENT_PRIORITY_CLASS


# The mesh's sidecar in every model-server pod, sized by annotations on the pod template so
# quotas can count it exactly (memory request = limit, no CPU limit): the
# sidecar.istio.io/proxyCPU, proxyMemory and proxyMemoryLimit annotations replace
# global.proxy.resources (istio/istio 1.30.3 files/injection-template.yaml, "resources"), whose
# default is 100m/128Mi with limits 2000m/1024Mi.
MESH_PROXY_RESOURCES = {"cpu": "100m", "memory": "512Mi"}


@dataclass(frozen=True)
class Peak:
    """What all running versions of a model hold at their peak, rollouts and the containers the
    cluster injects into each pod included."""

    # Pods of each running version, and of all of them.
    pods: dict[str, int]
    replicas: int
    demand: dict[str, Decimal]
    # Pods the model's endpoint pickers add in its tenant's namespace, and their CPU and memory:
    # they count against the tenant's quota but run off the GPU pool.
    picker_pods: int = 0
    picker_demand: dict[str, Decimal] = field(default_factory=dict)


def model_peak(model: ModelConfig, surge: int, injected: tuple[Mapping[str, str], ...]) -> Peak:
    """`surge`: pods a version's rollout adds; `injected`: CPU and memory requests (= memory
    limits) of each container the cluster adds to a pod. Both are the model's backend's."""
    pods = version_peaks(model, surge)
    replicas = sum(pods.values())
    resource, per_replica = replica_gpu_request(model)
    added = {r: sum((parse_quantity(c[r]) for c in injected), Decimal(0)) for r in ("cpu", "memory")}
    return Peak(
        pods=pods,
        replicas=replicas,
        demand={
            resource: Decimal(per_replica * replicas),
            "cpu": (parse_quantity(model.resources.cpu) + added["cpu"]) * replicas,
            "memory": (parse_quantity(model.resources.memory) + added["memory"]) * replicas,
        },
    )


def picker_priority(tier: TierName, policy: TierPolicy) -> int:
    """The endpoint picker's priority of a tier: higher is served first (the opposite of vLLM's,
    llm-d-router v0.10.0 apix InferenceObjective spec.priority), negative is sheddable
    (pkg/epp/util/request/sheddable.go IsSheddable: priority < 0). Tier order decides, so premium
    is never below standard, and standard never below batch."""
    rank = get_args(TierName).index(tier)
    return -1 - rank if policy.sheddable else len(get_args(TierName)) - rank


def queue_seconds(policy: TierPolicy) -> int:
    """A tier's queue bound in whole seconds (`queueTimeout`, rounded up): how long its requests may
    wait for a server, and the Retry-After of its 503s."""
    return math.ceil(duration_seconds(policy.queue_timeout))


# Where no endpoint picker holds the queue, each replica's vLLM takes this many waiting requests per
# sequence it runs before it answers 503: the ratio Knative's queue-proxy keeps "to allow the
# autoscaler time to react" (knative/serving knative-v1.23.0 pkg/queue/sharedmain/main.go buildBreaker).
WAITING_PER_RUNNING = 10


@dataclass(frozen=True)
class ServerAdmission:
    """vLLM 0.33.0's own admission control on a server no endpoint picker times (vllm/v1/engine/
    async_llm.py check_admission: 503 at once, before the request is queued, when `--max-num-queued-reqs`
    requests are unfinished or the prompts still in prefill hold `--max-num-queued-tokens`; the
    API server's check, before the scheduler ever sees the request). It is one bound for the whole
    server, not one per priority, so every tier gets the shortest served tier's."""

    running: int  # `--max-num-seqs`
    max_requests: int  # `--max-num-queued-reqs`: running and waiting
    bound_seconds: int  # the shortest served tier's queue bound
    # `--max-num-queued-tokens`: the prompt tokens the replica prefills in `bound_seconds` (vLLM's
    # "target_TTFT * prefill_throughput", vllm/config/scheduler.py); None without a measured rate.
    max_prefill_tokens: int | None

    @property
    def waiting(self) -> int:
        return self.max_requests - self.running


def server_admission(
    config: PlatformConfig, model: ModelConfig, running: int, prefill_tokens_per_second: int | None
) -> ServerAdmission:
    """The admission bounds of a server of `model` that runs `running` sequences at once."""
    bound = min(queue_seconds(config.traffic.tiers[tier]) for tier in served_tiers(config, model))
    return ServerAdmission(
        running=running,
        max_requests=running * (1 + WAITING_PER_RUNNING),
        bound_seconds=bound,
        max_prefill_tokens=None if prefill_tokens_per_second is None else prefill_tokens_per_second * bound,
    )


def user_key_headers(models: Iterable[ModelConfig]) -> list[str]:
    """Every header a model's servers receive the user in, the release default included: the
    gateway filter removes client values of all of them and sets the verified caller."""
    default = ReleaseConfig.model_fields["user_key_header"].default
    return sorted({default, *(model.release.user_key_header for model in models)})
