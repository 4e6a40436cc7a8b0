"""The first-`up` stage: would the program come up on an empty cluster, in the order the engine runs it?

The engine creates a resource once everything it depends on is created (the recorded
dependencies: `depends_on` and the inputs' outputs, a component's standing for its children), and
creates the rest in parallel. pulumi-kubernetes retries a create only while the kind is not yet
served or the namespace not yet there, for about a minute; an admission webhook that cannot answer
fails the create at once. So, on an empty cluster:

- every object the program creates, every pod its workloads create and every object a chart it
  installs creates must wait for each installer whose webhook intercepts it (an API server's match:
  rules, namespace selector, object selector) when that webhook would refuse it (Fail) or change it
  (a mutating webhook: Istio's injector leaves a pod created before it without a sidecar, for good);
- every custom resource must wait for the installer of its CRD;
- an installer waited for must itself be awaited: a Helm release is (unless `skipAwait`); a custom
  resource an operator turns into webhooks and CRDs (KnativeServing) only with `pulumi.com/waitFor`.

What each installer registers comes from preview/webhook_inventory.py, read at the pinned tags.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from functools import cache
from typing import Any

from .engine import RecordedResource
from .render import HELM_RELEASE, is_kubernetes_object, unsecret
from .webhook_inventory import CHARTS, CRD_FILES, MUTATING, Installer, Webhook, knative_serving

CONFIG_FILE = "kubernetes:yaml/v2:ConfigFile"
KNATIVE_SERVING = "kubernetes:operator.knative.dev/v1beta1:KnativeServing"
WAIT_FOR = "pulumi.com/waitFor"
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"
POD_TEMPLATE_KINDS = ("Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job")
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


@dataclass(frozen=True)
class CreatedObject:
    """An object the API server is asked to create because of one of the program's resources."""

    creator: str  # the URN of the program's resource
    label: str
    group: str
    resource: str
    namespace: str | None
    labels: Mapping[str, str]


@dataclass
class FirstUpResult:
    installers: list[InstallerRecord]
    # Helm releases of charts whose registrations were not read.
    unread: list[str]
    # (webhook's installer label, webhook, labels of the objects it intercepts)
    interceptions: list[tuple[str, Webhook, list[str]]]
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


def _chart_name(chart: str) -> str:
    return chart.rstrip("/").rsplit("/", 1)[-1]


def installers(resources: Iterable[RecordedResource]) -> tuple[list[InstallerRecord], list[str]]:
    """Every resource of the program that installs webhooks or CRDs, with what it installs."""
    found: list[InstallerRecord] = []
    unread: list[str] = []
    for r in resources:
        if r.type == HELM_RELEASE:
            inputs = unsecret(r.inputs)
            chart = _chart_name(str(inputs.get("chart") or ""))
            version = str(inputs.get("version") or "")
            label = f"Helm release {inputs.get('namespace')}/{inputs.get('name')} ({chart} {version})"
            versions, read = CHARTS.get(chart, ((), None))
            if read is None or version not in versions:
                read_at = f"read at {', '.join(versions)} only" if versions else "not read"
                unread.append(f"{label}: {read_at}")
                continue
            skip = bool(inputs.get("skipAwait"))
            installer = read(inputs.get("values") or {}, str(inputs.get("namespace") or "default"))
            found.append(InstallerRecord(r.urn, label, installer, not skip, "skipAwait is set" if skip else ""))
        elif r.type == KNATIVE_SERVING:
            inputs = unsecret(r.inputs)
            metadata = inputs.get("metadata") or {}
            waits = WAIT_FOR in (metadata.get("annotations") or {})
            found.append(
                InstallerRecord(
                    r.urn,
                    f"KnativeServing {metadata.get('namespace')}/{metadata.get('name')}",
                    knative_serving(inputs.get("spec") or {}),
                    waits,
                    "" if waits else f"no {WAIT_FOR} annotation: the engine is done once the API server accepts it",
                )
            )
        elif r.type == CONFIG_FILE:
            url = str(unsecret(r.inputs).get("file") or "")
            groups = CRD_FILES.get(url)
            if groups is None:
                unread.append(f"CRD file {r.name} ({url})")
                continue
            # pulumi-kubernetes does not await a CRD until it is Established (no awaiter for the kind,
            # v4.32.0 provider/pkg/await/awaiters.go), but what depends on the file waits for every
            # CRD's create, and a kind served seconds later is inside the ~63 s the engine retries a
            # NoMatch (provider/pkg/await/await.go).
            found.append(InstallerRecord(r.urn, f"CRDs {r.name}", Installer((), groups, url), True))
    return found, unread


def _namespace_labels(resources: Iterable[RecordedResource]) -> dict[str, dict[str, str]]:
    labels: dict[str, dict[str, str]] = {}
    for r in resources:
        if r.type == "kubernetes:core/v1:Namespace":
            metadata = unsecret(r.inputs).get("metadata") or {}
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


def created_objects(resources: Iterable[RecordedResource]) -> Iterator[CreatedObject]:
    """What the API server is asked to create: the program's objects, their workloads' pods (and a
    Knative Service's Revision Deployment), and each Helm release's workloads, pods and Services."""
    for r in resources:
        if r.type == HELM_RELEASE:
            yield from _release_objects(r)
        elif is_kubernetes_object(r):
            yield from _program_objects(r)


