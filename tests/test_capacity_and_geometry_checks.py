"""Capacity and MIG-geometry checks: good inputs pass, bad ones are named config errors."""

from __future__ import annotations

from components.system_nodes import stack_system_template
from platform_config import parse_platform_config
from platform_config.capacity import capacity_report

from .helpers import config_problems, prod_with_labeller_server, raw_stack, validate


def geometry(prod_raw) -> dict:
    return prod_raw["nodePools"][0]["sharing"]["migGeometry"]


def test_prod_capacity_table(prod_raw):
    rows = {row["resource"]: row for row in capacity_report(parse_platform_config(prod_raw))}
    gpu = rows["nvidia.com/gpu"]
    # 9 p5 nodes x 4 whole GPUs + 4 L4 nodes x 4 GPUs.
    assert gpu["supplyByPool"] == {"h100": "36", "l4-batch": "16"} and gpu["supply"] == "52"
    assert gpu["demandByTenant"] == {"serving": "41", "team-a": "4", "team-b": "5"} and gpu["withinCapacity"]
    assert rows["nvidia.com/mig-1g.10gb"]["supply"] == "126"
    assert rows["nvidia.com/mig-3g.40gb"]["supply"] == "36"
    # GPU pools only: 9 p5 (2 TiB) and 4 g6e.12xlarge (192 GiB); vLLM never runs on system nodes.
    assert rows["memory"]["supply"] == f"{9 * 2048 + 4 * 192}Gi"
    assert rows["cpu"]["supplyByPool"] == {"h100": str(9 * 192), "l4-batch": str(4 * 48)}


def test_the_capacity_report_shows_the_endpoint_pickers():
    plan = validate(raw_stack("prod"))
    rows = {row["resource"]: row for row in capacity_report(plan.config, plan.endpoint_pickers_by_tenant)}
    # One picker per running version (serving's 70B, its Knative 8B's two and batch 8B's one, team-a's 1B): 2
    # replicas and 2 draining, each 1 + 1 CPU and 4Gi + 2Gi of memory limits for the EPP and its Envoy, and the
    # sidecar's 100m and 512Mi.
    assert rows["cpu"]["endpointPickersByTenant"] == {"serving": "33.6", "team-a": "8.4"}
    assert rows["memory"]["endpointPickersByTenant"] == {"serving": f"{4 * 26}Gi", "team-a": "26Gi"}
    assert rows["nvidia.com/gpu"]["endpointPickersByTenant"] == {}
    # Their own rows: the 12 m6i.2xlarge system nodes (8 vCPUs, 32 GiB) against the pickers.
    system = rows["cpu (system nodes)"]
    assert system["supply"] == str(12 * 8) and system["demand"] == "42" and system["withinCapacity"]
    memory = rows["memory (system nodes)"]
    assert memory["supply"] == f"{12 * 32}Gi" and memory["demand"] == f"{5 * 26}Gi"


def test_quota_over_capacity_names_tenants_and_pools(prod_raw):
    prod_raw["tenants"][1]["quota"]["mig"]["1g.10gb"] = 130
    # Over the pools together, and over what the tenant may use alone.
    message, alone = config_problems(prod_raw)
    assert alone.startswith(
        'inference-platform:tenants[1].quota.mig["1g.10gb"]: 130 of nvidia.com/mig-1g.10gb is more than the pools it may use'
    )
    assert message.startswith("inference-platform:tenants: quotas on nvidia.com/mig-1g.10gb add up to 130")
    assert 'inference-platform:tenants[1].quota.mig["1g.10gb"]=130' in message
    assert "h100 126" in message and "overcommitRatio" in message


def test_overcommit_ratio_allows_it(prod_raw):
    prod_raw["tenants"][1]["quota"]["mig"]["1g.10gb"] = 140
    prod_raw["capacity"] = {"overcommitRatio": 1.5}
    rows = {r["resource"]: r for r in capacity_report(parse_platform_config(prod_raw))}
    assert rows["nvidia.com/mig-1g.10gb"]["utilisationPercent"] == 111
    assert rows["nvidia.com/mig-1g.10gb"]["withinCapacity"]


