"""What the policy tests share (tests/test_policies.py, test_policy_*.py): their module fixtures (prod's evaluation
they change, the pack's policies called in this process as the analyzer calls them), finding and editing prod's
records, the analyzer's verdicts as {policy: level}, and the policy config the bypass tests run under."""

from __future__ import annotations

import copy
from typing import Any, Callable

import pytest

from preview.engine import RecordedResource
from preview.policy_runner import PolicyPack

from .helpers import Evaluated, prod_with_labeller_server, split_module_value
from .policy_harness import PolicyHarness

# The policy tests' module fixtures, which each of their modules binds at its top level (`baseline = policy_helpers.baseline`)
# for pytest to find.


@pytest.fixture(scope="module")
def baseline() -> Evaluated:
    """prod with the labeller's server under the mock engine: built once per test process for every policy test module
    (read it, never change it: find and stack_with hand out copies)."""
    return split_module_value("tests/policy_helpers.py baseline", lambda: Evaluated(prod_with_labeller_server(), shared=True))


@pytest.fixture(scope="module")
def harness() -> PolicyHarness:
    """The pack's policies called directly, configured as tests/test_policies.py's pack is."""
    return PolicyHarness("prod")


@pytest.fixture(scope="module")
def configured_harness() -> PolicyHarness:
    """The same policies under POLICY_CONFIG: each policy config the test_policy_bypasses*.py modules exercise, set
    away from its default."""
    return PolicyHarness("prod", POLICY_CONFIG)


def find(baseline: Evaluated, type_: str, name: str) -> RecordedResource:
    (record,) = [r for r in baseline.records if r.type == type_ and r.name == name]
    return copy.deepcopy(record)


def policies_hit(diagnostics) -> dict[str, str]:
    return {d.policy: d.level for d in diagnostics}


def analyze(analyzer: PolicyPack | PolicyHarness, record: RecordedResource) -> dict[str, str]:
    return policies_hit(analyzer.analyze(record, None))


def analyze_stack(analyzer: PolicyPack | PolicyHarness, records: list[RecordedResource]) -> dict[str, str]:
    return policies_hit(analyzer.analyze_stack(r for r in records if not r.type.startswith("pulumi:providers:")))


def stack_with(baseline: Evaluated, change: Callable[[list[RecordedResource]], list[RecordedResource]]) -> list[RecordedResource]:
    return change([copy.deepcopy(r) for r in baseline.records])


DEPLOYMENT = "kubernetes:apps/v1:Deployment"
HPA = "kubernetes:autoscaling/v2:HorizontalPodAutoscaler"
KSVC = "kubernetes:serving.knative.dev/v1:Service"
JOB = "kubernetes:batch/v1:Job"
NOTHING: dict[str, str] = {}


def vllm(record: RecordedResource, field: str = "inputs") -> dict:
    return getattr(record, field)["spec"]["template"]["spec"]["containers"][0]


def both(record: RecordedResource) -> list[dict]:
    """The pod spec in inputs (Analyze) and outputs (AnalyzeStack), to edit them alike (the
    mock provider echoes inputs, so they may be one object)."""
    specs = [record.inputs["spec"]["template"]["spec"], record.outputs["spec"]["template"]["spec"]]
    return specs[:1] if specs[0] is specs[1] else specs


# Each policy config the test_policy_bypasses*.py modules exercise, set away from its default.
POLICY_CONFIG: dict[str, Any] = {
    "pinned-images": {"allowedRepositories": ["docker.io/vllm", "registry.example.com"], "deniedTags": ["latest", "nightly"]},
    "no-secret-env-from": {"allowedNamespaces": ["serving"]},
    "knative-autoscaling": {"productionStacks": []},
    "latency-sensitive-not-time-sliced": {"latencySensitiveTiers": ["premium", "batch"]},
    "control-plane-availability": {"minEndpointPickerReplicasInProduction": 3},
    "gpu-jobs-through-kueue": {"externalLocalQueues": ["team-b/shared"]},
}


EPP = "llama-1b-v1-epp-deployment"  # team-a, 2 replicas
AUTOSCALER = "cluster-autoscaler-release"
EPP_PDB = "llama-1b-v1-epp-poddisruptionbudget"  # maxUnavailable 1


def edit(name: str, change: Callable[[dict], Any]) -> Callable[[list[RecordedResource]], list[RecordedResource]]:
    """Change the outputs (what AnalyzeStack sees) of the record named `name`."""

    def changed(records):
        change(next(r for r in records if r.name == name).outputs)
        return records

    return changed


def without_maximum(**spec: Any) -> Callable[[dict], Any]:
    return lambda pdb: (pdb["spec"].pop("maxUnavailable"), pdb["spec"].update(spec))


def _careless(records: list[RecordedResource]) -> list[RecordedResource]:
    """Every pod template of the stack unmeshed, privileged, run as root, without limits and with no time to drain
    (what the engine sends the pack per resource and for the stack alike)."""
    changed = copy.deepcopy(records)
    for record in changed:
        for properties in (record.inputs, record.outputs):
            template = (properties.get("spec") or {}).get("template")
            if not isinstance(template, dict) or "spec" not in template:
                continue
            template.setdefault("metadata", {}).setdefault("labels", {})["sidecar.istio.io/inject"] = "false"
            template["spec"]["terminationGracePeriodSeconds"] = 1
            for container in template["spec"].get("containers", []):
                container.setdefault("securityContext", {}).update(privileged=True, runAsUser=0)
                container.get("resources", {}).pop("limits", None)
    return changed
