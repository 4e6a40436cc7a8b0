"""Model serving's config: what a stack may not ask of its servers (each refused naming its key), the profiles'
presets and the README's table of them, latency as an autoscaling signal."""

from __future__ import annotations

import json
import typing

import pytest

from platform_config.profiles import PROFILES, ProfileName

from .helpers import ROOT, Evaluated, config_problems, downloading_weights, owning, prod_with_labeller_server, raw_stack
from .serving_helpers import ksvc, pod

# --- bad inputs ---------------------------------------------------------------------------------


def test_max_below_min(prod_raw):
    prod_raw["models"][0]["autoscaling"]["maxReplicas"] = 1
    (message,) = config_problems(prod_raw)
    assert message == "inference-platform:models[0].autoscaling: maxReplicas 1 is below minReplicas 2"


def test_time_sliced_pool_gives_one_share_per_container(staging_raw):
    staging_raw["models"][0]["resources"]["gpus"] = 2
    (message,) = config_problems(staging_raw)
    assert message.startswith("inference-platform:models[0].resources.gpus: pool 'l4-shared' shares GPUs by time-slicing")


def test_latency_sensitive_profile_on_time_sliced_pool(staging_raw):
    staging_raw["models"][0]["profile"] = "chat"
    found = config_problems(staging_raw)
    assert any(
        m.startswith("inference-platform:models[0].pool: profile 'chat' is latency-sensitive but pool 'l4-shared' shares GPUs")
        for m in found
    )


def test_chat_is_never_scaled_to_zero(prod_raw):
    prod_raw["models"][1]["autoscaling"]["minReplicas"] = 0
    chat, picked = config_problems(prod_raw)
    assert chat.startswith("inference-platform:models[1].autoscaling.minReplicas: profile 'chat' is never scaled to zero")
    # Nor can a picked Knative model.
    assert picked.startswith("inference-platform:models[1].autoscaling.minReplicas: 0 behind an endpoint picker")


def test_hpa_cannot_scale_to_zero(prod_raw):
    prod_raw["models"][0]["autoscaling"]["minReplicas"] = 0
    found = config_problems(prod_raw)
    key = "inference-platform:models[0].autoscaling.minReplicas"
    assert f"{key}: mode 'hpa' cannot scale to zero: minReplicas must be at least 1 (modes that can: kpa)" in found


def test_batch_labelling_must_not_share_a_pool_with_real_time_models():
    prod_raw = prod_with_labeller_server()
    prod_raw["models"][3]["pool"] = "h100"
    prod_raw["tenants"][2]["pools"] = ["h100", "l4-batch"]
    found = config_problems(prod_raw)
    assert any(
        m.startswith("inference-platform:models[3].pool: batch labelling is kept apart from real-time work") for m in found
    ), found


def test_batch_labelling_must_not_share_a_namespace_with_real_time_models():
    prod_raw = prod_with_labeller_server()
    prod_raw["models"][3]["tenant"] = "team-a"
    found = config_problems(prod_raw)
    assert any(m.startswith("inference-platform:models[3].tenant: batch labelling is kept apart") for m in found), found


def test_time_sliced_memory_share_too_large(staging_raw):
    staging_raw["models"][0]["server"]["gpuMemoryUtilization"] = 0.5
    (message,) = config_problems(staging_raw)
    assert message.startswith(
        "inference-platform:models[0].server.gpuMemoryUtilization: 0.5 of the GPU's memory, but 4 pods share"
    )


def test_s3_weights_need_eks(dev_raw):
    dev_raw["models"][0]["versions"][0]["source"] = {"s3Uri": "s3://bucket/qwen", "revision": "r1"}
    (message,) = config_problems(owning(dev_raw, "dev-team", "s3://bucket/qwen"))
    assert message.startswith("inference-platform:models[0].versions: S3 weights are read with an IAM role")


def test_cache_larger_than_the_node_disk(prod_raw):
    # On the instance store: p5's 8 x 3840 GB, in GiB.
    downloading_weights(prod_raw)["models"][0]["resources"]["cacheSize"] = "30Ti"
    (message,) = config_problems(prod_raw)
    assert message.startswith(
        f"inference-platform:models[0].resources.cacheSize: 30Ti of weights cache does not fit the "
        f"{8 * 3840 * 10**9 // 2**30} GiB disk of pool 'h100' (instanceStore)"
    )


def test_cache_larger_than_the_root_volume(prod_raw):
    prod_raw["nodePools"][0]["weightCache"] = {"medium": "rootVolume"}
    prod_raw["models"][0]["resources"]["cacheSize"] = "2Ti"
    problems = config_problems(prod_raw)
    assert any(
        m.startswith(
            "inference-platform:models[0].resources.cacheSize: 2Ti of weights cache does not fit the 1000 GiB disk of "
            "pool 'h100' (rootVolume)"
        )
        for m in problems
    ), problems


# --- the README documents each profile's defaults -------------------------------------------------


def test_every_profile_the_config_may_name_has_its_preset():
    """The profile names a stack may give (the `ProfileName` Literal, which the config schema and the reference are
    generated from) are the presets', in order: a name without a preset would pass validation and fail later."""
    assert tuple(PROFILES) == typing.get_args(ProfileName)
    assert all(profile.name == name for name, profile in PROFILES.items())


