"""Generated stacks for the benchmark: N models across M tenants on two large pools."""

from __future__ import annotations

from typing import Any

QWEN = {"huggingface": "Qwen/Qwen2.5-0.5B-Instruct", "revision": "7ae557604adf67be50417f59c2c2f167def9a775"}
QWEN_15 = {"huggingface": "Qwen/Qwen2.5-1.5B-Instruct", "revision": "989aa7980e4cf806f80c7fef2b1adb7bc71aa306"}


def generate_stack(models: int, tenants: int) -> dict[str, Any]:
    """A valid production-like stack: every 4th model runs a 10% canary, half use Knative,
    a quarter are summarisers on the L4 pool; quotas fit each tenant's models."""
    per_tenant = -(-models // tenants)
    model_list = [_model(index, tenants) for index in range(models)]
    by_tenant: dict[str, list[dict[str, Any]]] = {f"tenant-{t:03d}": [] for t in range(tenants)}
    for model in model_list:
        by_tenant[model["tenant"]].append(model)
    versions = sum(len(m["versions"]) for m in model_list)
    return {
        "environment": "production",
        "cluster": _cluster(versions),
        "nodePools": [
            {
                "name": "h100",
                "instanceType": "p5.48xlarge",
                "minSize": 1,
                # EKS's quota of nodes per managed node group (platform_config/models/cluster.py).
                "maxSize": 450,
                "sharing": {"mode": "mig", "migConfig": "all-1g.10gb"},
            },
            {"name": "l4", "instanceType": "g6.12xlarge", "capacityType": "SPOT", "minSize": 0, "maxSize": 450},
        ],
        "tenants": [_tenant(name, held, per_tenant) for name, held in by_tenant.items()],
        "models": model_list,
        # Production's pods read Hugging Face versions from the mirror's copies, never the Hub (as prod's do).
        "weightMirror": {"bucket": "bench-model-weights"},
        "traffic": {
            "hosts": ["api.bench.example.com"],
            # Production serves HTTPS only, with this Secret of istio-system.
            "tlsCredentialName": "bench-gateway-tls",
            # The gateway requires a verified token (traffic.authentication has no default).
            "authentication": {
                "issuer": "https://login.bench.example.com",
                "jwksUri": "https://login.bench.example.com/.well-known/jwks.json",
                "audiences": ["inference-api"],
            },
        },
    }


def _model(index: int, tenants: int) -> dict[str, Any]:
    """The index-th model: every 4th (from the 2nd) runs a canary, every 4th (from the 4th) is a summariser on the L4
    pool (on Knative), and the others run on the HPA at an even index and on Knative at an odd one."""
    batch = index % 4 == 3
    canary = index % 4 == 1
    return {
        "name": f"model-{index:04d}",
        "tenant": f"tenant-{index % tenants:03d}",
        "pool": "l4" if batch else "h100",
        "profile": "summarization" if batch else "chat",
        # Qwen 0.5B/1.5B checkpoints: a small weights cache, so the nodes' disks hold them all.
        "resources": {"gpus": 1, "cpu": "4", "memory": "16Gi", "cacheSize": "10Gi"}
        if batch
        else {"migProfile": "1g.10gb", "cpu": "4", "memory": "16Gi", "cacheSize": "10Gi"},
        "server": {"maxModelLen": 4096},
        "versions": [{"name": "v1", "source": QWEN}] + ([{"name": "v2", "source": QWEN_15}] if canary else []),
        "release": {"stable": "v1", **({"canary": "v2", "canaryWeight": 10} if canary else {})},
        "autoscaling": (
            {"mode": "kpa", "minReplicas": 1, "maxReplicas": 2}
            if batch
            else {"mode": "hpa" if index % 2 == 0 else "kpa", "minReplicas": 2, "maxReplicas": 4}
        ),
    }


def _cluster(versions: int) -> dict[str, Any]:
    return {
        "name": "bench",
        "mode": "eks",
        "kubernetesVersion": "1.33",
        "eks": {
            "region": "us-east-1",
            "subnetIds": ["subnet-0a1b2c3d4e5f60001", "subnet-0a1b2c3d4e5f60002"],
            # Every version's endpoint pickers (2 pods, and 2 more while a rollout's drain; 2.1 CPU
            # and 3.5Gi a pod) run on the system nodes, 13 to an m6i.8xlarge beside the controllers.
            "systemNodeGroup": {"instanceType": "m6i.8xlarge", "maxSize": max(4, -(-4 * versions // 13))},
        },
    }


def _tenant(name: str, models: list[dict[str, Any]], per_tenant: int) -> dict[str, Any]:
    """A tenant whose quotas fit the models it holds, per running version: on the H100 pool 8 MIG slices, on the L4
    pool 3 GPUs (2 replicas and a rollout's surge), and 60 CPUs, 240Gi and 20 pods either way. Counted from its own
    models, not from an average share: with a tenant to every 10 models, 1,000 models across 100 tenants give each
    tenant models of one kind only (the kinds repeat every 4 indexes, the tenants every 100)."""
    versions = [(m["pool"], len(m["versions"])) for m in models]
    running = sum(count for _, count in versions)
    return {
        "name": name,
        "groups": [f"{name}-developers"],
        "quota": {
            "gpu": sum(3 * count for pool, count in versions if pool == "l4"),
            "mig": {"1g.10gb": sum(8 * count for pool, count in versions if pool == "h100")},
            "cpu": str(running * 60),
            "memory": f"{running * 240}Gi",
            "pods": running * 20,
        },
        "experimentQuota": {"cpu": str(per_tenant * 8), "memory": f"{per_tenant * 32}Gi", "pods": per_tenant * 2},
    }
