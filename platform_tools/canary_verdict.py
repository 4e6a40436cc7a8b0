"""The canary verdict on figures already read (canary.py reads them), and the step it takes.

Verdict rules (`verdict`), in order:

1. Hold when the canary or the stable version answered fewer than `minRequests` requests in
   the window (at canaryWeight 100 the stable version takes no traffic: only the canary's count
   is needed, and it is judged on its own, against the limits and the target only).
2. Roll back on any breach, over all tiers and in each tier where both versions answered at
   least `minRequests` (a tier with fewer is shown but not judged: a handful of requests makes
   any rate noise; its requests still count in the all-tiers rows):
   a. the canary's error rate (5xx but 503) exceeds `maxErrorRate` and the stable version's;
   b. its shed rate (503) exceeds `maxShedRate` and the stable version's;
   c. its TTFT p95 or end-to-end p95 exceeds `maxLatencyRatio` x the stable version's (TTFT
      over all tiers only);
   d. its TTFT p95 is above the profile's `ttft_target_ms` while the stable version's is within.
3. Hold when a latency figure needed for (c) or (d) is missing (no samples: the scrape is
   broken, not the canary proven good).
4. Otherwise promote: the next of `release.steps` (`next_step`, the release record's rule), or at 100 the canary
   becomes stable.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from platform_config.models import CanaryAnalysis, ReleaseConfig
from platform_config.release import next_step

from .canary import CanaryMetrics, Traffic

ALL_TIERS = "all tiers"

Action = Literal["promote", "hold", "rollback"]
Outcome = Literal["ok", "breach", "too few", "not judged", "missing"]


@dataclass(frozen=True)
class Check:
    """One figure of both versions beside its limit."""

    name: str
    scope: str
    stable: float | None
    canary: float | None
    limit: str
    outcome: Outcome
    unit: Literal["requests", "rate", "ms"]


@dataclass(frozen=True)
class Verdict:
    action: Action
    reasons: tuple[str, ...]
    checks: tuple[Check, ...]


def show(value: float | None, unit: str) -> str:
    """A figure as the checks show it: a rate in percent, a latency in whole ms, a count whole."""
    if value is None:
        return "n/a"
    if unit == "rate":
        return f"{100 * value:.2f}%"
    if unit == "ms":
        return f"{value:.0f} ms"
    return f"{value:.0f}"


@dataclass
class _Findings:
    """The checks made so far, and the reasons for each outcome that decides the verdict."""

    # The canary at weight 100: the stable version takes no traffic, so the canary is judged on its own.
    alone: bool
    checks: list[Check] = field(default_factory=list)
    holds: list[str] = field(default_factory=list)
    breaches: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)

    def add(self, check: Check, reason: str = "") -> None:
        self.checks.append(check)
        if check.outcome == "breach":
            self.breaches.append(f"{check.scope}: {reason}")
        elif check.outcome == "missing":
            self.missing.append(f"{check.scope}: {reason}")


def verdict(metrics: CanaryMetrics, analysis: CanaryAnalysis, ttft_target_ms: int | None, canary_weight: int) -> Verdict:
    """The rules of the module docstring, on figures already read: a pure function."""
    stable, canary = metrics.stable, metrics.canary
    found = _Findings(alone=canary_weight == 100)
    judged = _enough_traffic(found, metrics, analysis.min_requests)
    scopes = [(ALL_TIERS, stable.total, canary.total)] + [
        (t, stable.tiers.get(t, Traffic()), canary.tiers.get(t, Traffic())) for t in judged
    ]
    for scope, s, c in scopes:
        _rate_rule(found, "5xx rate (not 503)", scope, s, c, "errors", analysis.max_error_rate)
        _rate_rule(found, "503 rate", scope, s, c, "shed", analysis.max_shed_rate)
    ratio = analysis.max_latency_ratio
    _ratio_rule(found, ratio, "TTFT p95 (vLLM, no tier)", ALL_TIERS, stable.ttft_p95_ms, canary.ttft_p95_ms, True)
    _ratio_rule(found, ratio, "e2e p95", ALL_TIERS, stable.e2e_p95_ms, canary.e2e_p95_ms, True)
    for tier in judged:
        _ratio_rule(
            found, ratio, "e2e p95", tier, stable.e2e_p95_ms_by_tier.get(tier), canary.e2e_p95_ms_by_tier.get(tier), False
        )
    if ttft_target_ms is not None:
        _ttft_target_rule(found, metrics, ttft_target_ms)
    checks = tuple(found.checks)
    if found.holds:
        return Verdict("hold", tuple(found.holds), checks)
    if found.breaches:
        return Verdict("rollback", tuple(found.breaches), checks)
    if found.missing:
        return Verdict("hold", tuple(found.missing), checks)
    return Verdict("promote", ("every check within its limit",), checks)


def _enough_traffic(found: _Findings, metrics: CanaryMetrics, need: int) -> list[str]:
    """Rule 1: both versions (the canary alone at weight 100) answered at least `need` requests in the window; the
    tiers where both did, which the other rules judge too."""
    stable, canary, alone = metrics.stable, metrics.canary, found.alone
    limit = f">= {need} (canary alone at weight 100)" if alone else f">= {need} each"
    short = canary.total.requests < need or (not alone and stable.total.requests < need)
    found.add(
        Check(
            "requests", ALL_TIERS, stable.total.requests, canary.total.requests, limit, "too few" if short else "ok", "requests"
        )
    )
    if short:
        found.holds.append(
            f"too few requests in {metrics.window}: stable {stable.total.requests:.0f}, canary {canary.total.requests:.0f}, "
            f"need {need}{'' if not alone else ' (canary)'}"
            + (
                ""
                if stable.total.requests or canary.total.requests
                else "; no requests at all: are the pods scraped, and do the labels match the queries (--json)?"
            )
        )
    judged: list[str] = []
    for tier in sorted(set(stable.tiers) | set(canary.tiers)):
        s, c = stable.tiers.get(tier, Traffic()), canary.tiers.get(tier, Traffic())
        enough = c.requests >= need and (alone or s.requests >= need)
        if enough:
            judged.append(tier)
        found.add(
            Check(
                "requests", tier, s.requests, c.requests, f"{limit} to judge the tier", "ok" if enough else "too few", "requests"
            )
        )
    return judged


def _rate_rule(found: _Findings, name: str, scope: str, s: Traffic, c: Traffic, kind: str, ceiling: float) -> None:
    """Rules 2a and 2b: the canary's error rate (`kind` "errors") or shed rate above `ceiling` and the stable
    version's."""
    alone = found.alone
    s_rate, c_rate = (s.error_rate, c.error_rate) if kind == "errors" else (s.shed_rate, c.shed_rate)
    if c_rate is None:
        found.add(Check(name, scope, s_rate, c_rate, "", "not judged", "rate"), "")
        return
    over = c_rate > ceiling and (alone or s_rate is None or c_rate > s_rate)
    text = f"<= {100 * ceiling:.2f}%" + ("" if alone else " or <= stable")
    found.add(
        Check(name, scope, s_rate, c_rate, text, "breach" if over else "ok", "rate"),
        f"canary {name} {show(c_rate, 'rate')} > {show(ceiling, 'rate')}"
        + ("" if alone else f" and > stable's {show(s_rate, 'rate')}"),
    )


