"""Batch jobs on Kueue: their quotas, references, pools, adapters, pinned inputs, parallelism and deadlines.

A shard's GPU request and estimated run time are platform_config/batch_jobs.py's, which the plan sizes a job by.
"""

from __future__ import annotations

import math
import re
from decimal import Decimal
from typing import Iterator

from ..adapters import adapter_revisions, adapter_tenant, batch_job_adapter, on_adapter_base
from ..batch_jobs import MAX_BATCH_SHARDS, batch_gpu_request, batch_shards, shard_estimate_seconds
from ..capacity import batch_budget, budget_resources, pool_supply
from ..errors import ConfigIssue, format_key
from ..models import COMMIT_SHA, S3_VERSION_FOLDER, PlatformConfig, duration_seconds
from ..quantity import show_amount
from .names import duplicates
from .tenants import resource_key


def check_batch_quota_pools(config: PlatformConfig) -> Iterator[ConfigIssue]:
    """A tenant's batch quota names pools it may use; it is part of its experiment quota (batch
    pods run at experiment priority, so the namespace's ResourceQuota bounds them); and the
    tenants' nominal batch quotas fit each pool at maxSize."""
    pools = {p.name: p for p in config.node_pools}
    nominal: dict[tuple[str, str], Decimal] = {}
    for index, tenant in enumerate(config.tenants):
        for pool_name, budget in tenant.batch_quota.items():
            key = ("tenants", index, "batchQuota", pool_name)
            if pool_name not in pools:
                yield ConfigIssue(key, f"unknown pool {pool_name!r}: give one of {', '.join(pools)}")
                continue
            if tenant.pools is not None and pool_name not in tenant.pools:
                yield ConfigIssue(key, f"tenant {tenant.name!r} may only use pools {', '.join(tenant.pools)}")
                continue
            supply = pool_supply(pools[pool_name]).per_node
            for resource, amount in budget_resources(budget).items():
                if resource in ("cpu", "memory"):
                    continue
                if resource not in supply:
                    yield ConfigIssue(
                        (*key, *resource_key(resource)),
                        f"pool {pool_name!r} provides no {resource} (it provides {', '.join(sorted(supply))})",
                    )
                nominal[(pool_name, resource)] = nominal.get((pool_name, resource), Decimal(0)) + amount
        headroom = batch_budget(tenant)
        for resource, amount in headroom.total.items():
            room = headroom.room(resource)
            if room is not None and room < 0:
                allowed = headroom.allowed(resource)
                yield ConfigIssue(
                    ("tenants", index, "batchQuota"),
                    f"batch quotas add up to {show_amount(resource, amount)} of {resource}, more than "
                    f"{format_key(('tenants', index, 'experimentQuota', *resource_key(resource)))} "
                    f"({show_amount(resource, allowed)}): batch pods run at experiment priority, within that quota",
                )
    for (pool_name, resource), amount in sorted(nominal.items()):
        supply_at_max = pool_supply(pools[pool_name]).at_max(resource)
        if amount > supply_at_max:
            yield ConfigIssue(
                ("tenants",),
                f"batch quotas on pool {pool_name!r} add up to {amount} of {resource}, more than the pool's "
                f"{supply_at_max} at maxSize",
            )


def check_batch_job_references(config: PlatformConfig) -> Iterator[ConfigIssue]:
    """A job names a known tenant and pool, a unique name, a model source it can load, and
    S3 (its output) only on EKS, where its workload role reaches it."""
    tenants = {t.name for t in config.tenants}
    pools = {p.name: p for p in config.node_pools}
    for index, name in duplicates([j.name for j in config.batch_jobs]):
        yield ConfigIssue(("batchJobs", index, "name"), f"duplicate name {name!r}: names must be unique within batchJobs")
    for index, job in enumerate(config.batch_jobs):
        if job.tenant not in tenants:
            yield ConfigIssue(("batchJobs", index, "tenant"), f"unknown tenant {job.tenant!r}: give one of {', '.join(tenants)}")
        if job.pool not in pools:
            yield ConfigIssue(("batchJobs", index, "pool"), f"unknown pool {job.pool!r}: give one of {', '.join(pools)}")
        else:
            resource, _ = batch_gpu_request(job)
            if resource not in pool_supply(pools[job.pool]).per_node:
                yield ConfigIssue(("batchJobs", index, "model", "resources"), f"pool {job.pool!r} provides no {resource}")
        if job.model.source.mlflow is not None:
            yield ConfigIssue(
                ("batchJobs", index, "model", "source", "mlflow"),
                "batch jobs load Hugging Face or S3 weights; MLflow references are not resolved for them yet",
            )
        if config.cluster.mode != "eks":
            yield ConfigIssue(
                ("batchJobs", index, "output"),
                "batch jobs write to S3 with their own workload role, which needs cluster.mode 'eks'",
            )
        if job.chunk_lines > job.shard_lines:
            yield ConfigIssue(
                ("batchJobs", index, "chunkLines"), f"{job.chunk_lines} is more than shardLines ({job.shard_lines})"
            )


def check_batch_shards(config: PlatformConfig) -> Iterator[ConfigIssue]:
    """A job's shards (its Indexed Job's completions) are at most MAX_BATCH_SHARDS, what Kubernetes admits for a Job
    with backoffLimitPerIndex."""
    for index, job in enumerate(config.batch_jobs):
        shards = batch_shards(job)
        if shards > MAX_BATCH_SHARDS:
            yield ConfigIssue(
                ("batchJobs", index, "lines"),
                f"{job.lines} lines in shards of shardLines={job.shard_lines} make {shards} shards, more than the "
                f"{MAX_BATCH_SHARDS} completions Kubernetes admits for an Indexed Job with backoffLimitPerIndex: raise "
                f"shardLines to at least {-(-job.lines // MAX_BATCH_SHARDS)}",
            )


