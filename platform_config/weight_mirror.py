"""The weight mirror (`weightMirror`): which pinned Hugging Face revisions the tenants' pods read, where their copy in
S3 is, and the Job that writes each copy once (pure: no Pulumi imports).

With a mirror, no pod of a tenant's downloads from Hugging Face: every Hugging Face revision a running version, a
LoRA adapter module or a batch job's model names is copied by a Job in the platform's `model-weights` namespace to
`s3://<bucket>/<tenant>/<org>/<name>/<revision>/`, before any pod that reads it starts, and the pods read that copy
instead. A server on a streaming pool (`weightCache.medium: s3Stream`) streams it with vLLM's Run:ai streamer loader,
which takes object-store URIs only (vllm/transformers_utils/runai_utils.py is_runai_obj_uri, v0.33.0), at the stream's
rate (platform_config/cold_start.py); a server on a pool that caches weights, a batch job and an adapter's fetcher copy
it with the aws CLI, as they copy any S3 source. So only the mirror's namespace reaches Hugging Face, and a production
stack needs the mirror for every Hugging Face source its pods read (checks/weights.py
check_production_reads_hugging_face_from_the_mirror); a batch job's Hugging Face dataset is not copied.
"""

from __future__ import annotations

import hashlib
import math
import re
from dataclasses import dataclass
from decimal import Decimal

from .adapters import adapter_modules, batch_job_adapter, batch_lora_limits
from .cold_start import GBIT, INTERNET_GATEWAY_SMALL_GBPS, pool_named, weights_bytes
from .models import ModelConfig, ModelSource, ModelVersion, PlatformConfig, WeightMirrorConfig, pinned_s3_uri
from .pins import VLLM
from .serving import running_versions

# A Job copies one file at a time from Hugging Face through the NAT or internet gateway: one flow, which AWS caps at
# 5 Gbit/s outside a placement group (EC2 User Guide, "Amazon EC2 instance network bandwidth"). Its deadline allows
# this many times the copy at that rate, and never less than MIRROR_DEADLINE_FLOOR_SECONDS.
MIRROR_DEADLINE_FACTOR = 4
MIRROR_DEADLINE_FLOOR_SECONDS = 3600
# Kubernetes names a Job's pods' `job-name` label after it: a DNS label of at most 63 characters.
JOB_NAME_MAX = 63


@dataclass(frozen=True)
class MirroredRevision:
    """One Hugging Face revision a tenant's pods read from the mirror, and the Job that copies it."""

    tenant: str
    repo: str
    revision: str
    # The copy, as the servers' source: `s3Uri` the repository's prefix, `revision` its folder.
    copy: ModelSource
    job_name: str
    # The largest checkpoint its readers declare (none for an adapter's: its Job gets the deadline's floor).
    weights_bytes: Decimal
    # The models whose servers read it (their weights or an adapter's), in config order.
    models: tuple[str, ...]
    # The GPU pool whose nodes run the Job (`copy_pool`), and the image it runs (the pinned vLLM image, which the
    # pool's nodes pre-pull for its servers and which has the runner's modules).
    pool: str
    image: str
    # The batch jobs that read it (their model's weights or their adapter), in config order.
    batch_jobs: tuple[str, ...] = ()

    @property
    def folder(self) -> str:
        """The copy's folder, which its servers stream: `s3://<bucket>/<tenant>/<org>/<name>/<revision>/`."""
        return pinned_s3_uri(self.copy)

    @property
    def marker(self) -> str:
        """Where the Job records a finished copy: beside the folder, never in it, because vLLM 0.33.0 pulls every file
        of the folder that is not a weight (vllm/config/model.py maybe_pull_model_tokenizer_for_runai)."""
        return f"{pinned_s3_uri(self.copy).rstrip('/')}.complete"

    @property
    def deadline_seconds(self) -> int:
        """The Job's `activeDeadlineSeconds`: a copy slower than this is stuck."""
        copy = float(self.weights_bytes) / (INTERNET_GATEWAY_SMALL_GBPS * GBIT)
        return max(MIRROR_DEADLINE_FLOOR_SECONDS, math.ceil(MIRROR_DEADLINE_FACTOR * copy / 60) * 60)


def tenant_prefix(mirror: WeightMirrorConfig, tenant: str) -> str:
    """The tenant's part of the mirror: its servers read, and its mirror role writes, only under it."""
    return f"s3://{mirror.bucket}/{tenant}"


def mirror_copy(config: PlatformConfig, tenant: str, source: ModelSource) -> ModelSource | None:
    """The S3 copy a pod of `tenant`'s reads a Hugging Face `source` from, in a stack with a mirror; None where it reads
    `source` itself (no mirror, or not a Hugging Face source)."""
    mirror = config.weight_mirror
    if mirror is None or source.huggingface is None:
        return None
    return ModelSource.model_validate(
        {"s3Uri": f"{tenant_prefix(mirror, tenant)}/{source.huggingface}", "revision": source.revision}
    )


