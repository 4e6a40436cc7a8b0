"""Registering the platform's Kubernetes resources the same way everywhere: built-in objects
and custom resources from their manifests, pinned Helm releases and the namespaces system
components live in."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pulumi
import pulumi_kubernetes as k8s
from pulumi_kubernetes import _utilities as k8s_utilities

from platform_config.chart_images import ChartImageValues, merged_values
from platform_config.pins import ChartPin

from .constants import standard_labels

# What pulumi-kubernetes' typed classes add to a plain registration, besides the provider
# version: a Secret's data is made a Pulumi secret going in and coming out. Left out on purpose:
# their type aliases (Deployment from extensions/v1beta1, PodDisruptionBudget from
# policy/v1beta1, ...), which only matter to stacks created with those old API versions, which
# this platform never declared.
SECRET_FIELDS = {"kubernetes:core/v1:Secret": ["data", "stringData"]}

# pulumi-kubernetes' type tokens of the Helm release and the YAML file registered here without their typed classes
# (4.34.2: helm/v3/Release.py, yaml/v2/ConfigFile.py). Importing either class imports the package's `yaml` module,
# whose v1 ConfigFile imports `requests`: about 0.06 s of every preview's and `up`'s start, for two registrations.
HELM_RELEASE = "kubernetes:helm.sh/v3:Release"
YAML_CONFIG_FILE = "kubernetes:yaml/v2:ConfigFile"


def type_token(api_version: str, kind: str) -> str:
    """pulumi-kubernetes' type token for a kind: the core group is spelled `core`
    (kubernetes:core/v1:Namespace), every other group by its name
    (kubernetes:networking.k8s.io/v1:NetworkPolicy, kubernetes:monitoring.coreos.com/v1:ServiceMonitor)."""
    group_version = api_version if "/" in api_version else f"core/{api_version}"
    return f"kubernetes:{group_version}:{kind}"


class KubernetesObject(pulumi.CustomResource):
    """A built-in Kubernetes object (Namespace, Deployment, NetworkPolicy, ...) registered from
    its manifest under pulumi-kubernetes' own type token, with the inputs, provider version and
    secret handling of its typed class (tests/test_kubernetes_objects.py registers every kind
    the platform declares both ways and compares them), but without the type aliases above.
    The specs are built from typed config and schema-checked as plain manifests, so the typed
    Python classes would add nothing but about a second of imports to every `pulumi preview`
    and `up` and a typed copy of every output. Outputs here are the manifest's top-level fields
    as plain Outputs (`obj.metadata["name"]`, not `obj.metadata.name`)."""

    # Declared for the type checker only: pulumi evaluates a resource class's annotations at each registration
    # (pulumi 3.272.0 _types.resource_types, uncached), importing what they name.
    if TYPE_CHECKING:
        metadata: pulumi.Output[dict[str, Any]]

    def __init__(self, name: str, manifest: dict[str, Any], opts: pulumi.ResourceOptions):
        token = type_token(manifest["apiVersion"], manifest["kind"])
        secret_fields = SECRET_FIELDS.get(token, [])
        inputs = {key: pulumi.Output.secret(value) if key in secret_fields else value for key, value in manifest.items()}
        merged = pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(additional_secret_outputs=secret_fields or None))
        # As in the typed classes: the caller's provider version, else the installed package's.
        if merged.version is None:
            merged.version = k8s_utilities.get_version()
        super().__init__(token, name, inputs, merged)


class HelmRelease(pulumi.CustomResource):
    """A Helm release registered under pulumi-kubernetes' own type token with the inputs its typed class sends
    (`compat`, which the class always sets, and the schema's camelCase names: `repositoryOpts`) and the installed
    package's provider version (tests/test_kubernetes_objects.py registers one both ways and compares the requests).
    The platform reads no output of a release; it names releases only to wait for them."""

    def __init__(self, name: str, inputs: dict[str, Any], opts: pulumi.ResourceOptions):
        merged = pulumi.ResourceOptions.merge(k8s_utilities.get_resource_opts_defaults(), opts)
        super().__init__(HELM_RELEASE, name, {**inputs, "compat": "true", "status": None}, merged)


class YamlConfigFile(pulumi.ComponentResource):
    """pulumi-kubernetes' `yaml/v2` ConfigFile: a component the provider builds (remote) from the objects of a
    manifest file or URL, registered as its typed class registers it (tests/test_kubernetes_objects.py)."""

    def __init__(self, name: str, file: str, opts: pulumi.ResourceOptions):
        merged = pulumi.ResourceOptions.merge(k8s_utilities.get_resource_opts_defaults(), opts)
        super().__init__(YAML_CONFIG_FILE, name, {"file": file, "resources": None}, merged, remote=True)


def helm_release(
    name: str,
    release_name: str,
    namespace: str,
    chart: ChartPin,
    values: dict[str, Any],
    opts: pulumi.ResourceOptions,
    *,
    chart_image_values: ChartImageValues,
) -> HelmRelease:
    """A pinned chart as a Helm release (helm.v3.Release installs at `up`; it never shells out
    to helm at preview the way helm.v3.Chart does), its images pinned by the lock's digests where the plan has them
    (`chart_image_values`, by chart)."""
    # A chart in an OCI registry is named by its full reference, with no repository options
    # (helm install oci://registry/path/chart --version x).
    oci = chart.repo.startswith("oci://")
    inputs: dict[str, Any] = {
        "chart": f"{chart.repo}/{chart.chart}" if oci else chart.chart,
        "name": release_name,
        "namespace": namespace,
        "values": merged_values(values, chart_image_values.get(chart.chart, {})),
        "version": chart.version,
    }
    if not oci:
        inputs["repositoryOpts"] = {"repo": chart.repo}
    return HelmRelease(name, inputs, opts)


def custom_resource(name: str, obj: dict[str, Any], opts: pulumi.ResourceOptions) -> k8s.apiextensions.CustomResource:
    """A custom resource (Knative, Istio, Prometheus Operator, ...) from its manifest."""
    extra = {k: v for k, v in obj.items() if k not in ("apiVersion", "kind", "metadata")}
    return k8s.apiextensions.CustomResource(
        name, api_version=obj["apiVersion"], kind=obj["kind"], metadata=obj["metadata"], opts=opts, **extra
    )


def system_namespace(name: str, namespace: str, component: str, opts: pulumi.ResourceOptions, **labels: str) -> KubernetesObject:
    """A namespace for a platform component, labelled like everything the platform makes."""
    metadata = {"name": namespace, "labels": {**standard_labels(namespace, component), **labels}}
    return KubernetesObject(name, {"apiVersion": "v1", "kind": "Namespace", "metadata": metadata}, opts)
