"""The first-`up` stage: on an empty cluster, nothing the program creates comes before a webhook
that would refuse or change it, or before its CRD (preview/first_up.py, against what the pinned
charts and operators register, preview/webhook_inventory/)."""

from __future__ import annotations

import copy
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from components.specs.kueue import KUEUE_CHART_FRAMEWORKS, KUEUE_MANAGED_NAMESPACES, kueue_values
from preview.engine import RecordedResource
from preview.first_up import KNATIVE_SERVING, WAIT_FOR, CreatedObject, check_first_up, namespace_labels_of, plural
from preview.webhook_inventory import (
    LabelSelector,
    Rule,
    Webhook,
    kube_prometheus_stack,
    kueue,
)

from .batch_helpers import KUEUE_MIRROR
from .helpers import ROOT, _shared_evaluation, mirror_show, raw_stack

KPS_MIRROR = Path("prometheus-community+helm-charts")


@pytest.fixture
def prod() -> list[RecordedResource]:
    """A copy of its own for each test, which may change it."""
    return _shared_evaluation(raw_stack("prod"), None, None).resources


def _release(resources: list[RecordedResource], chart: str) -> RecordedResource:
    found = [r for r in resources if r.type == "kubernetes:helm.sh/v3:Release" and str(r.inputs["chart"]).endswith(chart)]
    assert len(found) == 1, chart
    return found[0]


def _named(resources: list[RecordedResource], name: str) -> RecordedResource:
    found = [r for r in resources if r.name == name]
    assert len(found) == 1, name
    return found[0]


def _has_finding(findings: list[str], start: str, *parts: str) -> bool:
    """Whether a finding starts so and names each part."""
    return any(f.startswith(start) and all(part in f for part in parts) for f in findings)


def _without_dependency_on(resources: list[RecordedResource], resource: RecordedResource, target: str) -> None:
    """Drop every dependency of `resource` through which it waits for `target` (a careless `depends_on`)."""
    by_urn = {r.urn: r for r in resources}

    def reaches(urn: str) -> bool:
        return urn == target or any(reaches(d) for d in by_urn[urn].dependencies)

    resource.dependencies = [d for d in resource.dependencies if not reaches(d)]


@pytest.mark.parametrize("stack", ["dev", "staging", "prod"])
def test_every_committed_stack_comes_up_in_order(stack: str) -> None:
    result = check_first_up(_shared_evaluation(raw_stack(stack), None, None).resources)
    assert result.findings == [] and result.unread == [] and result.preinstalled == []
    assert not result.failed


def test_prod_lists_the_webhooks_in_its_way_and_what_they_intercept(prod: list[RecordedResource]) -> None:
    result = check_first_up(prod)
    hits = {(label.split(" (")[0], w.name): (w.failure_policy, hit) for label, w, hit in result.webhooks}
    knative = hits[("KnativeServing knative-serving/knative-serving", "validation.webhook.serving.knative.dev")]
    assert knative == (
        "Fail",
        ["Service serving/llama-8b-batch-v1", "Service serving/llama-8b-v1", "Service serving/llama-8b-v2"],
    )
    injector = hits[("Helm release istio-system/istiod", "namespace.sidecar-injector.istio.io")][1]
    # The servers and their pickers: the tenants' namespaces ask for injection.
    assert "the pods of Deployment serving/llama-70b-v1" in injector
    assert "the pods of Deployment serving/llama-70b-v1-epp" in injector
    # The gateways' pods (the ingress and the egress gateway, the same chart) ask for it themselves (and keep the
    # image `auto` without it).
    assert hits[("Helm release istio-system/istiod", "object.sidecar-injector.istio.io")][1] == ["the gateway chart's pods"] * 2
    # Kueue's job webhooks see the tenants' Jobs only: not the weight mirror's, nor any chart's.
    jobs = hits[("Helm release kueue-system/kueue", "mjob.kb.io")]
    assert jobs == ("Fail", ["Job team-b/batch-review-labels", "Job team-b/batch-ticket-labels"])
    # Its pod and Deployment webhooks are Ignore and change nothing (their integrations are off), and
    # see the tenants' namespaces only.
    policy, pods = hits[("Helm release kueue-system/kueue", "mpod.kb.io")]
    assert policy == "Ignore" and {p.rsplit(" ", 1)[-1].split("/")[0] for p in pods} == {"serving", "team-a", "team-b"}
    kueue_release = next(r for r in result.installers if r.chart == "kueue")
    assert not next(w for w in kueue_release.installer.webhooks if w.name == "mpod.kb.io").mutates
    # Istio's validators fail open until istiod answers.
    assert hits[("Helm release istio-system/istio-base", "validation.istio.io")][0] == "Ignore"
    # Kueue's chart renders its 43 entries whatever the values (21 mutating, 22 validating).
    assert len(kueue_release.installer.webhooks) == 43
    assert len(result.webhooks) == sum(len(r.installer.webhooks) for r in result.installers)


