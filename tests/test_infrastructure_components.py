"""GPU infrastructure and tenancy components, evaluated under the mock engine."""

from __future__ import annotations

import json

import pytest
import yaml

from .helpers import Evaluated

RELEASE = "kubernetes:helm.sh/v3:Release"


@pytest.fixture(scope="module")
def prod(request) -> Evaluated:
    from .helpers import raw_stack

    return Evaluated(raw_stack("prod"), shared=True)


@pytest.fixture(scope="module")
def dev() -> Evaluated:
    from .helpers import raw_stack

    return Evaluated(raw_stack("dev"), shared=True)


def release(evaluated: Evaluated, name: str) -> dict:
    (found,) = [r for r in evaluated.of_type(RELEASE) if r["inputs"]["name"] == name]
    return found["inputs"]


def test_eks_cluster_pinned_version_api_auth_and_admin_access(prod):
    cluster = prod.one("aws:eks/cluster:Cluster", "cluster-eks")["inputs"]
    assert cluster["version"] == "1.33" and cluster["name"] == "inference-prod"
    assert cluster["accessConfig"] == {"authenticationMode": "API", "bootstrapClusterCreatorAdminPermissions": False}
    assert cluster["vpcConfig"]["endpointPublicAccess"] is False and len(cluster["vpcConfig"]["subnetIds"]) == 3
    role = prod.one("aws:iam/role:Role", "cluster-control-plane")["inputs"]
    assert json.loads(role["assumeRolePolicy"])["Statement"][0]["Principal"] == {"Service": "eks.amazonaws.com"}
    entry = prod.one("aws:eks/accessEntry:AccessEntry", "cluster-admin-0")["inputs"]
    assert entry["principalArn"] == "arn:aws:iam::123456789012:role/platform-admin"
    association = prod.one("aws:eks/accessPolicyAssociation:AccessPolicyAssociation", "cluster-admin-0-policy")["inputs"]
    assert association["policyArn"].endswith("AmazonEKSClusterAdminPolicy") and association["accessScope"] == {"type": "cluster"}


def test_pod_identity_or_irsa(prod, prod_raw):
    assert prod.one("aws:eks/addon:Addon", "cluster-pod-identity-agent")["inputs"]["addonName"] == "eks-pod-identity-agent"
    association = prod.of_type("aws:eks/podIdentityAssociation:PodIdentityAssociation")
    # The controllers', every model's servers (each streams the weight mirror's copy of its revision; the 8B's and
    # its batch model's also read its LoRA adapters from S3, each with a role of its own), the mirror's per tenant
    # (it writes the tenant's copies: team-b's of its batch jobs' model too) and each batch job's (it reads its input
    # and the mirror's copy of its model, and writes its output in S3).
    assert sorted(a["inputs"]["serviceAccount"] for a in association) == [
        "aws-load-balancer-controller",
        "batch-review-labels",
        "batch-ticket-labels",
        "cluster-autoscaler",
        "llama-1b-weights",
        "llama-70b-weights",
        "llama-8b-batch-weights",
        "llama-8b-weights",
        "mirror-serving",
        "mirror-team-a",
        "mirror-team-b",
    ]
    prod_raw["cluster"]["eks"]["workloadIdentity"] = "irsa"
    irsa = Evaluated(prod_raw)
    provider = irsa.one("aws:iam/openIdConnectProvider:OpenIdConnectProvider", "cluster-oidc")["inputs"]
    assert provider["clientIdLists"] == ["sts.amazonaws.com"]
    assert not irsa.of_type("aws:eks/podIdentityAssociation:PodIdentityAssociation")
    trust = json.loads(irsa.one("aws:iam/role:Role", "cluster-autoscaler-identity-role")["inputs"]["assumeRolePolicy"])
    condition = trust["Statement"][0]["Condition"]["StringEquals"]
    assert any(
        key.endswith(":sub") and value == "system:serviceaccount:kube-system:cluster-autoscaler"
        for key, value in condition.items()
    )
    # The mirror's accounts carry their roles for IRSA, as the servers' do.
    mirror_account = irsa.k8s("ServiceAccount", "mirror-serving", "model-weights")
    assert mirror_account["metadata"]["annotations"]["eks.amazonaws.com/role-arn"].startswith("arn:aws:iam::")
    values = release(irsa, "cluster-autoscaler")["values"]
    assert values["rbac"]["serviceAccount"]["annotations"]["eks.amazonaws.com/role-arn"].startswith("arn:aws:iam::")
    # The role annotations are keys the charts read (their annotation maps are passed on whole).
    from preview.upstream import VERIFIED, Facts, check_release_values, facts_dir

    for name in ("cluster-autoscaler", "aws-load-balancer-controller"):
        rendered = release(irsa, name)
        assert check_release_values(Facts(facts_dir()), rendered).status == VERIFIED, name


