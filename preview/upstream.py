"""The upstream stage: every pin and what we render for it, held against facts read upstream.

`../shared/upstream-facts/` (or the folder `UPSTREAM_FACTS_DIR` names) holds, per chart, the
released versions and, per recent version, its appVersion, the values key paths its values.yaml
declares, the `.Values.` paths its templates read, and the free-form paths; for vLLM, the
released versions and every flag of `vllm serve` at a version. Its README defines the rule used
here: a values key we set is one the chart reads when its path, or a prefix of it that is a
free-form map or an opaque subchart, appears in valuesPaths or templateReads.

A finding (exit 1): a pin that is not a released version; a values key the chart does not read;
an image tag that differs from the chart's appVersion; a vLLM flag the pinned vLLM does not
have. A pin the facts do not cover is reported as unverified, with what is missing.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any, Iterator

from platform_config import pins
from platform_config.checks.models import vllm_release_version

from .render import chart_name
from .vllm_release import pinned_serve_flags

PROJECT_ROOT = Path(__file__).resolve().parent.parent
VERIFIED, UNVERIFIED, FAILED = "verified", "unverified", "failed"


def facts_dir() -> Path:
    """The facts folder: $UPSTREAM_FACTS_DIR, else the shared folder beside this checkout."""
    named = os.environ.get("UPSTREAM_FACTS_DIR")
    return Path(named) if named else PROJECT_ROOT.parent / "shared" / "upstream-facts"


# Maps the facts do not mark free-form although the chart passes them on whole: the facts' scan
# finds range/toYaml/tpl/toJson written before `.Values`, not a map piped through merge. Each
# entry is for one chart version, cited at its tag, and must be a path the chart reads (a test
# holds it to that); a version bump drops it until someone reads the new tag.
FREE_FORM_SUPPLEMENT: dict[tuple[str, str], dict[str, str]] = {
    ("aws-load-balancer-controller", "3.5.0"): {
        "nodeSelector": "kubernetes-sigs/aws-load-balancer-controller v3.5.0 helm/aws-load-balancer-controller/templates/"
        "deployment.yaml lines 264-266: `with .Values.nodeSelector` ... `toYaml .`",
        "serviceAccount.annotations": "kubernetes-sigs/aws-load-balancer-controller v3.5.0 helm/aws-load-balancer-controller/"
        "templates/serviceaccount.yaml lines 9-11: `with .Values.serviceAccount.annotations` ... `toYaml .`",
    },
    ("istiod", "1.30.3"): {
        "meshConfig": "istio/istio 1.30.3 manifests/charts/istio-control/istio-discovery/templates/configmap.yaml "
        "line 79: `mergeOverwrite $originalMesh .Values.meshConfig`, then `toYaml`",
    },
    ("cluster-autoscaler", "9.51.0"): {
        "rbac.serviceAccount.annotations": "kubernetes/autoscaler cluster-autoscaler-chart-9.51.0 charts/cluster-autoscaler/"
        "templates/serviceaccount.yaml lines 10-12: `with .Values.rbac.serviceAccount.annotations` `range $k, $v := .`",
    },
    ("kueue", "0.19.2"): {
        "controllerManager.nodeSelector": "kubernetes-sigs/kueue v0.19.2 charts/kueue/templates/manager/manager.yaml "
        "lines 117-119: `with .Values.controllerManager.nodeSelector` ... `toYaml .`",
    },
    ("gateway", "1.30.3"): {
        "service.annotations": "istio/istio 1.30.3 manifests/charts/gateway/templates/service.yaml line 15: "
        "`merge (deepCopy .Values.service.annotations) .Values.annotations | toYaml`",
        "nodeSelector": "istio/istio 1.30.3 manifests/charts/gateway/templates/deployment.yaml lines 122-124: "
        "`with .Values.nodeSelector` ... `toYaml .`",
    },
}


@dataclass(frozen=True)
class ChartFacts:
    app_version: str
    readable: frozenset[str]
    free_form: frozenset[str]
    # Subcharts from other repositories: the facts cannot see inside them.
    opaque_subcharts: frozenset[str]

    def reads(self, path: str) -> bool:
        """The facts README's rule, for one dotted key path we set."""
        if path in self.readable:
            return True
        parts = path.split(".")
        for end in range(1, len(parts)):
            prefix = ".".join(parts[:end])
            if prefix in self.opaque_subcharts:
                return True
            if prefix in self.free_form and prefix in self.readable:
                return True
        return False