def test_a_knative_serving_not_awaited_is_found(prod: list[RecordedResource]) -> None:
    serving = next(r for r in prod if r.type == KNATIVE_SERVING)
    del serving.inputs["metadata"]["annotations"][WAIT_FOR]
    findings = check_first_up(prod).findings
    for service in ("llama-8b-v1", "llama-8b-v2", "llama-8b-batch-v1"):
        assert any(
            f.startswith(
                f"Service serving/{service} waits for KnativeServing knative-serving/knative-serving, which is not awaited"
            )
            and "validation.webhook.serving.knative.dev (validating, Fail" in f
            for f in findings
        ), findings
    # Its CRDs come with it too: a Knative Service's kind is served only once the operator has run.
    assert any("which defines serving.knative.dev but is not awaited" in f for f in findings)


def test_the_load_balancer_controllers_service_webhook_would_hold_every_service(prod: list[RecordedResource]) -> None:
    """Its chart's default (`enableServiceMutatorWebhook: true`, Fail, no namespace selector) sends every
    Service in the cluster through the controller; the platform turns it off."""
    controller = _release(prod, "aws-load-balancer-controller")
    assert controller.inputs["values"]["enableServiceMutatorWebhook"] is False
    controller.inputs["values"]["enableServiceMutatorWebhook"] = True
    findings = check_first_up(prod).findings
    service = [f for f in findings if "mservice.elbv2.k8s.aws" in f]
    assert any(
        f.startswith("Service serving/llama-70b-v1 is created without waiting for Helm release kube-system/aws") for f in service
    )
    assert any(f.startswith("the istiod chart's services is created without waiting") for f in service)


def test_kueue_with_the_charts_own_config_would_hold_every_pod(prod: list[RecordedResource]) -> None:
    """The chart's own manager config turns on the pod, deployment and statefulset integrations, which
    makes its pod and Deployment webhooks Fail in every namespace but kube-system and its own."""
    release = _release(prod, "kueue")
    del release.inputs["values"]["managerConfig"]
    findings = check_first_up(prod).findings
    assert any(
        f.startswith("the istiod chart's pods is created without waiting for Helm release kueue-system/kueue") for f in findings
    )
    assert any(f.startswith("the pods of Deployment serving/llama-70b-v1 is created without waiting for") for f in findings)
    assert any(
        f.startswith("Job model-weights/serving-llama-3-1-70b-instruct") and "mjob.kb.io (mutating, Fail" in f for f in findings
    )


def test_a_picker_created_before_the_injector_is_found(prod: list[RecordedResource]) -> None:
    istiod = _release(prod, "istiod")
    picker = _named(prod, "llama-70b-v1-epp-deployment")
    _without_dependency_on(prod, picker, istiod.urn)
    findings = check_first_up(prod).findings
    assert findings == [
        "the pods of Deployment serving/llama-70b-v1-epp is created without waiting for Helm release istio-system/istiod "
        "(istiod 1.30.3): namespace.sidecar-injector.istio.io (mutating, Fail: refused while it cannot answer, created "
        "without its changes if it comes before the webhook is registered)"
    ]