def test_existing_cluster_by_kubeconfig_creates_no_aws_resources(dev):
    assert not [r for r in dev.resources if r["type"].startswith("aws:")]
    provider = dev.one("pulumi:providers:kubernetes", "kubernetes")["inputs"]
    assert provider["context"] == "dev"
    # Every Kubernetes resource goes through that one provider.
    for record in dev.records:
        if record.custom and record.type.startswith("kubernetes:"):
            assert record.provider and record.provider.endswith("::kubernetes"), record.urn


def test_gpu_node_group(prod):
    group = prod.one("aws:eks/nodeGroup:NodeGroup", "h100-nodes")["inputs"]
    assert group["instanceTypes"] == ["p5.48xlarge"] and group["amiType"] == "AL2023_x86_64_NVIDIA"
    assert group["capacityType"] == "ON_DEMAND" and "diskSize" not in group  # sized by the launch template
    template = prod.one("aws:ec2/launchTemplate:LaunchTemplate", "h100-nodes")["inputs"]
    assert group["launchTemplate"]["id"] == "h100-nodes-id"
    assert template["blockDeviceMappings"] == [
        {
            "deviceName": "/dev/xvda",
            "ebs": {"volumeSize": 1000, "volumeType": "gp3", "encrypted": "true", "deleteOnTermination": "true"},
        }
    ]
    assert group["scalingConfig"] == {"minSize": 2, "maxSize": 9, "desiredSize": 2}
    assert group["taints"] == [{"key": "nvidia.com/gpu", "value": "present", "effect": "NO_SCHEDULE"}]
    assert group["labels"]["nvidia.com/mig.config"] == "h100-serving-mix"
    assert group["labels"]["nvidia.com/device-plugin.config"] == "whole-gpus"
    batch = prod.one("aws:eks/nodeGroup:NodeGroup", "l4-batch-nodes")["inputs"]
    assert batch["capacityType"] == "SPOT" and batch["scalingConfig"]["minSize"] == 0
    # Finding 7: the label the autoscaler's AWS provider reads to wait for the GPUs.
    assert group["labels"]["k8s.amazonaws.com/accelerator"] == "nvidia-h100"
    assert batch["labels"]["k8s.amazonaws.com/accelerator"] == "nvidia-l4"


def test_asg_tags_let_the_autoscaler_scale_from_zero(prod):
    tags = {
        t["inputs"]["tag"]["key"]: t["inputs"]["tag"]["value"]
        for t in prod.children("inference-platform:gpu-node-pool:GpuNodePool", "h100")
        if t["type"] == "aws:autoscaling/tag:Tag"
    }
    prefix = "k8s.io/cluster-autoscaler"
    assert tags[f"{prefix}/enabled"] == "true" and tags[f"{prefix}/inference-prod"] == "owned"
    assert tags[f"{prefix}/node-template/resources/nvidia.com/gpu"] == "4"
    assert tags[f"{prefix}/node-template/resources/nvidia.com/mig-3g.40gb"] == "4"
    assert tags[f"{prefix}/node-template/resources/nvidia.com/mig-1g.10gb"] == "14"
    assert tags[f"{prefix}/node-template/taint/nvidia.com/gpu"] == "present:NoSchedule"
    assert tags[f"{prefix}/node-template/label/nvidia.com/mig.config"] == "h100-serving-mix"
    # Finding 7: also while the group has no nodes.
    assert tags[f"{prefix}/node-template/label/k8s.amazonaws.com/accelerator"] == "nvidia-h100"
    asg = {t["inputs"]["autoscalingGroupName"] for t in prod.of_type("aws:autoscaling/tag:Tag")}
    assert asg == {"eks-inference-prod-h100-asg", "eks-inference-prod-l4-batch-asg"}


