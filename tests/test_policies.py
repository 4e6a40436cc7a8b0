"""The policy pack: every rule with a violating and a compliant case, its validators called in this process as the
policy SDK's analyzer calls them (tests/policy_harness.py); the pack running as its own process (as the Pulumi CLI
runs it), through the analyzer protocol, for what the protocol and the process do: the pack's description, the real
stacks' verdict, the harness's verdicts held to the pack's, policy config and its errors, masking; plus the validators
called as pure functions."""

from __future__ import annotations

import copy
import json
import sys
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any, Callable

import pulumi
import pytest
from google.protobuf import json_format

from preview.engine import RecordedResource
from preview.masking import mask_secrets, secret_values
from preview.performance import preview_policy_config
from preview.policy_runner import UNKNOWN, Diagnostic, PolicyConfigError, PolicyPack, PolicyRun
from preview.sections import policy_section
from preview.stack_config import load_project, load_stack_config

from .helpers import IMAGES_BY_TAG, PROJECT, ROOT, STACKS, Evaluated, prod_with_labeller_server, raw_stack, run_preview
from .policy_harness import PolicyHarness
from .test_policy_decoding import _careless

sys.path.insert(0, str(ROOT / "policies"))
from inference_governance import autoscaling, control_plane, gateway_auth, gpu_placement  # noqa: E402
from inference_governance.pack import POLICIES  # noqa: E402


@pytest.fixture(scope="module")
def baseline() -> Evaluated:
    return Evaluated(prod_with_labeller_server(), shared=True)


def _started(*stacks: str) -> list[PolicyPack]:
    """The pack as the CLI runs it, a process for each stack (started together: each imports its SDK meanwhile),
    configured as the preview configures its own run: serving-performance reads verdicts these evaluations have none
    of (test_serving_performance.py runs it with a preview's)."""
    configs = [load_stack_config(load_project(ROOT), stack) for stack in stacks]
    spawned = [PolicyPack(ROOT / "policies", config.values, PROJECT, stack) for stack, config in zip(stacks, configs)]
    for running, stack, config in zip(spawned, stacks, configs):
        running.connect()
        running.handshake(ROOT)
        running.configure_stack(PROJECT, stack, config.values, config.secret_keys)
        running.configure(running.info(), preview_policy_config(IMAGES_BY_TAG))
    return spawned


@pytest.fixture(scope="module")
def pack() -> Iterator[PolicyPack]:
    (running,) = _started("prod")
    yield running
    running.close()


@pytest.fixture(scope="module")
def committed_packs(pack) -> Iterator[dict[str, PolicyPack]]:
    """A pack for each committed stack (prod's the one above)."""
    others = [stack for stack in STACKS if stack != "prod"]
    running = dict(zip(others, _started(*others)))
    yield {**running, "prod": pack}
    for other in running.values():
        other.close()


@pytest.fixture(scope="module")
def harness() -> PolicyHarness:
    """The pack's policies called directly, configured as the pack above is."""
    return PolicyHarness("prod")


def find(baseline: Evaluated, type_: str, name: str) -> RecordedResource:
    (record,) = [r for r in baseline.records if r.type == type_ and r.name == name]
    return copy.deepcopy(record)


def policies_hit(diagnostics) -> dict[str, str]:
    return {d.policy: d.level for d in diagnostics}


def analyze(analyzer: PolicyPack | PolicyHarness, record: RecordedResource) -> dict[str, str]:
    return policies_hit(analyzer.analyze(record, None))


def analyze_stack(analyzer: PolicyPack | PolicyHarness, records: list[RecordedResource]) -> dict[str, str]:
    return policies_hit(analyzer.analyze_stack(r for r in records if not r.type.startswith("pulumi:providers:")))


def stack_with(baseline: Evaluated, change: Callable[[list[RecordedResource]], list[RecordedResource]]) -> list[RecordedResource]:
    return change([copy.deepcopy(r) for r in baseline.records])


DEPLOYMENT = "kubernetes:apps/v1:Deployment"
HPA = "kubernetes:autoscaling/v2:HorizontalPodAutoscaler"
KSVC = "kubernetes:serving.knative.dev/v1:Service"


def vllm(record: RecordedResource, field: str = "inputs") -> dict:
    return getattr(record, field)["spec"]["template"]["spec"]["containers"][0]


def both(record: RecordedResource) -> list[dict]:
    """The pod spec in inputs (Analyze) and outputs (AnalyzeStack), to edit them alike (the
    mock provider echoes inputs, so they may be one object)."""
    specs = [record.inputs["spec"]["template"]["spec"], record.outputs["spec"]["template"]["spec"]]
    return specs[:1] if specs[0] is specs[1] else specs


# --- the pack as the CLI sees it ----------------------------------------------------------------


def test_pack_describes_itself(pack):
    info = pack.info()
    assert info.name == "inference-governance"
    names = {p.name for p in info.policies}
    # Every policy pack.py declares, and nothing else: a new policy is its validator plus its entry there.
    assert names == {policy.name for policy in POLICIES}
    assert {"image-digests", "gateway-requires-a-token", "tenant-s3-scoping"} <= names
    assert "no-secrets-in-config-maps" in names


def test_the_real_stacks_are_compliant(pack, baseline):
    for record in baseline.records:
        if record.custom and not record.type.startswith("pulumi:providers:"):
            assert analyze(pack, record) == {}, record.urn
    assert analyze_stack(pack, baseline.records) == {}


# --- the harness gives the pack's verdicts ----------------------------------------------------------
# The per-rule tests call the validators through tests/policy_harness.py: here its verdicts are held to the pack's, over
# the analyzer protocol, on every committed stack and on stacks changed to break many rules at once, to hold unknown
# values and to run under a policy config: the same diagnostics, in the same order, per resource and for the stack.

# Each policy config test_policy_bypasses.py exercises, set away from its default.
POLICY_CONFIG: dict[str, Any] = {
    "pinned-images": {"allowedRepositories": ["docker.io/vllm", "registry.example.com"], "deniedTags": ["latest", "nightly"]},
    "no-secret-env-from": {"allowedNamespaces": ["serving"]},
    "knative-autoscaling": {"productionStacks": []},
    "latency-sensitive-not-time-sliced": {"latencySensitiveTiers": ["premium", "batch"]},
    "control-plane-availability": {"minEndpointPickerReplicasInProduction": 3},
    "gpu-jobs-through-kueue": {"externalLocalQueues": ["team-b/shared"]},
}
# POLICY_CONFIG, and levels and a floor moved too.
CONFIGURED = {
    **POLICY_CONFIG,
    "inference-graceful-drain": {"minTerminationGracePeriodSeconds": 600},
    "hpa-behavior": "advisory",
    "no-secret-args": "disabled",
}


def _below_the_production_floors(records: list[RecordedResource]) -> list[RecordedResource]:
    """_careless, and every autoscaler and Deployment at one replica, every Knative service without its scale-down
    delay: what only a stack the pack's config calls production is refused for."""
    changed = _careless(records)
    for record in changed:
        for properties in {id(p): p for p in (record.inputs, record.outputs)}.values():
            spec = properties.get("spec") or {}
            if record.type == "kubernetes:autoscaling/v2:HorizontalPodAutoscaler":
                spec["minReplicas"] = 1
            if record.type == "kubernetes:apps/v1:Deployment" and "replicas" in spec:
                spec["replicas"] = 1
            if record.type == "kubernetes:serving.knative.dev/v1:Service":
                spec["template"]["metadata"]["annotations"].pop("autoscaling.knative.dev/scale-down-delay", None)
    return changed


def _unknowns(records: list[RecordedResource]) -> list[RecordedResource]:
    """Values the engine cannot know during a preview where rules read them: every container's image, and each
    PodDisruptionBudget's maxUnavailable."""
    changed = copy.deepcopy(records)
    for record in changed:
        for properties in (record.inputs, record.outputs):
            if record.type == "kubernetes:policy/v1:PodDisruptionBudget" and "maxUnavailable" in properties["spec"]:
                properties["spec"]["maxUnavailable"] = UNKNOWN
            template = (properties.get("spec") or {}).get("template")
            if isinstance(template, dict) and "spec" in template:
                for container in template["spec"].get("containers", []):
                    container["image"] = UNKNOWN
    return changed


def _verdicts(
    analyzer: PolicyPack | PolicyHarness, records: list[RecordedResource]
) -> Iterator[tuple[str, str, str, str, str, str]]:
    """Every diagnostic, in the order given: each custom resource analyzed with its provider, then the stack (without
    providers, as the engine sends it), then the stack with them (as a test may send it)."""

    def row(kind: str, d: Diagnostic) -> tuple[str, str, str, str, str, str]:
        return (kind, d.policy, d.level, d.urn, d.message, d.description)

    providers = {r.urn: r for r in records if r.type.startswith("pulumi:providers:")}
    for record in records:
        if record.custom and not record.type.startswith("pulumi:providers:"):
            provider = providers.get((record.provider or "").rsplit("::", 1)[0])
            yield from (row("resource", d) for d in analyzer.analyze(record, provider))
    yield from (row("stack", d) for d in analyzer.analyze_stack(r for r in records if r.urn not in providers))
    yield from (row("stack+providers", d) for d in analyzer.analyze_stack(records))


def test_the_harness_describes_the_pack_as_the_pack_does(pack):
    harness = PolicyHarness("prod")
    assert json_format.MessageToDict(harness.info()) == json_format.MessageToDict(pack.info())
    overrides = preview_policy_config(CONFIGURED)
    try:
        assert harness.configure(harness.info(), overrides) == pack.configure(pack.info(), overrides)
    finally:
        pack.configure(pack.info(), preview_policy_config(IMAGES_BY_TAG))


