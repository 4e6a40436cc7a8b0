"""Bad stack config: one clear error per offending key, with its full path and what is allowed."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any, Callable

import pytest

from platform_config import parse_platform_config

from .helpers import config_problems, raw_stack, run_preview, set_at, validate, write_stack


def preview_refuses(stack: Path, out: Path) -> str:
    """Preview a bad stack file as a user does: exit 2, no traceback, nothing written; its stderr."""
    result = run_preview("--stack", "test", "--config-file", str(stack), "--out", str(out))
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    assert not out.exists()
    return result.stderr


def only_issue(raw: dict[str, Any]) -> str:
    found = config_problems(raw)
    assert len(found) == 1, found
    return found[0]


def test_every_stack_file_parses(dev_raw, prod_raw):
    assert parse_platform_config(dev_raw).environment == "development"
    assert parse_platform_config(prod_raw).environment == "production"


def test_wrong_type_names_key_and_expected_type(dev_raw):
    dev_raw["models"][0]["autoscaling"]["maxReplicas"] = "eight"
    message = only_issue(dev_raw)
    assert message.startswith("inference-platform:models[0].autoscaling.maxReplicas: ")
    assert "expected a whole number" in message and "'eight'" in message


def test_number_given_as_string_is_not_coerced(dev_raw):
    dev_raw["nodePools"][0]["maxSize"] = "1"
    assert "inference-platform:nodePools[0].maxSize: expected a whole number" in only_issue(dev_raw)


def test_misspelt_key_lists_allowed_keys(dev_raw):
    dev_raw["models"][0]["release"]["canaryWieght"] = 10
    message = only_issue(dev_raw)
    assert message.startswith("inference-platform:models[0].release.canaryWieght: unknown key")
    assert "canaryWeight" in message and "stable" in message


def test_misspelt_top_level_key(dev_raw):
    dev_raw["tenant"] = dev_raw["tenants"]
    message = only_issue(dev_raw)
    assert message.startswith("inference-platform:tenant: unknown key")
    assert "tenants" in message


@pytest.mark.parametrize(
    "mutate, key, allowed",
    [
        (lambda r: r["nodePools"][0].update(maxSize=0), "nodePools[0].maxSize", "at least 1"),
        (lambda r: r["nodePools"][0].update(minSize=-1), "nodePools[0].minSize", "at least 0"),
        (lambda r: r["nodePools"][0].update(pricePerHour=0), "nodePools[0].pricePerHour", "greater than 0"),
        (lambda r: r["models"][0]["autoscaling"].update(maxReplicas=0), "models[0].autoscaling.maxReplicas", "greater than 0"),
        (lambda r: r["tenants"][0]["quota"].update(pods=-3), "tenants[0].quota.pods", "at least 0"),
        (lambda r: r["nodePools"][0]["sharing"].update(replicas=1), "nodePools[0].sharing.replicas", "at least 2"),
    ],
)
def test_zero_or_negative_counts(dev_raw, mutate: Callable, key: str, allowed: str):
    mutate(dev_raw)
    message = only_issue(dev_raw)
    assert message.startswith(f"inference-platform:{key}: ")
    assert allowed in message


def test_unknown_instance_type_lists_catalog(dev_raw):
    dev_raw["nodePools"][0]["instanceType"] = "p9.mega"
    message = only_issue(dev_raw)
    assert message.startswith("inference-platform:nodePools[0].instanceType: unknown instance type 'p9.mega'")
    assert "p5.48xlarge" in message and "g6.12xlarge" in message


def test_unknown_mig_profile_on_model(prod_raw):
    prod_raw["models"][2]["resources"]["migProfile"] = "9g.99gb"
    message = only_issue(prod_raw)
    assert message.startswith(
        "inference-platform:models[2].resources.migProfile: unknown MIG profile '9g.99gb' for the H100-80GB GPUs of pool 'h100'"
    )
    assert "1g.10gb, 1g.20gb, 2g.20gb, 3g.40gb, 4g.40gb, 7g.80gb" in message


def test_mig_profile_the_pool_geometry_does_not_provide(prod_raw):
    prod_raw["models"][2]["resources"]["migProfile"] = "2g.20gb"
    message = only_issue(prod_raw)
    assert message.startswith(
        "inference-platform:models[2].resources.migProfile: pool 'h100' does not provide nvidia.com/mig-2g.20gb"
    )
    assert "nvidia.com/mig-1g.10gb (MIG slice)" in message


def test_unknown_builtin_mig_config(prod_raw):
    sharing = prod_raw["nodePools"][0]["sharing"]
    del sharing["migGeometry"]
    sharing["migConfig"] = "all-2g.99gb"
    found = config_problems(prod_raw)
    assert any(
        m.startswith("inference-platform:nodePools[0].sharing.migConfig: unknown MIG config 'all-2g.99gb' for H100-80GB")
        and "all-1g.10gb" in m
        for m in found
    ), found


@pytest.mark.parametrize("weight, allowed", [(120, "at most 100"), (-5, "at least 0")])
def test_canary_weight_outside_0_100(prod_raw, weight: int, allowed: str):
    prod_raw["models"][1]["release"]["canaryWeight"] = weight
    message = only_issue(prod_raw)
    assert message.startswith("inference-platform:models[1].release.canaryWeight: ")
    assert allowed in message


def test_model_naming_missing_tenant(prod_raw):
    prod_raw["models"][0]["tenant"] = "team-z"
    message = only_issue(prod_raw)
    assert message == "inference-platform:models[0].tenant: unknown tenant 'team-z'; tenants: serving, team-a, team-b"


def test_model_naming_missing_pool(prod_raw):
    prod_raw["models"][3]["pool"] = "a100"
    message = only_issue(prod_raw)
    assert message == "inference-platform:models[3].pool: unknown node pool 'a100'; pools: h100, l4-batch"


def test_duplicate_tenant_name(prod_raw):
    prod_raw["tenants"][2]["name"] = "team-a"
    found = config_problems(prod_raw)
    assert "inference-platform:tenants[2].name: duplicate name 'team-a': names must be unique within tenants" in found


def test_duplicate_version_name(prod_raw):
    prod_raw["models"][1]["versions"][1]["name"] = "v1"
    found = config_problems(prod_raw)
    assert any(m.startswith("inference-platform:models[1].versions[1].name: duplicate version name 'v1'") for m in found)


@pytest.mark.parametrize("name", ["Team_A", "team-", "-team", "9team", "a" * 41])
def test_non_dns_1123_tenant_name(dev_raw, name: str):
    dev_raw["tenants"][0]["name"] = name
    dev_raw["models"][0]["tenant"] = name
    found = config_problems(dev_raw)
    assert any(m.startswith("inference-platform:tenants[0].name: ") and "DNS-1123" in m for m in found), found


def test_canary_naming_missing_version(prod_raw):
    prod_raw["models"][1]["release"]["canary"] = "v3"
    message = only_issue(prod_raw)
    assert message == "inference-platform:models[1].release.canary: version 'v3' is not among the model's versions (v1, v2)"


def test_every_problem_is_reported_at_once(dev_raw):
    dev_raw["nodePools"][0]["instanceType"] = "p9.mega"
    dev_raw["models"][0]["autoscaling"]["maxReplicas"] = "eight"
    assert len(config_problems(dev_raw)) == 2


def test_latest_image_tag_is_refused(prod_raw):
    prod_raw["models"][0]["versions"][0]["image"] = "vllm/vllm-openai:latest"
    assert "pin a release tag or a sha256 digest" in only_issue(prod_raw)


def test_unpinned_model_revision_is_refused(dev_raw):
    dev_raw["models"][0]["versions"][0]["source"]["revision"] = "main"
    message = only_issue(dev_raw)
    assert message.startswith("inference-platform:models[0].versions[0].source: revision 'main' is not pinned")


@pytest.mark.slow
def test_preview_exits_cleanly_with_one_message_per_bad_key(tmp_path, dev_raw):
    """The whole path a user takes: the program raises a RunError, the preview prints it
    without a traceback and exits 2, having written nothing."""
    dev_raw["models"][0]["release"]["canaryWeight"] = 150
    stderr = preview_refuses(write_stack(tmp_path, dev_raw), tmp_path / "out")
    assert "inference-platform:models[0].release.canaryWeight: must be at most 100 (got 150)" in stderr


@pytest.mark.slow
def test_huggingface_token_must_be_a_secret(tmp_path, dev_raw):
    stack = write_stack(tmp_path, dev_raw, {"inference-platform:huggingFaceTokens": {"dev-team": "hf_plaintext"}})
    stderr = preview_refuses(stack, tmp_path / "out")
    assert "inference-platform:huggingFaceTokens: must be a secret" in stderr and "hf_plaintext" not in stderr


# --- checks added after review -------------------------------------------------------------------


def test_names_built_from_model_and_version_must_not_collide(dev_raw):
    twin = copy.deepcopy(dev_raw["models"][0])
    dev_raw["models"][0]["name"] = "qwen"
    dev_raw["models"][0]["versions"][0]["name"] = "small-v1"
    dev_raw["models"][0]["release"]["stable"] = "small-v1"
    twin["name"], twin["servedModelName"] = "qwen-small", "other"
    dev_raw["models"].append(twin)
    dev_raw["tenants"][0]["quota"].update(gpu=4, memory="40Gi", pods=20)
    dev_raw["nodePools"][0]["sharing"]["replicas"] = 4
    found = config_problems(dev_raw)
    assert any(
        m.startswith(
            "inference-platform:models[1].versions[0].name: objects named 'qwen-small-v1' would collide in namespace 'dev-team'"
        )
        for m in found
    ), found


def test_profile_override_without_tiers_is_refused(prod_raw):
    prod_raw["profiles"] = {"chat": {"tiers": []}}
    assert only_issue(prod_raw).startswith("inference-platform:profiles.chat.tiers: ")


def test_knative_window_out_of_range(dev_raw):
    dev_raw["models"][0]["autoscaling"]["kpa"]["window"] = "2s"
    assert (
        only_issue(dev_raw) == "inference-platform:models[0].autoscaling.kpa.window: '2s' is outside the allowed range 6s..3600s"
    )


def test_drain_must_leave_time_to_drain(prod_raw):
    prod_raw["models"][0]["drain"] = {"terminationGracePeriodSeconds": 60, "preStopDelaySeconds": 55}
    assert only_issue(prod_raw).startswith(
        "inference-platform:models[0].drain: preStopDelaySeconds 55 + 10 s leaves vLLM no time"
    )


def test_production_hpa_keeps_two_replicas(prod_raw):
    prod_raw["models"][0]["autoscaling"]["minReplicas"] = 1
    assert only_issue(prod_raw).startswith(
        "inference-platform:models[0].autoscaling.minReplicas: production HPAs keep at least 2 replicas"
    )


# The policy pack's default floors (platform_config/floors.py), one value below each: the stack
# file is refused naming the key, where the pack would refuse the rendered object.
@pytest.mark.parametrize(
    "path, below, at_floor, message",
    [
        (("models", 0, "drain", "preStopDelaySeconds"), 4, 5, "4 s; at least 5 s, for the endpoint to leave"),
        (("models", 0, "autoscaling", "hpa", "scaleDownStabilizationSeconds"), 299, 300, "299 s; at least 300 s"),
        (("models", 0, "autoscaling", "hpa", "scaleDownPeriodSeconds"), 59, 60, None),
        (("models", 1, "autoscaling", "kpa", "scaleDownDelay"), "59s", "1m", "59s; production keeps at least 60 s"),
        (("models", 1, "autoscaling", "kpa", "window"), "59s", "60s", "59s; production keeps at least 60 s"),
    ],
)
def test_config_refuses_what_the_pack_would(prod_raw, path: tuple, below: Any, at_floor: Any, message: str | None):
    prod_raw["models"][0].setdefault("drain", {})  # prod's 70B keeps the default drain settings
    at = copy.deepcopy(prod_raw)
    set_at(at, path, at_floor)
    validate(at)  # the floor itself is accepted
    set_at(prod_raw, path, below)
    issue = only_issue(prod_raw)
    if message is None:
        # 50% per 59 s is just over 50% a minute; the issue names the percent key the rate is set by.
        key, message = "models[0].autoscaling.hpa.scaleDownMaxPercent", "is 50.8475% of the replicas per minute; at most 50%"
    else:
        key = "".join(f"[{k}]" if isinstance(k, int) else f".{k}" for k in path).lstrip(".")
    assert issue.startswith(f"inference-platform:{key}: "), issue
    assert message in issue, issue


def test_termination_grace_floor_counts_the_drain_chain(prod_raw):
    """A short configured grace is raised by the drain chain (preStop + longest request + margin);
    only a chain that stays below the pack's floor is refused."""
    prod_raw["models"][2]["drain"] = {"terminationGracePeriodSeconds": 30, "preStopDelaySeconds": 5}
    tiers = parse_platform_config(prod_raw).traffic.tiers
    prod_raw["traffic"]["tiers"] = {name: tier.model_dump(by_alias=True, mode="json") for name, tier in tiers.items()}
    prod_raw["traffic"]["tiers"]["standard"]["timeout"] = "60s"
    issues = config_problems(prod_raw)
    assert any("models[2].drain.terminationGracePeriodSeconds" in i and "at least 300 s" in i for i in issues), issues


