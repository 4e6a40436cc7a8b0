"""Kueue 0.19.2: its 43 webhook entries, their failure policy and scope by the manager config."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import yaml

from components.specs.kueue import KUEUE_CHART_FRAMEWORKS, KUEUE_IMPLIED_INTEGRATIONS
from components.specs.network import NAMESPACE_NAME_LABEL

from .shapes import FAIL, IGNORE, MUTATING, VALIDATING, Installer, LabelSelector, Rule, Webhook, value_at

_KUEUE_AT = "kubernetes-sigs/kueue v0.19.2"
_KUEUE_WEBHOOKS = f"{_KUEUE_AT} charts/kueue/templates/webhook/manifests.yaml"
# (name, line, group, resource, operations, namespace-scoped by managedJobsNamespaceSelector,
# the framework whose presence makes it Fail rather than Ignore, None if always Fail)
_KUEUE_ENTRIES: tuple[tuple[str, int, str, str, tuple[str, ...], bool, str | None], ...] = (
    ("mappwrapper.kb.io", 41, "workload.codeflare.dev", "appwrappers", ("CREATE",), True, None),
    ("mclusterqueue.kb.io", 72, "kueue.x-k8s.io", "clusterqueues", ("CREATE",), False, None),
    ("mdeployment.kb.io", 91, "apps", "deployments", ("CREATE", "UPDATE"), True, "deployment"),
    ("mjaxjob.kb.io", 128, "kubeflow.org", "jaxjobs", ("CREATE",), True, None),
    ("mjob.kb.io", 159, "batch", "jobs", ("CREATE",), True, None),
    ("mjobset.kb.io", 190, "jobset.x-k8s.io", "jobsets", ("CREATE",), True, None),
    ("mleaderworkerset.kb.io", 221, "leaderworkerset.x-k8s.io", "leaderworkersets", ("CREATE", "UPDATE"), True, None),
    ("mmpijob.kb.io", 253, "kubeflow.org", "mpijobs", ("CREATE",), True, None),
    ("mpaddlejob.kb.io", 284, "kubeflow.org", "paddlejobs", ("CREATE",), True, None),
    ("mpod.kb.io", 314, "", "pods", ("CREATE",), True, "pod"),
    ("mpytorchjob.kb.io", 350, "kubeflow.org", "pytorchjobs", ("CREATE",), True, None),
    ("mraycluster.kb.io", 381, "ray.io", "rayclusters", ("CREATE",), True, None),
    ("mrayjob.kb.io", 412, "ray.io", "rayjobs", ("CREATE",), True, None),
    ("mrayservice.kb.io", 443, "ray.io", "rayservices", ("CREATE",), True, None),
    ("mresourceflavor.kb.io", 474, "kueue.x-k8s.io", "resourceflavors", ("CREATE",), False, None),
    ("msparkapplication.kb.io", 494, "sparkoperator.k8s.io", "sparkapplications", ("CREATE",), True, None),
    ("mstatefulset.kb.io", 524, "apps", "statefulsets", ("CREATE", "UPDATE"), True, "statefulset"),
    ("mtfjob.kb.io", 561, "kubeflow.org", "tfjobs", ("CREATE",), True, None),
    ("mtrainjob.kb.io", 592, "trainer.kubeflow.org", "trainjobs", ("CREATE",), True, None),
    ("mworkload.kb.io", 623, "kueue.x-k8s.io", "workloads", ("CREATE",), False, None),
    ("mxgboostjob.kb.io", 643, "kubeflow.org", "xgboostjobs", ("CREATE",), True, None),
    ("vappwrapper.kb.io", 687, "workload.codeflare.dev", "appwrappers", ("CREATE", "UPDATE"), True, None),
    ("vclusterqueue.kb.io", 718, "kueue.x-k8s.io", "clusterqueues", ("CREATE", "UPDATE"), False, None),
    ("vcohort.kb.io", 738, "kueue.x-k8s.io", "cohorts", ("CREATE", "UPDATE"), False, None),
    ("vdeployment.kb.io", 757, "apps", "deployments", ("CREATE", "UPDATE"), True, "deployment"),
    ("vjaxjob.kb.io", 793, "kubeflow.org", "jaxjobs", ("CREATE", "UPDATE"), True, None),
    ("vjob.kb.io", 824, "batch", "jobs", ("CREATE", "UPDATE"), True, None),
    ("vjobset.kb.io", 855, "jobset.x-k8s.io", "jobsets", ("CREATE", "UPDATE"), True, None),
    ("vleaderworkerset.kb.io", 886, "leaderworkerset.x-k8s.io", "leaderworkersets", ("CREATE", "UPDATE"), True, None),
    ("vmpijob.kb.io", 917, "kubeflow.org", "mpijobs", ("CREATE", "UPDATE"), True, None),
    ("vpaddlejob.kb.io", 948, "kubeflow.org", "paddlejobs", ("CREATE", "UPDATE"), True, None),
    ("vpod.kb.io", 978, "", "pods", ("CREATE", "UPDATE"), True, "pod"),
    ("vpytorchjob.kb.io", 1014, "kubeflow.org", "pytorchjobs", ("CREATE", "UPDATE"), True, None),
    ("vraycluster.kb.io", 1045, "ray.io", "rayclusters", ("CREATE", "UPDATE"), True, None),
    ("vrayjob.kb.io", 1076, "ray.io", "rayjobs", ("CREATE", "UPDATE"), True, None),
    ("vrayservice.kb.io", 1107, "ray.io", "rayservices", ("CREATE", "UPDATE"), True, None),
    ("vresourceflavor.kb.io", 1138, "kueue.x-k8s.io", "resourceflavors", ("CREATE", "UPDATE"), False, None),
    ("vsparkapplication.kb.io", 1158, "sparkoperator.k8s.io", "sparkapplications", ("CREATE", "UPDATE"), True, None),
    ("vstatefulset.kb.io", 1188, "apps", "statefulsets", ("CREATE", "UPDATE"), True, "statefulset"),
    ("vtfjob.kb.io", 1224, "kubeflow.org", "tfjobs", ("CREATE", "UPDATE"), True, None),
    ("vtrainjob.kb.io", 1255, "trainer.kubeflow.org", "trainjobs", ("CREATE", "UPDATE"), True, None),
    ("vworkload.kb.io", 1286, "kueue.x-k8s.io", "workloads", ("CREATE", "UPDATE"), False, None),
    ("vxgboostjob.kb.io", 1307, "kubeflow.org", "xgboostjobs", ("CREATE", "UPDATE"), True, None),
)


def kueue(values: Mapping[str, Any], namespace: str) -> Installer:
    """charts/kueue/templates/webhook/manifests.yaml renders all 43 entries whatever the values (its
    only conditions: lines 19-20 parse the manager config with `fromYaml`; deployment, pod and
    statefulset entries are Fail only when their framework is in `integrations.frameworks`, else
    Ignore, e.g. lines 92-96; every job-type entry's namespaceSelector is the config's
    `managedJobsNamespaceSelector` verbatim, else `kubernetes.io/metadata.name NotIn [kube-system,
    <release namespace>]`, lines 160-170). No entry has an objectSelector."""
    text = value_at(values, "managerConfig.controllerManagerConfigYaml", None)
    config = (yaml.safe_load(text) if isinstance(text, str) else None) or {
        "integrations": {"frameworks": list(KUEUE_CHART_FRAMEWORKS)}
    }
    listed = set((config.get("integrations") or {}).get("frameworks") or ())
    # With those a listed one turns on by itself (integrationmanager.go collectImplicitlyEnabledIntegrations): their
    # handlers are real, whatever the chart renders for their entries' failure policy.
    enabled = listed | {KUEUE_IMPLIED_INTEGRATIONS[f] for f in listed if f in KUEUE_IMPLIED_INTEGRATIONS}
    scoped = config.get("managedJobsNamespaceSelector")
    namespace_selector = (
        LabelSelector.from_manifest(scoped)
        if isinstance(scoped, Mapping)
        else LabelSelector(expressions=((NAMESPACE_NAME_LABEL, "NotIn", ("kube-system", namespace)),))
    )
    webhooks = tuple(
        Webhook(
            name=name,
            kind=MUTATING if name.startswith("m") else VALIDATING,
            # The chart tests the list for the framework's own name (manifests.yaml lines 92-96).
            failure_policy=FAIL if framework is None or framework in listed else IGNORE,
            rules=(Rule((group,), (resource,), operations),),
            source=f"{_KUEUE_WEBHOOKS}:{line}",
            namespace_selector=namespace_selector if namespaced else None,
            # pkg/controller/jobframework/setup.go lines 59-111: an integration neither listed nor
            # implied gets `WithNoopWebhook(true)`, which admits everything unchanged.
            mutates=framework is None or framework in enabled,
        )
        for name, line, group, resource, operations, namespaced, framework in _KUEUE_ENTRIES
    )
    return Installer(webhooks, ("kueue.x-k8s.io",), _KUEUE_AT)