@pytest.mark.parametrize("stack", STACKS)
def test_the_harness_gives_the_packs_verdicts_on_the_committed_stacks(committed_packs, stack):
    records = Evaluated(raw_stack(stack), shared=True).records
    found = list(_verdicts(PolicyHarness(stack), records))
    assert found == list(_verdicts(committed_packs[stack], records))


@pytest.mark.parametrize("change", ["labeller", "below-the-floors", "unknowns", "careless-configured"])
def test_the_harness_gives_the_packs_verdicts_on_changed_stacks(pack, baseline, change):
    records = baseline.records
    changes = {"below-the-floors": _below_the_production_floors, "careless-configured": _careless, "unknowns": _unknowns}
    records = changes.get(change, list)(records)
    overrides = CONFIGURED if change.endswith("-configured") else {}
    pack.configure(pack.info(), preview_policy_config({**IMAGES_BY_TAG, **overrides}))
    try:
        found = list(_verdicts(PolicyHarness("prod", overrides), records))
        assert found == list(_verdicts(pack, records))
    finally:
        pack.configure(pack.info(), preview_policy_config(IMAGES_BY_TAG))
    # No comparison here could pass for want of verdicts: the changed stacks break many rules at once (production's
    # floors among them), and the unknown values stop resource and stack policies alike.
    if change in ("below-the-floors", "careless-configured"):
        assert len({policy for _, policy, *_ in found}) >= 5, found
    if change == "below-the-floors":
        production = {"hpa-behavior", "knative-autoscaling", "control-plane-availability"}
        assert production <= {policy for _, policy, *_ in found}, found
    if change == "unknowns":
        unknown = {(kind, policy) for kind, policy, _, _, message, _ in found if message.startswith("can't run policy")}
        assert ("resource", "pinned-images") in unknown and ("stack", "inference-disruption-budget") in unknown, found


# --- rule 1 --------------------------------------------------------------------------------------


def test_gpu_requests_and_limits(harness, baseline):
    record = find(baseline, DEPLOYMENT, "llama-70b-v1-deployment")
    del vllm(record)["resources"]["limits"]["nvidia.com/gpu"]
    assert analyze(harness, record) == {"gpu-requests-and-limits": "mandatory"}
    record = find(baseline, DEPLOYMENT, "llama-70b-v1-deployment")
    del vllm(record)["resources"]["requests"]["cpu"]
    assert analyze(harness, record) == {"gpu-requests-and-limits": "mandatory"}
    knative = find(baseline, KSVC, "llama-8b-v1-knative-service")
    vllm(knative)["resources"]["requests"]["nvidia.com/mig-3g.40gb"] = "2"
    assert analyze(harness, knative) == {"gpu-requests-and-limits": "mandatory"}


# --- rule 2 --------------------------------------------------------------------------------------


def test_latency_sensitive_not_time_sliced(harness, baseline):
    def slice_h100(records):
        for r in records:
            if r.type == "inference-platform:gpu-node-pool:GpuNodePool" and r.name == "h100":
                r.outputs["sharing"] = "timeSlicing"
            if r.type == "aws:eks/nodeGroup:NodeGroup" and r.name == "h100-nodes":
                r.outputs["labels"]["inference.platform/gpu-sharing"] = "timeSlicing"
        return records

    hits = harness.analyze_stack(stack_with(baseline, slice_h100))
    flagged = {d.urn.rsplit("::", 1)[-1] for d in hits if d.policy == "latency-sensitive-not-time-sliced"}
    assert flagged == {
        "llama-70b-v1-deployment",
        "llama-8b-v1-knative-service",
        "llama-8b-v2-knative-service",
        "llama-1b-v1-deployment",
    }


# --- rule 3 --------------------------------------------------------------------------------------


def test_graceful_drain(harness, baseline):
    record = find(baseline, DEPLOYMENT, "llama-70b-v1-deployment")
    record.inputs["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] = 30
    assert analyze(harness, record) == {"inference-graceful-drain": "mandatory"}
    record = find(baseline, DEPLOYMENT, "llama-70b-v1-deployment")
    del vllm(record)["lifecycle"]
    assert analyze(harness, record) == {"inference-graceful-drain": "mandatory"}


def test_pdb_for_replicated_inference(harness, baseline):
    without = stack_with(baseline, lambda rs: [r for r in rs if r.name != "llama-70b-v1-pdb"])
    hits = harness.analyze_stack(without)
    assert [d.urn.rsplit("::", 1)[-1] for d in hits if d.policy == "inference-disruption-budget"] == ["llama-70b-v1-deployment"]


# --- rule 4 --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "change",
    [
        lambda spec: spec["behavior"]["scaleDown"].update(stabilizationWindowSeconds=60),
        lambda spec: spec.update(
            metrics=[
                {
                    "type": "Resource",
                    "resource": {"name": "nvidia.com/gpu", "target": {"type": "Utilization", "averageUtilization": 70}},
                }
            ]
        ),
        lambda spec: spec.update(maxReplicas=1),
        lambda spec: spec.update(minReplicas=1),  # the prod stack is production: at least 2
        lambda spec: spec["behavior"]["scaleDown"].update(policies=[{"type": "Percentage", "value": 50, "periodSeconds": 60}]),
        lambda spec: spec.pop("behavior"),
    ],
    ids=["short-stabilization", "gpu-resource-metric", "max-below-min", "min-1-in-production", "bad-policy-type", "no-behavior"],
)
def test_hpa_behavior(harness, baseline, change):
    record = find(baseline, HPA, "llama-70b-v1-hpa")
    change(record.inputs["spec"])
    assert analyze(harness, record) == {"hpa-behavior": "mandatory"}


# --- rule 5 --------------------------------------------------------------------------------------


def test_knative_autoscaling(harness, baseline):
    record = find(baseline, KSVC, "llama-8b-v1-knative-service")
    del record.inputs["spec"]["template"]["metadata"]["annotations"]["autoscaling.knative.dev/max-scale"]
    assert analyze(harness, record) == {"knative-autoscaling": "mandatory"}


@pytest.mark.parametrize("burst", [None, "211", "-1", "0.0"])
def test_knative_services_keep_the_activator_out_of_the_path(harness, baseline, burst):
    record = find(baseline, KSVC, "llama-8b-v1-knative-service")
    assert analyze(harness, record) == {}
    annotations = record.inputs["spec"]["template"]["metadata"]["annotations"]
    if burst is None:
        del annotations["autoscaling.knative.dev/target-burst-capacity"]
    else:
        annotations["autoscaling.knative.dev/target-burst-capacity"] = burst
    assert analyze(harness, record) == {"knative-autoscaling": "mandatory"}


@pytest.mark.parametrize("min_scale", ["0", "", "one"])
def test_latency_sensitive_min_scale(harness, baseline, min_scale):
    def cold(records):
        for record in records:
            if record.name == "llama-8b-v1-knative-service":
                record.outputs["spec"]["template"]["metadata"]["annotations"]["autoscaling.knative.dev/min-scale"] = min_scale
        return records

    hits = harness.analyze_stack(stack_with(baseline, cold))
    assert [(d.policy, d.urn.rsplit("::", 1)[-1]) for d in hits] == [
        ("latency-sensitive-min-scale", "llama-8b-v1-knative-service")
    ]


def test_a_batch_service_may_scale_to_zero(harness, baseline):
    # The program keeps one replica behind the labeller's endpoint pickers; the pack itself lets a batch
    # profile's service go to zero.
    record = find(baseline, KSVC, "batch-labeller-v1-knative-service")
    for state in {id(s): s for s in (record.inputs, record.outputs)}.values():
        state["spec"]["template"]["metadata"]["annotations"]["autoscaling.knative.dev/min-scale"] = "0"
    assert analyze(harness, record) == {}
    assert analyze_stack(harness, [record if r.urn == record.urn else r for r in baseline.records]) == {}


# --- rule 6 --------------------------------------------------------------------------------------


def _routes(records) -> list[dict]:
    (vs,) = [r for r in records if r.name == "llama-8b-route-virtual-service"]
    return vs.outputs["spec"]["http"]


def test_canary_weights_must_add_up(harness, baseline):
    def skew(records):
        next(r for r in _routes(records) if r["name"] == "premium-weighted")["route"][1]["weight"] = 5
        return records

    assert analyze_stack(harness, stack_with(baseline, skew)) == {"canary-routes": "mandatory"}


def test_override_routes_come_first(harness, baseline):
    def reorder(records):
        routes = _routes(records)
        routes.append(routes.pop(0))
        return records

    assert analyze_stack(harness, stack_with(baseline, reorder)) == {"canary-routes": "mandatory"}


def test_every_subset_exists(harness, baseline):
    without = stack_with(baseline, lambda rs: [r for r in rs if r.name != "llama-70b-route-destination-rule-v1-epp"])
    assert analyze_stack(harness, without) == {"canary-routes": "mandatory"}


# --- rule 7 --------------------------------------------------------------------------------------


def test_gpu_namespace_needs_quotas(harness, baseline):
    without = stack_with(
        baseline,
        lambda rs: [r for r in rs if not (r.type == "kubernetes:core/v1:ResourceQuota" and r.name.startswith("team-a-"))],
    )
    hits = analyze_stack(harness, without)
    assert hits["gpu-quota-and-priority"] == "mandatory"


def test_gpu_workload_needs_an_existing_priority_class(harness, baseline):
    def rename(records):
        for spec in both(next(r for r in records if r.name == "llama-1b-v1-deployment")):
            spec["priorityClassName"] = "vip"
        return records

    assert analyze_stack(harness, stack_with(baseline, rename)) == {"gpu-quota-and-priority": "mandatory"}


