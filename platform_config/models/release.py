"""A model's release: which versions run, the canary's weight and steps, and how the canary is judged."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field, model_validator

from ..release import DEFAULT_STEPS
from .base import ConfigModel, Duration, Percent, PositiveInt, VersionName, _duration_between, _full_match
from .headers import HeaderName


class StepOverride(ConfigModel):
    # Written on the route as an annotation and into the policy report: printable ASCII, no line breaks.
    reason: Annotated[str, _full_match(r"[ -~]{10,500}", "is not a reason: 10-500 printable ASCII characters on one line")]
    """Why this change skips the configured steps (at least 10 characters), e.g. a hotfix for an incident."""


class CanaryAnalysis(ConfigModel):
    """What `python -m platform_tools canary` reads from Prometheus and how it decides."""

    window: Annotated[Duration, _duration_between(60, 86400)] = "30m"
    """The window the metrics are read over (1m-24h)."""
    min_requests: PositiveInt = 300
    """Fewest requests each of the canary and the stable version must have served in the window for a verdict;
    fewer: hold."""
    max_latency_ratio: Annotated[float, Field(ge=1.0, le=10.0)] = 1.2
    """Roll back when the canary's TTFT p95 or end-to-end p95 exceeds the stable version's by this factor."""
    max_error_rate: Annotated[float, Field(ge=0.0, le=1.0)] = 0.01
    """Roll back when the canary's fraction of 5xx answers other than 503 exceeds this and the stable version's."""
    max_shed_rate: Annotated[float, Field(ge=0.0, le=1.0)] = 0.05
    """Roll back when the canary's fraction of 503 (shed) answers exceeds this and the stable version's."""


def off_the_steps(canary_weight: int, steps: list[int]) -> str | None:
    """Why a canary weight (a model's, or one of its adapters') is not one the release's steps allow: 0 or a step."""
    if canary_weight in (0, *steps):
        return None
    return f"canaryWeight {canary_weight} is not a step: give 0 or one of {', '.join(map(str, steps))}"


# The bounds of `release.hold`'s reason, which the canary tool's `step hold --reason` also checks.
HOLD_REASON_LENGTH = (10, 500)


class ReleaseConfig(ConfigModel):
    stable: VersionName
    """The version that takes the traffic the canary does not."""
    canary: VersionName | None = None
    """The version under test, if any."""
    canary_weight: Percent = 0
    """Percent of traffic (and of sticky users) the canary gets."""
    weights: dict[VersionName, Percent] | None = None
    """The same split as `{stable: 90, canary: 10}`, instead of `canaryWeight`; adds up to 100."""
    override_header: HeaderName = "x-model-version"
    """Header that sends a request to a named version whatever the split."""
    user_key_header: HeaderName = "x-user-id"
    """Header whose value keeps a user on one side of the split."""
    steps: Annotated[list[Annotated[int, Field(ge=1, le=100)]], Field(min_length=1)] = list(DEFAULT_STEPS)
    """The canary weights a release goes through, rising, ending at 100 (its LoRA adapters' canaries too): the canary
    command moves one step at a time, and the policy pack refuses a rise of more than one step per change."""
    step_override: StepOverride | None = None
    """Lets this change raise the canary weight (the model's or its adapters') by more than one step (or promote
    before 100): the reason is recorded on the route and in the policy report. Remove it with the next change."""
    analysis: CanaryAnalysis = CanaryAnalysis()
    """How the canary command judges the canary against the stable version and the profile's targets."""
    hold: Annotated[str, Field(min_length=HOLD_REASON_LENGTH[0], max_length=HOLD_REASON_LENGTH[1])] | None = None
    """Why a person holds the canary at its weight (at least 10 characters), e.g. while an incident is looked into:
    `python -m platform_tools canary` still judges it but writes no step, and `canaries` leaves it out, until a person
    promotes or rolls it back (`python -m platform_tools step`), which removes the hold."""

    @model_validator(mode="before")
    @classmethod
    def _weights_to_canary_weight(cls, data: Any) -> Any:
        if not isinstance(data, dict) or data.get("weights") is None:
            return data
        weights = data["weights"]
        if "canaryWeight" in data:
            raise ValueError("give either 'canaryWeight' or 'weights', not both")
        versions = (data.get("stable"), data.get("canary"))
        if not isinstance(weights, dict) or not all(isinstance(w, int) for w in weights.values()):
            return data  # the field's own validation reports the type
        if not all(v is None or isinstance(v, str) for v in versions):
            return data  # so do `stable` and `canary`'s (a list would not even hash)
        expected = set(versions) - {None}
        if set(weights) != expected:
            raise ValueError(
                f"'weights' must name exactly the stable and canary versions ({', '.join(sorted(map(str, expected)))}), got "
                f"{', '.join(sorted(weights))}"
            )
        total = sum(weights.values())
        if total != 100:
            raise ValueError(f"weights add up to {total}, not 100: {', '.join(f'{v}={w}' for v, w in weights.items())}")
        return {**data, "canaryWeight": weights.get(data.get("canary"), 0)}

    @model_validator(mode="after")
    def _canary(self) -> ReleaseConfig:
        if self.canary is None and self.canary_weight != 0:
            raise ValueError(f"canaryWeight {self.canary_weight} needs a 'canary' version")
        if self.canary is not None and self.canary == self.stable:
            raise ValueError(f"canary {self.canary!r} is the stable version: name another version")
        if any(low >= high for low, high in zip(self.steps, self.steps[1:])) or self.steps[-1] != 100:
            raise ValueError(f"steps {self.steps} must rise strictly and end at 100")
        if (off := off_the_steps(self.canary_weight, self.steps)) is not None:
            raise ValueError(off)
        if self.hold is not None and self.canary is None:
            raise ValueError("'hold' holds a canary: this release has none")
        return self
