"""The deploying identity's IAM policy (preview/deploy_policy.py), as the preview writes it per stack:
exactly the API calls of the AWS resources that stack declares, none missing, and nothing for a
stack with no AWS resources."""

from __future__ import annotations

import json
import re

import pytest

from preview.deploy_policy import ACTIONS, DEPLOY_POLICY_FILE, RUN_ACTIONS, UnmappedTypes, deploying_identity_policy

ACTION = re.compile(r"[a-z0-9-]+:[A-Z][A-Za-z]+")


@pytest.mark.parametrize("stack", ["staging", "prod"])
def test_the_preview_writes_the_calls_of_every_aws_resource_the_stack_declares(previews, stack):
    run = previews[stack]
    declared = {r["type"] for r in run.resources if r["type"].startswith("aws:")}
    assert declared, "an EKS stack declares AWS resources"
    policy = json.loads((run.out / DEPLOY_POLICY_FILE).read_text())
    assert policy["Version"] == "2012-10-17"
    granted = {action for statement in policy["Statement"] for action in statement["Action"]}
    # Every declared type is mapped (the preview stops otherwise), and the policy is their calls and no more.
    assert declared <= set(ACTIONS)
    assert granted == {*RUN_ACTIONS, *(a for t in declared for a in ACTIONS[t])}
    for statement in policy["Statement"]:
        service = statement["Sid"].removeprefix("PulumiUp").lower()
        assert statement["Effect"] == "Allow" and all(a.startswith(f"{service}:") for a in statement["Action"])
    # The roles the program creates are passed to EKS (cluster, node groups, pod identities).
    assert "iam:PassRole" in granted and "eks:CreateNodegroup" in granted


def test_a_stack_without_aws_resources_needs_no_aws_permission(previews):
    run = previews["dev"]  # an existing cluster by kubeconfig
    assert not any(r["type"].startswith("aws:") for r in run.resources)
    assert not (run.out / DEPLOY_POLICY_FILE).exists()


def test_every_mapped_call_is_an_api_action_name():
    for token, actions in ACTIONS.items():
        assert actions and len(set(actions)) == len(actions), token
        assert all(ACTION.fullmatch(a) for a in actions), token
    assert all(ACTION.fullmatch(a) for a in RUN_ACTIONS)


def test_every_aws_type_the_program_can_declare_has_its_calls():
    """Every AWS resource is registered by a type token of components/aws_objects.py, whichever options a stack
    takes (IRSA's identity provider is declared by no committed stack)."""
    from components import aws_objects

    tokens = {v for k, v in vars(aws_objects).items() if k.isupper() and isinstance(v, str) and v.startswith("aws:")}
    assert "aws:iam/openIdConnectProvider:OpenIdConnectProvider" in tokens
    assert tokens <= set(ACTIONS), sorted(tokens - set(ACTIONS))


def test_a_type_without_calls_stops_rather_than_granting_too_little():
    with pytest.raises(UnmappedTypes, match="aws:rds/instance:Instance"):
        deploying_identity_policy(["aws:eks/cluster:Cluster", "aws:rds/instance:Instance"])


def test_the_preview_lists_the_repositorys_example_values_until_none_is_left(previews):
    from preview.placeholders import example_values

    section = previews["prod"].report["placeholders"]
    keys = [e["key"] for e in section["data"]["examples"]]
    assert "inference-platform:cluster.eks.subnetIds[0]" in keys and "inference-platform:traffic.hosts[0]" in keys
    assert "inference-platform:cluster.eks.adminPrincipalArns[0]" in keys
    assert section["summary"].startswith(f"{len(keys)} example value(s) to replace before `pulumi up`")
    # Real values pass; secrets are never read.
    real = {
        "inference-platform:cluster": json.dumps({"eks": {"subnetIds": ["subnet-07d1c3a5b9e2f4680"]}}),
        "inference-platform:traffic": json.dumps({"hosts": ["api.acme.io"]}),
        "inference-platform:registryToken": "example.com",
    }
    assert example_values(real, ["inference-platform:registryToken"]) == []