class Facts:
    """Read-only view of the facts folder; every file is read at most once."""

    def __init__(self, root: Path):
        self.root = root

    @property
    def present(self) -> bool:
        return (self.root / "charts").is_dir()

    def released_charts(self, chart: str) -> list[str] | None:
        data = _read_json(self.root / "charts" / chart / "released.json")
        return None if data is None else [str(v).removeprefix("v") for v in data.get("released", [])]

    def chart(self, chart: str, version: str) -> ChartFacts | None:
        data = _read_json(self.root / "charts" / chart / f"{version}.json")
        if data is None:
            return None
        # Subcharts kept in the chart's own repository were read too (under their alias).
        local = set((data.get("localSubcharts") or {}).keys())
        return ChartFacts(
            app_version=str(data.get("appVersion") or ""),
            readable=frozenset(data.get("valuesPaths", [])) | frozenset(data.get("templateReads", [])),
            free_form=frozenset(data.get("freeForm", [])) | frozenset(FREE_FORM_SUPPLEMENT.get((chart, version), {})),
            opaque_subcharts=frozenset(data.get("subcharts", [])) - local,
        )

    def vllm_released(self) -> list[str] | None:
        data = _read_json(self.root / "vllm" / "released.json")
        return None if data is None else [str(v) for v in data.get("released", [])]

    def vllm_flags(self, version: str) -> frozenset[str] | None:
        return _read_flags(self.root / "vllm" / f"{version}-flags.txt")


@cache
def _read_flags(path: Path) -> frozenset[str] | None:
    if not path.is_file():
        return None
    return frozenset(line.strip() for line in path.read_text().splitlines() if line.strip())


@cache
def _read_json(path: Path) -> Any:
    if not path.is_file():
        return None
    return json.loads(path.read_text())


@dataclass
class PinResult:
    pin: str
    version: str
    status: str
    details: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"pin": self.pin, "version": self.version, "status": self.status, "details": self.details}


def value_paths(values: Any, prefix: str = "") -> Iterator[str]:
    """Dotted paths of the leaves we set (a map is walked; a list or scalar is a leaf)."""
    if isinstance(values, dict) and values:
        for key, value in values.items():
            yield from value_paths(value, f"{prefix}.{key}" if prefix else str(key))
    elif prefix:
        yield prefix


def check_chart_pin(facts: Facts, pin: pins.ChartPin) -> PinResult:
    result = PinResult(f"chart {pin.chart}", pin.version, VERIFIED)
    released = facts.released_charts(pin.chart)
    if released is None:
        result.status = UNVERIFIED
        result.details.append(f"no facts for chart {pin.chart} (charts/{pin.chart}/released.json)")
        return result
    if pin.release not in released:
        result.status = FAILED
        newer = [v for v in released if v.split(".")[:2] == pin.release.split(".")[:2]]
        result.details.append(
            f"{pin.version} is not a released version of {pin.chart} ({pin.source}); same minor: {', '.join(newer) or 'none'}"
        )
        return result
    chart = facts.chart(pin.chart, pin.release)
    if chart is None:
        result.status = UNVERIFIED
        result.details.append(
            f"released, but no facts for {pin.release} (charts/{pin.chart}/{pin.release}.json): values and appVersion unchecked"
        )
        return result
    if not chart.readable:
        result.status = UNVERIFIED
        result.details.append(
            f"the facts for {pin.release} are empty (no values paths, no appVersion): values and image unchecked"
        )
        return result
    if pin.image_tag is not None:
        if not chart.app_version:
            result.status = UNVERIFIED
            result.details.append(f"the facts give no appVersion for {pin.release}: image {pin.image_tag} unchecked")
        elif pin.image_tag.removeprefix("v") != chart.app_version.removeprefix("v"):
            result.status = FAILED
            result.details.append(f"image tag {pin.image_tag} differs from the chart's appVersion {chart.app_version}")
    return result


