"""The first-`up` stage: would the program come up on an empty cluster, in the order the engine runs it?

The engine creates a resource once everything it depends on is created (the recorded
dependencies: `depends_on` and the inputs' outputs, a component's standing for its children), and
creates the rest in parallel. pulumi-kubernetes retries a create only while the kind is not yet
served or the namespace not yet there, for about a minute; an admission webhook that cannot answer
fails the create at once. So, on an empty cluster:

- every object the program creates, every pod and Job its workloads create, what an operator makes
  of a custom resource and every workload a chart it installs runs must wait for each installer
  whose webhook intercepts it (an API server's match: rules, namespace selector, object selector)
  when that webhook would refuse it (Fail) or change it (a mutating webhook: Istio's injector
  leaves a pod created before it without a sidecar, for good);
- every custom resource must wait for the installer of its CRD;
- an installer waited for must itself be awaited: a Helm release is (unless `skipAwait`); a custom
  resource an operator turns into webhooks and CRDs (KnativeServing) only with
  `pulumi.com/waitFor: condition=Ready`.

What each installer registers comes from preview/webhook_inventory/, read at the pinned tags.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from functools import cache
from typing import Any

from components.constants import KUBERNETES_API_GROUPS
from components.k8s_objects import HELM_RELEASE, YAML_CONFIG_FILE
from components.specs.network import NAMESPACE_NAME_LABEL

from .engine import RecordedResource
from .render import chart_name, is_kubernetes_object, unsecret
from .webhook_inventory import (
    CHARTS,
    CRD_FILES,
    FAIL,
    KNATIVE_SERVING_VERSIONS,
    MUTATING,
    Installer,
    UnreadValues,
    Webhook,
    knative_serving,
)

KNATIVE_SERVING = "kubernetes:operator.knative.dev/v1beta1:KnativeServing"
WAIT_FOR = "pulumi.com/waitFor"
# What KnativeServing's Ready condition stands for: every Deployment of the manifest available,
# the webhooks' included (knative/operator knative-v1.23.0 pkg/reconciler/common/deployments.go).
KNATIVE_READY = "condition=Ready"
# The core kinds whose pods come from `spec.template` (a CronJob and a Knative Service are read apart): every one the
# admission stage (WORKLOAD_KINDS) and the pack read, which tests/test_admission_stacks.py holds them to.
POD_TEMPLATE_KINDS = ("Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job")
# What installs objects the stage cannot see into: reported as not read.
OPAQUE_TYPES = ("kubernetes:helm.sh/v4:Chart", "kubernetes:yaml/v2:ConfigGroup", "kubernetes:kustomize/v2:Directory")
# Objects the program could declare that register webhooks or CRDs of their own: not modelled.
SELF_REGISTERING_KINDS = ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration", "CustomResourceDefinition")

# The workloads each pinned chart runs, by (group, resource), read in its templates at the pinned
# tag; a chart not named runs Deployments. The base chart runs none (CRDs, a ServiceAccount, the
# validator); istio-cni a DaemonSet; the GPU Operator its operator and the node agents'
# DaemonSets; kube-prometheus-stack the operator, kube-state-metrics and Grafana, node-exporter's
# DaemonSet, the StatefulSets its operator makes of Prometheus and Alertmanager, and the admission
# webhook's patch Jobs (hooks on every install and upgrade).
DEPLOYMENTS = (("apps", "deployments"),)
CHART_WORKLOADS: dict[str, tuple[tuple[str, str], ...]] = {
    "base": (),
    "cni": (("apps", "daemonsets"),),
    "gpu-operator": (("apps", "deployments"), ("apps", "daemonsets")),
    "kube-prometheus-stack": (("apps", "deployments"), ("apps", "daemonsets"), ("apps", "statefulsets"), ("batch", "jobs")),
}
# Pods of a chart's own workloads that its templates label for a webhook to see: the gateway's
# pods ask for injection (istio/istio 1.30.3 manifests/charts/gateway/templates/_helpers.tpl lines
# 27-31, `sidecar.istio.io/inject: "true"`; its container image is `auto`, which only the injector
# replaces, templates/deployment.yaml lines 72-73).
CHART_POD_LABELS: dict[str, dict[str, str]] = {"gateway": {"sidecar.istio.io/inject": "true"}}


@dataclass(frozen=True)
class InstallerRecord:
    urn: str
    label: str
    installer: Installer
    # Whether the engine waits for what it installs to be ready, and why not.
    awaited: bool
    unawaited_reason: str = ""
    # A Helm release's chart ("" for other installers).
    chart: str = ""


@dataclass(frozen=True)
class CreatedObject:
    """An object the API server is asked to create because of one of the program's resources."""

    creator: str  # the URN of the program's resource
    label: str
    group: str
    resource: str
    namespace: str | None
    labels: Mapping[str, str]
    # The object's own name, where it is one object (a Namespace's is what its selector matches).
    name: str = ""