def test_tenant_restricted_to_a_pool_must_fit_that_pool(prod_raw):
    prod_raw["tenants"][2]["quota"]["gpu"] = 20  # team-b may only use l4-batch: 16 GPUs
    prod_raw["tenants"][2]["experimentQuota"]["gpu"] = 20
    found = config_problems(prod_raw)
    assert any(
        m.startswith("inference-platform:tenants[2].quota.gpu: 20 of nvidia.com/gpu is more than the pools it may use (l4-batch)")
        for m in found
    ), found


def test_quota_for_a_mig_profile_no_pool_has(prod_raw):
    prod_raw["tenants"][1]["quota"]["mig"]["2g.20gb"] = 1
    found = config_problems(prod_raw)
    assert any(
        m.startswith("inference-platform:tenants[1].quota.mig[\"2g.20gb\"]: no node pool provides MIG profile '2g.20gb'")
        for m in found
    )


def test_experiment_quota_above_quota(prod_raw):
    prod_raw["tenants"][1]["experimentQuota"]["gpu"] = 9
    found = config_problems(prod_raw)
    assert any(
        m.startswith("inference-platform:tenants[1].experimentQuota.gpu: experiments may use at most the tenant's quota")
        for m in found
    )


def test_geometry_that_does_not_fit(prod_raw):
    geometry(prod_raw)["devices"][1]["profiles"] = {"3g.40gb": 2, "1g.10gb": 1}
    (message,) = config_problems(prod_raw)
    assert message.startswith(
        "inference-platform:nodePools[0].sharing.migGeometry.devices[1].profiles: 2 x 3g.40gb + 1 x 1g.10gb does not fit one "
        "H100-80GB"
    )
    assert "7/7 compute and 9/8 memory slices" in message


def test_geometry_with_unknown_profile(prod_raw):
    geometry(prod_raw)["devices"][2]["profiles"] = {"1g.5gb": 7}
    found = config_problems(prod_raw)
    assert found[0].startswith(
        "inference-platform:nodePools[0].sharing.migGeometry.devices[2].profiles: unknown MIG profile '1g.5gb' for H100-80GB"
    )


def test_geometry_must_cover_every_gpu_of_the_node(prod_raw):
    geometry(prod_raw)["devices"][0]["gpus"] = 3
    found = config_problems(prod_raw)
    assert found[0] == (
        "inference-platform:nodePools[0].sharing.migGeometry.devices: device groups cover 7 GPUs but a p5.48xlarge node has 8; "
        "the 'gpus' counts must add up to the GPUs per node"
    )


def test_mig_on_a_gpu_without_mig(prod_raw):
    prod_raw["nodePools"][1]["sharing"] = {"mode": "mig", "migConfig": "all-1g.10gb"}
    found = config_problems(prod_raw)
    assert found[0].startswith(
        "inference-platform:nodePools[1].sharing.mode: g6.12xlarge has L4-24GB GPUs, which do not support MIG"
    )


def test_bottlerocket_pools_take_whole_gpus_only(staging_raw):
    staging_raw["nodePools"][0]["amiType"] = "BOTTLEROCKET_x86_64_NVIDIA"
    found = config_problems(staging_raw)
    assert found[0].startswith("inference-platform:nodePools[0].amiType: GPU sharing is configured through the GPU Operator")


def test_model_needing_more_gpus_than_a_node_has(prod_raw):
    prod_raw["models"][0]["resources"]["gpus"] = 8  # only 4 whole GPUs per node in this geometry
    found = config_problems(prod_raw)
    assert found[0].startswith(
        "inference-platform:models[0].resources.gpus: a replica needs 8 GPUs on one node but a p5.48xlarge node"
    )


