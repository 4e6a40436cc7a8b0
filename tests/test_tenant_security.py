"""Least-privilege tenants (issue 12): per-tenant tokens, the tenant Role, and vLLM flags only from a typed allow-list.
Egress and mesh isolation, node metadata locked to the node: tests/test_tenant_network.py."""

from __future__ import annotations

import copy
import json

import pytest

from components.specs import pod as pod_spec
from components.specs import vllm_parts
from platform_config.errors import ConfigError
from platform_config.models import ServerArgs
from platform_config.pins import VLLM, VLLM_VERSION
from preview.upstream import vllm_version_of

from . import tenant_security_helpers
from .helpers import (
    Evaluated,
    config_problems,
    downloading_weights,
    owning,
    pinned_vllm_flags,
    raw_stack,
    run_preview,
    validate,
    write_stack,
)
from .tenant_security_helpers import PROD_TOKENS, TOKENS_KEY, manifests

# The module fixtures of the tenant security tests (tests/tenant_security_helpers.py), bound here for pytest to find.
prod, mirrored = tenant_security_helpers.prod, tenant_security_helpers.mirrored


SECRET = "kubernetes:core/v1:Secret"


def vllm_env(evaluated: Evaluated, kind: str, name: str, namespace: str) -> dict[str, dict]:
    spec = evaluated.k8s(kind, name, namespace)["spec"]["template"]["spec"]
    (vllm,) = [c for c in spec["containers"] if c["name"] == "vllm"]
    return {e["name"]: e for e in vllm["env"]}


def refused(raw: dict, secrets: dict[str, str] | None = None, extra: dict | None = None) -> list[str]:
    with pytest.raises(ConfigError) as caught:
        Evaluated(raw, extra=extra, secrets=secrets)
    return [str(issue) for issue in caught.value.issues]


# --- 1. secrets: one token per tenant, only where its servers read it ----------------------------


def test_each_tenant_gets_only_its_own_token(prod):
    secrets = {r["name"]: r["inputs"] for r in prod.of_type(SECRET)}
    # team-b has no token: no Secret there, and its server does not ask for one.
    assert set(secrets) == {"serving-huggingface-token", "team-a-huggingface-token"}
    assert secrets["serving-huggingface-token"]["stringData"] == {"secret": True, "value": {"token": "hf_serving_token"}}
    assert secrets["team-a-huggingface-token"]["stringData"] == {"secret": True, "value": {"token": "hf_team_a_token"}}
    assert "HF_TOKEN" in vllm_env(prod, "Deployment", "llama-1b-v1", "team-a")
    assert "HF_TOKEN" not in vllm_env(prod, "Service", "batch-labeller-v1", "team-b")


def test_with_a_weight_mirror_only_the_mirror_jobs_read_the_tenants_tokens(mirrored):
    secrets = {r["name"]: r["inputs"] for r in mirrored.of_type(SECRET)}
    # No token in a tenant's namespace: its servers stream the copies. One per tenant in the mirror's namespace.
    assert set(secrets) == {"weight-mirror-serving-huggingface-token", "weight-mirror-team-a-huggingface-token"}
    assert {s["metadata"]["namespace"] for s in secrets.values()} == {"model-weights"}
    assert secrets["weight-mirror-serving-huggingface-token"]["stringData"]["value"] == {"token": "hf_serving_token"}
    assert secrets["weight-mirror-team-a-huggingface-token"]["stringData"]["value"] == {"token": "hf_team_a_token"}
    assert "HF_TOKEN" not in vllm_env(mirrored, "Deployment", "llama-1b-v1", "team-a")
    # Each Job reads its own tenant's token and runs as its own tenant's mirror account.
    jobs = manifests(mirrored, "Job", "model-weights")
    assert {j["metadata"]["labels"]["inference.platform/tenant"] for j in jobs} == {"serving", "team-a", "team-b"}
    for job in jobs:
        tenant = job["metadata"]["labels"]["inference.platform/tenant"]
        spec = job["spec"]["template"]["spec"]
        tokens = [e for e in spec["containers"][0]["env"] if e["name"] == "HF_TOKEN"]
        # team-b's labeller is an ungated model, and team-b has no token.
        assert [t["valueFrom"]["secretKeyRef"]["name"] for t in tokens] == (
            [f"huggingface-token-{tenant}"] if tenant in PROD_TOKENS else []
        )
        assert spec["serviceAccountName"] == f"mirror-{tenant}"


