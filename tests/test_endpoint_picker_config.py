"""The endpoint picker's config: only the fields and plugins llm-d-router v0.10.0 defines (held against its
source), bands sorted with their caps, eviction only where a sheddable tier shares the picker, the plans the
EPP would refuse refused, the system nodes where the platform builds them."""

from __future__ import annotations

import dataclasses
import re
from typing import Any

import pytest
import yaml

from components.picker_plan import PickerBand
from components.specs import endpoint_picker as epp

from .endpoint_picker_helpers import git_show, make_plan, picker_plan, pod_spec

# Module-scoped, as in the modules beside it (tests/endpoint_picker_helpers.py picker_fixtures).
plan = pytest.fixture(scope="module", name="plan")(picker_plan)


# --- the EPP config ---------------------------------------------------------------------------


def config_paths(document: Any, where: str = "") -> list[tuple[str, str]]:
    """(place, key) for every key of the document, places named as in EPP_CONFIG_FIELDS;
    plugin parameters are returned under `plugins[<type>].parameters`."""
    found: list[tuple[str, str]] = []
    if isinstance(document, dict):
        for key, value in document.items():
            found.append((where, key))
            if where == "plugins[]" and key == "parameters":
                found += [(f"plugins[{document['type']}].parameters", k) for k in value]
                continue
            found += config_paths(value, f"{where}.{key}".lstrip("."))
    elif isinstance(document, list):
        for item in document:
            found += config_paths(item, f"{where}[]")
    return found


def unknown_fields(config: dict[str, Any]) -> list[tuple[str, str]]:
    """Keys of the config that the upstream tables do not define at their place."""
    unknown = []
    for place, key in config_paths(config):
        if place.startswith("plugins[") and place.endswith(".parameters"):
            plugin_type = place[len("plugins[") : -len("].parameters")]
            known = epp.EPP_PLUGINS[plugin_type][1] if plugin_type in epp.EPP_PLUGINS else frozenset()
        elif place == "featureGates[]":
            continue
        else:
            known = epp.EPP_CONFIG_FIELDS[place][2] if place in epp.EPP_CONFIG_FIELDS else frozenset()
        if key not in known:
            unknown.append((place, key))
    return unknown


def test_the_config_uses_only_fields_upstream_defines(plan):
    config = epp.endpoint_picker_config(plan)
    assert unknown_fields(config) == []
    assert {p["type"] for p in config["plugins"]} <= set(epp.EPP_PLUGINS)
    # The config the ConfigMap carries is this one.
    config_map = epp.epp_config_map(plan)
    assert yaml.safe_load(config_map["data"][epp.EPP_CONFIG_FILE]) == config


def test_a_misspelt_field_would_be_caught(plan):
    config = epp.endpoint_picker_config(plan)
    config["flowControl"]["priorityBands"][0]["maxRequest"] = "1"
    config["plugins"][-1]["parameters"]["queueDepth"] = 3
    config["flowControl"]["ttl"] = "1s"
    assert sorted(unknown_fields(config)) == [
        ("flowControl", "ttl"),
        ("flowControl.priorityBands[]", "maxRequest"),
        ("plugins[utilization-detector].parameters", "queueDepth"),
    ]


def go_struct_json_tags(source: str, struct: str) -> set[str]:
    body = re.search(rf"^type {struct} struct \{{(.*?)^\}}", source, re.S | re.M)
    assert body, struct
    return {name for name in re.findall(r'json:"([^",]*)', body.group(1)) if name}


def test_the_field_table_is_upstreams(plan):
    source = git_show(epp.CONFIG_TYPES)
    for place, (struct, path, fields) in epp.EPP_CONFIG_FIELDS.items():
        assert path == epp.CONFIG_TYPES
        tags = go_struct_json_tags(source, struct)
        if struct == "EndpointPickerConfig":
            tags |= {"apiVersion", "kind"}  # metav1.TypeMeta, inline
        assert tags == set(fields), (place, struct, tags ^ set(fields))
    # The group and version the config declares.
    register = git_show("apix/config/v1alpha1/zz_generated.register.go")
    assert 'GroupName = "llm-d.ai"' in register
    assert epp.endpoint_picker_config(plan)["apiVersion"] == "llm-d.ai/v1alpha1"


