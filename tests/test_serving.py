"""Model serving: vLLM servers, HPA and Knative autoscaling, drain, hardening, profiles."""

from __future__ import annotations

import json
import math
import re
import typing
from pathlib import Path

import pytest

from platform_config.profiles import PROFILES, ProfileName

from .helpers import ROOT, Evaluated, config_problems, downloading_weights, owning, prod_with_labeller_server, raw_stack

RELEASE = "kubernetes:helm.sh/v3:Release"
# Each tenant's own Hugging Face token (team-b serves an ungated model and has none).
PROD_TOKENS = json.dumps({"serving": "hf_serving_token", "team-a": "hf_team_a_token"})


@pytest.fixture(scope="module")
def prod() -> Evaluated:
    """prod with its batch-labelling server, its pools downloading Hugging Face weights onto their instance store:
    the servers' own download path (prod as shipped streams its weight mirror's copies: tests/test_weight_mirror.py)."""
    return Evaluated(
        downloading_weights(prod_with_labeller_server()),
        secrets={"inference-platform:huggingFaceTokens": PROD_TOKENS},
        shared=True,
    )


@pytest.fixture(scope="module")
def staging() -> Evaluated:
    return Evaluated(raw_stack("staging"), shared=True)


def pod(deployment_or_ksvc: dict) -> dict:
    return deployment_or_ksvc["spec"]["template"]["spec"]


def container(obj: dict) -> dict:
    (vllm,) = [c for c in pod(obj)["containers"] if c["name"] == "vllm"]
    return vllm


def arg(args: list[str], flag: str) -> str:
    return args[args.index(flag) + 1]


def release(evaluated: Evaluated, name: str) -> dict:
    (found,) = [r for r in evaluated.of_type(RELEASE) if r["inputs"]["name"] == name]
    return found["inputs"]


# --- the 70B model on whole H100s, HPA --------------------------------------------------------


def test_70b_vllm_args(prod):
    args = container(prod.k8s("Deployment", "llama-70b-v1", "serving"))["args"]
    assert args[0] == "meta-llama/Llama-3.1-70B-Instruct"
    assert arg(args, "--served-model-name") == "llama-3.1-70b-instruct"
    assert arg(args, "--tensor-parallel-size") == "4"  # = GPUs per replica
    assert arg(args, "--max-model-len") == "16384"
    assert arg(args, "--gpu-memory-utilization") == "0.9"
    assert arg(args, "--revision") == "1605565b47bb9346c5515c34102e054115b4f98b"
    assert "--enable-prefix-caching" in args  # chat profile
    assert arg(args, "--scheduling-policy") == "priority"  # premium and standard share it
    # The drain chain: vLLM drains for as long as its longest request (the standard tier's 300 s
    # route), and the grace period covers preStop (15 s), that and a 10 s margin.
    assert arg(args, "--shutdown-timeout") == "300"


def test_image_is_pinned(prod):
    servers = 0
    for obj in prod.manifests():
        if obj["kind"] in ("Deployment",) or (obj["kind"] == "Service" and obj["apiVersion"].startswith("serving.knative")):
            for c in pod(obj)["containers"]:
                # A model server runs a vLLM release; an endpoint picker the pinned llm-d and Envoy releases.
                pinned = r"^(vllm/vllm-openai|ghcr\.io/llm-d/llm-d-router-endpoint-picker|docker\.io/envoyproxy/envoy):"
                assert re.match(pinned + r"(v|distroless-v)\d+\.\d+\.\d+$", c["image"]), c["image"]
            servers += any(c["name"] == "vllm" for c in pod(obj)["containers"])
    assert servers >= 4


def test_70b_resources_and_placement(prod):
    deployment = prod.k8s("Deployment", "llama-70b-v1", "serving")
    vllm = container(deployment)
    assert vllm["resources"]["limits"]["nvidia.com/gpu"] == "4" == vllm["resources"]["requests"]["nvidia.com/gpu"]
    assert vllm["resources"]["requests"]["cpu"] == "32" and vllm["resources"]["requests"]["memory"] == "320Gi"
    spec = pod(deployment)
    assert spec["nodeSelector"] == {"inference.platform/pool": "h100"}
    assert spec["tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    assert spec["priorityClassName"] == "inference-production"
    shm = next(v for v in spec["volumes"] if v["name"] == "dshm")
    assert shm["emptyDir"] == {"medium": "Memory", "sizeLimit": "16Gi"}
    assert {"name": "dshm", "mountPath": "/dev/shm"} in vllm["volumeMounts"]
    cache = next(v for v in spec["volumes"] if v["name"] == "model-cache")
    assert cache["emptyDir"]["sizeLimit"] == "200Gi"


def test_weights_from_hugging_face_with_token_from_a_secret(prod):
    env = {e["name"]: e for e in container(prod.k8s("Deployment", "llama-70b-v1", "serving"))["env"]}
    assert env["HF_TOKEN"] == {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "huggingface-token", "key": "token"}}}
    assert env["HF_HOME"]["value"] == "/models/hf"
    secret = prod.one("kubernetes:core/v1:Secret", "serving-huggingface-token")["inputs"]
    # The Pulumi secret stays a secret all the way into the Kubernetes Secret's inputs.
    assert secret["stringData"] == {"secret": True, "value": {"token": "hf_serving_token"}}


