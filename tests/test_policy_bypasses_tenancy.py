"""The ways around the policy pack between tenants (issue 12, issue 27), each with a violating and a compliant case:
the data belongs to its tenant (tenant-s3-scoping: roles, tags, policies, declared prefixes), and tenants' egress
goes through the egress gateway in production."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from preview.engine import RecordedResource

from . import policy_helpers
from .policy_harness import PolicyHarness
from .policy_helpers import analyze_stack, stack_with

# The policy tests' module fixtures (tests/policy_helpers.py), bound here for pytest to find.
baseline, harness = policy_helpers.baseline, policy_helpers.harness


# --- data belongs to its tenant (tenant-s3-scoping) -------------------------------------------------

ROLE = "aws:iam/role:Role"
ROLE_POLICY = "aws:iam/rolePolicy:RolePolicy"
NAMESPACE = "kubernetes:core/v1:Namespace"


def _granting(name: str, *statements: dict[str, Any]):
    """The stack with the role policy `name` granting `statements` too (as the program writes them, in both the
    inputs and the outputs the pack is sent)."""

    def change(records: list[RecordedResource]) -> list[RecordedResource]:
        (record,) = [r for r in records if r.type == ROLE_POLICY and r.name == name]
        for props in (record.inputs, record.outputs):
            document = json.loads(props["policy"])
            document["Statement"].extend(statements)
            props["policy"] = json.dumps(document)
        return records

    return change


def _object_grant(arn: str, *actions: str) -> dict[str, Any]:
    return {"Effect": "Allow", "Action": list(actions), "Resource": arn}


def _listing(bucket_arn: str, prefix: str) -> dict[str, Any]:
    return {
        "Effect": "Allow",
        "Action": ["s3:ListBucket"],
        "Resource": bucket_arn,
        "Condition": {"StringLike": {"s3:prefix": [prefix]}},
    }


def _sibling_role(records: list[RecordedResource], name: str) -> RecordedResource:
    (policy,) = [r for r in records if r.type == ROLE_POLICY and r.name == name]
    (role,) = [r for r in records if r.type == ROLE and r.parent == policy.parent]
    return role


TENANT_TAG = "inference.platform/tenant"
MIRROR_TAG = "inference.platform/weight-mirror-for"


def _untagged(name: str, change, tag: str = TENANT_TAG):
    """`change`, with the role beside the policy `name` stripped of its owner tag `tag`."""

    def untag(records: list[RecordedResource]) -> list[RecordedResource]:
        records = change(records)
        role = _sibling_role(records, name)
        for props in (role.inputs, role.outputs):
            props["tags"] = {k: v for k, v in props["tags"].items() if k != tag}
        return records

    return untag


def _retagged(name: str, tenant: str):
    def retag(records: list[RecordedResource]) -> list[RecordedResource]:
        role = _sibling_role(records, name)
        for props in (role.inputs, role.outputs):
            props["tags"] = {**props["tags"], TENANT_TAG: tenant}
        return records

    return retag


def _replacing_policy(name: str, text: str):
    def replace(records: list[RecordedResource]) -> list[RecordedResource]:
        (record,) = [r for r in records if r.type == ROLE_POLICY and r.name == name]
        for props in (record.inputs, record.outputs):
            props["policy"] = text
        return records

    return replace


def _attaching(name: str):
    """An AWS managed policy attached to the role beside `name`, by a resource under the same parent."""

    def attach(records: list[RecordedResource]) -> list[RecordedResource]:
        (policy,) = [r for r in records if r.type == ROLE_POLICY and r.name == name]
        extra = copy.deepcopy(policy)
        extra.type = "aws:iam/rolePolicyAttachment:RolePolicyAttachment"
        extra.name = f"{name}-s3-full-access"
        extra.urn = policy.urn.replace("aws:iam/rolePolicy:RolePolicy", extra.type) + "-s3-full-access"
        for props in (extra.inputs, extra.outputs):
            props.pop("policy", None)
            props["policyArn"] = "arn:aws:iam::aws:policy/AmazonS3FullAccess"
        return [*records, extra]

    return attach


def _declaring(tenant: str, prefixes: list[str]):
    def change(records: list[RecordedResource]) -> list[RecordedResource]:
        (namespace,) = [r for r in records if r.type == NAMESPACE and r.name == tenant]
        for props in (namespace.inputs, namespace.outputs):
            props["metadata"]["annotations"]["inference.platform/s3-prefixes"] = json.dumps(prefixes)
        return records

    return change


def test_the_rendered_roles_reach_only_their_tenants_data(harness, baseline):
    assert "tenant-s3-scoping" not in analyze_stack(harness, list(baseline.records))


@pytest.mark.parametrize(
    "change",
    [
        # team-b's batch job overwriting the weight mirror's copy the shared 70B streams from.
        _granting(
            "review-labels-identity-policy", _object_grant("arn:aws:s3:::inference-prod-model-weights/serving/*", "s3:PutObject")
        ),
        # team-b reading the serving tenant's adapters.
        _granting(
            "review-labels-identity-policy", _object_grant("arn:aws:s3:::inference-prod-adapters/llama-3.1-8b/*", "s3:GetObject")
        ),
        # team-a's servers reading team-b's batch outputs, with or without their role's tenant tag.
        _granting("llama-1b-weights-identity-policy", _object_grant("arn:aws:s3:::team-b-batch/outputs/*", "s3:GetObject")),
        _untagged(
            "llama-1b-weights-identity-policy",
            _granting("llama-1b-weights-identity-policy", _object_grant("arn:aws:s3:::team-b-batch/*", "s3:GetObject")),
        ),
        # team-a's servers reading another tenant's copies in the weight mirror.
        _granting(
            "llama-1b-weights-identity-policy",
            _object_grant("arn:aws:s3:::inference-prod-model-weights/serving/*", "s3:GetObject"),
        ),
        # Listing a whole bucket, or another tenant's folder of it.
        _granting(
            "llama-1b-weights-identity-policy",
            {"Effect": "Allow", "Action": ["s3:ListBucket"], "Resource": "arn:aws:s3:::team-b-batch"},
        ),
        # Anything but S3.
        _granting("review-labels-identity-policy", _object_grant("*", "s3:GetObject")),
        # The mirror's role for team-a writing the serving tenant's copies.
        _granting(
            "weight-mirror-team-a-identity-policy",
            _object_grant("arn:aws:s3:::inference-prod-model-weights/serving/*", "s3:PutObject"),
        ),
        # Two tenants claiming the same data.
        _declaring("team-a", ["s3://team-b-batch/outputs"]),
        # Everything but one location; wildcards that reach past a folder.
        _granting(
            "review-labels-identity-policy", {"Effect": "Allow", "Action": ["s3:GetObject"], "NotResource": "arn:aws:s3:::x/y"}
        ),
        _granting(
            "review-labels-identity-policy",
            {"Effect": "Allow", "NotAction": ["s3:DeleteObject"], "Resource": "arn:aws:s3:::team-b-batch/*"},
        ),
        _granting("review-labels-identity-policy", _object_grant("arn:aws:s3:::team-b-batch/out*", "s3:GetObject")),
        _granting("review-labels-identity-policy", _object_grant("arn:aws:s3:::team-b-*/*", "s3:GetObject")),
        _granting("review-labels-identity-policy", _object_grant("arn:aws:s3:::*/team-b/*", "s3:GetObject")),
        # The mirror's role for team-a writing team-b's bucket "as a mirror", or with its tag stripped.
        _granting("weight-mirror-team-a-identity-policy", _object_grant("arn:aws:s3:::team-b-batch/team-a/*", "s3:PutObject")),
        _untagged(
            "weight-mirror-team-a-identity-policy",
            _granting("weight-mirror-team-a-identity-policy", _object_grant("arn:aws:s3:::team-b-batch/*", "s3:PutObject")),
            MIRROR_TAG,
        ),
        # A role of team-b's pods tagged as team-a's, to be checked against team-a's prefixes.
        _retagged("review-labels-identity-policy", "team-a"),
        # A policy that is not a policy document, and one attached beside the inline policy.
        _replacing_policy("review-labels-identity-policy", "not json"),
        _attaching("review-labels-identity-policy"),
        # Keys with an empty path segment, which S3 reads as key prefixes of their own (`outputs//x` is not
        # `outputs/x`), read by whole segments no more: a grant's object key or listing prefix, a declared prefix.
        _granting("review-labels-identity-policy", _object_grant("arn:aws:s3:::team-b-batch/outputs//x/*", "s3:GetObject")),
        _granting("review-labels-identity-policy", _listing("arn:aws:s3:::team-b-batch", "outputs//x/*")),
        _declaring("team-b", ["s3://team-b-batch", "s3://team-b-archive//old"]),
    ],
    ids=[
        "mirror-write",
        "other-tenants-adapters",
        "other-tenants-outputs",
        "untagged-role",
        "other-tenants-copies",
        "whole-bucket-listing",
        "not-s3",
        "mirror-writes-another-tenant",
        "overlapping-prefixes",
        "not-resource",
        "not-action",
        "key-wildcard",
        "bucket-wildcard",
        "any-bucket",
        "mirror-elsewhere",
        "untagged-mirror",
        "retagged",
        "not-a-document",
        "attached-policy",
        "empty-segment-object",
        "empty-segment-listing",
        "empty-segment-declared",
    ],  # fmt: skip
)
def test_a_tenants_role_reaching_anothers_data_is_refused(harness, baseline, change):
    assert analyze_stack(harness, stack_with(baseline, change)).get("tenant-s3-scoping") == "mandatory"


def test_the_packs_own_prefixes_overrule_what_a_namespace_declares(baseline):
    """A stack change can widen what its tenant's namespace declares; the pack's config (CI's, not the stack's) then
    still holds the tenant to its own prefixes."""
    widened = _granting("review-labels-identity-policy", _object_grant("arn:aws:s3:::team-b-archive/*", "s3:GetObject"))
    change = lambda records: _declaring("team-b", ["s3://team-b-batch", "s3://team-b-archive"])(widened(records))  # noqa: E731
    # When set it is the whole truth: a tenant it does not name has no data.
    truth = {"serving": ["s3://inference-prod-adapters/llama-3.1-8b"], "team-b": ["s3://team-b-batch"]}
    running = PolicyHarness("prod", {"tenant-s3-scoping": {"tenantS3Prefixes": truth}})
    assert "tenant-s3-scoping" not in analyze_stack(running, stack_with(baseline, _declaring("team-b", ["s3://team-b-batch"])))
    assert analyze_stack(running, stack_with(baseline, change)).get("tenant-s3-scoping") == "mandatory"


def _s3_scoping_messages(analyzer: PolicyHarness, records: list[RecordedResource]) -> list[str]:
    return [d.message for d in analyzer.analyze_stack(records) if d.policy == "tenant-s3-scoping"]


def test_a_location_with_an_empty_path_segment_is_a_violation_named_as_one(harness, baseline):
    """A rendered role policy granting a `//` key, or a namespace declaring a `//` prefix: each reported as such (the
    rule that reads them, s3_parts, refuses them rather than read them as the location without the extra `/`), and no
    policy that reads the tenants' prefixes (tenant-egress-by-host too) fails on them."""
    granted = "arn:aws:s3:::team-b-batch/outputs//x/*"
    change = _granting("review-labels-identity-policy", _object_grant(granted, "s3:GetObject"))
    (message,) = _s3_scoping_messages(harness, stack_with(baseline, change))
    assert granted in message and "no '//'" in message, message
    declared = _declaring("team-b", ["s3://team-b-batch", "s3://team-b-archive//old"])
    (message,) = _s3_scoping_messages(harness, stack_with(baseline, declared))
    assert "tenant 'team-b'" in message and "s3://team-b-archive//old has an empty path segment" in message, message


