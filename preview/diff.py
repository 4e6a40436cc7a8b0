"""What changes between two previews (e.g. main and a pull request, or before and after a
canary promotion): resources added, removed, and changed inputs, by URN, with the old and new
value of each changed input, whether the change replaces the object rather than updating it,
and which workloads' pods it rolls."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from components.k8s_objects import HELM_RELEASE

# What pulumi-kubernetes replaces instead of updating (v4.32.0 provider/pkg/provider/diff.go
# forceNewProperties and its `forceNew` table; unchanged on its main branch since; the platform pins
# v4.34.2, which the mirror read lacks): on every kind the name and namespace, and per kind the
# input paths below (a change anywhere under one replaces). ConfigMaps and Secrets count as
# immutable, because the platform's provider does not set enableConfigMapMutable or
# enableSecretMutable. A Helm release (helm_release.go Diff) is replaced only for its name or
# namespace; anything else upgrades it in place.
ALWAYS_REPLACED = ("metadata.name", "metadata.namespace")
REPLACED_BY_KIND: dict[str, tuple[str, ...]] = {
    "apps/v1:Deployment": ("spec.selector",),
    "apps/v1:DaemonSet": ("spec.selector",),
    "apps/v1:StatefulSet": (
        "spec.podManagementPolicy",
        "spec.revisionHistoryLimit",
        "spec.selector",
        "spec.serviceName",
        "spec.volumeClaimTemplates",
    ),
    "batch/v1:Job": ("spec.completions", "spec.parallelism", "spec.selector", "spec.template"),
    "core/v1:ConfigMap": ("binaryData", "data"),
    "core/v1:Secret": ("type", "stringData", "data"),
    "core/v1:Service": ("spec.clusterIP",),
    "core/v1:PersistentVolumeClaim": ("spec.accessModes", "spec.selector", "spec.storageClassName", "spec.volumeName"),
    "core/v1:ResourceQuota": ("spec.scopes",),
    "rbac.authorization.k8s.io/v1:RoleBinding": ("roleRef",),
    "rbac.authorization.k8s.io/v1:ClusterRoleBinding": ("roleRef",),
    "storage.k8s.io/v1:StorageClass": ("parameters", "provisioner"),
}
HELM_REPLACED = ("name", "namespace")
# Workloads whose pods are made from `spec.template`: a change there rolls them (a Knative Service
# makes a new revision); a Job's is a replacement. The admission stage's kinds (preview/admission WORKLOAD_KINDS) but
# the Job: tests/test_admission_stacks.py holds the two together.
ROLLING_KINDS = ("apps/v1:Deployment", "apps/v1:DaemonSet", "apps/v1:StatefulSet", "serving.knative.dev/v1:Service")


@dataclass
class Change:
    urn: str
    type: str
    name: str
    # Dotted input paths that differ, e.g. "spec.http[2].route[0].weight".
    paths: list[str] = field(default_factory=list)
    # (path, old value, new value) of each of them (None: absent).
    values: list[tuple[str, Any, Any]] = field(default_factory=list)
    # The paths that make pulumi-kubernetes replace the object rather than update it.
    replacing: list[str] = field(default_factory=list)

    @property
    def rolls_pods(self) -> bool:
        """Whether the change makes the workload's pods anew (updated in place, not replaced)."""
        return (
            _kind(self.type) in ROLLING_KINDS and not self.replacing and any(_under(path, "spec.template") for path in self.paths)
        )


@dataclass
class Diff:
    added: list[Change]
    removed: list[Change]
    changed: list[Change]

    @property
    def empty(self) -> bool:
        return not (self.added or self.removed or self.changed)

    @property
    def replaced(self) -> list[Change]:
        return [c for c in self.changed if c.replacing]

    @property
    def rolling(self) -> list[Change]:
        return [c for c in self.changed if c.rolls_pods]


def _kind(token: str) -> str:
    """`kubernetes:apps/v1:Deployment` -> `apps/v1:Deployment`."""
    return token.removeprefix("kubernetes:")


def _under(path: str, prefix: str) -> bool:
    plain = re.sub(r"\[\d+\]", "", path)
    return plain == prefix or plain.startswith(prefix + ".")


def _changes(before: Any, after: Any, prefix: str = "") -> list[tuple[str, Any, Any]]:
    if isinstance(before, dict) and isinstance(after, dict):
        out: list[tuple[str, Any, Any]] = []
        for key in sorted(set(before) | set(after)):
            out += _changes(before.get(key), after.get(key), f"{prefix}.{key}" if prefix else str(key))
        return out
    if isinstance(before, list) and isinstance(after, list) and len(before) == len(after):
        out = []
        for index, (b, a) in enumerate(zip(before, after)):
            out += _changes(b, a, f"{prefix}[{index}]")
        return out
    return [] if before == after else [(prefix or "(inputs)", before, after)]


def replacing_paths(token: str, paths: list[str]) -> list[str]:
    """Which of a resource's changed input paths make pulumi-kubernetes replace it (REPLACED_BY_KIND)."""
    if token == HELM_RELEASE:
        prefixes: tuple[str, ...] = HELM_REPLACED
    elif token.startswith("kubernetes:"):
        prefixes = ALWAYS_REPLACED + REPLACED_BY_KIND.get(_kind(token), ())
    else:
        return []
    return [path for path in paths if any(_under(path, prefix) for prefix in prefixes)]


def diff_resources(baseline: list[dict[str, Any]], current: list[dict[str, Any]]) -> Diff:
    old = {r["urn"]: r for r in baseline}
    new = {r["urn"]: r for r in current}
    added = [Change(u, new[u]["type"], new[u]["name"]) for u in new if u not in old]
    removed = [Change(u, old[u]["type"], old[u]["name"]) for u in old if u not in new]
    changed = []
    for urn in new:
        if urn in old:
            values = _changes(old[urn]["inputs"], new[urn]["inputs"])
            if values:
                paths = [path for path, _, _ in values]
                kind = new[urn]["type"]
                changed.append(Change(urn, kind, new[urn]["name"], paths, values, replacing_paths(kind, paths)))
    return Diff(added, removed, changed)
