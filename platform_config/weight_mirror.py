"""The weight mirror (`weightMirror`): which pinned Hugging Face revisions the streaming pools serve, where their copy
in S3 is, and the Job that writes each copy once (pure: no Pulumi imports).

A server on a streaming pool (`weightCache.medium: s3Stream`) reads its weights from S3 with vLLM's Run:ai streamer
loader, which takes object-store URIs only (vllm/transformers_utils/runai_utils.py is_runai_obj_uri, v0.33.0). With
a mirror, a Hugging Face version is served from `s3://<bucket>/<tenant>/<org>/<name>/<revision>/`, the folder the
mirror Job fills from that revision before any of its servers starts; every replica after that streams from the
Region's S3 at the stream's rate (platform_config/cold_start.py), never from Hugging Face.
"""

from __future__ import annotations

import hashlib
import math
import re
from dataclasses import dataclass
from decimal import Decimal

from .cold_start import GBIT, INTERNET_GATEWAY_SMALL_GBPS, pool_named, streams_weights, weights_bytes
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
    """One Hugging Face revision a tenant's streaming servers read from the mirror, and the Job that copies it."""

    tenant: str
    repo: str
    revision: str
    # The copy, as the servers' source: `s3Uri` the repository's prefix, `revision` its folder.
    copy: ModelSource
    job_name: str
    weights_bytes: Decimal
    # The models whose servers read it, in config order.
    models: tuple[str, ...]
    # The GPU pool whose nodes run the Job (`copy_pool`), and the image it runs (the pinned vLLM image, which the
    # pool's nodes pre-pull for its servers and which has the runner's modules).
    pool: str
    image: str

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


def mirrored_source(config: PlatformConfig, model: ModelConfig, version: ModelVersion) -> ModelSource | None:
    """The S3 copy a server reads a Hugging Face version from: on a streaming pool of a stack with a mirror; None
    where the version is served from its own source."""
    source = version.source
    mirror = config.weight_mirror
    if mirror is None or source.huggingface is None or not streams_weights(pool_named(config, model.pool)):
        return None
    return ModelSource.model_validate(
        {"s3Uri": f"{tenant_prefix(mirror, model.tenant)}/{source.huggingface}", "revision": source.revision}
    )


def hugging_face_revision(version: ModelVersion) -> tuple[str, str]:
    """A mirrored version's repository and commit (mirrored_source copies pinned Hugging Face versions only)."""
    source = version.source
    assert source.huggingface is not None and source.revision is not None, f"{version.name}: not a Hugging Face version"
    return source.huggingface, source.revision


def mirror_job_name(tenant: str, repo: str, revision: str) -> str:
    """A DNS label naming the copy (tenant, repository, revision): the same copy keeps its Job across changes of the
    models that read it, and a new revision is a new Job (a Job's pod template cannot change)."""
    digest = hashlib.sha256(f"{tenant}/{repo}@{revision}".encode()).hexdigest()[:8]
    suffix = f"-{revision[:7]}-{digest}"
    readable = re.sub(r"[^a-z0-9]+", "-", f"{tenant}-{repo.split('/')[-1]}".lower())
    return readable[: JOB_NAME_MAX - len(suffix)].strip("-") + suffix


def copy_pool(config: PlatformConfig, models: tuple[str, ...]) -> str:
    """The pool a copy's Job runs on: the first of its readers' pools that keeps nodes up (`minSize` > 0), where the
    vLLM image is already pulled and no node starts for the copy alone; else the first reader's pool, which starts a
    node its servers need next anyway. Not the system nodes: their disk (EKS's default 20 GiB) has no room for the
    image."""
    pools = [pool_named(config, next(m.pool for m in config.models if m.name == name)) for name in models]
    return next((p.name for p in pools if p.min_size > 0), pools[0].name)


def mirrored_revisions(config: PlatformConfig) -> tuple[MirroredRevision, ...]:
    """Every revision the running versions read from the mirror, once per tenant, in config order."""
    found: dict[tuple[str, str, str], tuple[ModelSource, Decimal, tuple[str, ...]]] = {}
    for model in config.models:
        running = set(running_versions(model))
        for version in model.versions:
            copy = mirrored_source(config, model, version)
            if version.name not in running or copy is None:
                continue
            key = (model.tenant, *hugging_face_revision(version))
            _, size, models = found.get(key, (copy, Decimal(0), ()))
            found[key] = (copy, max(size, weights_bytes(model)), tuple(dict.fromkeys((*models, model.name))))
    return tuple(
        MirroredRevision(
            tenant=tenant,
            repo=repo,
            revision=revision,
            copy=copy,
            job_name=mirror_job_name(tenant, repo, revision),
            weights_bytes=size,
            models=models,
            pool=copy_pool(config, models),
            image=VLLM.image,
        )
        for (tenant, repo, revision), (copy, size, models) in found.items()
    )