def test_a_pack_prefix_with_an_empty_path_segment_holds_nothing(baseline):
    """The pack's own `tenantS3Prefixes` (whose schema's pattern, the config's, admits a `//`): such a prefix is
    reported and holds none of the tenant's grants, never read as the bucket it would collapse to."""
    truth = {"serving": ["s3://inference-prod-adapters/llama-3.1-8b"], "team-b": ["s3://team-b-batch//"]}
    running = PolicyHarness("prod", {"tenant-s3-scoping": {"tenantS3Prefixes": truth}})
    messages = _s3_scoping_messages(running, list(baseline.records))
    assert any("s3://team-b-batch// has an empty path segment" in m for m in messages), messages
    assert any("which is not under the tenant's S3 prefixes (none)" in m for m in messages), messages


# --- tenant egress through the egress gateway (issue 27) ------------------------------------------

EGRESS_HOST = "istio-egressgateway.istio-egress.svc.cluster.local"
ANYWHERE_443 = {"ports": [{"protocol": "TCP", "port": 443}], "to": [{"ipBlock": {"cidr": "0.0.0.0/0"}}]}
TEAM_A_GATEWAY = "team-a-allow-egress-gateway-egress"  # team-a's pods to the egress gateway (team-a reads S3 only)
TEAM_B_HUGGING_FACE = "team-b-allow-hugging-face-egress"  # team-b's servers and jobs to Hugging Face's CDN
TEAM_B_S3 = "team-b-egress-s3"  # team-b's ServiceEntry of its buckets' hosts (and the weight mirror's)
TEAM_B_HUB = "team-b-egress-hugging-face"  # a ServiceEntry of Hugging Face's hosts, as rendered outside production
TEAM_B_ROUTES, TEAM_B_SUBSETS = "team-b-egress-routes", "team-b-egress-subsets"
EGRESS_GATEWAY_OBJECT = "egress-gateway-gateway"
TEAM_A_GRANT = "egress-gateway-tenant-team-a"