def test_experiments_cannot_preempt(harness, baseline):
    def preempting(records):
        record = next(r for r in records if r.name == "inference-experiment")
        record.outputs["preemptionPolicy"] = "PreemptLowerPriority"
        return records

    assert analyze_stack(harness, stack_with(baseline, preempting)) == {"gpu-quota-and-priority": "mandatory"}


# --- rules 8 and 9 -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("change", "refused"),
    [
        (lambda template: None, False),
        # `auto` is the injector's image only for its own sidecar, and only where it injects.
        (lambda template: template["spec"]["initContainers"][0].update(name="miner"), True),
        (lambda template: template["metadata"]["labels"].update({"sidecar.istio.io/inject": "false"}), True),
        (lambda template: template["metadata"].setdefault("annotations", {}).update({"sidecar.istio.io/inject": "n"}),
         True),
        # More than the sidecar's size is no stub: it would run in the proxy's place.
        (lambda template: template["spec"]["initContainers"][0].update(env=[{"name": "A", "value": "b"}]), True),
        (lambda template: template["spec"]["initContainers"][0]["securityContext"].update(runAsUser=0), True),
    ],
    ids=["the-jobs-stub", "another-container", "opted-out-by-label", "opted-out-by-annotation", "stub-with-env",
         "stub-as-root"],
)  # fmt: skip
def test_the_sidecar_stub_runs_the_injectors_image_only(harness, baseline, change, refused):
    record = find(baseline, "kubernetes:batch/v1:Job", "ticket-labels-job")
    template = record.inputs["spec"]["template"]
    assert template["spec"]["initContainers"][0] == {**template["spec"]["initContainers"][0], "image": "auto"}
    change(template)
    assert ("pinned-images" in analyze(harness, record)) is refused


@pytest.mark.parametrize("image", ["vllm/vllm-openai:latest", "vllm/vllm-openai", "registry.example.com:5000/vllm"])
def test_pinned_images(harness, baseline, image):
    record = find(baseline, DEPLOYMENT, "llama-70b-v1-deployment")
    vllm(record)["image"] = image
    assert analyze(harness, record) == {"pinned-images": "mandatory"}
    vllm(record)["image"] = "vllm/vllm-openai@sha256:" + "a" * 64
    assert analyze(harness, record) == {}


@pytest.mark.parametrize(
    "change",
    [
        lambda spec: spec["containers"][0]["securityContext"].update(allowPrivilegeEscalation=True),
        lambda spec: (
            spec["securityContext"].update(runAsNonRoot=False),
            spec["containers"][0]["securityContext"].pop("runAsNonRoot"),
        ),
        lambda spec: spec["containers"][0]["securityContext"]["capabilities"].update(drop=["NET_RAW"]),
        lambda spec: spec["containers"][0]["securityContext"].pop("allowPrivilegeEscalation"),
    ],
    ids=["privilege-escalation", "root", "capabilities", "escalation-not-refused"],
)
def test_model_server_hardening(harness, baseline, change):
    record = find(baseline, DEPLOYMENT, "llama-70b-v1-deployment")
    change(record.inputs["spec"]["template"]["spec"])
    hits = analyze(harness, record)
    assert hits.pop("model-server-hardening") == "mandatory"
    # Asking for escalation outright is also below the baseline every pod meets.
    escalates = vllm(record)["securityContext"].get("allowPrivilegeEscalation")
    assert hits == ({"pod-security-baseline": "mandatory"} if escalates else {})


DAEMONSET = "kubernetes:apps/v1:DaemonSet"
JOB = "kubernetes:batch/v1:Job"
MIRROR_JOB = "weight-mirror-serving-llama-3-1-70b-instruct-1605565-140979da"


def pod_spec_of(record: RecordedResource) -> dict:
    return record.inputs["spec"]["template"]["spec"]


@pytest.mark.parametrize(("type_", "name"), [(DAEMONSET, "image-prepull-prepull-h100"), (JOB, MIRROR_JOB)])
def test_gpu_less_pods_on_gpu_nodes_see_no_gpu(harness, baseline, type_, name):
    record = find(baseline, type_, name)
    # As declared: it tolerates the GPU taint, asks for no GPU and hides the node's GPUs.
    assert analyze(harness, record) == {}
    for container in pod_spec_of(record)["containers"]:
        container["env"] = [e for e in container["env"] if e["name"] != "NVIDIA_VISIBLE_DEVICES"]
    assert analyze(harness, record) == {"gpu-less-pods-see-no-gpu": "mandatory"}
    for container in pod_spec_of(record)["containers"]:
        container["env"].append({"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"})
    assert analyze(harness, record) == {"gpu-less-pods-see-no-gpu": "mandatory"}


def test_a_pod_that_tolerates_every_taint_may_land_on_a_gpu_node(harness, baseline):
    record = find(baseline, DEPLOYMENT, "llama-70b-v1-epp-deployment")
    assert analyze(harness, record) == {}
    pod_spec_of(record)["tolerations"] = [{"operator": "Exists"}]
    assert analyze(harness, record) == {"gpu-less-pods-see-no-gpu": "mandatory"}
    # A pod with a GPU is the device plugin's to give GPUs to: not this rule's.
    assert "gpu-less-pods-see-no-gpu" not in analyze(harness, find(baseline, DEPLOYMENT, "llama-70b-v1-deployment"))


def test_no_plain_secret_env(harness, baseline):
    record = find(baseline, DEPLOYMENT, "llama-70b-v1-deployment")
    vllm(record)["env"].append({"name": "HF_TOKEN", "value": "hf_in_clear"})
    assert analyze(harness, record) == {"no-plain-secret-env": "mandatory"}


# --- rule 10 -------------------------------------------------------------------------------------


def _stage_in(record: RecordedResource) -> list[dict]:
    return [c for spec in both(record) for c in spec["initContainers"] if c["name"] == "stage-in"]


@pytest.mark.parametrize(
    ("rewrite", "flagged"),
    [
        # As rendered: each location single-quoted, of what config may give.
        (lambda script: script, False),
        # Unquoted, or in double quotes (the shell expands `$(...)` there): refused either way.
        (lambda script: script.replace("'s3://", "s3://").replace("'/shard-", "/shard-"), True),
        (lambda script: script.replace("'s3://", '"s3://').replace("'/shard-", '"/shard-'), True),
        # Quoted but holding what no config gives: the program interpolated something else.
        (lambda script: script.replace("'s3://", "'s3://team-b-batch/$(id)/", 1), True),
        (lambda script: script.replace("'s3://", "'s3://Not_A_Bucket/", 1), True),
    ],
    ids=["as-rendered", "unquoted", "double-quoted", "command-substitution-inside-quotes", "not-a-bucket"],
)
def test_shell_scripts_quote_every_s3_location(harness, baseline, rewrite, flagged):
    record = find(baseline, JOB, "ticket-labels-job")
    containers = _stage_in(record)
    assert containers and all("'s3://" in c["command"][2] for c in containers)
    for container in containers:
        container["command"][2] = rewrite(container["command"][2])
    assert analyze(harness, record) == ({"shell-scripts-quote-config": "mandatory"} if flagged else {})


@pytest.mark.parametrize(
    "command",
    [
        ["bash", "-euo", "pipefail", "-c"],
        ["/usr/bin/env", "sh", "-c"],
        ["busybox", "sh", "-c"],
        ["sh", "-c", "--"],
        ["/bin/bash", "--noprofile", "-c"],
    ],
    ids=["options-with-arguments", "env", "busybox", "double-dash", "long-option"],
)
def test_every_way_to_start_a_shell_script_is_read(harness, baseline, command):
    record = find(baseline, JOB, "ticket-labels-job")
    for container in _stage_in(record):
        script = container["command"][2].replace("'s3://", "s3://").replace("'/shard-", "/shard-")
        container["command"] = [*command, script]
    assert analyze(harness, record) == {"shell-scripts-quote-config": "mandatory"}


def test_quotas_over_pool_capacity(harness, baseline):
    def grow(records):
        quota = next(r for r in records if r.name == "team-a-total")
        quota.outputs["spec"]["hard"]["requests.nvidia.com/mig-1g.10gb"] = "500"
        return records

    assert analyze_stack(harness, stack_with(baseline, grow)) == {"stack-capacity": "mandatory"}


def test_workload_gpu_resource_must_exist_in_a_pool(harness, baseline):
    def want_2g(records):
        for spec in both(next(r for r in records if r.name == "llama-1b-v1-deployment")):
            resources = spec["containers"][0]["resources"]
            for part in ("requests", "limits"):
                resources[part]["nvidia.com/mig-2g.20gb"] = resources[part].pop("nvidia.com/mig-1g.10gb")
        return records

    hits = analyze_stack(harness, stack_with(baseline, want_2g))
    assert hits["stack-capacity"] == "mandatory"


def test_mig_profiles_valid_for_the_pool_gpu(harness, baseline):
    def on_a100_40(records):
        next(r for r in records if r.name == "h100" and r.type.endswith("GpuNodePool")).outputs["gpuModel"] = "A100-40GB"
        return records

    assert analyze_stack(harness, stack_with(baseline, on_a100_40)) == {"stack-capacity": "mandatory"}


# --- endpoint pickers ----------------------------------------------------------------------------

EPP = "llama-1b-v1-epp-deployment"  # team-a, 2 replicas
AUTOSCALER = "cluster-autoscaler-release"
EPP_PDB = "llama-1b-v1-epp-poddisruptionbudget"  # maxUnavailable 1
EPP_SERVICE = "llama-1b-v1-epp-service"
POOL = "llama-1b-v1-inferencepool"
PEER = "team-a-peer-authentication"  # STRICT for the namespace


