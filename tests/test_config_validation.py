"""Bad stack config: one clear error per offending key, with its full path and what is allowed. Credentials in clear,
the stack file's bounds, header names and reserved namespaces: tests/test_config_secrets_and_bounds.py."""

from __future__ import annotations

import copy
from typing import Any, Callable

import pytest

from platform_config import parse_platform_config

from .config_error_helpers import only_issue, preview_refuses
from .helpers import config_problems, set_at, validate, write_stack


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