def test_a_token_for_a_tenant_without_hugging_face_models_is_not_copied():
    raw = downloading_weights(raw_stack("prod"))
    for model in raw["models"]:
        if model["tenant"] == "team-a":
            for version in model["versions"]:
                version["source"] = {"s3Uri": "s3://weights-bucket/llama-1b", "revision": "v1"}
    owning(raw, "team-a", "s3://weights-bucket/llama-1b")
    evaluated = Evaluated(raw, secrets={TOKENS_KEY: json.dumps(PROD_TOKENS)})
    assert {r["name"] for r in evaluated.of_type(SECRET)} == {"serving-huggingface-token"}


def test_token_config_errors_name_the_key_and_never_echo_a_token():
    dev = raw_stack("dev")
    unknown = refused(dev, secrets={TOKENS_KEY: json.dumps({"dev-team": "hf_a", "team-x": "hf_leak_me"})})
    assert unknown == ["inference-platform:huggingFaceTokens.team-x: unknown tenant 'team-x'; tenants: dev-team"]
    (empty,) = refused(dev, secrets={TOKENS_KEY: json.dumps({"dev-team": ""})})
    assert empty == "inference-platform:huggingFaceTokens.dev-team: must be a non-empty token string"
    (flat,) = refused(dev, secrets={TOKENS_KEY: "hf_leak_me"})
    assert flat.startswith("inference-platform:huggingFaceTokens: must map tenant names to tokens")
    (plain,) = refused(dev, extra={TOKENS_KEY: {"dev-team": "hf_leak_me"}})
    assert plain.startswith("inference-platform:huggingFaceTokens: must be a secret")
    (retired,) = refused(dev, secrets={"inference-platform:huggingFaceToken": "hf_leak_me"})
    assert retired.startswith("inference-platform:huggingFaceToken: is no longer read: each tenant has its own token")
    for message in (*unknown, empty, flat, plain, retired):
        assert "hf_leak_me" not in message


def test_secure_leaves_of_the_token_object_stay_secret_through_the_preview(tmp_path):
    """`pulumi config set --path --secret 'huggingFaceTokens.dev-team' ...` writes a `secure:`
    leaf under the key; the preview hands the program the object marked secret, as the CLI does."""
    ciphertext = "AAABAGNpcGhlcnRleHQtdGhhdC1tdXN0LW5ldmVyLWxlYWs="
    stack = write_stack(tmp_path, raw_stack("dev"), {TOKENS_KEY: {"dev-team": {"secure": ciphertext}}})
    out = tmp_path / "out"
    result = run_preview("--stack", "dev", "--config-file", str(stack), "--out", str(out))
    assert result.returncode == 0, result.stderr
    (secret,) = [r for r in json.loads((out / "resources.json").read_text()) if r["type"] == SECRET]
    assert secret["name"] == "dev-team-huggingface-token"
    assert secret["inputs"]["stringData"] == {"secret": True, "value": {"token": f"[secret:{TOKENS_KEY}]"}}
    assert ciphertext not in "".join(p.read_text() for p in out.rglob("*") if p.is_file())


def test_the_tenant_role_cannot_read_secrets_exec_or_escalate(prod):
    role = prod.k8s("Role", "team-a-tenant", "team-a")
    granted = {
        (group, resource, verb)
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }
    # A pod is restarted by evicting it, which honours its PodDisruptionBudget; nothing is deleted.
    assert ("", "pods/log", "get") in granted and ("", "pods/eviction", "create") in granted
    assert not [g for g in granted if g[2] == "delete"]
    resources = {resource for _, resource, _ in granted}
    assert not resources & {"secrets", "pods/exec", "pods/attach", "pods/portforward", "pods/proxy", "serviceaccounts/token"}
    assert not {verb for _, _, verb in granted} & {"escalate", "bind", "impersonate", "*", "update", "patch"}
    assert {resource for _, resource, verb in granted if verb == "create"} == {"pods/eviction"}
    assert all("*" not in rule["apiGroups"] + rule["resources"] for rule in role["rules"])
    binding = prod.k8s("RoleBinding", "team-a-tenant-members", "team-a")
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": role["metadata"]["name"]}
    assert not [
        m for m in prod.manifests() if m["kind"] in ("RoleBinding", "ClusterRoleBinding") and m["roleRef"]["name"] == "edit"
    ]


