"""What a model must meet: its service level objectives and peak load, and the overrides of its workload
profile."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from ..profiles import TierName
from .base import ConfigModel, PositiveInt
from .replicas import KNATIVE_MAX_CONTAINER_CONCURRENCY

# An objective is a fraction of requests over the 30-day budget: above one half (below, the
# "objective" is a coin toss) and at most four nines (past that, one failed request spends a
# day's budget at the traffic a model sees).
Objective = Annotated[float, Field(gt=0.5, le=0.9999)]


class WorkloadPeak(ConfigModel):
    """The load a model must meet within its latency target: what the preview's Serving performance stage judges its
    `maxReplicas` by (docs/design/serving-performance.md)."""

    requests_per_second: Annotated[float, Field(gt=0, le=1_000_000)]
    """Requests per second at peak, to each model of the profile (or to this model)."""
    prompt_tokens: Annotated[int, Field(ge=1, le=10_000_000)] | None = None
    """Prompt tokens of a typical request at peak. Default: the profile's."""
    output_tokens: Annotated[int, Field(ge=1, le=1_000_000)] | None = None
    """Output tokens of a typical request at peak. Default: the profile's."""


class SloOverride(ConfigModel):
    """The model's service level objectives where they differ from its profile's (README, Service level objectives)."""

    latency_target_ms: PositiveInt | None = None
    """Latency target in milliseconds: time to first token for streaming profiles, the whole request otherwise.
    Alerts count a request as slow above the histogram boundary at or below it. Default: the profile's target."""
    latency_objective: Objective | None = None
    """Fraction of requests within the latency target, e.g. `0.95`. Default: the profile's."""
    availability_objective: Objective | None = None
    """Fraction of answers that are not 5xx (503 included), e.g. `0.995`. Default: the profile's."""
    peak: WorkloadPeak | None = None
    """The peak this model must meet. Default: the profile's (`profiles.<name>.peak`)."""


class ProfileOverride(ConfigModel):
    concurrency_per_replica: Annotated[int, Field(gt=0, le=KNATIVE_MAX_CONTAINER_CONCURRENCY)] | None = None
    """Requests one replica works on at once (vLLM's `--max-num-seqs` and Knative's target by default: at most 1000)."""
    request_timeout_seconds: PositiveInt | None = None
    """The longest a request may take."""
    prefix_caching: bool | None = None
    """vLLM prefix caching."""
    tiers: Annotated[list[TierName], Field(min_length=1)] | None = None
    """Tiers its models serve."""
    peak: WorkloadPeak | None = None
    """The peak each model of the profile must meet within the profile's latency target (a model's `slo.peak`
    overrides it). Without one, the preview predicts latency but judges no replica count."""