def test_model_that_cannot_reach_max_replicas_within_quota(prod_raw):
    prod_raw["models"][0]["autoscaling"]["maxReplicas"] = 9
    found = config_problems(prod_raw)
    gpu = next(m for m in found if "of nvidia.com/gpu, but" in m)
    assert gpu.startswith(
        "inference-platform:tenants[0].quota.gpu: at their peak (maxReplicas, rollouts, injected sidecars and endpoint "
        "pickers included) llama-70b (inference-platform:models[0].autoscaling.maxReplicas=9)"
    )
    # 9 replicas + 1 rollout surge, 4 GPUs each, plus 4 batch servers and their new revision's first pod.
    assert "hold 45 of nvidia.com/gpu, but tenant 'serving' has 41 for production" in gpu


def test_cpu_memory_and_pods_budgets_are_checked_too(prod_raw):
    quota = prod_raw["tenants"][0]["quota"]
    quota.update(cpu="400", memory="3000Gi", pods=20)
    found = config_problems(prod_raw)
    # 70B: 9 pods x (32 + 0.1 sidecar); 8B: 12 + 12 (its canary's 50/50 step: both versions at
    # 10, and 2 surge each) x (8 + 0.1 + 0.025 queue-proxy); 8B batch: 5 x 8.125; an endpoint picker per
    # version (the 70B's, the 8B's two, the batch 8B's): 2 replicas and 2 draining, each 2.1 CPU, 6.5Gi
    # (memory limits, its sidecar included) and one pod.
    assert any(
        m.startswith("inference-platform:tenants[0].quota.cpu: at their peak") and "hold 558.125 of cpu" in m for m in found
    )
    assert any(
        m.startswith("inference-platform:tenants[0].quota.memory: at their peak") and "hold 4786.25Gi of memory" in m
        for m in found
    )
    assert any(m.startswith("inference-platform:tenants[0].quota.pods: at their peak") and "hold 54 of pods" in m for m in found)


def test_a_single_model_over_its_tenant_budget_names_the_model_key(prod_raw):
    prod_raw["models"][2]["autoscaling"]["maxReplicas"] = 8  # llama-1b: 8 + 1 surge slices, team-a has 8
    (memory, message) = config_problems(prod_raw)
    assert "hold 174.5Gi of memory, but tenant 'team-a' has 152Gi" in memory
    assert message.startswith(
        "inference-platform:models[2].autoscaling.maxReplicas: at their peak (maxReplicas, rollouts, injected sidecars "
        "and endpoint pickers included) llama-1b"
    )
    assert "hold 9 of nvidia.com/mig-1g.10gb" in message and 'tenants[1].quota.mig["1g.10gb"]' in message


def test_the_checks_hold_every_step_the_canary_may_still_take(prod_raw):
    # Versions split the model's traffic by weight; at 10% the 8B canary at 20 replicas would fit,
    # but its 50/50 step runs both versions at 20 (plus their new revisions' first 2 pods): 44
    # slices against a quota of 27 and a pool of 36, refused now rather than half-way.
    prod_raw["models"][1]["autoscaling"]["maxReplicas"] = 20
    assert prod_raw["models"][1]["release"]["canaryWeight"] == 10
    found = config_problems(prod_raw)
    assert any("hold 44 of nvidia.com/mig-3g.40gb, but tenant 'serving' has 27" in m for m in found), found
    assert any("models of pool 'h100' need 44 of nvidia.com/mig-3g.40gb" in m for m in found), found
    # Steps that never split evenly hold less: 10% then 100% peak at 20 + 3 (+ 2), which fits.
    prod_raw["models"][1]["release"]["steps"] = [10, 100]
    validate(prod_raw)


