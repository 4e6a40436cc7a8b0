"""The canary verdict as the tool reports it: the release, the window, every check of both versions beside its limit,
the verdict and the next step, as text or as JSON."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from typing import Any

from platform_config.models import ReleaseConfig

from .canary import CanaryMetrics
from .canary_verdict import Step, Verdict, show


def _finite(value: Any) -> Any:
    """JSON has no infinity (a p95 in the +Inf bucket): null; the check still says breach."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    return value


@dataclass(frozen=True)
class Report:
    stack: str
    model: str
    namespace: str
    release: ReleaseConfig
    profile: str
    ttft_target_ms: int | None
    metrics: CanaryMetrics
    verdict: Verdict
    step: Step

    def at_text(self) -> str:
        return datetime.fromtimestamp(self.metrics.at, tz=timezone.utc).isoformat().replace("+00:00", "Z")

    def to_json(self) -> dict[str, Any]:
        release = self.release
        return {
            "stack": self.stack,
            "model": self.model,
            "namespace": self.namespace,
            "stable": release.stable,
            "canary": release.canary,
            "canaryWeight": release.canary_weight,
            "window": self.metrics.window,
            "at": self.at_text(),
            "profile": self.profile,
            "ttftTargetMs": self.ttft_target_ms,
            "verdict": self.verdict.action,
            "reasons": list(self.verdict.reasons),
            "nextStep": {
                "canaryWeight": self.step.new_weight,
                "stable": release.canary if self.step.new_weight is None else release.stable,
                "changes": self.step.changes,
                "description": self.step.describe(release),
            },
            "checks": [_finite(asdict(c)) for c in self.verdict.checks],
            "metrics": {"stable": _finite(asdict(self.metrics.stable)), "canary": _finite(asdict(self.metrics.canary))},
            "queries": self.metrics.queries,
        }

    def text(self) -> str:
        release = self.release
        target = f"TTFT target {self.ttft_target_ms} ms" if self.ttft_target_ms is not None else "no TTFT target"
        lines = [
            f"{self.model} in stack {self.stack} (namespace {self.namespace}): stable {release.stable}, "
            f"canary {release.canary} at {release.canary_weight}%",
            f"window {self.metrics.window} ending {self.at_text()}; profile {self.profile}, {target}; "
            f"at least {release.analysis.min_requests} requests",
            "",
        ]
        header = ("check", "scope", f"stable {release.stable}", f"canary {release.canary}", "limit", "result")
        rows = [header] + [
            (c.name, c.scope, show(c.stable, c.unit), show(c.canary, c.unit), c.limit, c.outcome) for c in self.verdict.checks
        ]
        widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
        for row in rows:
            lines.append("  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip())
        lines.append("")
        lines.append(f"verdict: {self.verdict.action.upper()}: {self.step.describe(release)}")
        lines.extend(f"  - {reason}" for reason in self.verdict.reasons)
        return "\n".join(lines)
