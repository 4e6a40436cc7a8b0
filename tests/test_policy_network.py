"""The policy pack's network rules, each with a violating and a compliant case, its validators called in this process
as the policy SDK's analyzer calls them (tests/policy_harness.py): the gateway admits only callers with a token,
and each tenant's servers, batch jobs, endpoint pickers and any other workload egress by host, within what they
read and write."""

from __future__ import annotations

import copy
import sys
from types import SimpleNamespace
from typing import Any, Callable

import pytest

from preview.engine import RecordedResource

from . import policy_helpers
from .helpers import ROOT
from .policy_harness import PolicyHarness
from .policy_helpers import DEPLOYMENT, analyze_stack, edit, stack_with

sys.path.insert(0, str(ROOT / "policies"))
from inference_governance import gateway_auth  # noqa: E402

# The policy tests' module fixtures (tests/policy_helpers.py), bound here for pytest to find.
baseline, harness = policy_helpers.baseline, policy_helpers.harness


# --- the gateway requires a token ------------------------------------------------------------------

REQUIRE_TOKEN = "gateway-routing-inference-gateway-require-token"
GATEWAY_JWT = "gateway-routing-inference-gateway-jwt"


def _gateway_violations(records: list[RecordedResource]) -> list[str]:
    """The rule itself over the records (the analyzer run is test_the_gateway_token_rule_is_mandatory)."""
    messages: list[str] = []
    resources = [SimpleNamespace(resource_type=r.type, props=r.outputs, urn=r.urn) for r in records]
    gateway_auth.gateway_requires_a_token(SimpleNamespace(resources=resources), lambda m, urn=None: messages.append(m))
    return messages


def _rules(change: Callable[[list[dict]], Any]) -> Callable[[list[RecordedResource]], list[RecordedResource]]:
    return edit(REQUIRE_TOKEN, lambda d: change(d["spec"]["rules"]))


@pytest.mark.parametrize(
    "change, expected",
    [
        (lambda rs: rs, None),
        (lambda rs: [r for r in rs if r.name != GATEWAY_JWT], "no RequestAuthentication"),
        (lambda rs: [r for r in rs if r.name != REQUIRE_TOKEN], "no ALLOW AuthorizationPolicy"),
        (edit(REQUIRE_TOKEN, lambda d: d["spec"].update(action="DENY")), "no ALLOW AuthorizationPolicy"),
        (_rules(lambda rules: rules[0].pop("from")), "rule 0 admits requests without a token"),
        (_rules(lambda rules: rules[0]["from"][0]["source"].update(requestPrincipals=[])), "rule 0 admits a source"),
        (_rules(lambda rules: rules.append({"from": [{"source": {"notRequestPrincipals": ["x/y"]}}]})), "rule 3 admits a source"),
        (_rules(lambda rules: rules[2]["to"][0]["operation"].update(hosts=["*"])), "rule 2 admits requests without a token"),
        (_rules(lambda rules: rules[2]["to"][0]["operation"].update(ports=["443"])), "rule 2 admits requests without a token"),
        (_rules(lambda rules: rules[2]["to"][0]["operation"].pop("hosts")), "rule 2 admits requests without a token"),
        (_rules(lambda rules: rules[2].pop("to")), "rule 2 admits requests without a token"),
    ],
    ids=["as-declared", "no-request-authentication", "no-allow-policy", "allow-turned-deny", "token-rule-without-from",
         "empty-principals", "not-principals-only", "redirect-rule-any-host", "redirect-rule-on-the-serving-port",
         "redirect-rule-without-hosts", "redirect-rule-everywhere"],
)  # fmt: skip
def test_the_gateway_admits_only_identified_callers(baseline, change, expected):
    found = _gateway_violations(stack_with(baseline, change))
    if expected is None:
        assert found == []
    else:
        assert len(found) == 1 and expected in found[0], found