def test_readme_profile_table_matches_the_presets():
    text = (ROOT / "README.md").read_text()
    rows = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 9 and cells[0].strip("`") in PROFILES:
            rows[cells[0].strip("`")] = cells
    assert set(rows) == set(PROFILES)
    for name, profile in PROFILES.items():
        cells = rows[name]
        assert cells[1] == ("yes" if profile.latency_sensitive else "no"), name
        assert cells[3] == ("yes" if profile.streaming else "no"), name
        assert cells[4] == ("yes" if profile.prefix_caching else "no"), name
        assert cells[5] == str(profile.concurrency_per_replica), name
        assert cells[6] == ("yes" if profile.scale_to_zero else "no"), name
        assert cells[7] == profile.priority_class, name
        assert cells[8] == ", ".join(profile.tiers), name
        assert cells[9] == f"{profile.request_timeout_seconds} s", name
        assert cells[10] == f"{profile.prompt_tokens} / {profile.output_tokens}", name


def test_no_api_token_even_with_s3_weights(prod_raw):
    prod_raw["models"][1]["versions"][0]["source"] = {"s3Uri": "s3://model-weights/llama-8b", "revision": "2026-10-01"}
    owning(prod_raw, "serving", "s3://model-weights/llama-8b")
    spec = pod(ksvc(Evaluated(prod_raw), "llama-8b-v1", "serving"))
    assert spec["automountServiceAccountToken"] is False and spec["serviceAccountName"] == "llama-8b-weights"


# --- latency as an autoscaling signal (autoscaling.hpa.ttftP99TargetMs) ----------------------------


def test_prods_70b_scales_on_its_p99_time_to_first_token_beside_queue_and_gpu():
    """The HPA's third metric: each pod's P99 TTFT (the adapter's rule), at the stack's target in seconds; held a
    minute before it scales up."""
    prod = Evaluated(raw_stack("prod"), secrets={"inference-platform:huggingFaceTokens": json.dumps({"serving": "hf_x"})})
    spec = prod.one("kubernetes:autoscaling/v2:HorizontalPodAutoscaler", "llama-70b-v1-hpa")["inputs"]["spec"]
    names = [m["pods"]["metric"]["name"] for m in spec["metrics"] if m["type"] == "Pods"]
    assert names == ["vllm_num_requests_waiting", "gpu_engine_active_percent", "vllm_time_to_first_token_p99_seconds"]
    latency = next(m for m in spec["metrics"] if m.get("pods", {}).get("metric", {}).get("name") == names[-1])
    assert latency["pods"]["target"] == {"type": "AverageValue", "averageValue": "1000m"}
    assert spec["behavior"]["scaleUp"]["stabilizationWindowSeconds"] == 60


@pytest.mark.parametrize(
    ("model", "change", "key", "says"),
    [
        # Knative's KPA class takes concurrency or rps only (knative-v1.23.0 annotation_validation.go validateMetric).
        ("llama-8b", {"ttftP99TargetMs": 800}, "autoscaling.hpa.ttftP99TargetMs", "Knative's KPA scales on concurrency"),
        # No stabilization: one slow burst would add replicas.
        ("llama-70b", {"scaleUpStabilizationSeconds": 0}, "autoscaling.hpa.scaleUpStabilizationSeconds", "at least 60 s"),
    ],
)
def test_a_latency_target_where_it_cannot_work_is_refused(model, change, key, says):
    raw = raw_stack("prod")
    target = next(m for m in raw["models"] if m["name"] == model)
    target["autoscaling"].setdefault("hpa", {}).update(change)
    index = raw["models"].index(target)
    problems = config_problems(raw)
    assert any(p.startswith(f"inference-platform:models[{index}].{key}: ") and says in p for p in problems), problems


def test_a_latency_target_on_a_profile_that_does_not_stream_is_refused():
    raw = raw_stack("staging")
    summarizer = next(m for m in raw["models"] if m["name"] == "summarizer")
    summarizer["autoscaling"]["hpa"].update({"ttftP99TargetMs": 2000, "scaleUpStabilizationSeconds": 60})
    problems = config_problems(raw)
    assert any("models[0].autoscaling.hpa.ttftP99TargetMs: " in p and "does not stream" in p for p in problems), problems


def test_the_readme_profile_table_names_the_committed_stacks_that_run_each_profile():
    """The table's last column: every committed stack's models of each profile, linked to the stack file, and
    "no committed stack yet" where none runs it (rag and embeddings, issue 32)."""
    import yaml

    runs: dict[str, list[str]] = {}
    for stack in ("dev", "staging", "prod"):
        config = yaml.safe_load((ROOT / "stacks" / f"Pulumi.{stack}.yaml").read_text())["config"]
        for model in config.get("inference-platform:models", []):
            runs.setdefault(model["profile"], []).append(f"[{stack}](stacks/Pulumi.{stack}.yaml) `{model['name']}`")
    text = (ROOT / "README.md").read_text()
    for name in PROFILES:
        row = next(line for line in text.splitlines() if line.startswith(f"| `{name}` |"))
        cell = row.strip().strip("|").split("|")[11].strip()
        assert cell == (", ".join(runs[name]) if name in runs else "no committed stack yet"), (name, cell)
