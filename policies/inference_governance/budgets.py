"""PodDisruptionBudgets read as the disruption controller reads them."""

from __future__ import annotations

import math
from typing import Any, Mapping

from .kube import get


def shown(value: Any) -> str:
    """A budget's count as written (the engine hands numbers over as floats: 2.0 is 2)."""
    return str(int(value)) if isinstance(value, float) and value.is_integer() else str(value)


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
            return f"maxUnavailable {shown(unavailable)}"
        if available is not None and fewest > 0 and scaled(available, fewest) >= fewest:
            return f"minAvailable {shown(available)} with as few as {fewest} replicas"
    except ValueError:
        return f"a budget of {shown(unavailable if available is None else available)}, which is not a count or a percentage"
    return None


def leaves_none_up(spec: Mapping[str, Any], replicas: int) -> str | None:
    """Why a budget may let every replica go at once, or None: minAvailable below one pod, or
    maxUnavailable of every replica, both scaled as the disruption controller does."""
    unavailable, available = get(spec, "maxUnavailable"), get(spec, "minAvailable")
    if unavailable is not None and available is not None:
        # policy/v1 validation: "minAvailable and maxUnavailable cannot be both set".
        return "both minAvailable and maxUnavailable, which the API server refuses"
    try:
        if available is not None:
            return f"minAvailable {shown(available)}" if scaled(available, replicas) < 1 else None
        if unavailable is not None:
            return (
                f"maxUnavailable {shown(unavailable)} of {replicas} replicas"
                if scaled(unavailable, replicas) >= replicas
                else None
            )
    except ValueError:
        return f"a budget of {shown(unavailable if available is None else available)}, which is not a count or a percentage"
    return "neither minAvailable nor maxUnavailable"