def mirrored_source(config: PlatformConfig, model: ModelConfig, version: ModelVersion) -> ModelSource | None:
    """The S3 copy a server reads a Hugging Face version from (`mirror_copy`), on any pool: streamed where the pool
    streams, else copied onto the node's cache like any S3 source."""
    return mirror_copy(config, model.tenant, version.source)


def hugging_face_revision(source: ModelSource) -> tuple[str, str]:
    """A mirrored source's repository and commit (the mirror copies pinned Hugging Face sources only)."""
    assert source.huggingface is not None and source.revision is not None, f"{source}: not a pinned Hugging Face source"
    return source.huggingface, source.revision


def mirror_job_name(tenant: str, repo: str, revision: str) -> str:
    """A DNS label naming the copy (tenant, repository, revision): the same copy keeps its Job across changes of the
    models that read it, and a new revision is a new Job (a Job's pod template cannot change)."""
    digest = hashlib.sha256(f"{tenant}/{repo}@{revision}".encode()).hexdigest()[:8]
    suffix = f"-{revision[:7]}-{digest}"
    readable = re.sub(r"[^a-z0-9]+", "-", f"{tenant}-{repo.split('/')[-1]}".lower())
    return readable[: JOB_NAME_MAX - len(suffix)].strip("-") + suffix


def copy_pool(config: PlatformConfig, pools: tuple[str, ...]) -> str:
    """The pool a copy's Job runs on, of its readers' `pools` (in config order): the first that keeps nodes up
    (`minSize` > 0), where the vLLM image is already pulled and no node starts for the copy alone; else the first
    reader's, which starts a node its readers need next anyway. Not the system nodes: their disk (EKS's default 20 GiB)
    has no room for the image."""
    by_name = [pool_named(config, name) for name in pools]
    return next((p.name for p in by_name if p.min_size > 0), by_name[0].name)


@dataclass(frozen=True)
class _Read:
    """One reader of a Hugging Face revision: the tenant whose pod reads it, the source, the reader's checkpoint size
    (0 for an adapter), and the model or batch job it is (and its pool)."""

    tenant: str
    source: ModelSource
    size: Decimal
    pool: str
    model: str | None = None
    batch_job: str | None = None


def _reads(config: PlatformConfig) -> list[_Read]:
    """Every Hugging Face source a running pod of a tenant's reads, in config order: the running versions' weights and
    the adapter modules of each model's servers, then each batch job's model and adapter."""
    reads: list[_Read] = []
    for model in config.models:
        running = set(running_versions(model))
        sources = [(v.source, weights_bytes(model)) for v in model.versions if v.name in running]
        sources += [(m.source, Decimal(0)) for m in adapter_modules(config, model)]
        reads += [_Read(model.tenant, s, size, model.pool, model=model.name) for s, size in sources]
    for job in config.batch_jobs:
        sources = [(job.model.source, weights_bytes(job.model))]
        if (found := batch_job_adapter(config, job)) is not None:
            sources += [(m.source, Decimal(0)) for m in batch_lora_limits(*found).modules]
        reads += [_Read(job.tenant, s, size, job.pool, batch_job=job.name) for s, size in sources]
    return [read for read in reads if read.source.huggingface is not None]


def mirrored_revisions(config: PlatformConfig) -> tuple[MirroredRevision, ...]:
    """Every revision the tenants' running pods read from the mirror (`_reads`), once per tenant, in config order:
    one selection of files serves weights and adapters alike (components/mirror_runner), so a revision read both ways
    is one copy and one Job."""
    if config.weight_mirror is None:
        return ()
    found: dict[tuple[str, str, str], list[_Read]] = {}
    for read in _reads(config):
        found.setdefault((read.tenant, *hugging_face_revision(read.source)), []).append(read)
    revisions = []
    for (tenant, repo, revision), reads in found.items():
        copy = mirror_copy(config, tenant, reads[0].source)
        assert copy is not None, "a Hugging Face source in a stack with a mirror"
        revisions.append(
            MirroredRevision(
                tenant=tenant,
                repo=repo,
                revision=revision,
                copy=copy,
                job_name=mirror_job_name(tenant, repo, revision),
                weights_bytes=max(r.size for r in reads),
                models=tuple(dict.fromkeys(r.model for r in reads if r.model is not None)),
                pool=copy_pool(config, tuple(dict.fromkeys(r.pool for r in reads))),
                image=VLLM.image,
                batch_jobs=tuple(dict.fromkeys(r.batch_job for r in reads if r.batch_job is not None)),
            )
        )
    return tuple(revisions)
