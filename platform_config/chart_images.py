"""The images each pinned chart runs, as the chart's values name them at its pinned version, and how a digest is
written into those values: the image lock (`images.lockFile`) holds them as it holds the pods' images, the program
sets them on each chart's release (`locked_values`), and the pack requires them of every release in production
(`image-digests`, from the generated facts).

A chart's templates join an image in one of four ways, read at each pinned tag (the files are named per image):
- `digest`: the key holds the digest itself (`sha256:<hex>`), which the code that builds the image path joins with
  `@` (the GPU operator's operands: api/nvidia/v1/clusterpolicy_types.go imagePath, "if strings.HasPrefix(version,
  "sha256:")").
- `sha`: a `sha` key the template renders as `@sha256:{{ .sha }}`: the digest's hex alone (kube-prometheus-stack).
- `tag`: the template joins `<repository>:<tag>` and has no digest key: the tag becomes `<tag>@<digest>`, a reference
  both tagged and digested, which the runtime pulls by the digest alone (containerd's CRI parses images with
  distribution/reference, whose ParseDockerRef, normalize.go at v0.6.0, "only return[s] digested" for such a name).
- `image`: a key the template uses whole when it holds a "/" (Istio's `image` keys): the full reference with its digest.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from .models import KubernetesVersion
from .pins import (
    AWS_LOAD_BALANCER_CONTROLLER,
    CLUSTER_AUTOSCALER,
    GPU_OPERATOR,
    KUEUE,
    METRICS_SERVER,
    ChartPin,
)

DigestForm = Literal["digest", "sha", "tag", "image"]


@dataclass(frozen=True)
class ChartImage:
    """One image a chart runs at its pin, and the values key its digest is written to."""

    chart: ChartPin
    reference: str
    """`<registry>/<repository>:<tag>`, as the chart renders it with the platform's values and no digest."""
    key: str
    """The dotted values path the digest goes to."""
    form: DigestForm
    what: str
    """What runs it, and the template (at the pinned tag) that joins it."""
    also: Mapping[str, str] = field(default_factory=dict)
    """Values set with it, where the chart's own default is not what its published package runs (key: value)."""

    @property
    def tag(self) -> str:
        return self.reference.rsplit(":", 1)[1]

    def value(self, digest: str) -> str:
        """What `key` holds for `digest` (`sha256:<hex>`)."""
        if self.form == "digest":
            return digest
        if self.form == "sha":
            return digest.removeprefix("sha256:")
        if self.form == "tag":
            return f"{self.tag}@{digest}"
        return f"{self.reference}@{digest}"


def _gpu_operator(key: str, reference: str, form: DigestForm, what: str) -> ChartImage:
    return ChartImage(GPU_OPERATOR, reference, key, form, f"the GPU operator's {what}")


# NVIDIA/gpu-operator v25.10.1, deployments/gpu-operator: the operator's own Deployment and CRD hook Job join
# `<repository>/<image>:<version>` (templates/_helpers.tpl, the ":" written out), so its version takes `<tag>@<digest>`;
# each operand's image is built by the operator from the ClusterPolicy (api/nvidia/v1/clusterpolicy_types.go
# imagePath), where a version that is a digest is joined with "@". The published chart's appVersion is v25.10.1
# (the tag's Chart.yaml says main-latest; the release stamps it): the validator's version is the same image.
# Running under the platform's values (components/specs/gpu_operator.py): the operator, validator, device plugin and
# GPU feature discovery (one image), DCGM exporter, MIG manager and node-feature-discovery (the vendored subchart
# 0.18.2, charts/node-feature-discovery/templates/*.yaml `{{ .Values.image.repository }}:{{ .Values.image.tag |
# default .Chart.AppVersion }}`). The driver and toolkit are off, the sandbox operands never deploy.
_GPU_OPERATOR_IMAGE = "nvcr.io/nvidia/gpu-operator:v25.10.1"
_DEVICE_PLUGIN_IMAGE = "nvcr.io/nvidia/k8s-device-plugin:v0.18.1"
GPU_OPERATOR_IMAGES = (
    _gpu_operator("operator.version", _GPU_OPERATOR_IMAGE, "tag", "Deployment (templates/_helpers.tpl)"),
    _gpu_operator("validator.version", _GPU_OPERATOR_IMAGE, "digest", "validator (clusterpolicy_types.go imagePath)"),
    _gpu_operator("devicePlugin.version", _DEVICE_PLUGIN_IMAGE, "digest", "device plugin (imagePath)"),
    _gpu_operator("gfd.version", _DEVICE_PLUGIN_IMAGE, "digest", "GPU feature discovery (imagePath)"),
    _gpu_operator(
        "dcgmExporter.version", "nvcr.io/nvidia/k8s/dcgm-exporter:4.4.2-4.7.0-distroless", "digest", "DCGM exporter (imagePath)"
    ),
    _gpu_operator(
        "migManager.version", "nvcr.io/nvidia/cloud-native/k8s-mig-manager:v0.13.1", "digest", "MIG manager (imagePath)"
    ),
    _gpu_operator(
        "node-feature-discovery.image.tag",
        "registry.k8s.io/nfd/node-feature-discovery:v0.18.2",
        "tag",
        "node-feature-discovery subchart (charts/node-feature-discovery/templates/master.yaml)",
    ),
)