@dataclass
class FirstUpResult:
    installers: list[InstallerRecord]
    # What registers webhooks or CRDs the stage has not read (a chart, a version, values, a file).
    unread: list[str]
    # Every webhook of the installers: (its installer's label, the webhook, the objects it intercepts).
    webhooks: list[tuple[str, Webhook, list[str]]]
    findings: list[str] = field(default_factory=list)
    # Custom resources whose CRD the program does not install (the cluster must have it).
    preinstalled: list[str] = field(default_factory=list)

    @property
    def failed(self) -> bool:
        return bool(self.findings or self.unread)


def plural(kind: str) -> str:
    """The resource a kind is served as (the API machinery's lower-case plural)."""
    lower = kind.lower()
    if lower.endswith("y") and lower[-2:-1] not in ("a", "e", "o", "u"):
        return lower[:-1] + "ies"
    if lower.endswith(("s", "x", "ch", "sh")):
        return lower + "es"
    return lower + "s"


def _group(api_version: str) -> str:
    return api_version.split("/", 1)[0] if "/" in api_version else ""


# A resource's inputs as the API server receives them (render.unsecret's): the rendering's, where it has them.
Bodies = Callable[[RecordedResource], dict[str, Any]]


def _unsecret_inputs(resource: RecordedResource) -> dict[str, Any]:
    return unsecret(resource.inputs)


def installers(
    resources: Iterable[RecordedResource], bodies: Bodies = _unsecret_inputs
) -> tuple[list[InstallerRecord], list[str]]:
    """Every resource of the program that installs webhooks or CRDs, with what it installs, and
    what installs some the stage has not read."""
    found: list[InstallerRecord] = []
    unread: list[str] = []
    for r in resources:
        try:
            record = _installer(r, bodies)
        except UnreadValues as error:
            unread.append(str(error))
            continue
        if record is not None:
            found.append(record)
        elif r.type in OPAQUE_TYPES:
            unread.append(f"{r.type} {r.name}: what it installs is not rendered offline")
        elif is_kubernetes_object(r) and str(bodies(r).get("kind")) in SELF_REGISTERING_KINDS:
            unread.append(f"{bodies(r).get('kind')} {r.name} declared by the program: not modelled")
    return found, unread


