"""The root of a stack's config: every top-level key under `inference-platform:`, the weakenings a production
change may acknowledge, and the keys that hold secrets."""

from __future__ import annotations

from functools import cached_property
from typing import Annotated, Any, Literal

from pydantic import Field, model_validator

from ..profiles import ProfileName
from .base import ConfigModel, _full_match
from .batch import BatchJobConfig
from .cluster import EKS_NODE_GROUPS_PER_CLUSTER, ClusterConfig
from .cold_start import ColdStartConfig, WeightMirrorConfig
from .images import ImagesConfig
from .model import ModelConfig
from .node_pools import NodePoolConfig
from .registry import RegistryConfig
from .slo import ProfileOverride
from .tenants import MAX_TENANTS, TenantConfig
from .traffic import TrafficConfig

# Weakenings a production change may acknowledge (`acknowledge`), found by platform_config/guard_rails.py:
# kinds, and removals or widenings of one named model or tenant (`<kind>:<name>`).
# How many models and batch jobs a stack may declare (tenants: MAX_TENANTS). No upstream bound is near (a
# Deployment or Knative Service per version, a Kueue workload per job): these hold the preview's time, linear in what
# the stack declares (README, Security: sizes), to the largest stack `make bench` measures, 1,000 models, with room.
MAX_MODELS = 1000
MAX_BATCH_JOBS = 256
ACKNOWLEDGED_KINDS = (
    "weaken-authentication",
    "disable-tenant-scoping",
    "plain-http-internet-facing",
    "plain-http-internal",
    "public-api-endpoint",
    "widen-cluster-admins",
    "leave-production",
    "change-weight-mirror",
)
ACKNOWLEDGED_SCOPED_KINDS = (
    "remove-model",
    "remove-tenant",
    "widen-callers",
    "move-model",
    "replace-servers",
    "widen-groups",
    "relax-pod-security",
    "widen-data",
)
_ACKNOWLEDGEMENT = (
    rf"({'|'.join(ACKNOWLEDGED_KINDS)}|({'|'.join(ACKNOWLEDGED_SCOPED_KINDS)}):[a-z0-9]([a-z0-9-]{{0,61}}[a-z0-9])?)"
)
_ACKNOWLEDGEMENT_NAMES = (
    f"is not a weakening's name: {', '.join(ACKNOWLEDGED_KINDS)}, or "
    f"{', '.join(f'{kind}:<name>' for kind in ACKNOWLEDGED_SCOPED_KINDS)}"
)


class CapacityConfig(ConfigModel):
    overcommit_ratio: Annotated[float, Field(ge=1.0, le=10.0)] = 1.0
    """Allowed ratio of summed tenant quotas to what the pools provide at maxSize."""


class MonitoringConfig(ConfigModel):
    install_prometheus_stack: bool = True
    """Install kube-prometheus-stack; turn off where the cluster already runs a Prometheus Operator that selects
    ServiceMonitors from every namespace."""
    install_metrics_server: bool = True
    """Install metrics-server (the resource metrics API the gateway's and Knative's CPU autoscalers read); turn off
    where the cluster already runs one."""
    # prometheus-adapter's `--prometheus-url`, through its chart's values.
    prometheus_url: (
        Annotated[
            str,
            _full_match(
                r"https?://[A-Za-z0-9._:\[\]-]{1,261}(/[A-Za-z0-9._~%/-]{0,1024})?",
                "is not an http(s) URL of a Prometheus: scheme, host[:port] and an optional path (ASCII)",
            ),
        ]
        | None
    ) = None
    """Where prometheus-adapter finds Prometheus when the platform does not install it."""