def _edit(name: str, change):
    """Change the outputs (what AnalyzeStack sees) of the record named `name`."""

    def changed(records: list[RecordedResource]) -> list[RecordedResource]:
        change(next(r for r in records if r.name == name).outputs)
        return records

    return changed


def _without(*names: str):
    return lambda records: [r for r in records if r.name not in names]


def _first_rule(record: dict[str, Any]) -> dict[str, Any]:
    return record["spec"]["egress"][0]


def _with_download_rule(change=lambda spec: None):
    """Team-b's namespace with the Hugging Face download rule a stack outside production without a weight mirror
    renders (components/specs/network.py outbound_policies: HTTPS anywhere but instance metadata, for its servers'
    and jobs' pods), `change`d."""
    from components.specs.network import HUGGING_FACE_DOWNLOADERS, https_anywhere, network_policy

    def changed(records: list[RecordedResource]) -> list[RecordedResource]:
        rule = copy.deepcopy(next(r for r in records if r.name == TEAM_A_GATEWAY))
        policy = network_policy("team-b", "allow-hugging-face-egress", "Egress", https_anywhere(), HUGGING_FACE_DOWNLOADERS)
        change(policy)
        rule.name, rule.urn = TEAM_B_HUGGING_FACE, rule.urn.replace(TEAM_A_GATEWAY, TEAM_B_HUGGING_FACE)
        rule.inputs = rule.outputs = policy
        return [*records, rule]

    return changed


