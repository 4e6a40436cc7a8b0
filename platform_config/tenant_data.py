"""Where a tenant's data is: the S3 locations its workloads name, and whether one lies under a prefix (pure).

A tenant declares its prefixes (`tenants[].s3Prefixes`); every S3 location its models, adapters and batch jobs name
must lie under one of them (platform_config/checks/tenants.py check_tenant_s3_data), so no stack change can grant a tenant's
role another tenant's data or the platform's own (the weight mirror's bucket, whose copies the platform writes and
each tenant's servers read under `<bucket>/<tenant>/`). The pack checks the rendered IAM policies the same way
(policies/inference_governance/tenant_s3.py tenant_s3_scoping), from the prefixes the tenants' namespaces carry."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from .models import ModelSource, PlatformConfig

# The annotation on a tenant's namespace that names its prefixes (JSON list), for the pack.
ANNOTATION_S3_PREFIXES = "inference.platform/s3-prefixes"


@dataclass(frozen=True)
class TenantLocation:
    key: tuple[str | int, ...]  # the config key that names it
    tenant: str
    uri: str


def _source(key: tuple[str | int, ...], tenant: str, source: ModelSource | None) -> Iterator[TenantLocation]:
    if source is not None and source.s3_uri is not None:
        yield TenantLocation((*key, "source", "s3Uri"), tenant, source.s3_uri)


def tenant_s3_locations(config: PlatformConfig) -> Iterator[TenantLocation]:
    """Every S3 location a tenant's workloads read or write, under the key that names it: model versions' and
    adapters' sources (after registry resolution, what the registry or its lock file named), batch jobs' model,
    input and output."""
    for m_index, model in enumerate(config.models):
        for v_index, version in enumerate(model.versions):
            yield from _source(("models", m_index, "versions", v_index), model.tenant, version.source)
        for a_index, adapter in enumerate(model.adapters):
            yield from _source(("models", m_index, "adapters", a_index), model.tenant, adapter.source)
            for r_index, revision in enumerate(adapter.versions or []):
                yield from _source(("models", m_index, "adapters", a_index, "versions", r_index), model.tenant, revision.source)
    for j_index, job in enumerate(config.batch_jobs):
        yield from _source(("batchJobs", j_index, "model"), job.tenant, job.model.source)
        if job.input.s3_uri is not None:
            yield TenantLocation(("batchJobs", j_index, "input", "s3Uri"), job.tenant, job.input.s3_uri)
        yield TenantLocation(("batchJobs", j_index, "output"), job.tenant, job.output)