def test_cluster_autoscaler_release(prod):
    ca = release(prod, "cluster-autoscaler")
    # Finding 4: the chart built for 1.33 (appVersion 1.33.0), not 9.43.1 (1.31) with a 1.33 image.
    assert ca["chart"] == "cluster-autoscaler" and ca["version"] == "9.51.0"
    assert ca["repositoryOpts"] == {"repo": "https://kubernetes.github.io/autoscaler"}
    assert ca["values"]["autoDiscovery"] == {"clusterName": "inference-prod"}
    assert ca["values"]["image"]["tag"] == "v1.33.0"
    policy = json.loads(prod.one("aws:iam/rolePolicy:RolePolicy", "cluster-autoscaler-identity-policy")["inputs"]["policy"])
    scoped = policy["Statement"][1]
    assert scoped["Action"] == ["autoscaling:SetDesiredCapacity", "autoscaling:TerminateInstanceInAutoScalingGroup"]
    assert scoped["Condition"] == {"StringEquals": {"aws:ResourceTag/k8s.io/cluster-autoscaler/inference-prod": "owned"}}


def test_gpu_operator_values_match_the_ami(prod):
    operator = release(prod, "gpu-operator")
    assert operator["version"] == "v25.10.1" and operator["repositoryOpts"]["repo"] == "https://helm.ngc.nvidia.com/nvidia"
    values = operator["values"]
    assert values["driver"] == {"enabled": False} and values["toolkit"] == {"enabled": False}
    # Finding 13: operator.defaultRuntime is read by nothing in the chart.
    assert "operator" not in values
    assert values["mig"] == {"strategy": "mixed"}
    assert values["migManager"]["config"] == {"name": "mig-parted-config", "default": "all-disabled"}
    assert values["devicePlugin"]["config"] == {"name": "device-plugin-config", "default": "whole-gpus"}
    assert values["dcgmExporter"]["enabled"] is True


def test_mig_parted_config_holds_the_custom_geometry(prod):
    config = yaml.safe_load(prod.k8s("ConfigMap", "mig-parted-config", "gpu-operator")["data"]["config.yaml"])
    assert config["version"] == "v1"
    assert config["mig-configs"]["h100-serving-mix"] == [
        {"devices": [0, 1, 2, 3], "mig-enabled": False},
        {"devices": [4, 5], "mig-enabled": True, "mig-devices": {"3g.40gb": 2}},
        {"devices": [6, 7], "mig-enabled": True, "mig-devices": {"1g.10gb": 7}},
    ]
    assert config["mig-configs"]["all-disabled"] == [{"devices": "all", "mig-enabled": False}]


def test_time_slicing_config(dev):
    data = dev.k8s("ConfigMap", "device-plugin-config", "gpu-operator")["data"]
    sliced = yaml.safe_load(data["time-sliced-2"])
    assert sliced["version"] == "v1"
    assert sliced["sharing"]["timeSlicing"] == {
        "renameByDefault": False,
        "failRequestsGreaterThanOne": True,
        "resources": [{"name": "nvidia.com/gpu", "replicas": 2}],
    }
    assert "sharing" not in yaml.safe_load(data["whole-gpus"])