def test_a_mesh_rule_created_before_its_crd_is_found(prod: list[RecordedResource]) -> None:
    base = _release(prod, "base")
    rule = _named(prod, "llama-70b-v1-epp-to-servers-destinationrule")
    _without_dependency_on(prod, rule, base.urn)
    assert check_first_up(prod).findings == [
        "DestinationRule serving/llama-70b-v1-epp-to-servers is created without waiting for Helm release "
        "istio-system/istio-base (base 1.30.3), which defines networking.istio.io: the engine retries an unknown kind "
        "for about a minute only"
    ]


def test_a_chart_or_version_not_read_is_a_finding(prod: list[RecordedResource]) -> None:
    release = _release(prod, "kueue")
    release.inputs["version"] = "0.20.0"
    unknown = copy.deepcopy(release)
    unknown.urn, unknown.inputs["chart"], unknown.inputs["version"] = unknown.urn + "-other", "some-operator", "1.0.0"
    result = check_first_up([*prod, unknown])
    assert result.failed
    assert result.unread == [
        "Helm release kueue-system/kueue (kueue 0.20.0): read at 0.19.2 only",
        "Helm release kueue-system/kueue (some-operator 1.0.0): not read",
    ]


def test_a_wait_for_other_than_ready_is_no_wait_for_its_webhooks(prod: list[RecordedResource]) -> None:
    serving = next(r for r in prod if r.type == KNATIVE_SERVING)
    serving.inputs["metadata"]["annotations"][WAIT_FOR] = "jsonpath={.metadata.name}"
    findings = check_first_up(prod).findings
    assert any(
        f.startswith(
            "Service serving/llama-8b-v1 waits for KnativeServing knative-serving/knative-serving, which is not "
            "awaited (pulumi.com/waitFor is 'jsonpath={.metadata.name}', not 'condition=Ready'"
        )
        for f in findings
    ), findings


def test_knative_servings_own_pods_wait_for_the_injector(prod: list[RecordedResource]) -> None:
    """The operator's Deployments land in knative-serving, which asks for injection: Knative's own
    activator and webhook pods would keep no sidecar if the KnativeServing came before istiod."""
    serving = next(r for r in prod if r.type == KNATIVE_SERVING)
    _without_dependency_on(prod, serving, _release(prod, "istiod").urn)
    findings = check_first_up(prod).findings
    start = "Knative Serving's pods is created without waiting for Helm release istio-system/istiod"
    assert _has_finding(findings, start, "namespace.sidecar-injector.istio.io"), findings


def test_a_cronjobs_jobs_and_a_charts_hook_jobs_are_held_to_kueues_webhooks(prod: list[RecordedResource]) -> None:
    release = _release(prod, "kueue")
    del release.inputs["values"]["managerConfig"]
    job = next(r for r in prod if r.name == "review-labels-job")
    cron = copy.deepcopy(job)
    cron.urn, cron.name, cron.dependencies = cron.urn + "-cron", "nightly", []
    cron.type = "kubernetes:batch/v1:CronJob"
    cron.inputs = {
        "apiVersion": "batch/v1",
        "kind": "CronJob",
        "metadata": {"name": "nightly", "namespace": "team-b"},
        "spec": {"schedule": "0 1 * * *", "jobTemplate": {"metadata": {"labels": {}}, "spec": job.inputs["spec"]}},
    }
    findings = check_first_up([*prod, cron]).findings
    assert any(
        f.startswith("the Jobs of CronJob team-b/nightly is created without waiting for Helm release kueue") for f in findings
    )
    # The chart's hook Jobs come before Kueue (which waits for the Prometheus Operator): never refused, but
    # left without what Kueue's job webhook would add; its validating twin never sees them.
    hooks = [f for f in findings if f.startswith("the kube-prometheus-stack chart's jobs is created without waiting")]
    assert hooks and all("mjob.kb.io" in f and "vjob.kb.io" not in f for f in hooks)


