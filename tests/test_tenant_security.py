"""Least-privilege tenants (issue 12): per-tenant tokens, the tenant Role, egress and mesh
isolation, node metadata locked to the node, and vLLM flags only from a typed allow-list."""

from __future__ import annotations

import copy
import ipaddress
import json
import re
from typing import Any

import pytest

from components.specs import pod as pod_spec
from components.specs import vllm_parts
from platform_config.errors import ConfigError
from platform_config.models import ServerArgs
from platform_config.pins import VLLM, VLLM_VERSION
from preview.upstream import vllm_version_of

from .helpers import (
    Evaluated,
    config_problems,
    downloading_weights,
    owning,
    pinned_vllm_flags,
    prod_with_labeller_server,
    raw_stack,
    run_preview,
    validate,
    write_stack,
)

TOKENS_KEY = "inference-platform:huggingFaceTokens"
# Each tenant's own token; team-b serves an ungated model and has none.
PROD_TOKENS = {"serving": "hf_serving_token", "team-a": "hf_team_a_token"}
SECRET = "kubernetes:core/v1:Secret"


@pytest.fixture(scope="module")
def prod() -> Evaluated:
    """prod with its batch-labelling server, without its weight mirror and so outside production (staging), its pools
    downloading Hugging Face weights themselves (each tenant's servers read the tenant's token)."""
    return Evaluated(downloading_weights(prod_with_labeller_server()), secrets={TOKENS_KEY: json.dumps(PROD_TOKENS)}, shared=True)


@pytest.fixture(scope="module")
def mirrored() -> Evaluated:
    """prod as shipped: its weight mirror's Jobs download the Hugging Face revisions, its servers stream the copies."""
    return Evaluated(prod_with_labeller_server(), secrets={TOKENS_KEY: json.dumps(PROD_TOKENS)}, shared=True)


def manifests(evaluated: Evaluated, kind: str, namespace: str) -> list[dict]:
    return [m for m in evaluated.manifests() if m["kind"] == kind and m["metadata"].get("namespace") == namespace]


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


# --- 2. network: egress, the mesh, node metadata -----------------------------------------------


def test_tenant_pods_reach_dns_the_mesh_and_the_egress_gateway_but_not_instance_metadata(prod, mirrored):
    """Every pod of a tenant's reaches HTTPS at the egress gateway's pods only (on the pods' port, which a
    NetworkPolicy sees after the Service's DNAT), but where the tenant downloads from Hugging Face: there its servers
    and batch jobs reach Hugging Face's CDN by address too, never the instance metadata service."""
    policies = {p["metadata"]["name"]: p["spec"] for p in manifests(prod, "NetworkPolicy", "serving")}
    # Every pod's egress (an endpoint picker's pods add their own, tests/test_endpoint_picker.py).
    egress = {
        name: spec.get("egress")
        for name, spec in policies.items()
        if "Egress" in spec["policyTypes"] and not spec["podSelector"].get("matchLabels")
    }
    assert policies["default-deny-egress"] == {"podSelector": {}, "policyTypes": ["Egress"]}
    assert set(egress) == {
        "default-deny-egress",
        "allow-dns-egress",
        "allow-mesh-egress",
        "allow-pod-identity-egress",
        "allow-egress-gateway-egress",
        "allow-hugging-face-egress",
    }
    (dns,) = egress["allow-dns-egress"]
    assert dns["to"] == [
        {
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}},
            "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}},
        }
    ]
    assert {(p["protocol"], p["port"]) for p in dns["ports"]} == {("UDP", 53), ("TCP", 53)}
    (mesh,) = egress["allow-mesh-egress"]
    assert mesh["to"][0]["podSelector"] == {"matchLabels": {"app": "istiod"}} and mesh["ports"] == [
        {"protocol": "TCP", "port": 15012}
    ]
    (gateway,) = egress["allow-egress-gateway-egress"]
    assert gateway == {
        "to": [
            {
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "istio-egress"}},
                "podSelector": {"matchLabels": {"istio": "egressgateway"}},
            }
        ],
        "ports": [{"protocol": "TCP", "port": 443}],
    }
    (https,) = egress["allow-hugging-face-egress"]
    assert policies["allow-hugging-face-egress"]["podSelector"] == {
        "matchExpressions": [{"key": "app.kubernetes.io/component", "operator": "In", "values": ["model-server", "batch-job"]}]
    }
    assert https["ports"] == [{"protocol": "TCP", "port": 443}]
    assert [b["ipBlock"] for b in https["to"]] == [
        {"cidr": "0.0.0.0/0", "except": ["169.254.169.254/32"]},
        {"cidr": "::/0", "except": ["fd00:ec2::254/128"]},
    ]
    (agent,) = egress["allow-pod-identity-egress"]
    assert agent["ports"] == [{"protocol": "TCP", "port": 80}]
    assert "169.254.169.254/32" not in json.dumps(agent)
    # prod as shipped: its serving tenant reads S3 alone (the mirror's copies), so no pod of it reaches a public address.
    shipped = [p["spec"] for p in manifests(mirrored, "NetworkPolicy", "serving")]
    assert not [b for p in shipped for rule in p.get("egress", []) for b in rule["to"] if "0.0.0.0/0" in json.dumps(b)]