def test_plugin_types_parameters_and_the_gate_are_upstreams():
    for plugin_type, (paths, parameters) in epp.EPP_PLUGINS.items():
        source = "".join(git_show(path) for path in paths)
        assert f'"{plugin_type}"' in source, (plugin_type, paths)
        for parameter in parameters:
            assert f'json:"{parameter}' in source, (plugin_type, parameter)
    assert f'FeatureGate = "{epp.FLOW_CONTROL_GATE}"' in git_show("pkg/epp/flowcontrol/config.go")
    chart_config = git_show("config/charts/routerlib/templates/_config.yaml")
    for ref, weight in epp.SCORER_WEIGHTS:
        assert re.search(rf"pluginRef: {ref}\n\s+weight: {weight}\n", chart_config), ref


def test_bands_are_sorted_with_their_caps_and_the_global_caps_are_their_sums(plan):
    flow = epp.endpoint_picker_config(plan)["flowControl"]
    assert epp.endpoint_picker_config(plan)["featureGates"] == ["flowControl"]
    assert [b["priority"] for b in flow["priorityBands"]] == [100, 10, -1]
    assert flow["priorityBands"][0] == {"priority": 100, "maxBytes": "512Mi", "maxRequests": "1000"}
    assert flow["maxBytes"] == "896Mi" and flow["maxRequests"] == "1600"
    assert flow["saturationDetector"] == {"pluginRef": "utilization-detector"}
    # Sheddable traffic: other negative priorities get the batch band's caps; unlisted ones the smallest.
    assert flow["defaultNegativePriorityBand"] == {"priority": -1, "maxBytes": "128Mi", "maxRequests": "100"}
    assert flow["defaultPriorityBand"]["maxRequests"] == "100"
    without_batch = make_plan(bands=tuple(b for b in plan.bands if b.tier != "batch"))
    assert "defaultNegativePriorityBand" not in epp.endpoint_picker_config(without_batch)["flowControl"]


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"bands": (PickerBand("premium", 10, 1, "1Mi", 5), PickerBand("standard", 10, 1, "1Mi", 5))}, "priorities"),
        ({"bands": (PickerBand("premium", 1, 1, "1Mi", 5), PickerBand("batch", 5, 1, "1Mi", 5))}, "must fall"),
        ({"bands": (PickerBand("gold", 1, 1, "1Mi", 5),)}, "tier 'gold'"),
        ({"bands": (PickerBand("premium", 1, 0, "1Mi", 5),)}, "max_requests"),
        ({"bands": (PickerBand("premium", 1, 1, "3Gi", 5),)}, "half the EPP's memory limit"),
        ({"bands": (PickerBand("premium", 1, 1, "lots", 5),)}, "not a Kubernetes quantity"),
        ({"bands": (PickerBand("premium", 1, 1, "1Mi", 0),)}, r"bands\[premium\].queue_seconds 0"),
        ({"bands": ()}, "at least one"),
        ({"replicas": 0}, "replicas"),
        ({"name": "x" * 41}, "40 characters"),
        ({"server_labels": {}}, "selector"),
        ({"server_host": "llama-8b.team-b.svc.cluster.local"}, "server_host"),
        ({"server_host": "llama-8b"}, "server_host"),
    ],
)
def test_plans_the_epp_would_refuse_are_refused(changes, message):
    with pytest.raises(ValueError, match=message):
        epp.endpoint_picker_objects(make_plan(**changes))


def test_pods_go_to_the_system_nodes_where_the_platform_builds_them():
    assert pod_spec(epp.endpoint_picker_objects(make_plan()))["nodeSelector"] == {"inference.platform/pool": "system"}
    # On a cluster the platform does not build, no pool is known: the cluster's scheduler places them.
    assert "nodeSelector" not in pod_spec(epp.endpoint_picker_objects(make_plan(node_selector={})))


def test_sheddable_tiers_are_evicted_for_higher_ones_only_when_both_share_a_picker(plan):
    # make_plan: premium, standard and a sheddable batch band.
    assert epp.endpoint_picker_config(plan)["flowControl"]["enableEviction"] is True
    alone = dataclasses.replace(plan, bands=tuple(b for b in plan.bands if b.priority < 0))
    assert "enableEviction" not in epp.endpoint_picker_config(alone)["flowControl"]
    unsheddable = dataclasses.replace(plan, bands=tuple(b for b in plan.bands if b.priority >= 0))
    assert "enableEviction" not in epp.endpoint_picker_config(unsheddable)["flowControl"]
