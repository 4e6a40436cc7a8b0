"""The ways around the policy pack that issue 12 found, each with a violating and a compliant case, the pack's
validators called as the policy SDK's analyzer calls them (tests/policy_harness.py, held to the pack running as its
own process by test_policies.py): with the pack's defaults, and with a policy config. Here: hardening for every pod,
Knative's and the HPA's floors in production, preStop, disruption budgets, quotas and the latency class; the others
in tests/test_policy_bypasses_*.py."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from platform_config.pins import ENVOY_PROXY
from preview.engine import RecordedResource

from . import policy_helpers
from .helpers import PROJECT
from .policy_helpers import DEPLOYMENT, HPA, KSVC, NOTHING, analyze, analyze_stack, both, find, stack_with, vllm

# The policy tests' module fixtures (tests/policy_helpers.py), bound here for pytest to find.
baseline, harness, configured_harness = policy_helpers.baseline, policy_helpers.harness, policy_helpers.configured_harness


FAST_AND_SLOW = [{"type": "Percent", "value": 50, "periodSeconds": 60}, {"type": "Pods", "value": 8, "periodSeconds": 60}]


# --- hardening for every pod --------------------------------------------------------------------


def plain_deployment(**pod: Any) -> RecordedResource:
    """A Deployment that uses no GPU: what a tenant or an add-on could declare beside the models
    (its image one of the repositories the pack allows by default)."""
    container = {
        "name": "web",
        "image": ENVOY_PROXY.image,
        "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
        "ports": [{"containerPort": 8080}],
    }
    spec = {"containers": [container], **pod}
    inputs = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "team-a"},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "web"}}, "template": {"metadata": {}, "spec": spec}},
    }
    urn = f"urn:pulumi:prod::{PROJECT}::{DEPLOYMENT}::web"
    return RecordedResource(DEPLOYMENT, "web", urn, None, True, None, inputs, copy.deepcopy(inputs))


def container_of(record: RecordedResource) -> dict[str, Any]:
    return record.inputs["spec"]["template"]["spec"]["containers"][0]


@pytest.mark.parametrize(
    "change",
    [
        lambda r: container_of(r)["securityContext"]["capabilities"].update(add=["SYS_ADMIN"]),
        lambda r: container_of(r)["ports"][0].update(hostPort=8080),
        lambda r: r.inputs["spec"]["template"]["spec"].update(hostNetwork=True),
        lambda r: r.inputs["spec"]["template"]["spec"].update(hostPID=True),
        lambda r: r.inputs["spec"]["template"]["spec"].update(hostIPC=True),
        lambda r: container_of(r)["securityContext"].update(privileged=True),
        lambda r: container_of(r)["securityContext"].update(allowPrivilegeEscalation=True),
        lambda r: container_of(r)["securityContext"].update(seLinuxOptions={"type": "spc_t"}),
        lambda r: r.inputs["spec"]["template"]["spec"].update(securityContext={"seLinuxOptions": {"user": "system_u"}}),
        lambda r: container_of(r)["securityContext"].update(seLinuxOptions={"role": "sysadm_r"}),
        lambda r: r.inputs["spec"]["template"]["spec"].update(
            ephemeralContainers=[{"name": "debug", "image": ENVOY_PROXY.image, "securityContext": {}}]
        ),
        lambda r: r.inputs["spec"]["template"]["spec"].update(volumes=[{"name": "root", "hostPath": {"path": "/"}}]),
        # The rest of the baseline (kubernetes/pod-security-admission v0.33.0 policy/).
        lambda r: container_of(r)["securityContext"].update(appArmorProfile={"type": "Unconfined"}),
        lambda r: r.inputs["spec"]["template"]["spec"].update(securityContext={"seccompProfile": {"type": "Unconfined"}}),
        lambda r: container_of(r)["securityContext"].update(procMount="Unmasked"),
        lambda r: container_of(r)["securityContext"].update(windowsOptions={"hostProcess": True}),
        lambda r: r.inputs["spec"]["template"]["spec"].update(
            securityContext={"sysctls": [{"name": "kernel.msgmax", "value": "65536"}]}
        ),
        lambda r: r.inputs["spec"]["template"]["metadata"].update(
            annotations={"container.apparmor.security.beta.kubernetes.io/web": "unconfined"}
        ),
        lambda r: r.inputs["spec"]["template"]["metadata"].update(
            annotations={"seccomp.security.alpha.kubernetes.io/pod": "unconfined"}
        ),
    ],
    ids=[
        "capabilities-add",
        "host-port",
        "host-network",
        "host-pid",
        "host-ipc",
        "privileged",
        "privilege-escalation",
        "selinux-type",
        "selinux-user",
        "selinux-role",
        "ephemeral-container",
        "host-path",
        "apparmor-unconfined",
        "seccomp-unconfined",
        "proc-mount-unmasked",
        "windows-host-process",
        "unsafe-sysctl",
        "apparmor-annotation-unconfined",
        "seccomp-annotation-unconfined",
    ],
)
def test_every_pod_meets_the_baseline(harness, change):
    record = plain_deployment()
    assert analyze(harness, record) == NOTHING
    change(record)
    assert analyze(harness, record) == {"pod-security-baseline": "mandatory"}


@pytest.mark.parametrize(
    "change",
    [
        lambda r: container_of(r)["securityContext"]["capabilities"].update(add=["NET_BIND_SERVICE"]),
        lambda r: container_of(r)["securityContext"].update(seLinuxOptions={"type": "container_t", "level": "s0:c1,c2"}),
        lambda r: r.inputs["spec"]["template"]["spec"].update(hostUsers=False),
        lambda r: container_of(r)["ports"][0].update(hostPort=0),
        lambda r: container_of(r)["securityContext"].update(seccompProfile={"type": "RuntimeDefault"}, procMount="Default"),
        lambda r: r.inputs["spec"]["template"]["spec"].update(
            securityContext={"sysctls": [{"name": "net.ipv4.tcp_keepalive_time", "value": "60"}]}
        ),
        lambda r: r.inputs["spec"]["template"]["metadata"].update(
            annotations={"container.apparmor.security.beta.kubernetes.io/web": "runtime/default"}
        ),
    ],
    ids=[
        "net-bind-service",
        "selinux-container-type",
        "user-namespace",
        "host-port-0",
        "runtime-default-profiles",
        "safe-sysctl",
        "apparmor-annotation-runtime-default",
    ],
)
def test_what_the_baseline_allows(harness, change):
    record = plain_deployment()
    change(record)
    assert analyze(harness, record) == NOTHING


def test_gpu_pods_meet_the_baseline_too(harness, baseline):
    record = find(baseline, KSVC, "llama-8b-v1-knative-service")
    vllm(record)["securityContext"]["capabilities"]["add"] = ["SYS_PTRACE"]
    assert analyze(harness, record) == {"pod-security-baseline": "mandatory"}


# --- Knative floors in production ---------------------------------------------------------------


def template_annotations(record: RecordedResource) -> dict[str, str]:
    return record.inputs["spec"]["template"]["metadata"]["annotations"]


def vllm_args(record: RecordedResource) -> list[str]:
    (container,) = [c for c in record.inputs["spec"]["template"]["spec"]["containers"] if c["name"] == "vllm"]
    return container["args"]


@pytest.mark.parametrize(
    "change",
    [
        lambda r: template_annotations(r).update({"autoscaling.knative.dev/scale-down-delay": "0s"}),
        lambda r: template_annotations(r).pop("autoscaling.knative.dev/scale-down-delay"),
        lambda r: template_annotations(r).update({"autoscaling.knative.dev/window": "6s"}),
        lambda r: template_annotations(r).update({"autoscaling.knative.dev/window": "a minute"}),
    ],
    ids=["no-delay", "delay-unset", "short-window", "window-not-a-duration"],
)
def test_knative_floors_in_production(harness, configured_harness, baseline, change):
    record = find(baseline, KSVC, "batch-labeller-v1-knative-service")
    assert analyze(harness, record) == NOTHING
    change(record)
    assert analyze(harness, record) == {"knative-autoscaling": "mandatory"}
    # A stack the pack's config does not call production keeps Knative's own defaults.
    assert analyze(configured_harness, record) == NOTHING


@pytest.mark.parametrize("stack_pack", ["harness", "configured_harness"])
def test_a_knative_service_keeps_no_queue_in_queue_proxy_in_any_stack(request, stack_pack, baseline):
    """queue-proxy's breaker queue has no time bound (knative/serving knative-v1.23.0 pkg/queue/sharedmain/main.go):
    any containerConcurrency is refused, production or not."""
    record = find(baseline, KSVC, "llama-8b-v1-knative-service")
    running = request.getfixturevalue(stack_pack)
    record.inputs["spec"]["template"]["spec"]["containerConcurrency"] = 12
    assert analyze(running, record).get("knative-autoscaling") == "mandatory"
    record.inputs["spec"]["template"]["spec"].pop("containerConcurrency")
    assert "knative-autoscaling" not in analyze(running, record)


def test_knative_floors_take_go_durations(harness, baseline):
    record = find(baseline, KSVC, "llama-8b-v1-knative-service")
    template_annotations(record).update(
        {"autoscaling.knative.dev/scale-down-delay": "1m30s", "autoscaling.knative.dev/window": "1m"}
    )
    assert analyze(harness, record) == NOTHING


# --- HPA: scale-down rate and API version ---------------------------------------------------------


def scale_down(record: RecordedResource) -> dict[str, Any]:
    return record.inputs["spec"]["behavior"]["scaleDown"]


@pytest.mark.parametrize(
    "change, verdict",
    [
        (lambda s: s.update(policies=[{"type": "Percent", "value": 100, "periodSeconds": 15}]), "hpa-behavior"),
        (lambda s: s.update(policies=[{"type": "Pods", "value": 8, "periodSeconds": 60}]), "hpa-behavior"),
        (lambda s: s.update(selectPolicy="Max", policies=FAST_AND_SLOW), "hpa-behavior"),
        (lambda s: s.update(selectPolicy="Min", policies=FAST_AND_SLOW), None),
        (lambda s: s.update(selectPolicy="Disabled"), None),
        (lambda s: s.update(policies=[{"type": "Pods", "value": 1, "periodSeconds": 60}]), None),
    ],
    ids=["all-in-15s", "all-pods-a-minute", "max-of-fast-and-slow", "min-of-fast-and-slow", "disabled", "one-pod-a-minute"],
)
def test_hpa_scale_down_rate(harness, baseline, change, verdict):
    record = find(baseline, HPA, "llama-70b-v1-hpa")  # maxReplicas 8
    change(scale_down(record))
    assert analyze(harness, record) == ({verdict: "mandatory"} if verdict else NOTHING)


def test_autoscaling_v1_is_refused(harness, baseline):
    v2 = find(baseline, HPA, "llama-70b-v1-hpa")
    assert analyze(harness, v2) == NOTHING
    token = "kubernetes:autoscaling/v1:HorizontalPodAutoscaler"
    inputs = {
        "apiVersion": "autoscaling/v1",
        "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": "llama-70b-v1", "namespace": "serving"},
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "llama-70b-v1"},
            "minReplicas": 2,
            "maxReplicas": 8,
            "targetCPUUtilizationPercentage": 60,
        },
    }
    v1 = RecordedResource(token, "llama-70b-v1-hpa", v2.urn.replace(HPA, token), None, True, None, inputs, inputs)
    assert analyze(harness, v1) == {"hpa-behavior": "mandatory"}


# --- preStop duration ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "hook, verdict",
    [
        ({"exec": {"command": ["sleep", "0"]}}, "inference-graceful-drain"),
        ({"exec": {"command": ["sh", "-c", "sleep 2"]}}, "inference-graceful-drain"),
        ({"exec": {"command": ["sleep", "60"]}}, "inference-graceful-drain"),  # 60 + --shutdown-timeout 300 > 325
        ({"sleep": {"seconds": 1}}, "inference-graceful-drain"),
        ({"sleep": {"seconds": 15}}, None),
        ({"exec": {"command": ["sh", "-c", "sleep 20"]}}, None),
    ],
    ids=["sleep-0", "shell-sleep-2", "past-the-grace", "sleep-action-1", "sleep-action-15", "shell-sleep-20"],
)
def test_pre_stop_duration(harness, baseline, hook, verdict):
    record = find(baseline, DEPLOYMENT, "llama-70b-v1-deployment")  # grace 325, --shutdown-timeout 300
    vllm(record)["lifecycle"] = {"preStop": hook}
    assert analyze(harness, record) == ({verdict: "mandatory"} if verdict else NOTHING)


# --- disruption budgets that are budgets ------------------------------------------------------------


def _budget(spec: dict[str, Any]):
    def change(records):
        pdb = next(r for r in records if r.name == "llama-70b-v1-pdb")
        pdb.outputs["spec"].pop("maxUnavailable")
        pdb.outputs["spec"].update(spec)
        return records

    return change


@pytest.mark.parametrize(
    "spec, verdict",
    [
        ({"maxUnavailable": 0}, "inference-disruption-budget"),
        ({"maxUnavailable": "0%"}, "inference-disruption-budget"),
        ({"minAvailable": 2}, "inference-disruption-budget"),  # the HPA may scale it down to 2
        ({"minAvailable": "100%"}, "inference-disruption-budget"),
        ({"minAvailable": "90%"}, "inference-disruption-budget"),  # 90% of 2, rounded up
        ({"minAvailable": 1}, None),
        ({"maxUnavailable": "50%"}, None),
    ],
    ids=["max-unavailable-0", "max-unavailable-0-percent", "min-available-at-min-replicas", "min-available-100-percent",
         "min-available-90-percent", "min-available-1", "max-unavailable-50-percent"],
)  # fmt: skip
def test_disruption_budget_allows_an_eviction(harness, baseline, spec, verdict):
    hits = harness.analyze_stack(stack_with(baseline, _budget(spec)))
    flagged = {(d.policy, d.urn.rsplit("::", 1)[-1]) for d in hits}
    assert flagged == ({(verdict, "llama-70b-v1-pdb")} if verdict else set())


# --- quotas that apply to the workload's priority class ------------------------------------------------


def _only_production_quota(priority_class: str):
    def change(records):
        kept = [r for r in records if not (r.type == "kubernetes:core/v1:ResourceQuota" and r.name.startswith("team-a-"))]
        kept += [r for r in records if r.name == "team-a-production"]
        for spec in both(next(r for r in kept if r.name == "llama-1b-v1-deployment")):
            spec["priorityClassName"] = priority_class
        return kept

    return change


def test_quota_must_apply_to_the_workloads_priority_class(harness, baseline):
    # team-a keeps only the quota scoped to inference-production: it bounds production pods...
    assert analyze_stack(harness, stack_with(baseline, _only_production_quota("inference-production"))) == NOTHING
    # ...and nothing bounds an experiment's GPUs.
    hits = harness.analyze_stack(stack_with(baseline, _only_production_quota("inference-experiment")))
    assert [(d.policy, d.urn.rsplit("::", 1)[-1]) for d in hits] == [("gpu-quota-and-priority", "llama-1b-v1-deployment")]
    assert "PriorityClass inference-experiment" in hits[0].message


# --- latency class from the tiers a model serves ------------------------------------------------------


def _time_sliced_l4(premium_to_batch_model: bool):
    def change(records):
        next(r for r in records if r.name == "l4-batch" and r.type.endswith("GpuNodePool")).outputs["sharing"] = "timeSlicing"
        if premium_to_batch_model:
            (vs,) = [r for r in records if r.name == "llama-8b-batch-route-virtual-service"]
            for route in vs.outputs["spec"]["http"]:
                for match in route.get("match", []):
                    if "x-tier" in match.get("headers", {}):
                        match["headers"]["x-tier"] = {"exact": "premium"}
        return records

    return change


def test_latency_class_comes_from_the_tiers_served(harness, configured_harness, baseline):
    # The batch model's profile says it is not latency-sensitive, and it serves batch only: a
    # time-sliced pool is fine...
    assert analyze_stack(harness, stack_with(baseline, _time_sliced_l4(False))) == NOTHING
    # ...unless the pack's config calls batch latency-sensitive too...
    hits = configured_harness.analyze_stack(stack_with(baseline, _time_sliced_l4(False)))
    assert {d.urn.rsplit("::", 1)[-1] for d in hits if d.policy == "latency-sensitive-not-time-sliced"} == {
        "llama-8b-batch-v1-knative-service",
        "batch-labeller-v1-knative-service",
    }
    # ...or its route takes premium requests, whatever its label says.
    hits = harness.analyze_stack(stack_with(baseline, _time_sliced_l4(True)))
    assert {(d.policy, d.level, d.urn.rsplit("::", 1)[-1]) for d in hits} == {
        ("latency-sensitive-not-time-sliced", "mandatory", "llama-8b-batch-v1-knative-service"),
        ("latency-sensitive-on-spot", "advisory", "llama-8b-batch-v1-knative-service"),
    }
    assert all("sends it premium requests" in d.message for d in hits)
