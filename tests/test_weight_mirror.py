"""The weight mirror (`weightMirror`): every Hugging Face revision a tenant's pods read (servers' weights, LoRA
adapters, batch jobs' models) is copied once to S3 by a Job in the `model-weights` namespace; the servers on streaming
pools stream the copy (vLLM's Run:ai streamer loader), every other reader copies it with the aws CLI, and each waits
for its Job; each tenant's copies are under its own prefix, written by its own role and read by its own pods. Its
config errors and the runner that copies: tests/test_weight_mirror_runner.py."""

from __future__ import annotations

import json
import re

import pytest

from components.mirror_runner import mirror_runner as runner
from components.specs.weight_mirror import RUNNER_SOURCE
from platform_config import parse_platform_config
from platform_config.cold_start import cold_start, streams_weights
from platform_config.namespaces import MIRROR_NAMESPACE
from platform_config.weight_mirror import (
    MIRROR_DEADLINE_FLOOR_SECONDS,
    copy_pool,
    mirror_job_name,
    mirrored_revisions,
)

from .helpers import ROOT, Evaluated, owning, prod_with_labeller_server, raw_stack, run_preview, validate, write_stack
from .weight_mirror_helpers import BUCKET, copy_of

TOKENS = json.dumps({"serving": "hf_serving_token", "team-a": "hf_team_a_token"})
LLAMA_70B = "meta-llama/Llama-3.1-70B-Instruct@1605565b47bb9346c5515c34102e054115b4f98b"
LLAMA_8B = "meta-llama/Llama-3.1-8B-Instruct@0e9e39f249a16976918f6564b8830bc894c89659"
LLAMA_1B = "meta-llama/Llama-3.2-1B-Instruct@9213176726f574b556790deb65791e0c5aa438b6"
QWEN_7B = "Qwen/Qwen2.5-7B-Instruct@a09a35458c702b33eeacc393d103063234e8bc28"
JOB = "kubernetes:batch/v1:Job"


@pytest.fixture(scope="module")
def prod() -> Evaluated:
    return Evaluated(raw_stack("prod"), secrets={"inference-platform:huggingFaceTokens": TOKENS}, shared=True)


def server_spec(prod: Evaluated, kind: str, name: str, namespace: str) -> dict:
    obj = prod.k8s(kind, name, namespace)
    return obj["spec"]["template"]["spec"]


def jobs(prod: Evaluated) -> dict[str, dict]:
    return {
        job["metadata"]["annotations"]["inference.platform/mirrors"]: job
        for job in prod.manifests()
        if job["kind"] == "Job" and job["metadata"]["namespace"] == MIRROR_NAMESPACE
    }


# --- the plan -------------------------------------------------------------------------------


def test_prod_streams_every_version_from_its_tenants_copy(prod):
    expected = {
        ("Deployment", "llama-70b-v1", "serving"): copy_of(LLAMA_70B, "serving"),
        ("Service", "llama-8b-v1", "serving"): copy_of(LLAMA_8B, "serving"),
        ("Service", "llama-8b-v2", "serving"): copy_of(LLAMA_8B, "serving"),
        ("Deployment", "llama-1b-v1", "team-a"): copy_of(LLAMA_1B, "team-a"),
        ("Service", "llama-8b-batch-v1", "serving"): copy_of(LLAMA_8B, "serving"),
    }
    for (kind, name, namespace), copy in expected.items():
        obj = prod.k8s(kind, name, namespace)
        (vllm,) = [c for c in obj["spec"]["template"]["spec"]["containers"] if c["name"] == "vllm"]
        args = vllm["args"]
        assert args[0] == copy and args[args.index("--load-format") + 1] == "runai_streamer", name
        # The copy is of a pinned revision: no --revision for an S3 folder, and no token in the server.
        assert "--revision" not in args and "HF_TOKEN" not in {e["name"] for e in vllm["env"]}
        source = obj["spec"]["template"]["metadata"]["annotations"]["inference.platform/weights-mirrored-from"]
        assert copy == copy_of(source, namespace)


