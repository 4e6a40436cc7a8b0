"""Mistaken config values that tests/test_hostile_input.py previews (test_mistaken_config_value): the mutations they
are made of, and the values past a bound or of the wrong shape (BOUND_CASES): names with a trailing newline,
integers and durations out of range, labels, CIDRs and MIG counts the API would refuse, release shapes, colliding
names, whole blocks of the wrong type. The values a platform rule refuses: tests/hostile_rule_cases.py."""

from __future__ import annotations

from typing import Any, Callable

from .helpers import PROJECT, set_at

INT32_OVER = 2**31


def _set(*path_and_value: Any) -> Callable[[dict[str, Any]], None]:
    """A mutation setting the value at a path (keys and list indexes) of a raw stack config."""
    *path, value = path_and_value

    def mutate(raw: dict[str, Any]) -> None:
        set_at(raw, tuple(path), value)

    return mutate


def _many(*path_and_count: Any) -> Callable[[dict[str, Any]], None]:
    """The list at a path grown to `count` entries, copies of its first (the bound is checked before their names)."""
    *path, count = path_and_count

    def mutate(raw: dict[str, Any]) -> None:
        listed: Any = raw
        for key in path:
            listed = listed[key]
        set_at(raw, tuple(path), [listed[0]] * count)

    return mutate


def _collide_servers(raw: dict[str, Any]) -> None:
    # team-a's `qwen-small` + `v1` and team-b's `qwen` + `small-v1`: both servers `qwen-small-v1`.
    raw["models"][2]["name"] = "qwen-small"
    other = raw["models"][3]
    other["name"] = "qwen"
    other["versions"][0]["name"] = "small-v1"
    other["release"]["stable"] = "small-v1"


def _collide_in_one_tenant(raw: dict[str, Any]) -> None:
    _collide_servers(raw)
    raw["models"][3]["tenant"] = "team-a"


def _mig(profiles: dict[str, Any]) -> Callable[[dict[str, Any]], None]:
    return _set("nodePools", 0, "sharing", "migGeometry", "devices", 2, "profiles", profiles)


M = ("models", 0)
DEV_M = ("models", 0)
POOL = ("nodePools", 0)
EKS = ("cluster", "eks")

