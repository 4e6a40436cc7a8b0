"""The pack's rules that match selectors against pods, or prefixes against prefixes, cost in proportion to the stack,
not to its square, when many models share one namespace: counted in matches made, not timed (a timed test would be
the machine's, not the rule's), with the verdicts a pairwise comparison gives."""

from __future__ import annotations

import itertools
from types import SimpleNamespace
from typing import Any

import pytest

from policies.inference_governance import endpoint_pickers, kube, latency, tenant_egress, tenant_s3
from policies.inference_governance.kube import DEPLOYMENT, GPU_RESOURCE, INFERENCE_POOL, SERVICE, VIRTUAL_SERVICE
from policies.inference_governance.label_index import LabelIndex, SelectorIndex
from policies.inference_governance.s3_locations import s3_within
from policies.inference_governance.tenant_egress import NETWORK_POLICY

NAMESPACE = "tenant-a"


def _resource(kind: str, name: str, spec: dict[str, Any]) -> Any:
    props = {"metadata": {"name": name, "namespace": NAMESPACE}, "spec": spec}
    return SimpleNamespace(resource_type=kind, props=props, urn=f"urn:{kind}:{name}")


def _model(index: int) -> list[Any]:
    """A model's GPU Deployment, its Service and a VirtualService sending it every tier, in the shared namespace."""
    labels = {"app": f"model-{index}", "part-of": "platform"}
    container = {"name": "vllm", "image": "vllm", "resources": {"limits": {GPU_RESOURCE: 1}}}
    template = {"metadata": {"labels": labels}, "spec": {"containers": [container]}}
    route = {"route": [{"destination": {"host": f"model-{index}"}}]}
    return [
        _resource(DEPLOYMENT, f"model-{index}", {"template": template}),
        _resource(SERVICE, f"model-{index}", {"selector": {"app": f"model-{index}"}}),
        _resource(VIRTUAL_SERVICE, f"model-{index}", {"http": [route]}),
    ]


def _args(models: int) -> Any:
    resources = [r for index in range(models) for r in _model(index)]
    return SimpleNamespace(resources=resources, get_config=lambda: {})


def _counting(monkeypatch: pytest.MonkeyPatch, module: Any, name: str) -> list[int]:
    calls = [0]
    original = getattr(module, name)

    def counted(*args: Any) -> Any:
        calls[0] += 1
        return original(*args)

    monkeypatch.setattr(module, name, counted)
    return calls


@pytest.mark.parametrize("models", [50, 200])
def test_latency_sensitive_checks_each_route_against_the_pods_it_may_reach(monkeypatch, models):
    calls = _counting(monkeypatch, latency, "labels_match")
    args = _args(models)
    workloads = latency.gpu_workloads(args)
    why = latency.latency_sensitive(args)
    # Every model is reached by its own route, and only by it.
    assert why == {w.resource.urn: f"VirtualService {NAMESPACE}/{w.name} sends it premium requests" for w in workloads}
    assert calls[0] == models


def test_a_pool_is_checked_against_the_pickers_it_may_select(monkeypatch):
    calls = _counting(monkeypatch, endpoint_pickers, "labels_match")
    pickers: list[Any] = [
        SimpleNamespace(namespace=NAMESPACE, pod_labels={"app": f"epp-{i}", "part-of": "platform"}) for i in range(200)
    ]
    services = [_resource(SERVICE, f"epp-{i}", {"selector": {"app": f"epp-{i}", "part-of": "platform"}}) for i in range(200)]
    pools = [_resource(INFERENCE_POOL, f"pool-{i}", {"endpointPickerRef": {"name": f"epp-{i}"}}) for i in range(200)]
    found: list[str] = []
    args = SimpleNamespace(resources=services + pools, get_config=lambda: {})
    endpoint_pickers._pools_name_endpoint_pickers(args, pickers, lambda message, urn=None: found.append(message))
    assert found == [] and calls[0] == 200
    # A Service selecting no picker's pods is still found.
    services[7].props["spec"]["selector"] = {"app": "nothing"}
    endpoint_pickers._pools_name_endpoint_pickers(args, pickers, lambda message, urn=None: found.append(message))
    assert len(found) == 1 and "pool-7" in found[0]


