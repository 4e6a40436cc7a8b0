"""PodDisruptionBudgets read as the disruption controller reads them."""

from __future__ import annotations

import math
from typing import Any, Mapping

from .kube import get


def scaled(value: Any, replicas: int) -> float:
    """A PDB's count, or its percentage of the replicas rounded up, as the disruption controller
    reads both fields (intstr.GetScaledValueFromIntOrPercent with roundUp true)."""
    text = str(value)
    if text.endswith("%"):
        return math.ceil(float(text[:-1]) * replicas / 100)
    return float(value)


def blocks_every_drain(spec: Mapping[str, Any], fewest: int) -> str | None:
    """Why a budget lets no pod be evicted when the workload runs its fewest replicas, or None:
    maxUnavailable 0, or minAvailable at least those replicas (kubernetes
    pkg/controller/disruption/disruption.go: getExpectedPodCount, disruptionsAllowed =
    currentHealthy - desiredHealthy)."""
    unavailable, available = get(spec, "maxUnavailable"), get(spec, "minAvailable")
    try:
        if unavailable is not None and scaled(unavailable, max(fewest, 1)) <= 0:
            return f"maxUnavailable {unavailable}"
        if available is not None and fewest > 0 and scaled(available, fewest) >= fewest:
            return f"minAvailable {available} with as few as {fewest} replicas"
    except ValueError:
        return f"a budget of {unavailable if available is None else available}, which is not a count or a percentage"
    return None