def test_knative_target_above_what_a_replica_runs(prod_raw):
    prod_raw["models"][1]["autoscaling"]["kpa"]["containerConcurrency"] = 8
    assert only_issue(prod_raw).startswith(
        "inference-platform:models[1].autoscaling.kpa.targetConcurrency: target 10 is above containerConcurrency 8, the "
        "requests one replica runs: Knative would add replicas only once requests wait"
    )


def test_a_picked_model_takes_no_prefill_rate_and_production_keeps_its_picker(prod_raw):
    # Behind its endpoint picker the Knative 8B's servers keep no admission bound a prefill rate would size.
    prod_raw["models"][1]["versions"][1].setdefault("server", {})["prefillTokensPerSecond"] = 9000
    issue = only_issue(prod_raw)
    assert issue.startswith("inference-platform:models[1].versions[1].server.prefillTokensPerSecond: set, but the model's ")
    # Production times every tier's wait, on the Knative path as on the HPA path: the picker stays.
    del prod_raw["models"][1]["versions"][1]["server"]["prefillTokensPerSecond"]
    prod_raw["models"][1]["endpointPicker"] = {"enabled": False}
    issue = only_issue(prod_raw)
    assert issue.startswith("inference-platform:models[1].endpointPicker.enabled: production times every tier's wait")
    # Elsewhere it goes without one only to scale to zero, which the chat 8B does not.
    prod_raw["environment"] = "staging"
    issue = only_issue(prod_raw)
    assert issue.startswith("inference-platform:models[1].endpointPicker.enabled: every tier's wait is timed")