def test_dcgm_service_monitor(prod):
    monitor = prod.k8s("ServiceMonitor", "dcgm-exporter", "gpu-operator")
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    assert monitor["spec"]["selector"] == {"matchLabels": {"app": "nvidia-dcgm-exporter"}}
    assert monitor["spec"]["endpoints"][0]["honorLabels"] is True


def test_pools_export_what_a_node_advertises(prod):
    assert prod.outputs["poolAdvertisedPerNode"] == {
        "h100": {"nvidia.com/gpu": 4, "nvidia.com/mig-1g.10gb": 14, "nvidia.com/mig-3g.40gb": 4},
        "l4-batch": {"nvidia.com/gpu": 4},
    }
    pool = prod.one("inference-platform:gpu-node-pool:GpuNodePool", "l4-batch")
    assert pool["outputs"]["advertisedPerNode"] == {"nvidia.com/gpu": 4} and pool["outputs"]["gpuModel"] == "L4-24GB"


def test_no_helm_chart_resources_that_shell_out_at_preview(prod, dev):
    for evaluated in (prod, dev):
        assert not evaluated.of_type("kubernetes:helm.sh/v3:Chart")


def test_priority_classes(prod):
    production = prod.k8s("PriorityClass", "inference-production")
    experiment = prod.k8s("PriorityClass", "inference-experiment")
    assert (production["value"], production["preemptionPolicy"], production["globalDefault"]) == (
        1000,
        "PreemptLowerPriority",
        False,
    )
    assert (experiment["value"], experiment["preemptionPolicy"], experiment["globalDefault"]) == (100, "Never", False)


def test_tenant_namespace(prod):
    labels = prod.k8s("Namespace", "team-a")["metadata"]["labels"]
    assert labels["istio-injection"] == "enabled"
    assert labels["pod-security.kubernetes.io/enforce"] == "restricted"


def test_tenant_quotas_by_priority_class(prod):
    total = prod.k8s("ResourceQuota", "team-a-total", "team-a")["spec"]
    assert total["hard"] == {
        "requests.nvidia.com/gpu": "4",
        "requests.nvidia.com/mig-1g.10gb": "8",
        # Slices team-a was not granted are listed at 0: an unlisted resource is unlimited.
        "requests.nvidia.com/mig-3g.40gb": "0",
        "requests.cpu": "64",
        "requests.memory": "200Gi",
        "limits.memory": "200Gi",
        "pods": "20",
    }
    assert "scopeSelector" not in total
    production = prod.k8s("ResourceQuota", "team-a-production", "team-a")["spec"]
    assert production["scopeSelector"]["matchExpressions"] == [
        {"scopeName": "PriorityClass", "operator": "In", "values": ["inference-production"]}
    ]
    assert production["hard"]["requests.nvidia.com/gpu"] == "3" and production["hard"]["pods"] == "14"
    experiment = prod.k8s("ResourceQuota", "team-a-experiment", "team-a")["spec"]
    assert experiment["scopeSelector"]["matchExpressions"][0]["values"] == ["inference-experiment"]
    assert experiment["hard"]["requests.nvidia.com/gpu"] == "1" and experiment["hard"]["requests.nvidia.com/mig-1g.10gb"] == "0"
    unclassified = prod.k8s("ResourceQuota", "team-a-unclassified", "team-a")["spec"]
    assert unclassified["scopeSelector"]["matchExpressions"][0]["operator"] == "NotIn"
    assert set(unclassified["hard"].values()) == {"0"}


def test_tenant_limit_range_network_policies_and_rbac(prod):
    assert prod.k8s("LimitRange", "team-a-defaults", "team-a")["spec"]["limits"][0]["defaultRequest"] == {
        "cpu": "100m",
        "memory": "256Mi",
    }
    deny = prod.k8s("NetworkPolicy", "default-deny-ingress", "team-a")["spec"]
    assert deny == {"podSelector": {}, "policyTypes": ["Ingress"]}
    mesh = prod.k8s("NetworkPolicy", "allow-mesh-ingress", "team-a")["spec"]["ingress"]
    assert mesh == [{"from": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "istio-system"}}}]}]
    assert prod.k8s("NetworkPolicy", "allow-same-namespace", "team-a")["spec"]["ingress"] == [{"from": [{"podSelector": {}}]}]
    assert prod.k8s("NetworkPolicy", "allow-monitoring", "team-a")
    binding = prod.k8s("RoleBinding", "team-a-tenant-members", "team-a")
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "team-a-tenant"}
    assert binding["subjects"] == [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "team-a-developers"}]