def test_probes(prod):
    vllm = container(prod.k8s("Deployment", "llama-70b-v1", "serving"))
    startup = vllm["startupProbe"]
    assert startup["httpGet"]["path"] == "/health"
    # Three times the 70B's expected load on the h100 pool's instance store, from the stack's own
    # figures: its 132Gi of weights at 10 Gbit/s (p5's 3200 Gbit/s halved through the internet
    # gateway, capped at the assumed 10 Gbit/s of a Hugging Face download), and the engine's 90 s.
    weights_seconds = math.ceil(132 * 2**30 / (10e9 / 8))
    assert weights_seconds == 114
    assert startup["periodSeconds"] * startup["failureThreshold"] == math.ceil(3 * (weights_seconds + 90) / 10) * 10
    # No longer the 42 minutes of a fixed worst case.
    assert startup["periodSeconds"] * startup["failureThreshold"] < 15 * 60
    assert vllm["readinessProbe"]["httpGet"] == {"path": "/health", "port": "http"}
    assert vllm["livenessProbe"]["httpGet"] == {"path": "/health", "port": "http"}


def test_graceful_drain(prod):
    deployment = prod.k8s("Deployment", "llama-70b-v1", "serving")
    assert pod(deployment)["terminationGracePeriodSeconds"] == 15 + 300 + 10
    assert container(deployment)["lifecycle"]["preStop"]["exec"]["command"] == ["sleep", "15"]
    assert deployment["spec"]["strategy"]["rollingUpdate"] == {"maxUnavailable": 0, "maxSurge": 1}
    annotations = deployment["spec"]["template"]["metadata"]["annotations"]
    assert json.loads(annotations["proxy.istio.io/config"])["terminationDrainDuration"] == "325s"
    pdb = prod.k8s("PodDisruptionBudget", "llama-70b-v1", "serving")
    assert pdb["spec"] == {"maxUnavailable": 1, "selector": {"matchLabels": {"app.kubernetes.io/instance": "llama-70b-v1"}}}


def test_hardening(prod):
    deployment = prod.k8s("Deployment", "llama-70b-v1", "serving")
    spec, vllm = pod(deployment), container(deployment)
    assert spec["automountServiceAccountToken"] is False
    assert spec["securityContext"]["runAsNonRoot"] is True and spec["securityContext"]["seccompProfile"] == {
        "type": "RuntimeDefault"
    }
    security = vllm["securityContext"]
    assert security["allowPrivilegeEscalation"] is False and security["capabilities"] == {"drop": ["ALL"]}
    assert security["readOnlyRootFilesystem"] is True
    # Everything vLLM writes is a volume.
    mounted = {m["mountPath"] for m in vllm["volumeMounts"]}
    assert {"/models", "/home/vllm", "/tmp", "/dev/shm"} <= mounted
    assert not any("hostPath" in v for v in spec["volumes"])


def test_service_and_service_monitor(prod):
    service = prod.k8s("Service", "llama-70b-v1", "serving")
    assert service["spec"]["type"] == "ClusterIP"
    assert service["spec"]["ports"][0]["name"] == "http" and service["spec"]["ports"][0]["port"] == 8000
    monitor = prod.k8s("ServiceMonitor", "llama-70b-v1", "serving")
    endpoint = monitor["spec"]["endpoints"][0]
    assert endpoint["port"] == "http" and endpoint["path"] == "/stats/prometheus"
    annotations = prod.k8s("Deployment", "llama-70b-v1", "serving")["spec"]["template"]["metadata"]["annotations"]
    # Istio merges the app's /metrics (named here) into the sidecar endpoint the monitor scrapes.
    assert annotations["prometheus.io/path"] == "/metrics" and annotations["prometheus.io/port"] == "8000"