def _installer(r: RecordedResource, bodies: Bodies) -> InstallerRecord | None:
    """What one resource installs (None: nothing the stage knows of); UnreadValues where it was not read."""
    if r.type not in (HELM_RELEASE, KNATIVE_SERVING, YAML_CONFIG_FILE):
        return None
    inputs = bodies(r)
    if r.type == HELM_RELEASE:
        chart = chart_name(str(inputs.get("chart") or ""))
        version = str(inputs.get("version") or "")
        label = f"Helm release {inputs.get('namespace')}/{inputs.get('name')} ({chart} {version})"
        versions, read = CHARTS.get(chart, ((), None))
        if read is None or version not in versions:
            raise UnreadValues(f"{label}: {'read at ' + ', '.join(versions) + ' only' if versions else 'not read'}")
        try:
            installer = read(inputs.get("values") or {}, str(inputs.get("namespace") or "default"))
        except UnreadValues as error:
            raise UnreadValues(f"{label}: {error}") from None
        skip = bool(inputs.get("skipAwait"))
        return InstallerRecord(r.urn, label, installer, not skip, "skipAwait is set" if skip else "", chart)
    if r.type == KNATIVE_SERVING:
        metadata = inputs.get("metadata") or {}
        spec = inputs.get("spec") or {}
        label = f"KnativeServing {metadata.get('namespace')}/{metadata.get('name')}"
        if str(spec.get("version")) not in KNATIVE_SERVING_VERSIONS:
            raise UnreadValues(f"{label}: Serving {spec.get('version')} (read at {', '.join(KNATIVE_SERVING_VERSIONS)} only)")
        wait = (metadata.get("annotations") or {}).get(WAIT_FOR)
        if wait == KNATIVE_READY:
            reason = ""
        elif wait is None:
            reason = f"no {WAIT_FOR} annotation: the engine is done once the API server accepts it"
        else:
            reason = f"{WAIT_FOR} is {wait!r}, not {KNATIVE_READY!r}: the engine does not wait for its webhooks"
        return InstallerRecord(r.urn, label, knative_serving(spec), wait == KNATIVE_READY, reason)
    if r.type == YAML_CONFIG_FILE:
        url = str(inputs.get("file") or "")
        groups = CRD_FILES.get(url)
        if groups is None:
            raise UnreadValues(f"CRD file {r.name} ({url}): not read")
        # pulumi-kubernetes does not await a CRD until it is Established (no awaiter for the kind,
        # v4.32.0 provider/pkg/await/awaiters.go), but what depends on the file waits for every
        # CRD's create, and a kind served seconds later is inside the ~63 s the engine retries a
        # NoMatch (provider/pkg/await/await.go).
        return InstallerRecord(r.urn, f"CRDs {r.name}", Installer((), groups, url), True)
    return None


def _namespace_labels(resources: Iterable[RecordedResource], bodies: Bodies) -> dict[str, dict[str, str]]:
    labels: dict[str, dict[str, str]] = {}
    for r in resources:
        if r.type == "kubernetes:core/v1:Namespace":
            metadata = bodies(r).get("metadata") or {}
            name = str(metadata.get("name") or r.name)
            # The API server labels every namespace with its name.
            labels[name] = {**(metadata.get("labels") or {}), NAMESPACE_NAME_LABEL: name}
    return labels


def _pod_template(kind: str, body: Mapping[str, Any]) -> Mapping[str, Any] | None:
    spec = body.get("spec") or {}
    if kind in POD_TEMPLATE_KINDS:
        return spec.get("template")
    if kind == "CronJob":
        return ((spec.get("jobTemplate") or {}).get("spec") or {}).get("template")
    return None


def created_objects(resources: Iterable[RecordedResource], bodies: Bodies = _unsecret_inputs) -> Iterator[CreatedObject]:
    """What the API server is asked to create: the program's objects, their workloads' pods (a
    CronJob's Jobs, a Knative Service's Revision Deployment), what the Knative operator makes of a
    KnativeServing, and each Helm release's workloads, pods and Services."""
    for r in resources:
        if r.type == HELM_RELEASE:
            yield from _release_objects(r, bodies(r))
        elif is_kubernetes_object(r):
            yield from _program_objects(r, bodies(r))
        if r.type == KNATIVE_SERVING:
            yield from _knative_serving_objects(r, bodies(r))


def _release_objects(release: RecordedResource, inputs: Mapping[str, Any]) -> Iterator[CreatedObject]:
    namespace = str(inputs.get("namespace") or "default")
    chart = chart_name(str(inputs.get("chart") or ""))
    common = {"app.kubernetes.io/instance": str(inputs.get("name") or release.name)}
    workloads = CHART_WORKLOADS.get(chart, DEPLOYMENTS)
    for group, resource in workloads:
        yield CreatedObject(release.urn, f"the {chart} chart's {resource}", group, resource, namespace, common)
    if workloads:
        yield CreatedObject(release.urn, f"the {chart} chart's services", "", "services", namespace, common)
        pod_labels = {**common, **CHART_POD_LABELS.get(chart, {})}
        yield CreatedObject(release.urn, f"the {chart} chart's pods", "", "pods", namespace, pod_labels)


