"""What changes between two previews (e.g. main and a pull request, or before and after a
canary promotion): resources added, removed, and changed inputs, by URN."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class Change:
    urn: str
    type: str
    name: str
    # Dotted input paths that differ, e.g. "spec.http[2].route[0].weight".
    paths: list[str] = field(default_factory=list)


@dataclass
class Diff:
    added: list[Change]
    removed: list[Change]
    changed: list[Change]

    @property
    def empty(self) -> bool:
        return not (self.added or self.removed or self.changed)


def _paths(before: Any, after: Any, prefix: str = "") -> list[str]:
    if isinstance(before, dict) and isinstance(after, dict):
        out: list[str] = []
        for key in sorted(set(before) | set(after)):
            out += _paths(before.get(key), after.get(key), f"{prefix}.{key}" if prefix else str(key))
        return out
    if isinstance(before, list) and isinstance(after, list) and len(before) == len(after):
        out = []
        for index, (b, a) in enumerate(zip(before, after)):
            out += _paths(b, a, f"{prefix}[{index}]")
        return out
    return [] if before == after else [prefix or "(inputs)"]


def diff_resources(baseline: list[dict[str, Any]], current: list[dict[str, Any]]) -> Diff:
    old = {r["urn"]: r for r in baseline}
    new = {r["urn"]: r for r in current}
    added = [Change(u, new[u]["type"], new[u]["name"]) for u in new if u not in old]
    removed = [Change(u, old[u]["type"], old[u]["name"]) for u in old if u not in new]
    changed = []
    for urn in new:
        if urn in old:
            paths = _paths(old[urn]["inputs"], new[urn]["inputs"])
            if paths:
                changed.append(Change(urn, new[urn]["type"], new[urn]["name"], paths))
    return Diff(added, removed, changed)