def test_the_gateway_token_rule_is_mandatory(harness, baseline):
    hits = harness.analyze_stack(stack_with(baseline, _rules(lambda rules: rules[0].pop("from"))))
    assert {(d.policy, d.level) for d in hits} == {("gateway-requires-a-token", "mandatory")}


SERVING_EGRESS = "serving-egress"  # the Sidecar of the serving tenant's model servers
SERVING_S3 = "serving-egress-s3"
SERVING_GRANT = "egress-gateway-tenant-serving"  # what the egress gateway lets the serving tenant through to
# The model servers of the serving tenant in the baseline.
SERVING_SERVERS = {
    "llama-70b-v1-deployment",
    "llama-8b-v1-knative-service",
    "llama-8b-v2-knative-service",
    "llama-8b-batch-v1-knative-service",
}
UNMESHED = {"sidecar.istio.io/inject": "false"}
# The serving tenant's servers that load adapters from its adapters bucket.
ADAPTER_SERVERS = {"llama-8b-v1-knative-service", "llama-8b-v2-knative-service", "llama-8b-batch-v1-knative-service"}


def _server_annotations(extra: dict[str, str]) -> Callable[[list[RecordedResource]], list[RecordedResource]]:
    return edit("llama-70b-v1-deployment", lambda d: d["spec"]["template"]["metadata"]["annotations"].update(extra))


def _servers_labels(change: Callable[[dict], Any]) -> Callable[[list[RecordedResource]], list[RecordedResource]]:
    return edit("llama-70b-v1-deployment", lambda d: change(d["spec"]["template"]["metadata"]["labels"]))


