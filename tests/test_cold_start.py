"""Cold start: the per-pool weight cache, the expected load time derived from it, what follows from
it (startup probe, progress deadlines, the cluster autoscaler's provisioning time), the pre-pulled
images, the scale-down annotation, the config check and the report."""

from __future__ import annotations

import base64
import json
import math
from pathlib import Path
from typing import Any

import pytest

from platform_config import parse_platform_config
from platform_config.cold_start import (
    GP3_BASELINE_BYTES_PER_S,
    cache_medium,
    cold_start,
    download_gbps,
    fill_rate,
    max_node_provision_seconds,
    node_disk_gib,
    startup_budget_seconds,
)
from platform_config.models import NodePoolConfig
from platform_config.pins import CLUSTER_AUTOSCALER
from preview.admission import admit_and_schedule
from preview.sections import cold_start_section

from .helpers import ROOT, Evaluated, config_problems, downloading_weights, mirror_show, raw_stack, run_preview, write_stack

PROD_TOKENS = json.dumps({"serving": "hf_serving_token", "team-a": "hf_team_a_token"})
SAFE_TO_EVICT_LOCAL_VOLUMES = "cluster-autoscaler.kubernetes.io/safe-to-evict-local-volumes"


@pytest.fixture(scope="module")
def prod() -> Evaluated:
    return Evaluated(raw_stack("prod"), secrets={"inference-platform:huggingFaceTokens": PROD_TOKENS}, shared=True)


def pool_named(config, name: str):
    return next(p for p in config.node_pools if p.name == name)


def model_named(config, name: str):
    return next(m for m in config.models if m.name == name)


# --- the path and its figures ---------------------------------------------------------------


def test_the_default_cache_is_the_instance_store_where_the_instance_has_one(prod_raw):
    for pool in prod_raw["nodePools"]:
        pool.pop("weightCache", None)
    # With a weight mirror, every pool streams its copies from S3 by default.
    config = parse_platform_config(prod_raw)
    assert [cache_medium(p) for p in config.node_pools] == ["s3Stream", "s3Stream"]
    # Without one (outside production, which needs it for Hugging Face weights), the node's own disk.
    del prod_raw["weightMirror"]
    prod_raw["environment"] = "staging"
    config = parse_platform_config(prod_raw)
    assert [cache_medium(p) for p in config.node_pools] == ["instanceStore", "instanceStore"]
    # nodeadm stripes the instance store; Bottlerocket's own settings are not written, so its pools use the root volume.
    prod_raw["nodePools"][1]["amiType"] = "BOTTLEROCKET_x86_64_NVIDIA"
    assert cache_medium(pool_named(parse_platform_config(prod_raw), "l4-batch")) == "rootVolume"
    # The stated medium wins.
    prod_raw["nodePools"][0]["weightCache"] = {"medium": "rootVolume"}
    assert cache_medium(pool_named(parse_platform_config(prod_raw), "h100")) == "rootVolume"


def test_an_existing_clusters_nodes_keep_their_root_volume(dev_raw):
    # dev runs on an existing cluster (kubeconfig) of g6.4xlarge nodes, which have an instance store the platform
    # does not stripe: the pool's own disk, as before.
    assert dev_raw["cluster"]["mode"] == "kubeconfig" and "weightCache" not in dev_raw["nodePools"][0]
    assert cache_medium(parse_platform_config(dev_raw).node_pools[0]) == "rootVolume"
    dev_raw["nodePools"][0]["weightCache"] = {"medium": "instanceStore"}
    assert cache_medium(parse_platform_config(dev_raw).node_pools[0]) == "instanceStore"


def test_the_download_rate_follows_the_internet_gateway_ceiling(prod_raw):
    config = parse_platform_config(prod_raw)
    # p5 (192 vCPUs, 3200 Gbit/s): half of it through the gateway, capped at the assumed 10 Gbit/s.
    assert download_gbps(pool_named(config, "h100")) == 10.0
    # A g6.xlarge has 4 vCPUs: 5 Gbit/s through the gateway, below the cap.
    assert download_gbps(NodePoolConfig(name="small", instance_type="g6.xlarge", max_size=1)) == 5.0
    # A measured figure replaces both.
    prod_raw["nodePools"][0]["weightCache"]["downloadGbps"] = 25
    assert download_gbps(pool_named(parse_platform_config(prod_raw), "h100")) == 25