def edit(name: str, change: Callable[[dict], Any]) -> Callable[[list[RecordedResource]], list[RecordedResource]]:
    """Change the outputs (what AnalyzeStack sees) of the record named `name`."""

    def changed(records):
        change(next(r for r in records if r.name == name).outputs)
        return records

    return changed


def pod_metadata(outputs: dict) -> dict:
    return outputs["spec"]["template"]["metadata"]


def without_maximum(**spec: Any) -> Callable[[dict], Any]:
    return lambda pdb: (pdb["spec"].pop("maxUnavailable"), pdb["spec"].update(spec))


@pytest.mark.parametrize(
    "change, flagged",
    [
        # (Their replicas, spread and budgets: control-plane-availability, tests/test_policy_bypasses.py.)
        # 1. the pool names an existing Service that selects endpoint picker pods
        (edit(POOL, lambda p: p["spec"]["endpointPickerRef"].update(name="llama-1b-v1-ep")), POOL),
        (edit(POOL, lambda p: p["spec"]["endpointPickerRef"].update(kind="Deployment", group="apps")), POOL),
        (lambda rs: [r for r in rs if r.name != EPP_SERVICE], POOL),
        (edit(EPP_SERVICE, lambda s: s["spec"].update(selector={"app.kubernetes.io/instance": "llama-1b-v1"})), POOL),
        # An endpoint picker that drops its component label escapes nothing: its pool finds no picker.
        (edit(EPP, lambda d: (d["metadata"]["labels"].pop("app.kubernetes.io/component"),
                              pod_metadata(d)["labels"].pop("app.kubernetes.io/component"))), POOL),
        # 2. in the mesh, mTLS on every hop
        (edit(EPP, lambda d: pod_metadata(d)["labels"].update({"sidecar.istio.io/inject": "false"})), EPP),
        (edit(EPP, lambda d: pod_metadata(d)["annotations"].update({"sidecar.istio.io/inject": "no"})), EPP),
        (edit(EPP, lambda d: (pod_metadata(d)["labels"].update({"sidecar.istio.io/inject": "disabled"}),
                              pod_metadata(d)["annotations"].update({"sidecar.istio.io/inject": "true"}))), EPP),
        (edit(EPP, lambda d: pod_metadata(d)["labels"].update({"sidecar.istio.io/inject": "True"})), None),
        (edit(PEER, lambda p: p["spec"]["mtls"].update(mode="PERMISSIVE")), PEER),
        (edit(PEER, lambda p: p["spec"].update(selector={"matchLabels": {"llm-d-router-gateway": "llama-1b-v1-epp"}},
                                               mtls={"mode": "DISABLE"})), PEER),
        (edit(PEER, lambda p: p["spec"].update(portLevelMtls={"8000": {"mode": "PERMISSIVE"}})), PEER),
        (edit(PEER, lambda p: p["spec"].update(portLevelMtls={"8000": {"mode": "STRICT"}})), None),
        # 3. in production, a model's Deployment-served pods are picked (only its queue is timed)...
        (lambda rs: [r for r in rs if r.name != POOL], "llama-1b-v1-deployment"),
        (edit(POOL, lambda p: p["spec"]["selector"]["matchLabels"].update({"app.kubernetes.io/instance": "llama-1b-v9"})),
         "llama-1b-v1-deployment"),
        # ... and its Knative-served ones too (queue-proxy and the activator time nothing).
        (lambda rs: [r for r in rs if r.name != "llama-8b-v1-inferencepool"], "llama-8b-v1-knative-service"),
        # A pool on an older revision of the version picks nothing Knative now serves it with.
        (edit("llama-8b-v1-inferencepool", lambda p: p["spec"]["selector"]["matchLabels"].update(
            {"serving.knative.dev/revision": "llama-8b-v1-0000000000"})), "llama-8b-v1-knative-service"),
        # team-b runs no endpoint picker but is a tenant: its namespace is promised mTLS too.
        (edit("team-b-peer-authentication", lambda p: p["spec"]["mtls"].update(mode="DISABLE")),
         "team-b-peer-authentication"),
    ],
    ids=["pool-names-no-service", "pool-names-a-deployment", "service-removed", "service-selects-the-servers",
         "picker-unlabelled", "inject-label-false", "inject-annotation-no", "label-wins-over-annotation",
         "inject-label-true", "namespace-permissive", "workload-disable", "port-permissive", "port-strict",
         "pool-removed", "pool-selects-another-version", "knative-pool-removed",
         "knative-pool-on-an-old-revision", "tenant-without-picker"],
)  # fmt: skip
def test_endpoint_picker_availability(harness, baseline, change, flagged, request):
    hits = harness.analyze_stack(stack_with(baseline, change))
    found = {(d.policy, d.level, d.urn.rsplit("::", 1)[-1]) for d in hits}
    # A picker without its component label is no picker to the egress rule either: held to REGISTRY_ONLY.
    also = {("tenant-egress-by-host", "mandatory", EPP)} if request.node.callspec.id == "picker-unlabelled" else set()
    assert found == ({("endpoint-picker-availability", "mandatory", flagged)} if flagged else set()) | also


def test_the_control_plane_runs_twice_in_production_only():
    from components.specs.knative import knative_serving
    from components.specs.mesh import istiod_values

    prod = Evaluated(raw_stack("prod"), shared=True)
    dev = Evaluated(raw_stack("dev"), shared=True)

    def of(evaluated: Evaluated, name: str) -> dict:
        return next(r for r in evaluated.records if r.name == name).outputs

    assert of(prod, "mesh-istiod")["values"]["autoscaleMin"] == 2 and of(dev, "mesh-istiod")["values"]["autoscaleMin"] == 1
    assert of(prod, "knative-serving-serving")["spec"]["high-availability"] == {"replicas": 2}
    assert of(prod, "cluster-autoscaler-release")["values"]["replicaCount"] == 2
    assert of(Evaluated(raw_stack("staging"), shared=True), "cluster-autoscaler-release")["values"]["replicaCount"] == 1
    assert "high-availability" not in of(dev, "knative-serving-serving")["spec"]
    assert istiod_values(3)["autoscaleMin"] == 3 and knative_serving(3)["spec"]["high-availability"] == {"replicas": 3}
    # One pod per node in production (a replica waits for a node of its own), the gateway behind a budget.
    from components.specs.system_charts import AUTOSCALER_POD_SELECTOR

    staging = Evaluated(raw_stack("staging"), shared=True)
    (spread,) = of(prod, "cluster-autoscaler-release")["values"]["topologySpreadConstraints"]
    assert spread["whenUnsatisfiable"] == "DoNotSchedule" and spread["labelSelector"] == {"matchLabels": AUTOSCALER_POD_SELECTOR}
    assert "topologySpreadConstraints" not in of(staging, "cluster-autoscaler-release")["values"]
    for release, selector in (("mesh-istiod", {"app": "istiod"}), ("mesh-gateway", {"istio": "ingressgateway"})):
        (spread,) = of(prod, release)["values"]["topologySpreadConstraints"]
        assert spread["whenUnsatisfiable"] == "DoNotSchedule" and spread["labelSelector"] == {"matchLabels": selector}
        assert "topologySpreadConstraints" not in of(dev, release)["values"]
    (kueue,) = of(prod, "kueue-release")["values"]["controllerManager"]["topologySpreadConstraints"]
    assert kueue["labelSelector"]["matchLabels"]["control-plane"] == "controller-manager"
    assert of(prod, "mesh-gateway-pdb")["spec"]["minAvailable"] == 1
    assert not [r for r in dev.records if r.name == "mesh-gateway-pdb"]
    # Knative's control plane one pod per node, the budgets its manifests bundle one pod at a time, the others' the
    # platform's own (knative/operator knative-v1.23.0 kodata: only activator-pdb and webhook-pdb, 80% each).
    serving = of(prod, "knative-serving-serving")["spec"]
    spread = {w["name"]: w["topologySpreadConstraints"] for w in serving["workloads"]}
    assert set(spread) == {"activator", "autoscaler", "controller", "webhook", "net-istio-controller", "net-istio-webhook"}
    assert all(
        c["labelSelector"] == {"matchLabels": {"app": name}} and c["whenUnsatisfiable"] == "DoNotSchedule"
        for name, (c,) in spread.items()
    )
    assert serving["podDisruptionBudgets"] == [
        {"name": "activator-pdb", "maxUnavailable": 1},
        {"name": "webhook-pdb", "maxUnavailable": 1},
    ]
    budgets = {
        r.outputs["spec"]["selector"]["matchLabels"]["app"]: r
        for r in prod.records
        if r.name.startswith("knative-serving-") and r.type == "kubernetes:policy/v1:PodDisruptionBudget"
    }
    assert set(budgets) == {"autoscaler", "controller", "net-istio-controller", "net-istio-webhook"}
    assert all(r.outputs["metadata"]["namespace"] == "knative-serving" for r in budgets.values())
    assert all(r.outputs["spec"]["maxUnavailable"] == 1 for r in budgets.values())
    # Declared once the operator reports Serving ready (the KnativeServing waits for its Deployments).
    (serving_urn,) = [r.urn for r in prod.records if r.name == "knative-serving-serving"]
    assert all(serving_urn in r.dependencies for r in budgets.values())
    assert "workloads" not in of(dev, "knative-serving-serving")["spec"]
    assert not [r for r in dev.records if r.type == "kubernetes:policy/v1:PodDisruptionBudget" and r.name.startswith("knative")]