# (id, stack, mutation of its project config, the key the message must name)
BOUND_CASES: list[tuple[str, str, Callable[[dict[str, Any]], None], str]] = [
    # Names with a trailing newline: Python's `$` matches before it.
    ("newline-model-name", "dev", _set(*DEV_M, "name", "qwen-small\n"), "models[0].name"),
    ("newline-tenant-name", "dev", _set("tenants", 0, "name", "dev-team\n"), "tenants[0].name"),
    ("newline-pool-name", "dev", _set(*POOL, "name", "l4-shared\n"), "nodePools[0].name"),
    ("newline-cluster-name", "dev", _set("cluster", "name", "dev\n"), "cluster.name"),
    ("newline-version-name", "dev", _set(*DEV_M, "versions", 0, "name", "v1\n"), "models[0].versions[0].name"),
    ("newline-stable", "dev", _set(*DEV_M, "release", "stable", "v1\n"), "models[0].release.stable"),
    ("newline-served-name", "dev", _set(*DEV_M, "servedModelName", "qwen\n"), "models[0].servedModelName"),
    (
        "newline-huggingface",
        "dev",
        _set(*DEV_M, "versions", 0, "source", "huggingface", "Qwen/Qwen\n"),
        "models[0].versions[0].source.huggingface",
    ),
    (
        "newline-revision",
        "dev",
        _set(*DEV_M, "versions", 0, "source", "revision", "7ae557604adf67be50417f59c2c2f167def9a775\n"),
        "models[0].versions[0].source.revision",
    ),
    ("newline-image", "dev", _set(*DEV_M, "versions", 0, "image", "vllm/vllm-openai:v0.18.0\n"), "models[0].versions[0].image"),
    (
        "newline-override-header",
        "prod",
        _set("models", 1, "release", "overrideHeader", "x-version\n"),
        "models[1].release.overrideHeader",
    ),
    (
        "newline-subnet",
        "prod",
        _set(*EKS, "subnetIds", ["subnet-0f1e2d3c4b5a60001\n", "subnet-0f1e2d3c4b5a60002"]),
        "cluster.eks.subnetIds[0]",
    ),
    (
        "newline-admin-arn",
        "prod",
        _set(*EKS, "adminPrincipalArns", ["arn:aws:iam::123456789012:role/admin\n"]),
        "cluster.eks.adminPrincipalArns[0]",
    ),
    ("newline-region", "prod", _set(*EKS, "region", "us-east-1\n"), "cluster.eks.region"),
    ("not-a-region", "prod", _set(*EKS, "region", "mars-1"), "cluster.eks.region"),
    (
        "newline-geometry-name",
        "prod",
        _set(*POOL, "sharing", "migGeometry", "name", "mix\n"),
        "nodePools[0].sharing.migGeometry.name",
    ),
    (
        "newline-prometheus-url",
        "dev",
        _set("monitoring", {"installPrometheusStack": False, "prometheusUrl": "http://p\n"}),
        "monitoring.prometheusUrl",
    ),
    (
        "newline-duration",
        "dev",
        _set(*DEV_M, "autoscaling", "kpa", "scaleDownDelay", "5m\n"),
        "models[0].autoscaling.kpa.scaleDownDelay",
    ),
    # int32 fields out of range.
    ("int32-max-replicas", "dev", _set(*DEV_M, "autoscaling", "maxReplicas", INT32_OVER), "models[0].autoscaling.maxReplicas"),
    ("int32-min-replicas", "prod", _set(*M, "autoscaling", "minReplicas", INT32_OVER), "models[0].autoscaling.minReplicas"),
    ("int32-pool-max-size", "dev", _set(*POOL, "maxSize", INT32_OVER), "nodePools[0].maxSize"),
    ("int32-pool-min-size", "dev", _set(*POOL, "minSize", INT32_OVER), "nodePools[0].minSize"),
    (
        "int32-system-max-size",
        "prod",
        _set(*EKS, "systemNodeGroup", "maxSize", INT32_OVER),
        "cluster.eks.systemNodeGroup.maxSize",
    ),
    (
        "int32-queue-depth",
        "prod",
        _set(*M, "autoscaling", "hpa", "queueDepthTarget", INT32_OVER),
        "models[0].autoscaling.hpa.queueDepthTarget",
    ),
    (
        "int32-scale-up-pods",
        "prod",
        _set(*M, "autoscaling", "hpa", "scaleUpMaxPods", INT32_OVER),
        "models[0].autoscaling.hpa.scaleUpMaxPods",
    ),
    (
        "int32-target-concurrency",
        "dev",
        _set(*DEV_M, "autoscaling", "kpa", "targetConcurrency", INT32_OVER),
        "models[0].autoscaling.kpa.targetConcurrency",
    ),
    (
        "int32-initial-scale",
        "dev",
        _set(*DEV_M, "autoscaling", "kpa", "initialScale", INT32_OVER),
        "models[0].autoscaling.kpa.initialScale",
    ),
    ("int32-gpus", "dev", _set(*DEV_M, "resources", "gpus", INT32_OVER), "models[0].resources.gpus"),
    ("int32-tenant-pods", "dev", _set("tenants", 0, "quota", "pods", INT32_OVER), "tenants[0].quota.pods"),
    (
        "int32-request-timeout",
        "dev",
        _set("profiles", {"summarization": {"requestTimeoutSeconds": INT32_OVER}}),
        "profiles.summarization.requestTimeoutSeconds",
    ),
    ("huge-max-size", "dev", _set(*POOL, "maxSize", 10**30), "nodePools[0].maxSize"),
    ("negative-huge-min-size", "dev", _set(*POOL, "minSize", -(10**30)), "nodePools[0].minSize"),
    # Durations beyond protobuf's Duration, or not durations at all.
    (
        "duration-over-protobuf",
        "dev",
        _set(
            "traffic",
            {
                "tiers": {
                    "batch": {
                        "timeout": "315576000001s",
                        "maxPendingRequests": 1,
                        "maxRequests": 1,
                        "retryAttempts": 0,
                        "vllmPriority": 2,
                    }
                }
            },
        ),
        "traffic.tiers.batch.timeout",
    ),
    (
        "duration-hours-over-protobuf",
        "dev",
        _set(
            "traffic",
            {
                "tiers": {
                    "batch": {
                        "timeout": "99999999h",
                        "maxPendingRequests": 1,
                        "maxRequests": 1,
                        "retryAttempts": 0,
                        "vllmPriority": 2,
                    }
                }
            },
        ),
        "traffic.tiers.batch.timeout",
    ),
    (
        "duration-many-digits",
        "dev",
        _set(*DEV_M, "autoscaling", "kpa", "window", "9" * 5000 + "s"),
        "models[0].autoscaling.kpa.window",
    ),
    ("duration-exponent", "dev", _set(*DEV_M, "autoscaling", "kpa", "window", "1e3s"), "models[0].autoscaling.kpa.window"),
    (
        "duration-negative",
        "dev",
        _set(*DEV_M, "autoscaling", "kpa", "scaleDownDelay", "-5m"),
        "models[0].autoscaling.kpa.scaleDownDelay",
    ),
    (
        "duration-a-number",
        "dev",
        _set(*DEV_M, "autoscaling", "kpa", "scaleDownDelay", 300),
        "models[0].autoscaling.kpa.scaleDownDelay",
    ),
    # Knative's containerConcurrency limit.
    (
        "container-concurrency-1001",
        "prod",
        _set("models", 1, "autoscaling", "kpa", "containerConcurrency", 1001),
        "models[1].autoscaling.kpa.containerConcurrency",
    ),
    (
        "profile-concurrency-1001",
        "dev",
        _set("profiles", {"summarization": {"concurrencyPerReplica": 1001}}),
        "profiles.summarization.concurrencyPerReplica",
    ),
    # No memory or CPU on a GPU pod.
    ("zero-cpu", "dev", _set(*DEV_M, "resources", "cpu", "0"), "models[0].resources.cpu"),
    ("zero-millicpu", "dev", _set(*DEV_M, "resources", "cpu", "0m"), "models[0].resources.cpu"),
    ("zero-memory", "dev", _set(*DEV_M, "resources", "memory", "0Gi"), "models[0].resources.memory"),
    ("zero-cache", "dev", _set(*DEV_M, "resources", "cacheSize", "0"), "models[0].resources.cacheSize"),
    ("memory-trailing-newline", "dev", _set(*DEV_M, "resources", "memory", "32Gi\n"), "models[0].resources.memory"),
    ("cpu-a-number", "dev", _set(*DEV_M, "resources", "cpu", 2), "models[0].resources.cpu"),
    # Node labels the API server would refuse.
    ("label-key-space", "dev", _set(*POOL, "labels", {"team name": "a"}), "nodePools[0].labels.team name"),
    ("label-key-leading-dash", "dev", _set(*POOL, "labels", {"-team": "a"}), "nodePools[0].labels.-team"),
    (
        "label-key-uppercase-prefix",
        "dev",
        _set(*POOL, "labels", {"Example.com/team": "a"}),
        'nodePools[0].labels["Example.com/team"]',
    ),
    ("label-key-two-slashes", "dev", _set(*POOL, "labels", {"a/b/c": "a"}), "nodePools[0].labels.a/b/c"),
    ("label-key-empty-prefix", "dev", _set(*POOL, "labels", {"/team": "a"}), "nodePools[0].labels./team"),
    ("label-key-64-chars", "dev", _set(*POOL, "labels", {"k" * 64: "a"}), "nodePools[0].labels." + "k" * 64),
    ("label-key-newline", "dev", _set(*POOL, "labels", {"team\n": "a"}), "nodePools[0].labels.team\n"),
    (
        "label-key-node-role",
        "dev",
        _set(*POOL, "labels", {"node-role.kubernetes.io/gpu": ""}),
        'nodePools[0].labels["node-role.kubernetes.io/gpu"]',
    ),
    ("label-key-k8s-io", "dev", _set(*POOL, "labels", {"k8s.io/team": "a"}), 'nodePools[0].labels["k8s.io/team"]'),
    (
        "label-key-node-restriction",
        "dev",
        _set(*POOL, "labels", {"node-restriction.kubernetes.io/x": "a"}),
        'nodePools[0].labels["node-restriction.kubernetes.io/x"]',
    ),
    ("label-value-64-chars", "dev", _set(*POOL, "labels", {"team": "v" * 64}), "nodePools[0].labels.team"),
    ("label-value-space", "dev", _set(*POOL, "labels", {"team": "a b"}), "nodePools[0].labels.team"),
    ("label-value-trailing-dot", "dev", _set(*POOL, "labels", {"team": "a."}), "nodePools[0].labels.team"),
    ("label-value-newline", "dev", _set(*POOL, "labels", {"team": "a\n"}), "nodePools[0].labels.team"),
    ("label-value-a-number", "dev", _set(*POOL, "labels", {"team": 5}), "nodePools[0].labels.team"),
    # CIDRs for the public API endpoint.
    ("cidr-prefix-33", "prod", _set(*EKS, "publicAccessCidrs", ["10.0.0.0/33"]), "cluster.eks.publicAccessCidrs[0]"),
    ("cidr-host-bits", "prod", _set(*EKS, "publicAccessCidrs", ["10.0.0.1/24"]), "cluster.eks.publicAccessCidrs[0]"),
    ("cidr-not-an-address", "prod", _set(*EKS, "publicAccessCidrs", ["office"]), "cluster.eks.publicAccessCidrs[0]"),
    ("cidr-no-prefix", "prod", _set(*EKS, "publicAccessCidrs", ["203.0.113.7"]), "cluster.eks.publicAccessCidrs[0]"),
    ("cidr-ipv6", "prod", _set(*EKS, "publicAccessCidrs", ["::/0"]), "cluster.eks.publicAccessCidrs[0]"),
    ("cidr-newline", "prod", _set(*EKS, "publicAccessCidrs", ["10.0.0.0/8", "10.0.0.0/8\n"]), "cluster.eks.publicAccessCidrs[1]"),
    # MIG counts: 10^12 slices used to build a list of 10^12 profiles.
    ("mig-count-10e12", "prod", _mig({"1g.10gb": 10**12}), 'nodePools[0].sharing.migGeometry.devices[2].profiles["1g.10gb"]'),
    ("mig-count-8", "prod", _mig({"1g.10gb": 8}), 'nodePools[0].sharing.migGeometry.devices[2].profiles["1g.10gb"]'),
    ("mig-count-zero", "prod", _mig({"1g.10gb": 0}), 'nodePools[0].sharing.migGeometry.devices[2].profiles["1g.10gb"]'),
    ("mig-count-a-string", "prod", _mig({"1g.10gb": "7"}), 'nodePools[0].sharing.migGeometry.devices[2].profiles["1g.10gb"]'),
    # Wrong shapes where a release names its versions.
    ("stable-a-list", "dev", _set(*DEV_M, "release", "stable", ["v1"]), "models[0].release.stable"),
    (
        "stable-a-list-with-weights",
        "prod",
        _set("models", 1, "release", {"stable": ["v1"], "canary": "v2", "weights": {"v1": 90, "v2": 10}}),
        "models[1].release.stable",
    ),
    (
        "canary-a-mapping-with-weights",
        "prod",
        _set("models", 1, "release", {"stable": "v1", "canary": {"v": 2}, "weights": {"v1": 90, "v2": 10}}),
        "models[1].release.canary",
    ),
    (
        "weights-a-list",
        "prod",
        _set("models", 1, "release", {"stable": "v1", "canary": "v2", "weights": [90, 10]}),
        "models[1].release.weights",
    ),
    (
        "canary-weight-a-mapping",
        "prod",
        _set("models", 1, "release", "canaryWeight", {"v2": 10}),
        "models[1].release.canaryWeight",
    ),
    ("canary-weight-a-boolean", "prod", _set("models", 1, "release", "canaryWeight", True), "models[1].release.canaryWeight"),
    # Names that collide.
    ("server-names-collide-across-tenants", "prod", _collide_servers, "models[3].versions[0].name"),
    ("server-names-collide-in-a-tenant", "prod", _collide_in_one_tenant, "models[3].versions[0].name"),
    ("duplicate-model-names", "prod", _set("models", 2, "name", "llama-70b"), "models[2].name"),
    # Whole blocks of the wrong type.
    ("models-a-mapping", "dev", _set("models", {"qwen": {}}), f"{PROJECT}:models"),
    ("node-pools-a-string", "dev", _set("nodePools", "l4"), f"{PROJECT}:nodePools"),
    ("tenants-empty", "dev", _set("tenants", []), f"{PROJECT}:tenants"),
    ("environment-a-list", "dev", _set("environment", ["production"]), f"{PROJECT}:environment"),
    ("cluster-null", "dev", _set("cluster", None), f"{PROJECT}:cluster"),
    ("overcommit-nan", "dev", _set("capacity", {"overcommitRatio": float("nan")}), "capacity.overcommitRatio"),
    ("overcommit-infinite", "dev", _set("capacity", {"overcommitRatio": float("inf")}), "capacity.overcommitRatio"),
    ("replicas-a-boolean", "dev", _set(*DEV_M, "autoscaling", "minReplicas", True), "models[0].autoscaling.minReplicas"),
    # S3 locations with an empty path segment: S3 reads `team//w` as a key prefix of its own, which the IAM grants and
    # the tenants' checks (by whole segments) would have read as `team/w`. Each is otherwise a location the stack holds.
    (
        "s3-model-source-empty-segment",
        "prod",
        _set(*M, "versions", 0, "source", {"s3Uri": "s3://inference-prod-adapters/llama-3.1-8b//w", "revision": "r1"}),
        "models[0].versions[0].source.s3Uri",
    ),
    (
        "s3-adapter-source-empty-segment",
        "prod",
        _set("models", 1, "adapters", 1, "source", "s3Uri", "s3://inference-prod-adapters/llama-3.1-8b//sql"),
        "models[1].adapters[1].source.s3Uri",
    ),
    (
        "s3-tenant-prefix-empty-segment",
        "prod",
        _set("tenants", 1, "s3Prefixes", ["s3://team-a-data//x"]),
        "tenants[1].s3Prefixes[0]",
    ),
    (
        "s3-tenant-prefix-after-the-bucket",
        "prod",
        _set("tenants", 2, "s3Prefixes", ["s3://team-b-batch", "s3://team-b-archive//"]),
        "tenants[2].s3Prefixes[1]",
    ),
    (
        "s3-batch-output-empty-segment",
        "prod",
        _set("batchJobs", 0, "output", "s3://team-b-batch/outputs//x"),
        "batchJobs[0].output",
    ),
    (
        "s3-batch-output-trailing-slashes",
        "prod",
        _set("batchJobs", 0, "output", "s3://team-b-batch/outputs/x//"),
        "batchJobs[0].output",
    ),
    (
        "s3-batch-input-empty-segment",
        "prod",
        _set("batchJobs", 0, "input", "s3Uri", "s3://team-b-batch//inputs/tickets"),
        "batchJobs[0].input.s3Uri",
    ),
    # Lists past what a stack may declare (a preview's time is linear in them).
    ("600-tenants", "dev", _many("tenants", 600), f"{PROJECT}:tenants"),
    ("1001-models", "dev", _many("models", 1001), f"{PROJECT}:models"),
    ("33-versions", "dev", _many("models", 0, "versions", 33), "models[0].versions"),
]