def test_each_revision_is_copied_once_per_tenant():
    config = parse_platform_config(raw_stack("prod"))
    revisions = {(r.tenant, f"{r.repo}@{r.revision}"): r for r in mirrored_revisions(config)}
    assert set(revisions) == {("serving", LLAMA_70B), ("serving", LLAMA_8B), ("team-a", LLAMA_1B), ("team-b", QWEN_7B)}
    # The 8B's stable and canary and its batch model serve the same revision: one copy, which all three wait for.
    assert revisions[("serving", LLAMA_8B)].models == ("llama-8b", "llama-8b-batch")
    # Team-b's two batch jobs run one model: one copy, which both wait for.
    assert revisions[("team-b", QWEN_7B)].batch_jobs == ("ticket-labels", "review-labels")
    assert revisions[("team-b", QWEN_7B)].models == ()
    # The same revision in another tenant is another copy, under that tenant's prefix.
    raw = raw_stack("prod")
    one_b = next(m for m in raw["models"] if m["name"] == "llama-1b")
    one_b["versions"][0]["source"] = next(m for m in raw["models"] if m["name"] == "llama-8b")["versions"][0]["source"]
    tenants = sorted(r.tenant for r in mirrored_revisions(parse_platform_config(raw)) if f"{r.repo}@{r.revision}" == LLAMA_8B)
    assert tenants == ["serving", "team-a"]


@pytest.mark.parametrize(
    "tenant, repo",
    [
        ("analytics-team", "meta-llama/Llama-3.1-Nemotron-70B-Instruct-HF"),
        ("a" * 30, "org/" + "x" * 96),
        ("serving", "meta-llama/Llama-3.1-70B-Instruct"),
    ],
)
def test_job_names_are_dns_labels_that_change_with_the_revision(tenant, repo):
    name = mirror_job_name(tenant, repo, "f" * 40)
    assert len(name) <= 63 and re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", name), name
    assert name != mirror_job_name(tenant, repo, "e" * 40)
    assert name != mirror_job_name(tenant + "x", repo, "f" * 40)


def test_the_copy_runs_on_a_pool_that_serves_it_and_keeps_nodes_up():
    config = parse_platform_config(raw_stack("prod"))
    # The 8B's copy: read on l4-batch (no node at rest) and h100 (2 nodes at least): h100, where no node starts for it.
    assert copy_pool(config, ("l4-batch", "h100")) == "h100"
    # Read only on l4-batch: its first node starts for the copy, which its readers would start next.
    assert copy_pool(config, ("l4-batch",)) == "l4-batch"
    pools = {f"{r.repo}@{r.revision}": r.pool for r in mirrored_revisions(config)}
    assert pools == {LLAMA_70B: "h100", LLAMA_8B: "h100", LLAMA_1B: "h100", QWEN_7B: "l4-batch"}


def test_a_pool_that_caches_its_weights_copies_the_mirrors_copy_too(prod_raw):
    """With a mirror, a server on a pool that caches weights reads the copy too: its init container copies the
    folder from S3 onto the node's cache, and vLLM loads it from there, offline."""
    prod_raw["nodePools"][1]["weightCache"] = {"medium": "instanceStore"}
    config = parse_platform_config(prod_raw)
    assert not streams_weights(config.node_pools[1])
    revision = next(r for r in mirrored_revisions(config) if f"{r.repo}@{r.revision}" == LLAMA_8B)
    assert revision.models == ("llama-8b", "llama-8b-batch")
    service = Evaluated(prod_raw, secrets={"inference-platform:huggingFaceTokens": TOKENS}).k8s(
        "Service", "llama-8b-batch-v1", "serving"
    )
    spec = service["spec"]["template"]["spec"]
    (fetch,) = [c for c in spec["initContainers"] if c["name"] == "fetch-weights"]
    (vllm,) = [c for c in spec["containers"] if c["name"] == "vllm"]
    assert fetch["command"][:3] == ["aws", "s3", "sync"] and fetch["command"][-2] == copy_of(LLAMA_8B, "serving")
    assert vllm["args"][0] == fetch["command"][-1] and "--load-format" not in vllm["args"]
    env = {e["name"]: e.get("value") for e in vllm["env"]}
    assert env["HF_HUB_OFFLINE"] == "1" and "HF_TOKEN" not in env


def test_the_70b_on_p5_starts_in_under_five_minutes_from_the_mirror():
    config = parse_platform_config(raw_stack("prod"))
    start = cold_start(config, next(m for m in config.models if m.name == "llama-70b"))
    assert start.medium == "s3Stream" and start.total_seconds == 215 < 300
    assert start.arithmetic() in (ROOT / "docs" / "design" / "cold-start.md").read_text()


