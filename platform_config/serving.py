"""What a model asks of the platform: its effective profile and tiers, its GPU request, its
replica bounds per version and what all of it holds at peak (pure functions)."""

from __future__ import annotations

import dataclasses
import math
from decimal import Decimal

from .gpu_catalog import GPU_RESOURCE, mig_resource
from .models import ModelConfig, PlatformConfig
from .profiles import EXPERIMENT_PRIORITY_CLASS, PROFILES, WorkloadProfile
from .quantity import parse_quantity

# The Deployment rollout surges one pod above the current count (maxSurge 1, maxUnavailable 0).
ROLLOUT_SURGE = 1
# Seconds kept between vLLM's drain deadline and the kubelet's SIGKILL.
DRAIN_MARGIN_SECONDS = 10


def effective_profile(config: PlatformConfig, model: ModelConfig) -> WorkloadProfile:
    """The model's profile with the stack's overrides for that profile applied."""
    profile = PROFILES[model.profile]
    override = config.profiles.get(model.profile)
    if override is None:
        return profile
    changes = {k: v for k, v in override.model_dump().items() if v is not None}
    if "tiers" in changes:
        changes["tiers"] = tuple(changes["tiers"])
    return dataclasses.replace(profile, **changes)


def model_tiers(config: PlatformConfig, model: ModelConfig) -> tuple[str, ...]:
    """Tiers the model's own servers take: its own list, or its profile's."""
    return tuple(model.tiers) if model.tiers else effective_profile(config, model).tiers


def replica_gpu_request(model: ModelConfig) -> tuple[str, int]:
    """The GPU resource and count one replica of a model asks for."""
    if model.resources.mig_profile is not None:
        return mig_resource(model.resources.mig_profile), 1
    return GPU_RESOURCE, model.resources.gpus or 1


def version_replica_bounds(model: ModelConfig, version: str) -> tuple[int, int]:
    """(min, max) replicas of one version's server.

    Without a canary the stable version takes the model's bounds. During a canary each version's
    maximum follows its share of the traffic (never below the minimum), so the two together need
    about the model's maximum plus one minimum, not twice the maximum.
    """
    scaling = model.autoscaling
    release = model.release
    if release.canary is None:
        return scaling.min_replicas, scaling.max_replicas
    share = release.canary_weight if version == release.canary else 100 - release.canary_weight
    return scaling.min_replicas, max(scaling.min_replicas, math.ceil(scaling.max_replicas * share / 100))


def running_versions(model: ModelConfig) -> list[str]:
    release = model.release
    return [release.stable] + ([release.canary] if release.canary else [])


def model_priority_class(model: ModelConfig) -> str:
    return model.priority_class or PROFILES[model.profile].priority_class


def is_experiment(model: ModelConfig) -> bool:
    return model_priority_class(model) == EXPERIMENT_PRIORITY_CLASS


def peak_replicas(model: ModelConfig) -> int:
    """Pods of all running versions at their maximum, plus the rollout surge of Deployments."""
    surge = ROLLOUT_SURGE if model.autoscaling.mode == "hpa" else 0
    return sum(version_replica_bounds(model, v)[1] + surge for v in running_versions(model))


def model_peak_demand(model: ModelConfig) -> dict[str, Decimal]:
    """What all running versions of a model hold at their maximum replica counts, while a
    rollout surges."""
    resource, per_replica = replica_gpu_request(model)
    replicas = peak_replicas(model)
    return {
        resource: Decimal(per_replica * replicas),
        "cpu": parse_quantity(model.resources.cpu) * replicas,
        "memory": parse_quantity(model.resources.memory) * replicas,
    }


