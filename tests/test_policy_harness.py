"""The policy harness (tests/policy_harness.py) is faithful: on every committed stack and on stacks changed to break
many rules at once, to hold unknown values and to run under a policy config, it gives the verdicts the pack gives over
the analyzer protocol, running as its own process: the same diagnostics, in the same order, per resource and for the
stack. The per-rule tests of test_policies.py and test_policy_bypasses.py rely on this."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import pytest
from google.protobuf import json_format

from preview.engine import RecordedResource
from preview.performance import preview_policy_config
from preview.policy_runner import UNKNOWN, Diagnostic, PolicyPack
from preview.stack_config import load_project, load_stack_config

from .helpers import PROJECT, ROOT, STACKS, Evaluated, prod_with_labeller_server, raw_stack
from .policy_harness import PolicyHarness
from .test_policy_bypasses import POLICY_CONFIG
from .test_policy_decoding import _careless

# The policy config the per-rule tests run under, and levels and a floor moved too.
CONFIGURED = {
    **POLICY_CONFIG,
    "inference-graceful-drain": {"minTerminationGracePeriodSeconds": 600},
    "hpa-behavior": "advisory",
    "no-secret-args": "disabled",
}


def _running(stack: str) -> PolicyPack:
    config = load_stack_config(load_project(ROOT), stack)
    running = PolicyPack(ROOT / "policies", config.values, PROJECT, stack).connect()
    running.handshake(ROOT)
    running.configure_stack(PROJECT, stack, config.values, config.secret_keys)
    running.configure(running.info(), preview_policy_config({}))
    return running


@pytest.fixture(scope="module")
def packs() -> Iterator[dict[str, PolicyPack]]:
    running = {stack: _running(stack) for stack in STACKS}
    yield running
    for pack in running.values():
        pack.close()


def _below_the_production_floors(records: list[RecordedResource]) -> list[RecordedResource]:
    """_careless, and every autoscaler and Deployment at one replica, every Knative service without its scale-down
    delay: what only a stack the pack's config calls production is refused for."""
    changed = _careless(records)
    for record in changed:
        for properties in {id(p): p for p in (record.inputs, record.outputs)}.values():
            spec = properties.get("spec") or {}
            if record.type == "kubernetes:autoscaling/v2:HorizontalPodAutoscaler":
                spec["minReplicas"] = 1
            if record.type == "kubernetes:apps/v1:Deployment" and "replicas" in spec:
                spec["replicas"] = 1
            if record.type == "kubernetes:serving.knative.dev/v1:Service":
                spec["template"]["metadata"]["annotations"].pop("autoscaling.knative.dev/scale-down-delay", None)
    return changed


def _unknowns(records: list[RecordedResource]) -> list[RecordedResource]:
    """Values the engine cannot know during a preview where rules read them: every container's image, and each
    PodDisruptionBudget's maxUnavailable."""
    changed = copy.deepcopy(records)
    for record in changed:
        for properties in (record.inputs, record.outputs):
            if record.type == "kubernetes:policy/v1:PodDisruptionBudget" and "maxUnavailable" in properties["spec"]:
                properties["spec"]["maxUnavailable"] = UNKNOWN
            template = (properties.get("spec") or {}).get("template")
            if isinstance(template, dict) and "spec" in template:
                for container in template["spec"].get("containers", []):
                    container["image"] = UNKNOWN
    return changed


def _verdicts(analyzer: Any, records: list[RecordedResource]) -> Iterator[tuple[str, str, str, str, str, str]]:
    """Every diagnostic, in the order given: each custom resource analyzed with its provider, then the stack (without
    providers, as the engine sends it), then the stack with them (as a test may send it)."""

    def row(kind: str, d: Diagnostic) -> tuple[str, str, str, str, str, str]:
        return (kind, d.policy, d.level, d.urn, d.message, d.description)

    providers = {r.urn: r for r in records if r.type.startswith("pulumi:providers:")}
    for record in records:
        if record.custom and not record.type.startswith("pulumi:providers:"):
            provider = providers.get((record.provider or "").rsplit("::", 1)[0])
            yield from (row("resource", d) for d in analyzer.analyze(record, provider))
    yield from (row("stack", d) for d in analyzer.analyze_stack(r for r in records if r.urn not in providers))
    yield from (row("stack+providers", d) for d in analyzer.analyze_stack(records))


def test_the_harness_describes_the_pack_as_the_pack_does(packs):
    harness = PolicyHarness("prod")
    assert json_format.MessageToDict(harness.info()) == json_format.MessageToDict(packs["prod"].info())
    overrides = preview_policy_config(CONFIGURED)
    assert harness.configure(harness.info(), overrides) == packs["prod"].configure(packs["prod"].info(), overrides)
    packs["prod"].configure(packs["prod"].info(), preview_policy_config({}))


@pytest.mark.parametrize("stack", STACKS)
def test_the_harness_gives_the_packs_verdicts_on_the_committed_stacks(packs, stack):
    records = Evaluated(raw_stack(stack), shared=True).records
    found = list(_verdicts(PolicyHarness(stack), records))
    assert found == list(_verdicts(packs[stack], records))


@pytest.mark.parametrize("change", ["labeller", "below-the-floors", "unknowns", "careless-configured"])
def test_the_harness_gives_the_packs_verdicts_on_changed_stacks(packs, change):
    records = Evaluated(prod_with_labeller_server(), shared=True).records
    changes = {"below-the-floors": _below_the_production_floors, "careless-configured": _careless, "unknowns": _unknowns}
    records = changes.get(change, list)(records)
    overrides = CONFIGURED if change.endswith("-configured") else {}
    pack = packs["prod"]
    pack.configure(pack.info(), preview_policy_config(overrides))
    try:
        found = list(_verdicts(PolicyHarness("prod", overrides), records))
        assert found == list(_verdicts(pack, records))
    finally:
        pack.configure(pack.info(), preview_policy_config({}))
    # No comparison here could pass for want of verdicts: the changed stacks break many rules at once (production's
    # floors among them), and the unknown values stop resource and stack policies alike.
    if change in ("below-the-floors", "careless-configured"):
        assert len({policy for _, policy, *_ in found}) >= 5, found
    if change == "below-the-floors":
        production = {"hpa-behavior", "knative-autoscaling", "endpoint-picker-availability"}
        assert production <= {policy for _, policy, *_ in found}, found
    if change == "unknowns":
        unknown = {(kind, policy) for kind, policy, _, _, message, _ in found if message.startswith("can't run policy")}
        assert ("resource", "pinned-images") in unknown and ("stack", "inference-disruption-budget") in unknown, found