def test_the_indexes_give_every_match_a_pairwise_scan_gives():
    labels = [{"app": a, "tier": t} for a in ("x", "y", "z") for t in ("gold", "free")] + [{"app": 3}, {}]  # type: ignore[dict-item]
    items = [SimpleNamespace(ns=ns, labels=lab) for ns in ("a", "b") for lab in labels]
    index = LabelIndex(items, lambda i: i.ns, lambda i: i.labels)
    selectors: list[dict[str, Any]] = [{"app": "x"}, {"tier": "free"}, {"app": "y", "tier": "gold"}, {}, {"app": 3}]
    selectors.append({"other": "v"})
    for ns, selector in itertools.product(("a", "b", "c"), selectors):
        matching = [i for i in items if i.ns == ns and all(i.labels.get(k) == v for k, v in selector.items())]
        assert [i for i in index.candidates(ns, selector) if i in matching] == matching
    by_selector: SelectorIndex[dict[str, Any]] = SelectorIndex([(ns, s) for ns in ("a", "b") for s in selectors], lambda s: s)
    for item in items:
        wanted = [sel for ns, sel in by_selector._order if ns == item.ns and all(item.labels.get(k) == v for k, v in sel.items())]
        assert [sel for sel in by_selector.candidates(item.ns, item.labels) if sel in wanted] == wanted


def test_overlapping_prefixes_are_the_pairs_a_pairwise_scan_finds():
    prefixes = ["s3://a/x", "s3://a/x/y", "s3://a/xy", "s3://b/x", "s3://a", "s3://a/x/y/z", "s3://a/x"]
    owners = [(f"tenant-{i % 3}", prefix) for i, prefix in enumerate(prefixes)]
    pairwise = [
        (i, j)
        for i, j in itertools.combinations(range(len(owners)), 2)
        if owners[i][0] != owners[j][0] and (s3_within(owners[i][1], owners[j][1]) or s3_within(owners[j][1], owners[i][1]))
    ]
    assert tenant_s3._overlapping(owners) == pairwise and len(pairwise) > 3


def _picker(index: int, cidr: str) -> list[Any]:
    """An endpoint picker's Deployment in the shared namespace and the egress NetworkPolicy that selects it alone."""
    labels = {kube.COMPONENT_LABEL: kube.ENDPOINT_PICKER, "app": f"epp-{index}"}
    image = f"{sorted(tenant_egress.PICKER_REPOSITORIES)[0]}:v1"
    template = {"metadata": {"labels": labels}, "spec": {"containers": [{"name": "epp", "image": image}]}}
    egress: dict[str, Any] = {"podSelector": {"matchLabels": {"app": f"epp-{index}"}}, "policyTypes": ["Egress"]}
    egress["egress"] = [{"to": [{"ipBlock": {"cidr": cidr}}]}]
    return [_resource(DEPLOYMENT, f"epp-{index}", {"template": template}), _resource(NETWORK_POLICY, f"epp-{index}", egress)]


@pytest.mark.parametrize("pickers", [50, 200])
def test_each_endpoint_picker_is_checked_against_the_network_policies_that_may_select_it(monkeypatch, pickers):
    calls = _counting(monkeypatch, tenant_egress, "selector_matches")
    namespace = SimpleNamespace(
        resource_type=kube.NAMESPACE,
        props={"metadata": {"name": NAMESPACE, "labels": {kube.TENANT_LABEL: "a"}}},
        urn="urn:namespace",
    )
    # One picker's policy lets it reach a public address: the only violation.
    resources = [namespace, *(r for i in range(pickers) for r in _picker(i, "8.8.8.8/32" if i == 7 else "10.0.0.0/8"))]
    reported: list[tuple[str, str]] = []
    args = SimpleNamespace(resources=resources, get_config=lambda: {})
    tenant_egress.tenant_egress_by_host(args, lambda message, urn=None: reported.append((message, urn)))
    assert [urn for message, urn in reported if "endpoint picker" in message] == [f"urn:{NETWORK_POLICY}:epp-7"]
    assert calls[0] == pickers