def _with_hub_entry(*hosts: str):
    """Team-b's namespace with a ServiceEntry of Hugging Face's `hosts`, of the form the program renders outside
    production (components/tenant.py), beside its S3 one."""

    def changed(records: list[RecordedResource]) -> list[RecordedResource]:
        entry = copy.deepcopy(next(r for r in records if r.name == TEAM_B_S3))
        entry.name, entry.urn = TEAM_B_HUB, entry.urn.replace(TEAM_B_S3, TEAM_B_HUB)
        entry.outputs["metadata"]["name"] = "hugging-face"
        entry.outputs["spec"]["hosts"] = list(hosts)
        if any(h.startswith("*.") for h in hosts):
            entry.outputs["spec"]["resolution"] = "DYNAMIC_DNS"
        entry.inputs = entry.outputs
        return [*records, entry]

    return changed


def _subset(record: dict[str, Any], host_part: str) -> dict[str, Any]:
    return next(s for s in record["spec"]["subsets"] if host_part in s["trafficPolicy"]["portLevelSettings"][0]["tls"]["sni"])


def _grant(record: dict[str, Any]) -> dict[str, Any]:
    return record["spec"]["rules"][0]


@pytest.mark.parametrize(
    ("change", "flagged"),
    [
        (lambda rs: rs, set()),
        # Past the gateway by address: every pod, a split of the whole space, a rule without peers.
        (_edit(TEAM_A_GATEWAY, lambda p: p["spec"]["egress"].append(ANYWHERE_443)), {TEAM_A_GATEWAY}),
        (_edit(TEAM_A_GATEWAY, lambda p: p["spec"]["egress"].append(
            {"to": [{"ipBlock": {"cidr": "0.0.0.0/1"}}, {"ipBlock": {"cidr": "128.0.0.0/1"}}]})), {TEAM_A_GATEWAY}),
        (_edit(TEAM_A_GATEWAY, lambda p: p["spec"]["egress"].append({"ports": [{"protocol": "TCP", "port": 22}]})),
         {TEAM_A_GATEWAY}),
        (_edit(TEAM_A_GATEWAY, lambda p: p["spec"]["egress"].append({"to": [{"ipBlock": {"cidr": "::/0"}}]})), {TEAM_A_GATEWAY}),
        # No Hugging Face in production: the download rule a stack outside production renders, however narrow (its
        # servers and jobs only, HTTPS only, instance metadata excepted), with the wildcard hosts it exists for or
        # without; and any ServiceEntry of Hugging Face's hosts (the weight mirror's Jobs download from there).
        (_with_download_rule(), {TEAM_B_HUGGING_FACE}),
        (_with_download_rule(lambda p: p["spec"].update(podSelector={})), {TEAM_B_HUGGING_FACE}),
        (_with_download_rule(lambda p: p["spec"]["egress"][0]["to"].pop(1)), {TEAM_B_HUGGING_FACE}),
        (lambda rs: _with_download_rule()(_with_hub_entry("*.huggingface.co", "*.hf.co")(rs)),
         {TEAM_B_HUGGING_FACE, TEAM_B_HUB}),
        (_with_hub_entry("huggingface.co"), {TEAM_B_HUB}),
        (_with_hub_entry("*.hf.co"), {TEAM_B_HUB}),
        # A host sent around the gateway, or to it unidentified.
        (_without(TEAM_B_ROUTES), {TEAM_B_S3}),
        (_edit(TEAM_B_ROUTES, lambda v: v["spec"]["tls"][0]["route"][0]["destination"].update(
            host="team-b-batch.s3.us-east-1.amazonaws.com")), {TEAM_B_ROUTES}),
        (_edit(TEAM_B_SUBSETS, lambda d: _subset(d, "team-b-batch.s3.us-east-1")["trafficPolicy"][
            "portLevelSettings"][0]["tls"].update(mode="DISABLE")), {TEAM_B_SUBSETS}),
        (_edit(TEAM_B_SUBSETS, lambda d: _subset(d, "team-b-batch.s3.us-east-1")["trafficPolicy"][
            "portLevelSettings"][0]["tls"].update(sni="inference-prod-adapters.s3.us-east-1.amazonaws.com")), {TEAM_B_SUBSETS}),
        (_edit(TEAM_B_SUBSETS, lambda d: d["spec"].update(subsets=[])), {TEAM_B_ROUTES}),
        # The gateway: blind to who connects, or letting a tenant through to what is not its own.
        (_edit(EGRESS_GATEWAY_OBJECT, lambda g: g["spec"]["servers"][0]["tls"].update(mode="PASSTHROUGH")),
         {EGRESS_GATEWAY_OBJECT}),
        (_edit(TEAM_A_GRANT, lambda a: _grant(a)["when"][0]["values"].append("team-b-batch.s3.amazonaws.com")),
         {TEAM_A_GRANT}),
        (_edit(TEAM_A_GRANT, lambda a: _grant(a).pop("from")), {TEAM_A_GRANT}),
        (_edit(TEAM_A_GRANT, lambda a: _grant(a).pop("when")), {TEAM_A_GRANT}),
        (_edit(TEAM_A_GRANT, lambda a: _grant(a)["when"][0].update(notValues=["x"], values=[])), {TEAM_A_GRANT}),
        (_edit(TEAM_A_GRANT, lambda a: _grant(a)["from"][0]["source"].update(principals=["*"])), {TEAM_A_GRANT}),
        (_edit(TEAM_A_GRANT, lambda a: _grant(a)["from"][0]["source"].update(namespaces=["team-a", "monitoring"])),
         {TEAM_A_GRANT}),
        (_without(*(f"egress-gateway-tenant-{t}" for t in ("serving", "team-a", "team-b")), "egress-gateway-allow-nothing"),
         {""}),
        # A Sidecar seeing more than its namespace and the gateway.
        (_edit("team-b-batch-egress", lambda s: s["spec"]["egress"][0]["hosts"].append("istio-system/*")),
         {"review-labels-job", "ticket-labels-job"}),
    ],
    ids=["as-rendered", "https-anywhere", "split-address-space", "rule-without-to", "ipv6-anywhere",
         "download-rule", "download-rule-for-every-pod", "download-rule-ipv4-only", "download-rule-with-its-hosts",
         "hub-host", "hub-download-hosts", "no-route", "route-around-the-gateway",
         "subset-without-mtls", "subset-names-another-host", "no-subset", "passthrough-server", "another-tenants-host",
         "grant-to-anyone", "grant-to-any-host", "grant-by-exclusion", "grant-by-principal", "grant-to-a-platform-namespace",
         "no-grant", "sidecar-sees-istio-system"],
)  # fmt: skip
def test_tenant_egress_goes_through_the_egress_gateway_in_production(harness, baseline, change, flagged):
    hits = harness.analyze_stack(stack_with(baseline, change))
    assert {(d.urn or "").rsplit("::", 1)[-1] for d in hits if d.policy == "tenant-egress-by-host"} == flagged


def test_outside_production_the_egress_gateway_is_not_required(baseline):
    """A non-production stack may let a tenant's pods reach HTTPS anywhere (the sidecars still hold them to their
    hosts)."""
    staging = PolicyHarness("staging")
    change = _edit(TEAM_A_GATEWAY, lambda p: p["spec"]["egress"].append(ANYWHERE_443))
    assert "tenant-egress-by-host" not in analyze_stack(staging, stack_with(baseline, change))
    assert analyze_stack(PolicyHarness("prod"), stack_with(baseline, change))["tenant-egress-by-host"] == "mandatory"
    # So may a tenant's servers and jobs download from Hugging Face there, where a stack may do without the mirror.
    downloads = lambda rs: _with_download_rule()(_with_hub_entry("*.huggingface.co", "*.hf.co")(rs))  # noqa: E731
    assert "tenant-egress-by-host" not in analyze_stack(staging, stack_with(baseline, downloads))
    assert analyze_stack(PolicyHarness("prod"), stack_with(baseline, downloads))["tenant-egress-by-host"] == "mandatory"
