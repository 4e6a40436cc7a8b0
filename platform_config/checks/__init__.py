"""Checks that span more than one field: references, uniqueness, MIG geometry, capacity.

Each check is a pure function from the parsed config to the issues it finds, one rule each,
named like the policy that enforces the same rule at runtime where there is one, in the module
of its domain; `CHECKS` runs them all, and the loader raises one ConfigError naming every
offending key. The checks of each model at its peak (`PEAK_CHECKS`) take the peaks its serving
backend sizes, and run when the config is resolved into the plan; rules of one serving mode only
live in its backend.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Callable, Iterable

from ..errors import ConfigIssue
from ..models import PlatformConfig
from ..serving import Peak
from .adapters import (
    check_adapter_canary_steps,
    check_adapter_memory,
    check_adapter_names_unique,
    check_adapter_on_own_tenants_base,
    check_adapter_ranks,
    check_adapter_revisions,
    check_adapter_sources,
    check_adapters_on_a_base_that_takes_them,
    check_adapters_resident,
    check_batch_model_adapters,
)
from .batch import (
    check_batch_deadline,
    check_batch_input_pinned,
    check_batch_job_adapter,
    check_batch_job_pool,
    check_batch_job_references,
    check_batch_parallelism_within_quota,
    check_batch_quota_pools,
    check_batch_shards,
)
from .capacity import check_capacity, check_models_fit_nodes, check_models_fit_pools, check_models_fit_quotas
from .gateway import check_gateway_headers, check_gateway_tls, check_tier_queues
from .models import (
    check_batch_labelling_kept_apart,
    check_batch_models,
    check_chat_templates,
    check_inference_graceful_drain,
    check_latency_sensitive_not_time_sliced,
    check_model_references,
    check_production_server_images,
    check_release_versions,
    check_scale_to_zero_only_where_the_profile_allows,
    check_time_sliced_memory_share,
)
from .names import check_object_names, check_server_component_names, check_unique_names
from .pools import check_gpu_sharing
from .registry import check_registry_lock, check_registry_sources, check_serving_aliases_are_not_read
from .tenants import check_tenant_groups, check_tenant_pools, check_tenant_s3_data, check_tenants
from .weights import (
    check_cold_start_within_scale_up_budget,
    check_production_reads_hugging_face_from_the_mirror,
    check_s3_weights_need_eks,
    check_streamed_weights_come_from_s3,
    check_weight_mirror_needs_eks,
    check_weights_cache_fits_the_node_disk,
    check_weights_fit_gpu_memory,
)

# What callers outside the package use: the loader, the plan (components/plan.py) and the tests.
__all__ = [
    "CHECKS",
    "PEAK_CHECKS",
    "Check",
    "PeakCheck",
    "run_checks",
    "run_peak_checks",
]

Check = Callable[[PlatformConfig], Iterable[ConfigIssue]]


CHECKS: list[Check] = [
    check_unique_names,
    check_gpu_sharing,
    check_tenants,
    check_capacity,
    check_model_references,
    check_release_versions,
    check_tenant_pools,
    check_models_fit_nodes,
    check_latency_sensitive_not_time_sliced,
    check_scale_to_zero_only_where_the_profile_allows,
    check_batch_labelling_kept_apart,
    check_time_sliced_memory_share,
    check_inference_graceful_drain,
    check_s3_weights_need_eks,
    check_registry_sources,
    check_serving_aliases_are_not_read,
    check_chat_templates,
    check_production_server_images,
    check_weights_cache_fits_the_node_disk,
    check_weight_mirror_needs_eks,
    check_streamed_weights_come_from_s3,
    check_production_reads_hugging_face_from_the_mirror,
    check_cold_start_within_scale_up_budget,
    check_batch_models,
    check_registry_lock,
    check_gateway_headers,
    check_tenant_groups,
    check_tenant_s3_data,
    check_gateway_tls,
    check_object_names,
    check_server_component_names,
    check_tier_queues,
    check_adapter_names_unique,
    check_adapter_revisions,
    check_adapters_on_a_base_that_takes_them,
    check_adapter_ranks,
    check_adapters_resident,
    check_adapter_on_own_tenants_base,
    check_batch_model_adapters,
    check_adapter_canary_steps,
    check_adapter_sources,
    check_weights_fit_gpu_memory,
    check_adapter_memory,
    check_batch_quota_pools,
    check_batch_job_references,
    check_batch_shards,
    check_batch_job_pool,
    check_batch_job_adapter,
    check_batch_input_pinned,
    check_batch_parallelism_within_quota,
    check_batch_deadline,
]


def run_checks(config: PlatformConfig) -> list[ConfigIssue]:
    issues: list[ConfigIssue] = []
    for check in CHECKS:
        issues.extend(check(config))
    return issues


PeakCheck = Callable[[PlatformConfig, Mapping[str, Peak]], Iterable[ConfigIssue]]


# Checks of every model at its peak, which its serving backend sizes (rollout surge, injected
# containers): run by the plan (components/plan.py) once the config checks pass.
PEAK_CHECKS: list[PeakCheck] = [check_models_fit_quotas, check_models_fit_pools]


def run_peak_checks(config: PlatformConfig, peaks: Mapping[str, Peak]) -> list[ConfigIssue]:
    return [issue for check in PEAK_CHECKS for issue in check(config, peaks)]