def test_a_root_volume_fills_at_gp3_baseline_throughput(prod_raw):
    prod_raw["nodePools"][0]["weightCache"] = {"medium": "rootVolume"}
    pool = pool_named(parse_platform_config(prod_raw), "h100")
    assert fill_rate(pool) == GP3_BASELINE_BYTES_PER_S < download_gbps(pool) * 1e9 / 8
    # Its disk is the root volume; the instance store's is its RAID0 (8 x 3840 GB in GiB).
    assert node_disk_gib(pool) == 1000
    assert node_disk_gib(pool_named(parse_platform_config(raw_stack("prod")), "h100")) == 8 * 3840 * 10**9 // 2**30


def test_the_70b_on_p5_starts_in_under_five_minutes_with_the_default_cache(prod_raw):
    for pool in prod_raw["nodePools"]:
        pool.pop("weightCache", None)  # the default cache, not the one the stack states
    config = parse_platform_config(prod_raw)
    start = cold_start(config, model_named(config, "llama-70b"))
    # With prod's weight mirror: 132Gi streamed from S3 at 21.76 Gbit/s; the 10Gi image unpacked at 150 MB/s; the
    # engine's 90 s.
    assert start.medium == "s3Stream" and start.weights_seconds == math.ceil(132 * 2**30 / 2.72e9) == 53
    assert start.total_seconds == 72 + 53 + 90 == 215 < 5 * 60
    # Without the mirror (outside production, which needs it for Hugging Face weights), the instance store: 132Gi
    # downloaded at 10 Gbit/s.
    del prod_raw["weightMirror"]
    prod_raw["environment"] = "staging"
    config = parse_platform_config(prod_raw)
    start = cold_start(config, model_named(config, "llama-70b"))
    assert start.medium == "instanceStore" and start.weights_seconds == math.ceil(132 * 2**30 / 1.25e9) == 114
    assert start.image_seconds == math.ceil(10 * 2**30 / 150e6) == 72
    assert start.total_seconds == 72 + 114 + 90 < 5 * 60
    assert start.arithmetic() == (
        "image 10.7 GB / 0.15 GB/s = 72 s; weights 141.7 GB / 1.25 GB/s = 114 s; engine start 90 s; total 276 s (4 min 36 s)"
    )


def test_on_the_root_volume_the_same_model_takes_a_quarter_of_an_hour(prod_raw):
    prod_raw["nodePools"][0]["weightCache"] = {"medium": "rootVolume"}
    config = parse_platform_config(prod_raw)
    start = cold_start(config, model_named(config, "llama-70b"))
    assert start.weights_seconds == math.ceil(132 * 2**30 / (125 * 2**20)) == 1082
    assert start.total_seconds > 15 * 60


def test_without_a_weights_size_the_cache_size_bounds_the_estimate(prod_raw):
    del downloading_weights(prod_raw)["models"][0]["resources"]["weightsSize"]
    config = parse_platform_config(prod_raw)
    assert cold_start(config, model_named(config, "llama-70b")).weights_seconds == math.ceil(200 * 2**30 / 1.25e9)


def test_the_startup_budget_is_three_loads_and_at_least_five_minutes(prod_raw):
    config = parse_platform_config(prod_raw)
    big = cold_start(config, model_named(config, "llama-70b"))
    assert startup_budget_seconds(big) == math.ceil(3 * (big.weights_seconds + big.engine_seconds) / 10) * 10
    small = cold_start(config, model_named(config, "llama-1b"))
    assert 3 * (small.weights_seconds + small.engine_seconds) < 300 == startup_budget_seconds(small)


def test_the_autoscaler_waits_twice_the_slowest_join(prod_raw, prod):
    config = parse_platform_config(prod_raw)
    # An instance-store pool assembles its RAID0 before the kubelet starts: a minute on the join.
    assert max_node_provision_seconds(config) == 2 * (300 + 60)
    for pool in prod_raw["nodePools"]:
        pool["weightCache"] = {"medium": "rootVolume"}
    assert max_node_provision_seconds(parse_platform_config(prod_raw)) == 2 * 300
    (release,) = [r for r in prod.of_type("kubernetes:helm.sh/v3:Release") if r["inputs"]["name"] == "cluster-autoscaler"]
    assert release["inputs"]["values"]["extraArgs"]["max-node-provision-time"] == f"{2 * (300 + 60)}s"


