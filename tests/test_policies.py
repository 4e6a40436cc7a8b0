"""The policy pack running as its own process (as the Pulumi CLI runs it), through the analyzer protocol, for what
the protocol and the process do: the pack's description, the real stacks' verdict, the harness's verdicts
(tests/policy_harness.py) held to the pack's, policy config and its errors, masking, and the facts the pack shares
with the program. Every rule with a violating and a compliant case, its validators called in this process as the
policy SDK's analyzer calls them: tests/test_policy_rules.py (serving), test_policy_pod_rules.py (pods and
capacity), test_policy_endpoint_pickers.py and test_policy_network.py (the gateway's token, the tenants' egress)."""

from __future__ import annotations

import copy
import json
import sys
from collections.abc import Iterator

import pytest
from google.protobuf import json_format

from preview.engine import RecordedResource
from preview.masking import mask_secrets, secret_values
from preview.performance import preview_policy_config
from preview.policy_runner import UNKNOWN, Diagnostic, PolicyConfigError, PolicyPack, PolicyRun
from preview.sections import policy_section
from preview.stack_config import load_project, load_stack_config

from . import policy_helpers
from .helpers import IMAGES_BY_TAG, PROJECT, ROOT, STACKS, Evaluated, raw_stack, run_preview
from .policy_harness import PolicyHarness
from .policy_helpers import DEPLOYMENT, HPA, KSVC, POLICY_CONFIG, _careless, analyze, analyze_stack, find

sys.path.insert(0, str(ROOT / "policies"))
from inference_governance.pack import POLICIES  # noqa: E402

# The policy tests' module fixtures (tests/policy_helpers.py), bound here for pytest to find.
baseline = policy_helpers.baseline


def _started(*stacks: str) -> list[PolicyPack]:
    """The pack as the CLI runs it, a process for each stack (started together: each imports its SDK meanwhile),
    configured as the preview configures its own run: serving-performance reads verdicts these evaluations have none
    of (test_serving_performance.py runs it with a preview's)."""
    configs = [load_stack_config(load_project(ROOT), stack) for stack in stacks]
    spawned = [PolicyPack(ROOT / "policies", config.values, PROJECT, stack) for stack, config in zip(stacks, configs)]
    for running, stack, config in zip(spawned, stacks, configs):
        running.connect()
        running.handshake(ROOT)
        running.configure_stack(PROJECT, stack, config.values, config.secret_keys)
        running.configure(running.info(), preview_policy_config(IMAGES_BY_TAG))
    return spawned


@pytest.fixture(scope="module")
def pack() -> Iterator[PolicyPack]:
    (running,) = _started("prod")
    yield running
    running.close()


@pytest.fixture(scope="module")
def committed_packs(pack) -> Iterator[dict[str, PolicyPack]]:
    """A pack for each committed stack (prod's the one above)."""
    others = [stack for stack in STACKS if stack != "prod"]
    running = dict(zip(others, _started(*others)))
    yield {**running, "prod": pack}
    for other in running.values():
        other.close()


# --- the pack as the CLI sees it ----------------------------------------------------------------


def test_pack_describes_itself(pack):
    info = pack.info()
    assert info.name == "inference-governance"
    names = {p.name for p in info.policies}
    # Every policy pack.py declares, and nothing else: a new policy is its validator plus its entry there.
    assert names == {policy.name for policy in POLICIES}
    assert {"image-digests", "gateway-requires-a-token", "tenant-s3-scoping"} <= names
    assert "no-secrets-in-config-maps" in names


def test_the_real_stacks_are_compliant(pack, baseline):
    for record in baseline.records:
        if record.custom and not record.type.startswith("pulumi:providers:"):
            assert analyze(pack, record) == {}, record.urn
    assert analyze_stack(pack, baseline.records) == {}


