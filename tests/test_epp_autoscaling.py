"""Scaling on the endpoint picker's flow-control queue: the prometheus-adapter rule that serves it
as a custom metric of the InferencePool, the HPA metric entry that reads it, and the component
that installs the CRDs the adapter and the EPP need.

The rule's metricsQuery is rendered the way prometheus-adapter v0.12.0 renders it for one object
(pkg/naming/metrics_query.go Build) and evaluated against synthetic series by a small evaluator
of the PromQL subset it uses. A real Prometheus comes later."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from components.specs.metrics import (
    EPP_POOL_LABEL,
    EPP_QUEUE_METRIC,
    EPP_QUEUE_SERIES,
    EPP_SATURATION_SERIES,
    adapter_rules,
    adapter_values,
    epp_queue_metric,
    epp_queue_rule,
)

from . import helpers  # noqa: F401 - puts the project on sys.path, sets the preview's environment

Labels = dict[str, str]
Vector = list[tuple[Labels, float]]


# --- the rule's shape ---------------------------------------------------------------------------


def test_rule_maps_the_pool_label_to_the_inferencepool_crd_and_namespace_to_namespace():
    rule = epp_queue_rule()
    assert rule["resources"] == {
        "overrides": {
            "namespace": {"resource": "namespace"},
            "inference_pool": {"group": "inference.networking.k8s.io", "resource": "inferencepools"},
        }
    }
    # prometheus-adapter v0.12.0 pkg/config/config.go: ResourceMapping{template, overrides,
    # namespaced}; an override is a GroupResource{group (optional), resource (required)}.
    assert set(rule) == {"seriesQuery", "resources", "name", "metricsQuery"}
    for override in rule["resources"]["overrides"].values():
        assert set(override) <= {"group", "resource"} and override["resource"]
    assert rule["name"] == {"matches": f"^{EPP_SATURATION_SERIES}$", "as": EPP_QUEUE_METRIC}
    # Discovered through a series every live EPP exports, labelled with its pool and namespace.
    assert rule["seriesQuery"] == '{__name__="llm_d_epp_flow_control_pool_saturation",namespace!="",inference_pool!=""}'
    # The Go template uses only the fields the adapter provides (docs/config.md "Querying").
    actions = re.findall(r"<<(.*?)>>", rule["metricsQuery"])
    assert set(actions) == {".Series", ".LabelMatchers", ".GroupBy"}
    assert EPP_QUEUE_SERIES in rule["metricsQuery"]


def test_the_rule_is_served_only_when_the_crds_come_first():
    names = [r["name"]["as"] for r in adapter_rules()["custom"]]
    assert EPP_QUEUE_METRIC not in names
    with_epp = adapter_rules(epp_queue=True)["custom"]
    assert [r for r in with_epp if r["name"]["as"] == EPP_QUEUE_METRIC] == [epp_queue_rule()]
    assert adapter_values("http://prometheus:9090", epp_queue=True)["rules"]["custom"] == with_epp
    # The vLLM and GPU rules are unchanged by it.
    assert with_epp[:-1] == adapter_rules()["custom"]


# --- the HPA metric entry -------------------------------------------------------------------------


def test_metric_entry_names_the_pool_object_with_a_per_replica_target():
    assert epp_queue_metric("llama-8b-v1", 4) == {
        "type": "Object",
        "object": {
            "metric": {"name": "epp_flow_control_queue_size"},
            "describedObject": {"apiVersion": "inference.networking.k8s.io/v1", "kind": "InferencePool", "name": "llama-8b-v1"},
            "target": {"type": "AverageValue", "averageValue": "4"},
        },
    }


@pytest.mark.parametrize(("pool", "average", "named"), [("", 4, "pool_name"), ("p", 0, "average_per_replica")])
def test_metric_entry_rejects_a_missing_pool_or_a_target_below_one(pool, average, named):
    with pytest.raises(ValueError, match=named):
        epp_queue_metric(pool, average)


# --- the metricsQuery against synthetic series ------------------------------------------------------


def render(template: str, series: str, namespace: str, pool: str) -> str:
    """prometheus-adapter v0.12.0 Build for one named object of a namespaced resource:
    LabelMatchers = namespace then the resource label (`%s=%q`), GroupBy = the resource label."""
    fields = {
        ".Series": series,
        ".LabelMatchers": f'namespace="{namespace}",{EPP_POOL_LABEL}="{pool}"',
        ".GroupBy": EPP_POOL_LABEL,
    }
    return re.sub(r"<<(.*?)>>", lambda m: fields[m.group(1)], template)


class PromQL:
    """Instant-query evaluator for the subset the rule uses: selectors with = and != matchers,
    sum/max ... by (...), clamp_min, scalar * vector, `or`, parentheses and numbers. Anything
    else is a syntax error, so the rule cannot drift outside what is checked here."""

    TOKEN = re.compile(r'\s*(?:(?P<num>\d+(?:\.\d+)?)|(?P<str>"[^"]*")|(?P<name>[A-Za-z_:][A-Za-z0-9_:]*)|(?P<op>!=|[=(){},*]))')

    def __init__(self, samples: list[tuple[Labels, float]]):
        self.samples = samples

    def query(self, text: str) -> Vector:
        self.tokens = self._tokenize(text)
        self.at = 0
        result = self._or()
        assert self.at == len(self.tokens), f"trailing input: {self.tokens[self.at :]}"
        assert isinstance(result, list), "the query must return a vector"
        return result

    def _tokenize(self, text: str) -> list[str]:
        tokens, at = [], 0
        while at < len(text.rstrip()):
            match = self.TOKEN.match(text, at)
            assert match, f"unsupported syntax at {text[at:]!r}"
            tokens.append(match.group(match.lastgroup or ""))
            at = match.end()
        return tokens

    def _peek(self) -> str | None:
        return self.tokens[self.at] if self.at < len(self.tokens) else None

    def _take(self, expected: str | None = None) -> str:
        token = self.tokens[self.at]
        assert expected is None or token == expected, f"expected {expected!r}, got {token!r}"
        self.at += 1
        return token

    def _or(self) -> Any:
        left = self._mul()
        while self._peek() == "or":
            self._take()
            right = self._mul()
            seen = {_key(labels) for labels, _ in left}
            left = left + [(labels, value) for labels, value in right if _key(labels) not in seen]
        return left

    def _mul(self) -> Any:
        left = self._atom()
        while self._peek() == "*":
            self._take()
            right = self._atom()
            assert isinstance(left, float) and isinstance(right, list), "only scalar * vector is supported"
            left = [(_drop_name(labels), left * value) for labels, value in right]
        return left

    def _atom(self) -> Any:
        token = self._take()
        if re.fullmatch(r"\d+(?:\.\d+)?", token):
            return float(token)
        if token == "(":
            inner = self._or()
            self._take(")")
            return inner
        if token in ("sum", "max"):
            self._take("(")
            inner = self._or()
            self._take(")")
            self._take("by")
            self._take("(")
            by = [self._take()]
            while self._peek() == ",":
                self._take()
                by.append(self._take())
            self._take(")")
            groups: dict[tuple, list[float]] = {}
            for labels, value in inner:
                groups.setdefault(tuple((name, labels.get(name, "")) for name in by), []).append(value)
            combine = sum if token == "sum" else max
            return [({k: v for k, v in key if v}, float(combine(values))) for key, values in groups.items()]
        if token == "clamp_min":
            self._take("(")
            inner = self._or()
            self._take(",")
            floor = float(self._take())
            self._take(")")
            return [(_drop_name(labels), max(value, floor)) for labels, value in inner]
        return self._selector(token)

    def _selector(self, name: str) -> Vector:
        self._take("{")
        matchers = []
        while True:
            label, op, value = self._take(), self._take(), self._take()[1:-1]
            assert op in ("=", "!=")
            matchers.append((label, op, value))
            if self._take() == "}":
                break
        return [
            (labels, value)
            for labels, value in self.samples
            if labels["__name__"] == name and all((labels.get(lbl, "") == val) == (op == "=") for lbl, op, val in matchers)
        ]


def _key(labels: Labels) -> tuple:
    return tuple(sorted(_drop_name(labels).items()))


def _drop_name(labels: Labels) -> Labels:
    return {k: v for k, v in labels.items() if k != "__name__"}


def queued(namespace: str, pool: str, value: float, pod: str = "epp-0", priority: str = "0", fairness: str = "default") -> tuple:
    labels = {
        "__name__": EPP_QUEUE_SERIES,
        "namespace": namespace,
        "pod": pod,
        "inference_pool": pool,
        "priority": priority,
        "fairness_id": fairness,
        "model_name": "llama",
        "target_model_name": "llama",
    }
    return labels, value


def saturation(namespace: str, pool: str, pod: str = "epp-0", value: float = 0.4) -> tuple:
    return {"__name__": EPP_SATURATION_SERIES, "namespace": namespace, "pod": pod, "inference_pool": pool}, value


def value_for(samples: list[tuple], namespace: str, pool: str) -> Vector:
    rule = epp_queue_rule()
    query = render(rule["metricsQuery"], EPP_SATURATION_SERIES, namespace, pool)
    return PromQL(samples).query(query)


def test_query_sums_the_pools_queue_over_bands_flows_and_epp_replicas():
    samples = [
        saturation("team-a", "llama-8b-v1"),
        saturation("team-a", "llama-8b-v1", pod="epp-1"),
        queued("team-a", "llama-8b-v1", 3, priority="10", fairness="alice"),
        queued("team-a", "llama-8b-v1", 2, priority="0", fairness="bob"),
        queued("team-a", "llama-8b-v1", 4, pod="epp-1", priority="-1"),
        # Another version's pool, and a pool of the same name in another tenant: not counted.
        saturation("team-a", "llama-8b-v2"),
        queued("team-a", "llama-8b-v2", 50),
        saturation("team-b", "llama-8b-v1"),
        queued("team-b", "llama-8b-v1", 70),
    ]
    # One value, labelled with the pool: how the adapter matches it back to the object
    # (pkg/custom-provider/series_registry.go MatchValuesToNames reads the resource label).
    assert value_for(samples, "team-a", "llama-8b-v1") == [({"inference_pool": "llama-8b-v1"}, 9.0)]


def test_an_idle_pool_whose_flows_were_collected_reads_zero_not_missing():
    samples = [saturation("team-a", "llama-8b-v1"), queued("team-a", "other", 5)]
    assert value_for(samples, "team-a", "llama-8b-v1") == [({"inference_pool": "llama-8b-v1"}, 0.0)]


def test_a_gauge_left_negative_by_flow_collection_reads_zero():
    samples = [saturation("team-a", "p"), queued("team-a", "p", -1)]
    assert value_for(samples, "team-a", "p") == [({"inference_pool": "p"}, 0.0)]


def test_no_value_without_a_live_epp_so_the_hpa_does_not_scale_down_on_a_missing_signal():
    assert value_for([queued("team-b", "p", 3), saturation("team-b", "p")], "team-a", "p") == []


# --- the CRDs component under the preview's mock engine ---------------------------------------------

PROGRAM = """
import pulumi
from components.inference_extension import InferenceExtensionCrds
from components.prometheus_adapter import PrometheusAdapter, PrometheusAdapterArgs

