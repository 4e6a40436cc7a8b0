"""The weight mirror (`weightMirror`): which pinned Hugging Face revisions the streaming pools serve, where their copy
in S3 is, and the Job that writes each copy once (pure: no Pulumi imports).

A server on a streaming pool (`weightCache.medium: s3Stream`) reads its weights from S3 with vLLM's Run:ai streamer
loader, which takes object-store URIs only (vllm/transformers_utils/runai_utils.py is_runai_obj_uri, v0.18.0). With
a mirror, a Hugging Face version is served from `s3://<bucket>/<tenant>/<org>/<name>/<revision>/`, the folder the
mirror Job fills from that revision before any of its servers starts; every replica after that streams from the
Region's S3 at the stream's rate (platform_config/cold_start.py), never from Hugging Face.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
import re
from dataclasses import dataclass
from decimal import Decimal

from .cold_start import GBIT, INTERNET_GATEWAY_SMALL_GBPS, pool_named, streams_weights, weights_bytes
from .models import ModelConfig, ModelSource, ModelVersion, PlatformConfig, WeightMirrorConfig

# The platform's namespace where the mirror Jobs run: outside the tenants' quotas, on the system nodes.
MIRROR_NAMESPACE = "model-weights"
# A Job copies from Hugging Face through the NAT or internet gateway (5 Gbit/s per flow, and at most 5 Gbit/s below
# 32 vCPUs: EC2 User Guide, "Amazon EC2 instance network bandwidth"), one file at a time: its deadline allows this
# many times the copy at that rate, and never less than MIRROR_DEADLINE_FLOOR_SECONDS.
MIRROR_DEADLINE_FACTOR = 4
MIRROR_DEADLINE_FLOOR_SECONDS = 3600


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
    # The models whose servers read it (their pods wait for the Job).
    models: tuple[str, ...]

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


def mirror_job_name(tenant: str, repo: str, revision: str) -> str:
    """A DNS label naming the copy (tenant, repository, revision): the same copy keeps its Job across changes of the
    models that read it, and a new revision is a new Job (a Job's pod template cannot change)."""
    digest = hashlib.sha256(f"{tenant}/{repo}@{revision}".encode()).hexdigest()[:8]
    name = re.sub(r"[^a-z0-9]+", "-", repo.split("/")[-1].lower()).strip("-")[:34].strip("-")
    return f"{tenant[:12].strip('-')}-{name}-{revision[:7]}-{digest}"


def mirrored_revisions(config: PlatformConfig) -> tuple[MirroredRevision, ...]:
    """Every revision the running versions read from the mirror, once per tenant, in config order."""
    found: dict[tuple[str, str, str], MirroredRevision] = {}
    for model in config.models:
        running = {model.release.stable, model.release.canary}
        for version in model.versions:
            copy = mirrored_source(config, model, version)
            if version.name not in running or copy is None:
                continue
            repo, revision = version.source.huggingface, version.source.revision
            assert repo is not None and revision is not None  # mirrored_source copies pinned Hugging Face versions only
            key = (model.tenant, repo, revision)
            known = found.get(key)
            if known is not None:
                found[key] = dataclasses.replace(
                    known,
                    weights_bytes=max(known.weights_bytes, weights_bytes(model)),
                    models=tuple(dict.fromkeys((*known.models, model.name))),
                )
                continue
            found[key] = MirroredRevision(
                tenant=model.tenant,
                repo=repo,
                revision=revision,
                copy=copy,
                job_name=mirror_job_name(*key),
                weights_bytes=weights_bytes(model),
                models=(model.name,),
            )
    return tuple(found.values())