def test_a_picked_knative_replica_runs_at_least_the_kpas_target(prod_raw):
    # Behind its picker a replica saturates once its running slots fill: with fewer than the KPA's target
    # (10), Knative would see fewer requests in flight than it aims at and never add a replica.
    prod_raw["models"][1]["versions"][1]["server"]["maxNumSeqs"] = 8
    issue = only_issue(prod_raw)
    assert issue.startswith(
        "inference-platform:models[1].versions[1].server.maxNumSeqs: 8 requests run per replica of version 'v2', below "
        "the KPA's target 10"
    )
    prod_raw["models"][1]["autoscaling"]["kpa"]["targetConcurrency"] = 8
    validate(prod_raw)


def test_a_picked_knative_model_keeps_a_replica(staging_raw):
    # Staging's labeller scales to zero without a picker; with one, which cannot wake a revision, it may not.
    labeller = next(m for m in staging_raw["models"] if m["name"] == "labeller")
    del labeller["endpointPicker"]
    del labeller["server"]["prefillTokensPerSecond"]
    found = config_problems(staging_raw)
    assert any(
        m.startswith("inference-platform:models[1].autoscaling.minReplicas: 0 behind an endpoint picker: the picker dials ")
        for m in found
    ), found


def test_a_batch_job_has_no_serving_queue_to_bound(prod_raw):
    prod_raw["batchJobs"][0]["model"]["server"] = {"prefillTokensPerSecond": 1000}
    issue = only_issue(prod_raw)
    assert issue.startswith("inference-platform:batchJobs[0].model.server: ") and "a batch job has none" in issue