def check_release_values(facts: Facts, release: dict[str, Any]) -> PinResult:
    """The values we render for one Helm release, against what its chart reads."""
    name, version = chart_name(str(release.get("chart"))), str(release.get("version"))
    result = PinResult(f"values of {release.get('namespace')}/{release.get('name')} ({name})", version, VERIFIED)
    released = facts.released_charts(name)
    pinned = any(pin.chart == name and pin.version == version for pin in pins.CHARTS)
    if not pinned and released is not None and version.removeprefix("v") not in released:
        # (A pinned version's release is the pin's own row.)
        result.status = FAILED
        result.details.append(f"{name} {version} is not a released version")
        return result
    chart = facts.chart(name, version.removeprefix("v"))
    if chart is None or not chart.readable:
        result.status = UNVERIFIED
        result.details.append(f"no usable facts for {name} {version}: values keys unchecked")
        return result
    unread = [path for path in value_paths(release.get("values") or {}) if not chart.reads(path)]
    if unread:
        result.status = FAILED
        result.details.extend(f"values key {path} is not read by {name} {version}" for path in unread)
    return result


VLLM_REPOSITORY = pins.VLLM.repository


def vllm_version_of(image: str) -> str | None:
    """`vllm/vllm-openai:v0.33.0` -> `0.33.0`, as is `vllm/vllm-openai:v0.33.0@sha256:<hex>` (the image lock's form:
    the runtime pulls the digest, the tag says which release it is) or a mirror's copy; None for another image or a
    digest-only pin (platform_config/checks/models.py vllm_release_version, the rule production's images are held to)."""
    return vllm_release_version(image)


def flags_of(args: list[str]) -> list[str]:
    """The `--flag` words of a command line (`--flag=value` counts as `--flag`)."""
    return [arg.split("=", 1)[0] for arg in args if isinstance(arg, str) and arg.startswith("--")]


def check_vllm_container(facts: Facts, owner: str, container: dict[str, Any], production: bool = False) -> PinResult:
    """A vLLM container's release and flags against upstream. In production a server whose release cannot be told
    (an image of one's own, or a digest without its tag) fails: its flags would reach a cluster unchecked."""
    image = str(container.get("image", ""))
    version = vllm_version_of(image)
    result = PinResult(f"vllm flags of {owner}", version or image, VERIFIED)
    if version is None:
        result.status = FAILED if production else UNVERIFIED
        result.details.append(
            f"image {image} is not a {VLLM_REPOSITORY} release tag: flags unchecked"
            + (" (production runs released vLLM images only, tagged v<version>, digest or not)" if production else "")
        )
        return result
    released = facts.vllm_released()
    if released is not None and version not in released:
        result.status = FAILED
        result.details.append(f"vLLM {version} is not a released version")
        return result
    known = vllm_serve_flags(facts, version)
    if known is None:
        result.status = UNVERIFIED
        result.details.append(
            f"no flag list for vLLM {version} (vllm/{version}-flags.txt) and no source release of it in "
            f"build/upstream-sources (`make upstream-sources`)"
        )
        return result
    flags, where = known
    unknown = sorted({flag for flag in flags_of(list(container.get("args") or [])) if flag not in flags})
    if unknown:
        result.status = FAILED
        result.details.extend(f"{flag} is not a flag of vllm serve {version} ({where})" for flag in unknown)
    return result


def vllm_serve_flags(facts: Facts, version: str) -> tuple[frozenset[str], str] | None:
    """The flags `vllm serve` takes at `version` and where they were read: the facts' list, else (for the pinned
    version) the pinned source release's own parsers (preview/vllm_release.py serve_flags); None when neither is
    here."""
    listed = facts.vllm_flags(version)
    if listed is not None:
        return listed, f"vllm/{version}-flags.txt"
    parsed = _pinned_release_flags() if version == pins.VLLM_VERSION else None
    if parsed is None:
        return None
    return parsed, pins.VLLM_SOURCE.filename