crds = InferenceExtensionCrds("inference-extension")
PrometheusAdapter(
    "prometheus-adapter",
    PrometheusAdapterArgs(prometheus_url="http://prometheus.monitoring:9090", inference_extension_crds=crds),
)
"""


@pytest.fixture(scope="module")
def evaluated(tmp_path_factory) -> Any:
    from preview.engine import evaluate

    from .helpers import stack_config_from_raw

    program = Path(tmp_path_factory.mktemp("epp-program"))
    (program / "__main__.py").write_text(PROGRAM)
    return evaluate(program, stack_config_from_raw({}))


def test_crds_come_from_the_pinned_release_manifests(evaluated):
    from components.inference_extension import INFERENCE_POOL_CRDS_URL, LLM_D_CRDS_URL

    component = [r for r in evaluated.resources if r.type == "inference-platform:inference-extension:InferenceExtensionCrds"]
    assert len(component) == 1
    files = {r.name: r for r in evaluated.resources if r.type == "kubernetes:yaml/v2:ConfigFile"}
    assert {name: r.inputs["file"] for name, r in files.items()} == {
        "inference-extension-inference-pool": INFERENCE_POOL_CRDS_URL,
        "inference-extension-llm-d": LLM_D_CRDS_URL,
    }
    assert all(r.parent == component[0].urn and not r.custom for r in files.values())
    assert INFERENCE_POOL_CRDS_URL.endswith("/gateway-api-inference-extension/releases/download/v1.5.0/v1-manifests.yaml")
    assert LLM_D_CRDS_URL.endswith("/llm-d/llm-d-router/releases/download/v0.10.0/manifests.yaml")


def test_the_adapter_with_the_epp_rule_waits_for_the_crds(evaluated):
    (release,) = [r for r in evaluated.resources if r.type == "kubernetes:helm.sh/v3:Release"]
    (component,) = [r for r in evaluated.resources if r.type.endswith(":InferenceExtensionCrds")]
    assert epp_queue_rule() in release.inputs["values"]["rules"]["custom"]
    crd_urns = {component.urn} | {r.urn for r in evaluated.resources if r.parent == component.urn}
    assert crd_urns & set(release.dependencies)
    # The preview renders no Kubernetes objects for the ConfigFiles (they are fetched at `up`).
    from preview.render import manifests

    assert not [m for m in manifests(evaluated.resources) if m["kind"] == "CustomResourceDefinition"]