# --- the harness gives the pack's verdicts ----------------------------------------------------------
# The per-rule tests call the validators through tests/policy_harness.py: here its verdicts are held to the pack's, over
# the analyzer protocol, on every committed stack and on stacks changed to break many rules at once, to hold unknown
# values and to run under a policy config: the same diagnostics, in the same order, per resource and for the stack.

# POLICY_CONFIG (tests/policy_helpers.py), and levels and a floor moved too.
CONFIGURED = {
    **POLICY_CONFIG,
    "inference-graceful-drain": {"minTerminationGracePeriodSeconds": 600},
    "hpa-behavior": "advisory",
    "no-secret-args": "disabled",
}


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


def _verdicts(
    analyzer: PolicyPack | PolicyHarness, records: list[RecordedResource]
) -> Iterator[tuple[str, str, str, str, str, str]]:
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


def test_the_harness_describes_the_pack_as_the_pack_does(pack):
    harness = PolicyHarness("prod")
    assert json_format.MessageToDict(harness.info()) == json_format.MessageToDict(pack.info())
    overrides = preview_policy_config(CONFIGURED)
    try:
        assert harness.configure(harness.info(), overrides) == pack.configure(pack.info(), overrides)
    finally:
        pack.configure(pack.info(), preview_policy_config(IMAGES_BY_TAG))


@pytest.mark.parametrize("stack", STACKS)
def test_the_harness_gives_the_packs_verdicts_on_the_committed_stacks(committed_packs, stack):
    records = Evaluated(raw_stack(stack), shared=True).records
    found = list(_verdicts(PolicyHarness(stack), records))
    assert found == list(_verdicts(committed_packs[stack], records))


@pytest.mark.parametrize("change", ["labeller", "below-the-floors", "unknowns", "careless-configured"])
def test_the_harness_gives_the_packs_verdicts_on_changed_stacks(pack, baseline, change):
    records = baseline.records
    changes = {"below-the-floors": _below_the_production_floors, "careless-configured": _careless, "unknowns": _unknowns}
    records = changes.get(change, list)(records)
    overrides = CONFIGURED if change.endswith("-configured") else {}
    pack.configure(pack.info(), preview_policy_config({**IMAGES_BY_TAG, **overrides}))
    try:
        found = list(_verdicts(PolicyHarness("prod", overrides), records))
        assert found == list(_verdicts(pack, records))
    finally:
        pack.configure(pack.info(), preview_policy_config(IMAGES_BY_TAG))
    # No comparison here could pass for want of verdicts: the changed stacks break many rules at once (production's
    # floors among them), and the unknown values stop resource and stack policies alike.
    if change in ("below-the-floors", "careless-configured"):
        assert len({policy for _, policy, *_ in found}) >= 5, found
    if change == "below-the-floors":
        production = {"hpa-behavior", "knative-autoscaling", "control-plane-availability"}
        assert production <= {policy for _, policy, *_ in found}, found
    if change == "unknowns":
        unknown = {(kind, policy) for kind, policy, _, _, message, _ in found if message.startswith("can't run policy")}
        assert ("resource", "pinned-images") in unknown and ("stack", "inference-disruption-budget") in unknown, found


def test_policy_config_reaches_the_pack(baseline):
    config = load_stack_config(load_project(ROOT), "prod")
    stricter = PolicyPack(ROOT / "policies", config.values, "inference-platform", "prod").connect()
    try:
        stricter.configure(
            stricter.info(),
            preview_policy_config(
                {
                    **IMAGES_BY_TAG,
                    "inference-graceful-drain": {"minTerminationGracePeriodSeconds": 600},
                    "hpa-behavior": "advisory",
                }
            ),
        )
        assert analyze(stricter, find(baseline, DEPLOYMENT, "llama-70b-v1-deployment")) == {
            "inference-graceful-drain": "mandatory"
        }
        record = find(baseline, HPA, "llama-70b-v1-hpa")
        record.inputs["spec"]["behavior"]["scaleDown"]["stabilizationWindowSeconds"] = 1
        assert analyze(stricter, record) == {"hpa-behavior": "advisory"}
    finally:
        stricter.close()