def test_70b_hpa(prod):
    hpa = prod.k8s("HorizontalPodAutoscaler", "llama-70b-v1", "serving")
    assert hpa["apiVersion"] == "autoscaling/v2"
    spec = hpa["spec"]
    assert (spec["minReplicas"], spec["maxReplicas"]) == (2, 8)
    assert spec["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment", "name": "llama-70b-v1"}
    metrics = {m[m["type"].lower()]["metric"]["name"]: m[m["type"].lower()]["target"] for m in spec["metrics"]}
    assert metrics == {
        "vllm_num_requests_waiting": {"type": "AverageValue", "averageValue": "5"},
        "gpu_engine_active_percent": {"type": "AverageValue", "averageValue": "70"},
        # Requests held in the endpoint picker's queue, per replica: demand the servers have not seen yet.
        "epp_flow_control_queue_size": {"type": "AverageValue", "averageValue": "5"},
        # Each pod's P99 time to first token, in seconds (autoscaling.hpa.ttftP99TargetMs: 1000).
        "vllm_time_to_first_token_p99_seconds": {"type": "AverageValue", "averageValue": "1000m"},
    }
    assert [m["type"] for m in spec["metrics"]] == ["Pods", "Pods", "Object", "Pods"]  # never a Resource metric on a GPU
    assert spec["metrics"][2]["object"]["describedObject"] == {
        "apiVersion": "inference.networking.k8s.io/v1",
        "kind": "InferencePool",
        "name": "llama-70b-v1",
    }
    down = spec["behavior"]["scaleDown"]
    assert down["stabilizationWindowSeconds"] == 300
    assert down["policies"] == [{"type": "Percent", "value": 50, "periodSeconds": 60}]


def test_prometheus_adapter_serves_the_hpa_metrics(prod):
    adapter = release(prod, "prometheus-adapter")
    assert adapter["chart"] == "prometheus-adapter" and adapter["version"] == "5.3.0"
    rules = {rule["name"]["as"]: rule for rule in adapter["values"]["rules"]["custom"]}
    assert rules["vllm_num_requests_waiting"]["seriesQuery"].startswith('{__name__="vllm:num_requests_waiting"')
    assert "DCGM_FI_PROF_GR_ENGINE_ACTIVE" in rules["gpu_engine_active_percent"]["seriesQuery"]
    assert adapter["values"]["prometheus"]["url"] == "http://prometheus-operated.monitoring.svc"


# --- the 8B chat model on Knative, the 1B model on a MIG slice --------------------------------


def autoscaler_provision_seconds(evaluated: Evaluated) -> int:
    """The cluster autoscaler's `--max-node-provision-time` as its release sets it, in seconds."""
    (autoscaler,) = [r for r in evaluated.of_type("kubernetes:helm.sh/v3:Release") if r["inputs"]["name"] == "cluster-autoscaler"]
    value = autoscaler["inputs"]["values"]["extraArgs"]["max-node-provision-time"]
    assert value.endswith("s"), value
    return int(value[:-1])


def ksvc(evaluated: Evaluated, name: str, namespace: str) -> dict:
    (found,) = [
        m
        for m in evaluated.manifests()
        if m["apiVersion"] == "serving.knative.dev/v1"
        and m["metadata"]["name"] == name
        and m["metadata"]["namespace"] == namespace
    ]
    return found