def test_a_namespace_is_matched_on_its_own_labels() -> None:
    """A webhook's namespace selector holds a Namespace to its own labels (its name's included), and does
    not apply to other cluster-scoped objects."""
    selector = LabelSelector(expressions=(("team", "In", ("a",)),))
    webhook = Webhook("n.example.com", "validating", "Fail", (Rule(("",), ("namespaces",), ("CREATE",)),), "-", selector)
    namespace = CreatedObject("urn", "Namespace a", "", "namespaces", None, {"team": "a"}, "a")
    other = CreatedObject("urn", "Namespace b", "", "namespaces", None, {"team": "b"}, "b")
    labels = namespace_labels_of(namespace, {})
    assert labels == {"team": "a", "kubernetes.io/metadata.name": "a"}
    assert webhook.intercepts("", "namespaces", "CREATE", labels, namespace.labels)
    assert not webhook.intercepts("", "namespaces", "CREATE", namespace_labels_of(other, {}), other.labels)
    role = CreatedObject("urn", "ClusterRole r", "rbac.authorization.k8s.io", "clusterroles", None, {}, "r")
    assert namespace_labels_of(role, {}) is None


def test_istio_values_outside_what_was_read_are_unread_or_followed(prod: list[RecordedResource]) -> None:
    istiod = _release(prod, "istiod")
    istiod.inputs["values"]["revision"] = "canary"
    assert check_first_up(prod).unread == [
        "Helm release istio-system/istiod (istiod 1.30.3): `revision` is set: its webhooks were read for the default "
        "revision of a local istiod"
    ]
    del istiod.inputs["values"]["revision"]
    # Validation failing closed from the start: every Istio object of a tenant's must then wait for istiod,
    # which serves the base chart's validator; today they wait for the base chart's CRDs only.
    base = _release(prod, "base")
    base.inputs["values"] = {**(base.inputs.get("values") or {}), "base": {"validationFailurePolicy": "Fail"}}
    findings = check_first_up(prod).findings
    start = "PeerAuthentication team-a/default is created without waiting for Helm release istio-system/istiod"
    assert _has_finding(findings, start, "validation.istio.io (validating, Fail"), findings
    serving = next(r for r in prod if r.type == KNATIVE_SERVING)
    serving.inputs["spec"]["version"] = "1.24"
    assert any(u.startswith("KnativeServing knative-serving/knative-serving: Serving 1.24") for u in check_first_up(prod).unread)


def test_label_selectors_match_as_the_api_server_does() -> None:
    selector = LabelSelector(
        {"a": "1"},
        (("b", "In", ("x", "y")), ("c", "NotIn", ("z",)), ("d", "Exists", ()), ("e", "DoesNotExist", ())),
    )
    assert selector.matches({"a": "1", "b": "x", "d": ""})
    assert selector.matches({"a": "1", "b": "y", "c": "w", "d": "v"})
    assert not selector.matches({"a": "2", "b": "x", "d": ""})
    assert not selector.matches({"a": "1", "b": "q", "d": ""})
    assert not selector.matches({"a": "1", "b": "x"})
    assert not selector.matches({"a": "1", "b": "x", "c": "z", "d": ""})
    assert not selector.matches({"a": "1", "b": "x", "d": "", "e": ""})
    assert LabelSelector().matches({})
    assert [plural(k) for k in ("NetworkPolicy", "Gateway", "Ingress", "Telemetry", "PodMonitor")] == [
        "networkpolicies",
        "gateways",
        "ingresses",
        "telemetries",
        "podmonitors",
    ]


def test_an_integration_that_implies_the_pod_one_makes_the_ignored_pod_webhooks_real() -> None:
    """The chart renders the pod webhooks Ignore unless "pod" is listed, but Kueue's manager turns the pod integration
    on for a listed LeaderWorkerSet, Deployment or StatefulSet one, and its real handler answers them: a pod created
    before Kueue is up may then miss a change. The platform lists none of the three."""
    listed = [f for f in KUEUE_CHART_FRAMEWORKS if f not in ("pod", "deployment", "statefulset")]
    config = yaml.safe_dump({"integrations": {"frameworks": listed}})
    hooks = {w.name: w for w in kueue({"managerConfig": {"controllerManagerConfigYaml": config}}, "x").webhooks}
    assert hooks["mpod.kb.io"].failure_policy == "Ignore" and hooks["mpod.kb.io"].mutates
    ours = {w.name: w for w in kueue(kueue_values(None, prometheus=True), "kueue-system").webhooks}
    assert ours["mpod.kb.io"].failure_policy == "Ignore" and not ours["mpod.kb.io"].mutates


