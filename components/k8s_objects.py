"""Registering a plain custom-resource object (apiVersion, kind, metadata, spec, ...)."""

from __future__ import annotations

from typing import Any

import pulumi
import pulumi_kubernetes as k8s


def custom_resource(name: str, obj: dict[str, Any], opts: pulumi.ResourceOptions) -> k8s.apiextensions.CustomResource:
    extra = {k: v for k, v in obj.items() if k not in ("apiVersion", "kind", "metadata")}
    return k8s.apiextensions.CustomResource(name, api_version=obj["apiVersion"], kind=obj["kind"], metadata=obj["metadata"], opts=opts, **extra)
