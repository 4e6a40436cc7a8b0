"""Tenant S3 scoping: a tenant's roles reach only S3 under its own prefixes, and the weight mirror's bucket only for
its own copies."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from .kube import Report, get
from .s3_locations import s3_parts, s3_within
from .tenant_data import (
    as_list,
    declared_prefixes,
    granted_locations,
    identity_of,
    mirror_bucket,
    role_policies,
)
from .workloads import of_type

# Other ways a policy reaches a role: none of them is the program's for a tenant's or the mirror's role.
ATTACHED_POLICIES = ("aws:iam/rolePolicyAttachment:RolePolicyAttachment", "aws:iam/policy:Policy")


# What a tenant's role may do in the weight mirror's bucket: read its own copies.
READ_ACTIONS = frozenset({"s3:GetObject", "s3:ListBucket"})


def _overlapping(owners: list[tuple[str, str]]) -> list[tuple[int, int]]:
    """The pairs (by index, the earlier first, in order) of prefixes of two tenants of which one lies within the
    other (s3_within both ways): each prefix is looked up under its own path and each shorter one of its bucket, so
    the cost grows with the prefixes and their depth, not with their pairs."""
    by_location: dict[tuple[str, tuple[str, ...]], list[int]] = defaultdict(list)
    for index, (_, prefix) in enumerate(owners):
        by_location[s3_parts(prefix)].append(index)
    pairs = set()
    for index, (tenant, prefix) in enumerate(owners):
        bucket, path = s3_parts(prefix)
        for depth in range(len(path) + 1):
            for other in by_location.get((bucket, path[:depth]), []):
                if owners[other][0] != tenant:
                    pairs.add((min(index, other), max(index, other)))
    return sorted(pairs)


def _listed(statement: Any) -> str:
    """The listing prefixes a statement is conditioned on, for a message (the resource alone is the whole bucket)."""
    prefixes = get(statement, "Condition", "StringLike", "s3:prefix", default=None)
    return "" if prefixes is None else f" (s3:prefix {', '.join(str(p) for p in as_list(prefixes))})"


def tenant_s3_scoping(args: Any, report_violation: Report) -> None:
    """Data belongs to its tenant: a tenant's roles reach only S3 under its own prefixes, and in the weight mirror only
    read its own copies; the mirror's role for a tenant writes only those; no two tenants' prefixes overlap."""
    declared = declared_prefixes(args, report_violation)
    owners = [(tenant, prefix) for tenant, prefixes in sorted(declared.items()) for prefix in prefixes]
    for first, second in _overlapping(owners):
        (claimant, prefix), (other, theirs) = owners[first], owners[second]
        report_violation(f"tenant {claimant!r}'s S3 prefix {prefix} overlaps tenant {other!r}'s {theirs}")
    policies = role_policies(args)
    mirror = mirror_bucket(policies, report_violation)
    governed = {identity_of(p.role)[0] for p in policies if p.owner is not None and p.role is not None}
    for kind in ATTACHED_POLICIES:
        for attached in of_type(args, kind):
            if identity_of(attached)[0] in governed:
                report_violation(
                    f"{attached.name} attaches a policy to a tenant's or the mirror's role: only its inline policy may grant",
                    attached.urn,
                )
    for p in policies:
        if p.owner is None:
            continue  # a platform controller's role (the autoscaler's, the load balancer controller's)
        kind, owner = p.owner
        where = f"role policy {p.policy.name} ({'tenant' if kind == 'tenant' else 'weight mirror for'} {owner!r})"
        if p.problem is not None:
            report_violation(f"{where}: {p.problem}", p.policy.urn)
        if p.role is not None and (get(p.role.props, "inlinePolicies") or get(p.role.props, "managedPolicyArns")):
            report_violation(f"{where}: its role carries other policies (inlinePolicies, managedPolicyArns)", p.policy.urn)
        if p.statements is None:
            report_violation(f"{where}: its policy is not a policy document with statements", p.policy.urn)
            continue
        for statement in p.statements:
            if not isinstance(statement, dict) or get(statement, "Effect") == "Deny":
                continue
            if "NotResource" in statement or "NotAction" in statement:
                report_violation(f"{where}: NotResource or NotAction grants all but what it names", p.policy.urn)
                continue
            actions = {str(a) for a in as_list(get(statement, "Action", default=[]))}
            for location in granted_locations(statement):
                if location is None:
                    report_violation(
                        f"{where} reaches {get(statement, 'Resource')}{_listed(statement)}: only S3 objects and listings "
                        "under a key prefix of whole path segments (no '//'), with at most a trailing /*",
                        p.policy.urn,
                    )
                    continue
                bucket = s3_parts(location)[0]
                if bucket == mirror or kind == "mirror":
                    own_copies = mirror is not None and s3_within(location, f"s3://{mirror}/{owner}")
                    if not own_copies or (kind == "tenant" and not actions <= READ_ACTIONS):
                        report_violation(
                            f"{where} reaches {location} with {', '.join(sorted(actions))}: in the weight mirror's bucket "
                            f"a tenant's servers only read its copies under s3://{mirror}/{owner}/, which only the mirror "
                            "writes",
                            p.policy.urn,
                        )
                elif not any(s3_within(location, prefix) for prefix in declared.get(owner, [])):
                    report_violation(
                        f"{where} reaches {location}, which is not under the tenant's S3 prefixes "
                        f"({', '.join(declared.get(owner, [])) or 'none'}): a tenant's workloads reach only its own data",
                        p.policy.urn,
                    )
