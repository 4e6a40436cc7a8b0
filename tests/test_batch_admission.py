"""The admission policy that holds a tenant's own GPU Jobs to a Kueue queue: its CEL evaluated
for real (cel-python) on sample Jobs and on the platform's own, the objects in the preview, and
the Kueue behaviour it relies on, read at the pinned tag."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import celpy
import pytest

from components.constants import LABEL_TENANT
from components.specs.batch_admission import (
    GPU_JOB_MESSAGE,
    GPU_JOB_RULE,
    GPU_JOB_VARIABLES,
    GPU_JOBS_POLICY,
    gpu_jobs_policy,
    gpu_jobs_policy_binding,
)
from components.specs.kueue import QUEUE_NAME_LABEL
from platform_config.pins import KUEUE

from .helpers import mirror_show, schema_validator

KUEUE_MIRROR = Path("kubernetes-sigs+kueue")  # read in ../shared/upstream-sources
ENV = celpy.Environment()


def admitted(obj: dict[str, Any], old: dict[str, Any] | None = None) -> bool:
    """The policy's verdict as the API server reaches it: its variables in order (each may read
    those before it; one that fails is an error only where it is read, as Kubernetes evaluates
    them lazily), then its one validation. An evaluation error is a refusal (failurePolicy Fail)."""
    spec = gpu_jobs_policy()["spec"]
    activation: dict[str, Any] = {
        "object": celpy.json_to_cel(obj),
        "oldObject": celpy.json_to_cel(old),
        "request": celpy.json_to_cel({"operation": "CREATE" if old is None else "UPDATE"}),
    }
    values: dict[str, Any] = {}
    for variable in spec["variables"]:
        activation["variables"] = celpy.celtypes.MapType({celpy.celtypes.StringType(k): v for k, v in values.items()})
        try:
            values[variable["name"]] = ENV.program(ENV.compile(variable["expression"])).evaluate(activation)
        except celpy.CELEvalError as error:
            values[variable["name"]] = error
    activation["variables"] = celpy.celtypes.MapType({celpy.celtypes.StringType(k): v for k, v in values.items()})
    (validation,) = spec["validations"]
    try:
        result = ENV.program(ENV.compile(validation["expression"])).evaluate(activation)
    except celpy.CELEvalError:
        return False
    assert isinstance(result, celpy.celtypes.BoolType), result
    return bool(result)


def container(name: str, **resources: dict[str, str]) -> dict[str, Any]:
    return {"name": name, "image": "busybox", **({"resources": resources} if resources else {})}


def job(
    *containers: dict[str, Any], labels: dict[str, str] | None = None, init: tuple[dict[str, Any], ...] = ()
) -> dict[str, Any]:
    pod_spec: dict[str, Any] = {"restartPolicy": "Never", "containers": list(containers)}
    if init:
        pod_spec["initContainers"] = list(init)
    metadata: dict[str, Any] = {"name": "mine", "namespace": "team-b", **({"labels": labels} if labels is not None else {})}
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": metadata, "spec": {"template": {"spec": pod_spec}}}


def cron_job(job_labels: dict[str, str] | None, cron_labels: dict[str, str] | None = None) -> dict[str, Any]:
    template = job(container("main", limits={"nvidia.com/gpu": "1"}), labels=job_labels)
    job_template: dict[str, Any] = {"spec": template["spec"]}
    if "labels" in template["metadata"]:
        job_template["metadata"] = {"labels": template["metadata"]["labels"]}
    metadata = {"name": "nightly", "namespace": "team-b", **({"labels": cron_labels} if cron_labels else {})}
    return {
        "apiVersion": "batch/v1",
        "kind": "CronJob",
        "metadata": metadata,
        "spec": {"schedule": "0 3 * * *", "jobTemplate": job_template},
    }


GPU = {"limits": {"nvidia.com/gpu": "1"}}
QUEUED = {QUEUE_NAME_LABEL: "batch"}


@pytest.mark.parametrize(
    ("sample", "allowed"),
    [
        pytest.param(job(container("main", **GPU), labels=QUEUED), True, id="gpu-job-with-a-queue"),
        pytest.param(job(container("main", **GPU)), False, id="gpu-job-without-labels"),
        pytest.param(job(container("main", **GPU), labels={"app": "x"}), False, id="gpu-job-with-other-labels"),
        pytest.param(job(container("main", requests={"nvidia.com/gpu": "2"})), False, id="gpu-requested-not-limited"),
        pytest.param(job(container("main", **GPU), labels={QUEUE_NAME_LABEL: ""}), False, id="empty-queue-name"),
        pytest.param(job(container("main", requests={"cpu": "2"}, limits={"memory": "1Gi"})), True, id="cpu-only-job"),
        pytest.param(job(container("main")), True, id="job-without-resources"),
        pytest.param(
            job(container("main", requests={"cpu": "1"}), init=(container("warm", requests={"nvidia.com/mig-1g.10gb": "1"}),)),
            False,
            id="mig-request-in-an-init-container",
        ),
        pytest.param(
            job(container("a", requests={"cpu": "1"}), container("b", limits={"nvidia.com/mig-3g.40gb": "1"})),
            False,
            id="mig-limit-in-a-second-container",
        ),
        pytest.param(cron_job(None), False, id="cron-job-without-a-queue"),
        pytest.param(cron_job(QUEUED), True, id="cron-job-whose-jobs-carry-a-queue"),
        pytest.param(cron_job(None, cron_labels=QUEUED), False, id="cron-job-labelled-itself-not-its-jobs"),
    ],
)
def test_a_gpu_job_is_created_only_with_a_queue_name(sample, allowed):
    assert admitted(sample) is allowed


def test_the_label_on_the_pod_template_is_not_the_jobs():
    """Kueue reads the Job's own labels (QueueNameForObject), not its pods'."""
    sample = job(container("main", **GPU))
    sample["spec"]["template"]["metadata"] = {"labels": QUEUED}
    assert not admitted(sample)


def test_updates_cannot_take_a_gpu_job_out_of_its_queue():
    queued = job(container("main", **GPU), labels=QUEUED)
    queued["spec"]["suspend"] = True
    unlabelled = copy.deepcopy(queued)
    del unlabelled["metadata"]["labels"]
    emptied = copy.deepcopy(queued)
    emptied["metadata"]["labels"][QUEUE_NAME_LABEL] = ""
    assert not admitted(unlabelled, old=queued)
    assert not admitted(emptied, old=queued)
    relabelled = copy.deepcopy(queued)
    relabelled["metadata"]["labels"][QUEUE_NAME_LABEL] = "batch-other"
    assert admitted(relabelled, old=queued)
    # A CronJob's job template likewise.
    assert not admitted(cron_job(None), old=cron_job(QUEUED))


def test_a_gpu_job_from_before_the_policy_stays_updatable_but_cannot_be_resumed():
    """An unlabelled GPU Job created before the policy: its updates (a finalizer removed, a
    scale-down) pass, so deleting it never hangs; resuming it would start it outside the queue."""
    running = job(container("main", **GPU))
    finalized = copy.deepcopy(running)
    finalized["metadata"]["finalizers"] = []
    assert admitted(finalized, old=running)
    suspended = copy.deepcopy(running)
    suspended["spec"]["suspend"] = True
    resumed = copy.deepcopy(running)
    resumed["spec"]["suspend"] = False
    assert not admitted(resumed, old=suspended)
    assert not admitted(running, old=suspended)
    assert admitted(suspended, old=suspended)


def test_every_variable_is_read_and_the_rule_compiles():
    """No variable is left unused (a misspelt `variables.<name>` would be an error, refused)."""
    texts = [GPU_JOB_RULE, *GPU_JOB_VARIABLES.values()]
    for name in GPU_JOB_VARIABLES:
        assert any(f"variables.{name}" in text for text in texts), name
    for text in texts:
        ENV.compile(text)


# --- in the preview --------------------------------------------------------------------------


def test_the_platforms_own_jobs_pass_the_policy(previews):
    """The platform's batch Jobs carry their queue's label, so the policy admits them whatever
    the order they are created in."""
    jobs = previews["prod"].objects("Job", "batch/v1")
    assert jobs
    for manifest in jobs:
        assert admitted(manifest), manifest["metadata"]["name"]
        assert admitted(manifest, old=manifest), manifest["metadata"]["name"]


def test_the_policy_and_binding_are_declared_with_kueue_and_validate_strictly(previews):
    run = previews["prod"]
    assert run.result.returncode == 0, run.result.stdout[-3000:]
    (policy,) = run.objects("ValidatingAdmissionPolicy", "admissionregistration.k8s.io/v1")
    (binding,) = run.objects("ValidatingAdmissionPolicyBinding", "admissionregistration.k8s.io/v1")
    assert policy == gpu_jobs_policy() and binding == gpu_jobs_policy_binding()
    assert binding["spec"]["policyName"] == policy["metadata"]["name"] == GPU_JOBS_POLICY
    assert binding["spec"]["validationActions"] == ["Deny"] and policy["spec"]["failurePolicy"] == "Fail"
    assert QUEUE_NAME_LABEL in GPU_JOB_MESSAGE
    checked = {o["object"]: o for o in run.report["schemas"]["data"]["objects"]}
    for kind in ("ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"):
        entry = checked[f"{kind} {GPU_JOBS_POLICY} (admissionregistration.k8s.io/v1)"]
        assert entry["status"] == "valid" and entry["schema"].startswith("kubernetes-validate 1.33"), entry
    # Dev installs no Kueue, so no policy that would point tenants at queues it does not have.
    assert not previews["dev"].objects("ValidatingAdmissionPolicy")


def test_the_binding_selects_exactly_the_tenants_namespaces(previews):
    (expression,) = gpu_jobs_policy_binding()["spec"]["matchResources"]["namespaceSelector"]["matchExpressions"]
    assert expression["operator"] == "Exists"
    selected = {
        n["metadata"]["name"] for n in previews["prod"].objects("Namespace") if expression["key"] in n["metadata"]["labels"]
    }
    tenants = {
        n["metadata"]["labels"][LABEL_TENANT]
        for n in previews["prod"].objects("Namespace")
        if LABEL_TENANT in n["metadata"]["labels"]
    }
    assert selected == tenants and {"team-a", "team-b"} <= selected
    assert not selected & {"kueue-system", "kube-system", "gpu-operator"}


def test_the_strict_schemas_catch_a_misspelt_field_of_these_kinds():
    validator = schema_validator()
    policy, binding = gpu_jobs_policy(), gpu_jobs_policy_binding()
    assert validator.validate(policy).status == validator.validate(binding).status == "valid"
    policy["spec"]["validations"][0]["messsage"] = policy["spec"]["validations"][0].pop("message")
    binding["spec"]["validationAction"] = binding["spec"].pop("validationActions")
    assert validator.validate(policy).status == validator.validate(binding).status == "invalid"


# --- what Kueue does, at the pinned tag ----------------------------------------------------


def test_kueue_ignores_an_unlabelled_job_and_holds_one_whose_queue_is_missing():
    tag = f"v{KUEUE.version}"
    reconciler = mirror_show(KUEUE_MIRROR, tag, "pkg/controller/jobframework/reconciler.go")
    assert 'log.V(3).Info("queue-name label is not set, ignoring the job")' in reconciler
    utils = mirror_show(KUEUE_MIRROR, tag, "pkg/controller/jobframework/utils.go")
    # A queue name, existing or not, makes the webhook create the Job suspended.
    assert 'if QueueNameForObject(jobObj) != "" {\n\t\treturn true, nil' in utils
    workload = mirror_show(KUEUE_MIRROR, tag, "pkg/controller/core/workload_controller.go")
    assert 'fmt.Sprintf("LocalQueue %s doesn\'t exist", wl.Spec.QueueName)' in workload


def test_kueue_defaults_the_queue_only_where_a_local_queue_named_default_exists(previews):
    tag = f"v{KUEUE.version}"
    defaults = mirror_show(KUEUE_MIRROR, tag, "pkg/controller/jobframework/defaults.go")
    assert "if !defaultQueueExist(jobObj.GetNamespace()) {\n\t\treturn false" in defaults
    constants = mirror_show(KUEUE_MIRROR, tag, "pkg/controller/constants/constants.go")
    assert 'DefaultLocalQueueName kueue.LocalQueueName = "default"' in constants
    # The platform names none of its LocalQueues `default`.
    assert "default" not in {q["metadata"]["name"] for q in previews["prod"].objects("LocalQueue")}
