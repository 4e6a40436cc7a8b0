"""Bad stack config a careless or hostile hand writes, each refused naming its key: credentials in clear anywhere but
the secret keys (never echoed), an EKS region the AWS provider does not use, header names that are not the
platform's to take, namespaces the platform keeps; and the stack file read as the CLI reads it, within its bounds,
with values at the edge of what the cluster takes accepted."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from .config_error_helpers import only_issue, preview_refuses
from .helpers import config_problems, raw_stack, set_at, write_stack


@pytest.mark.slow
def test_secret_inside_a_structured_key_is_refused_without_echoing_it(tmp_path, dev_raw):
    stack = write_stack(tmp_path, dev_raw)
    text = stack.read_text().replace("context: dev", "context:\n        secure: AAABAHNlY3JldC1jb250ZXh0")
    stack.write_text(text)
    stderr = preview_refuses(stack, tmp_path / "out")
    assert "inference-platform:cluster: holds a secret, but only huggingFaceTokens, registryToken may" in stderr
    assert "secret:inference-platform:cluster" not in stderr


_JWT = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJ1c2VyIn0.c2lnbmF0dXJlLXZhbHVl"


@pytest.mark.slow
@pytest.mark.parametrize(
    ("key", "value", "kind"),
    [
        ("kubernetes:kubeconfig", "users:\n- user: {token: " + _JWT + "}", "JSON Web Token"),
        ("aws:secretKey", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", "credential"),
    ],
)
def test_a_provider_credential_in_clear_is_refused_without_being_echoed(tmp_path, dev_raw, key, value, kind):
    stack = write_stack(tmp_path, dev_raw, {key: value})
    stderr = preview_refuses(stack, tmp_path / "out")
    assert f"{key}: holds a {kind} in clear: set it with `pulumi config set --secret {key}`" in stderr
    assert _JWT not in stderr and "wJalrXUtnFEMI" not in stderr


@pytest.mark.slow
def test_eks_region_must_match_the_aws_provider_region(tmp_path, staging_raw):
    stack = write_stack(tmp_path, staging_raw, {"aws:region": "eu-west-1"})
    stderr = preview_refuses(stack, tmp_path / "out")
    assert "inference-platform:cluster.eks.region: 'us-east-1' differs from aws:region 'eu-west-1'" in stderr


def test_stack_files_are_read_like_the_cli_reads_them():
    from preview.stack_config import load_yaml

    assert load_yaml("a: 2026-10-01\nb: on\nc: yes\nd: true\ne: 1:30\nf: 8") == {
        "a": "2026-10-01",
        "b": "on",
        "c": "yes",
        "d": True,
        "e": "1:30",
        "f": 8,
    }


def test_anchors_merge_keys_and_quoted_keys_still_read():
    from preview.stack_config import load_yaml

    text = "base: &b {a: 1, 'on': [x, y]}\nconfig:\n  x: *b\n  y: {<<: *b, c: 2}\n"
    assert load_yaml(text)["config"] == {"x": {"a": 1, "on": ["x", "y"]}, "y": {"a": 1, "on": ["x", "y"], "c": 2}}


def test_the_stack_file_bounds_sit_where_they_say():
    from preview.stack_config import MAX_DEPTH, MAX_VALUES, StackConfigError, load_yaml

    def nested(depth: int) -> str:
        return "[" * depth + "]" * depth

    assert load_yaml(nested(MAX_DEPTH)) == eval(nested(MAX_DEPTH))  # noqa: S307 - a literal of brackets
    with pytest.raises(StackConfigError, match=f"nested more than {MAX_DEPTH} levels deep"):
        load_yaml(nested(MAX_DEPTH + 1))
    # The root list and its values: exactly MAX_VALUES is read, one more is refused.
    assert len(load_yaml("[" + ",".join(["x"] * (MAX_VALUES - 1)) + "]")) == MAX_VALUES - 1
    with pytest.raises(StackConfigError, match="aliases expanded"):
        load_yaml("[" + ",".join(["x"] * MAX_VALUES) + "]")


@pytest.mark.parametrize(
    "model, values",
    [
        (
            "NodePoolConfig",
            {"labels": {"example.com/team": "a_b.c-1", "tier": "", "k" * 63: "v" * 63, "node.kubernetes.io/lifecycle": "spot"}},
        ),
        ("EksSettings", {"publicAccessCidrs": ["203.0.113.0/24", "0.0.0.0/0", "198.51.100.7/32"], "region": "eu-west-1"}),
        ("KpaSettings", {"containerConcurrency": 1000, "scaleDownDelay": "0s"}),
        ("ProfileOverride", {"concurrencyPerReplica": 1000}),
        ("ReplicaResources", {"gpus": 1, "cpu": "1m", "memory": "1"}),
        ("AutoscalingConfig", {"mode": "hpa", "minReplicas": 0, "maxReplicas": 2**31 - 1}),
    ],
)
def test_values_at_the_edge_of_what_the_cluster_takes_are_accepted(model: str, values: dict[str, Any]):
    from platform_config import models

    required_keys: dict[str, dict[str, Any]] = {
        "NodePoolConfig": {"name": "pool", "instanceType": "g6.4xlarge", "maxSize": 1},
        "EksSettings": {"subnetIds": ["subnet-0123456789abcdef0", "subnet-0123456789abcdef1"]},
    }
    required = required_keys.get(model, {})
    parsed = getattr(models, model).model_validate({**required, **values}, by_alias=True, by_name=False)
    dumped = parsed.model_dump(by_alias=True)
    assert {key: dumped[key] for key in values} == values


def test_durations_end_at_the_protobuf_maximum():
    from platform_config.models import MAX_DURATION_SECONDS, duration_seconds

    assert duration_seconds(f"{MAX_DURATION_SECONDS // 3600}h") == MAX_DURATION_SECONDS
    with pytest.raises(ValueError, match="longer than the largest duration"):
        duration_seconds(f"{MAX_DURATION_SECONDS // 3600 + 1}h")


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("upgrade", "a hop-by-hop header"),
        ("content-type", "a representation or framing header"),
        ("proxy-authorization", "a credential header"),
        ("traceparent", "a header the mesh's proxies set"),
        ("x-b3-traceid", "under a prefix Envoy or Istio set or act on"),
        ("x-amzn-trace-id", "a header the mesh's proxies set"),
        ("x-http-method-override", "a method or route override"),
        ("x-datadog-trace-id", "under a prefix Envoy or Istio set or act on"),
    ],
)
def test_a_header_setting_names_why_a_header_is_not_the_platforms_to_take(dev_raw, name: str, why: str):
    raw = copy.deepcopy(dev_raw)
    set_at(raw, ("traffic", "tierHeader"), name)
    problem = only_issue(raw)
    assert problem.startswith("inference-platform:traffic.tierHeader:") and why in problem, problem


@pytest.mark.parametrize(
    ("token", "kind"),
    [
        ("AKIA" + "Z" * 16, "AWS access key ID"),
        ("xoxb-" + "1234567890-abc", "Slack token"),
        ("sk-proj-" + "x" * 40, "OpenAI API key"),
        ("AIza" + "y" * 35, "Google API key"),
        ("eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJ1c2VyIn0.c2lnbmF0dXJlLXZhbHVl", "JSON Web Token"),
        ("npm_" + "a1B2" * 9, "npm token"),
        ("dckr_pat_" + "Xy_9" * 7, "Docker Hub token"),
        ("sk_live_" + "Zz09" * 6, "Stripe live key"),
        ("rk_live_" + "Zz09" * 6, "Stripe live key"),
        ("sk-ant-api03-" + "Ab_-" * 23, "Anthropic API key"),
        ("github_pat_" + "A1" * 11 + "_" + "b2" * 30, "GitHub token"),
        ("glpat-" + "Cd3_" * 5, "GitLab token"),
        ("hf_" + "Q" * 34, "Hugging Face token"),
    ],
)
def test_a_credential_in_clear_is_refused_without_being_echoed(dev_raw, token: str, kind: str):
    raw = copy.deepcopy(dev_raw)
    set_at(raw, ("tenants", 0, "groups"), [f"ops-{token}"])
    problem = only_issue(raw)
    assert problem.startswith("inference-platform:tenants[0].groups[0]:") and f"holds a {kind} in clear" in problem
    assert token not in problem


def test_a_full_length_token_body_counts_only_from_a_word_boundary():
    from platform_config.credentials import credential_format

    hf, aws = "hf_" + "a1" * 15, "AKIA" + "Q" * 16
    # Preceded by a letter or digit, the prefix is part of another word.
    for text in (f"x{hf}", f"X{aws}", "task-" + "b" * 40, "/models/hf_cache", "ghp_short"):
        assert credential_format(text) is None, text
    # After a separator, or ending in '-' (a Google key may), it is one.
    assert credential_format(f"/models/{hf}") == "Hugging Face token"
    assert credential_format(f"key={aws}") == "AWS access key ID"
    assert credential_format("AIza" + "c" * 34 + "-") == "Google API key"


def test_a_private_key_is_masked_whole():
    from preview.masking import mask_secrets

    block = "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA0Z3VS5JJcds3xfn\n-----END RSA PRIVATE KEY-----"
    assert mask_secrets(f"value {block} here") == "value *** here"


def test_every_namespace_the_platform_installs_into_is_reserved(previews):
    """A tenant may not take a namespace the platform renders for itself (its quotas, network policies and RBAC would
    land beside the platform's controllers): every Namespace each stack's preview declares is a tenant or reserved."""
    from platform_config.namespaces import RESERVED_NAMESPACES

    for stack in ("dev", "staging", "prod"):
        run = previews[stack]
        tenants = {t["name"] for t in raw_stack(stack)["tenants"]}
        declared = {r["inputs"]["metadata"]["name"] for r in run.resources if r["type"] == "kubernetes:core/v1:Namespace"}
        assert declared - tenants <= RESERVED_NAMESPACES, stack


@pytest.mark.parametrize("reserved", ["kueue-system", "image-prepull", "model-weights", "kube-system", "istio-egress"])
def test_a_tenant_named_after_a_platform_namespace_is_refused(dev_raw, reserved):
    old = dev_raw["tenants"][0]["name"]
    dev_raw["tenants"][0]["name"] = reserved
    for block in ("models", "batchJobs"):
        for entry in dev_raw.get(block, []):
            if entry.get("tenant") == old:
                entry["tenant"] = reserved
    problems = [p for p in config_problems(dev_raw) if p.startswith("inference-platform:tenants[0].name: ")]
    assert problems and problems[0].startswith(
        f"inference-platform:tenants[0].name: {reserved!r} is a namespace the platform or Kubernetes uses; reserved: "
    )
    assert "kueue-system" in problems[0] and "model-weights" in problems[0]
