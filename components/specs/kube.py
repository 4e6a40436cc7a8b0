"""Passing a plain Kubernetes object (camelCase) to a pulumi_kubernetes resource class."""

from __future__ import annotations

from typing import Any

from pydantic.alias_generators import to_snake


def kwargs(obj: dict[str, Any]) -> dict[str, Any]:
    """Top-level fields as the resource constructor's keyword arguments (`roleRef` ->
    `role_ref`); nested values stay camelCase, which the SDK sends through unchanged."""
    return {to_snake(key): value for key, value in obj.items() if key not in ("apiVersion", "kind")}