def test_endpoint_picker_messages_name_the_object_and_the_fix(harness, baseline):
    (hit,) = harness.analyze_stack(stack_with(baseline, edit(EPP, lambda d: d["spec"].update(replicas=1))))
    assert hit.message.endswith(
        "\nendpoint picker team-a/llama-1b-v1-epp runs as few as 1 replica(s); production keeps at least 2 of what every "
        "request depends on, or one crash or drain takes it away: set spec.replicas to 2 or more"
    )
    (hit,) = harness.analyze_stack(stack_with(baseline, edit(POOL, lambda p: p["spec"]["endpointPickerRef"].update(name="x"))))
    assert hit.message.endswith(
        "\nInferencePool team-a/llama-1b-v1: spec.endpointPickerRef names Service team-a/x, which the stack does not "
        "declare: declare the endpoint picker's Service in the pool's namespace, or name it"
    )


def test_endpoint_pickers_outside_production(baseline):
    """The replica floor and the budget hold in the stacks the pack's config calls production (the pickers' floor
    is control-plane-availability's minEndpointPickerReplicasInProduction)."""

    def violations(records: list[RecordedResource], settings: dict[str, Any]) -> list[str]:
        messages: list[str] = []
        resources = [SimpleNamespace(resource_type=r.type, props=r.outputs, urn=r.urn) for r in records]
        args = SimpleNamespace(resources=resources, get_config=lambda: settings)
        control_plane.control_plane_availability(args, lambda message, urn=None: messages.append(message))
        return messages

    single = stack_with(
        baseline, lambda rs: [r for r in edit(EPP, lambda d: d["spec"].update(replicas=1))(rs) if r.name != EPP_PDB]
    )
    this_stack = [pulumi.get_stack()]
    assert violations(single, {"productionStacks": []}) == []
    assert len(violations(single, {"productionStacks": this_stack})) == 2  # the floor and the budget
    assert violations(single, {"productionStacks": this_stack, "minEndpointPickerReplicasInProduction": 1}) == [
        "endpoint picker team-a/llama-1b-v1-epp: no PodDisruptionBudget selects its pods, so a drain may take every "
        "replica at once: set a PodDisruptionBudget in team-a selecting its pod labels (maxUnavailable 1, or "
        "minAvailable 1)"
    ]


def test_the_packs_endpoint_picker_labels_are_the_programs():
    from inference_governance import kube

    from components.constants import LABEL_COMPONENT, LABEL_TENANT
    from components.specs.endpoint_picker.names import COMPONENT
    from platform_config.floors import FLOORS

    assert (kube.COMPONENT_LABEL, kube.ENDPOINT_PICKER, kube.TENANT_LABEL) == (LABEL_COMPONENT, COMPONENT, LABEL_TENANT)
    assert kube.FLOORS["minEndpointPickerReplicasInProduction"] == FLOORS.endpoint_picker_replicas_in_production


# --- advisory ------------------------------------------------------------------------------------


def test_advisory_rules(harness, baseline):
    without_monitor = stack_with(baseline, lambda rs: [r for r in rs if r.name != "llama-70b-v1-service-monitor"])
    assert analyze_stack(harness, without_monitor) == {"model-server-monitoring": "advisory"}
    record = find(baseline, DEPLOYMENT, "llama-70b-v1-deployment")
    del record.inputs["spec"]["template"]["spec"]["topologySpreadConstraints"]
    assert analyze(harness, record) == {"gpu-topology-spread": "advisory"}


def test_policy_config_reaches_the_pack(baseline):
    config = load_stack_config(load_project(ROOT), "prod")
    stricter = PolicyPack(ROOT / "policies", config.values, "inference-platform", "prod").connect()
    try:
        stricter.configure(
            stricter.info(),
            preview_policy_config(
                {
                    **IMAGES_BY_TAG,
                    "inference-graceful-drain": {"minTerminationGracePeriodSeconds": 600},
                    "hpa-behavior": "advisory",
                }
            ),
        )
        assert analyze(stricter, find(baseline, DEPLOYMENT, "llama-70b-v1-deployment")) == {
            "inference-graceful-drain": "mandatory"
        }
        record = find(baseline, HPA, "llama-70b-v1-hpa")
        record.inputs["spec"]["behavior"]["scaleDown"]["stabilizationWindowSeconds"] = 1
        assert analyze(stricter, record) == {"hpa-behavior": "advisory"}
    finally:
        stricter.close()


# --- the validators as pure functions ------------------------------------------------------------


def collect(validator, resource_type: str, props: dict[str, Any], config: dict[str, Any] | None = None) -> list[str]:
    messages: list[str] = []
    args = SimpleNamespace(resource_type=resource_type, props=props, get_config=lambda: config or {})
    validator(args, lambda message, urn=None: messages.append(message))
    return messages


def test_validators_are_pure_functions(baseline):
    deployment = find(baseline, DEPLOYMENT, "llama-70b-v1-deployment").inputs
    assert collect(gpu_placement.gpu_requests_and_limits, DEPLOYMENT, deployment) == []
    del deployment["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"]["memory"]
    (message,) = collect(gpu_placement.gpu_requests_and_limits, DEPLOYMENT, deployment)
    assert "requests no memory" in message
    hpa = find(baseline, HPA, "llama-70b-v1-hpa").inputs
    this_stack = [pulumi.get_stack()]
    assert collect(autoscaling.hpa_behavior, HPA, hpa, {"productionStacks": this_stack}) == []
    hpa["spec"]["minReplicas"] = 1
    assert collect(autoscaling.hpa_behavior, HPA, hpa, {"productionStacks": []}) == []
    assert collect(autoscaling.hpa_behavior, HPA, hpa, {"productionStacks": this_stack}) == [
        "minReplicas is 1; production autoscalers keep at least 2 replicas"
    ]
    # Not its kind: nothing to say.
    assert collect(autoscaling.hpa_behavior, DEPLOYMENT, hpa) == []


def test_knative_services_need_a_disruption_budget(harness, baseline):
    without = stack_with(baseline, lambda rs: [r for r in rs if r.name != "llama-8b-v1-pdb"])
    hits = harness.analyze_stack(without)
    assert [d.urn.rsplit("::", 1)[-1] for d in hits if d.policy == "inference-disruption-budget"] == [
        "llama-8b-v1-knative-service"
    ]


def test_override_header_is_read_from_the_virtual_service(harness, baseline):
    def custom_header(records):
        (vs,) = [r for r in records if r.name == "llama-8b-route-virtual-service"]
        vs.outputs["metadata"]["annotations"]["inference.platform/override-header"] = "x-variant"
        for route in vs.outputs["spec"]["http"]:
            for match in route.get("match", []):
                headers = match.get("headers", {})
                if "x-model-version" in headers:
                    headers["x-variant"] = headers.pop("x-model-version")
        routes = vs.outputs["spec"]["http"]
        routes.append(routes.pop(0))  # an override route after the others
        return records

    assert analyze_stack(harness, stack_with(baseline, custom_header)) == {"canary-routes": "mandatory"}


def test_secret_env_names_are_whole_words(harness, baseline):
    record = find(baseline, DEPLOYMENT, "llama-70b-v1-deployment")
    vllm(record)["env"] += [{"name": "TOKENIZERS_PARALLELISM", "value": "false"}, {"name": "MAX_TOKENS", "value": "4096"}]
    assert analyze(harness, record) == {}
    vllm(record)["env"].append({"name": "DB_PASSWORD", "value": "hunter2"})
    assert analyze(harness, record) == {"no-plain-secret-env": "mandatory"}


def test_the_packs_facts_are_generated_from_the_program():
    # One source for what the pack and the program share (GPU catalog, label keys, annotation,
    # image rule): the pack's file must be what the program's modules generate now.
    from components.policy_facts import FACTS_FILE, rendered

    assert FACTS_FILE.read_text() == rendered(), "stale: run `make policy-facts`"


def test_the_packs_image_rule_is_the_programs():
    from inference_governance.kube import image_is_pinned
    from pydantic import ValidationError

    from platform_config.models import ModelVersion

    source = {"huggingface": "org/name", "revision": "0" * 40}
    for image in (
        "vllm/vllm-openai:v0.18.0",
        "vllm/vllm-openai:latest",
        "repo/x@sha256:" + "a" * 64,
        "repo/x",
        "registry:5000/x:1.2",
        "registry:5000/x",
    ):
        try:
            ModelVersion.model_validate({"name": "v1", "source": source, "image": image})
            accepted = True
        except ValidationError:
            accepted = False
        assert image_is_pinned(image) == accepted, image


# --- the report tells the truth ------------------------------------------------------------------


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"no-such-policy": "advisory"}, "no policy of this pack: no-such-policy; policies: all, adapter-names-unique"),
        ({"hpa-behavior": {"minReplica": 3}}, "config 'hpa-behavior': unknown key 'minReplica'; allowed: enforcementLevel"),
        ({"pod-security-baseline": {"strict": True}}, "'pod-security-baseline': unknown key 'strict'; allowed: enforcementLevel"),
        ({"hpa-behavior": {"minReplicasInProduction": "two"}}, "'minReplicasInProduction' is string \"two\", but the policy"),
        ({"pinned-images": {"allowedRepositories": "ghcr.io"}}, "'allowedRepositories' is string \"ghcr.io\", but the policy"),
        ({"pinned-images": {"deniedTags": ["latest", 3]}}, "'deniedTags' is array"),
        ({"hpa-behavior": {"enforcementLevel": "sometimes"}}, "'hpa-behavior': unknown enforcement level 'sometimes'"),
        ({"hpa-behavior": {"enforcementLevel": ["disabled"]}}, "'hpa-behavior': unknown enforcement level ['disabled']"),
        ({"all": {"enforcementLevel": "advisory", "minReplicasInProduction": 1}}, "'all' sets every policy's enforcementLevel"),
        ({"gpu-jobs-through-kueue": {"externalLocalQueues": ["team-a/batch", "batch"]}}, "('batch' does not match"),
        ({"gpu-jobs-through-kueue": {"externalLocalQueues": ["Team-A/batch"]}}, "('Team-A/batch' does not match"),
        ({"gpu-jobs-through-kueue": {"externalLocalQueues": ["team-a/batch/x"]}}, "('team-a/batch/x' does not match"),
    ],
    ids=["unknown-policy", "unknown-key", "key-of-a-policy-without-config", "wrong-type", "string-for-array",
         "wrong-item-type", "bad-level", "level-not-a-string", "all-with-a-key", "local-queue-without-namespace",
         "local-queue-not-dns", "local-queue-two-slashes"],
)  # fmt: skip
def test_overrides_are_checked_against_each_policys_schema(pack, overrides, message):
    with pytest.raises(PolicyConfigError) as refused:
        pack.configure(pack.info(), overrides)
    assert message in str(refused.value)


