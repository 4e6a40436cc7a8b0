"""Tenants' data as the stack declares it: their S3 prefixes, the S3 locations a role policy grants, and whose each
role is (a tenant's, or the weight mirror's for a tenant)."""

from __future__ import annotations

import json
import re
from typing import Any, Iterator, Mapping

from .kube import FACTS, NAMESPACE, TENANT_LABEL, Report, config, get, is_list
from .s3_locations import EMPTY_SEGMENT, s3_parts, whole_segments
from .workloads import of_type, tenant_namespaces

ROLE = "aws:iam/role:Role"


ROLE_POLICY = "aws:iam/rolePolicy:RolePolicy"


POD_IDENTITY_ASSOCIATION = "aws:eks/podIdentityAssociation:PodIdentityAssociation"


TENANT_DATA: Mapping[str, str] = FACTS["tenantData"]


# `system:serviceaccount:<namespace>:<name>` in a trust policy (IRSA's subject condition).
_SERVICE_ACCOUNT_SUBJECT = re.compile(r"system:serviceaccount:([^:\"]+):([^\"]+)")


# A key prefix the program writes: letters, digits and `-_.=/` (platform_config/models/sources.py S3_URI_PATTERN), with at
# most a trailing `*` after a `/`, or `*` alone (every key).
_KEY_PREFIX = re.compile(r"\*|[A-Za-z0-9._=/-]*(/\*)?")


_BUCKET = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")


def as_list(value: Any) -> list[Any]:
    return list(value) if is_list(value) else [value]


def granted_locations(statement: Mapping[str, Any]) -> Iterator[str | None]:
    """The S3 locations an Allow statement reaches, as s3:// URIs: an object ARN's key prefix (its trailing `/*`
    dropped), a bucket ARN's listing under each `s3:prefix` it is conditioned on (StringLike, as the program writes
    it; any other condition: the whole bucket). None for what no location says: not an S3 ARN, a wildcard anywhere
    but a trailing `/*`, a bucket name that is not one, a key with an empty path segment (`//`)."""
    prefixes = get(statement, "Condition", "StringLike", "s3:prefix", default=None)
    for resource in as_list(get(statement, "Resource", default=[])):
        text = str(resource)
        if not text.startswith("arn:aws:s3:::"):
            yield None
            continue
        bucket, _, key = text.removeprefix("arn:aws:s3:::").partition("/")
        if not _BUCKET.fullmatch(bucket):
            yield None
            continue
        keys = [key] if key or prefixes is None else [str(p) for p in as_list(prefixes)]
        for key in keys:
            location = f"s3://{bucket}/{key.removesuffix('*')}"
            yield location if _KEY_PREFIX.fullmatch(key) and whole_segments(location) else None


def declared_prefixes(args: Any, report_violation: Report) -> dict[str, list[str]]:
    """Each tenant's prefixes: the pack's `tenantS3Prefixes` where set (then it names every tenant's), else what the
    tenant's namespace declares; one with an empty path segment (`//`) reported and left out, so nothing lies under
    it."""
    declared = _declared(args)
    for tenant, prefixes in declared.items():
        for prefix in [p for p in prefixes if not whole_segments(p)]:
            report_violation(f"tenant {tenant!r}'s S3 prefix {prefix} {EMPTY_SEGMENT}")
    return {tenant: [p for p in prefixes if whole_segments(p)] for tenant, prefixes in declared.items()}


def _declared(args: Any) -> dict[str, list[str]]:
    configured = config(args).get("tenantS3Prefixes")
    if configured:
        return {str(tenant): [str(p) for p in prefixes] for tenant, prefixes in configured.items()}
    declared: dict[str, list[str]] = {}
    for namespace in of_type(args, NAMESPACE):
        tenant = get(namespace.props, "metadata", "labels", TENANT_LABEL)
        raw = get(namespace.props, "metadata", "annotations", TENANT_DATA["s3PrefixesAnnotation"], default="[]")
        try:
            prefixes = json.loads(raw)
        except (TypeError, ValueError):
            prefixes = None
        if tenant:
            declared[str(tenant)] = [str(p) for p in prefixes] if is_list(prefixes) else []
    return declared


class RolePolicy:
    """An inline role policy, whose role it is and its statements (None: not a policy document)."""

    def __init__(self, policy: Any, role: Any, owner: tuple[str, str] | None, problem: str | None):
        self.policy, self.role, self.owner, self.problem = policy, role, owner, problem
        try:
            document = json.loads(get(policy.props, "policy", default=""))
        except (TypeError, ValueError):
            document = None
        statements = get(document, "Statement", default=None) if isinstance(document, dict) else None
        self.statements: list[Any] | None = as_list(statements) if statements is not None else None


