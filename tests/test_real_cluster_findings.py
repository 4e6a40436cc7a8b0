"""Findings of the real-cluster review that no other test file pins down, each by its number.

The others are tested where their part lives: 1 and 14's bin-packing in test_admission, 2-4 and
13 in test_upstream_pins and test_infrastructure_components, 5, 9, 12 and 15 in test_serving (and the modules beside
it) and test_preview_contract, 7 and 11 in test_infrastructure_components, 10 and 16's filter in test_traffic and
test_gateway_filter."""

from __future__ import annotations

import pytest

from components.constants import KNATIVE_ACTIVATOR_GRACE_SECONDS
from platform_config import parse_platform_config

from .helpers import ROOT, config_problems, prod_with_labeller_server, run_preview, write_stack


def preview_refuses(stack, out) -> str:
    result = run_preview("--stack", "test", "--config-file", str(stack), "--out", str(out))
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr and not out.exists()
    return result.stderr


# --- 12: Knative requests within the activator's grace --------------------------------------------


def test_a_knative_model_may_not_take_longer_than_the_activator_drains():
    prod_raw = prod_with_labeller_server()
    prod_raw["traffic"]["tiers"] = {
        "batch": {"timeout": "900s", "maxPendingRequests": 16, "maxRequests": 128, "retryAttempts": 0, "vllmPriority": 2}
    }
    found = config_problems(prod_raw)
    # The batch labeller and the 8B batch servers are Knative-served and take the batch tier.
    for index in (3, 4):
        assert any(
            m.startswith(f"inference-platform:models[{index}].autoscaling.mode: requests to this model may take 900 s")
            and f"drains for only {KNATIVE_ACTIVATOR_GRACE_SECONDS} s" in m
            for m in found
        ), found
    # A Deployment-served model may take longer: no activator in its path.
    prod_raw["models"][3]["autoscaling"] = {
        "mode": "hpa",
        "minReplicas": 1,
        "maxReplicas": 2,
        "hpa": {"gpuUtilizationTarget": None},
    }
    assert not any(m.startswith("inference-platform:models[3].autoscaling.mode") for m in config_problems(prod_raw))


# --- 14: each model's peak against its own pool ----------------------------------------------------


def test_model_peaks_are_checked_against_their_own_pool(prod_raw):
    # Before: 8 H100 nodes, whose 32 whole GPUs the 70B model takes at max 8 replicas; its
    # rollout's surge pod (and node drains) could never be placed. Summed with the L4s the
    # GPUs looked plentiful.
    prod_raw["nodePools"][0]["maxSize"] = 8
    found = config_problems(prod_raw)
    (gpu,) = [m for m in found if "models of pool 'h100' need 36 of nvidia.com/gpu" in m]
    assert gpu.startswith("inference-platform:models[0].autoscaling.maxReplicas: at their peak")
    assert "offer 32 (inference-platform:nodePools[0].maxSize=8)" in gpu


# --- 16: --max-num-seqs on every server -----------------------------------------------------------