def test_8b_knative_service(prod):
    stable = ksvc(prod, "llama-8b-v1", "serving")
    annotations = stable["spec"]["template"]["metadata"]["annotations"]
    assert annotations["autoscaling.knative.dev/class"] == "kpa.autoscaling.knative.dev"
    assert annotations["autoscaling.knative.dev/metric"] == "concurrency"
    assert annotations["autoscaling.knative.dev/target"] == "10"
    # Finding 9: scale at the target the stack names, not at Knative's default 70 % of it.
    assert annotations["autoscaling.knative.dev/target-utilization-percentage"] == "100"
    # No burst capacity: the activator (whose queue has no practical bound) leaves the path once a replica is
    # ready, so a request the endpoint picker sends goes straight to the replica's queue-proxy.
    assert annotations["autoscaling.knative.dev/target-burst-capacity"] == "0"
    # Finding 15 (and 17's README row "KPA 2..10"): both versions take the model's bounds, whatever
    # the weight, so a weight step never changes a revision.
    for version in ("llama-8b-v1", "llama-8b-v2"):
        bounds = ksvc(prod, version, "serving")["spec"]["template"]["metadata"]["annotations"]
        assert (bounds["autoscaling.knative.dev/min-scale"], bounds["autoscaling.knative.dev/max-scale"]) == ("2", "10")
    assert annotations["autoscaling.knative.dev/scale-down-delay"] == "5m"
    spec = pod(stable)
    # No breaker in queue-proxy (its queue has no time bound); the timeout covers the longest tier route it
    # serves (standard).
    assert spec["containerConcurrency"] == 0 and spec["timeoutSeconds"] == 300
    # Finding 5: the first byte may take the whole timeout, not revision-timeout-seconds.
    assert spec["responseStartTimeoutSeconds"] == spec["timeoutSeconds"]
    # vLLM runs the stack's containerConcurrency sequences (v2 sets its own); the version's endpoint picker
    # times the queue, so vLLM keeps no admission bound of its own.
    assert arg(container(stable)["args"], "--max-num-seqs") == "12"
    assert not {"--max-num-queued-reqs", "--max-num-queued-tokens"} & set(container(stable)["args"])
    # The picker dials each pod's queue-proxy (knative/serving knative-v1.23.0 pkg/networking/constants.go
    # BackendHTTPPort), which counts the request for the KPA, through a Service on that port over the same pods.
    pool = prod.k8s("InferencePool", "llama-8b-v1", "serving")["spec"]
    assert pool["targetPorts"] == [{"number": 8012}]
    queue_proxy = prod.k8s("Service", "llama-8b-v1-queue-proxy", "serving")["spec"]
    assert queue_proxy["selector"] == pool["selector"]["matchLabels"]
    assert [(p["port"], p["targetPort"]) for p in queue_proxy["ports"]] == [(8012, 8012)]
    # A new node (the autoscaler's provisioning time), the image and the startup probe's budget.
    startup = container(stable)["startupProbe"]
    image_seconds = next(r["imageSeconds"] for r in prod.outputs["coldStarts"] if r["model"] == "llama-8b")
    assert annotations["serving.knative.dev/progress-deadline"] == (
        f"{autoscaler_provision_seconds(prod) + image_seconds + startup['periodSeconds'] * startup['failureThreshold']}s"
    )
    assert container(stable)["resources"]["limits"]["nvidia.com/mig-3g.40gb"] == "1"
    assert arg(container(stable)["args"], "--max-model-len") == "4096"
    assert arg(container(ksvc(prod, "llama-8b-v2", "serving"))["args"], "--max-num-seqs") == "32"
    assert spec["nodeSelector"] == {"inference.platform/pool": "h100"} and spec["tolerations"]
    assert stable["metadata"]["labels"]["networking.knative.dev/visibility"] == "cluster-local"
    assert prod.k8s("PodMonitor", "llama-8b-v1", "serving")["spec"]["selector"] == {
        "matchLabels": {"serving.knative.dev/service": "llama-8b-v1"}
    }


def test_knative_serving_installed_with_the_features_servers_need(prod):
    operator = release(prod, "knative-operator")
    assert operator["version"] == "v1.23.0" and operator["repositoryOpts"]["repo"] == "https://knative.github.io/operator"
    serving = prod.k8s("KnativeServing", "knative-serving", "knative-serving")
    features = serving["spec"]["config"]["features"]
    for feature in ("nodeselector", "tolerations", "securitycontext", "priorityclassname", "init-containers"):
        assert features[f"kubernetes.podspec-{feature}"] == "enabled"
    # Finding 12: no Knative-served request may outlast what the activator drains (600 s).
    assert serving["spec"]["config"]["defaults"]["max-revision-timeout-seconds"] == "600"
    assert serving["spec"]["ingress"]["istio"]["enabled"] is True


def test_1b_model_on_a_mig_slice(prod):
    vllm = container(prod.k8s("Deployment", "llama-1b-v1", "team-a"))
    assert vllm["resources"]["limits"]["nvidia.com/mig-1g.10gb"] == "1"
    assert arg(vllm["args"], "--tensor-parallel-size") == "1"
    hpa = prod.k8s("HorizontalPodAutoscaler", "llama-1b-v1", "team-a")["spec"]
    assert [m[m["type"].lower()]["metric"]["name"] for m in hpa["metrics"]] == [
        "vllm_num_requests_waiting",
        "epp_flow_control_queue_size",
    ]


def test_batch_labelling_is_kept_apart(prod):
    batch = ksvc(prod, "batch-labeller-v1", "team-b")
    spec = pod(batch)
    assert spec["nodeSelector"] == {"inference.platform/pool": "l4-batch"}
    assert spec["priorityClassName"] == "inference-experiment"
    annotations = batch["spec"]["template"]["metadata"]["annotations"]
    # Behind its endpoint picker, which cannot wake a revision at zero, it keeps a replica.
    assert annotations["autoscaling.knative.dev/min-scale"] == "1"
    args = container(batch)["args"]
    assert "--scheduling-policy" not in args  # one tier only
    assert spec["timeoutSeconds"] == spec["responseStartTimeoutSeconds"] == 600