def test_production_refuses_a_batch_job_downloading_from_hugging_face_without_a_mirror(tmp_path, prod_raw):
    """A careless change: prod without its weight mirror, its servers given S3 weights of their own, its batch jobs
    still on Hugging Face. The preview, as a user runs it, exits 2 naming each job's source and saying to set
    `weightMirror`: no tenant's pod downloads from Hugging Face in production."""
    prod_raw.pop("weightMirror")
    by_name = {model["name"]: model for model in prod_raw["models"]}
    for model in prod_raw["models"]:
        if model["name"] not in {m.get("batchModel") for m in prod_raw["models"]}:
            source = {"s3Uri": f"s3://inference-prod-weights/{model['name']}", "revision": "2026-11-30"}
            owning(prod_raw, model["tenant"], source["s3Uri"])
            for version in model["versions"] + (by_name[model["batchModel"]]["versions"] if "batchModel" in model else []):
                version["source"] = dict(source)
    out = tmp_path / "out"
    result = run_preview("--stack", "test", "--config-file", str(write_stack(tmp_path, prod_raw)), "--out", str(out))
    assert result.returncode == 2, result.stderr
    problems = [line.strip().removeprefix("- ") for line in result.stderr.splitlines() if "inference-platform:" in line]
    assert [p.split(": ", 1)[0] for p in problems] == [
        "inference-platform:batchJobs[0].model.source",
        "inference-platform:batchJobs[1].model.source",
    ], result.stderr
    assert all("is Hugging Face ('Qwen/Qwen2.5-7B-Instruct')" in p and "set 'weightMirror'" in p for p in problems)
    assert "Traceback" not in result.stderr and not out.exists()
    # Outside production the same stack is valid: its jobs download the model themselves.
    prod_raw["environment"] = "staging"
    assert all(job.reads_hugging_face for job in validate(prod_raw).batch_jobs)


# --- the objects ----------------------------------------------------------------------------


def test_prod_batch_jobs_copy_their_model_from_their_tenants_copy(prod):
    """Team-b's batch jobs read the mirror's copy of their Hugging Face model, under team-b's part of the mirror:
    `fetch-weights` copies it with the aws CLI, the engine loads it from there with the Hub offline, the job's role
    reads it, and nothing in the pod holds a Hugging Face token."""
    copy = copy_of(QWEN_7B, "team-b")
    for name in ("ticket-labels", "review-labels"):
        spec = prod.k8s("Job", f"batch-{name}", "team-b")["spec"]["template"]["spec"]
        (fetch,) = [c for c in spec["initContainers"] if c["name"] == "fetch-weights"]
        (runner_container,) = [c for c in spec["containers"] if c["name"] == "runner"]
        assert fetch["command"] == ["aws", "s3", "sync", "--only-show-errors", copy, f"/models/weights/{name}"]
        args = runner_container["args"]
        assert args[args.index("--model") + 1] == f"/models/weights/{name}" and "--revision" not in args
        assert {"name": "HF_HUB_OFFLINE", "value": "1"} in runner_container["env"]
        assert "HF_TOKEN" not in json.dumps(spec) and "huggingface.co" not in json.dumps(spec)
        policy = json.loads(prod.one("aws:iam/rolePolicy:RolePolicy", f"{name}-identity-policy")["inputs"]["policy"])
        assert f"arn:aws:s3:::{copy.removeprefix('s3://')}*" in [s["Resource"] for s in policy["Statement"]]