@pytest.mark.parametrize(
    ("change", "flagged"),
    [
        (lambda rs: [r for r in rs if r.name != SERVING_EGRESS], SERVING_SERVERS),
        (edit(SERVING_EGRESS, lambda s: s["spec"]["outboundTrafficPolicy"].update(mode="ALLOW_ANY")), SERVING_SERVERS),
        # A Sidecar for other pods is none for the servers; one for the whole namespace holds them.
        (edit(SERVING_EGRESS, lambda s: s["spec"]["workloadSelector"].update(labels={"app": "other"})), SERVING_SERVERS),
        (edit(SERVING_EGRESS, lambda s: s["spec"].pop("workloadSelector")), set()),
        (_servers_labels(lambda labels: labels.update(UNMESHED)), {"llama-70b-v1-deployment"}),
        (edit(SERVING_S3, lambda e: e["spec"].update(exportTo=["*"])), {SERVING_S3}),
        (edit(SERVING_S3, lambda e: e["spec"].pop("exportTo")), {SERVING_S3}),
        (edit(SERVING_S3, lambda e: e["spec"]["hosts"].append("*.s3.us-east-1.amazonaws.com")), {SERVING_S3}),
        (edit(SERVING_S3, lambda e: e["spec"]["hosts"].append("attacker.example.com")), {SERVING_S3}),
        (edit(SERVING_S3, lambda e: e["spec"]["hosts"].append("*")), {SERVING_S3}),
        (edit(SERVING_S3, lambda e: e["spec"]["hosts"].append("abc.execute-api.us-east-1.amazonaws.com")), {SERVING_S3}),
        # What the servers read must stay reachable: their bucket, and their credentials around the sidecar (in
        # production the egress gateway still granting the tenant a host it no longer names is a grant too many).
        (lambda rs: [r for r in rs if r.name != SERVING_S3], SERVING_SERVERS | {SERVING_GRANT}),
        (edit(SERVING_S3, lambda e: e["spec"].update(hosts=[h for h in e["spec"]["hosts"] if "model-weights" not in h])),
         SERVING_SERVERS | {SERVING_GRANT}),
        (edit("llama-70b-v1-deployment", lambda d: d["spec"]["template"]["metadata"]["annotations"].pop(
            "traffic.sidecar.istio.io/excludeOutboundIPRanges")), {"llama-70b-v1-deployment"}),
        # Around the sidecar, or past what it resolves itself.
        (edit(SERVING_EGRESS, lambda s: s["spec"].pop("egress")), SERVING_SERVERS),
        (_server_annotations({"traffic.sidecar.istio.io/excludeOutboundIPRanges": "169.254.170.23/32,0.0.0.0/0"}),
         {"llama-70b-v1-deployment"}),
        (_server_annotations({"traffic.sidecar.istio.io/excludeOutboundPorts": "443"}), {"llama-70b-v1-deployment"}),
        (edit("llama-70b-v1-deployment", lambda d: d["spec"]["template"]["spec"]["containers"][0].setdefault(
            "securityContext", {}).update(runAsUser=1337)), {"llama-70b-v1-deployment"}),
        (edit(SERVING_S3, lambda e: e["spec"].update(resolution="NONE")), {SERVING_S3}),
        (edit(SERVING_S3, lambda e: e["spec"].update(addresses=["0.0.0.0/0"])), {SERVING_S3}),
        (edit(SERVING_S3, lambda e: e["spec"].update(ports=[{"number": 22, "name": "ssh", "protocol": "TCP"}])),
         {SERVING_S3}),
        # A bucket of another tenant's, by name.
        (edit(SERVING_S3, lambda e: e["spec"]["hosts"].append("team-b-batch.s3.us-east-1.amazonaws.com")), {SERVING_S3}),
        # The adapters' bucket, read by the servers' init containers.
        (edit(SERVING_S3, lambda e: e["spec"].update(hosts=[h for h in e["spec"]["hosts"] if "adapters" not in h])),
         ADAPTER_SERVERS | {SERVING_GRANT}),
    ],
    ids=["no-sidecar", "allow-any", "sidecar-of-others", "namespace-wide", "server-unmeshed", "exported-everywhere",
         "exported-by-default", "any-bucket", "another-host", "everything", "another-aws-service", "no-s3-entry",
         "not-its-bucket", "credentials-through-the-sidecar", "sees-every-namespace", "excludes-everything",
         "excludes-https", "runs-as-the-proxy", "resolved-by-the-caller", "any-address", "another-port",
         "another-tenants-bucket", "not-the-adapters-bucket"],
)  # fmt: skip
def test_tenant_egress_by_host(harness, baseline, change, flagged):
    hits = harness.analyze_stack(stack_with(baseline, change))
    assert {d.urn.rsplit("::", 1)[-1] for d in hits if d.policy == "tenant-egress-by-host"} == flagged


def test_the_packs_pod_identity_agent_is_the_programs():
    from components.specs.network import POD_IDENTITY_AGENT_CIDRS
    from policies.inference_governance.tenant_egress import POD_IDENTITY_AGENT

    assert POD_IDENTITY_AGENT == POD_IDENTITY_AGENT_CIDRS


BATCH_JOBS = {"review-labels-job", "ticket-labels-job"}  # team-b's batch jobs in the baseline
BATCH_EGRESS = "team-b-batch-egress"  # the Sidecar of team-b's batch pods


def _job_template(name: str, change: Callable[[dict], Any]) -> Callable[[list[RecordedResource]], list[RecordedResource]]:
    return edit(name, lambda d: change(d["spec"]["template"]))


def _namespace_labels(name: str, labels: dict[str, str]) -> Callable[[list[RecordedResource]], list[RecordedResource]]:
    def changed(records):
        (namespace,) = [r for r in records if r.type == "kubernetes:core/v1:Namespace" and r.name == name]
        namespace.outputs["metadata"]["labels"].update(labels)
        return records

    return changed


def _runner_model(template: dict[str, Any], model: str) -> None:
    """The batch runner's engine told to load `model` (its `--model`)."""
    args = next(c for c in template["spec"]["containers"] if c["name"] == "runner")["args"]
    args[args.index("--model") + 1] = model


