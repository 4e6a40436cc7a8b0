"""Offline batch jobs: the model a job runs, its input and output, shards and deadline."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, field_validator

from .base import ConfigModel, Duration, NamespaceName, PositiveInt, ResourceName, _duration_between
from .lora import OpenAiModelName
from .replicas import ReplicaResources
from .sources import BatchInput, ModelSource, S3Location
from .versions import ServerArgs


class BatchModel(ConfigModel):
    """The model a batch job runs: its weights, what one shard's pod asks for, and vLLM's settings."""

    served_model_name: Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._/:-]{0,127}$")]
    """The OpenAI `model` the input lines name (vLLM's `--served-model-name`)."""
    source: ModelSource
    """The weights: Hugging Face at a pinned commit or an S3 prefix and version folder (not MLflow yet)."""
    resources: ReplicaResources
    """What one shard's pod asks for (GPUs are vLLM's tensor-parallel size)."""
    server: ServerArgs = ServerArgs()
    """vLLM engine settings."""
    adapter: OpenAiModelName | None = None
    """A LoRA adapter to run the job with: the OpenAI name of an adapter in `models[]` of the job's tenant, on a model
    one of whose versions has this `source` (the same base weights). The job loads its stable revision under the
    adapter's name, which the input lines' `model` then names (README, Batch jobs on Kueue)."""

    @field_validator("server")
    @classmethod
    def _no_admission_rate(cls, server: ServerArgs) -> ServerArgs:
        if server.prefill_tokens_per_second is not None:
            raise ValueError("prefillTokensPerSecond bounds a serving queue; a batch job has none (its runner feeds vLLM)")
        return server


class BatchJobConfig(ConfigModel):
    """An offline batch job: vLLM's batch runner over an OpenAI batch-format input, queued through Kueue."""

    name: ResourceName
    """Job name (unique); its Job, LocalQueue and runner ConfigMap are named after it."""
    tenant: NamespaceName
    """Tenant whose namespace runs the job and whose batch quota (`tenants[].batchQuota`) it is queued against."""
    pool: ResourceName
    """Node pool its pods run on (one of the tenant's `pools`)."""
    model: BatchModel
    """The model it runs."""
    input: BatchInput
    """What it reads."""
    lines: PositiveInt
    """Requests (non-blank lines) in the input: the job has ceil(lines / shardLines) shards."""
    output: S3Location
    """S3 prefix the results go to: `<output>/shard-<i>/chunk-<k>.jsonl`, one OpenAI batch output line per input line.
    One `/` between its path segments (no `//`)."""
    # Kubernetes refuses an Indexed Job's parallelism above 100,000 (pkg/apis/batch/validation/validation.go,
    # maxParallelismForIndexedJob), the bound on its shards too (platform_config/batch_jobs.py MAX_BATCH_SHARDS).
    parallelism: Annotated[int, Field(ge=1, le=100_000)] = 1
    """Shards that run at once (pods)."""
    shard_lines: PositiveInt = 10_000
    """Input lines per shard (one Job completion index each)."""
    chunk_lines: PositiveInt = 1_000
    """Lines per checkpoint: a finished chunk is uploaded and never redone; a stopped shard resumes at its first
    unfinished chunk. Each chunk starts vLLM's batch runner once (the model loads again), so a chunk should take
    well over the model's load time."""
    tokens_per_line: PositiveInt = 1_000
    """Expected prompt plus completion tokens per request (for the deadline check)."""
    tokens_per_second: PositiveInt
    """Tokens per second one shard's pod processes with this model on this pool (measured; for the deadline check)."""
    deadline: Annotated[Duration, _duration_between(60, 30 * 86400)]
    """How long the job may run once started (the Job's `activeDeadlineSeconds`); at least one shard's estimate."""
    retries_per_shard: Annotated[int, Field(ge=0, le=100)] = 3
    """Failed pods per shard before the shard fails (a preemption is not a failure)."""
    paused: bool = False
    """Hold the job: Kueue evicts its running shards (finished chunks stay done) and admits nothing until it is
    `false` again, when it resumes where it stopped."""