def test_a_batch_job_has_at_most_the_completions_an_indexed_job_with_retries_per_index_takes(prod_raw):
    """Kubernetes refuses an Indexed Job with backoffLimitPerIndex past 100,000 completions (without maxFailedIndexes
    of at most 10,000): the check stops there, naming the lines and the shard size that make the shards."""
    job = prod_raw["batchJobs"][0]
    job.update(lines=100_000, shardLines=1, chunkLines=1)
    validate(prod_raw)
    job["lines"] = 100_001
    assert only_issue(prod_raw) == (
        "inference-platform:batchJobs[0].lines: 100001 lines in shards of shardLines=1 make 100001 shards, more than the "
        "100000 completions Kubernetes admits for an Indexed Job with backoffLimitPerIndex: raise shardLines to at least 2"
    )


def test_gpu_utilisation_is_not_a_signal_on_time_sliced_pools(staging_raw):
    staging_raw["models"][0]["autoscaling"]["hpa"]["gpuUtilizationTarget"] = 70
    assert only_issue(staging_raw).startswith(
        "inference-platform:models[0].autoscaling.hpa.gpuUtilizationTarget: pool 'l4-shared' is time-sliced"
    )


def test_batch_model_check_follows_profile_overrides(prod_raw):
    prod_raw["profiles"] = {"summarization": {"tiers": ["standard"]}}
    del next(m for m in prod_raw["models"] if m["name"] == "llama-8b-batch")["tiers"]
    found = config_problems(prod_raw)
    assert any(
        m.startswith("inference-platform:models[1].batchModel: model 'llama-8b-batch' does not serve the batch tier")
        for m in found
    )


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
