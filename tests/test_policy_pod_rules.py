"""The policy pack's rules on pods and on the stack's capacity, each with a violating and a compliant case, its
validators called in this process as the policy SDK's analyzer calls them (tests/policy_harness.py): the sidecar's
stub and pinned images, model-server hardening, GPU-less pods on GPU nodes, secrets in the environment, shell scripts
that quote every S3 location, quotas and GPU resources against the pools."""

from __future__ import annotations

import sys

import pytest

from preview.engine import RecordedResource

from . import policy_helpers
from .helpers import ROOT
from .policy_helpers import DEPLOYMENT, analyze, analyze_stack, both, find, stack_with, vllm

sys.path.insert(0, str(ROOT / "policies"))

# The policy tests' module fixtures (tests/policy_helpers.py), bound here for pytest to find.
baseline, harness = policy_helpers.baseline, policy_helpers.harness


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


def test_secret_env_names_are_whole_words(harness, baseline):
    record = find(baseline, DEPLOYMENT, "llama-70b-v1-deployment")
    vllm(record)["env"] += [{"name": "TOKENIZERS_PARALLELISM", "value": "false"}, {"name": "MAX_TOKENS", "value": "4096"}]
    assert analyze(harness, record) == {}
    vllm(record)["env"].append({"name": "DB_PASSWORD", "value": "hunter2"})
    assert analyze(harness, record) == {"no-plain-secret-env": "mandatory"}


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
