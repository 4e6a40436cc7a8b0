"""Least-privilege tenants' network (issue 12): egress and mesh isolation, node metadata locked to the node,
and what each tenant's servers, batch pods and endpoint pickers may reach outside: what they read and write, by
host, never a public address in production."""

from __future__ import annotations

import copy
import ipaddress
import json
import re
from typing import Any

import pytest

from components.specs import pod as pod_spec

from . import tenant_security_helpers
from .helpers import Evaluated, downloading_weights, owning, raw_stack, validate
from .tenant_security_helpers import manifests

# The module fixtures of the tenant security tests (tests/tenant_security_helpers.py), bound here for pytest to find.
prod, mirrored = tenant_security_helpers.prod, tenant_security_helpers.mirrored


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