def test_every_child_is_parented_and_named_after_its_component(prod):
    urns = {r["urn"]: r for r in prod.resources}
    for resource in prod.resources:
        if resource["type"] == "pulumi:pulumi:Stack":
            continue
        assert resource["parent"] in urns, resource["urn"]


def test_vpc_cni_enforces_network_policies(prod, dev):
    # Finding 11: the add-on ships with enforcement off; the tenants' NetworkPolicies need it.
    addon = prod.one("aws:eks/addon:Addon", "cluster-vpc-cni")["inputs"]
    assert addon["addonName"] == "vpc-cni" and json.loads(addon["configurationValues"]) == {"enableNetworkPolicy": "true"}
    assert addon["resolveConflictsOnUpdate"] == "OVERWRITE"
    assert not dev.of_type("aws:eks/addon:Addon")


def test_the_gateway_waits_for_the_load_balancer_controller(prod):
    # Finding 6: the controller's Service webhook must be up when the gateway's Service is made.
    (controller,) = [r for r in prod.records if r.name == "load-balancer-controller-release"]
    (gateway,) = [r for r in prod.records if r.name == "mesh-gateway"]
    assert controller.urn in gateway.dependencies
    role = prod.one("aws:iam/rolePolicy:RolePolicy", "load-balancer-controller-identity-policy")
    assert "elasticloadbalancing:ModifyListenerAttributes" in role["inputs"]["policy"]


def test_knative_services_wait_until_knative_serving_and_its_webhook_are_ready(prod):
    """The KnativeServing resource carries `pulumi.com/waitFor: condition=Ready` (the operator reports Ready only once
    every Deployment of Serving's manifest is available, the webhook included: knative/operator knative-v1.23.0
    knativeserving_lifecycle.go, deployments.go), and every model's Knative Service depends on it, so a first
    `pulumi up` never sends a Knative Service that Knative's webhook cannot yet admit."""
    (serving,) = [r for r in prod.records if r.name == "knative-serving-serving"]
    assert serving.inputs["metadata"]["annotations"] == {"pulumi.com/waitFor": "condition=Ready"}
    services = [r for r in prod.records if r.type == "kubernetes:serving.knative.dev/v1:Service"]
    assert services, "prod serves Knative models"
    for service in services:
        assert serving.urn in service.dependencies, service.name


def test_the_load_balancer_controller_registers_no_webhook_on_every_service(prod):
    """The controller's chart (v3.5.0) would register a Service webhook with failurePolicy Fail for every Service,
    which refuses any Service created before the controller is ready on a first `pulumi up`; the platform turns it
    off (a key the chart reads, per the upstream facts), and the gateway's Service still names the controller by
    its annotations."""
    from preview.upstream import Facts, facts_dir

    release = prod.one("kubernetes:helm.sh/v3:Release", "load-balancer-controller-release")
    assert release["inputs"]["values"]["enableServiceMutatorWebhook"] is False
    chart = Facts(facts_dir()).chart("aws-load-balancer-controller", "3.5.0")
    assert chart is not None and chart.reads("enableServiceMutatorWebhook")
    gateway = prod.one("kubernetes:helm.sh/v3:Release", "mesh-gateway")["inputs"]["values"]["service"]["annotations"]
    assert gateway["service.beta.kubernetes.io/aws-load-balancer-type"] == "external"
    assert gateway["service.beta.kubernetes.io/aws-load-balancer-nlb-target-type"] == "ip"