def test_only_knatives_activator_and_autoscaler_reach_tenant_servers(prod):
    policy = prod.k8s("AuthorizationPolicy", "allow-gateway-and-namespace", "serving")
    sources = [(rule["from"][0]["source"], rule.get("to")) for rule in policy["spec"]["rules"]]
    assert ({"namespaces": ["serving"]}, None) in sources
    assert not [s for s, _ in sources if "knative-serving" in s.get("namespaces", [])]
    assert ({"principals": ["cluster.local/ns/knative-serving/sa/activator"]}, None) in sources
    # The autoscaler shares the `controller` account with Knative's webhook and controller: it
    # may only scrape queue-proxy's autoscaling metrics.
    assert ({"principals": ["cluster.local/ns/knative-serving/sa/controller"]}, [{"operation": {"ports": ["9090"]}}]) in sources
    # team-a runs no Knative model: no Knative identity gets in.
    team_a = prod.k8s("AuthorizationPolicy", "allow-gateway-and-namespace", "team-a")
    assert "knative-serving" not in json.dumps(team_a)


def test_every_node_group_requires_imdsv2_with_one_hop(prod):
    templates = {r["name"]: r["inputs"] for r in prod.of_type("aws:ec2/launchTemplate:LaunchTemplate")}
    groups = prod.of_type("aws:eks/nodeGroup:NodeGroup")
    assert {g["name"] for g in groups} == {"cluster-system", "h100-nodes", "l4-batch-nodes"}
    for group in groups:
        template_name = group["inputs"]["launchTemplate"]["id"].removesuffix("-id")
        assert templates[template_name]["metadataOptions"] == {
            "httpEndpoint": "enabled",
            "httpTokens": "required",
            "httpPutResponseHopLimit": 1,
        }, group["name"]
        assert "diskSize" not in group["inputs"]


def test_controllers_are_told_what_they_would_ask_instance_metadata(prod):
    releases = {r["inputs"]["name"]: r["inputs"]["values"] for r in prod.of_type("kubernetes:helm.sh/v3:Release")}
    # (vpcId is the EKS cluster's, known only once AWS has made it: the mock leaves it unknown.)
    assert releases["aws-load-balancer-controller"]["region"] == "us-east-1"
    assert releases["cluster-autoscaler"]["awsRegion"] == "us-east-1"


def test_the_weights_fetcher_does_not_probe_instance_metadata():
    raw = downloading_weights(raw_stack("prod"))
    raw["models"][2]["versions"][0]["source"] = {"s3Uri": "s3://weights-bucket/llama-1b", "revision": "v1"}
    owning(raw, "team-a", "s3://weights-bucket/llama-1b")
    server = next(s for m in validate(raw).models for s in m.servers if s.model.name == "llama-1b")
    fetcher = pod_spec.weights_init_container(server)
    assert fetcher is not None
    assert {"name": "AWS_EC2_METADATA_DISABLED", "value": "true"} in fetcher["env"]


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


def _pod_templates(manifests: list[dict]) -> list[tuple[dict, dict]]:
    """(workload, pod template) of every Deployment and Knative Service."""
    return [
        (m, m["spec"]["template"])
        for m in manifests
        if m["kind"] in ("Deployment", "Service") and "template" in m.get("spec", {})
    ]


