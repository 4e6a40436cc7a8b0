"""The schemas stage's fast path (jsonschema-rs first, jsonschema only on what it rejects: preview/schemas.py) gives
the very results jsonschema alone gives: every committed stack's objects, and each of them broken three ways."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from preview import schemas
from preview.schemas import SchemaValidator, crd_schema_dir, validator_for

from .helpers import STACKS

pytestmark = pytest.mark.slow


def _broken(obj: dict[str, Any]) -> list[dict[str, Any]]:
    """The object with an unknown field in its spec (or at its top), with labels that are not a mapping, and with a
    number as its generateName and where its spec's first string field was."""
    unknown = copy.deepcopy(obj)
    (unknown["spec"] if isinstance(unknown.get("spec"), dict) else unknown)["notAField"] = True
    labels = copy.deepcopy(obj)
    labels["metadata"]["labels"] = ["app"]
    retyped = copy.deepcopy(obj)
    retyped["metadata"]["generateName"] = 7
    spec: dict[str, Any] = retyped["spec"] if isinstance(retyped.get("spec"), dict) else {}
    for key, value in spec.items():
        if isinstance(value, str):
            retyped["spec"][key] = 7
            break
    return [unknown, labels, retyped]


def test_the_fast_path_is_there_and_compiles_the_schemas():
    """jsonschema-rs is installed (requirements-dev.txt) and compiles a core kind's schema and a CRD's; a schema it
    cannot compile (prometheusrule_v1.json's `(?i)` pattern) is left to jsonschema."""
    assert schemas.jsonschema_rs is not None
    validator = validator_for("1.33", str(crd_schema_dir()))
    deployment = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "x"}}
    assert validator.kubernetes.fast(deployment, validator.kubernetes.validator(deployment)) is not None
    service = {"apiVersion": "serving.knative.dev/v1", "kind": "Service", "metadata": {"name": "x"}}
    assert validator.crds.fast(service, validator.crds.validator(service)) is not None
    rule = {"apiVersion": "monitoring.coreos.com/v1", "kind": "PrometheusRule", "metadata": {"name": "x"}}
    assert validator.crds.fast(rule, validator.crds.validator(rule)) is None


@pytest.mark.parametrize("stack", STACKS)
def test_the_fast_path_gives_jsonschemas_results(previews, stack):
    fast = SchemaValidator("1.33")
    slow = SchemaValidator("1.33", fast=False)
    objects = previews[stack].manifests()
    broken = [b for obj in objects for b in _broken(obj)]
    expected = slow.validate_all(objects + broken)
    assert fast.validate_all(objects + broken) == expected
    statuses = [r.status for r in expected]
    assert statuses[: len(objects)].count("valid") > 0.9 * len(objects)
    assert statuses[len(objects) :].count("invalid") > 0.9 * len(broken)
