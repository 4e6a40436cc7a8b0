"""The charts' images (platform_config/chart_images.py) against the upstream facts read at each pinned version
(`../shared/upstream-facts/charts/<chart>/<version>.json`): every key a digest is written to is one the chart reads,
and a lock's digests reach each release's values without the platform's own values lost."""

from __future__ import annotations

import typing
from typing import Any

import pytest

from platform_config.chart_images import ChartImage, chart_image_values, chart_images, merged_values
from platform_config.models import KubernetesVersion
from preview.upstream import Facts, facts_dir

EVERY_IMAGE = list(
    {
        (image.chart.chart, image.chart.version, image.key): image
        for version in typing.get_args(KubernetesVersion)
        for image in chart_images(version)
    }.values()
)
FACTS = Facts(facts_dir())
# The pins the facts have no usable file for, which the upstream stage reports unverified (their keys were read in
# the charts' templates at their tags, as chart_images.py says): metrics-server has no facts, cluster-autoscaler
# 9.37.0 and 9.46.6 none, 9.53.0 an empty one (its chart moved to cluster-autoscaler/charts/).
WITHOUT_FACTS = {
    ("metrics-server", "3.13.1"),
    ("cluster-autoscaler", "9.37.0"),
    ("cluster-autoscaler", "9.46.6"),
    ("cluster-autoscaler", "9.53.0"),
}


@pytest.mark.parametrize("image", EVERY_IMAGE, ids=lambda image: f"{image.chart.chart}-{image.chart.version}-{image.key}")
def test_each_digest_goes_to_a_key_the_chart_reads(image: ChartImage):
    facts = FACTS.chart(image.chart.chart, image.chart.release)
    if facts is None or not facts.readable:
        assert (image.chart.chart, image.chart.release) in WITHOUT_FACTS, "facts to check it against were expected"
        return
    assert (image.chart.chart, image.chart.release) not in WITHOUT_FACTS, "facts came: hold the key to them"
    for key in (image.key, *image.also):
        assert facts.reads(key), f"{image.chart.chart} {image.chart.release} does not read {key}"


def test_a_lock_pins_every_chart_image_and_keeps_the_releases_own_values():
    digests = {image.reference: f"sha256:{index:064x}" for index, image in enumerate(EVERY_IMAGE)}
    values = chart_image_values("1.33", digests)
    gpu = values["gpu-operator"]
    # The operator's template writes the ":" itself: a tag, then the digest; an operand's version is the digest.
    assert gpu["operator"]["version"] == f"v25.10.1@{digests['nvcr.io/nvidia/gpu-operator:v25.10.1']}"
    assert gpu["devicePlugin"]["version"] == digests["nvcr.io/nvidia/k8s-device-plugin:v0.18.1"]
    assert gpu["node-feature-discovery"]["image"]["tag"].startswith("v0.18.2@sha256:")
    # The autoscaler's image is the one for the cluster's version.
    assert values["cluster-autoscaler"]["image"]["tag"].startswith("v1.33.0@sha256:")
    assert values["kueue"]["controllerManager"]["manager"]["image"]["repository"] == "registry.k8s.io/kueue/kueue"
    # Merged over the release's own values, key by key.
    own: dict[str, Any] = {"devicePlugin": {"enabled": True, "version": "v0.18.1"}, "driver": {"enabled": False}}
    merged = merged_values(own, gpu)
    assert merged["devicePlugin"] == {"enabled": True, "version": gpu["devicePlugin"]["version"]}
    assert merged["driver"] == {"enabled": False} and own["devicePlugin"]["version"] == "v0.18.1"


def test_no_lock_sets_no_value():
    assert chart_image_values("1.33", {}) == {}