def _knative_serving_objects(serving: RecordedResource, body: Mapping[str, Any]) -> Iterator[CreatedObject]:
    """Serving's and net-istio's Deployments and pods, in the KnativeServing's namespace (the
    operator's manifests label them app.kubernetes.io/name: knative-serving)."""
    metadata = body.get("metadata") or {}
    namespace = str(metadata.get("namespace") or "knative-serving")
    labels = {"app.kubernetes.io/name": "knative-serving"}
    yield CreatedObject(serving.urn, "Knative Serving's deployments", "apps", "deployments", namespace, labels)
    yield CreatedObject(serving.urn, "Knative Serving's pods", "", "pods", namespace, labels)


def _program_objects(resource: RecordedResource, body: Mapping[str, Any]) -> Iterator[CreatedObject]:
    kind = str(body.get("kind") or "")
    metadata = body.get("metadata") or {}
    namespace = metadata.get("namespace")
    name = str(metadata.get("name") or resource.name)
    where = f"{namespace}/{name}" if namespace else name
    group = _group(str(body.get("apiVersion") or ""))
    yield CreatedObject(resource.urn, f"{kind} {where}", group, plural(kind), namespace, metadata.get("labels") or {}, name)
    template = _pod_template(kind, body)
    if kind == "CronJob" and group == "batch":
        job_labels = (((body.get("spec") or {}).get("jobTemplate") or {}).get("metadata") or {}).get("labels") or {}
        yield CreatedObject(resource.urn, f"the Jobs of {kind} {where}", "batch", "jobs", namespace, job_labels)
    if group == "serving.knative.dev" and kind == "Service":
        # Knative's controller makes a Revision, its Deployment and pods, labelled with the
        # Configuration and Service (knative/serving pkg/reconciler/revision/resources/meta.go).
        revision = {"serving.knative.dev/configuration": name, "serving.knative.dev/service": name}
        label = f"the Revision Deployments of {kind} {where}"
        yield CreatedObject(resource.urn, label, "apps", "deployments", namespace, revision)
        template = (body.get("spec") or {}).get("template") or {}
        template_labels = (template.get("metadata") or {}).get("labels") or {}
        template = {"metadata": {"labels": {**template_labels, **revision}}}
    if template is not None:
        pod_labels = (template.get("metadata") or {}).get("labels") or {}
        yield CreatedObject(resource.urn, f"the pods of {kind} {where}", "", "pods", namespace, pod_labels)


Waits = Callable[[str], frozenset[str]]


def check_first_up(resources: list[RecordedResource], api_inputs: Mapping[str, dict[str, Any]] | None = None) -> FirstUpResult:
    """`api_inputs`: each resource's inputs as the API server receives them, by URN, where the rendering has them
    (render.Rendered.api_inputs; the others are converted here)."""
    by_urn = {r.urn: r for r in resources}
    known = api_inputs or {}

    def bodies(r: RecordedResource) -> dict[str, Any]:
        body = known.get(r.urn)
        return body if body is not None else unsecret(r.inputs)

    @cache
    def waits_for(urn: str) -> frozenset[str]:
        record = by_urn.get(urn)
        if record is None:
            return frozenset()
        found: set[str] = set()
        for dependency in record.dependencies:
            found.add(dependency)
            found |= waits_for(dependency)
        return frozenset(found)

    found, unread = installers(resources, bodies)
    objects = list(created_objects(resources, bodies))
    webhooks, findings = _webhook_order(found, objects, _namespace_labels(resources, bodies), waits_for)
    crd_findings, preinstalled = _crd_order(found, objects, waits_for)
    return FirstUpResult(found, unread, webhooks, [*findings, *crd_findings], preinstalled)