def check_batch_job_pool(config: PlatformConfig) -> Iterator[ConfigIssue]:
    """A batch job runs on a pool its tenant may use."""
    tenants = {t.name: t for t in config.tenants}
    for index, job in enumerate(config.batch_jobs):
        tenant = tenants.get(job.tenant)
        if tenant is not None and tenant.pools is not None and job.pool not in tenant.pools:
            yield ConfigIssue(
                ("batchJobs", index, "pool"),
                f"tenant {tenant.name!r} may only use pools {', '.join(tenant.pools)}, not {job.pool!r}",
            )


def check_batch_job_adapter(config: PlatformConfig) -> Iterator[ConfigIssue]:
    """A job's adapter is one of `models[]`, of the job's own tenant (an adapter never runs for
    another tenant), on the job's base weights, with a source the pod can fetch as pinned (batch
    jobs resolve no MLflow references, and an S3 version folder is never a moving name)."""
    for index, job in enumerate(config.batch_jobs):
        if job.model.adapter is None:
            continue
        key = ("batchJobs", index, "model", "adapter")
        found = batch_job_adapter(config, job)
        if found is None:
            known = [a.name for m in config.models for a in m.adapters]
            yield ConfigIssue(
                key,
                f"unknown adapter {job.model.adapter!r}: give the name of an adapter in models[] "
                f"({', '.join(known) or 'none is declared'})",
            )
            continue
        model, adapter = found
        owner = adapter_tenant(model, adapter)
        if owner != job.tenant:
            yield ConfigIssue(
                key,
                f"adapter {adapter.name!r} belongs to tenant {owner!r}, not the job's tenant {job.tenant!r}: "
                "a job runs only its own tenant's adapters",
            )
        if not on_adapter_base(model, job.model.source):
            yield ConfigIssue(
                ("batchJobs", index, "model", "source"),
                f"adapter {adapter.name!r} is trained on model {model.name!r}: give the source of one of its versions "
                "(the same base weights)",
            )
        _, source = adapter_revisions(adapter)[0]
        if source.mlflow is not None:
            yield ConfigIssue(
                key,
                f"adapter {adapter.name!r} is an MLflow reference, which batch jobs do not resolve yet: "
                "give it a Hugging Face commit SHA or an S3 version folder",
            )
        elif source.s3_uri is not None and not _pinned_s3_folder(str(source.revision)):
            yield ConfigIssue(
                key,
                f"adapter {adapter.name!r} is not pinned (S3 revision {source.revision!r}): give a version folder "
                "that is never rewritten",
            )


def _pinned_s3_folder(revision: str) -> bool:
    """Whether an S3 revision is a version folder that is never rewritten (one path segment, never a moving name
    such as `latest`): what a batch job's input and its adapter are held to."""
    return re.fullmatch(S3_VERSION_FOLDER, revision) is not None and revision.lower() not in ("latest", "current", "main")


def check_batch_input_pinned(config: PlatformConfig) -> Iterator[ConfigIssue]:
    """A job's input is pinned: a dataset commit SHA, or an S3 version folder (never a moving
    name such as `latest`), so a resumed or retried shard reads the very lines it started on."""
    for index, job in enumerate(config.batch_jobs):
        source = job.input
        key = ("batchJobs", index, "input", "revision")
        if source.revision is None:
            yield ConfigIssue(key, "the input is not pinned: give the dataset's commit SHA or the S3 version folder")
        elif source.huggingface is not None and not re.fullmatch(COMMIT_SHA, source.revision):
            yield ConfigIssue(
                key, f"{source.revision!r} is not pinned: give the 40-character commit SHA of the dataset repository"
            )
        elif source.s3_uri is not None and not _pinned_s3_folder(source.revision):
            yield ConfigIssue(
                key, f"{source.revision!r} is not pinned: give the input's version folder (one path segment, never 'latest')"
            )


def check_batch_parallelism_within_quota(config: PlatformConfig) -> Iterator[ConfigIssue]:
    """GPUs per shard x parallelism fit the tenant's nominal batch quota on the job's pool: a
    job may borrow beyond it, but must be able to run on its own guarantee."""
    tenants = {t.name: (i, t) for i, t in enumerate(config.tenants)}
    for index, job in enumerate(config.batch_jobs):
        if job.tenant not in tenants:
            continue
        t_index, tenant = tenants[job.tenant]
        resource, per_shard = batch_gpu_request(job)
        need = per_shard * job.parallelism
        budget = tenant.batch_quota.get(job.pool)
        have = budget_resources(budget).get(resource, Decimal(0)) if budget is not None else Decimal(0)
        if need > have:
            yield ConfigIssue(
                ("batchJobs", index, "parallelism"),
                f"{job.parallelism} shards x {per_shard} {resource} = {need}, more than "
                f"{format_key(('tenants', t_index, 'batchQuota', job.pool, *resource_key(resource)))} ({have}): "
                f"lower parallelism to {int(have) // per_shard if per_shard else 0} or raise the batch quota",
            )


def check_batch_deadline(config: PlatformConfig) -> Iterator[ConfigIssue]:
    """The deadline covers at least one shard's estimate (shard_estimate_seconds)."""
    for index, job in enumerate(config.batch_jobs):
        estimate = shard_estimate_seconds(job)
        deadline = duration_seconds(job.deadline)
        if deadline < estimate:
            yield ConfigIssue(
                ("batchJobs", index, "deadline"),
                f"{job.deadline} is shorter than one shard's estimate: {min(job.shard_lines, job.lines)} lines x "
                f"{job.tokens_per_line} tokens / {job.tokens_per_second} tokens/s = {math.ceil(estimate)} s",
            )