def test_endpoint_pickers_must_fit_the_system_nodes():
    # staging: two summarizer versions and the four of team-search behind pickers, 2 replicas and 2 draining each.
    raw = raw_stack("staging")
    raw["cluster"]["eks"]["systemNodeGroup"] = {"instanceType": "m6i.xlarge", "minSize": 2, "maxSize": 4}
    (message,) = config_problems(raw)
    assert message.startswith("inference-platform:cluster.eks.systemNodeGroup: the endpoint pickers run 24 pods at peak")
    # 4 vCPU less the kubelet's and agents' reserve and a quarter of the controllers' requests
    # leaves no room for a 2.1 CPU pod.
    assert "m6i.xlarge system nodes hold 0 each" in message and "raise maxSize or choose a larger instanceType" in message
    # The default system node (m6i.2xlarge) takes them, 3 to a node beside the controllers spread over 10 (Kueue's
    # two managers among them), 2 over 9.
    raw["cluster"]["eks"]["systemNodeGroup"] = {"maxSize": 9}
    (message,) = config_problems(raw)
    assert "m6i.2xlarge system nodes hold 2 each beside the platform's controllers, 18 at maxSize 9" in message
    raw["cluster"]["eks"]["systemNodeGroup"] = {"maxSize": 10}
    validate(raw)


def test_production_keeps_room_for_the_control_planes_second_replicas():
    """In production istiod, Knative's control plane and the cluster autoscaler run twice, one pod per node: the
    system nodes hold them beside the pickers. prod with the batch labeller's server: 24 picker pods at peak."""
    raw = prod_with_labeller_server()
    raw["cluster"]["eks"]["systemNodeGroup"]["maxSize"] = 10
    (message,) = config_problems(raw)
    assert "the endpoint pickers run 24 pods at peak" in message
    assert "m6i.2xlarge system nodes hold 2 each beside the platform's controllers, 20 at maxSize 10" in message
    raw["cluster"]["eks"]["systemNodeGroup"]["maxSize"] = 12
    validate(raw)
    # Outside production the same controllers run once each: 3 pickers to a node over 10. The second replicas ask
    # 1.75 CPU in all (istiod 500m; Knative's activator 300m, autoscaler, controller and webhook 100m each and
    # net-istio's webhook 20m, each with a 100m sidecar; net-istio's controller 30m; the cluster autoscaler's 100m
    # allowance), 175m a node over 10.
    raw["cluster"]["eks"]["systemNodeGroup"]["maxSize"] = 10

    def system_cpu() -> str:
        template = stack_system_template(parse_platform_config(raw))
        assert template is not None
        return template["allocatable"]["cpu"]

    assert system_cpu() == "6190m"
    raw["environment"] = "staging"
    assert system_cpu() == "6365m"


def test_no_gpu_pool_takes_the_system_pool_label():
    raw = raw_stack("prod")
    raw["nodePools"][1]["name"] = "system"
    found = config_problems(raw)
    assert (
        "inference-platform:nodePools[1].name: 'system' is the system node group's pool label: name the GPU pool otherwise"
        in found
    )


def test_experiments_without_a_pods_budget_get_none_in_the_quota_and_in_the_check():
    """One budget, read by the quota and the check alike (platform_config/tenant_plan.py): a tenant whose
    experimentQuota states no pods has an experiment ResourceQuota of 0 pods, so its experiment models at their peak
    are refused by the check too, not left for the quota to reject at run time."""
    from components.specs.tenancy import resource_quotas
    from platform_config.tenant_plan import tenant_plans

    raw = raw_stack("staging")
    team_a = next(t for t in raw["tenants"] if t["name"] == "team-a")
    del team_a["experimentQuota"]["pods"]
    plan = tenant_plans(parse_platform_config(raw))["team-a"]
    experiment = next(q for q in resource_quotas(plan) if q["metadata"]["name"] == "team-a-experiment")
    assert plan.experiment.pods == 0 and experiment["spec"]["hard"]["pods"] == "0"
    index = [t["name"] for t in raw["tenants"]].index("team-a")
    assert any(
        "of pods, but tenant 'team-a' has 0 for experiments" in m and f"tenants[{index}].experimentQuota.pods" in m
        for m in config_problems(raw)
    )
