"""The shapes the builders read: one version's server (`ServerPlan`), a model's (`ModelPlan`, and
`RoutePlan` and `TierRoute` for its routes), a batch job's (`BatchJobPlan`), and what a serving
backend is (`ServingBackend`), one way of running a model version's vLLM servers, with the objects,
destinations and subsets it answers with.

A backend owns everything about its mode: the objects of a version's server and of the model,
how a rollout surges and what the cluster injects into its pods (its capacity demand), where
the gateway sends a version's traffic (its route target), how a replica drains (the pod's
shape), which platform machinery it needs, and the config rules that hold only for it. The rest
of the program asks the model's backend and never branches on the mode. A new mode is one module
in `components/backends/` and its name in `AutoscalingMode`.

The ground floor of components/, with the constants and the shapes these hold (picker_plan.py,
slo_plan.py): nothing here imports a builder, a backend or a component, so every one of them may
import it. `components/plan.py` resolves a config into these, held together by serving.py's `Plan`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from platform_config.adapters import LoraLimits
from platform_config.chat_templates import ServedTemplate
from platform_config.cold_start import ColdStart, streams_weights
from platform_config.errors import ConfigIssue
from platform_config.models import (
    BatchJobConfig,
    ModelConfig,
    ModelSource,
    ModelVersion,
    NodePoolConfig,
    PlatformConfig,
    ServerArgs,
    TierPolicy,
    TrafficConfig,
)
from platform_config.pins import AWS_CLI
from platform_config.profiles import TierName, WorkloadProfile
from platform_config.registry import RegistryEntry
from platform_config.serving import DrainChain, Peak, ServerAdmission

from .constants import (
    GPU_RESOURCE,
    LABEL_COMPONENT,
    LABEL_INSTANCE,
    LABEL_LATENCY_SENSITIVE,
    LABEL_MODEL,
    LABEL_MODEL_VERSION,
    LABEL_NAME,
    LABEL_PART_OF,
    LABEL_PROFILE,
    LABEL_TENANT,
    LABEL_VERSION,
    MODEL_SERVER_COMPONENT,
    PART_OF,
)
from .picker_plan import EndpointPickerPlan
from .slo_plan import SloPlan

# How a server's object is registered:
# - "pods": makes pods (waits for what pods need; `pulumi up` waits until it is ready);
# - "plain": needs its namespace only;
# - "monitor": a Prometheus Operator object (waits for its CRDs);
# - "autoscaler": scales the "pods" object (waits for it and for the backend's machinery).
Role = Literal["pods", "plain", "monitor", "autoscaler", "inference-pool", "mesh"]


@dataclass(frozen=True)
class ServerObject:
    # The resource's name is `<server name>-<suffix>` (never rename without aliases).
    suffix: str
    manifest: dict[str, Any]
    role: Role
    # A custom resource (CRD-backed) rather than a built-in kind.
    custom: bool = False
    # Routes wait for it before sending traffic to the version.
    serves: bool = False
    # Fields another controller owns once the object exists.
    ignore_changes: tuple[str, ...] = ()
    # Applied only once the server's pods object (registered before it) is ready: what switches
    # traffic to a new revision waits for that revision.
    after_pods: bool = False
    # The object whose pods run vLLM (the Deployment or Knative Service, not the endpoint picker's): it carries the
    # server's serving-shape annotation, which the pack's serving-performance policy reads.
    runs_vllm: bool = False


@dataclass(frozen=True)
class PodShape:
    """How a backend's pods differ: the port's name, how probes name the port, and whether
    the pod drains itself (a preStop hook, the grace period and spread in the pod spec) or its
    platform drains it (Knative's queue-proxy)."""

    port_name: str
    probe_port: str | int
    drains_in_pod: bool


@dataclass(frozen=True)
class Destination:
    """Where the gateway sends one tier of one version."""

    host: str
    subset: str
    port: int
    # Request headers set on the way (routes apply them after the gateway filter ran): the Host
    # of versions reached through a shared gateway, the endpoint picker's objective.
    set_headers: tuple[tuple[str, str], ...] = ()

    def route(self, weight: int | None = None) -> dict[str, Any]:
        out: dict[str, Any] = {"destination": {"host": self.host, "subset": self.subset, "port": {"number": self.port}}}
        if self.set_headers:
            out["headers"] = {"request": {"set": dict(self.set_headers)}}
        if weight is not None:
            out["weight"] = weight
        return out


@dataclass(frozen=True)
class SubsetRule:
    """One DestinationRule of a model's subsets: its name, host, the versions whose tier subsets
    it holds, and whether outlier detection may eject one of its hosts."""

    name: str
    host: str
    versions: tuple[str, ...]
    eject_hosts: bool


# Platform machinery a backend may need installed; `components/platform.py` installs each (the
# type makes a name it does not know an error mypy reports).
MachineryName = Literal["metrics-adapter", "knative"]


class ServingBackend(ABC):
    # The `autoscaling.mode` value that selects it.
    mode: ClassVar[str]
    # Platform machinery it needs installed.
    machinery: ClassVar[frozenset[MachineryName]] = frozenset()
    # Whether its servers may scale to zero.
    scales_to_zero: ClassVar[bool] = False
    pod_shape: ClassVar[PodShape]
    # When its versions sit behind a shared gateway, their subsets share one gateway-wide
    # DestinationRule: its (object name, resource name suffix). None: one rule per model, in
    # the model's namespace, on the versions' own pods.
    shared_destination_rule: ClassVar[tuple[str, str] | None] = None
    # The shared rule's host-wide traffic policy (subsets keep it unless they set the same field).
    shared_traffic_policy: ClassVar[Mapping[str, Any]] = {}
    # Whether an endpoint picker may stand in front of its servers, and stands there unless the
    # model turns it off (`endpointPicker.enabled`): the picker dials pods directly.
    picks_endpoints: ClassVar[bool] = False

    def uses_endpoint_picker(self, model: ModelConfig) -> bool:
        """Whether an endpoint picker stands in front of the model's servers."""
        return self.picks_endpoints and model.endpoint_picker.enabled is not False

    def picker_target(self, model: ModelConfig, server: str) -> tuple[str, int]:
        """(host, port) the version's endpoint picker sends a picked request to: the FQDN of a
        Service on that port over the version's pods (the Host the picker's proxy sends, by which
        its sidecar routes to the picked pod) and the port it dials on the pod (the InferencePool's
        target port). Only a backend that `picks_endpoints` has one."""
        raise NotImplementedError(f"backend {self.mode!r} puts no endpoint picker in front of its servers")

    def shared_rule(self, model: ModelConfig) -> tuple[str, str] | None:
        """The gateway-wide DestinationRule the model's subsets go in (`shared_destination_rule`),
        or None: the model has rules of its own."""
        return self.shared_destination_rule

    # --- capacity -------------------------------------------------------------------------

    @abstractmethod
    def rollout_surge(self, model: ModelConfig) -> int:
        """Pods a version's rollout adds while the old ones still serve."""

    def request_cap(self, config: PlatformConfig, model: ModelConfig) -> int | None:
        """Requests one replica runs at once, if the backend sets them (vLLM's `--max-num-seqs` by default)."""
        return None

    # What holds a request that waits for a replica when no endpoint picker stands in front.
    queue_holder: ClassVar[str] = "each replica's vLLM, through the servers' Service"

    def injected_containers(self) -> tuple[Mapping[str, str], ...]:
        """Requests (= memory limits) of the containers the backend's platform adds to each pod,
        besides the mesh's sidecar."""
        return ()

    # --- config rules that hold for this backend only ------------------------------------

    def config_issues(
        self, config: PlatformConfig, index: int, model: ModelConfig, pool: NodePoolConfig
    ) -> Iterator[ConfigIssue]:
        return iter(())

    # --- objects ---------------------------------------------------------------------------

    @abstractmethod
    def server_objects(self, plan: ServerPlan) -> list[ServerObject]:
        """Every object of one version's server, in registration order."""

    def model_objects(self, model: ModelPlan) -> list[ServerObject]:
        """Objects the model's versions share (registered before its routes)."""
        return []

    # --- traffic ---------------------------------------------------------------------------

    @abstractmethod
    def destination(self, model: ModelConfig, version: str, tier: str) -> Destination:
        """Where the gateway sends `tier` requests for `version`."""

    @abstractmethod
    def subset_name(self, model: ModelConfig, version: str, tier: str) -> str:
        """The DestinationRule subset of one tier of one version."""

    @abstractmethod
    def subset_labels(self, model: ModelConfig, version: str) -> dict[str, str]:
        """The labels that pick the subset's hosts."""

    @abstractmethod
    def destination_rule_host(self, model: ModelConfig) -> str:
        """The host the version subsets are defined on."""

    def destination_rules(self, model: ModelConfig, versions: tuple[str, ...]) -> list[SubsetRule]:
        """The model's own DestinationRules (unless `shared_destination_rule`): by default one,
        named after the model, with every version's subsets."""
        return [SubsetRule(model.name, self.destination_rule_host(model), versions, self.subsets_are_servers)]

    # Whether a subset's hosts are the model's own servers (outlier detection may eject one)
    # or a shared gateway's pods (a model's errors must not eject a gateway).
    subsets_are_servers: ClassVar[bool] = True

    def tenant_ingress(self) -> tuple[tuple[str, str], ...]:
        """(NetworkPolicy name, namespace) of platform components in the data path of the
        tenant's servers, which its isolation must let in."""
        return ()


# --- the plan's slices ----------------------------------------------------------------------


@dataclass(frozen=True)
class BatchJobPlan:
    """One batch job as its objects need it (components/batch_job.py, components/specs/batch_job.py)."""

    job: BatchJobConfig
    pool: NodePoolConfig
    # What one shard's pod asks for: the GPU resource and how many (vLLM's tensor-parallel size).
    gpu_resource: str
    gpu_count: int
    shards: int
    image: str
    # The tenant's Hugging Face token is in its pods (gated weights or datasets they download themselves).
    hugging_face_token: bool
    # The service account whose workload role reads the input (and S3 weights) and writes the output.
    service_account: str
    # vLLM's LoRA flags for the job's adapter (platform_config/adapters.py batch_lora_limits); None without one.
    lora: LoraLimits | None = None
    # The aws CLI image of its stage-in, weight and adapter copies and uploader (with its digest, where locked).
    aws_cli_image: str = AWS_CLI.image
    # The weight mirror's copy of the job's Hugging Face model, which its pods copy from S3 instead
    # (platform_config/weight_mirror.py); None where they read the job's own source.
    weights_copy: ModelSource | None = None
    # The weight mirror's Jobs that copy what its pods read (the model, the adapter), which they wait for.
    mirror_jobs: tuple[str, ...] = ()

    @property
    def name(self) -> str:
        return self.job.name

    @property
    def model_source(self) -> ModelSource:
        """Where its pods read the model's weights: the mirror's copy, else the job's own source."""
        return self.weights_copy if self.weights_copy is not None else self.job.model.source

    @property
    def reads_hugging_face(self) -> bool:
        """Whether its pods download from Hugging Face themselves: the model, the adapter or the input dataset."""
        modules = self.lora.modules if self.lora is not None else ()
        return (
            self.model_source.huggingface is not None
            or self.job.input.huggingface is not None
            or any(m.fetched_from.huggingface is not None for m in modules)
        )

    @property
    def namespace(self) -> str:
        return self.job.tenant


@dataclass(frozen=True)
class ServerPlan:
    """One running version of one model: everything its server's objects are built from."""

    model: ModelConfig
    version: ModelVersion
    backend: ServingBackend
    profile: WorkloadProfile
    pool: NodePoolConfig
    name: str
    namespace: str
    # Tiers requests reach it with (`served_tiers`), and whether it schedules by their priority.
    tiers: tuple[TierName, ...]
    by_priority: bool
    priority_class: str
    args: ServerArgs
    image: str
    gpu_resource: str
    gpu_count: int
    gpu_memory_utilization: float
    min_replicas: int
    max_replicas: int
    # Route and request timeouts, preStop, vLLM's drain and the grace period, derived together.
    drain: DrainChain
    # Sequences vLLM runs at once: the stack's, else the backend's (`kpa.containerConcurrency`), else the profile's.
    max_num_seqs: int
    hugging_face_token: bool
    # Served names of models whose batch tier this server takes (vLLM answers to them too).
    aliases: tuple[str, ...]
    # Service account with read access to the S3 weights (workload identity), if any.
    weights_service_account: str | None
    # Its model volume's size (platform_config/cold_start.model_volume_size): `cacheSize` where it holds the weights,
    # the adapters' files where the pool streams the weights; None: no model volume (streamed weights, no adapters).
    model_volume_size: str | None
    # The endpoint picker in front of this version's servers (flow control, endpoint picking), if any.
    endpoint_picker: EndpointPickerPlan | None = None
    # vLLM's admission bounds where no endpoint picker stands in front (platform_config/serving.py).
    admission: ServerAdmission | None = None
    # The MLflow registry version its weights were resolved from, when the stack names one (`source.mlflow`).
    registry_entry: RegistryEntry | None = None
    # The chat template (and default system prompt) its servers apply, when the version names one.
    chat_template: ServedTemplate | None = None
    # Its expected cold start on its pool (platform_config/cold_start.py), which its startup probe's budget follows.
    cold_start: ColdStart | None = None
    # What its startup probe allows (platform_config/cold_start.startup_budget_seconds); None: without a cold start.
    startup_budget_seconds: int | None = None
    # How long a rollout may make no progress (a new node, the image, the startup budget); None: without a cold start.
    progress_deadline_seconds: int | None = None
    # Whether the cluster autoscaler may remove its node (its pool's `weightCache.allowScaleDown`).
    evictable_local_volumes: bool = True
    # vLLM's LoRA modules and limits, when the model has adapters (platform_config/adapters.py).
    lora: LoraLimits | None = None
    # The Hugging Face revision `version.source` is the weight mirror's copy of (platform_config/weight_mirror.py);
    # None where the version is served from its own source.
    mirrored_from: ModelSource | None = None
    # The weight mirror's Jobs that copy what its pods read (the weights, the adapters' modules), which they wait for.
    mirror_jobs: tuple[str, ...] = ()
    # The aws CLI image of its weight and adapter copies (with its digest, where the stack's image lock holds it).
    aws_cli_image: str = AWS_CLI.image

    @property
    def tensor_parallel_size(self) -> int:
        return self.gpu_count if self.gpu_resource == GPU_RESOURCE and not self.time_sliced else 1

    @property
    def time_sliced(self) -> bool:
        return self.pool.sharing.mode == "timeSlicing"

    @property
    def reads_hugging_face(self) -> bool:
        """Whether its pods download from Hugging Face themselves: the weights, or an adapter's module."""
        modules = self.lora.modules if self.lora is not None else ()
        return self.version.source.huggingface is not None or any(m.fetched_from.huggingface is not None for m in modules)

    @property
    def weights_streamed(self) -> bool:
        """vLLM streams the weights from S3 (the pool's `weightCache.medium: s3Stream`): no weights init container and
        no weights on the node."""
        return streams_weights(self.pool)

    @property
    def labels(self) -> dict[str, str]:
        return {
            LABEL_NAME: self.model.name,
            LABEL_INSTANCE: self.name,
            LABEL_VERSION: self.version.name,
            LABEL_COMPONENT: MODEL_SERVER_COMPONENT,
            LABEL_PART_OF: PART_OF,
            LABEL_MODEL: self.model.name,
            LABEL_MODEL_VERSION: self.version.name,
            LABEL_TENANT: self.namespace,
            LABEL_PROFILE: self.profile.name,
            LABEL_LATENCY_SENSITIVE: str(self.profile.latency_sensitive).lower(),
            # Istio's conventional labels: telemetry and subsets read them.
            "app": self.model.name,
            "version": self.version.name,
        }

    @property
    def selector(self) -> dict[str, str]:
        return {LABEL_INSTANCE: self.name}


# Tiers in the order routes and subsets list them.
TIER_ORDER: tuple[TierName, ...] = ("premium", "standard", "batch")


@dataclass(frozen=True)
class TierRoute:
    """One tier requests for a model may use."""

    tier: TierName
    policy: TierPolicy
    # The model whose servers take it: the model itself, or the model its batch tier is sent to.
    owner: ModelConfig
    # The backend serving the owner, so routes reach it without asking the registry again.
    owner_backend: ServingBackend
    # Whether that server schedules by the priority the gateway writes (it serves several tiers).
    by_priority: bool


@dataclass(frozen=True)
class RoutePlan:
    """What a model's routes and subsets are built from."""

    model: ModelConfig
    backend: ServingBackend
    # The versions with servers (stable, then the canary if any).
    versions: tuple[str, ...]
    traffic: TrafficConfig
    # Tiers requests for the model may use (its own, plus batch when sent to a batch model).
    tiers: tuple[TierRoute, ...]
    # Tiers the model's own servers take, for itself or as another model's batch model: its
    # subsets.
    subsets: tuple[tuple[TierName, TierPolicy], ...]


@dataclass(frozen=True)
class ModelPlan:
    model: ModelConfig
    backend: ServingBackend
    servers: tuple[ServerPlan, ...]
    # S3 prefixes its versions read, and the service account whose role reads them.
    s3_uris: tuple[str, ...]
    weights_service_account: str | None
    peak: Peak
    route: RoutePlan
    # Its service level objectives (its PrometheusRule's recording rules and alerts).
    slo: SloPlan
