"""The admission and scheduling stage: LimitRange, validation, quota, Pod Security, Knative's
webhook and scheduling onto the pools, on small objects built here. On what the program renders (every stack, the
EKS system node group's template, the kinds the backends render): tests/test_admission_stacks.py."""

from __future__ import annotations

from typing import Any

from preview.admission import admit_and_schedule

NS = "team"
POOL = {
    "name": "gpu",
    "labels": {"inference.platform/pool": "gpu"},
    "taints": [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}],
    "allocatable": {"cpu": "30", "memory": "120Gi", "ephemeral-storage": "400Gi", "pods": "110", "nvidia.com/gpu": "4"},
    "maxSize": 2,
}


def namespace(level: str = "restricted", injected: bool = False) -> dict[str, Any]:
    labels = {"pod-security.kubernetes.io/enforce": level}
    if injected:
        labels["istio-injection"] = "enabled"
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS, "labels": labels}}


def limit_range(default: dict[str, str], default_request: dict[str, str] | None = None) -> dict[str, Any]:
    item = {"type": "Container", "default": default, "defaultRequest": default_request or {}}
    return {"apiVersion": "v1", "kind": "LimitRange", "metadata": {"name": "d", "namespace": NS}, "spec": {"limits": [item]}}


def quota(hard: dict[str, str], name: str = "q") -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": name, "namespace": NS}, "spec": {"hard": hard}}


SECURE = {
    "runAsNonRoot": True,
    "allowPrivilegeEscalation": False,
    "capabilities": {"drop": ["ALL"]},
    "seccompProfile": {"type": "RuntimeDefault"},
}


def pod_spec(cpu: str = "4", gpus: int = 1, limits: dict[str, str] | None = None) -> dict[str, Any]:
    resources = {
        "requests": {"cpu": cpu, "memory": "16Gi", "nvidia.com/gpu": str(gpus)},
        "limits": {"memory": "16Gi", "nvidia.com/gpu": str(gpus), **(limits or {})},
    }
    return {
        # Pod-level seccomp also covers the sidecars the cluster injects (Istio sets none).
        "securityContext": {"seccompProfile": {"type": "RuntimeDefault"}},
        "nodeSelector": {"inference.platform/pool": "gpu"},
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
        "containers": [{"name": "vllm", "image": "x:1", "resources": resources, "securityContext": dict(SECURE)}],
    }


def deployment(spec: dict[str, Any], replicas: int = 2, name: str = "server", model: str | None = None) -> dict[str, Any]:
    labels = {"inference.platform/model": model} if model else {}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "replicas": replicas,
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1}},
            "template": {"metadata": {"labels": labels}, "spec": spec},
        },
    }


def run(*objects: dict[str, Any], pools: list[dict[str, Any]] | None = None):
    return admit_and_schedule(list(objects), [POOL] if pools is None else pools)


def test_a_clean_workload_is_admitted_and_placed():
    result = run(namespace(), deployment(pod_spec()))
    assert result.findings == []
    (workload,) = result.workloads
    assert (workload.pool, workload.peak, workload.placed) == ("gpu", 3, 3)  # 2 replicas + maxSurge 1


def test_limit_range_default_cpu_limit_below_the_request_is_refused():
    # Finding 1: LimitRanger fills the missing CPU limit (1) below the 4 CPUs requested.
    result = run(namespace(), limit_range({"cpu": "1", "memory": "1Gi"}, {"cpu": "100m"}), deployment(pod_spec(cpu="4")))
    assert result.findings == ["Deployment team/server: container vllm: cpu request 4 must be less than or equal to cpu limit 1"]
    # Without a default CPU limit the same pod is admitted.
    assert run(namespace(), limit_range({"memory": "1Gi"}, {"cpu": "100m"}), deployment(pod_spec(cpu="4"))).findings == []


