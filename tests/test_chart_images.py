"""The charts' images (platform_config/chart_images.py) against the upstream facts read at each pinned version
(`../shared/upstream-facts/charts/<chart>/<version>.json`): every key a digest is written to is one the chart reads,
and a lock's digests reach each release's values without the platform's own values lost."""

from __future__ import annotations

import copy
import typing
from typing import Any

import pytest

from platform_config.chart_images import ChartImage, chart_image_values, chart_images, merged_values
from platform_config.models import KubernetesVersion
from preview.engine import RecordedResource
from preview.upstream import Facts, facts_dir

from .helpers import Evaluated, raw_stack
from .policy_harness import PolicyHarness

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


# --- the pack on the releases ---------------------------------------------------------------------------------------

RELEASE = "kubernetes:helm.sh/v3:Release"
LOCKED = {image.reference: f"sha256:{index + 1:064x}" for index, image in enumerate(EVERY_IMAGE)}


@pytest.fixture(scope="module")
def prod() -> Evaluated:
    return Evaluated(raw_stack("prod"), shared=True)


@pytest.fixture(scope="module")
def harness() -> PolicyHarness:
    # image-digests at the pack's own level (mandatory in production), as `pulumi up` runs it.
    return PolicyHarness("prod", {"image-digests": {"enforcementLevel": "mandatory"}})


def locked(record: RecordedResource) -> RecordedResource:
    """A prod release as the program renders it with a lock holding every chart image (`chart_image_values`, which
    helm_release merges over the release's own values)."""
    record = copy.deepcopy(record)
    chart = record.inputs["chart"].rsplit("/", 1)[-1]
    version: KubernetesVersion = raw_stack("prod")["cluster"]["kubernetesVersion"]
    overlay = chart_image_values(version, LOCKED).get(chart, {})
    record.inputs["values"] = merged_values(record.inputs["values"], overlay)
    return record


def releases(prod: Evaluated) -> list[RecordedResource]:
    return [r for r in prod.records if r.type == RELEASE]


def messages(harness: PolicyHarness, record: RecordedResource) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for diagnostic in harness.analyze(record, None):
        found.setdefault(diagnostic.policy, []).append(diagnostic.message)
    return found


def set_key(record: RecordedResource, key: str, value: Any) -> RecordedResource:
    record = copy.deepcopy(record)
    *parents, leaf = key.split(".")
    node = record.inputs["values"]
    for part in parents:
        node = node.setdefault(part, {})
    node[leaf] = value
    return record


def test_every_prod_release_is_a_chart_the_platform_read_and_passes_once_locked(prod, harness):
    charts = {(r.inputs["chart"].rsplit("/", 1)[-1], r.inputs["version"]) for r in releases(prod)}
    assert {(image.chart.chart, image.chart.version) for image in chart_images("1.33")} <= charts
    for record in releases(prod):
        assert messages(harness, locked(record)) == {}, record.name
        # Unlocked, each of its images is named by the key its digest goes to.
        unlocked = messages(harness, record)
        chart = record.inputs["chart"].rsplit("/", 1)[-1]
        keys = [image.key for image in chart_images("1.33") if image.chart.chart == chart]
        assert set(unlocked) <= {"image-digests"} and len(unlocked.get("image-digests", [])) == len(keys), unlocked
        assert all(any(f"set {key} to " in m for m in unlocked["image-digests"]) for key in keys)


@pytest.mark.parametrize("image", EVERY_IMAGE, ids=lambda image: f"{image.chart.chart}-{image.key}")
def test_an_image_from_elsewhere_beside_a_digest_is_refused(prod, harness, image):
    (record,) = [r for r in releases(prod) if r.inputs["chart"].rsplit("/", 1)[-1] == image.chart.chart]
    record = locked(record)
    # Another repository with its own digest, where the key takes a whole image, a tag or a source value.
    attacker = "ghcr.io/attacker/miner"
    moved = (
        set_key(record, image.key, f"{attacker}:v1@sha256:{'e' * 64}")
        if image.form == "image"
        else set_key(record, next(iter(image.source)), attacker)
    )
    found = messages(harness, moved)
    assert found.get("pinned-images") and attacker in found["pinned-images"][0], found
    if image.form in ("tag", "digest"):
        # Another tag of the same repository: another release of the image, not the chart's.
        found = messages(harness, set_key(record, image.key, "v0.0.1"))
        assert "pinned-images" in found, found


def test_a_chart_nobody_read_and_a_registry_for_every_image_are_refused(prod, harness):
    (monitoring,) = [r for r in releases(prod) if r.inputs["chart"].endswith("kube-prometheus-stack")]
    found = messages(harness, set_key(locked(monitoring), "global.imageRegistry", "ghcr.io/attacker"))
    assert any("sets global.imageRegistry, which moves every image" in m for m in found["pinned-images"]), found
    other = set_key(locked(monitoring), "grafana.image.tag", "12.3.1")  # the chart's own tag: allowed
    assert messages(harness, other) == {}
    unknown = copy.deepcopy(monitoring)
    unknown.inputs["version"] = "81.4.4"
    found = messages(harness, unknown)
    assert any("kube-prometheus-stack 81.4.4: its images are not known" in m for m in found["pinned-images"]), found


def test_no_pod_names_its_own_mesh_proxy_and_knative_keeps_its_releases_images(prod, harness):
    server = next(r for r in prod.records if r.type == "kubernetes:apps/v1:Deployment" and r.name.startswith("llama-70b"))
    server = copy.deepcopy(server)
    server.inputs["spec"]["template"]["metadata"].setdefault("annotations", {})["sidecar.istio.io/proxyImage"] = (
        "ghcr.io/attacker/proxyv2:1.30.3"
    )
    assert any("swaps the mesh's proxy image" in m for m in messages(harness, server)["pinned-images"])
    (serving,) = [r for r in prod.records if r.type == "kubernetes:operator.knative.dev/v1beta1:KnativeServing"]
    for path, value in (
        (("registry", "override"), {"activator": "ghcr.io/attacker/activator:v1"}),
        (("registry", "default"), "ghcr.io/attacker/${NAME}:v1"),
        (("additionalManifests",), [{"URL": "https://attacker.example/serving.yaml"}]),
        (("config", "deployment", "queue-sidecar-image"), "ghcr.io/attacker/queue:v1"),
    ):
        changed = copy.deepcopy(serving)
        node = changed.inputs["spec"]
        for part in path[:-1]:
            node = node.setdefault(part, {})
        node[path[-1]] = value
        found = messages(harness, changed)
        assert any(f"sets spec.{'.'.join(path)}, which replaces images" in m for m in found["pinned-images"]), found
    assert "pinned-images" not in messages(harness, serving)
