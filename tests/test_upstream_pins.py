"""Pins against the upstream facts (../shared/upstream-facts, read in place): released versions,
values keys the charts read, images that match the chart's appVersion, vLLM flags that exist."""

from __future__ import annotations

import dataclasses

import pytest

from platform_config import pins
from preview.upstream import (
    FAILED,
    FREE_FORM_SUPPLEMENT,
    UNVERIFIED,
    VERIFIED,
    Facts,
    check_chart_pin,
    check_release_values,
    check_upstream,
    check_vllm_container,
    facts_dir,
    flags_of,
    value_paths,
)

from .helpers import vllm_release


@pytest.fixture(scope="module")
def facts() -> Facts:
    found = Facts(facts_dir())
    assert found.present, f"no upstream facts at {facts_dir()}: set UPSTREAM_FACTS_DIR"
    return found


def release(chart: pins.ChartPin, values: dict) -> dict:
    return {"name": chart.chart, "namespace": "x", "chart": chart.chart, "version": chart.version, "values": values}


def test_every_chart_pin_is_a_release_and_verified_or_said_to_be_unverified(facts):
    for pin in pins.CHARTS:
        result = check_chart_pin(facts, pin)
        assert result.status in (VERIFIED, UNVERIFIED), (pin, result.details)
        if result.status == UNVERIFIED:
            assert result.details, pin  # always says what could not be checked


def test_pins_of_the_findings_are_released_now(facts):
    # Finding 2 and 3: kube-prometheus-stack 81.4.5 and Istio 1.30.4 were never released.
    assert check_chart_pin(facts, pins.KUBE_PROMETHEUS_STACK).status == VERIFIED
    assert check_chart_pin(facts, pins.ISTIOD).status == VERIFIED
    for never_released in (
        dataclasses.replace(pins.KUBE_PROMETHEUS_STACK, version="81.4.5"),
        dataclasses.replace(pins.ISTIOD, version="1.30.4"),
    ):
        result = check_chart_pin(facts, never_released)
        assert result.status == FAILED and "not a released version" in result.details[0]


def test_cluster_autoscaler_chart_matches_the_image_for_each_kubernetes_minor(facts):
    # Finding 4: chart 9.43.1 (appVersion 1.31.0) with image v1.33.0.
    old = dataclasses.replace(pins.CLUSTER_AUTOSCALER["1.33"], version="9.43.1")
    assert check_chart_pin(facts, old).status == FAILED
    for minor, pin in pins.CLUSTER_AUTOSCALER.items():
        assert pin.image_tag is not None and pin.image_tag.startswith(f"v{minor}."), (minor, pin)
    assert check_chart_pin(facts, pins.CLUSTER_AUTOSCALER["1.33"]).status == VERIFIED
    assert check_chart_pin(facts, pins.CLUSTER_AUTOSCALER["1.31"]).status == VERIFIED


def test_values_keys_must_be_read_by_the_chart(facts):
    # Finding 13: operator.defaultRuntime is read by nothing in gpu-operator v25.10.1.
    bad = check_release_values(
        facts, release(pins.GPU_OPERATOR, {"operator": {"defaultRuntime": "containerd"}, "driver": {"enabled": False}})
    )
    assert bad.status == FAILED and bad.details == ["values key operator.defaultRuntime is not read by gpu-operator v25.10.1"]
    # A free-form map takes any key; a path under a plain key must exist.
    assert (
        check_release_values(facts, release(pins.GPU_OPERATOR, {"daemonsets": {"tolerations": [{"key": "a"}]}})).status
        == VERIFIED
    )
    assert check_release_values(facts, release(pins.ISTIO_GATEWAY, {"service": {"annotaions": {"a": "b"}}})).status == FAILED


def test_an_unreleased_chart_version_in_a_release_fails(facts):
    result = check_release_values(facts, release(dataclasses.replace(pins.ISTIOD, version="1.30.4"), {}))
    assert result.status == FAILED


def test_opaque_subcharts_take_any_key(facts):
    result = check_release_values(
        facts, release(pins.KUBE_PROMETHEUS_STACK, {"grafana": {"sidecar": {"anything": {"at": "all"}}}})
    )
    assert result.status == VERIFIED


def test_free_form_supplements_are_paths_the_chart_reads(facts):
    for (chart, version), paths in FREE_FORM_SUPPLEMENT.items():
        found = facts.chart(chart, version)
        assert found is not None, (chart, version)
        for path, citation in paths.items():
            assert path in found.readable and version in citation, (chart, path)


def test_value_paths_walk_maps_to_their_leaves():
    assert sorted(value_paths({"a": {"b": 1, "c": {"d": [1]}}, "e": {}})) == ["a.b", "a.c.d", "e"]


@pytest.mark.upstream_source
def test_vllm_flags_must_exist_at_the_pinned_version(facts):
    vllm_release()
    args = ["m", "--max-num-seqs", "8", "--scheduling-policy=priority"]
    container = {"image": pins.VLLM.image, "args": args}
    assert check_vllm_container(facts, "x", container).status == VERIFIED
    args.append("--enable-magic")
    result = check_vllm_container(facts, "x", container)
    assert result.status == FAILED and result.details == [
        f"--enable-magic is not a flag of vllm serve {pins.VLLM_VERSION} ({pins.VLLM_SOURCE.filename})"
    ]
    assert flags_of(["--a=1", "b", "--c"]) == ["--a", "--c"]


def test_an_unreleased_vllm_image_fails_and_another_image_is_unverified(facts):
    assert check_vllm_container(facts, "x", {"image": "vllm/vllm-openai:v0.18.7", "args": []}).status == FAILED
    assert check_vllm_container(facts, "x", {"image": "example.com/vllm:1", "args": []}).status == UNVERIFIED


def test_facts_folder_can_be_named(tmp_path, monkeypatch):
    monkeypatch.setenv("UPSTREAM_FACTS_DIR", str(tmp_path))
    assert facts_dir() == tmp_path
    results = check_upstream([], [], tmp_path)
    assert results and all(r.status == UNVERIFIED for r in results if r.pin.startswith("chart "))


@pytest.mark.parametrize("stack", ["dev", "staging", "prod"])
def test_every_stack_previews_with_no_upstream_failure(previews, stack):
    section = previews[stack].report["upstream"]
    assert not section["failed"], section
    pins_seen = {p["pin"] for p in section["data"]["pins"]}
    assert "chart kube-prometheus-stack" in pins_seen and any(p.startswith("vllm flags of ") for p in pins_seen)
    for entry in section["data"]["pins"]:
        if entry["status"] == UNVERIFIED:
            assert entry["details"], entry


def test_the_knative_serving_version_is_the_operators(facts, monkeypatch):
    from preview.upstream import check_knative_serving_pin

    assert check_knative_serving_pin(facts).status == VERIFIED
    monkeypatch.setattr(pins, "KNATIVE_SERVING_VERSION", "1.21")
    result = check_knative_serving_pin(facts)
    assert result.status == FAILED and "installs Serving 1.23, not 1.21" in result.details[0]


def test_istiods_mesh_config_is_passed_on_whole(facts):
    mesh = {"meshConfig": {"defaultConfig": {"holdApplicationUntilProxyStarts": True}}}
    assert check_release_values(facts, release(pins.ISTIOD, mesh)).status == VERIFIED