@cache
def _pinned_release_flags() -> frozenset[str] | None:
    """The pinned release's flags, read once per process (the stage asks for every vLLM container)."""
    return pinned_serve_flags(pins.VLLM_SOURCE)


def check_image_pin(facts: Facts, pin: pins.ImagePin) -> PinResult:
    result = PinResult(f"image {pin.repository}", pin.tag, VERIFIED)
    if pin.repository == VLLM_REPOSITORY:
        released = facts.vllm_released()
        if released is None:
            result.status = UNVERIFIED
            result.details.append("no facts for vLLM releases (vllm/released.json)")
        elif pin.tag.removeprefix("v") not in released:
            result.status = FAILED
            result.details.append(f"{pin.tag} is not a released vLLM version")
        return result
    result.status = UNVERIFIED
    result.details.append(f"no upstream facts for {pin.repository}: check the tag at {pin.source}")
    return result


def pod_spec_of(obj: dict[str, Any]) -> dict[str, Any] | None:
    """The pod spec of a workload object we declare (Deployment, StatefulSet, Knative Service)."""
    spec = obj.get("spec") or {}
    template = spec.get("template") or {}
    if obj.get("kind") in ("Deployment", "StatefulSet", "DaemonSet", "Job"):
        return template.get("spec")
    if obj.get("kind") == "Service" and str(obj.get("apiVersion", "")).startswith("serving.knative.dev/"):
        return template.get("spec")
    return None


def check_knative_serving_pin(facts: Facts) -> PinResult:
    """Knative Serving's version is what the pinned operator installs (KnativeServing
    spec.version): the operator's own minor, which its facts' release verifies."""
    result = PinResult("knative serving (through the operator)", pins.KNATIVE_SERVING_VERSION, VERIFIED)
    operator = pins.KNATIVE_OPERATOR.release
    if ".".join(operator.split(".")[:2]) != pins.KNATIVE_SERVING_VERSION:
        result.status = FAILED
        result.details.append(
            f"the operator {operator} installs Serving {operator.rsplit('.', 1)[0]}, not {pins.KNATIVE_SERVING_VERSION}"
        )
    elif check_chart_pin(facts, pins.KNATIVE_OPERATOR).status != VERIFIED:
        result.status = UNVERIFIED
        result.details.append(f"the operator chart {pins.KNATIVE_OPERATOR.version} is not verified")
    return result


def check_upstream(
    objects: list[dict[str, Any]], releases: list[dict[str, Any]], root: Path | None = None, *, production: bool = False
) -> list[PinResult]:
    """Every pin, release's values and vLLM container against the facts (`production`: the stack's environment)."""
    facts = Facts(root or facts_dir())
    results = [check_chart_pin(facts, pin) for pin in pins.CHARTS]
    results.append(check_knative_serving_pin(facts))
    results += [check_image_pin(facts, pin) for pin in pins.IMAGES]
    results += [check_release_values(facts, release) for release in releases]
    for obj in objects:
        pod = pod_spec_of(obj)
        for container in (pod or {}).get("containers", []):
            # `vllm serve ...` (model servers), or a batch runner whose arguments are the
            # `vllm run-batch ...` command it runs per chunk (batch jobs; run-batch takes the
            # engine flags of serve, vllm/entrypoints/openai/run_batch.py make_arg_parser).
            command = list(container.get("command") or [])[:2]
            if command == ["vllm", "serve"] or list(container.get("args") or [])[:2] == ["vllm", "run-batch"]:
                metadata = obj.get("metadata") or {}
                knative = str(obj.get("apiVersion", "")).startswith("serving.knative.dev/")
                owner = f"{'KnativeService' if knative else obj.get('kind')} {metadata.get('namespace')}/{metadata.get('name')}"
                results.append(check_vllm_container(facts, owner, container, production))
    return results