def test_external_local_queues_of_namespace_and_name_are_accepted(pack):
    """The pattern refuses only malformed entries: namespace/name, the name a DNS-1123 subdomain."""
    try:
        pack.configure(
            pack.info(),
            preview_policy_config(
                {**IMAGES_BY_TAG, "gpu-jobs-through-kueue": {"externalLocalQueues": ["team-a/batch", "ml-ops/queue.v2"]}}
            ),
        )
    finally:
        pack.configure(pack.info(), preview_policy_config(IMAGES_BY_TAG))


def test_a_config_the_schema_refuses_is_an_input_error(tmp_path):
    config = tmp_path / "policy-config.json"
    config.write_text(json.dumps({"hpa-behavior": {"minReplicasInProduction": "two"}}))
    result = run_preview("--stack", "dev", "--out", str(tmp_path / "out"), "--policy-config", str(config))
    assert result.returncode == 2, result.stderr
    assert "policy config 'hpa-behavior': 'minReplicasInProduction' is string \"two\"" in result.stderr
    assert "Traceback" not in result.stderr


def test_a_weakened_mandatory_policy_is_reported(tmp_path):
    config = tmp_path / "policy-config.json"
    config.write_text(json.dumps({"no-secret-args": "disabled", "hpa-behavior": {"enforcementLevel": "advisory"}}))
    out = tmp_path / "out"
    result = run_preview("--stack", "dev", "--out", str(out), "--policy-config", str(config))
    assert result.returncode == 0, result.stderr
    warning = "policy no-secret-args is mandatory in the pack but disabled by the policy config: it did not run"
    assert f"WARNING {warning}" in result.stdout
    assert "1 policy disabled" in result.stdout
    policies = json.loads((out / "report.json").read_text())["policies"]["data"]
    levels = {p["name"]: (p["declaredLevel"], p["level"]) for p in policies["policies"]}
    assert levels["no-secret-args"] == ("mandatory", "disabled")
    assert levels["hpa-behavior"] == ("mandatory", "advisory")
    assert levels["gpu-topology-spread"] == ("advisory", "advisory")
    assert warning in policies["warnings"] and len(policies["warnings"]) == 2
    markdown = (out / "report.md").read_text()
    assert f"- **Warning:** {warning}" in markdown
    assert "| no-secret-args | mandatory | **disabled** |" in markdown


HF_TOKEN = "hf_" + "Z" * 34


def test_secrets_are_masked_in_what_the_pack_says(pack, baseline):
    # Policies that quote a value (here Knative annotations) must not carry a secret into the
    # report: the runner masks Hugging Face tokens, credential arguments and the stack's secret
    # config values in every message.
    annotations = {
        "autoscaling.knative.dev/window": f"--hf-token={HF_TOKEN}",
        "autoscaling.knative.dev/scale-down-delay": "s3cr3t-config-value",
    }
    stack_secrets, pack.secrets = pack.secrets, ["s3cr3t-config-value"]
    try:
        diagnostics = []
        for key, value in annotations.items():
            record = find(baseline, KSVC, "llama-8b-v1-knative-service")
            record.inputs["spec"]["template"]["metadata"]["annotations"][key] = value
            diagnostics += pack.analyze(record, None)
    finally:
        pack.secrets = stack_secrets
    assert {d.policy for d in diagnostics} == {"knative-autoscaling"} and len(diagnostics) == 2
    section = policy_section(PolicyRun("inference-governance", "0.1.0", [], diagnostics=diagnostics, analyzed=2))
    rendered = "\n".join([*section.lines, section.markdown, json.dumps(section.data)])
    assert "window is '--hf-token=***'" in rendered and "scale-down-delay is '***', not a duration" in rendered
    assert HF_TOKEN not in rendered and "s3cr3t-config-value" not in rendered


@pytest.mark.parametrize(
    "text, masked",
    [
        (f"vllm serve --hf-token {HF_TOKEN} --max-tokens 5", "vllm serve --hf-token *** --max-tokens 5"),
        ("--api-key=sk-live-1, then", "--api-key=***, then"),
        ("https://example.com/m?token=abc&x=1", "https://example.com/m?token=***&x=1"),
        ("HF_TOKEN=abc vllm serve", "HF_TOKEN=*** vllm serve"),
        ("the value is hunter22", "the value is ***"),
        ("passes a credential (--api-key) in its command line", "passes a credential (--api-key) in its command line"),
        ("--tokenizer-mode auto --max-num-batched-tokens 8192", "--tokenizer-mode auto --max-num-batched-tokens 8192"),
    ],
    ids=["hf-token-flag", "api-key-equals", "token-query", "env-assignment", "config-secret", "flag-named", "not-secrets"],
)
def test_mask_secrets(text, masked):
    assert mask_secrets(text, secret_values({"p:pw": "hunter22", "p:plain": "auto"}, ["p:pw"])) == masked


def test_secret_values_include_an_objects_leaves():
    tokens = json.dumps({"team-a": "hf_aaaa1111", "team-b": "hf_bbbb2222"})
    assert set(secret_values({"p:huggingFaceTokens": tokens}, ["p:huggingFaceTokens"])) == {tokens, "hf_aaaa1111", "hf_bbbb2222"}


# --- LoRA adapters ------------------------------------------------------------------------------

LORA_ADAPTERS = "inference.platform/lora-adapters"


def pod_annotations(record: RecordedResource) -> list[dict]:
    """The pod template's annotations in inputs and outputs, to edit them alike."""
    templates = [record.inputs["spec"]["template"], record.outputs["spec"]["template"]]
    templates = templates[:1] if templates[0] is templates[1] else templates
    return [t["metadata"]["annotations"] for t in templates]


def test_an_adapter_on_another_tenants_base_is_refused(harness, baseline):
    record = find(baseline, KSVC, "llama-8b-v1-knative-service")
    for pod in pod_annotations(record):
        adapters = json.loads(pod[LORA_ADAPTERS])
        assert adapters["llama-3.1-8b-sql"] == {
            "tenant": "serving",
            "base": "llama-3.1-8b-instruct",
            "modules": ["llama-3.1-8b-sql"],
        }
        adapters["llama-3.1-8b-sql"]["tenant"] = "team-a"
        pod[LORA_ADAPTERS] = json.dumps(adapters)
    assert analyze(harness, record) == {"adapter-on-own-tenants-base": "mandatory"}
    for pod in pod_annotations(record):
        pod[LORA_ADAPTERS] = "[not an object"
    assert analyze(harness, record) == {"adapter-on-own-tenants-base": "mandatory"}


def test_an_adapter_name_held_by_two_base_models_is_refused(harness, baseline):
    def load_on_70b(records: list[RecordedResource]) -> list[RecordedResource]:
        source = next(r for r in records if r.name == "llama-8b-v1-knative-service")
        target = next(r for r in records if r.name == "llama-70b-v1-deployment")
        support = json.loads(pod_annotations(source)[0][LORA_ADAPTERS])["llama-3.1-8b-support"]
        for pod in pod_annotations(target):
            pod[LORA_ADAPTERS] = json.dumps({"llama-3.1-8b-support": {**support, "tenant": "serving"}})
        return records

    hits = harness.analyze_stack(stack_with(baseline, load_on_70b))
    flagged = sorted(d.urn.rsplit("::", 1)[-1] for d in hits if d.policy == "adapter-names-unique")
    # Every server of the adapter's base is flagged too: the base's versions and its batch model's.
    assert flagged == [
        "llama-70b-v1-deployment",
        "llama-8b-batch-v1-knative-service",
        "llama-8b-v1-knative-service",
        "llama-8b-v2-knative-service",
    ]


def test_a_batch_model_loading_its_bases_adapters_is_no_second_base(harness, baseline):
    # prod's llama-8b-batch takes llama-8b's batch tier and loads its adapters, declaring llama-8b's name as their base.
    batch = find(baseline, KSVC, "llama-8b-batch-v1-knative-service")
    declared = json.loads(pod_annotations(batch)[0][LORA_ADAPTERS])
    assert {a["base"] for a in declared.values()} == {"llama-3.1-8b-instruct"}
    assert not [d for d in harness.analyze_stack(stack_with(baseline, list)) if d.policy == "adapter-names-unique"]

    # A server that does not answer to the declared base's name is another base, whatever it declares.
    def stop_answering_to_the_base(records: list[RecordedResource]) -> list[RecordedResource]:
        target = next(r for r in records if r.name == "llama-8b-batch-v1-knative-service")
        for spec in both(target):
            args = spec["containers"][0]["args"]
            args.remove("llama-3.1-8b-instruct")
        return records

    hits = harness.analyze_stack(stack_with(baseline, stop_answering_to_the_base))
    flagged = sorted({d.urn.rsplit("::", 1)[-1] for d in hits if d.policy == "adapter-names-unique"})
    assert "llama-8b-batch-v1-knative-service" in flagged