def test_hpa_servers_run_the_profiles_concurrency(previews):
    deployments = {d["metadata"]["name"]: d for d in previews["prod"].objects("Deployment")}
    args = deployments["llama-70b-v1"]["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[args.index("--max-num-seqs") + 1] == "8"  # chat: 8 per replica
    args = deployments["llama-1b-v1"]["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[args.index("--max-num-seqs") + 1] == "4"  # code completion: 4 per replica


# --- 17: team-b is a normal team in prod ----------------------------------------------------------


def test_prod_team_b_has_a_production_budget(prod_raw):
    team_b = next(t for t in prod_raw["tenants"] if t["name"] == "team-b")
    quota, experiments = team_b["quota"], team_b["experimentQuota"]
    # The design: 2 GPUs, 100Gi and 10 pods for production; experiments on top.
    assert quota["gpu"] - experiments["gpu"] == 2
    assert int(quota["memory"].removesuffix("Gi")) - int(experiments["memory"].removesuffix("Gi")) == 100
    assert quota["pods"] - experiments["pods"] == 10


def test_readme_stack_table_matches_the_prod_servers(previews):
    readme = (ROOT / "README.md").read_text()
    services = {s["metadata"]["name"]: s for s in previews["prod"].objects("Service", "serving.knative.dev/v1")}
    for version in ("llama-8b-v1", "llama-8b-v2"):
        annotations = services[version]["spec"]["template"]["metadata"]["annotations"]
        low, high = annotations["autoscaling.knative.dev/min-scale"], annotations["autoscaling.knative.dev/max-scale"]
        assert f"Llama-3.1-8B (KPA {low}..{high}" in readme
    hpa = next(h for h in previews["prod"].objects("HorizontalPodAutoscaler") if h["metadata"]["name"] == "llama-70b-v1")
    assert f"Llama-3.1-70B (HPA {hpa['spec']['minReplicas']}..{hpa['spec']['maxReplicas']})" in readme


# --- 18: misspelt namespaces and unknown instance types -------------------------------------------


@pytest.mark.slow
def test_a_key_in_an_unknown_namespace_is_refused(tmp_path, prod_raw):
    models = prod_raw.pop("models")
    stack = write_stack(tmp_path, prod_raw, {"aws:region": "us-east-1", "inference-platfrom:models": models})
    stderr = preview_refuses(stack, tmp_path / "out")
    assert "inference-platfrom:models: unknown config namespace 'inference-platfrom'" in stderr
    assert "inference-platform, aws, kubernetes, pulumi" in stderr


def test_the_system_node_groups_instance_type_must_exist(prod_raw):
    prod_raw["cluster"]["eks"]["systemNodeGroup"]["instanceType"] = "p9.mega"
    (message,) = config_problems(prod_raw)
    assert message.startswith(
        "inference-platform:cluster.eks.systemNodeGroup.instanceType: 'p9.mega' is not an EC2 instance type"
    )
    prod_raw["cluster"]["eks"]["systemNodeGroup"]["instanceType"] = "m7i.2xlarge"
    parse_platform_config(prod_raw)


# --- 6: the NLB keeps silent answers open --------------------------------------------------------


def helm_values(run, release: str) -> dict:
    (found,) = [r["inputs"] for r in run.of_type("kubernetes:helm.sh/v3:Release") if r["inputs"]["name"] == release]
    return found


def test_the_gateway_nlb_outlasts_the_gateways_own_idle_timeout(previews):
    run = previews["prod"]
    gateway = helm_values(run, "istio-ingressgateway")
    annotations = gateway["values"]["service"]["annotations"]
    # The AWS Load Balancer Controller, not the in-tree provider, owns it: only it applies
    # listener attributes.
    assert annotations["service.beta.kubernetes.io/aws-load-balancer-type"] == "external"
    assert annotations["service.beta.kubernetes.io/aws-load-balancer-nlb-target-type"] == "ip"
    envoy = next(f for f in run.objects("EnvoyFilter") if f["metadata"]["name"] == "inference-gateway-filter")
    patch = next(p for p in envoy["spec"]["configPatches"] if p["applyTo"] == "NETWORK_FILTER")
    envoy_idle = int(patch["patch"]["value"]["typed_config"]["stream_idle_timeout"].removesuffix("s"))
    for listener in ("TCP-80", "TCP-443"):
        value = annotations[f"service.beta.kubernetes.io/aws-load-balancer-listener-attributes.{listener}"]
        key, _, seconds = value.partition("=")
        # Above the NLB's 350 s default and the gateway's stream idle timeout; within AWS's 60-6000.
        assert key == "tcp.idle_timeout.seconds" and envoy_idle < int(seconds) <= 6000 and int(seconds) > 350
    assert envoy_idle > 350
    controller = helm_values(run, "aws-load-balancer-controller")
    assert controller["chart"] == "aws-load-balancer-controller" and controller["values"]["clusterName"] == "inference-prod"


def test_the_controllers_role_only_changes_what_it_tagged():
    import json

    from components.load_balancer_controller import controller_policy

    statements = json.loads(controller_policy())["Statement"]
    deleting = [s for s in statements if "elasticloadbalancing:DeleteLoadBalancer" in s["Action"]]
    assert deleting and all(s["Condition"] == {"Null": {"aws:ResourceTag/elbv2.k8s.aws/cluster": "false"}} for s in deleting)
    creating = next(s for s in statements if "elasticloadbalancing:CreateLoadBalancer" in s["Action"])
    assert creating["Condition"] == {"Null": {"aws:RequestTag/elbv2.k8s.aws/cluster": "false"}}
    assert not any(a.startswith(("wafv2:", "shield:", "cognito-idp:")) for s in statements for a in s["Action"])


def test_no_load_balancer_controller_without_eks(previews):
    dev = previews["dev"]
    assert not [r for r in dev.of_type("kubernetes:helm.sh/v3:Release") if r["inputs"]["name"] == "aws-load-balancer-controller"]
    assert "annotations" not in helm_values(dev, "istio-ingressgateway")["values"]["service"]


# --- 8: metrics-server for the CPU autoscalers ----------------------------------------------------


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_metrics_server_is_installed(previews, stack):
    release = helm_values(previews[stack], "metrics-server")
    assert (
        release["namespace"] == "kube-system"
        and release["repositoryOpts"]["repo"] == "https://kubernetes-sigs.github.io/metrics-server/"
    )
    assert release["values"]["replicas"] == 2 and release["values"]["podDisruptionBudget"] == {
        "enabled": True,
        "maxUnavailable": 1,
    }
    # On EKS it runs on the system nodes; an existing cluster's nodes carry no such label.
    assert ("nodeSelector" in release["values"]) == (stack == "prod")


def test_metrics_server_can_be_left_to_the_cluster(dev_raw):
    from .helpers import Evaluated

    dev_raw["monitoring"]["installMetricsServer"] = False
    evaluated = Evaluated(dev_raw)
    assert not [r for r in evaluated.of_type("kubernetes:helm.sh/v3:Release") if r["inputs"]["name"] == "metrics-server"]


# --- 7: the accelerator label, where the node advertises whole GPUs -------------------------------


def test_mig_only_pools_carry_no_accelerator_label():
    from components.specs.gpu_sharing import node_labels
    from platform_config.models import NodePoolConfig
    from platform_config.pool_plan import pool_capacity

    mig_only = NodePoolConfig.model_validate(
        {"name": "slices", "instanceType": "p5.48xlarge", "maxSize": 1, "sharing": {"mode": "mig", "migConfig": "all-1g.10gb"}}
    )
    whole = NodePoolConfig.model_validate({"name": "whole", "instanceType": "p5.48xlarge", "maxSize": 1})
    # The autoscaler would wait forever for nvidia.com/gpu on a node that only advertises slices.
    assert "k8s.amazonaws.com/accelerator" not in node_labels(pool_capacity(mig_only))
    assert node_labels(pool_capacity(whole))["k8s.amazonaws.com/accelerator"] == "nvidia-h100"