# kube-system's charts join `<repository>:<tag>` and have no digest key.
KUBE_SYSTEM_IMAGES = (
    # aws/eks-charts stable/aws-load-balancer-controller 3.5.0 (the chart kubernetes-sigs/aws-load-balancer-controller
    # v3.5.0 holds, byte for byte): templates/deployment.yaml; the tag is values.yaml's own, not the appVersion.
    ChartImage(
        AWS_LOAD_BALANCER_CONTROLLER,
        "public.ecr.aws/eks/aws-load-balancer-controller:v3.5.0",
        "image.tag",
        "tag",
        "the load balancer controller (templates/deployment.yaml)",
    ),
    # kubernetes-sigs/metrics-server metrics-server-helm-chart-3.13.1, charts/metrics-server/templates/_helpers.tpl
    # (an empty tag is "v" + the appVersion 0.8.1); the addon resizer is off.
    ChartImage(
        METRICS_SERVER,
        "registry.k8s.io/metrics-server/metrics-server:v0.8.1",
        "image.tag",
        "tag",
        "metrics-server (templates/_helpers.tpl)",
    ),
    # kubernetes-sigs/kueue v0.19.2, charts/kueue/templates/manager/manager.yaml. The values.yaml in git name a staging
    # image, which hack/helm-chart-package.sh rewrites to registry.k8s.io/kueue/kueue:v0.19.2 for the published
    # chart: said here, so the digest is asked of the image the package runs. KueueViz is off.
    ChartImage(
        KUEUE,
        "registry.k8s.io/kueue/kueue:v0.19.2",
        "controllerManager.manager.image.tag",
        "tag",
        "Kueue's controller manager (templates/manager/manager.yaml)",
        also={"controllerManager.manager.image.repository": "registry.k8s.io/kueue/kueue"},
    ),
)


def _cluster_autoscaler(kubernetes_version: KubernetesVersion) -> ChartImage:
    # kubernetes/autoscaler cluster-autoscaler-chart-<version>, templates/deployment.yaml (the same image block in every
    # pinned chart): `{{ .Values.image.repository }}:{{ .Values.image.tag }}`; the platform sets the tag
    # (components/cluster_autoscaler.py), the pin's image_tag.
    pin = CLUSTER_AUTOSCALER[kubernetes_version]
    assert pin.image_tag is not None
    return ChartImage(
        pin,
        f"registry.k8s.io/autoscaling/cluster-autoscaler:{pin.image_tag}",
        "image.tag",
        "tag",
        "the cluster autoscaler (templates/deployment.yaml)",
    )


def chart_images(kubernetes_version: KubernetesVersion) -> tuple[ChartImage, ...]:
    """Every image of every chart the platform pins, for a cluster of this Kubernetes minor (its autoscaler's)."""
    return (*GPU_OPERATOR_IMAGES, *KUBE_SYSTEM_IMAGES, _cluster_autoscaler(kubernetes_version))


def locked_values(chart: ChartPin, images: Iterable[ChartImage], digests: Mapping[str, str]) -> dict[str, Any]:
    """The values that pin `chart`'s images to the digests the lock holds (nested, to merge over the release's own);
    empty where the lock holds none of them."""
    values: dict[str, Any] = {}
    for image in images:
        digest = digests.get(image.reference)
        if image.chart != chart or digest is None:
            continue
        for key, value in {**image.also, image.key: image.value(digest)}.items():
            *parents, leaf = key.split(".")
            node = values
            for part in parents:
                node = node.setdefault(part, {})
            node[leaf] = value
    return values


def merged_values(values: Mapping[str, Any], overlay: Mapping[str, Any]) -> dict[str, Any]:
    """`values` with `overlay` merged in, key by key: a map into a map, anything else replaced."""
    merged = dict(values)
    for key, value in overlay.items():
        inner = merged.get(key)
        merged[key] = merged_values(inner, value) if isinstance(inner, Mapping) and isinstance(value, Mapping) else value
    return merged


# By chart name, the values that pin its images to the lock's digests (`Plan.chart_image_values`; empty without a lock).
ChartImageValues = Mapping[str, Mapping[str, Any]]


def chart_image_values(kubernetes_version: KubernetesVersion, digests: Mapping[str, str]) -> dict[str, dict[str, Any]]:
    """By chart, the values that pin its images to `digests` (the lock's), for each chart the lock holds an image of."""
    images = chart_images(kubernetes_version)
    charts = {image.chart.chart: image.chart for image in images}
    values = {name: locked_values(pin, images, digests) for name, pin in charts.items()}
    return {name: chart_values for name, chart_values in values.items() if chart_values}