@pytest.mark.parametrize("stack", ["dev", "staging", "prod", "prod-downloading"])
def test_model_servers_reach_outside_only_what_they_read(stack: str) -> None:
    """Each model server's sidecar lets out only what its namespace's ServiceEntries name (REGISTRY_ONLY), and those
    name every bucket its arguments read (both addressing styles) and Hugging Face where it downloads from there; its
    credentials call to the Pod Identity Agent goes around the sidecar. The endpoint pickers, which read the servers'
    metrics by pod address, are left to pass through."""
    raw = downloading_weights(raw_stack("prod")) if stack == "prod-downloading" else raw_stack(stack)
    manifests = Evaluated(raw, shared=True).manifests()
    hosts: dict[str, set[str]] = {}
    for entry in (m for m in manifests if m["kind"] == "ServiceEntry"):
        wildcards = any(host.startswith("*.") for host in entry["spec"]["hosts"])
        assert entry["spec"]["exportTo"] == ["."] and entry["spec"]["resolution"] == ("DYNAMIC_DNS" if wildcards else "DNS")
        assert entry["spec"]["ports"] == [{"number": 443, "name": "tls", "protocol": "TLS"}]
        hosts.setdefault(entry["metadata"]["namespace"], set()).update(entry["spec"]["hosts"])
    restricting = _restricting_sidecars(manifests)
    servers = 0
    for workload, template in _pod_templates(manifests):
        namespace, labels = workload["metadata"]["namespace"], template["metadata"].get("labels", {})
        selected = _selected(restricting, namespace, labels)
        if labels.get("app.kubernetes.io/component") == "endpoint-picker":
            assert not selected, workload["metadata"]["name"]
        if labels.get("app.kubernetes.io/component") != "model-server":
            continue
        servers += 1
        assert selected, workload["metadata"]["name"]
        (server,) = [c for c in template["spec"]["containers"] if c["name"] == "vllm"]
        text = json.dumps(server)
        for bucket in re.findall(r"s3://([a-z0-9.-]+)/", text):
            assert {f"{bucket}.s3.us-east-1.amazonaws.com", f"{bucket}.s3.amazonaws.com"} <= hosts[namespace]
        command = [*server.get("command", []), *server.get("args", [])]
        model = command[command.index("serve") + 1] if "serve" in command else server["args"][0]
        if not model.startswith(("s3://", "/")):
            assert "huggingface.co" in hosts[namespace], model
        excluded = template["metadata"]["annotations"]["traffic.sidecar.istio.io/excludeOutboundIPRanges"].split(",")
        assert "169.254.170.23/32" in excluded
    assert servers


def _restricting_sidecars(manifests: list[dict]) -> dict[str, list[dict]]:
    """The workload selectors of each namespace's REGISTRY_ONLY Sidecars that see only the namespace's own hosts."""
    restricting: dict[str, list[dict]] = {}
    for s in manifests:
        if s["kind"] == "Sidecar" and s["spec"]["outboundTrafficPolicy"]["mode"] == "REGISTRY_ONLY":
            assert s["spec"]["egress"] == [{"hosts": ["./*", "istio-egress/istio-egressgateway.istio-egress.svc.cluster.local"]}]
            restricting.setdefault(s["metadata"]["namespace"], []).append(s["spec"]["workloadSelector"]["labels"])
    return restricting


def _selected(restricting: dict[str, list[dict]], namespace: str, labels: dict) -> bool:
    return any(all(labels.get(k) == v for k, v in selector.items()) for selector in restricting.get(namespace, []))


def test_batch_pods_run_the_mesh_natively_and_reach_outside_only_what_they_read_and_write() -> None:
    """A batch job's pods keep the mesh's sidecar as a native one (it ends with the Job), sized as the servers' is; a
    REGISTRY_ONLY Sidecar selects them; the namespace's ServiceEntries name every bucket their scripts and runner
    name (input, output, weights, adapters) and Hugging Face where the runner downloads a model or dataset; their
    credentials call to the Pod Identity Agent goes around the sidecar (prod's jobs; no other stack runs one)."""
    manifests = Evaluated(raw_stack("prod"), shared=True).manifests()
    hosts: dict[str, set[str]] = {}
    for entry in (m for m in manifests if m["kind"] == "ServiceEntry"):
        hosts.setdefault(entry["metadata"]["namespace"], set()).update(entry["spec"]["hosts"])
    restricting = _restricting_sidecars(manifests)
    jobs = [m for m in manifests if m["kind"] == "Job" and m["metadata"]["namespace"] in restricting]
    assert jobs
    for job in jobs:
        template, namespace = job["spec"]["template"], job["metadata"]["namespace"]
        labels, annotations = template["metadata"]["labels"], template["metadata"]["annotations"]
        assert "sidecar.istio.io/inject" not in labels and "sidecar.istio.io/inject" not in annotations
        assert annotations["sidecar.istio.io/nativeSidecar"] == "true"
        assert (annotations["sidecar.istio.io/proxyCPU"], annotations["sidecar.istio.io/proxyMemory"]) == ("100m", "512Mi")
        assert _selected(restricting, namespace, labels), job["metadata"]["name"]
        text = json.dumps(template["spec"])
        buckets = set(re.findall(r"s3://([a-z0-9.-]+)/", text)) | set(re.findall(r"'s3://([a-z0-9.-]+)'", text))
        assert buckets
        for bucket in buckets:
            assert {f"{bucket}.s3.us-east-1.amazonaws.com", f"{bucket}.s3.amazonaws.com"} <= hosts[namespace], bucket
        (runner,) = [c for c in template["spec"]["containers"] if c["name"] == "runner"]
        model = runner["args"][runner["args"].index("--model") + 1]
        dataset = [e for e in runner["env"] if e["name"] == "BATCH_INPUT_HF_REPO"]
        if not model.startswith("/") or dataset:
            assert "huggingface.co" in hosts[namespace] and "*.hf.co" in hosts[namespace], model
        excluded = annotations["traffic.sidecar.istio.io/excludeOutboundIPRanges"].split(",")
        assert "169.254.170.23/32" in excluded