def test_the_deployment_progress_deadline_covers_a_node_the_image_and_the_startup_budget(prod):
    deployment = prod.k8s("Deployment", "llama-70b-v1", "serving")
    startup = deployment["spec"]["template"]["spec"]["containers"][0]["startupProbe"]
    (row,) = [r for r in prod.outputs["coldStarts"] if r["model"] == "llama-70b"]
    assert startup["periodSeconds"] * startup["failureThreshold"] == row["startupProbeSeconds"]
    assert deployment["spec"]["progressDeadlineSeconds"] == 720 + row["imageSeconds"] + row["startupProbeSeconds"]
    assert row["progressDeadlineSeconds"] == deployment["spec"]["progressDeadlineSeconds"]


# --- config errors --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "path, value, key, allowed",
    [
        (("nodePools", 0, "weightCache", "medium"), "nvme", "nodePools[0].weightCache.medium", "'instanceStore'"),
        (("nodePools", 0, "weightCache", "downloadGbps"), 0, "nodePools[0].weightCache.downloadGbps", "greater than 0"),
        (("nodePools", 0, "weightCache", "prewarm"), True, "nodePools[0].weightCache.prewarm", ""),
        (("models", 0, "resources", "weightsSize"), "lots", "models[0].resources.weightsSize", ""),
        (("coldStart", "scaleUpBudget"), "10s", "coldStart.scaleUpBudget", "30s..3600s"),
    ],
)
def test_a_bad_weight_cache_or_cold_start_key_is_named(prod_raw, path, value, key, allowed):
    target: Any = prod_raw
    for part in path[:-1]:
        target = target.setdefault(part, {}) if isinstance(part, str) else target[part]
    target[path[-1]] = value
    (message,) = config_problems(prod_raw)
    assert message.startswith(f"inference-platform:{key}: "), message
    assert allowed in message


def test_a_latency_sensitive_model_over_the_budget_without_a_warm_minimum_is_refused(prod_raw):
    # The 8B chat model on the root volume: 16 GB at 125 MiB/s, the image and the engine: about 4.5 minutes.
    prod_raw["nodePools"][0]["weightCache"] = {"medium": "rootVolume"}
    prod_raw["models"][1]["autoscaling"]["minReplicas"] = 0
    prod_raw["coldStart"] = {"scaleUpBudget": "2m"}
    problems = config_problems(prod_raw)
    ours = [p for p in problems if "scale-up budget" in p]
    assert len(ours) == 1, problems
    assert ours[0].startswith("inference-platform:models[1].autoscaling.minReplicas: profile 'chat' is latency-sensitive")
    assert "coldStart.scaleUpBudget=2m" in ours[0] and "weights 16.1 GB / 0.131 GB/s = 123 s" in ours[0]
    # Within a longer budget, only the profile's own rule (never scale a chat model to zero) remains.
    prod_raw["coldStart"] = {"scaleUpBudget": "10m"}
    assert not [p for p in config_problems(prod_raw) if "scale-up budget" in p]


def test_the_preview_refuses_a_bad_weight_cache_with_exit_2(tmp_path, prod_raw):
    prod_raw["nodePools"][1]["weightCache"] = {"medium": "fsx"}
    out = tmp_path / "out"
    result = run_preview("--stack", "test", "--config-file", str(write_stack(tmp_path, prod_raw)), "--out", str(out))
    assert result.returncode == 2, result.stderr
    assert "inference-platform:nodePools[1].weightCache.medium" in result.stderr and "Traceback" not in result.stderr


# --- the objects ----------------------------------------------------------------------------