def test_the_packs_facts_are_generated_from_the_program():
    # One source for what the pack and the program share (GPU catalog, label keys, annotation,
    # image rule): the pack's file must be what the program's modules generate now.
    from components.policy_facts import FACTS_FILE, rendered

    assert FACTS_FILE.read_text() == rendered(), "stale: run `make policy-facts`"


# --- the report tells the truth ------------------------------------------------------------------


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"no-such-policy": "advisory"}, "no policy of this pack: no-such-policy; policies: all, adapter-names-unique"),
        ({"hpa-behavior": {"minReplica": 3}}, "config 'hpa-behavior': unknown key 'minReplica'; allowed: enforcementLevel"),
        ({"pod-security-baseline": {"strict": True}}, "'pod-security-baseline': unknown key 'strict'; allowed: enforcementLevel"),
        ({"hpa-behavior": {"minReplicasInProduction": "two"}}, "'minReplicasInProduction' is string \"two\", but the policy"),
        ({"pinned-images": {"allowedRepositories": "ghcr.io"}}, "'allowedRepositories' is string \"ghcr.io\", but the policy"),
        ({"pinned-images": {"deniedTags": ["latest", 3]}}, "'deniedTags' is array"),
        ({"hpa-behavior": {"enforcementLevel": "sometimes"}}, "'hpa-behavior': unknown enforcement level 'sometimes'"),
        ({"hpa-behavior": {"enforcementLevel": ["disabled"]}}, "'hpa-behavior': unknown enforcement level ['disabled']"),
        ({"all": {"enforcementLevel": "advisory", "minReplicasInProduction": 1}}, "'all' sets every policy's enforcementLevel"),
        ({"gpu-jobs-through-kueue": {"externalLocalQueues": ["team-a/batch", "batch"]}}, "('batch' does not match"),
        ({"gpu-jobs-through-kueue": {"externalLocalQueues": ["Team-A/batch"]}}, "('Team-A/batch' does not match"),
        ({"gpu-jobs-through-kueue": {"externalLocalQueues": ["team-a/batch/x"]}}, "('team-a/batch/x' does not match"),
    ],
    ids=["unknown-policy", "unknown-key", "key-of-a-policy-without-config", "wrong-type", "string-for-array",
         "wrong-item-type", "bad-level", "level-not-a-string", "all-with-a-key", "local-queue-without-namespace",
         "local-queue-not-dns", "local-queue-two-slashes"],
)  # fmt: skip
def test_overrides_are_checked_against_each_policys_schema(pack, overrides, message):
    with pytest.raises(PolicyConfigError) as refused:
        pack.configure(pack.info(), overrides)
    assert message in str(refused.value)


def test_external_local_queues_of_namespace_and_name_are_accepted(pack):
    """The pattern refuses only malformed entries: namespace/name, the name a DNS-1123 subdomain."""
    try:
        pack.configure(
            pack.info(),
            preview_policy_config(
                {**IMAGES_BY_TAG, "gpu-jobs-through-kueue": {"externalLocalQueues": ["team-a/batch", "ml-ops/queue.v2"]}}
            ),
        )
    finally:
        pack.configure(pack.info(), preview_policy_config(IMAGES_BY_TAG))


def test_a_config_the_schema_refuses_is_an_input_error(tmp_path):
    config = tmp_path / "policy-config.json"
    config.write_text(json.dumps({"hpa-behavior": {"minReplicasInProduction": "two"}}))
    result = run_preview("--stack", "dev", "--out", str(tmp_path / "out"), "--policy-config", str(config))
    assert result.returncode == 2, result.stderr
    assert "policy config 'hpa-behavior': 'minReplicasInProduction' is string \"two\"" in result.stderr
    assert "Traceback" not in result.stderr


