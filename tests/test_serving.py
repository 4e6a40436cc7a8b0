"""Model serving: vLLM servers, HPA and Knative autoscaling, drain, hardening, each model of prod and staging.
Every prod server's common shape and what waits for what: tests/test_serving_servers.py; what the config may
not ask of them, the profiles and latency targets: tests/test_serving_config.py."""

from __future__ import annotations

import json
import math
import re

import pytest

from .helpers import (
    Evaluated,
    downloading_weights,
    owning,
    raw_stack,
    split_module_value,
)
from .serving_helpers import arg, container, ksvc, pod, prod_downloading_weights

RELEASE = "kubernetes:helm.sh/v3:Release"


@pytest.fixture(scope="module")
def prod() -> Evaluated:
    return split_module_value("tests/test_serving.py prod", prod_downloading_weights)


@pytest.fixture(scope="module")
def staging() -> Evaluated:
    return Evaluated(raw_stack("staging"), shared=True)


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