def _selects(selector: dict, labels: dict) -> bool:
    """A NetworkPolicy podSelector (matchLabels, and In and NotIn expressions, the only kinds the tenancy uses)."""
    if any(labels.get(k) != v for k, v in selector.get("matchLabels", {}).items()):
        return False
    return all((labels.get(e["key"]) in e["values"]) == (e["operator"] == "In") for e in selector.get("matchExpressions", []))


@pytest.mark.parametrize("stack", ["staging", "prod"])
def test_endpoint_pickers_reach_https_only_inside_private_addresses(stack: str) -> None:
    """The pickers talk to the API server and their servers only: of the egress policies that select their pods,
    none lets HTTPS out beyond the private address ranges, while the servers' (whose sidecars connect to S3 and
    Hugging Face) reach the egress gateway, and anywhere but instance metadata only where their namespace names
    Hugging Face's wildcard download hosts (staging's tenants; none of prod's servers)."""
    manifests = Evaluated(raw_stack(stack), shared=True).manifests()
    policies = [m for m in manifests if m["kind"] == "NetworkPolicy" and "Egress" in m["spec"]["policyTypes"]]
    wildcards = {m["metadata"]["namespace"] for m in manifests if m["kind"] == "ServiceEntry" and "*.hf.co" in m["spec"]["hosts"]}
    pickers = servers = 0
    for workload, template in _pod_templates(manifests):
        labels, namespace = template["metadata"].get("labels", {}), workload["metadata"]["namespace"]
        component = labels.get("app.kubernetes.io/component")
        if component not in ("endpoint-picker", "model-server"):
            continue
        peers = [
            peer
            for p in policies
            if p["metadata"]["namespace"] == namespace and _selects(p["spec"]["podSelector"], labels)
            for rule in p["spec"].get("egress", [])
            if any(port.get("port") == 443 for port in rule.get("ports", []))
            for peer in rule.get("to", [])
        ]
        cidrs = {peer["ipBlock"]["cidr"] for peer in peers if "ipBlock" in peer}
        if component == "endpoint-picker":
            pickers += 1
            assert cidrs == {"10.0.0.0/8", "100.64.0.0/10", "172.16.0.0/12", "192.168.0.0/16", "fc00::/7"}, workload["metadata"][
                "name"
            ]
        else:
            servers += 1
            assert {"podSelector": {"matchLabels": {"istio": "egressgateway"}}}.items() <= next(
                peer for peer in peers if "namespaceSelector" in peer
            ).items()
            assert cidrs == ({"0.0.0.0/0", "::/0"} if namespace in wildcards else set()), workload["metadata"]["name"]
    assert pickers and servers


# Address space that is not the internet's: the private ranges (RFC 1918, RFC 6598's shared space, IPv6 unique local
# addresses) and link-local (where EKS's Pod Identity Agent answers).
NOT_PUBLIC = tuple(
    ipaddress.ip_network(cidr)
    for cidr in ("10.0.0.0/8", "100.64.0.0/10", "172.16.0.0/12", "192.168.0.0/16", "169.254.0.0/16", "fc00::/7")
)


