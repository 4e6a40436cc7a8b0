"""The shapes of what an installer registers: label selectors, webhook rules, webhooks, and an
installer's whole registration (preview/webhook_inventory/__init__.py says where each is read)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..selectors import requirement_holds

MUTATING, VALIDATING = "mutating", "validating"
FAIL, IGNORE = "Fail", "Ignore"


class UnreadValues(Exception):
    """An installer given values, or a version, outside what was read at its tag."""


@dataclass(frozen=True)
class LabelSelector:
    """metav1.LabelSelector: every label of match_labels and every expression must hold."""

    match_labels: Mapping[str, str] = field(default_factory=dict)
    # (key, operator, values): In, NotIn, Exists, DoesNotExist
    expressions: tuple[tuple[str, str, tuple[str, ...]], ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        if any(labels.get(key) != value for key, value in self.match_labels.items()):
            return False
        for key, operator, values in self.expressions:
            # An operator the API server would refuse (requirement_holds: None) selects nothing here.
            if not requirement_holds(operator, key in labels, labels.get(key), values):
                return False
        return True

    def describe(self) -> str:
        parts = [f"{k}={v}" for k, v in self.match_labels.items()]
        for key, operator, values in self.expressions:
            parts.append(f"{key} {operator}" + (f" [{', '.join(values)}]" if values else ""))
        return ", ".join(parts) or "everything"

    @classmethod
    def from_manifest(cls, selector: Mapping[str, Any]) -> LabelSelector:
        return cls(
            match_labels=dict(selector.get("matchLabels") or {}),
            expressions=tuple(
                (str(e["key"]), str(e["operator"]), tuple(str(v) for v in e.get("values") or ()))
                for e in selector.get("matchExpressions") or ()
            ),
        )


@dataclass(frozen=True)
class Rule:
    """One rule of a webhook: API groups ("" is core), plural resources, operations; "*" is any."""

    groups: tuple[str, ...]
    resources: tuple[str, ...]
    operations: tuple[str, ...] = ("CREATE",)

    def matches(self, group: str, resource: str, operation: str) -> bool:
        return (
            ("*" in self.groups or group in self.groups)
            and ("*" in self.resources or resource in self.resources)
            and ("*" in self.operations or operation in self.operations)
        )

    def describe(self) -> str:
        groups = ",".join(g or "core" for g in self.groups)
        return f"{groups}/{','.join(self.resources)} {','.join(self.operations)}"


@dataclass(frozen=True)
class Webhook:
    name: str
    kind: str  # MUTATING or VALIDATING
    # As the API server holds it while the platform's first `up` runs.
    failure_policy: str
    rules: tuple[Rule, ...]
    # Where it is read, at the installer's pinned tag.
    source: str
    namespace_selector: LabelSelector | None = None
    object_selector: LabelSelector | None = None
    note: str = ""
    # False for a mutating webhook whose handler changes nothing (Kueue's no-op handler for an
    # integration it is not given).
    mutates: bool = True
    # The chart whose release answers it, where another than the one registering it (Istio's base
    # chart registers the default validator; istiod serves it).
    served_by: str | None = None

    def intercepts(
        self, group: str, resource: str, operation: str, namespace_labels: Mapping[str, str] | None, labels: Mapping[str, str]
    ) -> bool:
        """The API server's matching (k8s.io/apiserver pkg/admission/plugin/webhook/predicates): a rule,
        the namespace selector against the object's namespace (a Namespace against its own labels; it
        does not apply to other cluster-scoped objects), the object selector against its labels."""
        if not any(rule.matches(group, resource, operation) for rule in self.rules):
            return False
        if self.namespace_selector is not None and namespace_labels is not None:
            if not self.namespace_selector.matches(namespace_labels):
                return False
        return self.object_selector is None or self.object_selector.matches(labels)

    @property
    def blocks_or_changes(self) -> bool:
        """Whether an object created while it cannot answer comes out wrong: refused (Fail), or let
        through without what a mutating webhook would have added (Ignore)."""
        return self.failure_policy == FAIL or (self.kind == MUTATING and self.mutates)


@dataclass(frozen=True)
class Installer:
    """What one installer registers, for the values (or spec) it is given."""

    webhooks: tuple[Webhook, ...]
    # API groups of the custom resources it defines.
    crd_groups: tuple[str, ...]
    # The repository and tag it was read at.
    read_at: str


# What a chart's release registers, given its values and namespace.
ChartInstaller = Callable[[Mapping[str, Any], str], Installer]


def value_at(values: Mapping[str, Any], path: str, default: Any) -> Any:
    node: Any = values
    for part in path.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return default
        node = node[part]
    return node


def no_webhooks(read_at: str, crd_groups: tuple[str, ...] = ()) -> ChartInstaller:
    """A chart that registers no admission webhook (read at `read_at`)."""
    return lambda values, namespace: Installer((), crd_groups, read_at)
