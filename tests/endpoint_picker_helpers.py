"""What the endpoint picker's tests share (tests/test_endpoint_picker.py and the modules beside it): a plan of
one model version's picker and its objects, the objects by kind, and the upstream sources they are held
against (llm-d-router v0.10.0, Istio 1.30.3), read in place."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from components.picker_plan import EndpointPickerPlan, PickerBand
from components.specs import endpoint_picker as epp

from .helpers import mirror_show

SERVER_LABELS = {"inference.platform/model": "llama-8b", "inference.platform/model-version": "v1"}
MIRROR = Path("llm-d+llm-d-router")  # read in ../shared/upstream-sources
TAG = "v0.10.0"
ISTIO_MIRROR = Path("istio+istio")  # read in ../shared/upstream-sources
ISTIO_TAG = "1.30.3"
SERVER_HOST = "llama-8b.team-a.svc.cluster.local"


def make_plan(**changes: Any) -> EndpointPickerPlan:
    plan = EndpointPickerPlan(
        name="llama-8b-v1",
        namespace="team-a",
        server_labels=dict(SERVER_LABELS),
        server_host=SERVER_HOST,
        target_port=8000,
        replicas=2,
        # Deliberately out of order: the builders sort.
        bands=(
            PickerBand("standard", 10, 500, "256Mi", 10),
            PickerBand("batch", -1, 100, "128Mi", 30),
            PickerBand("premium", 100, 1000, "512Mi", 5),
        ),
        request_timeout_seconds=600,
        # The model's standard labels, one of which also selects its servers.
        labels={
            "app.kubernetes.io/name": "llama-8b",
            "app.kubernetes.io/part-of": "inference-platform",
            "inference.platform/model": "llama-8b",
        },
        node_selector={"inference.platform/pool": "system"},
    )
    return dataclasses.replace(plan, **changes)


def picker_plan() -> EndpointPickerPlan:
    """The modules' `plan` fixture: make_plan's."""
    return make_plan()


def picker_objects(plan) -> list[dict[str, Any]]:
    """The modules' `objects` fixture: the picker's objects for their `plan`."""
    return epp.endpoint_picker_objects(plan)


def one(objects: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    (found,) = [o for o in objects if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)]
    return found


def pod_spec(objects: list[dict[str, Any]]) -> dict[str, Any]:
    return one(objects, "Deployment")["spec"]["template"]["spec"]


def container(objects: list[dict[str, Any]], name: str) -> dict[str, Any]:
    (found,) = [c for c in pod_spec(objects)["containers"] if c["name"] == name]
    return found


def git_show(path: str, mirror: Path = MIRROR, tag: str = TAG) -> str:
    return mirror_show(mirror, tag, path)


def istio_show(path: str) -> str:
    return git_show(path, ISTIO_MIRROR, ISTIO_TAG)


def team_a_objects() -> list[dict[str, Any]]:
    """The modules' `tenant_objects` fixture: the namespace the picker runs in (a restricted tenant's, which injects
    the mesh's sidecar), its limits, quotas and the priority classes."""
    from components.specs import tenancy
    from platform_config.models import TenantConfig
    from platform_config.tenant_plan import tenant_plan

    tenant = TenantConfig.model_validate({"name": "team-a", "quota": {"gpu": 8, "cpu": "64", "memory": "256Gi", "pods": 40}})
    return [
        tenancy.namespace(tenant),
        tenancy.limit_range(tenant),
        *tenancy.resource_quotas(tenant_plan(tenant, ("nvidia.com/gpu",))),
        *tenancy.priority_classes(),
    ]


def picker_fixtures() -> tuple[Any, Any, Any]:
    """A module's `plan`, `objects` and `tenant_objects` fixtures (module-scoped, each module building its own):
    `plan, objects, tenant_objects = picker_fixtures()`."""
    return (
        pytest.fixture(scope="module", name="plan")(picker_plan),
        pytest.fixture(scope="module", name="objects")(picker_objects),
        pytest.fixture(scope="module", name="tenant_objects")(team_a_objects),
    )
