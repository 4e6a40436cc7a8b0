"""The gateway sheds load before it runs out of memory: a bootstrap override gives Envoy's
overload manager a heap monitor sized from the gateway container's memory limit and the actions
it drives, and the gateway chart's values mount it where pilot-agent reads it."""

from __future__ import annotations

import json
from typing import Any

import pytest

from components.specs.mesh import (
    GATEWAY_RESOURCES,
    gateway_overload_config_map,
    gateway_values,
)
from platform_config import pins
from preview.upstream import VERIFIED, Facts, check_release_values, facts_dir

from .helpers import Evaluated, raw_stack

FIXED_HEAP = "envoy.resource_monitors.fixed_heap"
GIB, MIB = 1 << 30, 1 << 20


def bootstrap(config_map: dict[str, Any]) -> dict[str, Any]:
    return json.loads(config_map["data"]["custom_bootstrap.json"])


def actions(overload: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    return {action["name"]: action["triggers"] for action in overload["actions"]}


@pytest.fixture(scope="module")
def prod() -> Evaluated:
    return Evaluated(raw_stack("prod"), shared=True)


def test_the_heap_monitor_is_the_gateway_memory_limit_less_the_reserve():
    assert GATEWAY_RESOURCES["limits"]["memory"] == "1Gi"
    (monitor,) = bootstrap(gateway_overload_config_map())["overload_manager"]["resource_monitors"]
    assert monitor["name"] == FIXED_HEAP
    assert monitor["typed_config"] == {
        "@type": "type.googleapis.com/envoy.extensions.resource_monitors.fixed_heap.v3.FixedHeapConfig",
        "max_heap_size_bytes": GIB - 256 * MIB,
    }


@pytest.mark.parametrize(("limit", "heap"), [("2Gi", 2 * GIB - 256 * MIB), ("1536Mi", 1280 * MIB), ("512Mi", 256 * MIB)])
def test_the_heap_monitor_follows_the_memory_limit(limit, heap):
    (monitor,) = bootstrap(gateway_overload_config_map(limit))["overload_manager"]["resource_monitors"]
    assert monitor["typed_config"]["max_heap_size_bytes"] == heap


@pytest.mark.parametrize("limit", ["511Mi", "256Mi", "1000m"])
def test_a_limit_leaving_envoy_less_heap_than_the_reserve_is_refused(limit):
    with pytest.raises(ValueError, match=f"gateway memory limit '{limit}'"):
        gateway_overload_config_map(limit)


def test_the_actions_fire_at_fractions_of_the_heap():
    overload = bootstrap(gateway_overload_config_map())["overload_manager"]
    assert actions(overload) == {
        "envoy.overload_actions.shrink_heap": [{"name": FIXED_HEAP, "threshold": {"value": 0.90}}],
        "envoy.overload_actions.disable_http_keepalive": [{"name": FIXED_HEAP, "threshold": {"value": 0.90}}],
        "envoy.overload_actions.stop_accepting_requests": [{"name": FIXED_HEAP, "threshold": {"value": 0.95}}],
        "envoy.overload_actions.reset_high_memory_stream": [
            {"name": FIXED_HEAP, "scaled": {"scaling_threshold": 0.85, "saturation_threshold": 0.95}}
        ],
    }
    # Envoy refuses reset_high_memory_stream without buffer accounting; streams of 1 MiB up are tracked.
    assert overload["buffer_factory_config"] == {"minimum_account_to_track_power_of_two": 20}
    assert overload["refresh_interval"] == "0.25s"


def test_the_override_adds_to_istios_connection_monitor_instead_of_declaring_it_again():
    # Envoy appends a repeated field of --config-yaml to Istio's bootstrap: declaring Istio's
    # monitor again would name it twice.
    overload = bootstrap(gateway_overload_config_map())["overload_manager"]
    names = [monitor["name"] for monitor in overload["resource_monitors"]]
    assert names == [FIXED_HEAP]
    assert set(overload) == {"refresh_interval", "resource_monitors", "buffer_factory_config", "actions"}
    assert {trigger["name"] for triggers in actions(overload).values() for trigger in triggers} == {FIXED_HEAP}


def test_the_config_map_name_follows_its_content():
    first, again, other = gateway_overload_config_map(), gateway_overload_config_map(), gateway_overload_config_map("2Gi")
    assert first == again
    assert first["metadata"]["name"].startswith("istio-ingressgateway-overload-")
    assert first["metadata"]["name"] != other["metadata"]["name"]
    assert first["metadata"]["namespace"] == "istio-system"
    assert len(first["metadata"]["name"]) <= 63


def test_the_gateway_pods_mount_the_override_where_pilot_agent_reads_it():
    config_map = gateway_overload_config_map()
    values = gateway_values(690, "internal")
    (volume,) = values["volumes"]
    (mount,) = values["volumeMounts"]
    assert volume == {"name": mount["name"], "configMap": {"name": config_map["metadata"]["name"]}}
    assert mount["readOnly"] is True
    (file_name,) = config_map["data"]
    assert values["env"] == {"ISTIO_BOOTSTRAP_OVERRIDE": f"{mount['mountPath']}/{file_name}"}
    # The limit the monitor is sized from is the one the chart is given.
    assert values["resources"]["limits"]["memory"] == GATEWAY_RESOURCES["limits"]["memory"]


def test_the_wiring_keys_are_ones_the_gateway_chart_reads():
    facts = Facts(facts_dir())
    assert facts.present, f"no upstream facts at {facts_dir()}"
    release = {
        "name": "istio-ingressgateway",
        "namespace": "istio-system",
        "chart": pins.ISTIO_GATEWAY.chart,
        "version": pins.ISTIO_GATEWAY.version,
        "values": gateway_values(690, "internal"),
    }
    result = check_release_values(facts, release)
    assert result.status == VERIFIED, result.details


def test_the_program_declares_the_config_map_before_the_gateway(prod):
    config_map = gateway_overload_config_map()
    declared = prod.k8s("ConfigMap", config_map["metadata"]["name"], "istio-system")
    assert declared["data"] == config_map["data"]
    (release,) = [r for r in prod.records if r.type == "kubernetes:helm.sh/v3:Release" and r.name == "mesh-gateway"]
    (config_map_record,) = [
        r for r in prod.records if r.type == "kubernetes:core/v1:ConfigMap" and r.name == "mesh-gateway-overload"
    ]
    assert config_map_record.urn in release.dependencies
    assert release.inputs["values"]["volumes"][0]["configMap"]["name"] == config_map["metadata"]["name"]