def _owner(role: Any, association: Any, tenants: set[str]) -> tuple[tuple[str, str] | None, str | None]:
    """Whose a role is, ("tenant" | "mirror", tenant), and what is wrong with it: by the namespace its pods are in (the
    Pod Identity association beside it, the service accounts its trust policy names), which its tag must agree with;
    by its tag alone where neither names a namespace."""
    mirror = TENANT_DATA["mirrorNamespace"]
    accounts = []
    if association is not None:
        accounts.append(
            (str(get(association.props, "namespace", default="")), str(get(association.props, "serviceAccount", default="")))
        )
    trust = str(get(role.props, "assumeRolePolicy", default="")) if role is not None else ""
    accounts += _SERVICE_ACCOUNT_SUBJECT.findall(trust)
    by_namespace = {("tenant", ns) for ns, _ in accounts if ns in tenants}
    by_namespace |= {
        ("mirror", sa.removeprefix(TENANT_DATA["mirrorServiceAccountPrefix"])) for ns, sa in accounts if ns == mirror
    }
    tags = dict(get(role.props, "tags", default={}) or {}) if role is not None else {}
    by_tag = {("tenant", str(tags[TENANT_DATA["tenantTag"]]))} if TENANT_DATA["tenantTag"] in tags else set()
    by_tag |= {("mirror", str(tags[TENANT_DATA["weightMirrorTag"]]))} if TENANT_DATA["weightMirrorTag"] in tags else set()
    if any("*" in ns or "*" in sa or "?" in ns or "?" in sa for ns, sa in accounts):
        return (sorted(by_namespace | by_tag) or [("tenant", "?")])[0], "its trust policy names service accounts by wildcard"
    if len(by_namespace) > 1:
        return sorted(by_namespace)[0], f"it is assumed from several tenants' workloads ({sorted(by_namespace)})"
    if by_namespace and by_tag and by_tag != by_namespace:
        return sorted(by_namespace)[0], f"it is tagged {sorted(by_tag)[0]} but assumed by {sorted(by_namespace)[0]}"
    if len(by_tag) > 1:
        return sorted(by_tag)[0], "it is tagged for two owners"
    found = by_namespace or by_tag
    return (next(iter(found)) if found else None), None


def identity_of(resource: Any) -> tuple[str, str]:
    """Which workload identity a role, its inline policy or its association belongs to: the program's WorkloadIdentity
    `<name>` creates `<name>-role`, `<name>-policy` and `<name>-association` beside each other (components/
    workload_identity.py), so they share their URN's parent chain and that stem, whether or not the analyzer was sent
    the component itself."""
    chain = resource.urn.rsplit("::", 1)[0].rsplit("$", 1)[0]
    stem = resource.name
    for suffix in ("-role", "-policy", "-association"):
        stem = stem.removesuffix(suffix)
    return chain, stem


def role_policies(args: Any) -> list[RolePolicy]:
    """Each inline role policy with its owner; a policy with no role beside it has no owner anyone can tell."""
    tenants = tenant_namespaces(args)
    roles = {identity_of(r): r for r in of_type(args, ROLE)}
    associations = {identity_of(a): a for a in of_type(args, POD_IDENTITY_ASSOCIATION)}
    found = []
    for policy in of_type(args, ROLE_POLICY):
        parent = identity_of(policy)
        role = roles.get(parent)
        if role is None:
            found.append(RolePolicy(policy, None, ("tenant", "?"), "no role beside it tells whose it is"))
            continue
        owner, problem = _owner(role, associations.get(parent), tenants)
        found.append(RolePolicy(policy, role, owner, problem))
    return found


def mirror_bucket(policies: list[RolePolicy], report_violation: Report) -> str | None:
    """The weight mirror's bucket: the one bucket its roles write (one per tenant, each under its own folder)."""
    buckets = {
        s3_parts(location)[0]
        for p in policies
        if p.owner is not None and p.owner[0] == "mirror"
        for statement in p.statements or []
        for location in granted_locations(statement)
        if location is not None
    }
    if len(buckets) > 1:
        report_violation(f"the weight mirror's roles reach several buckets ({', '.join(sorted(buckets))}): it writes one")
    return min(buckets) if buckets else None
