"""Workload profiles: typed presets from the design's scenario table.

A model names a profile; the profile supplies defaults (streaming, prefix caching, concurrency
per replica, scale-to-zero, priority class, tiers, timeouts) that the model may override.
Latency-sensitive profiles are the ones that must never share a GPU by time-slicing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

ProfileName = Literal["chat", "code-completion", "rag", "summarization", "embeddings", "batch-labelling"]
TierName = Literal["premium", "standard", "batch"]
PriorityClassName = Literal["inference-production", "inference-experiment"]
AutoscalingMode = Literal["hpa", "kpa"]

PRODUCTION_PRIORITY_CLASS: PriorityClassName = "inference-production"
EXPERIMENT_PRIORITY_CLASS: PriorityClassName = "inference-experiment"


@dataclass(frozen=True)
class WorkloadProfile:
    name: ProfileName
    description: str
    latency_sensitive: bool
    # Design target for time to first token (per item for embeddings); None: no latency target.
    ttft_target_ms: int | None
    streaming: bool
    prefix_caching: bool
    # Requests one replica works on at once: Knative's containerConcurrency and KPA target,
    # and vLLM's --max-num-seqs upper bound.
    concurrency_per_replica: int
    scale_to_zero: bool
    priority_class: PriorityClassName
    tiers: tuple[TierName, ...]
    request_timeout_seconds: int
    # A typical request's prompt and output tokens: what the preview's latency prediction and the peak's
    # replica count assume where the stack states no lengths (`profiles.<name>.peak`, a model's `slo.peak`).
    prompt_tokens: int = 1024
    output_tokens: int = 256
    # vLLM runner: "generate" for LLM endpoints, "pooling" for embedding models.
    runner: Literal["generate", "pooling"] = "generate"
    # Service level objectives over a 30-day budget (components/specs/slo_rules.py alerts on
    # them). Availability: the fraction of answers that are not 5xx (503 included: a request the
    # platform shed is one the caller did not get). Latency: the fraction of requests within
    # `ttft_target_ms`, measured as the profile's `latency_sli`.
    availability_objective: float = 0.99
    latency_objective: float = 0.95

    @property
    def latency_sli(self) -> Literal["ttft", "duration", "item"]:
        """What the latency target bounds: time to first token for streaming profiles (what a
        user watching tokens waits for); for a pooling runner, each item (the design's "< 100 ms
        per item": one request's 32 inputs are 32 items, never one request held to 100 ms); the
        whole request for the others, whose caller waits for the full answer ("summaries < 30 s"),
        as the mesh measures it. vLLM 0.33.0 makes each input of an embeddings request an engine
        request of its own (vllm/entrypoints/pooling/base/serving.py: `{request_id}-{i}` per input,
        each `engine_client.encode`), each observed in `vllm:e2e_request_latency_seconds` when it
        finishes (vllm/v1/engine/output_processor.py _update_stats_from_finished)."""
        if self.streaming:
            return "ttft"
        return "item" if self.runner == "pooling" else "duration"


PROFILES: dict[str, WorkloadProfile] = {
    p.name: p
    for p in (
        WorkloadProfile(
            name="chat",
            description="real-time chat",
            latency_sensitive=True,
            ttft_target_ms=500,
            streaming=True,
            prefix_caching=True,
            concurrency_per_replica=8,
            scale_to_zero=False,
            priority_class=PRODUCTION_PRIORITY_CLASS,
            tiers=("premium", "standard"),
            request_timeout_seconds=120,
            availability_objective=0.995,
        ),
        WorkloadProfile(
            name="code-completion",
            prompt_tokens=512,
            output_tokens=64,
            description="code completion",
            latency_sensitive=True,
            ttft_target_ms=200,
            streaming=True,
            prefix_caching=True,
            concurrency_per_replica=4,
            scale_to_zero=False,
            priority_class=PRODUCTION_PRIORITY_CLASS,
            tiers=("premium", "standard"),
            request_timeout_seconds=30,
            availability_objective=0.995,
        ),
        WorkloadProfile(
            name="rag",
            prompt_tokens=4096,
            output_tokens=256,
            description="retrieval-augmented generation",
            latency_sensitive=True,
            ttft_target_ms=1000,
            streaming=True,
            prefix_caching=True,
            concurrency_per_replica=8,
            scale_to_zero=False,
            priority_class=PRODUCTION_PRIORITY_CLASS,
            tiers=("premium", "standard"),
            request_timeout_seconds=120,
            availability_objective=0.995,
        ),
        WorkloadProfile(
            name="summarization",
            prompt_tokens=4096,
            output_tokens=512,
            description="document summarization",
            latency_sensitive=False,
            ttft_target_ms=30000,
            streaming=False,
            prefix_caching=True,
            concurrency_per_replica=16,
            scale_to_zero=False,
            priority_class=PRODUCTION_PRIORITY_CLASS,
            tiers=("standard", "batch"),
            request_timeout_seconds=300,
        ),
        WorkloadProfile(
            name="embeddings",
            prompt_tokens=256,
            output_tokens=1,
            description="embeddings",
            latency_sensitive=True,
            ttft_target_ms=100,
            streaming=False,
            prefix_caching=False,
            concurrency_per_replica=64,
            scale_to_zero=False,
            priority_class=PRODUCTION_PRIORITY_CLASS,
            tiers=("premium", "standard", "batch"),
            request_timeout_seconds=30,
            runner="pooling",
            availability_objective=0.995,
        ),
        WorkloadProfile(
            name="batch-labelling",
            prompt_tokens=512,
            output_tokens=16,
            description="batch labelling",
            latency_sensitive=False,
            ttft_target_ms=None,
            streaming=False,
            prefix_caching=True,
            concurrency_per_replica=64,
            scale_to_zero=True,
            priority_class=EXPERIMENT_PRIORITY_CLASS,
            tiers=("batch",),
            request_timeout_seconds=600,
        ),
    )
}
# The profiles whose servers generate text (vLLM's `generate` runner): the ones LoRA adapters and chat templates apply to.
GENERATING_PROFILES: tuple[str, ...] = tuple(name for name, profile in PROFILES.items() if profile.runner == "generate")
