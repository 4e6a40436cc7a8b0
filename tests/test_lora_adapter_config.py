"""LoRA adapters' config errors: each refused naming its key (names, ranks and slots, sources, tenants, the
batch model that takes an adapter's batch tier, revisions, memory), and a bad adapter through the CLI:
exit 2."""

from __future__ import annotations

import pytest

from .helpers import config_problems, raw_stack, run_preview, validate, write_stack
from .lora_helpers import BASE, BATCH, SUPPORT, adapters

# --- config errors ----------------------------------------------------------------------------


def test_an_adapter_named_like_another_model_is_refused(prod_raw):
    adapters(prod_raw)[1]["name"] = "llama-3.1-70b-instruct"
    (problem,) = config_problems(prod_raw)
    assert problem.startswith("inference-platform:models[1].adapters[1].name: 'llama-3.1-70b-instruct' is already")
    assert "model 'llama-70b'" in problem


def test_an_adapter_named_like_another_adapter_or_a_batch_alias_is_refused(prod_raw):
    adapters(prod_raw)[1]["name"] = SUPPORT
    assert any(p.startswith("inference-platform:models[1].adapters[1].name:") for p in config_problems(prod_raw))
    # The base's own name, which its batch model answers to as well, and the batch model's name.
    for taken in ("llama-3.1-8b-instruct", "llama-3.1-8b-instruct-batch"):
        raw = raw_stack("prod")
        adapters(raw)[1]["name"] = taken
        (problem,) = config_problems(raw)
        assert problem.startswith(f"inference-platform:models[1].adapters[1].name: {taken!r} is already"), problem


def test_a_rank_above_the_configured_maximum_is_refused(prod_raw):
    prod_raw["models"][BASE]["lora"]["maxLoraRank"] = 16
    (problem,) = config_problems(prod_raw)
    assert problem.startswith("inference-platform:models[1].adapters[1].rank: rank 32 is above")


def test_a_max_lora_rank_vllm_does_not_take_is_refused(prod_raw):
    prod_raw["models"][BASE]["lora"]["maxLoraRank"] = 24
    (problem,) = config_problems(prod_raw)
    assert problem.startswith("inference-platform:models[1].lora.maxLoraRank:") and "320" in problem


def test_too_few_gpu_slots_for_a_latency_sensitive_profile_are_refused(prod_raw):
    prod_raw["models"][BASE]["lora"]["maxLoras"] = 2
    (problem,) = config_problems(prod_raw)
    assert problem.startswith("inference-platform:models[1].lora.maxLoras: 2 GPU slots for 3 adapter modules")


def test_fewer_gpu_slots_are_allowed_where_the_profile_is_not_latency_sensitive(prod_raw):
    prod_raw["models"][BASE]["profile"] = "summarization"
    prod_raw["models"][BASE]["lora"]["maxLoras"] = 2
    prod_raw["models"][BASE].pop("batchModel")
    prod_raw["models"][BASE]["tiers"] = ["premium", "standard"]
    validate(prod_raw)
    # So on the batch model's servers (summarization: a throughput profile), which load the base's three modules.
    raw = raw_stack("prod")
    raw["models"][BATCH]["lora"] = {"maxLoras": 2}
    plan = validate(raw)
    server = next(s for m in plan.models for s in m.servers if s.name == "llama-8b-batch-v1")
    assert server.lora is not None and (server.lora.max_loras, len(server.lora.modules)) == (2, 3)


def test_fewer_cpu_slots_than_gpu_slots_are_refused(prod_raw):
    prod_raw["models"][BASE]["lora"].update(maxLoras=3, maxCpuLoras=2)
    (problem,) = config_problems(prod_raw)
    assert problem.startswith("inference-platform:models[1].lora.maxCpuLoras: 2 is below maxLoras 3")


@pytest.mark.parametrize(
    "source",
    [
        {"huggingface": "org/sql-lora", "revision": "main"},
        {"huggingface": "org/sql-lora"},
        {"s3Uri": "s3://inference-prod-adapters/llama-3.1-8b/sql"},
    ],
)
def test_an_unpinned_source_is_refused(prod_raw, source):
    adapters(prod_raw)[1]["source"] = source
    problems = config_problems(prod_raw)
    assert len(problems) == 1 and problems[0].startswith("inference-platform:models[1].adapters[1].source:")