def test_a_request_above_its_own_limit_and_an_extended_resource_request_below_its_limit():
    spec = pod_spec(cpu="4", limits={"cpu": "2"})
    spec["containers"][0]["resources"]["requests"]["nvidia.com/gpu"] = "1"
    spec["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = "2"
    findings = run(namespace(), deployment(spec)).findings
    assert any("cpu request 4 must be less than or equal to cpu limit 2" in f for f in findings)
    assert any("nvidia.com/gpu request must equal its limit" in f for f in findings)


def test_limit_range_min_max_and_ratio():
    bounded = limit_range({"memory": "1Gi"})
    bounded["spec"]["limits"][0].update({"max": {"memory": "8Gi"}, "min": {"cpu": "8"}, "maxLimitRequestRatio": {"cpu": "2"}})
    findings = run(namespace(), bounded, deployment(pod_spec(cpu="4", limits={"cpu": "10"}))).findings
    assert any("LimitRange maximum memory 8Gi" in f for f in findings)
    assert any("LimitRange minimum cpu 8" in f for f in findings)
    assert any("cpu limit/request ratio above" in f for f in findings)


def test_quota_needs_the_resources_it_limits_to_be_stated():
    spec = pod_spec()
    del spec["containers"][0]["resources"]["limits"]["memory"]
    findings = run(namespace(), quota({"limits.memory": "100Gi"}), deployment(spec)).findings
    assert "Deployment team/server: ResourceQuota q: container vllm must specify limits.memory" in findings


def test_quota_counts_every_workload_at_peak():
    # 2 replicas + surge = 3 pods of 4 CPUs: 12 > 10.
    findings = run(namespace(), quota({"requests.cpu": "10", "pods": "3"}), deployment(pod_spec())).findings
    assert findings == ["ResourceQuota team/q: requests.cpu at peak is 12 but the quota allows 10 (server x3)"]


def test_quota_scope_by_priority_class():
    scoped = quota({"requests.nvidia.com/gpu": "0"})
    scoped["spec"]["scopeSelector"] = {
        "matchExpressions": [{"scopeName": "PriorityClass", "operator": "In", "values": ["experiments"]}]
    }
    assert run(namespace(), scoped, deployment(pod_spec())).findings == []
    spec = pod_spec()
    spec["priorityClassName"] = "experiments"
    pc = {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": "experiments"}, "value": 1}
    assert len(run(namespace(), scoped, pc, deployment(spec)).findings) == 1


def test_model_servers_take_their_peak_from_the_plan():
    # Two versions of one model, each 1..4: the plan sizes them by their traffic share (the
    # program exports it as serverPeaks); any other workload counts its maximum and its surge.
    objects = [namespace()]
    for version in ("v1", "v2"):
        d = deployment(pod_spec(), replicas=1, name=f"m-{version}", model="m")
        hpa = {
            "apiVersion": "autoscaling/v2",
            "kind": "HorizontalPodAutoscaler",
            "metadata": {"name": f"m-{version}", "namespace": NS},
            "spec": {"scaleTargetRef": {"kind": "Deployment", "name": f"m-{version}"}, "minReplicas": 1, "maxReplicas": 4},
        }
        objects += [d, hpa]
    assert sorted(w.peak for w in run(*objects).workloads) == [5, 5]
    planned = [{"namespace": NS, "name": "m-v1", "peakPods": 5}, {"namespace": NS, "name": "m-v2", "peakPods": 2}]
    result = admit_and_schedule(objects, [POOL], planned)
    assert {w.name: w.peak for w in result.workloads} == {"m-v1": 5, "m-v2": 2}


def test_pod_security_restricted():
    spec = pod_spec()
    spec["containers"][0]["securityContext"] = {"privileged": True, "capabilities": {"add": ["SYS_ADMIN"]}}
    del spec["securityContext"]
    spec["volumes"] = [{"name": "h", "hostPath": {"path": "/"}}]
    findings = run(namespace("restricted"), deployment(spec)).findings
    for expected in (
        "is privileged",
        "adds capabilities SYS_ADMIN",
        "hostPath volume h",
        "allowPrivilegeEscalation: false",
        "drop ALL",
        "non-root",
        "seccompProfile",
    ):
        assert any(expected in f for f in findings), expected
    # Baseline asks less; privileged asks nothing.
    assert not any("non-root" in f for f in run(namespace("baseline"), deployment(spec)).findings)
    assert run(namespace("privileged"), deployment(spec)).findings == []


def test_injected_sidecar_counts_and_its_annotations_size_it():
    d = deployment(pod_spec(cpu="4"))
    result = run(namespace(injected=True), quota({"requests.cpu": "12.3"}), d)
    assert result.findings == []  # 3 pods x (4 + 0.1 default sidecar CPU)
    d["spec"]["template"]["metadata"]["annotations"] = {"sidecar.istio.io/proxyCPU": "500m"}
    assert run(namespace(injected=True), quota({"requests.cpu": "12.3"}), d).findings == [
        "ResourceQuota team/q: requests.cpu at peak is 13500m but the quota allows 12300m (server x3)"
    ]


def knative_service(spec: dict[str, Any], annotations: dict[str, str] | None = None) -> dict[str, Any]:
    template_annotations = {
        "autoscaling.knative.dev/min-scale": "1",
        "autoscaling.knative.dev/max-scale": "2",
        **(annotations or {}),
    }
    return {
        "apiVersion": "serving.knative.dev/v1",
        "kind": "Service",
        "metadata": {"name": "ksvc", "namespace": NS},
        "spec": {"template": {"metadata": {"annotations": template_annotations}, "spec": spec}},
    }


def test_knative_webhook_restrictions():
    spec = pod_spec()
    spec["containers"][0]["lifecycle"] = {"preStop": {"exec": {"command": ["sleep", "1"]}}}
    spec["terminationGracePeriodSeconds"] = 300
    findings = run(namespace(), knative_features("kubernetes.podspec-tolerations"), knative_service(spec)).findings
    assert any("field lifecycle" in f for f in findings)
    assert any("terminationGracePeriodSeconds" in f for f in findings)
    assert any("nodeSelector unless config-features enables kubernetes.podspec-nodeselector" in f for f in findings)
    assert not any("tolerations" in f for f in findings)


def knative_features(*flags: str) -> dict[str, Any]:
    features = {flag: "enabled" for flag in flags}
    return {
        "apiVersion": "operator.knative.dev/v1beta1",
        "kind": "KnativeServing",
        "metadata": {"name": "k"},
        "spec": {"config": {"features": features}},
    }


def test_knative_rollout_surge_and_queue_proxy():
    # min 1, max 2: peak is 2 + a new revision's first pod; queue-proxy adds 25m of CPU.
    features = knative_features(
        "kubernetes.podspec-nodeselector", "kubernetes.podspec-tolerations", "kubernetes.podspec-securitycontext"
    )
    result = run(namespace(), features, quota({"requests.cpu": "12.075"}), knative_service(pod_spec(cpu="4")))
    assert result.findings == []
    assert result.workloads[0].peak == 3


def test_scheduling_needs_a_pool_with_the_labels_and_tolerations():
    untolerated = pod_spec()
    untolerated["tolerations"] = []
    assert run(namespace(), deployment(untolerated)).findings == [
        "Deployment team/server: does not tolerate pool gpu's taint nvidia.com/gpu=present:NoSchedule"
    ]
    nowhere = pod_spec()
    nowhere["nodeSelector"] = {"inference.platform/pool": "h200"}
    assert run(namespace(), deployment(nowhere)).findings == [
        "Deployment team/server: no node pool has the labels of its nodeSelector {'inference.platform/pool': 'h200'}"
    ]


def test_pods_at_peak_must_bin_pack_onto_the_pool_at_max_size():
    # Finding 14's shape: 4 GPUs per node, 2 nodes; 7 replicas + 1 surge of 1 GPU fit, of 2 do not.
    assert run(namespace(), deployment(pod_spec(gpus=1), replicas=7)).findings == []
    findings = run(namespace(), deployment(pod_spec(gpus=2), replicas=4)).findings
    assert len(findings) == 1 and "1 of its 5 pods at peak do not fit pool gpu at maxSize 2" in findings[0]
    # CPU runs out before GPUs: 8 pods x 8 CPUs on two 30-CPU nodes.
    findings = run(namespace(), deployment(pod_spec(cpu="8", gpus=1), replicas=7)).findings
    assert "short of" in findings[0] and "cpu" in findings[0]


def test_knative_volumes_and_security_need_their_flags():
    spec = pod_spec()
    spec["volumes"] = [{"name": "data", "persistentVolumeClaim": {"claimName": "x"}}, {"name": "info", "downwardAPI": {}}]
    spec["containers"][0]["securityContext"]["capabilities"]["add"] = ["NET_BIND_SERVICE"]
    findings = run(
        namespace(), knative_features("kubernetes.podspec-nodeselector", "kubernetes.podspec-tolerations"), knative_service(spec)
    ).findings
    assert any(
        "persistentVolumeClaim volume data unless config-features enables kubernetes.podspec-persistent-volume-claim" in f
        for f in findings
    )
    assert any("refuses downwardAPI volume info" in f for f in findings)
    assert any("capabilities.add unless kubernetes.containerspec-addcapabilities" in f for f in findings)
    # The pod's seccompProfile alone needs the securitycontext flag, unless secure-pod-defaults is on.
    assert any("securityContext fields seccompProfile" in f for f in findings)


def test_limit_request_ratio_needs_a_request():
    # (A limit with no request gets the limit as its request by API defaulting; a zero request
    # stays, and no ratio can be had to it.)
    bounded = limit_range({"memory": "1Gi"})
    bounded["spec"]["limits"][0]["maxLimitRequestRatio"] = {"cpu": "2"}
    spec = pod_spec(cpu="0", limits={"cpu": "4"})
    findings = run(namespace(), bounded, deployment(spec)).findings
    assert any("maxLimitRequestRatio on cpu needs a non-zero cpu request" in f for f in findings)


def test_a_gpu_pod_without_a_node_selector_is_a_finding():
    spec = pod_spec()
    del spec["nodeSelector"]
    result = run(namespace(), deployment(spec))
    assert result.findings == ["Deployment team/server: no nodeSelector: a model server names the pool it runs on"]
    assert result.left_to_cluster_scheduler == [] and result.unchecked_placement_note == ""


def cpu_pod_spec(cpu: str = "1", memory: str = "2Gi") -> dict[str, Any]:
    """A pod like the endpoint picker's on an existing cluster: no GPU, no nodeSelector, no
    tolerations."""
    return {
        "securityContext": {"seccompProfile": {"type": "RuntimeDefault"}},
        "containers": [
            {
                "name": "epp",
                "image": "x:1",
                "resources": {"requests": {"cpu": cpu, "memory": memory}, "limits": {"memory": memory}},
                "securityContext": dict(SECURE),
            }
        ],
    }


def test_a_cpu_pod_without_a_node_selector_and_no_pool_it_tolerates_is_left_to_the_cluster():
    # Kubeconfig mode: the only pools known are GPU pools, tainted; the cluster's own nodes are not described.
    result = run(namespace(), deployment(cpu_pod_spec(), name="picker"))
    assert result.findings == []
    (workload,) = result.workloads
    assert (workload.pool, workload.placed, workload.left_to_cluster_scheduler) == (None, 0, True)
    assert result.left_to_cluster_scheduler == [workload]
    assert result.unchecked_placement_note == (
        "1 without a nodeSelector or GPU placed by the cluster's scheduler on its own nodes, unchecked (Deployment team/picker)"
    )


def test_a_cpu_pod_without_a_node_selector_goes_to_a_pool_it_tolerates_and_must_fit():
    untainted = {**POOL, "name": "cpu", "labels": {"inference.platform/pool": "cpu"}, "taints": []}
    result = run(namespace(), deployment(cpu_pod_spec(), name="picker"), pools=[POOL, untainted])
    assert result.findings == [] and result.left_to_cluster_scheduler == []
    assert (result.workloads[0].pool, result.workloads[0].placed) == ("cpu", 3)
    # 3 pods of 40 CPUs on two 30-CPU nodes: checked like any other pod.
    findings = run(namespace(), deployment(cpu_pod_spec(cpu="40"), name="picker"), pools=[POOL, untainted]).findings
    assert len(findings) == 1 and "3 of its 3 pods at peak do not fit pool cpu" in findings[0]


def test_the_sidecar_gets_no_limit_range_defaults():
    # Istio injects after LimitRanger: a sidecar with no memory limit is refused by a quota
    # that limits memory, whatever the LimitRange's default.
    d = deployment(pod_spec())
    d["spec"]["template"]["metadata"]["annotations"] = {"sidecar.istio.io/proxyCPU": "100m"}
    findings = run(namespace(injected=True), limit_range({"memory": "1Gi"}), quota({"limits.memory": "1000Gi"}), d).findings
    assert "Deployment team/server: ResourceQuota q: container istio-proxy must specify limits.memory" in findings


def test_a_missing_priority_class_is_found():
    spec = pod_spec()
    spec["priorityClassName"] = "gold"
    assert run(namespace(), deployment(spec)).findings == ["Deployment team/server: PriorityClass gold does not exist"]


def sidecars(result) -> list[str]:
    (workload,) = result.workloads
    return [c["name"] for c in workload.containers if c["name"] == "istio-proxy"]


def template_metadata(d: dict[str, Any], labels: dict[str, str] | None = None, annotations: dict[str, str] | None = None):
    d["spec"]["template"]["metadata"] = {"labels": labels or {}, "annotations": annotations or {}}
    return d


def test_istio_injection_opt_out_by_label_or_legacy_annotation():
    # Opted out, the pod gets no sidecar: 3 pods x 4 CPUs fit a 12-CPU quota exactly.
    for opt_out in ({"labels": {"sidecar.istio.io/inject": "false"}}, {"annotations": {"sidecar.istio.io/inject": "false"}}):
        d = template_metadata(deployment(pod_spec(cpu="4")), **opt_out)
        result = run(namespace(injected=True), quota({"requests.cpu": "12"}), d)
        assert (sidecars(result), result.findings) == ([], []), opt_out
    # Without the opt-out the sidecar's 100m is counted.
    result = run(namespace(injected=True), quota({"requests.cpu": "12"}), deployment(pod_spec(cpu="4")))
    assert sidecars(result) == ["istio-proxy"] and len(result.findings) == 1


def test_istio_injection_precedence():
    def injected(ns_labels: dict[str, str], labels=None, annotations=None, ns_name: str = NS) -> bool:
        ns = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns_name, "labels": ns_labels}}
        d = template_metadata(deployment(pod_spec()), labels, annotations)
        d["metadata"]["namespace"] = ns_name
        return sidecars(admit_and_schedule([ns, d], [POOL])) == ["istio-proxy"]

    on = {"istio-injection": "enabled"}
    inject = "sidecar.istio.io/inject"
    assert injected(on)
    # The label is preferred to the legacy annotation, both ways.
    assert injected(on, labels={inject: "true"}, annotations={inject: "false"})
    assert not injected(on, labels={inject: "false"}, annotations={inject: "true"})
    # An unlabelled namespace: only the pod's label asks the webhook, not the annotation.
    assert injected({}, labels={inject: "true"})
    assert not injected({}, annotations={inject: "true"})
    assert not injected({})
    # A namespace that disables injection wins over the pod's label.
    assert not injected({"istio-injection": "disabled"}, labels={inject: "true"})
    # The revision label selects the default revision's webhook; istiod skips kube-system.
    assert injected({"istio.io/rev": "default"})
    assert not injected({"istio.io/rev": "canary"})
    assert not injected(on, ns_name="kube-system")
