"""The tier as a dimension of Istio's request metrics: per tenant namespace, a Telemetry without
selector adds `tier` (the gateway's verified tier header, bounded to the tiers) to REQUEST_COUNT
and REQUEST_DURATION as the destination reports them, for the model servers and the endpoint
pickers' proxies alike.

That the header holds the gateway's value, never a client's, is the gateway filter's rule
(tests/test_gateway_security.py: a forged tier header is replaced by the token's tier)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from components.shapes import TIER_ORDER
from components.specs.telemetry import TIER_METRICS, UNKNOWN_TIER, tier_expression, tier_metrics
from platform_config.pins import ISTIO_VERSION

from .helpers import Evaluated, mirror_show, raw_stack, schema_validator, set_at

TELEMETRY = "kubernetes:telemetry.istio.io/v1:Telemetry"
ISTIO_API_MIRROR = Path("istio+api")  # read in ../shared/upstream-sources


@pytest.fixture(scope="module", params=["staging", "prod"])
def stack(request) -> tuple[dict[str, Any], Evaluated]:
    raw = raw_stack(request.param)
    return raw, Evaluated(raw, shared=True)


def telemetries(evaluated: Evaluated) -> list[dict[str, Any]]:
    return [r["inputs"] for r in evaluated.of_type(TELEMETRY)]


def tier_value(telemetry: dict[str, Any], index: int = 0) -> str:
    return telemetry["spec"]["metrics"][0]["overrides"][index]["tagOverrides"]["tier"]["value"]


def test_every_tenant_namespace_and_nothing_else_gets_one(stack):
    raw, evaluated = stack
    found = telemetries(evaluated)
    assert sorted(t["metadata"]["namespace"] for t in found) == sorted(t["name"] for t in raw["tenants"])
    for telemetry in found:
        # Namespace-wide (Istio allows one without selector per namespace): the servers and the
        # endpoint pickers' proxies, which answer the requests they shed themselves.
        assert "selector" not in telemetry["spec"]
        assert tier_value(telemetry) == tier_expression(raw["traffic"].get("tierHeader", "x-tier"))


def test_request_count_and_duration_as_the_destination_reports_them():
    (metrics,) = tier_metrics("team-a", "x-tier")["spec"]["metrics"]
    assert "providers" not in metrics  # the mesh's default provider (Prometheus)
    assert [(o["match"]["metric"], o["match"]["mode"]) for o in metrics["overrides"]] == [
        ("REQUEST_COUNT", "SERVER"),
        ("REQUEST_DURATION", "SERVER"),
    ]
    for override in metrics["overrides"]:
        assert list(override["tagOverrides"]) == ["tier"]
        assert override["tagOverrides"]["tier"]["operation"] == "UPSERT"


def test_the_tag_is_the_tier_header_bounded_to_the_tiers():
    value = tier_value(tier_metrics("team-a", "x-tier"))
    assert value == (
        "'x-tier' in request.headers && request.headers['x-tier'] in ['premium', 'standard', 'batch'] "
        "? request.headers['x-tier'] : 'other'"
    )
    # Every value the label can take is a tier or `other` (Istio's own `unknown` when a value
    # cannot be evaluated): a closed set, whatever a request carries.
    assert set(re.findall(r"'([^']*)'", value)) == {"x-tier", *TIER_ORDER, UNKNOWN_TIER}


def test_a_configured_tier_header_is_the_one_read(staging_raw):
    set_at(staging_raw, ("traffic", "tierHeader"), "x-platform-tier")
    telemetries = [t["inputs"] for t in Evaluated(staging_raw).of_type(TELEMETRY)]
    assert len(telemetries) == len(staging_raw["tenants"])  # one per tenant
    for telemetry in telemetries:
        for index in range(len(TIER_METRICS)):
            assert "request.headers['x-platform-tier']" in tier_value(telemetry, index)
            assert "x-tier" not in tier_value(telemetry, index)


def test_it_validates_against_the_telemetry_crd(stack):
    validator = schema_validator()
    for telemetry in telemetries(stack[1]):
        result = validator.validate(telemetry)
        assert result.status == "valid", result.errors
        assert result.schema.startswith("CRD schema telemetry.istio.io"), result.schema
    broken = tier_metrics("team-a", "x-tier")
    broken["spec"]["metrics"][0]["overrides"][0]["match"]["mode"] = "DESTINATION"
    assert validator.validate(broken).status == "invalid"


def test_the_fields_exist_in_the_pinned_istio_api():
    """istio/api at the pinned Istio tag: the metric and mode names and the tag override fields."""
    proto = mirror_show(ISTIO_API_MIRROR, ISTIO_VERSION, "telemetry/v1alpha1/telemetry.proto")
    for metric in TIER_METRICS:
        assert re.search(rf"^\s+{metric} = \d+;", proto, re.M), metric
    assert re.search(r"^\s+SERVER = \d+;", proto, re.M)
    assert "map<string, TagOverride> tag_overrides" in proto
    assert re.search(r"^\s+UPSERT = 0;", proto, re.M)
    assert "WorkloadSelector selector" in proto