def test_a_job_copies_each_revision_on_a_gpu_node_without_a_gpu_with_its_tenants_role(prod):
    found = jobs(prod)
    assert set(found) == {LLAMA_70B, LLAMA_8B, LLAMA_1B, QWEN_7B}
    job = found[LLAMA_70B]
    spec = job["spec"]["template"]["spec"]
    (copier,) = spec["containers"]
    env = {e["name"]: e for e in copier["env"]}
    assert env["MIRROR_DESTINATION"]["value"] == copy_of(LLAMA_70B, "serving")
    # The marker is beside the folder, never in it (vLLM pulls every non-weight file of the folder it streams).
    marker = env["MIRROR_MARKER"]["value"]
    assert marker == copy_of(LLAMA_70B, "serving").rstrip("/") + ".complete"
    assert not marker.startswith(copy_of(LLAMA_70B, "serving"))
    assert env["HF_TOKEN"]["valueFrom"]["secretKeyRef"] == {"name": "huggingface-token-serving", "key": "token"}
    assert spec["serviceAccountName"] == "mirror-serving"
    # On the h100 pool, whose nodes pre-pull the image it runs (the system nodes' 20 GiB disk has no room for it),
    # asking for no GPU.
    assert spec["nodeSelector"] == {"inference.platform/pool": "h100"}
    assert [t["key"] for t in spec["tolerations"]] == ["nvidia.com/gpu"]
    prepulled = prod.k8s("DaemonSet", "prepull-h100", "image-prepull")["spec"]["template"]["spec"]["containers"]
    assert copier["image"] in {c["image"] for c in prepulled}
    assert not [r for r in copier["resources"]["limits"] if r.startswith("nvidia.com/")]
    # Nothing on the node's disk but scratch: the copy streams from the download into the upload.
    assert [v["emptyDir"]["sizeLimit"] for v in spec["volumes"] if "emptyDir" in v] == ["1Gi", "1Gi"]
    assert copier["securityContext"]["readOnlyRootFilesystem"] and spec["securityContext"]["runAsNonRoot"]
    assert copier["command"] == ["python3", "/opt/mirror-runner/mirror_runner.py"]
    assert spec["restartPolicy"] == "Never" and job["spec"]["activeDeadlineSeconds"] == MIRROR_DEADLINE_FLOOR_SECONDS
    # The node's GPUs stay out of it, whatever the image's NVIDIA_VISIBLE_DEVICES.
    assert env["NVIDIA_VISIBLE_DEVICES"]["value"] == "void"
    # An eviction costs no retry; what no retry mends (the runner's exit code for it) fails the Job at once.
    evicted, permanent = job["spec"]["podFailurePolicy"]["rules"]
    assert evicted == {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]}
    assert permanent["action"] == "FailJob" and permanent["onExitCodes"]["containerName"] == copier["name"]
    assert permanent["onExitCodes"]["values"] == [runner.PERMANENT_FAILURE_EXIT_CODE]
    # A Job left failed is replaced by the next `pulumi up`, not awaited again.
    assert job["metadata"]["annotations"]["pulumi.com/replaceUnready"] == "true"
    # The runner it runs is the project's file.
    runner_map = prod.k8s("ConfigMap", "mirror-runner", MIRROR_NAMESPACE)
    assert runner_map["data"]["mirror_runner.py"] == RUNNER_SOURCE.read_text()


def test_a_new_runner_is_a_new_pod_template(tmp_path, monkeypatch):
    from components.specs import weight_mirror as specs

    revision = mirrored_revisions(parse_platform_config(raw_stack("prod")))[0]

    def digest() -> str:
        return specs.mirror_job(revision, token=False)["spec"]["template"]["metadata"]["annotations"][
            "inference.platform/mirror-runner-sha256"
        ]

    before = digest()
    changed = tmp_path / "mirror_runner.py"
    changed.write_text(RUNNER_SOURCE.read_text() + "\n# changed\n")
    monkeypatch.setattr(specs, "RUNNER_SOURCE", changed)
    assert digest() != before


def test_the_pre_pull_pods_see_no_gpu(prod):
    spec = prod.k8s("DaemonSet", "prepull-h100", "image-prepull")["spec"]["template"]["spec"]
    assert all({"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"} in c["env"] for c in spec["containers"])