def test_model_pods_let_the_autoscaler_consolidate_their_nodes(prod):
    deployment = prod.k8s("Deployment", "llama-70b-v1", "serving")
    template = deployment["spec"]["template"]
    disk_volumes = [v["name"] for v in template["spec"]["volumes"] if v.get("emptyDir", {}).get("medium") != "Memory"]
    assert template["metadata"]["annotations"][SAFE_TO_EVICT_LOCAL_VOLUMES] == ",".join(disk_volumes)
    # It streams its weights: no cache volume, only scratch.
    assert disk_volumes == ["home", "tmp"]
    downloading = Evaluated(downloading_weights(raw_stack("prod")), secrets={"inference-platform:huggingFaceTokens": PROD_TOKENS})
    template = downloading.k8s("Deployment", "llama-70b-v1", "serving")["spec"]["template"]
    assert template["metadata"]["annotations"][SAFE_TO_EVICT_LOCAL_VOLUMES] == "model-cache,home,tmp"
    service = prod.k8s("Service", "llama-8b-v1", "serving")
    assert SAFE_TO_EVICT_LOCAL_VOLUMES in service["spec"]["template"]["metadata"]["annotations"]


def test_a_pool_may_keep_its_nodes():
    raw = raw_stack("prod")
    raw["nodePools"][0]["weightCache"]["allowScaleDown"] = False
    kept = Evaluated(raw, secrets={"inference-platform:huggingFaceTokens": PROD_TOKENS})
    h100 = kept.k8s("Deployment", "llama-70b-v1", "serving")["spec"]["template"]["metadata"]["annotations"]
    l4 = kept.k8s("Service", "llama-8b-batch-v1", "serving")["spec"]["template"]["metadata"]["annotations"]
    assert SAFE_TO_EVICT_LOCAL_VOLUMES not in h100 and SAFE_TO_EVICT_LOCAL_VOLUMES in l4


def test_every_gpu_pool_pre_pulls_its_servers_images(prod):
    images = {
        pool: {
            c["image"]
            for o in prod.manifests()
            if o["kind"] in ("Deployment", "Service")
            and o["apiVersion"] in ("apps/v1", "serving.knative.dev/v1")
            and o["spec"]["template"]["spec"].get("nodeSelector", {}).get("inference.platform/pool") == pool
            for c in o["spec"]["template"]["spec"]["containers"]
        }
        for pool in ("h100", "l4-batch")
    }
    for pool, wanted in images.items():
        daemonset = prod.k8s("DaemonSet", f"prepull-{pool}", "image-prepull")
        spec = daemonset["spec"]["template"]["spec"]
        assert wanted and {c["image"] for c in spec["containers"]} == wanted
        assert all(c["command"] == ["sleep", "infinity"] for c in spec["containers"])
        assert spec["nodeSelector"] == {"inference.platform/pool": pool}
        assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in spec["tolerations"]
    namespace = prod.k8s("Namespace", "image-prepull")
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"


def test_the_pre_pull_pods_are_admitted_and_sit_on_every_node(prod):
    result = admit_and_schedule(prod.manifests(), prod.outputs["nodePools"])
    daemons = {w.name: w for w in result.workloads if w.kind == "DaemonSet"}
    assert set(daemons) == {"prepull-h100", "prepull-l4-batch"}
    max_sizes = {p["name"]: p["maxSize"] for p in prod.outputs["nodePools"]}
    for name, workload in daemons.items():
        assert workload.findings == []
        assert workload.placed == workload.peak == max_sizes[name.removeprefix("prepull-")]
    assert result.findings == []


def test_a_daemonset_the_restricted_namespace_refuses_is_reported(prod):
    objects = [o for o in prod.manifests() if o["metadata"].get("namespace") == "image-prepull" or o["kind"] == "Namespace"]
    daemonset = next(o for o in objects if o["kind"] == "DaemonSet")
    daemonset["spec"]["template"]["spec"]["containers"][0]["securityContext"]["runAsNonRoot"] = False
    result = admit_and_schedule(objects, prod.outputs["nodePools"])
    assert any("runAsNonRoot" in f for f in result.findings), result.findings