def _webhook_order(
    found: list[InstallerRecord], objects: list[CreatedObject], namespaces: Mapping[str, Mapping[str, str]], waits_for: Waits
) -> tuple[list[tuple[str, Webhook, list[str]]], list[str]]:
    """Every webhook with what it intercepts; and every object created before the installer of a
    webhook that would refuse or change it is ready, one finding per object and installer."""
    webhooks: list[tuple[str, Webhook, list[str]]] = []
    # (object's index, installer's index) -> what the installer's webhooks would do to it
    unmet: dict[tuple[int, int], list[str]] = {}
    for record in found:
        for webhook in record.installer.webhooks:
            # What must be ready before the webhook answers: the release serving it, else its own.
            server = next((i for i in found if webhook.served_by and i.chart == webhook.served_by), record)
            hit: list[str] = []
            for object_index, obj in enumerate(objects):
                if obj.creator in (record.urn, server.urn):
                    continue
                if not webhook.intercepts(obj.group, obj.resource, "CREATE", namespace_labels_of(obj, namespaces), obj.labels):
                    continue
                hit.append(obj.label)
                # Made before the webhook is registered, it is never refused, only left unchanged.
                registered_after = obj.creator in waits_for(record.urn)
                if registered_after and not (webhook.kind == MUTATING and webhook.mutates):
                    continue
                if webhook.blocks_or_changes and not (server.urn in waits_for(obj.creator) and server.awaited):
                    unmet.setdefault((object_index, found.index(server)), []).append(f"{webhook.name} ({_effect(webhook)})")
            webhooks.append((record.label, webhook, hit))
    findings = []
    for (object_index, installer_index), effects in unmet.items():
        obj, record = objects[object_index], found[installer_index]
        findings.append(f"{_unmet_wait(obj, record, waits_for)}: {'; '.join(effects)}")
    return webhooks, findings


def namespace_labels_of(obj: CreatedObject, namespaces: Mapping[str, Mapping[str, str]]) -> Mapping[str, str] | None:
    """The labels a webhook's namespace selector is held to: the object's namespace's; a Namespace's
    own; none for other cluster-scoped objects (k8s.io/apiserver pkg/admission/plugin/webhook/
    predicates/namespace/matcher.go)."""
    if obj.group == "" and obj.resource == "namespaces":
        return {**obj.labels, NAMESPACE_NAME_LABEL: obj.name}
    if obj.namespace is None:
        return None
    return namespaces.get(obj.namespace, {NAMESPACE_NAME_LABEL: obj.namespace})


def _crd_order(found: list[InstallerRecord], objects: list[CreatedObject], waits_for: Waits) -> tuple[list[str], list[str]]:
    """Every custom resource created before the installer of its CRD, or after one not awaited; and
    those whose CRD no installer of the program defines."""
    installers_of: dict[str, list[InstallerRecord]] = {}
    for record in found:
        for group in record.installer.crd_groups:
            installers_of.setdefault(group, []).append(record)
    findings, preinstalled = [], []
    for obj in objects:
        if obj.group in KUBERNETES_API_GROUPS:
            continue
        candidates = [i for i in installers_of.get(obj.group, []) if i.urn != obj.creator]
        if not installers_of.get(obj.group):
            preinstalled.append(f"{obj.label} ({obj.group})")
        waited = [i for i in candidates if i.urn in waits_for(obj.creator)]
        if candidates and not waited:
            findings.append(
                f"{_unmet_wait(obj, candidates[0], waits_for)}, which defines {obj.group}: the engine retries an unknown "
                "kind for about a minute only"
            )
        findings += [
            f"{obj.label} waits for {i.label}, which defines {obj.group} but is not awaited ({i.unawaited_reason})"
            for i in waited
            if not i.awaited
        ]
    return findings, preinstalled


def _unmet_wait(obj: CreatedObject, record: InstallerRecord, waits_for: Waits) -> str:
    if record.urn in waits_for(obj.creator):
        return f"{obj.label} waits for {record.label}, which is not awaited ({record.unawaited_reason})"
    return f"{obj.label} is created without waiting for {record.label}"


def _effect(webhook: Webhook) -> str:
    """What becomes of an object the webhook cannot answer for."""
    refused = webhook.failure_policy == FAIL
    if webhook.kind == MUTATING:
        before = "created without its changes if it comes before the webhook is registered"
        return f"mutating, {webhook.failure_policy}: " + (f"refused while it cannot answer, {before}" if refused else before)
    return f"validating, {webhook.failure_policy}: refused while it cannot answer"