def test_each_server_waits_for_its_own_revisions_job_and_pulumi_waits_for_the_job(prod):
    job_urns = {
        job["metadata"]["annotations"]["inference.platform/mirrors"]: next(
            r.urn for r in prod.records if r.type == JOB and r.name == f"weight-mirror-{job['metadata']['name']}"
        )
        for job in jobs(prod).values()
    }
    servers = {
        ("kubernetes:apps/v1:Deployment", "llama-70b-v1-deployment"): LLAMA_70B,
        ("kubernetes:apps/v1:Deployment", "llama-1b-v1-deployment"): LLAMA_1B,
        ("kubernetes:serving.knative.dev/v1:Service", "llama-8b-v1-knative-service"): LLAMA_8B,
        ("kubernetes:serving.knative.dev/v1:Service", "llama-8b-v2-knative-service"): LLAMA_8B,
        ("kubernetes:serving.knative.dev/v1:Service", "llama-8b-batch-v1-knative-service"): LLAMA_8B,
    }
    servers |= {(JOB, "ticket-labels-job"): QWEN_7B, (JOB, "review-labels-job"): QWEN_7B}
    for (kind, name), source in servers.items():
        (record,) = [r for r in prod.records if r.type == kind and r.name == name]
        waits = {s for s, urn in job_urns.items() if urn in record.dependencies}
        assert waits == {source}, name
    # The Jobs write only once the bucket, its settings and the gateway endpoint exist.
    storage = {r.urn for r in prod.records if r.type.startswith("aws:s3/bucket") or r.type == "aws:ec2/vpcEndpoint:VpcEndpoint"}
    assert len(storage) == 7
    for job in jobs(prod).values():
        (record,) = [r for r in prod.records if r.type == JOB and r.name == f"weight-mirror-{job['metadata']['name']}"]
        assert storage <= set(record.dependencies), job["metadata"]["name"]
    # pulumi-kubernetes holds a Job's creation until it completes (10 minutes unless told): longer than its deadline.
    for job in jobs(prod).values():
        (record,) = [r for r in prod.records if r.type == JOB and r.name == f"weight-mirror-{job['metadata']['name']}"]
        deadline = job["spec"]["activeDeadlineSeconds"]
        assert int(record.custom_timeouts["create"].removesuffix("s")) > deadline
        assert record.custom_timeouts["create"] == record.custom_timeouts["update"]


def test_each_job_waits_for_its_own_tenants_account_identity_and_token_not_another_tenants(prod):
    by_urn = {r.urn: r for r in prod.records}
    tenants = ("serving", "team-a", "team-b")
    for job in jobs(prod).values():
        (record,) = [r for r in prod.records if r.type == JOB and r.name == f"weight-mirror-{job['metadata']['name']}"]
        tenant = job["spec"]["template"]["spec"]["serviceAccountName"].removeprefix("mirror-")
        names = {by_urn[urn].name for urn in record.dependencies}
        waited = {t for t in tenants for name in names if name.startswith(f"weight-mirror-{t}-")}
        assert waited == {tenant}, job["metadata"]["name"]
        assert f"weight-mirror-{tenant}-service-account" in names
        (copier,) = job["spec"]["template"]["spec"]["containers"]
        reads_token = any(e["name"] == "HF_TOKEN" for e in copier["env"])
        assert (f"weight-mirror-{tenant}-huggingface-token" in names) == reads_token, job["metadata"]["name"]
        # Its identity: the component stands for its children (the role, its policy, the association).
        assert any(name.startswith(f"weight-mirror-{tenant}-identity") for name in names), job["metadata"]["name"]


def test_each_tenant_writes_only_its_prefix_and_its_servers_read_only_their_repository(prod):
    def policy(name: str) -> dict:
        return json.loads(prod.one("aws:iam/rolePolicy:RolePolicy", name)["inputs"]["policy"])

    for tenant in ("serving", "team-a", "team-b"):
        statements = policy(f"weight-mirror-{tenant}-identity-policy")["Statement"]
        assert {"s3:PutObject", "s3:AbortMultipartUpload"} <= set(statements[0]["Action"])
        assert {r for s in statements for r in [s["Resource"]]} == {f"arn:aws:s3:::{BUCKET}/{tenant}/*", f"arn:aws:s3:::{BUCKET}"}
        (listing,) = [s for s in statements if s["Action"] == ["s3:ListBucket"]]
        assert listing["Condition"]["StringLike"]["s3:prefix"] == [f"{tenant}/*"]
    reads = policy("llama-1b-weights-identity-policy")["Statement"]
    assert [s["Resource"] for s in reads if s["Action"] == ["s3:GetObject"]] == [
        f"arn:aws:s3:::{BUCKET}/team-a/meta-llama/Llama-3.2-1B-Instruct/*"
    ]
    association = prod.one("aws:eks/podIdentityAssociation:PodIdentityAssociation", "weight-mirror-team-a-identity-association")
    assert (association["inputs"]["namespace"], association["inputs"]["serviceAccount"]) == (MIRROR_NAMESPACE, "mirror-team-a")