def _stray_workload(rs: list[RecordedResource], labels: dict[str, str] | None = None) -> list[RecordedResource]:
    """A Deployment a change puts in a tenant's namespace beside its jobs, neither a server nor a picker (`labels`:
    its pods' labels)."""
    stray = copy.deepcopy(next(r for r in rs if r.name == "review-labels-job"))
    template = stray.outputs["spec"]["template"]
    template["metadata"]["labels"] = labels or {"app": "stray"}
    stray.type, stray.name, stray.urn = (
        DEPLOYMENT,
        "stray",
        stray.urn.replace("batch/v1:Job::review-labels-job", "apps/v1:Deployment::stray"),
    )
    stray.outputs = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "stray", "namespace": "team-b"},
        "spec": {"selector": {"matchLabels": {"app": "stray"}}, "template": template},
    }
    return [*rs, stray]


@pytest.mark.parametrize(
    ("change", "flagged"),
    [
        (lambda rs: [r for r in rs if r.name != BATCH_EGRESS], BATCH_JOBS),
        (_job_template("review-labels-job", lambda t: t["metadata"]["labels"].update(UNMESHED)), {"review-labels-job"}),
        (_job_template("review-labels-job", lambda t: t["metadata"]["annotations"].pop(
            "traffic.sidecar.istio.io/excludeOutboundIPRanges")), {"review-labels-job"}),
        # Its output bucket, and Hugging Face, where its model comes from, must stay reachable (the bucket
        # holds the weights of team-b's labeller too).
        (lambda rs: [r for r in rs if r.name != "team-b-egress-s3"],
         BATCH_JOBS | {"batch-labeller-v1-knative-service", "egress-gateway-tenant-team-b"}),
        # In production a job reads its model from the weight mirror's copy: one downloading it from Hugging Face
        # itself is refused (and its namespace names no Hugging Face host to reach it by).
        (_job_template("review-labels-job", lambda t: _runner_model(t, "Qwen/Qwen2.5-7B-Instruct")), {"review-labels-job"}),
        # Anything else in a tenant's namespace is held to the same, unless it is a picker.
        (_stray_workload, {"stray"}),
        # ... a picker's label on pods that run other images than the picker's included.
        (lambda rs: _stray_workload(rs, {"app.kubernetes.io/component": "endpoint-picker"}), {"stray"}),
        # The sidecar's stub running a command of its own runs it as the proxy, around the proxy.
        (_job_template("review-labels-job", lambda t: t["spec"]["initContainers"][0].update(command=["sh", "-c", "x"])),
         {"review-labels-job"}),
        (_job_template("review-labels-job", lambda t: t["spec"].update(hostNetwork=True)), {"review-labels-job"}),
        # A tenant namespace the injector skips leaves every pod in it without the sidecar.
        (_namespace_labels("team-b", {"istio-injection": "disabled"}), {"team-b"}),
    ],
    ids=["no-sidecar", "unmeshed", "credentials-through-the-sidecar", "no-s3-entry", "downloads-from-hugging-face", "stray",
         "stray-labelled-as-a-picker", "stub-with-a-command", "host-network", "namespace-not-injected"],
)  # fmt: skip
def test_a_tenants_batch_jobs_and_any_other_workload_egress_by_host(harness, baseline, change, flagged):
    hits = harness.analyze_stack(stack_with(baseline, change))
    assert {d.urn.rsplit("::", 1)[-1] for d in hits if d.policy == "tenant-egress-by-host"} == flagged


PICKER_API = "team-a-allow-picker-api-egress"
TENANT_HTTPS = "team-b-allow-hugging-face-egress"  # team-b's servers and jobs to Hugging Face's CDN, outside production


