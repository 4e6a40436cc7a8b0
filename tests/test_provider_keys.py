"""The providers' and the engine's keys a stack file may set: an allow-list with each value's form, the rest refused
naming the key and why (a provider key moves where and how the platform is deployed), values never echoed."""

from __future__ import annotations

import copy

import pytest

from platform_config.provider_keys import ALLOWED, REFUSED, provider_key_issues

from .config_error_helpers import preview_refuses
from .helpers import run_preview, write_stack


def problems(config: dict[str, str], secrets: frozenset[str] = frozenset()) -> list[str]:
    return [str(issue) for issue in provider_key_issues(config, config.get, lambda key: key in secrets)]


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("aws:region", "eu-west-1"),
        ("aws:region", "us-gov-west-1"),
        ("aws:profile", "platform-prod"),
        ("aws:allowedAccountIds", '["123456789012"]'),
        ("aws:forbiddenAccountIds", '["123456789012", "210987654321"]'),
        ("aws:defaultTags", '{"tags": {"team": "platform", "cost-center": "ml:inference"}}'),
        ("aws:maxRetries", "10"),
        ("aws:retryMode", "adaptive"),
        ("pulumi:disable-default-providers", '["kubernetes"]'),
    ],
)
def test_an_allowed_provider_key_of_its_form_passes(key: str, value: str):
    assert problems({key: value}) == []


@pytest.mark.parametrize(
    ("key", "value", "says"),
    [
        ("aws:region", "us-east-1; curl evil", "is not an AWS region"),
        ("aws:profile", "prod\nrole_arn=x", "is not a profile name"),
        ("aws:allowedAccountIds", '["1234"]', "AWS account IDs of 12 digits"),
        ("aws:allowedAccountIds", "123456789012", "AWS account IDs of 12 digits"),
        ("aws:defaultTags", '{"team": "platform"}', "must be {tags: {<key>: <value>}}"),
        ("aws:defaultTags", '{"tags": {"t": "\\u00e9"}}', "must be {tags: {<key>: <value>}}"),
        ("aws:maxRetries", "1000", "from 0 to 25"),
        ("aws:retryMode", "legacy", "must be one of standard, adaptive"),
        ("pulumi:disable-default-providers", '["random"]', "must be a list of aws, kubernetes, *"),
    ],
)
def test_an_allowed_key_of_another_form_is_refused_without_its_value(key: str, value: str, says: str):
    (problem,) = problems({key: value})
    assert problem.startswith(f"{key}: ") and says in problem
    assert value not in problem


@pytest.mark.parametrize("key", sorted(REFUSED))
def test_a_key_that_moves_the_deployment_is_refused_with_why(key: str):
    (problem,) = problems({key: "anything"})
    assert problem.startswith(f"{key}: is refused: it ") and "allowed: aws:region, aws:profile" in problem


def test_kubernetes_keys_are_refused_since_the_provider_is_explicit():
    (problem,) = problems({"kubernetes:renderYamlToDirectory": "/tmp/out"})
    assert "kubernetes:renderYamlToDirectory: is refused: the platform's Kubernetes provider is explicit" in problem


def test_an_unknown_provider_key_names_the_allowed_ones():
    (problem,) = problems({"aws:s3UsePathStyle": "true", "inference-platform:models": "[]"})
    assert problem.startswith("aws:s3UsePathStyle: is not one of the aws keys this platform allows: aws:region")


def test_a_credential_key_set_as_a_secret_passes():
    assert problems({"aws:secretKey": "[secret]"}, secrets=frozenset({"aws:secretKey"})) == []
    assert {key for key in ALLOWED if key.startswith("aws:")} >= {"aws:accessKey", "aws:secretKey", "aws:token"}


@pytest.mark.slow
def test_an_aws_endpoint_in_the_stack_file_is_refused_by_the_preview(tmp_path, staging_raw):
    stack = write_stack(
        tmp_path, staging_raw, {"aws:region": "us-east-1", "aws:endpoints": '[{"sts": "https://sts.attacker.example"}]'}
    )
    stderr = preview_refuses(stack, tmp_path / "out")
    assert "aws:endpoints: is refused: it sends the AWS API calls, and their signatures, to a host" in stderr
    assert "attacker.example" not in stderr


@pytest.mark.slow
def test_an_eks_stack_takes_its_region_from_the_stack_file_only(tmp_path, staging_raw):
    """Without `cluster.eks.region` the provider's `aws:region` serves (the preview's getRegion answers it); without
    either, the region would be whoever runs `pulumi up`'s, so the stack is refused naming the key."""
    raw = copy.deepcopy(staging_raw)
    del raw["cluster"]["eks"]["region"]
    stderr = preview_refuses(write_stack(tmp_path, raw), tmp_path / "out")
    assert "inference-platform:cluster.eks.region: is not set and neither is aws:region" in stderr
    result = run_preview(
        "--stack",
        "test",
        "--config-file",
        str(write_stack(tmp_path, raw, {"aws:region": "eu-west-1"})),
        "--out",
        str(tmp_path / "eu"),
    )
    assert result.returncode in (0, 1), result.stderr
    assert "Traceback" not in result.stderr
    # The cost stage prices by the region the program was given: the provider's.
    assert "the cluster is in eu-west-1; set pricePerHour" in (tmp_path / "eu" / "report.md").read_text()