def test_an_adapter_named_like_a_served_model_is_refused(harness, baseline):
    def answer_to_the_adapter(records: list[RecordedResource]) -> list[RecordedResource]:
        target = next(r for r in records if r.name == "llama-1b-v1-deployment")
        for spec in both(target):
            args = spec["containers"][0]["args"]
            args.insert(args.index("--served-model-name") + 2, "llama-3.1-8b-sql")
        return records

    hits = harness.analyze_stack(stack_with(baseline, answer_to_the_adapter))
    assert {d.policy for d in hits} == {"adapter-names-unique"}
    assert hits and all("also the served name of team-a/llama-1b" in d.message for d in hits)


# --- the gateway requires a token ------------------------------------------------------------------

REQUIRE_TOKEN = "gateway-routing-inference-gateway-require-token"
GATEWAY_JWT = "gateway-routing-inference-gateway-jwt"


def _gateway_violations(records: list[RecordedResource]) -> list[str]:
    """The rule itself over the records (the analyzer run is test_the_gateway_token_rule_is_mandatory)."""
    messages: list[str] = []
    resources = [SimpleNamespace(resource_type=r.type, props=r.outputs, urn=r.urn) for r in records]
    gateway_auth.gateway_requires_a_token(SimpleNamespace(resources=resources), lambda m, urn=None: messages.append(m))
    return messages


def _rules(change: Callable[[list[dict]], Any]) -> Callable[[list[RecordedResource]], list[RecordedResource]]:
    return edit(REQUIRE_TOKEN, lambda d: change(d["spec"]["rules"]))


@pytest.mark.parametrize(
    "change, expected",
    [
        (lambda rs: rs, None),
        (lambda rs: [r for r in rs if r.name != GATEWAY_JWT], "no RequestAuthentication"),
        (lambda rs: [r for r in rs if r.name != REQUIRE_TOKEN], "no ALLOW AuthorizationPolicy"),
        (edit(REQUIRE_TOKEN, lambda d: d["spec"].update(action="DENY")), "no ALLOW AuthorizationPolicy"),
        (_rules(lambda rules: rules[0].pop("from")), "rule 0 admits requests without a token"),
        (_rules(lambda rules: rules[0]["from"][0]["source"].update(requestPrincipals=[])), "rule 0 admits a source"),
        (_rules(lambda rules: rules.append({"from": [{"source": {"notRequestPrincipals": ["x/y"]}}]})), "rule 3 admits a source"),
        (_rules(lambda rules: rules[2]["to"][0]["operation"].update(hosts=["*"])), "rule 2 admits requests without a token"),
        (_rules(lambda rules: rules[2]["to"][0]["operation"].update(ports=["443"])), "rule 2 admits requests without a token"),
        (_rules(lambda rules: rules[2]["to"][0]["operation"].pop("hosts")), "rule 2 admits requests without a token"),
        (_rules(lambda rules: rules[2].pop("to")), "rule 2 admits requests without a token"),
    ],
    ids=["as-declared", "no-request-authentication", "no-allow-policy", "allow-turned-deny", "token-rule-without-from",
         "empty-principals", "not-principals-only", "redirect-rule-any-host", "redirect-rule-on-the-serving-port",
         "redirect-rule-without-hosts", "redirect-rule-everywhere"],
)  # fmt: skip
def test_the_gateway_admits_only_identified_callers(baseline, change, expected):
    found = _gateway_violations(stack_with(baseline, change))
    if expected is None:
        assert found == []
    else:
        assert len(found) == 1 and expected in found[0], found


def test_the_gateway_token_rule_is_mandatory(harness, baseline):
    hits = harness.analyze_stack(stack_with(baseline, _rules(lambda rules: rules[0].pop("from"))))
    assert {(d.policy, d.level) for d in hits} == {("gateway-requires-a-token", "mandatory")}


SERVING_EGRESS = "serving-egress"  # the Sidecar of the serving tenant's model servers
SERVING_S3 = "serving-egress-s3"
SERVING_GRANT = "egress-gateway-tenant-serving"  # what the egress gateway lets the serving tenant through to
# The model servers of the serving tenant in the baseline.
SERVING_SERVERS = {
    "llama-70b-v1-deployment",
    "llama-8b-v1-knative-service",
    "llama-8b-v2-knative-service",
    "llama-8b-batch-v1-knative-service",
}
UNMESHED = {"sidecar.istio.io/inject": "false"}
# The serving tenant's servers that load adapters from its adapters bucket.
ADAPTER_SERVERS = {"llama-8b-v1-knative-service", "llama-8b-v2-knative-service", "llama-8b-batch-v1-knative-service"}


def _server_annotations(extra: dict[str, str]) -> Callable[[list[RecordedResource]], list[RecordedResource]]:
    return edit("llama-70b-v1-deployment", lambda d: d["spec"]["template"]["metadata"]["annotations"].update(extra))


def _servers_labels(change: Callable[[dict], Any]) -> Callable[[list[RecordedResource]], list[RecordedResource]]:
    return edit("llama-70b-v1-deployment", lambda d: change(d["spec"]["template"]["metadata"]["labels"]))


@pytest.mark.parametrize(
    ("change", "flagged"),
    [
        (lambda rs: [r for r in rs if r.name != SERVING_EGRESS], SERVING_SERVERS),
        (edit(SERVING_EGRESS, lambda s: s["spec"]["outboundTrafficPolicy"].update(mode="ALLOW_ANY")), SERVING_SERVERS),
        # A Sidecar for other pods is none for the servers; one for the whole namespace holds them.
        (edit(SERVING_EGRESS, lambda s: s["spec"]["workloadSelector"].update(labels={"app": "other"})), SERVING_SERVERS),
        (edit(SERVING_EGRESS, lambda s: s["spec"].pop("workloadSelector")), set()),
        (_servers_labels(lambda labels: labels.update(UNMESHED)), {"llama-70b-v1-deployment"}),
        (edit(SERVING_S3, lambda e: e["spec"].update(exportTo=["*"])), {SERVING_S3}),
        (edit(SERVING_S3, lambda e: e["spec"].pop("exportTo")), {SERVING_S3}),
        (edit(SERVING_S3, lambda e: e["spec"]["hosts"].append("*.s3.us-east-1.amazonaws.com")), {SERVING_S3}),
        (edit(SERVING_S3, lambda e: e["spec"]["hosts"].append("attacker.example.com")), {SERVING_S3}),
        (edit(SERVING_S3, lambda e: e["spec"]["hosts"].append("*")), {SERVING_S3}),
        (edit(SERVING_S3, lambda e: e["spec"]["hosts"].append("abc.execute-api.us-east-1.amazonaws.com")), {SERVING_S3}),
        # What the servers read must stay reachable: their bucket, and their credentials around the sidecar (in
        # production the egress gateway still granting the tenant a host it no longer names is a grant too many).
        (lambda rs: [r for r in rs if r.name != SERVING_S3], SERVING_SERVERS | {SERVING_GRANT}),
        (edit(SERVING_S3, lambda e: e["spec"].update(hosts=[h for h in e["spec"]["hosts"] if "model-weights" not in h])),
         SERVING_SERVERS | {SERVING_GRANT}),
        (edit("llama-70b-v1-deployment", lambda d: d["spec"]["template"]["metadata"]["annotations"].pop(
            "traffic.sidecar.istio.io/excludeOutboundIPRanges")), {"llama-70b-v1-deployment"}),
        # Around the sidecar, or past what it resolves itself.
        (edit(SERVING_EGRESS, lambda s: s["spec"].pop("egress")), SERVING_SERVERS),
        (_server_annotations({"traffic.sidecar.istio.io/excludeOutboundIPRanges": "169.254.170.23/32,0.0.0.0/0"}),
         {"llama-70b-v1-deployment"}),
        (_server_annotations({"traffic.sidecar.istio.io/excludeOutboundPorts": "443"}), {"llama-70b-v1-deployment"}),
        (edit("llama-70b-v1-deployment", lambda d: d["spec"]["template"]["spec"]["containers"][0].setdefault(
            "securityContext", {}).update(runAsUser=1337)), {"llama-70b-v1-deployment"}),
        (edit(SERVING_S3, lambda e: e["spec"].update(resolution="NONE")), {SERVING_S3}),
        (edit(SERVING_S3, lambda e: e["spec"].update(addresses=["0.0.0.0/0"])), {SERVING_S3}),
        (edit(SERVING_S3, lambda e: e["spec"].update(ports=[{"number": 22, "name": "ssh", "protocol": "TCP"}])),
         {SERVING_S3}),
        # A bucket of another tenant's, by name.
        (edit(SERVING_S3, lambda e: e["spec"]["hosts"].append("team-b-batch.s3.us-east-1.amazonaws.com")), {SERVING_S3}),
        # The adapters' bucket, read by the servers' init containers.
        (edit(SERVING_S3, lambda e: e["spec"].update(hosts=[h for h in e["spec"]["hosts"] if "adapters" not in h])),
         ADAPTER_SERVERS | {SERVING_GRANT}),
    ],
    ids=["no-sidecar", "allow-any", "sidecar-of-others", "namespace-wide", "server-unmeshed", "exported-everywhere",
         "exported-by-default", "any-bucket", "another-host", "everything", "another-aws-service", "no-s3-entry",
         "not-its-bucket", "credentials-through-the-sidecar", "sees-every-namespace", "excludes-everything",
         "excludes-https", "runs-as-the-proxy", "resolved-by-the-caller", "any-address", "another-port",
         "another-tenants-bucket", "not-the-adapters-bucket"],
)  # fmt: skip
def test_tenant_egress_by_host(harness, baseline, change, flagged):
    hits = harness.analyze_stack(stack_with(baseline, change))
    assert {d.urn.rsplit("::", 1)[-1] for d in hits if d.policy == "tenant-egress-by-host"} == flagged