def _download_rule(selector: dict[str, Any] | None = None):
    """Team-b's namespace with the Hugging Face download rule a stack outside production without a weight mirror
    renders (HTTPS anywhere but instance metadata, for its servers' and jobs' pods), selecting `selector` instead."""
    from components.specs.network import HUGGING_FACE_DOWNLOADERS, https_anywhere, network_policy

    def changed(records: list[RecordedResource]) -> list[RecordedResource]:
        rule = copy.deepcopy(next(r for r in records if r.name == "team-b-allow-egress-gateway-egress"))
        spec = network_policy("team-b", "allow-hugging-face-egress", "Egress", https_anywhere(), HUGGING_FACE_DOWNLOADERS)
        if selector is not None:
            spec["spec"]["podSelector"] = selector
        rule.name, rule.urn = TENANT_HTTPS, rule.urn.replace("team-b-allow-egress-gateway-egress", TENANT_HTTPS)
        rule.inputs = rule.outputs = spec
        return [*records, rule]

    return changed


def test_a_download_rule_selecting_the_pickers_lets_them_out(baseline):
    """Outside production a tenant without a weight mirror keeps the Hugging Face download rule for its servers' and
    jobs' pods; NetworkPolicies add up, so one selecting every pod lets the pickers out too. (In production the rule
    itself is refused: test_policy_bypasses_tenancy.py.)"""
    staging = PolicyHarness("staging")
    assert "tenant-egress-by-host" not in analyze_stack(staging, stack_with(baseline, _download_rule()))
    hits = staging.analyze_stack(stack_with(baseline, _download_rule({})))
    assert {d.urn.rsplit("::", 1)[-1] for d in hits if d.policy == "tenant-egress-by-host"} == {TENANT_HTTPS}


@pytest.mark.parametrize(
    ("change", "flagged"),
    [
        (lambda rs: rs, set()),
        # NetworkPolicies add up: one that selects the pickers and lets them out is enough.
        (edit(PICKER_API, lambda p: p["spec"]["egress"][0]["to"].append({"ipBlock": {"cidr": "0.0.0.0/0"}})), {PICKER_API}),
        (edit(PICKER_API, lambda p: p["spec"]["egress"].append({"ports": [{"protocol": "TCP", "port": 443}]})), {PICKER_API}),
        # In-cluster peers by selector, and a narrower private block, are within what a picker may reach.
        (edit(PICKER_API, lambda p: p["spec"]["egress"][0]["to"].append({"ipBlock": {"cidr": "10.1.0.0/16"}})), set()),
    ],
    ids=["as-rendered", "public-block", "rule-without-to", "narrower-private-block"],
)  # fmt: skip
def test_an_endpoint_pickers_egress_stays_within_private_addresses(harness, baseline, change, flagged):
    hits = harness.analyze_stack(stack_with(baseline, change))
    assert {d.urn.rsplit("::", 1)[-1] for d in hits if d.policy == "tenant-egress-by-host"} == flagged


def test_the_packs_picker_addresses_are_the_programs():
    from components.specs.network import POD_IDENTITY_AGENT_CIDRS, PRIVATE_CIDRS
    from policies.inference_governance.tenant_egress import PICKER_EGRESS_CIDRS

    assert PICKER_EGRESS_CIDRS == (*PRIVATE_CIDRS, *POD_IDENTITY_AGENT_CIDRS)


def test_the_egress_rule_reads_the_adapters_the_fetcher_downloads_from_hugging_face():
    """The pack reads the program's adapter fetcher as it builds it: a Hugging Face adapter on a model whose weights
    are on S3 still needs Hugging Face's hosts."""
    from components.specs.vllm_parts import adapter_fetch_containers
    from platform_config.adapters import AdapterModule, LoraLimits
    from platform_config.models import ModelSource
    from policies.inference_governance.tenant_egress import _hugging_face_reads

    source = ModelSource(huggingface="org/support-adapter", revision="a" * 40)
    lora = LoraLimits((AdapterModule("support", None, source, 16, "base", "team-a"),), 16, 1, 1)
    (fetcher,) = adapter_fetch_containers(lora, "vllm/vllm-openai:v0.33.0", "public.ecr.aws/aws-cli/aws-cli:2.27.50", [], [])
    assert _hugging_face_reads(fetcher) == ["org/support-adapter"]