def test_time_sliced_servers_plan_for_their_share_of_gpu_memory(staging):
    args = container(staging.k8s("Deployment", "summarizer-v1", "team-a"))["args"]
    assert arg(args, "--gpu-memory-utilization") == "0.225"  # 0.9 / 4 shares
    assert "--no-enable-prefix-caching" not in args and "--enable-prefix-caching" in args  # summarization


def test_canary_versions_run_as_their_own_servers(staging):
    names = {r["name"] for r in staging.of_type("inference-platform:model-server:ModelServer")}
    assert {
        "summarizer-v1",
        "summarizer-v2",
        "labeller-v1",
        "assistant-v1",
        "code-helper-v1",
        "rag-answerer-v1",
        "embedder-v1",
    } == names
    v2 = container(staging.k8s("Deployment", "summarizer-v2", "team-a"))
    assert v2["args"][0] == "Qwen/Qwen2.5-1.5B-Instruct" and arg(v2["args"], "--max-model-len") == "4096"


def test_weights_from_s3_via_init_container_and_workload_role(prod_raw):
    source = {"s3Uri": "s3://model-weights/llama-1b", "revision": "2026-10-01"}
    owning(downloading_weights(prod_raw), "team-a", "s3://model-weights/llama-1b")["models"][2]["versions"][0]["source"] = source
    evaluated = Evaluated(prod_raw)
    spec = pod(evaluated.k8s("Deployment", "llama-1b-v1", "team-a"))
    (init,) = spec["initContainers"]
    assert init["command"][:3] == ["aws", "s3", "sync"]
    assert init["command"][-2:] == ["s3://model-weights/llama-1b/2026-10-01/", "/models/weights/llama-1b-v1"]
    assert spec["serviceAccountName"] == "llama-1b-weights"
    assert container(evaluated.k8s("Deployment", "llama-1b-v1", "team-a"))["args"][0] == "/models/weights/llama-1b-v1"
    policy = json.loads(evaluated.one("aws:iam/rolePolicy:RolePolicy", "llama-1b-weights-identity-policy")["inputs"]["policy"])
    assert policy["Statement"][0] == {
        "Effect": "Allow",
        "Action": ["s3:GetObject"],
        "Resource": "arn:aws:s3:::model-weights/llama-1b/*",
    }
    association = evaluated.one("aws:eks/podIdentityAssociation:PodIdentityAssociation", "llama-1b-weights-identity-association")
    assert association["inputs"]["serviceAccount"] == "llama-1b-weights" and association["inputs"]["namespace"] == "team-a"
    # Pod Identity injects credentials at admission: the pods wait for the association.
    (deployment,) = [r for r in evaluated.records if r.name == "llama-1b-v1-deployment"]
    assert association["urn"] in deployment.dependencies


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


# --- every server of every prod model -------------------------------------------------------------

PROD_SERVERS = [
    ("llama-70b-v1", "serving", "hpa"),
    ("llama-8b-v1", "serving", "kpa"),
    ("llama-8b-v2", "serving", "kpa"),
    ("llama-1b-v1", "team-a", "hpa"),
    ("batch-labeller-v1", "team-b", "kpa"),
    ("llama-8b-batch-v1", "serving", "kpa"),
]


def server_object(prod: Evaluated, name: str, namespace: str, mode: str) -> dict:
    return prod.k8s("Deployment", name, namespace) if mode == "hpa" else ksvc(prod, name, namespace)