def test_a_weakened_mandatory_policy_is_reported(tmp_path):
    config = tmp_path / "policy-config.json"
    config.write_text(json.dumps({"no-secret-args": "disabled", "hpa-behavior": {"enforcementLevel": "advisory"}}))
    out = tmp_path / "out"
    result = run_preview("--stack", "dev", "--out", str(out), "--policy-config", str(config))
    assert result.returncode == 0, result.stderr
    warning = "policy no-secret-args is mandatory in the pack but disabled by the policy config: it did not run"
    assert f"WARNING {warning}" in result.stdout
    assert "1 policy disabled" in result.stdout
    policies = json.loads((out / "report.json").read_text())["policies"]["data"]
    levels = {p["name"]: (p["declaredLevel"], p["level"]) for p in policies["policies"]}
    assert levels["no-secret-args"] == ("mandatory", "disabled")
    assert levels["hpa-behavior"] == ("mandatory", "advisory")
    assert levels["gpu-topology-spread"] == ("advisory", "advisory")
    assert warning in policies["warnings"] and len(policies["warnings"]) == 2
    markdown = (out / "report.md").read_text()
    assert f"- **Warning:** {warning}" in markdown
    assert "| no-secret-args | mandatory | **disabled** |" in markdown


HF_TOKEN = "hf_" + "Z" * 34


def test_secrets_are_masked_in_what_the_pack_says(pack, baseline):
    # Policies that quote a value (here Knative annotations) must not carry a secret into the
    # report: the runner masks Hugging Face tokens, credential arguments and the stack's secret
    # config values in every message.
    annotations = {
        "autoscaling.knative.dev/window": f"--hf-token={HF_TOKEN}",
        "autoscaling.knative.dev/scale-down-delay": "s3cr3t-config-value",
    }
    stack_secrets, pack.secrets = pack.secrets, ["s3cr3t-config-value"]
    try:
        diagnostics = []
        for key, value in annotations.items():
            record = find(baseline, KSVC, "llama-8b-v1-knative-service")
            record.inputs["spec"]["template"]["metadata"]["annotations"][key] = value
            diagnostics += pack.analyze(record, None)
    finally:
        pack.secrets = stack_secrets
    assert {d.policy for d in diagnostics} == {"knative-autoscaling"} and len(diagnostics) == 2
    section = policy_section(PolicyRun("inference-governance", "0.1.0", [], diagnostics=diagnostics, analyzed=2))
    rendered = "\n".join([*section.lines, section.markdown, json.dumps(section.data)])
    assert "window is '--hf-token=***'" in rendered and "scale-down-delay is '***', not a duration" in rendered
    assert HF_TOKEN not in rendered and "s3cr3t-config-value" not in rendered


@pytest.mark.parametrize(
    "text, masked",
    [
        (f"vllm serve --hf-token {HF_TOKEN} --max-tokens 5", "vllm serve --hf-token *** --max-tokens 5"),
        ("--api-key=sk-live-1, then", "--api-key=***, then"),
        ("https://example.com/m?token=abc&x=1", "https://example.com/m?token=***&x=1"),
        ("HF_TOKEN=abc vllm serve", "HF_TOKEN=*** vllm serve"),
        ("the value is hunter22", "the value is ***"),
        ("passes a credential (--api-key) in its command line", "passes a credential (--api-key) in its command line"),
        ("--tokenizer-mode auto --max-num-batched-tokens 8192", "--tokenizer-mode auto --max-num-batched-tokens 8192"),
    ],
    ids=["hf-token-flag", "api-key-equals", "token-query", "env-assignment", "config-secret", "flag-named", "not-secrets"],
)
def test_mask_secrets(text, masked):
    assert mask_secrets(text, secret_values({"p:pw": "hunter22", "p:plain": "auto"}, ["p:pw"])) == masked


def test_secret_values_include_an_objects_leaves():
    tokens = json.dumps({"team-a": "hf_aaaa1111", "team-b": "hf_bbbb2222"})
    assert set(secret_values({"p:huggingFaceTokens": tokens}, ["p:huggingFaceTokens"])) == {tokens, "hf_aaaa1111", "hf_bbbb2222"}