def test_instance_store_pools_stripe_it_for_the_kubelet(prod):
    templates = {r["name"]: r["inputs"] for r in prod.of_type("aws:ec2/launchTemplate:LaunchTemplate")}
    for pool in ("h100", "l4-batch"):
        user_data = base64.b64decode(templates[f"{pool}-nodes"]["userData"]).decode()
        assert "Content-Type: application/node.eks.aws" in user_data
        assert "localStorage:\n      strategy: RAID0" in user_data
    # The autoscaler's template of an empty group offers the RAID0 as the node's disk.
    tags = {r["inputs"]["tag"]["key"]: r["inputs"]["tag"]["value"] for r in prod.of_type("aws:autoscaling/tag:Tag")}
    disk = tags["k8s.io/cluster-autoscaler/node-template/resources/ephemeral-storage"]
    assert disk in (f"{8 * 3840 * 10**9 // 2**30}Gi", f"{4 * 940 * 10**9 // 2**30}Gi")


# --- the report -----------------------------------------------------------------------------


def test_the_report_shows_each_models_cold_start_and_its_arithmetic(prod):
    section = cold_start_section(prod.outputs)
    assert not section.failed and section.summary == "4 models, 4 within the scale-up budget"
    (row,) = [r for r in section.data if r["model"] == "llama-70b"]
    assert row["totalSeconds"] == row["imageSeconds"] + row["weightsSeconds"] + row["engineSeconds"] < 300
    # A p5 holds one 70B replica beside its MIG slices: a replica past the warm ones waits for a node's join too.
    assert row["onNewNodeSeconds"] == 300 + 60 + row["totalSeconds"]
    assert f"| llama-70b | h100 (s3Stream, S3 stream 21.76 Gbit/s) | {row['imageSeconds']} s | {row['weightsSeconds']} s |" in (
        section.markdown
    )
    assert f"- llama-70b: {row['arithmetic']}" in section.markdown


def test_the_report_fails_a_latency_sensitive_model_over_budget_without_a_warm_minimum(prod):
    rows = [dict(r) for r in prod.outputs["coldStarts"]]
    slow = next(r for r in rows if r["model"] == "llama-70b")
    # As the program would export it for a slower cache and no warm minimum (the config checks stop it first);
    # the 8B's row over the budget too, but with its warm minimum of 2.
    slow.update(totalSeconds=900, minReplicas=0)
    next(r for r in rows if r["model"] == "llama-8b").update(totalSeconds=600)
    section = cold_start_section({"coldStarts": rows})
    assert (
        section.failed
        and section.summary == "4 models, 2 within the scale-up budget, 1 latency-sensitive over it without a warm minimum"
    )
    assert "| over: warm minimum 2 (5 min 00 s) |" in section.markdown


def test_the_readme_shows_the_70b_arithmetic_the_code_derives():
    config = parse_platform_config(raw_stack("prod"))
    start = cold_start(config, model_named(config, "llama-70b"))
    assert start.arithmetic() in (ROOT / "docs" / "design" / "cold-start.md").read_text()


# --- upstream: the cluster autoscaler at every pinned tag -----------------------------------

AUTOSCALER_MIRROR = Path("kubernetes+autoscaler")  # read in ../shared/upstream-sources


@pytest.mark.parametrize("chart", sorted({pin.image_tag or pin.version for pin in CLUSTER_AUTOSCALER.values()}))
def test_the_autoscaler_reads_what_the_platform_writes(chart):
    tag = f"cluster-autoscaler-{chart.removeprefix('v')}"
    drain = mirror_show(AUTOSCALER_MIRROR, tag, "cluster-autoscaler/utils/drain/drain.go")
    # The annotation's name, and a memory-backed emptyDir (/dev/shm) is never a blocking local volume.
    assert f'SafeToEvictLocalVolumesKey = "{SAFE_TO_EVICT_LOCAL_VOLUMES}"' in drain
    assert "volume.EmptyDir != nil && volume.EmptyDir.Medium != apiv1.StorageMediumMemory" in drain
    # The flag exists (in flags/flags.go from 1.33, main.go before) and the AWS provider reads no per-group override.
    flags = mirror_show(AUTOSCALER_MIRROR, tag, "cluster-autoscaler/main.go")
    if '"max-node-provision-time"' not in flags:
        flags = mirror_show(AUTOSCALER_MIRROR, tag, "cluster-autoscaler/config/flags/flags.go")
    assert 'flag.Duration("max-node-provision-time"' in flags
    assert "MaxNodeProvisionTime" not in mirror_show(
        AUTOSCALER_MIRROR, tag, "cluster-autoscaler/cloudprovider/aws/aws_manager.go"
    )