@pytest.mark.parametrize("name, namespace, mode", PROD_SERVERS)
def test_every_prod_server(prod, name, namespace, mode):
    obj = server_object(prod, name, namespace, mode)
    spec, vllm = pod(obj), container(obj)
    args = vllm["args"]
    # Arguments from the typed config.
    assert arg(args, "--served-model-name") and arg(args, "--revision") and arg(args, "--max-model-len")
    assert arg(args, "--port") == "8000" and int(arg(args, "--shutdown-timeout")) > 0
    # GPU limits equal to requests, CPU and memory requested.
    limits, requests = vllm["resources"]["limits"], vllm["resources"]["requests"]
    gpu = [r for r in limits if r.startswith("nvidia.com/")]
    assert len(gpu) == 1 and limits[gpu[0]] == requests[gpu[0]]
    assert "cpu" in requests and requests["memory"] == limits["memory"]
    assert spec["nodeSelector"]["inference.platform/pool"] and spec["tolerations"][0]["key"] == "nvidia.com/gpu"
    # Probes on /health; a startup probe of three times the expected weights and engine start
    # (at least 5 minutes), from the model's cold start on its pool.
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert vllm[probe]["httpGet"]["path"] == "/health"
    model = obj["metadata"]["labels"]["inference.platform/model"]
    cold = next(r for r in prod.outputs["coldStarts"] if r["model"] == model)
    budget = vllm["startupProbe"]["periodSeconds"] * vllm["startupProbe"]["failureThreshold"]
    assert budget >= max(300, 3 * (cold["weightsSeconds"] + cold["engineSeconds"])) and budget % 10 == 0
    # Hardening.
    assert spec["securityContext"]["runAsNonRoot"] is True and vllm["securityContext"]["readOnlyRootFilesystem"] is True
    assert vllm["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    if mode == "hpa":
        assert spec["terminationGracePeriodSeconds"] >= 300 and vllm["lifecycle"]["preStop"]
        assert prod.k8s("PodDisruptionBudget", name, namespace)
        hpa = prod.k8s("HorizontalPodAutoscaler", name, namespace)["spec"]
        assert hpa["behavior"]["scaleDown"]["stabilizationWindowSeconds"] >= 300
        assert prod.k8s("ServiceMonitor", name, namespace)
    else:
        annotations = obj["spec"]["template"]["metadata"]["annotations"]
        assert annotations["autoscaling.knative.dev/class"] == "kpa.autoscaling.knative.dev"
        assert int(annotations["autoscaling.knative.dev/max-scale"]) >= int(annotations["autoscaling.knative.dev/min-scale"])
        assert spec["containerConcurrency"] == 0 and spec["timeoutSeconds"] > 0
        # Behind the version's endpoint picker (production's rule), which dials queue-proxy's port.
        pool = prod.k8s("InferencePool", name, namespace)["spec"]
        # The version's current revision, which Knative labels with its name.
        revision = obj["spec"]["template"]["metadata"]["name"]
        assert pool["selector"]["matchLabels"] == {"serving.knative.dev/revision": revision}
        assert pool["targetPorts"] == [{"number": 8012}]
        assert prod.k8s("PodMonitor", name, namespace)


def test_hpa_owns_the_replica_count(prod):
    (record,) = [r for r in prod.records if r.name == "llama-70b-v1-deployment"]
    assert record.ignore_changes == ["spec.replicas"]


def test_disk_for_the_caches_is_requested(prod):
    requests = container(prod.k8s("Deployment", "llama-70b-v1", "serving"))["resources"]["requests"]
    assert requests["ephemeral-storage"] == "230Gi"  # 200Gi weights cache + 30Gi scratch


def test_sidecar_exits_once_drained(prod):
    annotations = prod.k8s("Deployment", "llama-70b-v1", "serving")["spec"]["template"]["metadata"]["annotations"]
    proxy = json.loads(annotations["proxy.istio.io/config"])
    assert (
        proxy["proxyMetadata"] == {"EXIT_ON_ZERO_ACTIVE_CONNECTIONS": "true"} and proxy["holdApplicationUntilProxyStarts"] is True
    )


def test_knative_services_get_a_disruption_budget(prod):
    pdb = prod.k8s("PodDisruptionBudget", "llama-8b-v1", "serving")
    assert pdb["spec"] == {"maxUnavailable": 1, "selector": {"matchLabels": {"serving.knative.dev/service": "llama-8b-v1"}}}


def test_no_api_token_even_with_s3_weights(prod_raw):
    prod_raw["models"][1]["versions"][0]["source"] = {"s3Uri": "s3://model-weights/llama-8b", "revision": "2026-10-01"}
    owning(prod_raw, "serving", "s3://model-weights/llama-8b")
    spec = pod(ksvc(Evaluated(prod_raw), "llama-8b-v1", "serving"))
    assert spec["automountServiceAccountToken"] is False and spec["serviceAccountName"] == "llama-8b-weights"


# --- what waits for what ----------------------------------------------------------------------


def _dependencies(evaluated: Evaluated, token: str, name: str) -> set[str]:
    """The names of the resources the engine is told this one depends on."""
    (record,) = [r for r in evaluated.records if r.type == token and r.name == name]
    by_urn = {r.urn: r.name for r in evaluated.records}
    return {by_urn[urn] for urn in record.dependencies}


def _tenant_children(evaluated: Evaluated, tenant: str, token: str) -> set[str]:
    return {r.name for r in evaluated.records if r.type == token and r.parent and r.parent.endswith(f"Tenant::{tenant}")}


def test_pods_wait_for_their_tenants_admission_and_isolation(prod):
    for token, name in (
        ("kubernetes:apps/v1:Deployment", "llama-70b-v1-deployment"),
        ("kubernetes:serving.knative.dev/v1:Service", "llama-8b-v2-knative-service"),
    ):
        (record,) = [r for r in prod.resources if r["type"] == token and r["name"] == name]
        tenant = record["inputs"]["metadata"]["namespace"]
        quotas = _tenant_children(prod, tenant, "kubernetes:core/v1:ResourceQuota")
        (limits,) = _tenant_children(prod, tenant, "kubernetes:core/v1:LimitRange")
        policies = _tenant_children(prod, tenant, "kubernetes:networking.k8s.io/v1:NetworkPolicy")
        deny = f"{tenant}-default-deny-ingress"
        # What a starting server may reach (the deny, DNS, istiod, its downloads) is in place first.
        egress = {p for p in policies if p.endswith("-egress")}
        assert len(quotas) == 4 and deny in policies and f"{tenant}-allow-dns-egress" in egress
        needs = _dependencies(prod, token, name)
        mesh = {f"{tenant}-peer-authentication", f"{tenant}-authorization-policy"}
        assert {tenant, *quotas, limits, deny, *egress, *mesh} <= needs, (name, needs)
        # Policies that only allow traffic in are no reason to hold pods back.
        assert not (policies - {deny} - egress) & needs
        # Sidecar injection and the PriorityClasses before any pod; Knative before a Knative Service.
        assert {"mesh-istiod", "inference-production", "inference-experiment"} <= needs
        assert ("knative-serving-serving" in needs) == (token == "kubernetes:serving.knative.dev/v1:Service")


def test_objects_without_pods_wait_only_for_what_they_need(prod):
    assert _dependencies(prod, "kubernetes:policy/v1:PodDisruptionBudget", "llama-70b-v1-pdb") == {"serving"}
    assert _dependencies(prod, "kubernetes:core/v1:Service", "llama-70b-v1-service") == {"serving"}
    # Monitors are Prometheus Operator CRDs; the HPA's metrics come from prometheus-adapter.
    monitor = _dependencies(prod, "kubernetes:monitoring.coreos.com/v1:ServiceMonitor", "llama-70b-v1-service-monitor")
    assert monitor == {"serving", "monitoring-release"}
    pod_monitor = _dependencies(prod, "kubernetes:monitoring.coreos.com/v1:PodMonitor", "llama-8b-v1-pod-monitor")
    assert pod_monitor == {"serving", "monitoring-release"}
    hpa = _dependencies(prod, "kubernetes:autoscaling/v2:HorizontalPodAutoscaler", "llama-70b-v1-hpa")
    assert hpa == {"llama-70b-v1-deployment", "prometheus-adapter-release"}


def test_routes_wait_for_the_endpoints_they_send_traffic_to(prod):
    needs = _dependencies(prod, "kubernetes:networking.istio.io/v1:VirtualService", "llama-8b-route-virtual-service")
    assert {"llama-8b-v1-knative-service", "llama-8b-v2-knative-service", "gateway-routing-gateway"} <= needs, needs
    # An HPA version is routed to once its Deployment has rolled out, not on its first ready pod.
    needs = _dependencies(prod, "kubernetes:networking.istio.io/v1:VirtualService", "llama-70b-route-virtual-service")
    assert {"llama-70b-v1-deployment", "llama-70b-v1-service", "llama-70b-service"} <= needs, needs


def test_a_knative_versions_picker_picks_from_its_current_revision_once_it_is_ready(prod):
    """Knative routes to a version's latest ready revision; the picker does not go through Knative's route, and an
    older revision's pods carry the same labels until Knative scales it away, which the picker's own traffic would
    prevent. So a picked version names its revision (knative-v1.23.0 pkg/apis/serving/v1/revision_validation.go: the
    service's name as prefix, a new name for a changed template), and its pool and queue-proxy Service select that
    revision's pods (the label Knative puts on them, pkg/apis/serving/register.go RevisionLabelKey), moving only once
    `pulumi up` has seen the new revision ready."""
    import copy

    from components.backends.knative import knative_service

    from .helpers import validate

    service = ksvc(prod, "llama-8b-v1", "serving")
    revision = service["spec"]["template"]["metadata"]["name"]
    assert re.fullmatch(r"llama-8b-v1-[0-9a-f]{10}", revision)
    pool = prod.k8s("InferencePool", "llama-8b-v1", "serving")["spec"]
    assert pool["selector"]["matchLabels"] == {"serving.knative.dev/revision": revision}
    assert prod.k8s("Service", "llama-8b-v1-queue-proxy", "serving")["spec"]["selector"] == {
        "serving.knative.dev/revision": revision
    }
    # The picker still reaches every revision's pods (its network rules), so requests it sent an older one finish.
    egress = prod.k8s("NetworkPolicy", "llama-8b-v1-epp-to-servers", "serving")["spec"]["egress"][0]["to"][0]
    assert egress["podSelector"]["matchLabels"] == {"app.kubernetes.io/instance": "llama-8b-v1"}
    for name in ("llama-8b-v1-inferencepool", "llama-8b-v1-queue-proxy-service"):
        token = next(r.type for r in prod.records if r.name == name)
        assert "llama-8b-v1-knative-service" in _dependencies(prod, token, name), name

    # The same template names the same revision; any change to it, a new one.
    def named(raw: dict) -> str:
        server = next(s for m in validate(raw).models for s in m.servers if s.name == "llama-8b-v1")
        return knative_service(server)["spec"]["template"]["metadata"]["name"]

    raw = copy.deepcopy(raw_stack("prod"))
    before = named(raw)
    assert named(copy.deepcopy(raw)) == before
    raw["models"][1]["autoscaling"]["kpa"]["scaleDownDelay"] = "6m"
    assert named(raw) != before and named(raw).startswith("llama-8b-v1-")
    # Without a picker Knative names its revisions itself (staging's labeller).
    labeller = Evaluated(raw_stack("staging"), shared=True).k8s("Service", "labeller-v1", "team-a")
    assert "name" not in labeller["spec"]["template"]["metadata"]


def test_pulumi_up_waits_for_each_version_to_load_its_model(prod):
    """Pulumi's default wait (10 minutes for a Deployment) is shorter than loading a 70B model:
    the engine is told to wait past Kubernetes' own progress deadline, and to await the Knative
    Services' Ready condition, which it would not check at all otherwise."""
    deployment = prod.k8s("Deployment", "llama-70b-v1", "serving")
    deadline = deployment["spec"]["progressDeadlineSeconds"]
    assert deadline > 600
    (record,) = [r for r in prod.records if r.name == "llama-70b-v1-deployment"]
    assert record.custom_timeouts == {"create": f"{deadline + 60}s", "update": f"{deadline + 60}s"}
    stable = ksvc(prod, "llama-8b-v1", "serving")
    assert stable["metadata"]["annotations"]["pulumi.com/waitFor"] == "condition=Ready"
    knative_deadline = int(
        stable["spec"]["template"]["metadata"]["annotations"]["serving.knative.dev/progress-deadline"].rstrip("s")
    )
    (record,) = [r for r in prod.records if r.name == "llama-8b-v1-knative-service"]
    assert record.custom_timeouts == {"create": f"{knative_deadline + 60}s", "update": f"{knative_deadline + 60}s"}


def test_without_the_activator_the_mesh_balances_knative_replicas_by_least_requests():
    """A Knative model without an endpoint picker (staging's labeller, which scales to zero): with no burst capacity
    (components/backends/knative.py TARGET_BURST_CAPACITY) Knative's local gateway, an Istio gateway, sends to the
    ready replicas itself: by Istio's default load balancer, which is least requests (istio/istio 1.30.3
    pilot/pkg/networking/core/cluster_traffic_policy.go), and the platform's DestinationRules on that gateway set
    none."""
    from components.backends.knative import KNATIVE_LOCAL_GATEWAY, TARGET_BURST_CAPACITY

    from .helpers import mirror_show

    source = mirror_show(Path("istio+istio"), "1.30.3", "pilot/pkg/networking/core/cluster_traffic_policy.go")
    assert "func defaultLBAlgorithm() cluster.Cluster_LbPolicy {\n\treturn cluster.Cluster_LEAST_REQUEST\n}" in source
    assert TARGET_BURST_CAPACITY == 0
    evaluated = Evaluated(raw_stack("staging"), shared=True)
    rules = [m for m in evaluated.manifests() if m["kind"] == "DestinationRule" and m["spec"]["host"] == KNATIVE_LOCAL_GATEWAY]
    assert [s["name"] for r in rules for s in r["spec"]["subsets"]] == ["labeller-v1-batch"]
    for rule in rules:
        assert "loadBalancer" not in rule["spec"].get("trafficPolicy", {}), rule["metadata"]["name"]
        assert all("loadBalancer" not in s.get("trafficPolicy", {}) for s in rule["spec"]["subsets"])


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