def _release_objects(release: RecordedResource) -> Iterator[CreatedObject]:
    """Every pinned chart runs a Deployment or DaemonSet with a Service in its release's namespace."""
    inputs = unsecret(release.inputs)
    namespace = str(inputs.get("namespace") or "default")
    chart = _chart_name(str(inputs.get("chart") or ""))
    common = {"app.kubernetes.io/instance": str(inputs.get("name") or release.name)}
    yield CreatedObject(release.urn, f"the {chart} chart's Deployments", "apps", "deployments", namespace, common)
    yield CreatedObject(release.urn, f"the {chart} chart's Services", "", "services", namespace, common)
    pod_labels = {**common, **CHART_POD_LABELS.get(chart, {})}
    yield CreatedObject(release.urn, f"the {chart} chart's pods", "", "pods", namespace, pod_labels)


def _program_objects(resource: RecordedResource) -> Iterator[CreatedObject]:
    body = unsecret(resource.inputs)
    kind = str(body.get("kind") or "")
    metadata = body.get("metadata") or {}
    namespace = metadata.get("namespace")
    name = str(metadata.get("name") or resource.name)
    where = f"{namespace}/{name}" if namespace else name
    group = _group(str(body.get("apiVersion") or ""))
    yield CreatedObject(resource.urn, f"{kind} {where}", group, plural(kind), namespace, metadata.get("labels") or {})
    template = _pod_template(kind, body)
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


def check_first_up(resources: list[RecordedResource]) -> FirstUpResult:
    by_urn = {r.urn: r for r in resources}

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

    found, unread = installers(resources)
    namespaces = _namespace_labels(resources)
    result = FirstUpResult(found, unread, [])
    objects = list(created_objects(resources))
    # (object's index, installer) -> what the installer's webhooks would do to the object
    unmet: dict[tuple[int, int], list[str]] = {}
    for installer_index, record in enumerate(found):
        for webhook in record.installer.webhooks:
            hit: list[str] = []
            for object_index, obj in enumerate(objects):
                if obj.creator == record.urn:
                    continue
                namespace_labels = namespaces.get(obj.namespace, {NAMESPACE_NAME_LABEL: obj.namespace}) if obj.namespace else None
                if not webhook.intercepts(obj.group, obj.resource, "CREATE", namespace_labels, obj.labels):
                    continue
                hit.append(obj.label)
                if webhook.blocks_or_changes and not (record.urn in waits_for(obj.creator) and record.awaited):
                    unmet.setdefault((object_index, installer_index), []).append(f"{webhook.name} ({_effect(webhook)})")
            result.interceptions.append((record.label, webhook, hit))
    for (object_index, installer_index), effects in unmet.items():
        obj, record = objects[object_index], found[installer_index]
        if record.urn in waits_for(obj.creator):
            start = f"{obj.label} waits for {record.label}, which is not awaited ({record.unawaited_reason})"
        else:
            start = f"{obj.label} is created without waiting for {record.label}"
        result.findings.append(f"{start}: {'; '.join(effects)}")
    installers_of: dict[str, list[InstallerRecord]] = {}
    for record in found:
        for group in record.installer.crd_groups:
            installers_of.setdefault(group, []).append(record)
    for obj in objects:
        if obj.group in _BUILTIN_GROUPS:
            continue
        candidates = [i for i in installers_of.get(obj.group, []) if i.urn != obj.creator]
        if not candidates:
            if not any(i.urn == obj.creator for i in installers_of.get(obj.group, [])):
                result.preinstalled.append(f"{obj.label} ({obj.group})")
            continue
        if not any(i.urn in waits_for(obj.creator) for i in candidates):
            result.findings.append(
                f"{obj.label} is created without waiting for {candidates[0].label}, which defines {obj.group}: "
                "the engine retries an unknown kind for about a minute only"
            )
        else:
            for i in candidates:
                if i.urn in waits_for(obj.creator) and not i.awaited:
                    result.findings.append(
                        f"{obj.label} waits for {i.label}, which defines {obj.group} but is not awaited ({i.unawaited_reason})"
                    )
    return result


def _effect(webhook: Webhook) -> str:
    """What becomes of an object the webhook cannot answer for."""
    refused = webhook.failure_policy == "Fail"
    if webhook.kind == MUTATING:
        before = "created without its changes if it comes before the webhook is registered"
        return f"mutating, {webhook.failure_policy}: " + (f"refused while it cannot answer, {before}" if refused else before)
    return f"validating, {webhook.failure_policy}: refused while it cannot answer"


# API groups Kubernetes itself serves (kubernetes 1.30-1.34): no CRD installs them.
_BUILTIN_GROUPS = frozenset(
    {
        "",
        "apps",
        "batch",
        "autoscaling",
        "policy",
        "networking.k8s.io",
        "rbac.authorization.k8s.io",
        "scheduling.k8s.io",
        "admissionregistration.k8s.io",
        "apiextensions.k8s.io",
        "apiregistration.k8s.io",
        "storage.k8s.io",
        "coordination.k8s.io",
        "discovery.k8s.io",
        "node.k8s.io",
        "certificates.k8s.io",
        "events.k8s.io",
        "flowcontrol.apiserver.k8s.io",
        "resource.k8s.io",
    }
)