def test_adapters_on_an_embeddings_model_are_refused(prod_raw):
    prod_raw["models"][BASE]["profile"] = "embeddings"
    problems = config_problems(prod_raw)
    assert any(p.startswith("inference-platform:models[1].adapters: profile 'embeddings' runs vLLM's pooling") for p in problems)


def test_an_adapter_of_another_tenant_is_refused(prod_raw):
    adapters(prod_raw)[1]["tenant"] = "team-a"
    (problem,) = config_problems(prod_raw)
    assert problem.startswith("inference-platform:models[1].adapters[1].tenant: 'team-a' does not run model 'llama-8b'")


def test_a_batch_model_serving_other_weights_refuses_the_adapters_batch_tier(prod_raw):
    prod_raw["models"][BATCH]["versions"][0]["source"]["revision"] = "f" * 40
    (problem,) = config_problems(prod_raw)
    assert problem.startswith("inference-platform:models[1].batchModel: its adapters (llama-3.1-8b-support, llama-3.1-8b-sql)")
    assert "version 'v1' serves other weights than every version of model 'llama-8b'" in problem
    # A canary of other weights on the batch model is refused too: both versions would load the adapters.
    raw = raw_stack("prod")
    raw["models"][BATCH]["versions"].append({"name": "v2", "source": {"huggingface": "org/other-8b", "revision": "e" * 40}})
    raw["models"][BATCH]["release"] = {"stable": "v1", "canary": "v2", "canaryWeight": 10}
    assert any("version 'v2' serves other weights" in p for p in config_problems(raw))
    # Without adapters the batch model may serve anything.
    raw["models"][BASE].pop("adapters")
    raw["models"][BASE].pop("lora")
    assert not any("batchModel" in p for p in config_problems(raw))


def test_a_batch_model_of_another_tenant_refuses_the_adapters_batch_tier(prod_raw):
    prod_raw["models"][BATCH]["tenant"] = "team-a"
    problems = [p for p in config_problems(prod_raw) if p.startswith("inference-platform:models[1].batchModel:")]
    assert len(problems) == 2, problems  # one per adapter
    assert all("runs in tenant 'team-a', not the tenant 'serving' of adapter" in p for p in problems)


def test_a_batch_model_whose_lora_limits_cannot_hold_the_adapters_is_refused(prod_raw):
    prod_raw["models"][BATCH]["lora"] = {"maxLoraRank": 16}
    (problem,) = config_problems(prod_raw)
    assert problem.startswith("inference-platform:models[3].lora.maxLoraRank: 16 is below the rank 32 of adapter")


def test_a_revision_named_like_a_base_version_is_refused(prod_raw):
    adapters(prod_raw)[0]["versions"][1]["name"] = "v2"
    adapters(prod_raw)[0]["release"]["canary"] = "v2"
    (problem,) = config_problems(prod_raw)
    assert problem.startswith("inference-platform:models[1].adapters[0].versions[1].name: 'v2' is also a version")


def test_a_release_naming_a_missing_revision_is_refused(prod_raw):
    adapters(prod_raw)[0]["release"]["canary"] = "r3"
    (problem,) = config_problems(prod_raw)
    assert problem.startswith("inference-platform:models[1].adapters[0]") and "'r3' is not one of its versions" in problem


def test_adapter_memory_that_cannot_fit_the_replica_is_refused(prod_raw):
    prod_raw["models"][BASE]["lora"].update(maxLoraRank=512, maxLoras=64)  # 64 x 512 x E x 2 bytes: 160Gi
    problems = config_problems(prod_raw)
    assert any(p.startswith("inference-platform:models[1].lora: the adapters' GPU slots need about") for p in problems)


def test_a_bad_adapter_exits_2_naming_the_key(tmp_path):
    raw = raw_stack("prod")
    adapters(raw)[1]["rank"] = 1000
    result = run_preview("--stack", "prod", "--config-file", str(write_stack(tmp_path, raw)), "--out", str(tmp_path / "out"))
    assert result.returncode == 2, result.stderr
    assert "inference-platform:models[1].adapters[1].rank" in result.stderr and "Traceback" not in result.stderr