class PlatformConfig(ConfigModel):
    """Every top-level key under `inference-platform:` in a stack file."""

    environment: Literal["development", "staging", "production"]
    """`development`, `staging` or `production` (production HPAs keep at least 2 replicas)."""
    cluster: ClusterConfig
    """Where the platform runs."""
    node_pools: Annotated[list[NodePoolConfig], Field(min_length=1, max_length=EKS_NODE_GROUPS_PER_CLUSTER - 1)]
    """GPU node pools (at most 29: EKS's default quota is 30 managed node groups per cluster, the system one included)."""
    tenants: Annotated[list[TenantConfig], Field(min_length=1, max_length=MAX_TENANTS)]
    """Tenants: namespaces with GPU quotas, isolation and access (at most 256)."""
    models: Annotated[list[ModelConfig], Field(max_length=MAX_MODELS)] = []
    """Served models (at most 1,000)."""
    traffic: TrafficConfig
    """The gateway: authentication, hosts, TLS, load balancer, tiers."""
    profiles: dict[ProfileName, ProfileOverride] = {}
    """Overrides of a workload profile's defaults for every model of that profile."""
    capacity: CapacityConfig = CapacityConfig()
    """Capacity checks."""
    monitoring: MonitoringConfig = MonitoringConfig()
    """Prometheus and metrics."""
    cold_start: ColdStartConfig = ColdStartConfig()
    """How long adding a replica may take, and the figures its expected cold start is derived from."""
    registry: RegistryConfig = RegistryConfig()
    """The MLflow model registry that `mlflow` version sources are resolved in."""
    images: ImagesConfig = ImagesConfig()
    """The images' lock file: the digest every image the stack renders is pulled by."""
    weight_mirror: WeightMirrorConfig | None = None
    """Where the Hugging Face revisions the tenants' pods read are copied to; none by default (production needs it
    for any Hugging Face source)."""
    batch_jobs: Annotated[list[BatchJobConfig], Field(max_length=MAX_BATCH_JOBS)] = []
    """Offline batch jobs, queued through Kueue on the tenants' batch quotas (at most 256; README, Batch jobs)."""
    acknowledge: Annotated[list[Annotated[str, _full_match(_ACKNOWLEDGEMENT, _ACKNOWLEDGEMENT_NAMES)]], Field(max_length=64)] = []
    """Weakenings of a stack that is or was production which this change makes on purpose, each by name:
    `weaken-authentication` (another issuer or key source, new signing keys, audiences or version-override principals,
    another user, tier or tenant claim), `disable-tenant-scoping`, `plain-http-internet-facing`, `plain-http-internal`
    (TLS removed from an internal load balancer), `public-api-endpoint` (a CIDR wider than /16 it did not admit),
    `widen-cluster-admins`, `leave-production` (an `environment` other than production), `remove-model:<model>`,
    `remove-tenant:<tenant>`, `widen-callers:<model>`, `move-model:<model>` (to another tenant),
    `replace-servers:<model>` (none of the versions it ran still running), `widen-groups:<tenant>`,
    `relax-pod-security:<tenant>`, `widen-data:<tenant>` (an S3 prefix its pods may be granted that none of its
    prefixes held), `change-weight-mirror` (another bucket, or one the stack no longer creates, for every tenant's
    weights). The preview refuses any other (docs/design/security.md, Guard rails) and lists
    these."""

    @model_validator(mode="before")
    @classmethod
    def _default_weight_cache(cls, data: Any) -> Any:
        """On an existing cluster (`cluster.mode: kubeconfig`) the platform launches no nodes, so nothing stripes an
        instance store: a pool's weight cache defaults to its root volume there. With a weight mirror, a pool's
        weights default to streaming from S3."""
        cluster = data.get("cluster") if isinstance(data, dict) else None
        pools = data.get("nodePools") if isinstance(data, dict) else None
        if not isinstance(cluster, dict) or not isinstance(pools, list):
            return data
        if cluster.get("mode") == "kubeconfig":
            default = "rootVolume"
        elif data.get("weightMirror") is not None:
            # Every revision a pool serves is in S3 (the mirror holds the Hugging Face ones): stream it.
            default = "s3Stream"
        else:
            return data
        filled = []
        for pool in pools:
            cache = pool.get("weightCache", {}) if isinstance(pool, dict) and "weight_cache" not in pool else None
            if isinstance(cache, dict) and "medium" not in cache:
                pool = {**pool, "weightCache": {**cache, "medium": default}}
            filled.append(pool)
        return {**data, "nodePools": filled}

    @cached_property
    def models_by_name(self) -> dict[str, ModelConfig]:
        """Each model by its name (names are unique: `check_unique_names`), found once for the plan and the checks."""
        return {model.name: model for model in self.models}

    @cached_property
    def batch_senders(self) -> dict[str, tuple[ModelConfig, ...]]:
        """The models that send their batch tier to each model (`batchModel`), in stack order, by the receiving model's
        name: read per model by its served tiers, aliases and adapters, so found once here rather than by a scan of
        every model for each (quadratic at a thousand models)."""
        senders: dict[str, list[ModelConfig]] = {}
        for model in self.models:
            if model.batch_model is not None:
                senders.setdefault(model.batch_model, []).append(model)
        return {name: tuple(models) for name, models in senders.items()}


# Top-level keys that hold secrets: read as Pulumi secrets, never stored in the model. Each
# tenant's Hugging Face token, keyed by tenant (one secret object).
HUGGING_FACE_TOKENS = "huggingFaceTokens"
# The MLflow registry's bearer token (one secret string).
REGISTRY_TOKEN = "registryToken"
SECRET_KEYS = (HUGGING_FACE_TOKENS, REGISTRY_TOKEN)