def _ratio_rule(found: _Findings, ratio: float, name: str, scope: str, s: float | None, c: float | None, required: bool) -> None:
    """Rule 2c: the canary's latency above `ratio` x the stable version's; rule 3: a figure missing where it is
    `required` holds."""
    if found.alone:
        found.add(Check(name, scope, s, c, "no stable traffic to compare", "not judged", "ms"))
        return
    if s is None or c is None:
        outcome: Outcome = "missing" if required else "not judged"
        found.add(
            Check(name, scope, s, c, f"<= {ratio:g} x stable", outcome, "ms"),
            f"no {name} figure for the {'stable' if s is None else 'canary'} version",
        )
        return
    over = c > ratio * s
    found.add(
        Check(name, scope, s, c, f"<= {ratio:g} x stable = {ratio * s:.0f} ms", "breach" if over else "ok", "ms"),
        f"canary {name} {c:.0f} ms > {ratio:g} x stable's {s:.0f} ms",
    )


def _ttft_target_rule(found: _Findings, metrics: CanaryMetrics, ttft_target_ms: int) -> None:
    """Rule 2d: the canary's TTFT p95 above the profile's target while the stable version's is within; rule 3: no
    figure holds."""
    alone = found.alone
    s_ttft, c_ttft = metrics.stable.ttft_p95_ms, metrics.canary.ttft_p95_ms
    name = "TTFT p95 vs target"
    text = f"<= {ttft_target_ms} ms" + ("" if alone else " unless stable misses it too")
    if c_ttft is None or (not alone and s_ttft is None):
        found.add(Check(name, ALL_TIERS, s_ttft, c_ttft, text, "missing", "ms"), "no TTFT figure")
        return
    over = c_ttft > ttft_target_ms and (alone or (s_ttft is not None and s_ttft <= ttft_target_ms))
    found.add(
        Check(name, ALL_TIERS, s_ttft, c_ttft, text, "breach" if over else "ok", "ms"),
        f"canary TTFT p95 {c_ttft:.0f} ms > target {ttft_target_ms} ms"
        + ("" if alone else f" while stable's {show(s_ttft, 'ms')} is within"),
    )


@dataclass(frozen=True)
class Step:
    """What the verdict does to the release: a new canary weight, or the canary made stable."""

    action: Action
    weight: int
    # The canary's weight after the step; None: the canary becomes the stable version.
    new_weight: int | None

    @property
    def changes(self) -> bool:
        return self.new_weight != self.weight

    def describe(self, release: ReleaseConfig) -> str:
        if self.new_weight is None:
            return f"stable: {release.stable} -> {release.canary} (canary at 100%; the canary entries are removed)"
        if not self.changes:
            return f"no change (canary weight stays {self.weight})"
        return f"canary weight {self.weight} -> {self.new_weight}"


def step_taken(release: ReleaseConfig, action: Action) -> Step:
    """What `action` does to the release: a rollback to 0, a hold where it is, a promotion to the next of its steps
    (platform_config/release.py `next_step`) or, from the last, the canary made stable."""
    weight = release.canary_weight
    if action == "rollback":
        return Step(action, weight, 0)
    if action == "hold":
        return Step(action, weight, weight)
    return Step(action, weight, next_step(weight, release.steps))
