"""A model's service level objectives as the plan resolves them (`SloPlan`, with its latency
objective's `LatencySlo`): what the SLO rules and dashboards in components/specs read."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

# What a latency objective is counted on: vLLM's time to first token, the request's whole duration
# at the server's sidecar, or vLLM's latency of each item (components/specs/slo_rules.py).
LatencySli = Literal["ttft", "duration", "item"]


@dataclass(frozen=True)
class LatencySlo:
    sli: LatencySli
    # What was asked for, and the histogram boundary at or below it that requests are counted against.
    target_ms: int
    threshold_ms: float
    objective: float

    @property
    def threshold_le(self) -> str:
        """A matcher of the threshold bucket's `le` label: Prometheus 2 keeps the exposition's
        spelling (Envoy writes `100`, Python's client `1.0`), Prometheus 3 normalises to a float
        (`100.0`), so an integral boundary matches either."""
        value = self.threshold_ms if self.sli == "duration" else round(self.threshold_ms / 1000, 9)
        if value == int(value):
            return f'le=~"{int(value)}(\\\\.0)?"'
        return f'le="{value:g}"'


@dataclass(frozen=True)
class SloPlan:
    """A model's objectives, resolved from its profile and its own `slo` overrides."""

    model: str
    served_name: str
    tenant: str
    availability_objective: float
    # None: no latency objective (a profile without a target, e.g. batch labelling).
    latency: LatencySlo | None
    # The Deployments of the versions' endpoint pickers (`<model>-<version>-epp`), none where the
    # versions have none: the requests their proxy refuses never reach a server, so the servers'
    # sidecars never count them (components/specs/endpoint_picker/envoy_routes.py REFUSED).
    picker_workloads: tuple[str, ...] = ()