def _public_blocks(evaluated: Evaluated, namespaces: set[str]) -> dict[str, list[str]]:
    """By `namespace/name`, the address blocks beyond NOT_PUBLIC of every egress NetworkPolicy of `namespaces`."""
    found: dict[str, list[str]] = {}
    for policy in evaluated.manifests():
        namespace = policy["metadata"].get("namespace")
        if policy["kind"] != "NetworkPolicy" or namespace not in namespaces or "Egress" not in policy["spec"]["policyTypes"]:
            continue
        for rule in policy["spec"].get("egress", []):
            assert rule.get("to"), f"{namespace}/{policy['metadata']['name']}: an egress rule without peers"
            for peer in rule["to"]:
                network = ipaddress.ip_network(peer["ipBlock"]["cidr"]) if "ipBlock" in peer else None
                if network is not None and not any(
                    network.version == outer.version and network.subnet_of(outer)  # type: ignore[arg-type]
                    for outer in NOT_PUBLIC
                ):
                    found.setdefault(f"{namespace}/{policy['metadata']['name']}", []).append(str(network))
    return found


def test_in_production_no_tenant_network_policy_reaches_a_public_address(mirrored, prod):
    """Prod reads every Hugging Face revision its tenants' pods use from the weight mirror's copies (team-b's batch
    jobs' and labeller's Qwen among them): no egress NetworkPolicy of a tenant's names a public address, whatever the
    port, no ServiceEntry of a tenant's names Hugging Face, and only the mirror's own namespace reaches HTTPS anywhere.
    The same stack without its mirror (outside production only) keeps the download rule for its servers and jobs."""
    tenants = {t["name"] for t in raw_stack("prod")["tenants"]}
    assert _public_blocks(mirrored, tenants) == {}
    hosts = {h for t in tenants for entry in manifests(mirrored, "ServiceEntry", t) for h in entry["spec"]["hosts"]}
    assert hosts and not [h for h in hosts if "huggingface" in h or h.endswith("hf.co")]
    assert _public_blocks(mirrored, {"model-weights"}) == {"model-weights/allow-https-egress": ["0.0.0.0/0", "::/0"]}
    downloading = _public_blocks(prod, tenants)
    assert set(downloading) == {f"{t}/allow-hugging-face-egress" for t in tenants}, downloading


def _with_batch_sources(model: dict[str, Any], dataset: bool, mirror: bool) -> dict[str, Any]:
    """Prod with team-b's jobs reading `model`, the first one a Hugging Face dataset (`dataset`) instead of its S3
    input; without its weight mirror (`mirror` false) and then outside production, where a stack may do without."""
    raw = owning(copy.deepcopy(raw_stack("prod")), "team-b", "s3://team-b-weights")
    for job in raw["batchJobs"]:
        job["model"]["source"] = copy.deepcopy(model)
    if dataset:
        raw["batchJobs"][0]["input"] = {
            "huggingface": "team-b/tickets",
            "revision": "0123456789abcdef0123456789abcdef01234567",
            "files": ["tickets.jsonl"],
        }
    if dataset:
        raw["environment"] = "staging"
    return raw if mirror else downloading_weights(raw)


QWEN_7B = {"huggingface": "Qwen/Qwen2.5-7B-Instruct", "revision": "a09a35458c702b33eeacc393d103063234e8bc28"}
TEAM_B_WEIGHTS = {"s3Uri": "s3://team-b-weights/qwen", "revision": "r1"}


@pytest.mark.parametrize(
    ("model", "dataset", "mirror", "buckets", "hugging_face"),
    [
        (QWEN_7B, False, True, ("inference-prod-model-weights", "team-b-batch"), False),
        (QWEN_7B, False, False, ("team-b-batch",), True),
        (TEAM_B_WEIGHTS, False, True, ("team-b-batch", "team-b-weights"), False),
        (TEAM_B_WEIGHTS, True, True, ("team-b-batch", "team-b-weights"), True),
    ],
    ids=["hugging-face-model-from-the-mirror", "hugging-face-model-without-a-mirror", "s3-model", "s3-model-dataset-input"],
)  # fmt: skip
def test_a_tenants_egress_names_what_its_batch_jobs_read_and_write(model, dataset, mirror, buckets, hugging_face) -> None:
    """Team-b runs no model server in prod: what its namespace lets out is its jobs' weights (the weight mirror's
    copy of a Hugging Face model, where the stack has a mirror), input and output buckets, and Hugging Face only
    while a job downloads a model or dataset from there itself (outside production only)."""
    egress = validate(_with_batch_sources(model, dataset, mirror)).egress["team-b"]
    assert (egress.buckets, egress.hugging_face, egress.batch_jobs) == (buckets, hugging_face, True)
    assert validate(copy.deepcopy(raw_stack("prod"))).egress["serving"].batch_jobs is False