def test_the_webhook_defaults_are_the_charts_own() -> None:
    """What the inventory assumes when the values leave a key alone, against the charts' values.yaml
    at the pinned tags (../shared/upstream-sources)."""
    chart_values = yaml.safe_load(mirror_show(KUEUE_MIRROR, "v0.19.2", "charts/kueue/values.yaml"))
    chart_config = yaml.safe_load(chart_values["managerConfig"]["controllerManagerConfigYaml"])
    assert tuple(chart_config["integrations"]["frameworks"]) == KUEUE_CHART_FRAMEWORKS
    assert "managedJobsNamespaceSelector" not in chart_config
    by_default = {w.name: w for w in kueue({}, "kueue-system").webhooks}
    assert by_default["mpod.kb.io"].failure_policy == "Fail"
    assert by_default["mpod.kb.io"].namespace_selector == LabelSelector(
        expressions=(("kubernetes.io/metadata.name", "NotIn", ("kube-system", "kueue-system")),)
    )
    ours = {w.name: w for w in kueue({"managerConfig": chart_values["managerConfig"]}, "kueue-system").webhooks}
    assert ours["mdeployment.kb.io"].failure_policy == "Fail"
    tenants = LabelSelector.from_manifest(KUEUE_MANAGED_NAMESPACES)
    scoped = yaml.safe_dump({**chart_config, "managedJobsNamespaceSelector": KUEUE_MANAGED_NAMESPACES})
    scoped_hooks = {w.name: w for w in kueue({"managerConfig": {"controllerManagerConfigYaml": scoped}}, "x").webhooks}
    assert scoped_hooks["mjob.kb.io"].namespace_selector == tenants

    kps = yaml.safe_load(mirror_show(KPS_MIRROR, "kube-prometheus-stack-81.4.3", "charts/kube-prometheus-stack/values.yaml"))
    hooks = kps["prometheusOperator"]["admissionWebhooks"]
    assert kps["prometheusOperator"]["enabled"] is True and hooks["enabled"] is True
    assert hooks["failurePolicy"] == "" and hooks["patch"]["enabled"] is True
    assert {w.failure_policy for w in kube_prometheus_stack({}, "monitoring").webhooks} == {"Ignore"}
    patched_off = {"prometheusOperator": {"admissionWebhooks": {"patch": {"enabled": False}}}}
    assert {w.failure_policy for w in kube_prometheus_stack(patched_off, "monitoring").webhooks} == {"Fail"}


def _project_copy(tmp_path: Path) -> Path:
    """The program, the preview and the stacks as a checkout of them would be, beside ../shared."""
    project = tmp_path / "main"
    project.mkdir()
    for name in ("__main__.py", "Pulumi.yaml"):
        shutil.copy2(ROOT / name, project / name)
    ignore = shutil.ignore_patterns("__pycache__", "venv")
    for folder in ("components", "platform_config", "preview", "stacks", "policies"):
        shutil.copytree(ROOT / folder, project / folder, ignore=ignore)
    (tmp_path / "shared").symlink_to((ROOT.parent / "shared").resolve())
    return project


def test_a_careless_change_that_stops_waiting_for_knative_fails_the_preview(tmp_path: Path) -> None:
    """The careless change in the program itself (the KnativeServing's wait dropped), previewed as a user
    previews it: exit 1, naming the resource and what it no longer waits for."""
    project = _project_copy(tmp_path)
    spec = project / "components" / "specs" / "knative.py"
    text = spec.read_text()
    assert text.count('"annotations": {PULUMI_WAIT_FOR: "condition=Ready"},') == 1
    spec.write_text(text.replace('"annotations": {PULUMI_WAIT_FOR: "condition=Ready"},', '"annotations": {},'))
    run = subprocess.run(
        [sys.executable, "-m", "preview", "--quiet", "--stack", "prod", "--out", str(tmp_path / "out")]
        + ["--policy-pack", str(ROOT / "policies")],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 1, run.stdout[-2000:] + run.stderr[-2000:]
    assert (
        "Service serving/llama-8b-v1 waits for KnativeServing knative-serving/knative-serving, which is not awaited (no "
        "pulumi.com/waitFor annotation" in run.stdout
    )
    assert "Traceback" not in run.stderr