def test_the_packs_pod_identity_agent_is_the_programs():
    from components.specs.network import POD_IDENTITY_AGENT_CIDRS
    from policies.inference_governance.tenant_egress import POD_IDENTITY_AGENT

    assert POD_IDENTITY_AGENT == POD_IDENTITY_AGENT_CIDRS


BATCH_JOBS = {"review-labels-job", "ticket-labels-job"}  # team-b's batch jobs in the baseline
BATCH_EGRESS = "team-b-batch-egress"  # the Sidecar of team-b's batch pods


def _job_template(name: str, change: Callable[[dict], Any]) -> Callable[[list[RecordedResource]], list[RecordedResource]]:
    return edit(name, lambda d: change(d["spec"]["template"]))


def _namespace_labels(name: str, labels: dict[str, str]) -> Callable[[list[RecordedResource]], list[RecordedResource]]:
    def changed(records):
        (namespace,) = [r for r in records if r.type == "kubernetes:core/v1:Namespace" and r.name == name]
        namespace.outputs["metadata"]["labels"].update(labels)
        return records

    return changed


def _runner_model(template: dict[str, Any], model: str) -> None:
    """The batch runner's engine told to load `model` (its `--model`)."""
    args = next(c for c in template["spec"]["containers"] if c["name"] == "runner")["args"]
    args[args.index("--model") + 1] = model


def _stray_workload(rs: list[RecordedResource], labels: dict[str, str] | None = None) -> list[RecordedResource]:
    """A Deployment a change puts in a tenant's namespace beside its jobs, neither a server nor a picker (`labels`:
    its pods' labels)."""
    stray = copy.deepcopy(next(r for r in rs if r.name == "review-labels-job"))
    template = stray.outputs["spec"]["template"]
    template["metadata"]["labels"] = labels or {"app": "stray"}
    stray.type, stray.name, stray.urn = (
        DEPLOYMENT,
        "stray",
        stray.urn.replace("batch/v1:Job::review-labels-job", "apps/v1:Deployment::stray"),
    )
    stray.outputs = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "stray", "namespace": "team-b"},
        "spec": {"selector": {"matchLabels": {"app": "stray"}}, "template": template},
    }
    return [*rs, stray]


@pytest.mark.parametrize(
    ("change", "flagged"),
    [
        (lambda rs: [r for r in rs if r.name != BATCH_EGRESS], BATCH_JOBS),
        (_job_template("review-labels-job", lambda t: t["metadata"]["labels"].update(UNMESHED)), {"review-labels-job"}),
        (_job_template("review-labels-job", lambda t: t["metadata"]["annotations"].pop(
            "traffic.sidecar.istio.io/excludeOutboundIPRanges")), {"review-labels-job"}),
        # Its output bucket, and Hugging Face, where its model comes from, must stay reachable (the bucket
        # holds the weights of team-b's labeller too).
        (lambda rs: [r for r in rs if r.name != "team-b-egress-s3"],
         BATCH_JOBS | {"batch-labeller-v1-knative-service", "egress-gateway-tenant-team-b"}),
        # In production a job reads its model from the weight mirror's copy: one downloading it from Hugging Face
        # itself is refused (and its namespace names no Hugging Face host to reach it by).
        (_job_template("review-labels-job", lambda t: _runner_model(t, "Qwen/Qwen2.5-7B-Instruct")), {"review-labels-job"}),
        # Anything else in a tenant's namespace is held to the same, unless it is a picker.
        (_stray_workload, {"stray"}),
        # ... a picker's label on pods that run other images than the picker's included.
        (lambda rs: _stray_workload(rs, {"app.kubernetes.io/component": "endpoint-picker"}), {"stray"}),
        # The sidecar's stub running a command of its own runs it as the proxy, around the proxy.
        (_job_template("review-labels-job", lambda t: t["spec"]["initContainers"][0].update(command=["sh", "-c", "x"])),
         {"review-labels-job"}),
        (_job_template("review-labels-job", lambda t: t["spec"].update(hostNetwork=True)), {"review-labels-job"}),
        # A tenant namespace the injector skips leaves every pod in it without the sidecar.
        (_namespace_labels("team-b", {"istio-injection": "disabled"}), {"team-b"}),
    ],
    ids=["no-sidecar", "unmeshed", "credentials-through-the-sidecar", "no-s3-entry", "downloads-from-hugging-face", "stray",
         "stray-labelled-as-a-picker", "stub-with-a-command", "host-network", "namespace-not-injected"],
)  # fmt: skip
def test_a_tenants_batch_jobs_and_any_other_workload_egress_by_host(harness, baseline, change, flagged):
    hits = harness.analyze_stack(stack_with(baseline, change))
    assert {d.urn.rsplit("::", 1)[-1] for d in hits if d.policy == "tenant-egress-by-host"} == flagged


PICKER_API = "team-a-allow-picker-api-egress"
TENANT_HTTPS = "team-b-allow-hugging-face-egress"  # team-b's servers and jobs to Hugging Face's CDN, outside production


def _download_rule(selector: dict[str, Any] | None = None):
    """Team-b's namespace with the Hugging Face download rule a stack outside production without a weight mirror
    renders (HTTPS anywhere but instance metadata, for its servers' and jobs' pods), selecting `selector` instead."""
    from components.specs.network import HUGGING_FACE_DOWNLOADERS, https_anywhere, network_policy

    def changed(records: list[RecordedResource]) -> list[RecordedResource]:
        rule = copy.deepcopy(next(r for r in records if r.name == "team-b-allow-egress-gateway-egress"))
        spec = network_policy("team-b", "allow-hugging-face-egress", "Egress", https_anywhere(), HUGGING_FACE_DOWNLOADERS)
        if selector is not None:
            spec["spec"]["podSelector"] = selector
        rule.name, rule.urn = TENANT_HTTPS, rule.urn.replace("team-b-allow-egress-gateway-egress", TENANT_HTTPS)
        rule.inputs = rule.outputs = spec
        return [*records, rule]

    return changed


def test_a_download_rule_selecting_the_pickers_lets_them_out(baseline):
    """Outside production a tenant without a weight mirror keeps the Hugging Face download rule for its servers' and
    jobs' pods; NetworkPolicies add up, so one selecting every pod lets the pickers out too. (In production the rule
    itself is refused: test_policy_bypasses.py.)"""
    staging = PolicyHarness("staging")
    assert "tenant-egress-by-host" not in analyze_stack(staging, stack_with(baseline, _download_rule()))
    hits = staging.analyze_stack(stack_with(baseline, _download_rule({})))
    assert {d.urn.rsplit("::", 1)[-1] for d in hits if d.policy == "tenant-egress-by-host"} == {TENANT_HTTPS}


@pytest.mark.parametrize(
    ("change", "flagged"),
    [
        (lambda rs: rs, set()),
        # NetworkPolicies add up: one that selects the pickers and lets them out is enough.
        (edit(PICKER_API, lambda p: p["spec"]["egress"][0]["to"].append({"ipBlock": {"cidr": "0.0.0.0/0"}})), {PICKER_API}),
        (edit(PICKER_API, lambda p: p["spec"]["egress"].append({"ports": [{"protocol": "TCP", "port": 443}]})), {PICKER_API}),
        # In-cluster peers by selector, and a narrower private block, are within what a picker may reach.
        (edit(PICKER_API, lambda p: p["spec"]["egress"][0]["to"].append({"ipBlock": {"cidr": "10.1.0.0/16"}})), set()),
    ],
    ids=["as-rendered", "public-block", "rule-without-to", "narrower-private-block"],
)  # fmt: skip
def test_an_endpoint_pickers_egress_stays_within_private_addresses(harness, baseline, change, flagged):
    hits = harness.analyze_stack(stack_with(baseline, change))
    assert {d.urn.rsplit("::", 1)[-1] for d in hits if d.policy == "tenant-egress-by-host"} == flagged


def test_the_packs_picker_addresses_are_the_programs():
    from components.specs.network import POD_IDENTITY_AGENT_CIDRS, PRIVATE_CIDRS
    from policies.inference_governance.tenant_egress import PICKER_EGRESS_CIDRS

    assert PICKER_EGRESS_CIDRS == (*PRIVATE_CIDRS, *POD_IDENTITY_AGENT_CIDRS)


def test_the_egress_rule_reads_the_adapters_the_fetcher_downloads_from_hugging_face():
    """The pack reads the program's adapter fetcher as it builds it: a Hugging Face adapter on a model whose weights
    are on S3 still needs Hugging Face's hosts."""
    from components.specs.vllm_parts import adapter_fetch_containers
    from platform_config.adapters import AdapterModule, LoraLimits
    from platform_config.models import ModelSource
    from policies.inference_governance.tenant_egress import _hugging_face_reads

    source = ModelSource(huggingface="org/support-adapter", revision="a" * 40)
    lora = LoraLimits((AdapterModule("support", None, source, 16, "base", "team-a"),), 16, 1, 1)
    (fetcher,) = adapter_fetch_containers(lora, "vllm/vllm-openai:v0.33.0", "public.ecr.aws/aws-cli/aws-cli:2.27.50", [], [])
    assert _hugging_face_reads(fetcher) == ["org/support-adapter"]
