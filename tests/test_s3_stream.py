"""Streaming weights from S3 (`nodePools[].weightCache.medium: s3Stream`): vLLM 0.18.0's Run:ai streamer
loader reads a version's S3 folder straight into GPU memory, so its pod has no weights init container
and no weights volume; only S3 sources (or MLflow versions whose weights are in S3) may stream; the
cold start, the startup probe, the progress deadline and the node disk follow from the stream."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest

from platform_config import parse_platform_config
from platform_config.checks import run_checks
from platform_config.cold_start import (
    STREAM_CONCURRENCY,
    cold_start,
    download_gbps,
    max_node_provision_seconds,
    model_volume_size,
    node_disk,
    node_disk_gib,
    startup_budget_seconds,
    stream_gbps,
    streams_weights,
)
from platform_config.models import NodePoolConfig, WeightCache
from preview.performance import preview_policy_config
from preview.sections import cold_start_section
from preview.upstream import VERIFIED, Facts, check_vllm_container, facts_dir

from .helpers import (
    IMAGES_BY_TAG,
    ROOT,
    Evaluated,
    config_problems,
    downloading_weights,
    owning,
    pinned_vllm_flags,
    raw_stack,
    resolved_from_lock,
    run_preview,
    write_stack,
)

PROD_TOKENS = json.dumps({"serving": "hf_serving_token", "team-a": "hf_team_a_token"})
WEIGHTS_BUCKET = "s3://inference-prod-weights"
FOLDER = "2026-11-30"


def streaming_h100(raw: dict[str, Any]) -> dict[str, Any]:
    """The prod stack without its weight mirror, its h100 pool streaming and every model on it given S3 weights of
    its own (prod's are Hugging Face revisions the mirror copies), and so its batch jobs, which production then needs
    (it reads no Hugging Face source without a mirror); l4-batch caches onto its instance store."""
    raw.pop("weightMirror", None)
    for pool in raw["nodePools"]:
        pool["weightCache"] = {"medium": "s3Stream" if pool["name"] == "h100" else "instanceStore"}
    for job in raw["batchJobs"]:
        job["model"]["source"] = {"s3Uri": f"{WEIGHTS_BUCKET}/{job['name']}", "revision": FOLDER}
        owning(raw, job["tenant"], job["model"]["source"]["s3Uri"])
    by_name = {model["name"]: model for model in raw["models"]}
    for model in raw["models"]:
        if model["pool"] == "h100":
            source = {"s3Uri": f"{WEIGHTS_BUCKET}/{model['name']}", "revision": FOLDER}
            owning(raw, model["tenant"], source["s3Uri"])
            for version in model["versions"]:
                version["source"] = dict(source)
            # Its batch model loads its adapters, so it serves the same base weights (on its own pool, downloaded).
            if model.get("adapters") and model.get("batchModel"):
                for version in by_name[model["batchModel"]]["versions"]:
                    version["source"] = dict(source)
    return raw


def pool_named(config, name: str):
    return next(p for p in config.node_pools if p.name == name)


def model_named(config, name: str):
    return next(m for m in config.models if m.name == name)


@pytest.fixture(scope="module")
def streamed() -> Evaluated:
    return Evaluated(streaming_h100(raw_stack("prod")), secrets={"inference-platform:huggingFaceTokens": PROD_TOKENS})


# --- the path and its figures ---------------------------------------------------------------


def test_streaming_is_the_default_only_with_a_weight_mirror(prod_raw):
    for pool in prod_raw["nodePools"]:
        pool.pop("weightCache", None)
    # prod's Hugging Face revisions are copied to its mirror: both pools stream by default.
    assert all(streams_weights(p) for p in parse_platform_config(prod_raw).node_pools)
    # Without a mirror (outside production, which needs it for Hugging Face sources), p5 and g6 cache on their
    # instance store: streaming refuses Hugging Face sources.
    del prod_raw["weightMirror"]
    prod_raw["environment"] = "staging"
    config = parse_platform_config(prod_raw)
    assert not any(streams_weights(p) for p in config.node_pools)
    config = parse_platform_config(streaming_h100(prod_raw))
    assert streams_weights(pool_named(config, "h100")) and not streams_weights(pool_named(config, "l4-batch"))


def test_a_streaming_pool_keeps_its_instance_store_for_images_and_scratch(prod_raw):
    config = parse_platform_config(streaming_h100(prod_raw))
    h100 = pool_named(config, "h100")
    assert node_disk(h100) == "instanceStore" and node_disk_gib(h100) == 8 * 3840 * 10**9 // 2**30
    # Its nodes still assemble the RAID0 before joining: the autoscaler's wait is unchanged.
    assert max_node_provision_seconds(config) == 2 * (300 + 60)


def test_the_stream_rate_is_the_streamers_connections_within_the_instances_bandwidth(prod_raw):
    config = parse_platform_config(streaming_h100(prod_raw))
    # 32 connections at 85 MB/s: 21.76 Gbit/s, far below p5's 3200 and within g6.12xlarge's 40 Gbit/s.
    assert stream_gbps(pool_named(config, "h100")) == STREAM_CONCURRENCY * 85 * 8 / 1000 == 21.76
    assert STREAM_CONCURRENCY == 32
    # A g6.xlarge has 10 Gbit/s in all: its network is the limit.
    small = NodePoolConfig(name="small", instance_type="g6.xlarge", max_size=1, weight_cache=WeightCache(medium="s3Stream"))
    assert stream_gbps(small) == 10
    # A measured figure replaces it; the internet download rate (images) is another figure.
    prod_raw["nodePools"][0]["weightCache"]["streamGbps"] = 50
    h100 = pool_named(parse_platform_config(prod_raw), "h100")
    assert stream_gbps(h100) == 50 and download_gbps(h100) == 10


def test_the_70b_streamed_on_p5_starts_in_three_and_a_half_minutes(prod_raw):
    config = parse_platform_config(streaming_h100(prod_raw))
    start = cold_start(config, model_named(config, "llama-70b"))
    # 132Gi at 21.76 Gbit/s (2.72 GB/s), with no download before the load; the image as on the instance store.
    assert start.weights_seconds == math.ceil(132 * 2**30 / 2.72e9) == 53
    assert start.image_seconds == 72 and start.engine_seconds == 90
    assert start.total_seconds == 72 + 53 + 90 == 215
    assert start.arithmetic() == (
        "image 10.7 GB / 0.15 GB/s = 72 s; weights 141.7 GB / 2.72 GB/s streamed from S3 = 53 s; engine start 90 s; "
        "total 215 s (3 min 35 s)"
    )
    # The startup probe allows three streams and engine starts: 3 x (53 + 90) = 429, so 430 s.
    assert startup_budget_seconds(start) == 430


def test_the_readme_shows_the_streamed_70b_arithmetic_the_code_derives(prod_raw):
    config = parse_platform_config(streaming_h100(prod_raw))
    start = cold_start(config, model_named(config, "llama-70b"))
    assert start.arithmetic() in (ROOT / "docs" / "design" / "cold-start.md").read_text()


# --- config errors --------------------------------------------------------------------------


def test_a_hugging_face_version_on_a_streaming_pool_without_a_mirror_is_refused(prod_raw):
    downloading_weights(prod_raw)["nodePools"][0]["weightCache"] = {"medium": "s3Stream"}
    problems = [p for p in config_problems(prod_raw) if "streams weights from S3" in p]
    # Every Hugging Face version on h100: the 70B's, the 8B's two, the 1B's.
    keys = sorted(p.split(": ", 1)[0] for p in problems)
    assert keys == [
        "inference-platform:models[0].versions[0].source",
        "inference-platform:models[1].versions[0].source",
        "inference-platform:models[1].versions[1].source",
        "inference-platform:models[2].versions[0].source",
    ]
    assert "nodePools[0].weightCache.medium=s3Stream" in problems[0]
    assert "allowed are 's3Uri'" in problems[0] and "'mlflow' naming weights in S3" in problems[0]
    assert "or set 'weightMirror' to copy Hugging Face revisions to S3" in problems[0]


def test_a_stream_rate_on_a_pool_that_does_not_stream_is_refused(prod_raw):
    downloading_weights(prod_raw)["nodePools"][1]["weightCache"]["streamGbps"] = 20
    (problem,) = config_problems(prod_raw)
    assert problem.startswith("inference-platform:nodePools[1].weightCache: ")
    assert "'streamGbps' is read only with 'medium: s3Stream'" in problem


def test_the_preview_refuses_a_hugging_face_version_on_a_streaming_pool_with_exit_2(tmp_path, prod_raw):
    downloading_weights(prod_raw)["nodePools"][1]["weightCache"] = {"medium": "s3Stream"}
    out = tmp_path / "out"
    result = run_preview("--stack", "test", "--config-file", str(write_stack(tmp_path, prod_raw)), "--out", str(out))
    assert result.returncode == 2, result.stderr
    assert "inference-platform:models[3].versions[0].source: is Hugging Face" in result.stderr
    assert "Traceback" not in result.stderr


def test_an_mlflow_version_streams_where_the_registry_names_s3_weights(prod_raw, tmp_path):
    from components.plan import plan_checks, resolve
    from components.specs.pod import pod_spec

    uri = "https://mlflow.example.com"
    raw = streaming_h100(prod_raw)
    raw["models"][0]["versions"][0]["source"] = {"mlflow": {"model": "llama-70b", "alias": "champion"}}

    def resolved(weights: str):
        entry = {"registeredModel": "llama-70b", "alias": "champion", "registryVersion": "4", "weights": weights}
        config, _ = resolved_from_lock(raw, uri, [entry], tmp_path, [plan_checks])
        return config

    config = resolved(f"{WEIGHTS_BUCKET}/llama-70b/{FOLDER}")
    assert run_checks(config) == []
    server = next(s for m in resolve(config, hugging_face_tenants=()).models for s in m.servers if s.name == "llama-70b-v1")
    spec = pod_spec(server)
    assert spec["containers"][0]["args"][0] == f"{WEIGHTS_BUCKET}/llama-70b/{FOLDER}/" and "initContainers" not in spec
    # The same reference naming Hugging Face weights is refused once resolved (the loader checks again): a streaming
    # pool streams S3 only, and a production stack reads Hugging Face only from a weight mirror.
    config = resolved("hf://meta-llama/Llama-3.1-70B-Instruct@1605565b47bb9346c5515c34102e054115b4f98b")
    issues = [str(issue) for issue in run_checks(config)]
    assert len(issues) == 2 and all(
        issue.startswith("inference-platform:models[0].versions[0].source: is Hugging Face") for issue in issues
    )
    assert any("streams weights from S3" in issue for issue in issues)
    assert any("set 'weightMirror'" in issue for issue in issues)


# --- the objects ----------------------------------------------------------------------------


def test_a_streamed_model_gets_its_s3_folder_and_the_streamer_loader(streamed):
    template = streamed.k8s("Deployment", "llama-70b-v1", "serving")["spec"]["template"]
    spec = template["spec"]
    (vllm,) = spec["containers"]
    args = vllm["args"]
    assert args[0] == f"{WEIGHTS_BUCKET}/llama-70b/{FOLDER}/"
    assert args[args.index("--load-format") + 1] == "runai_streamer"
    loader = json.loads(args[args.index("--model-loader-extra-config") + 1])
    # Tensor parallel 4: each rank streams a quarter and shares it; the buffers take a quarter of the 320Gi.
    assert loader == {"concurrency": 32, "distributed": True, "memory_limit": 320 * 2**30 // 16}
    assert "--revision" not in args
    # No weights init container, no weights volume: HOME (config, tokenizer, compile caches), /tmp and /dev/shm only.
    assert "initContainers" not in spec
    assert [v["name"] for v in spec["volumes"]] == ["home", "tmp", "dshm"]
    assert {m["mountPath"] for m in vllm["volumeMounts"]} == {"/home/vllm", "/tmp", "/dev/shm"}
    assert vllm["resources"]["requests"]["ephemeral-storage"] == "30Gi"
    env = {e["name"]: e.get("value") for e in vllm["env"]}
    assert env["AWS_EC2_METADATA_DISABLED"] == "true" and env["HF_HOME"].startswith("/home/vllm/")
    assert template["metadata"]["annotations"]["cluster-autoscaler.kubernetes.io/safe-to-evict-local-volumes"] == "home,tmp"
    # Its startup probe and progress deadline follow the stream: 430 s, and 720 + 72 + 430.
    assert vllm["startupProbe"]["periodSeconds"] * vllm["startupProbe"]["failureThreshold"] == 430
    assert streamed.k8s("Deployment", "llama-70b-v1", "serving")["spec"]["progressDeadlineSeconds"] == 720 + 72 + 430


def test_the_streaming_pods_workload_role_reads_the_pinned_folder(streamed):
    spec = streamed.k8s("Deployment", "llama-70b-v1", "serving")["spec"]["template"]["spec"]
    assert spec["serviceAccountName"] == "llama-70b-weights"
    policy = json.loads(streamed.one("aws:iam/rolePolicy:RolePolicy", "llama-70b-weights-identity-policy")["inputs"]["policy"])
    reads = [s["Resource"] for s in policy["Statement"] if s["Action"] == ["s3:GetObject"]]
    lists = [s for s in policy["Statement"] if s["Action"] == ["s3:ListBucket"]]
    folder = spec["containers"][0]["args"][0]
    bucket, _, key = folder.removeprefix("s3://").partition("/")
    assert any(f"arn:aws:s3:::{bucket}/{key}".startswith(r.removesuffix("*")) for r in reads), reads
    assert any(key.startswith(p.removesuffix("*")) for s in lists for p in s["Condition"]["StringLike"]["s3:prefix"])


def test_adapters_still_download_beside_streamed_weights(streamed):
    spec = streamed.k8s("Service", "llama-8b-v1", "serving")["spec"]["template"]["spec"]
    inits = spec["initContainers"]
    assert inits and all(c["name"].startswith("fetch-adapter") for c in inits)
    assert [v["name"] for v in spec["volumes"]][0] == "model-cache"
    args = spec["containers"][0]["args"]
    assert args[0] == f"{WEIGHTS_BUCKET}/llama-8b/{FOLDER}/" and "runai_streamer" in args
    modules = args[args.index("--lora-modules") + 1 : args.index("--max-loras")]
    assert modules and all("=/models/adapters/" in m for m in modules)
    # One GPU slice: one reader, no distributed streaming.
    assert "distributed" not in json.loads(args[args.index("--model-loader-extra-config") + 1])


def test_a_batch_model_streaming_its_weights_keeps_a_volume_for_the_adapters_it_carries(prod_raw):
    """llama-8b-batch takes llama-8b's batch tier and so loads its adapters: on a streaming pool it still needs the
    model volume their init containers download into, though its own weights stream."""
    raw = streaming_h100(prod_raw)
    next(p for p in raw["nodePools"] if p["name"] == "l4-batch")["weightCache"] = {"medium": "s3Stream"}
    evaluated = Evaluated(raw, secrets={"inference-platform:huggingFaceTokens": PROD_TOKENS})
    spec = evaluated.k8s("Service", "llama-8b-batch-v1", "serving")["spec"]["template"]["spec"]
    args = spec["containers"][0]["args"]
    assert "runai_streamer" in args and "--lora-modules" in args
    assert [v["name"] for v in spec["volumes"]][0] == "model-cache"
    assert spec["initContainers"] and all(c["name"].startswith("fetch-adapter") for c in spec["initContainers"])


# Llama-3.1-8B's shape (prod's llama-8b `lora.baseShape`): LoRA elements per unit of rank over every projection of
# every layer, 32 x (9h + 2kv + 3i), and its three modules' ranks (support r1 and r2 at 16, sql at 32).
LLAMA_8B_LORA_ELEMENTS_PER_RANK = 32 * (9 * 4096 + 2 * 1024 + 3 * 14336)
LLAMA_8B_MODULE_RANKS = (16, 16, 32)


def test_a_streamed_server_sizes_its_model_volume_from_the_adapters_it_loads(streamed):
    """llama-8b streams its weights: its model volume holds only its three LoRA modules, so it is sized from them
    (bf16 weights over every projection, twice that for float32 saves, 1 GiB for the other files), not cacheSize's
    100Gi, and the pod asks the scheduler for that plus scratch."""
    modules = sum(LLAMA_8B_MODULE_RANKS) * LLAMA_8B_LORA_ELEMENTS_PER_RANK * 2  # 320 MiB
    expected_gib = math.ceil((2 * modules + 2**30) / 2**30)
    assert expected_gib == 2
    spec = streamed.k8s("Service", "llama-8b-v1", "serving")["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert volumes["model-cache"]["emptyDir"]["sizeLimit"] == f"{expected_gib}Gi"
    (vllm,) = spec["containers"]
    assert vllm["resources"]["requests"]["ephemeral-storage"] == f"{expected_gib + 30}Gi"
    # Its canary (v2) is sized alike.
    canary = streamed.k8s("Service", "llama-8b-v2", "serving")["spec"]["template"]["spec"]
    assert canary["containers"][0]["resources"]["requests"]["ephemeral-storage"] == f"{expected_gib + 30}Gi"


def test_a_server_that_caches_its_weights_keeps_its_cache_size(streamed, prod_raw):
    """llama-8b-batch loads the same adapters on l4-batch, which caches weights: its volume holds them, at cacheSize."""
    cache_size = next(m for m in prod_raw["models"] if m["name"] == "llama-8b-batch")["resources"]["cacheSize"]
    spec = streamed.k8s("Service", "llama-8b-batch-v1", "serving")["spec"]["template"]["spec"]
    assert {v["name"]: v for v in spec["volumes"]}["model-cache"]["emptyDir"]["sizeLimit"] == cache_size == "40Gi"
    assert spec["containers"][0]["resources"]["requests"]["ephemeral-storage"] == "70Gi"


def test_the_disk_check_holds_a_streamed_model_with_adapters_to_their_files_not_its_cache_size(prod_raw):
    # 30000Gi: more than h100's 28,610 GiB RAID0 of instance store.
    raw = streaming_h100(prod_raw)
    llama_8b = next(m for m in raw["models"] if m["name"] == "llama-8b")
    llama_8b["resources"]["cacheSize"] = "30000Gi"
    config = parse_platform_config(raw)  # every check passes
    assert model_volume_size(config, model_named(config, "llama-8b")) == "2Gi"
    # Where the pool caches the weights, the same cacheSize is refused.
    cached = json.loads(json.dumps(raw))
    next(p for p in cached["nodePools"] if p["name"] == "h100")["weightCache"] = {"medium": "instanceStore"}
    (problem,) = [p for p in config_problems(cached) if "does not fit" in p]
    assert problem.startswith("inference-platform:models[1].resources.cacheSize: 30000Gi of weights cache")
    # Streamed, but without the base's shape the adapters cannot be estimated: cacheSize sizes their volume, and the
    # error says how to size it from them.
    del llama_8b["lora"]["baseShape"]
    (problem,) = [p for p in config_problems(raw) if "does not fit" in p]
    assert problem.startswith("inference-platform:models[1].resources.cacheSize: 30000Gi of model volume")
    assert "set lora.baseShape" in problem


@pytest.mark.upstream_source
def test_the_streamer_flags_are_flags_of_the_pinned_vllm(streamed):
    facts = Facts(facts_dir())
    known = pinned_vllm_flags()
    assert {"--load-format", "--model-loader-extra-config"} <= known
    vllm = streamed.k8s("Deployment", "llama-70b-v1", "serving")["spec"]["template"]["spec"]["containers"][0]
    assert check_vllm_container(facts, "llama-70b-v1", vllm).status == VERIFIED


def test_the_report_shows_the_stream(streamed):
    section = cold_start_section(streamed.outputs)
    (row,) = [r for r in section.data if r["model"] == "llama-70b"]
    assert (row["medium"], row["downloadGbps"], row["totalSeconds"]) == ("s3Stream", 21.76, 215)
    # The figure is the stream's rate, labelled so, not a download's.
    assert "| llama-70b | h100 (s3Stream, S3 stream 21.76 Gbit/s) | 72 s | 53 s |" in section.markdown
    (cached,) = [r for r in section.data if r["model"] == "llama-8b-batch"]
    assert cached["medium"] == "instanceStore" and cached["downloadGbps"] == download_gbps(
        pool_named(parse_platform_config(streaming_h100(raw_stack("prod"))), "l4-batch")
    )
    assert f"| llama-8b-batch | l4-batch (instanceStore, download {cached['downloadGbps']:g} Gbit/s) |" in section.markdown


def test_streamed_pods_are_admitted_scheduled_and_compliant(streamed):
    from preview.admission import admit_and_schedule
    from preview.policy_runner import PolicyPack
    from preview.stack_config import load_project, load_stack_config

    result = admit_and_schedule(streamed.manifests(), streamed.outputs["nodePools"])
    assert result.findings == [] and all(w.findings == [] for w in result.workloads)
    config = load_stack_config(load_project(ROOT), "prod")
    pack = PolicyPack(ROOT / "policies", config.values, "inference-platform", "prod").connect()
    try:
        pack.handshake(ROOT)
        pack.configure_stack("inference-platform", "prod", config.values, config.secret_keys)
        pack.configure(pack.info(), preview_policy_config(IMAGES_BY_TAG))
        records = [r for r in streamed.records if r.custom and not r.type.startswith("pulumi:providers:")]
        assert [d.policy for r in records for d in pack.analyze(r, None)] == []
        assert list(pack.analyze_stack(records)) == []
    finally:
        pack.close()
