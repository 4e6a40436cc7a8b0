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

import typing
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from .models import KubernetesVersion
from .pins import (
    AWS_LOAD_BALANCER_CONTROLLER,
    CHARTS,
    CLUSTER_AUTOSCALER,
    GPU_OPERATOR,
    ISTIO_CNI,
    ISTIOD,
    KNATIVE_OPERATOR,
    KUBE_PROMETHEUS_STACK,
    KUEUE,
    METRICS_SERVER,
    PROMETHEUS_ADAPTER,
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
    source: Mapping[str, str] = field(default_factory=dict)
    """The other values the template joins the image from (registry, repository, image name), each with the one value a
    release may give it, the published chart's own: the pack refuses any other (a digest pins content only with the
    repository it was read from)."""
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
    """An image of the GPU operator's values, `<prefix>.repository`/`<prefix>.image` beside `<prefix>.version`, or the
    node-feature-discovery subchart's `image.repository` beside its `image.tag`."""
    prefix, _ = key.rsplit(".", 1)
    path, _ = reference.rsplit(":", 1)
    repository, name = path.rsplit("/", 1)
    source = (
        {f"{prefix}.repository": path}
        if prefix.endswith(".image")
        else {f"{prefix}.repository": repository, f"{prefix}.image": name}
    )
    return ChartImage(GPU_OPERATOR, reference, key, form, f"the GPU operator's {what}", source)


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


def _sha(chart: ChartPin, prefix: str, reference: str, what: str, form: DigestForm = "sha") -> ChartImage:
    """An image of the Prometheus community's and Grafana's charts: `<prefix>.{registry,repository,tag}` joined, and the
    digest in `<prefix>.sha` (or `.digest`, the form's own)."""
    registry, path = reference.split("/", 1)
    repository, tag = path.rsplit(":", 1)
    source = {f"{prefix}.registry": registry, f"{prefix}.repository": repository, f"{prefix}.tag": tag}
    key = f"{prefix}.digest" if prefix == "prometheus-node-exporter.image" else f"{prefix}.sha"
    return ChartImage(chart, reference, key, form, what, source)


# prometheus-community/helm-charts kube-prometheus-stack-81.4.3, charts/kube-prometheus-stack (appVersion v0.88.1, the
# tag an empty `tag` takes): each image `{{ registry }}/{{ repository }}:{{ tag }}@sha256:{{ sha }}`, the hex alone
# (templates/prometheus-operator/deployment.yaml for the operator, and the config reloader and Thanos images it is
# given by flag, the config reloader run in every Prometheus and Alertmanager pod; templates/prometheus/prometheus.yaml
# and templates/alertmanager/alertmanager.yaml for the CRs' spec.image; templates/prometheus-operator/admission-
# webhooks/job-patch/job-createSecret.yaml and job-patchWebhook.yaml for the two hook Jobs). Its subcharts at the
# versions its Chart.yaml pins: grafana 10.5.15 (grafana/helm-charts, charts/grafana/templates/_pod.tpl: Grafana, and
# the dashboards and datasources sidecars the parent turns on; hex `sha`), kube-state-metrics 7.1.0 (templates/
# _helpers.tpl: `%s@%s`, the `sha` is `sha256:<hex>`) and prometheus-node-exporter 4.51.0 (templates/_helpers.tpl: its
# key is `digest`, `sha256:<hex>`). Not rendered under the platform's values: the admission webhook Deployment, the
# CRD upgrade Job, Grafana's init-chown-data and download-dashboards, the kube-rbac-proxy sidecars; Grafana's test
# pod runs only at `helm test`. `global.imageRegistry`, read by the chart and each subchart, replaces every registry.
_KPS = KUBE_PROMETHEUS_STACK
KUBE_PROMETHEUS_STACK_IMAGES = (
    _sha(
        _KPS,
        "prometheusOperator.image",
        "quay.io/prometheus-operator/prometheus-operator:v0.88.1",
        "the Prometheus operator (templates/prometheus-operator/deployment.yaml)",
    ),
    _sha(
        _KPS,
        "prometheusOperator.prometheusConfigReloader.image",
        "quay.io/prometheus-operator/prometheus-config-reloader:v0.88.1",
        "the config reloader of every Prometheus and Alertmanager pod (the operator's --prometheus-config-reloader)",
    ),
    _sha(
        _KPS,
        "prometheusOperator.thanosImage",
        "quay.io/thanos/thanos:v0.40.1",
        "the Thanos sidecar's default image (the operator's --thanos-default-base-image)",
    ),
    _sha(
        _KPS,
        "prometheus.prometheusSpec.image",
        "quay.io/prometheus/prometheus:v3.9.1",
        "Prometheus (templates/prometheus/prometheus.yaml)",
    ),
    _sha(
        _KPS,
        "alertmanager.alertmanagerSpec.image",
        "quay.io/prometheus/alertmanager:v0.30.1",
        "Alertmanager (templates/alertmanager/alertmanager.yaml)",
    ),
    _sha(
        _KPS,
        "prometheusOperator.admissionWebhooks.patch.image",
        "ghcr.io/jkroepke/kube-webhook-certgen:1.7.4",
        "the admission webhook's certificate hook Jobs (templates/prometheus-operator/admission-webhooks/job-patch)",
    ),
    _sha(_KPS, "grafana.image", "docker.io/grafana/grafana:12.3.1", "Grafana (grafana 10.5.15 templates/_pod.tpl)"),
    _sha(
        _KPS,
        "grafana.sidecar.image",
        "quay.io/kiwigrid/k8s-sidecar:2.5.0",
        "Grafana's dashboards and datasources sidecars (grafana 10.5.15 templates/_pod.tpl)",
    ),
    _sha(
        _KPS,
        "kube-state-metrics.image",
        "registry.k8s.io/kube-state-metrics/kube-state-metrics:v2.18.0",
        "kube-state-metrics (kube-state-metrics 7.1.0 templates/_helpers.tpl)",
        "digest",
    ),
    _sha(
        _KPS,
        "prometheus-node-exporter.image",
        "quay.io/prometheus/node-exporter:v1.10.2",
        "node-exporter (prometheus-node-exporter 4.51.0 templates/_helpers.tpl)",
        "digest",
    ),
)

# knative/operator knative-v1.23.0, config/charts/knative-operator/templates/operator.yaml: the operator and its
# webhook as `{{ image }}:{{ tag }}` (the published chart's tag is v1.23.0: hack/generate-helm.sh replaces the
# values' placeholder). Serving and net-istio, which the operator applies from its own image (cmd/operator/kodata/
# knative-serving/1.23.0, ingress/1.23/istio/net-istio.yaml), name each of their images by digest already, queue-proxy
# included: the operator's digest pins them too, unless a KnativeServing's `spec.registry` replaces them (the pack
# refuses that).
_KNATIVE = "gcr.io/knative-releases/knative.dev/operator/cmd"
KNATIVE_OPERATOR_IMAGES = tuple(
    ChartImage(
        KNATIVE_OPERATOR,
        f"{_KNATIVE}/{image}:{KNATIVE_OPERATOR.version}",
        f"knative_operator.{prefix}.tag",
        "tag",
        f"the Knative {what} (templates/operator.yaml)",
        {f"knative_operator.{prefix}.image": f"{_KNATIVE}/{image}"},
    )
    for prefix, image, what in (
        ("knative_operator", "operator", "operator"),
        ("operator_webhook", "webhook", "operator's webhook"),
    )
)

# prometheus-community/helm-charts prometheus-adapter-5.3.0, templates/deployment.yaml: `{{ image.repository }}:{{
# image.tag | default (printf "v%s" .Chart.AppVersion) }}`, the repository with its registry.
PROMETHEUS_ADAPTER_IMAGES = (
    ChartImage(
        PROMETHEUS_ADAPTER,
        "registry.k8s.io/prometheus-adapter/prometheus-adapter:v0.12.0",
        "image.tag",
        "tag",
        "prometheus-adapter (templates/deployment.yaml)",
        {"image.repository": "registry.k8s.io/prometheus-adapter/prometheus-adapter"},
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
        {"image.repository": "public.ecr.aws/eks/aws-load-balancer-controller"},
    ),
    # kubernetes-sigs/metrics-server metrics-server-helm-chart-3.13.1, charts/metrics-server/templates/_helpers.tpl
    # (an empty tag is "v" + the appVersion 0.8.1); the addon resizer is off.
    ChartImage(
        METRICS_SERVER,
        "registry.k8s.io/metrics-server/metrics-server:v0.8.1",
        "image.tag",
        "tag",
        "metrics-server (templates/_helpers.tpl)",
        {"image.repository": "registry.k8s.io/metrics-server/metrics-server"},
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
        source={"controllerManager.manager.image.repository": "registry.k8s.io/kueue/kueue"},
        also={"controllerManager.manager.image.repository": "registry.k8s.io/kueue/kueue"},
    ),
)


# istio/istio 1.30.3, manifests/charts: istiod's Deployment (istio-control/istio-discovery/templates/deployment.yaml)
# and istio-cni's DaemonSet (istio-cni/templates/daemonset.yaml) use `image` whole where it holds a "/" (else they join
# hub, image, tag and variant). Every proxy istiod injects, the sidecars and the gateway pods (the gateway chart's
# `image: auto`, templates/deployment.yaml), runs `global.proxy.image`, its init container `global.proxy_init.image`,
# each whole where it holds a "/" (istio-discovery/files/injection-template.yaml, gateway-injection-template.yaml),
# unless the pod's `sidecar.istio.io/proxyImage` annotation names another, which the pack refuses. The base and
# gateway charts run no image of their own. The published charts' own hub is registry.istio.io/release (istio/
# release-builder release-1.30, release/build.sh DOCKER_HUB, stamped into the charts by pkg/build/helm.go
# updateValues); the release's publish.sh pushes the same images to docker.io/istio, the hub named here, whose answers
# the lock records.
_ISTIO = "docker.io/istio"
_PROXY_IMAGE = f"{_ISTIO}/proxyv2:{ISTIOD.version}"
ISTIO_IMAGES = (
    ChartImage(ISTIOD, f"{_ISTIO}/pilot:{ISTIOD.version}", "image", "image", "istiod (templates/deployment.yaml)"),
    ChartImage(ISTIOD, _PROXY_IMAGE, "global.proxy.image", "image", "every injected proxy (files/injection-template.yaml)"),
    ChartImage(
        ISTIOD, _PROXY_IMAGE, "global.proxy_init.image", "image", "every injected proxy's init container (injection-template)"
    ),
    ChartImage(
        ISTIO_CNI, f"{_ISTIO}/install-cni:{ISTIO_CNI.version}", "image", "image", "the CNI node agent (templates/daemonset.yaml)"
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
        {"image.repository": "registry.k8s.io/autoscaling/cluster-autoscaler"},
    )


def chart_images(kubernetes_version: KubernetesVersion) -> tuple[ChartImage, ...]:
    """Every image of every chart the platform pins, for a cluster of this Kubernetes minor (its autoscaler's)."""
    return (
        *GPU_OPERATOR_IMAGES,
        *ISTIO_IMAGES,
        *KUBE_PROMETHEUS_STACK_IMAGES,
        *KNATIVE_OPERATOR_IMAGES,
        *PROMETHEUS_ADAPTER_IMAGES,
        *KUBE_SYSTEM_IMAGES,
        _cluster_autoscaler(kubernetes_version),
    )


# By chart, the values that would move every image of it at once (a global registry), which no release may set.
CHART_WIDE_SOURCES: Mapping[str, tuple[str, ...]] = {
    KUBE_PROMETHEUS_STACK.chart: tuple(
        f"{chart}global.imageRegistry" for chart in ("", "grafana.", "kube-state-metrics.", "prometheus-node-exporter.")
    ),
}


def pack_facts() -> dict[str, dict[str, dict[str, Any]]]:
    """By chart and version, for every chart the platform pins (those that run no image of their own too: the pack
    refuses a production release of any other, whose images it cannot know): where each image takes its digest, the
    values it comes from, and what no release may set."""
    facts: dict[str, dict[str, dict[str, Any]]] = {}
    for pin in CHARTS:
        facts.setdefault(pin.chart, {})[pin.version] = {"images": [], "unset": list(CHART_WIDE_SOURCES.get(pin.chart, ()))}
    for kubernetes_version in typing.get_args(KubernetesVersion):
        for image in chart_images(kubernetes_version):
            entries = facts[image.chart.chart][image.chart.version]["images"]
            entry = {
                "key": image.key,
                "form": image.form,
                "reference": image.reference,
                "what": image.what,
                "source": dict(image.source),
            }
            if entry not in entries:
                entries.append(entry)
    return facts


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
