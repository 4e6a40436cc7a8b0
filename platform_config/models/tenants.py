"""Tenants: a namespace each, with its GPU budget, groups, pools, pod security and S3 prefixes."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import AfterValidator, Field

from .base import ConfigModel, MigProfileName, NamespaceName, NonNegativeInt, Quantity, ResourceName, _full_match
from .sources import S3Location


class ResourceBudget(ConfigModel):
    """Requests a tenant may hold at once. `gpu` counts nvidia.com/gpu: whole GPUs on unshared
    pools, shares on time-sliced pools. `mig` counts slices per MIG profile."""

    gpu: NonNegativeInt = 0
    """`nvidia.com/gpu`: whole GPUs on unshared pools, shares on time-sliced pools."""
    mig: dict[MigProfileName, NonNegativeInt] = {}
    """MIG profile -> slices, e.g. `{1g.10gb: 8}`."""
    cpu: Quantity | None = None
    """CPU requests (a quantity, e.g. `"64"`)."""
    memory: Quantity | None = None
    """Memory requests and limits (a quantity, e.g. `200Gi`)."""
    pods: NonNegativeInt | None = None
    """Pods."""


def _tenant_group(value: str) -> str:
    # `system:` groups are Kubernetes' own (system:authenticated is every signed-in user,
    # system:serviceaccounts every pod): binding one would open the tenant to all of them.
    if value.startswith("system:"):
        raise ValueError(f"{value!r} is not a tenant group: give an identity-provider group, not empty or a 'system:' group")
    return value


# How many tenants a stack may declare: a namespace each, no upstream bound near; this holds the preview's time,
# linear in what the stack declares, to 2.5 times the 100 tenants `make bench` measures.
MAX_TENANTS = 256
# Identity-provider groups bound to one tenant's Role.
MAX_TENANT_GROUPS = 64


class TenantConfig(ConfigModel):
    name: NamespaceName
    """The tenant's namespace (not one the platform or Kubernetes uses)."""
    groups: list[
        Annotated[
            str,
            # A RoleBinding subject's name, as the identity provider writes the group: printable ASCII (spaces inside).
            _full_match(
                r"[!-~]([ -~]{0,253}[!-~])?",
                "is not a tenant group: an identity-provider group of 1-255 printable ASCII characters",
                255,
            ),
            AfterValidator(_tenant_group),
        ]
    ] = Field(default=[], max_length=MAX_TENANT_GROUPS)
    """Identity-provider groups (never `system:` ones) bound to the tenant's Role in the namespace: read its workloads,
    logs and events, restart its pods; never read Secrets, exec into or attach to pods, or create workloads."""
    quota: ResourceBudget
    """The tenant's whole budget."""
    experiment_quota: ResourceBudget = ResourceBudget()
    """The part of `quota` experiments may use; the rest is reserved for production."""
    pools: Annotated[list[ResourceName], Field(min_length=1)] | None = None
    """Pools whose capacity backs the quota. Default: every pool."""
    pod_security: Literal["restricted", "baseline"] = "restricted"
    """Pod Security Standard the namespace enforces."""
    s3_prefixes: Annotated[list[S3Location], Field(max_length=64)] = []
    """S3 prefixes that hold the tenant's data (`s3://bucket` or `s3://bucket/folder`, one `/` between path segments:
    S3 reads `a//b` as another key prefix than `a/b`): every S3 location its models, adapters and batch jobs name
    (weights, adapters, batch inputs and outputs, and what the registry or its lock file resolves to) must lie under
    one, no other tenant's may overlap them, and none may be in the weight mirror's bucket (the platform's: a tenant's
    servers read their own copies under `<bucket>/<tenant>/`, written by the mirror only)."""
    batch_quota: dict[ResourceName, ResourceBudget] = {}
    """Pool -> what the tenant's batch jobs are guaranteed there (Kueue's nominal quota of the tenant's ClusterQueue on
    that pool's ResourceFlavor). Batch pods run at `inference-experiment` priority, so the sum over pools is part of
    `experimentQuota`; beyond it a job may borrow what other tenants leave idle on the pool, up to `experimentQuota`,
    and lent GPUs are reclaimed by preemption (README, Batch jobs)."""
