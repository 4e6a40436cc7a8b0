"""Istio's standard request metrics with the tier as a dimension (pure functions).

Istio labels `istio_requests_total` and `istio_request_duration_milliseconds` with the
destination's workload and version (the pods' `version` label) but knows nothing of tiers. Per
tenant namespace, a Telemetry without selector adds a `tier` tag to both metrics as the sidecars
of the namespace's pods report what they receive (`reporter="destination"`, mode SERVER): the
model servers, and the endpoint pickers' proxies in front of them, whose own answers (a request
shed by flow control) never reach a server. So error, 503 and latency rates can be read per
workload, version and tier.

The value is the tier header as the gateway filter wrote it: the filter removes every client value
of that header and sets it from the verified token (components/lua/gateway_filter.lua
`envoy_on_request`, `set_tier`), and only the gateway, the tenant's own namespace and the platform
components in the data path (which forward the gateway's requests) may call a tenant's pods
(components/specs/tenancy.py `authorization_policy`). A Prometheus label must still stay a closed
set: a value that is no tier, or no header, is `other` (and a value Istio cannot evaluate is its
`unknown`: istio/proxy 81864a1, the commit Istio 1.30.3's istio.deps pins,
source/extensions/filters/http/istio_stats/istio_stats.cc `StreamOverrides::evaluate`).

Field names checked against istio/api 1.30.3 (the pinned Istio, platform_config/pins.py),
telemetry/v1alpha1/telemetry.proto: `Metrics.overrides`, `MetricsOverrides.match`
(`MetricSelector.metric`: REQUEST_COUNT, REQUEST_DURATION; `mode`: SERVER),
`MetricsOverrides.tag_overrides` (`TagOverride.operation` UPSERT, whose `value` is a CEL
expression over Envoy attributes, e.g. `request.host`); served as telemetry.istio.io/v1 (istio/istio
1.30.3 manifests/charts/base/files/crd-all.gen.yaml), which also validates that UPSERT has a
value (pkg/config/validation/validation.go). One Telemetry without selector per namespace is all
Istio allows; the platform owns the tenant namespaces. Envoy's attribute `request.headers` is a
map keyed by the lower-case header name (the config's HeaderName is lower-case).
"""

from __future__ import annotations

from typing import Any

from ..constants import standard_labels
from ..shapes import TIER_ORDER

TIER_TAG = "tier"
# What the tag holds for a request without a known tier (no header, or a value no tier has).
UNKNOWN_TIER = "other"
TIER_METRICS = ("REQUEST_COUNT", "REQUEST_DURATION")


def tier_expression(tier_header: str, tiers: tuple[str, ...] = TIER_ORDER) -> str:
    """A CEL expression: the tier header's value when it names one of `tiers`, else `other`."""
    allowed = ", ".join(f"'{tier}'" for tier in tiers)
    return (
        f"'{tier_header}' in request.headers && request.headers['{tier_header}'] in [{allowed}] "
        f"? request.headers['{tier_header}'] : '{UNKNOWN_TIER}'"
    )


def tier_metrics(namespace: str, tier_header: str) -> dict[str, Any]:
    """The Telemetry adding the tier to the request metrics of a tenant namespace's pods."""
    value = tier_expression(tier_header)
    name = "tier-metrics"
    return {
        "apiVersion": "telemetry.istio.io/v1",
        "kind": "Telemetry",
        "metadata": {"name": name, "namespace": namespace, "labels": standard_labels(name, "telemetry")},
        "spec": {
            "metrics": [
                {
                    "overrides": [
                        {
                            "match": {"metric": metric, "mode": "SERVER"},
                            "tagOverrides": {TIER_TAG: {"operation": "UPSERT", "value": value}},
                        }
                        for metric in TIER_METRICS
                    ]
                }
            ],
        },
    }
