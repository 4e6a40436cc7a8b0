"""Every version the docs and the code's comments quote for a pinned component is its pin (platform_config/pins.py),
so a bump that forgets a sentence fails here; a mention of history (what an older release did) is listed below with
the words that make it one."""

from __future__ import annotations

import re
from pathlib import Path

from platform_config import pins
from preview.performance import DATABASE_VLLM_VERSION

from .helpers import ROOT

MLFLOW = next(
    line.split("==", 1)[1]
    for line in (ROOT / "tests" / "servers" / "mlflow-requirements.txt").read_text().splitlines()
    if line.lower().startswith("mlflow==")
)
VERSION = r"v?(\d+\.\d+(?:\.\d+)?)"


# Istio's charts have words for names (base, cni, gateway): quoted as "Istio <version>", above.
ISTIO_CHARTS = {pins.ISTIO_BASE.chart, pins.ISTIO_CNI.chart, pins.ISTIOD.chart, pins.ISTIO_GATEWAY.chart}


def _version_in(tag: str) -> str:
    """The release an image's tag names (`distroless-v1.38.3` -> `1.38.3`)."""
    found = re.search(r"\d+\.\d+(?:\.\d+)?", tag)
    assert found is not None, tag
    return found.group(0)


def _by_name(named: list[tuple[str, str]]) -> dict[str, tuple[str, ...]]:
    """A pattern per name (`<name> <version>`, `<name> chart <version>`) with every version pinned under it."""
    versions: dict[str, list[str]] = {}
    for name, version in named:
        versions.setdefault(name, []).append(version)
    return {rf"\b{re.escape(name)}(?: chart)? {VERSION}": tuple(found) for name, found in versions.items()}


# How prose names each pinned component, and the versions it may quote for it: the pin (a quote may leave out the
# patch), and for vLLM also the release aiconfigurator's measurements were taken with.
QUOTED = {
    rf"\bvLLM {VERSION}": (pins.VLLM_VERSION, DATABASE_VLLM_VERSION),
    rf"\bIstio {VERSION}": (pins.ISTIO_VERSION,),
    rf"\bKueue {VERSION}": (pins.KUEUE.version,),
    rf"\bllm-d-router {VERSION}": (pins.LLM_D_ROUTER_VERSION,),
    rf"\baiconfigurator(?:-core)? {VERSION}": (pins.AICONFIGURATOR.version,),
    rf"\bMLflow {VERSION}": (MLFLOW,),
    rf"\bEnvoy {VERSION}": (pins.ENVOY.version,),
    rf"\bmetrics-server {VERSION}": (pins.METRICS_SERVER.version,),
    rf"\bKnative(?: Serving)? {VERSION}": (pins.KNATIVE_SERVING_VERSION, pins.KNATIVE_OPERATOR.release),
    rf"\bGPU Operator {VERSION}": (pins.GPU_OPERATOR.release,),
    # Every pinned chart by its name (the cluster autoscaler's charts and images, one per Kubernetes minor), and every
    # pinned image by its repository's last part.
    **_by_name(
        [(pin.chart, pin.release) for pin in pins.CHARTS if pin.chart not in ISTIO_CHARTS]
        + [("cluster-autoscaler", pin.image_tag.removeprefix("v")) for pin in pins.CLUSTER_AUTOSCALER.values() if pin.image_tag]
        + [(pin.repository.rsplit("/", 1)[-1], _version_in(pin.tag)) for pin in pins.IMAGES]
    ),
}
# History, not a pin: the quote and words of its sentence.
HISTORY = {
    ("MLflow 2.9.0", "deprecated since MLflow 2.9.0"),
    ("Envoy 1.33", "With Envoy 1.33, the chart preset's"),
    ("vLLM 0.18.0", "the last version the facts list flags for"),
    ("vLLM 0.28.0", "moved bitsandbytes out of tree"),
    ("vLLM 0.31.0", "removed the `slow` mode"),
    ("vLLM 0.27.0", "removed --max-num-partial-prefills"),
}
SOURCES = ("components", "platform_config", "preview", "platform_tools", "policies", "benchmarks")


def _quoting_files() -> list[Path]:
    files = [ROOT / "README.md", *(p for p in (ROOT / "docs").rglob("*.md") if "reference" not in p.parts)]
    for folder in SOURCES:
        files += [p for p in (ROOT / folder).rglob("*.py") if "venv" not in p.relative_to(ROOT).parts]
    return sorted(files)


def _matches(version: str, pinned: str) -> bool:
    return pinned == version or pinned.startswith(version + ".")


def stale_quotes(text: str, where: str) -> list[str]:
    """Each quote in a text of a pinned component at a version that is not its pin, nor listed as history."""
    stale = []
    for number, line in enumerate(text.splitlines(), 1):
        for pattern, allowed in QUOTED.items():
            for found in re.finditer(pattern, line):
                if any(_matches(found.group(1), pinned) for pinned in allowed):
                    continue
                if any(quote == found.group(0) and words in line for quote, words in HISTORY):
                    continue
                stale.append(f"{where}:{number}: {found.group(0)!r}, pinned {' or '.join(allowed)}")
    return stale


def test_every_quoted_version_of_a_pinned_component_is_its_pin():
    stale = [q for path in _quoting_files() for q in stale_quotes(path.read_text(), str(path.relative_to(ROOT)))]
    assert stale == []


def test_a_quote_of_another_version_is_stale_and_history_is_not():
    text = f"Kueue 0.10.1 admits the job.\nKueue {pins.KUEUE.version} too.\nThey are deprecated since MLflow 2.9.0.\n"
    assert stale_quotes(text, "x.md") == [f"x.md:1: 'Kueue 0.10.1', pinned {pins.KUEUE.version}"]
    # Every pinned chart and image by its name, at any of its pins.
    text = f"kube-prometheus-stack 80.0.0 and aws-cli 2.0.1.\nkube-prometheus-stack {pins.KUBE_PROMETHEUS_STACK.version}.\n"
    assert [q.split(",")[0] for q in stale_quotes(text, "x.md")] == [
        "x.md:1: 'kube-prometheus-stack 80.0.0'",
        "x.md:1: 'aws-cli 2.0.1'",
    ]
