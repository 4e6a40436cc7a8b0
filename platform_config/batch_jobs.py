"""What a batch job asks of the platform (pure functions): the GPU request of one shard's pod, how many shards its
lines make, and how long one shard is estimated to run. The plan sizes a job's pods and shards by these, and the
batch checks hold a job's parallelism and deadline to them."""

from __future__ import annotations

from .gpu_catalog import GPU_RESOURCE, mig_resource
from .models import BatchJobConfig

# The most shards (completions) a job's Indexed Job may have. Kubernetes refuses an Indexed Job with
# backoffLimitPerIndex (which the platform sets: retriesPerShard) and more than 100,000 completions unless it also
# sets maxFailedIndexes of at most 10,000 and parallelism of at most 10,000 (kubernetes/kubernetes
# pkg/apis/batch/validation/validation.go, validateJobSpec: completionsSoftLimit, maxFailedIndexesLimitForHighCompletions,
# parallelismLimitForHighCompletions; the v1.33 OpenAPI's JobSpec.maxFailedIndexes: "required and must be less than or
# equal to 10^4 when is completions greater than 10^5"), and the runner numbers shards in five digits
# (`shard-%05d`): 100,000 is the bound.
MAX_BATCH_SHARDS = 100_000


def batch_gpu_request(job: BatchJobConfig) -> tuple[str, int]:
    """(GPU resource, count) one shard's pod asks for."""
    resources = job.model.resources
    if resources.mig_profile is not None:
        return mig_resource(resources.mig_profile), 1
    return GPU_RESOURCE, resources.gpus or 0


def batch_shards(job: BatchJobConfig) -> int:
    return -(-job.lines // job.shard_lines)


def shard_estimate_seconds(job: BatchJobConfig) -> float:
    """One shard's estimated run time: its lines x tokens per line / tokens per second of one
    shard's pod (the job's own measured figures; the model's load time is not counted)."""
    return min(job.shard_lines, job.lines) * job.tokens_per_line / job.tokens_per_second