@pytest.mark.parametrize("group", ["system:authenticated", "system:serviceaccounts", ""])
def test_tenant_groups_refuse_kubernetes_own_groups(group):
    raw = raw_stack("prod")
    raw["tenants"][1]["groups"] = ["team-a-developers", group]
    (message,) = config_problems(raw)
    assert message.startswith(f"inference-platform:tenants[1].groups[1]: {group!r} is not a tenant group")


# --- 3. vLLM arguments: typed, allow-listed, never computed ones or credentials ------------------


# ServerArgs fields the platform writes itself (pod.vllm_args) or derives a flag from, not through TUNING_FIELDS.
COMPUTED = {"max_model_len", "gpu_memory_utilization", "max_num_seqs", "quantization", "dtype", "prefill_tokens_per_second"}


@pytest.mark.upstream_source
def test_every_settable_flag_exists_in_the_pinned_vllm():
    assert vllm_version_of(VLLM.image) == VLLM_VERSION
    flags = pinned_vllm_flags()
    assert set(vllm_parts.TUNING_FIELDS) == set(ServerArgs.model_fields) - COMPUTED
    for field in vllm_parts.TUNING_FIELDS:
        assert vllm_parts.tuning_flag(field) in flags, field


def test_typed_settings_become_flags_and_a_version_overrides_the_model():
    raw = raw_stack("prod")
    model = raw["models"][0]
    model["server"].update({"enforceEager": True, "maxNumBatchedTokens": 8192, "kvCacheDtype": "fp8", "cpuOffloadGb": 2.5})
    model["versions"][0]["server"] = {"enforceEager": False, "seed": 7}
    (server,) = [s for m in validate(raw).models for s in m.servers if s.model.name == "llama-70b"]
    args = pod_spec.vllm_args(server)
    tail = args[args.index("--scheduling-policy") + 2 :]
    assert tail == ["--max-num-batched-tokens", "8192", "--kv-cache-dtype", "fp8", "--cpu-offload-gb", "2.5", "--seed", "7"]


@pytest.mark.parametrize(
    ("server", "key", "expected"),
    [
        ({"extraArgs": ["--port", "9000"]}, "server", "'extraArgs' is no longer read"),
        ({"apiKey": "sk-123"}, "server.apiKey", "unknown key 'apiKey'"),
        ({"trustRemoteCode": True}, "server.trustRemoteCode", "unknown key 'trustRemoteCode'"),
        ({"schedulingPolicy": "fcfs"}, "server.schedulingPolicy", "unknown key 'schedulingPolicy'"),
        ({"maxLogprobs": -1}, "server.maxLogprobs", ""),
        ({"kvCacheDtype": "int4"}, "server.kvCacheDtype", ""),
        ({"maxNumBatchedTokens": "8192"}, "server.maxNumBatchedTokens", ""),
    ],
)
def test_free_form_computed_and_out_of_range_flags_are_refused(server, key, expected):
    raw = copy.deepcopy(raw_stack("dev"))
    raw["models"][0]["server"] = server
    (message,) = config_problems(raw)
    assert message.startswith(f"inference-platform:models[0].{key}: "), message
    assert expected in message


@pytest.mark.parametrize(
    "key, value, message",
    [
        ("maxNumPartialPrefills", 2, "'maxNumPartialPrefills' is no longer read: vLLM 0.27.0 removed --max-num-partial-prefills"),
        ("quantization", "bitsandbytes", "quantization: got 'bitsandbytes'; allowed: 'fp8', 'awq', 'gptq' or"),
        ("tokenizerMode", "slow", "tokenizerMode: got 'slow'; allowed:"),
    ],
)
def test_settings_the_pinned_vllm_dropped_are_refused_naming_the_key(key, value, message):
    """vLLM 0.33.0 has no --max-num-partial-prefills (gone in 0.27.0), no in-tree bitsandbytes (0.28.0) and no
    `slow` tokenizer mode (0.31.0): a stack naming them gets an error for the key, not a server that will not start."""
    raw = raw_stack("dev")
    raw["models"][0].setdefault("server", {})[key] = value
    (problem,) = config_problems(raw)
    assert problem.startswith("inference-platform:models[0].server") and message in problem, problem