def test_the_bucket_is_private_encrypted_tls_only_and_cleans_up_abandoned_uploads(prod):
    assert prod.one("aws:s3/bucket:Bucket", "weight-mirror-bucket")["inputs"]["bucket"] == BUCKET
    block = prod.one("aws:s3/bucketPublicAccessBlock:BucketPublicAccessBlock", "weight-mirror-public-access-block")["inputs"]
    assert all(block[k] is True for k in ("blockPublicAcls", "blockPublicPolicy", "ignorePublicAcls", "restrictPublicBuckets"))
    ownership = prod.one("aws:s3/bucketOwnershipControls:BucketOwnershipControls", "weight-mirror-ownership")["inputs"]
    assert ownership["rule"]["objectOwnership"] == "BucketOwnerEnforced"
    (deny,) = json.loads(prod.one("aws:s3/bucketPolicy:BucketPolicy", "weight-mirror-tls-only")["inputs"]["policy"])["Statement"]
    assert deny["Effect"] == "Deny" and deny["Condition"] == {"Bool": {"aws:SecureTransport": "false"}}
    lifecycle = prod.one("aws:s3/bucketLifecycleConfiguration:BucketLifecycleConfiguration", "weight-mirror-lifecycle")["inputs"]
    assert lifecycle["rules"][0]["abortIncompleteMultipartUpload"] == {"daysAfterInitiation": 1}
    endpoint = prod.one("aws:ec2/vpcEndpoint:VpcEndpoint", "weight-mirror-s3-gateway-endpoint")["inputs"]
    assert endpoint["vpcEndpointType"] == "Gateway" and endpoint["serviceName"] == "com.amazonaws.us-east-1.s3"
    assert endpoint["routeTableIds"] == raw_stack("prod")["weightMirror"]["s3GatewayEndpoint"]["routeTableIds"]


def test_an_existing_bucket_is_not_created(prod_raw):
    prod_raw["weightMirror"] = {"bucket": "someone-elses-weights", "create": False}
    evaluated = Evaluated(prod_raw)
    assert evaluated.of_type("aws:s3/bucket:Bucket") == [] and evaluated.of_type("aws:ec2/vpcEndpoint:VpcEndpoint") == []
    destinations = [
        env["value"]
        for job in evaluated.manifests()
        if job["kind"] == "Job" and job["metadata"]["namespace"] == MIRROR_NAMESPACE
        for env in job["spec"]["template"]["spec"]["containers"][0]["env"]
        if env["name"] == "MIRROR_DESTINATION"
    ]
    assert len(destinations) == 4 and all(d.startswith("s3://someone-elses-weights/") for d in destinations)


def test_the_mirror_namespace_is_restricted_and_opens_only_its_egress(prod):
    namespace = prod.k8s("Namespace", MIRROR_NAMESPACE)
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"
    policies = {
        p["metadata"]["name"]: p["spec"]
        for p in prod.manifests()
        if p["kind"] == "NetworkPolicy" and p["metadata"]["namespace"] == MIRROR_NAMESPACE
    }
    assert set(policies) == {
        "default-deny-ingress",
        "default-deny-egress",
        "allow-dns-egress",
        "allow-pod-identity-egress",
        "allow-https-egress",
    }
    assert all(spec["policyTypes"] == ["Egress"] for name, spec in policies.items() if name != "default-deny-ingress")


def test_without_a_mirror_nothing_of_it_is_declared(prod_raw):
    # Outside production: there, a Hugging Face source needs the mirror (test_production_needs_the_mirror_...).
    prod_raw["environment"] = "staging"
    prod_raw.pop("weightMirror")
    for pool in prod_raw["nodePools"]:
        pool["weightCache"] = {"medium": "instanceStore"}
    evaluated = Evaluated(prod_raw)
    assert not [j for j in evaluated.of_type(JOB) if j["name"].startswith("weight-mirror")] and not [
        m for m in evaluated.manifests() if m["metadata"].get("namespace") == MIRROR_NAMESPACE
    ]


def test_a_tenant_without_a_token_copies_without_one():
    # team-b has no Hugging Face token (its labeller's model is not gated): its Job reads none.
    evaluated = Evaluated(prod_with_labeller_server(), secrets={"inference-platform:huggingFaceTokens": TOKENS}, shared=True)
    (labeller,) = [j for j in jobs(evaluated).values() if j["metadata"]["labels"]["inference.platform/tenant"] == "team-b"]
    assert "HF_TOKEN" not in {e["name"] for e in labeller["spec"]["template"]["spec"]["containers"][0]["env"]}
