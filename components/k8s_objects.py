"""Registering the platform's recurring Kubernetes resources the same way everywhere: plain
custom-resource objects, pinned Helm releases and the namespaces system components live in."""

from __future__ import annotations

from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from .constants import Chart, standard_labels


def custom_resource(name: str, obj: dict[str, Any], opts: pulumi.ResourceOptions) -> k8s.apiextensions.CustomResource:
    extra = {k: v for k, v in obj.items() if k not in ("apiVersion", "kind", "metadata")}
    return k8s.apiextensions.CustomResource(name, api_version=obj["apiVersion"], kind=obj["kind"], metadata=obj["metadata"], opts=opts, **extra)


def helm_release(
    name: str, release_name: str, namespace: str, chart: Chart, values: dict[str, Any], opts: pulumi.ResourceOptions
) -> k8s.helm.v3.Release:
    """A pinned chart as a Helm release (helm.v3.Release installs at `up`; it never shells out
    to helm at preview the way helm.v3.Chart does)."""
    return k8s.helm.v3.Release(
        name,
        name=release_name,
        namespace=namespace,
        chart=chart.chart,
        version=chart.version,
        repository_opts=k8s.helm.v3.RepositoryOptsArgs(repo=chart.repo),
        values=values,
        opts=opts,
    )


def system_namespace(name: str, namespace: str, component: str, opts: pulumi.ResourceOptions, **labels: str) -> k8s.core.v1.Namespace:
    """A namespace for a platform component, labelled like everything the platform makes."""
    return k8s.core.v1.Namespace(name, metadata={"name": namespace, "labels": {**standard_labels(namespace, component), **labels}}, opts=opts)
