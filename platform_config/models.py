"""Typed stack configuration: one pydantic model per config block, read once, validated once.

Keys are camelCase in the stack files (Pulumi's convention); every model forbids unknown keys so
a misspelt key is an error, and is strict so "4" is not silently taken for 4. Checks that need
more than one field (references between blocks, capacity, MIG geometry) live in `checks.py`,
which reports them through the same error format.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic.alias_generators import to_camel

from .gpu_catalog import INSTANCE_TYPES
from .profiles import AutoscalingMode, PriorityClassName, ProfileName, TierName
from .quantity import parse_quantity

PROJECT = "inference-platform"


class ConfigModel(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
        strict=True,
        frozen=True,
        alias_generator=to_camel,
        # Stack files use the camelCase keys only (the loader validates by alias alone); Python
        # code may build models by field name.
        validate_by_name=True,
        validate_by_alias=True,
    )


# --- reusable field types ------------------------------------------------------------------

_DNS_1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
_DNS_1123 = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


def _dns_label(max_length: int, *, letter_first: bool):
    pattern = _DNS_1035 if letter_first else _DNS_1123
    first = "a letter" if letter_first else "a letter or digit"

    def check(value: str) -> str:
        if len(value) > max_length or not pattern.match(value):
            raise ValueError(
                f"{value!r} is not a valid name: a DNS-1123 label of lowercase letters, digits and '-', starting "
                f"with {first} and ending with a letter or digit, at most {max_length} characters"
            )
        return value

    return AfterValidator(check)


# Names that become Kubernetes object names with suffixes (Services must be DNS-1035 labels).
ResourceName = Annotated[str, _dns_label(30, letter_first=True)]
VersionName = Annotated[str, _dns_label(12, letter_first=True)]
NamespaceName = Annotated[str, _dns_label(40, letter_first=True)]


def _quantity(value: str) -> str:
    parse_quantity(value)
    return value


Quantity = Annotated[str, AfterValidator(_quantity)]

_DURATION = re.compile(r"^([0-9]+)(ms|s|m|h)$")
_DURATION_SECONDS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600}


def duration_seconds(value: str) -> float:
    match = _DURATION.match(value)
    if not match:
        raise ValueError(f"{value!r} is not a duration: use a whole number with ms, s, m or h, e.g. '5s' or '5m'")
    return int(match[1]) * _DURATION_SECONDS[match[2]]


def _duration(value: str) -> str:
    duration_seconds(value)
    return value


Duration = Annotated[str, AfterValidator(_duration)]


def _duration_between(low: float, high: float):
    def check(value: str) -> str:
        seconds = duration_seconds(value)
        if not low <= seconds <= high:
            raise ValueError(f"{value!r} is outside the allowed range {low:g}s..{high:g}s")
        return value

    return AfterValidator(check)


# The image rule the policy pack enforces too (it reads these through its generated facts).
IMAGE_TAG_PATTERN = r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}"
IMAGE_DIGEST_PATTERN = r"sha256:[a-f0-9]{64}"
FORBIDDEN_IMAGE_TAGS = ("latest",)
# An optional registry host with a port (registry.example.com:5000/), the path, a tag, a digest.
_IMAGE = re.compile(rf"^([a-z0-9.-]+:[0-9]+/)?[a-z0-9][a-z0-9._/-]*(:{IMAGE_TAG_PATTERN})?(@{IMAGE_DIGEST_PATTERN})?$")


def _pinned_image(value: str) -> str:
    match = _IMAGE.match(value)
    has_tag = ":" in value.split("/")[-1].split("@")[0]
    if not match or not (has_tag or "@sha256:" in value):
        raise ValueError(f"{value!r} is not a pinned image: give a tag or a digest, e.g. 'vllm/vllm-openai:v0.11.0'")
    tag = value.split("@")[0].rsplit("/", 1)[-1].partition(":")[2]
    if tag in FORBIDDEN_IMAGE_TAGS:
        raise ValueError(f"{value!r} uses the {tag!r} tag: pin a release tag or a sha256 digest")
    return value


PinnedImage = Annotated[str, AfterValidator(_pinned_image)]

_HEADER = re.compile(r"^[a-z0-9][a-z0-9-]*$")


def _header(value: str) -> str:
    if not _HEADER.match(value):
        raise ValueError(f"{value!r} is not an HTTP header name: use lowercase letters, digits and '-'")
    return value


HeaderName = Annotated[str, AfterValidator(_header)]


def _instance_type(value: str) -> str:
    if value not in INSTANCE_TYPES:
        allowed = ", ".join(sorted(INSTANCE_TYPES))
        raise ValueError(f"unknown instance type {value!r}; allowed: {allowed}")
    return value


InstanceTypeName = Annotated[str, AfterValidator(_instance_type)]


def _ec2_instance_type(value: str) -> str:
    """Any EC2 instance type pulumi-aws knows (its generated `ec2.InstanceType` list)."""
    from pulumi_aws.ec2._enums import InstanceType  # the list alone, not the whole ec2 module

    if value not in {member.value for member in InstanceType}:
        raise ValueError(f"{value!r} is not an EC2 instance type (pulumi-aws's ec2.InstanceType), e.g. 'm6i.xlarge'")
    return value


Ec2InstanceType = Annotated[str, AfterValidator(_ec2_instance_type)]

_SUBNET = re.compile(r"^subnet-[0-9a-f]{8,17}$")


def _subnet(value: str) -> str:
    if not _SUBNET.match(value):
        raise ValueError(f"{value!r} is not a subnet ID such as 'subnet-0123456789abcdef0'")
    return value


SubnetId = Annotated[str, AfterValidator(_subnet)]

_ARN = re.compile(r"^arn:aws[a-z-]*:iam::[0-9]{12}:(role|user)/[\w+=,.@/-]+$")


def _iam_arn(value: str) -> str:
    if not _ARN.match(value):
        raise ValueError(f"{value!r} is not an IAM role or user ARN such as 'arn:aws:iam::123456789012:role/admin'")
    return value


IamPrincipalArn = Annotated[str, AfterValidator(_iam_arn)]

PositiveInt = Annotated[int, Field(gt=0)]
NonNegativeInt = Annotated[int, Field(ge=0)]
Percent = Annotated[int, Field(ge=0, le=100)]


# --- cluster -------------------------------------------------------------------------------

KubernetesVersion = Literal["1.30", "1.31", "1.32", "1.33", "1.34"]


class SystemNodeGroup(ConfigModel):
    """CPU nodes for the platform's own controllers (Istio, Knative, operators, autoscaler)."""

    instance_type: Ec2InstanceType = "m6i.xlarge"
    min_size: PositiveInt = 2
    max_size: PositiveInt = 4
    desired_size: PositiveInt = 2


class EksSettings(ConfigModel):
    region: str | None = None
    subnet_ids: Annotated[list[SubnetId], Field(min_length=2)]
    endpoint_public_access: bool = False
    public_access_cidrs: list[str] = []
    admin_principal_arns: list[IamPrincipalArn] = []
    workload_identity: Literal["podIdentity", "irsa"] = "podIdentity"
    system_node_group: SystemNodeGroup = SystemNodeGroup()


class KubeconfigSettings(ConfigModel):
    path: str | None = None
    context: str | None = None


class ClusterConfig(ConfigModel):
    name: ResourceName
    mode: Literal["eks", "kubeconfig"]
    kubernetes_version: KubernetesVersion = "1.33"
    eks: EksSettings | None = None
    kubeconfig: KubeconfigSettings | None = None

    @model_validator(mode="after")
    def _mode_block(self) -> ClusterConfig:
        if self.mode == "eks" and self.eks is None:
            raise ValueError("mode 'eks' needs an 'eks' block (subnetIds, ...)")
        if self.mode == "eks" and self.kubeconfig is not None:
            raise ValueError("mode 'eks' takes no 'kubeconfig' block: the provider is built from the EKS cluster")
        if self.mode == "kubeconfig" and self.eks is not None:
            raise ValueError("mode 'kubeconfig' takes no 'eks' block: the cluster already exists")
        return self


# --- GPU node pools ------------------------------------------------------------------------


class MigDeviceGroup(ConfigModel):
    """`gpus` GPUs of each node, in device order, share this layout."""

    gpus: PositiveInt
    mig_enabled: bool = True
    profiles: dict[str, PositiveInt] = {}


class MigGeometry(ConfigModel):
    name: Annotated[str, Field(pattern=r"^[a-z0-9][a-z0-9.-]{0,62}$")]
    devices: Annotated[list[MigDeviceGroup], Field(min_length=1)]


class GpuSharing(ConfigModel):
    mode: Literal["none", "mig", "timeSlicing"] = "none"
    # mig: one of the GPU Operator's built-in configs ...
    mig_config: str | None = None
    # ... or a custom geometry (checked to fit the GPU in checks.py).
    mig_geometry: MigGeometry | None = None
    # timeSlicing: how many pods share one GPU.
    replicas: Annotated[int, Field(ge=2, le=48)] | None = None

    @model_validator(mode="after")
    def _mode_fields(self) -> GpuSharing:
        if self.mode == "mig":
            if (self.mig_config is None) == (self.mig_geometry is None):
                raise ValueError("mode 'mig' needs exactly one of 'migConfig' (a built-in config) or 'migGeometry'")
            if self.replicas is not None:
                raise ValueError("'replicas' is for mode 'timeSlicing', not 'mig'")
        elif self.mode == "timeSlicing":
            if self.replicas is None:
                raise ValueError("mode 'timeSlicing' needs 'replicas' (2..48 pods per GPU)")
            if self.mig_config is not None or self.mig_geometry is not None:
                raise ValueError("'migConfig'/'migGeometry' are for mode 'mig', not 'timeSlicing'")
        elif self.mig_config is not None or self.mig_geometry is not None or self.replicas is not None:
            raise ValueError("mode 'none' takes no 'migConfig', 'migGeometry' or 'replicas'")
        return self


class NodePoolConfig(ConfigModel):
    name: ResourceName
    instance_type: InstanceTypeName
    ami_type: Literal["AL2023_x86_64_NVIDIA", "BOTTLEROCKET_x86_64_NVIDIA"] = "AL2023_x86_64_NVIDIA"
    capacity_type: Literal["ON_DEMAND", "SPOT"] = "ON_DEMAND"
    min_size: NonNegativeInt = 0
    max_size: PositiveInt
    desired_size: NonNegativeInt | None = None
    disk_size_gib: Annotated[int, Field(ge=50, le=16384)] = 200
    labels: dict[str, str] = {}
    sharing: GpuSharing = GpuSharing()

    @model_validator(mode="after")
    def _sizes(self) -> NodePoolConfig:
        if self.min_size > self.max_size:
            raise ValueError(f"minSize {self.min_size} is larger than maxSize {self.max_size}")
        desired = self.desired_size
        if desired is not None and not self.min_size <= desired <= self.max_size:
            raise ValueError(f"desiredSize {desired} must lie between minSize {self.min_size} and maxSize {self.max_size}")
        return self

    @property
    def initial_size(self) -> int:
        return self.min_size if self.desired_size is None else self.desired_size


# --- tenants -------------------------------------------------------------------------------


class ResourceBudget(ConfigModel):
    """Requests a tenant may hold at once. `gpu` counts nvidia.com/gpu: whole GPUs on unshared
    pools, shares on time-sliced pools. `mig` counts slices per MIG profile."""

    gpu: NonNegativeInt = 0
    mig: dict[str, NonNegativeInt] = {}
    cpu: Quantity | None = None
    memory: Quantity | None = None
    pods: NonNegativeInt | None = None


class TenantConfig(ConfigModel):
    name: NamespaceName
    # Identity-provider groups bound to edit rights in the tenant's namespace.
    groups: list[str] = []
    quota: ResourceBudget
    # The part of `quota` experiments may use; the rest is reserved for production.
    experiment_quota: ResourceBudget = ResourceBudget()
    # Pools whose capacity backs this tenant's quota; default: every pool.
    pools: Annotated[list[str], Field(min_length=1)] | None = None
    pod_security: Literal["restricted", "baseline"] = "restricted"


# --- models --------------------------------------------------------------------------------


class ModelSource(ConfigModel):
    huggingface: str | None = None
    s3_uri: Annotated[str, Field(pattern=r"^s3://[a-z0-9][a-z0-9.-]{1,61}[a-z0-9](/.*)?$")] | None = None
    # Hugging Face: a full commit SHA (never a branch); S3: the object version tag or prefix date.
    revision: Annotated[str, Field(min_length=1)]

    @model_validator(mode="after")
    def _one_source(self) -> ModelSource:
        if (self.huggingface is None) == (self.s3_uri is None):
            raise ValueError("give exactly one of 'huggingface' (org/name) or 's3Uri' (s3://bucket/prefix)")
        if self.huggingface is not None:
            if not re.match(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$", self.huggingface):
                raise ValueError(f"{self.huggingface!r} is not a Hugging Face repository id 'org/name'")
            if not re.match(r"^[0-9a-f]{40}$", self.revision):
                raise ValueError(
                    f"revision {self.revision!r} is not pinned: give the 40-character commit SHA of the model repository"
                )
        return self


class ServerArgs(ConfigModel):
    """vLLM engine settings; a version's values override the model's."""

    max_model_len: PositiveInt | None = None
    gpu_memory_utilization: Annotated[float, Field(gt=0.1, le=0.98)] | None = None
    max_num_seqs: PositiveInt | None = None
    quantization: Literal["fp8", "awq", "gptq", "bitsandbytes", "compressed-tensors"] | None = None
    dtype: Literal["auto", "bfloat16", "float16"] | None = None
    extra_args: list[str] = []


class ModelVersion(ConfigModel):
    name: VersionName
    source: ModelSource
    image: PinnedImage | None = None
    server: ServerArgs = ServerArgs()


class ReleaseConfig(ConfigModel):
    stable: VersionName
    canary: VersionName | None = None
    canary_weight: Percent = 0
    # Alternatively, the split as weights per version (stable and canary, adding up to 100).
    weights: dict[VersionName, Percent] | None = None
    override_header: HeaderName = "x-model-version"
    user_key_header: HeaderName = "x-user-id"

    @model_validator(mode="before")
    @classmethod
    def _weights_to_canary_weight(cls, data: Any) -> Any:
        if not isinstance(data, dict) or data.get("weights") is None:
            return data
        weights = data["weights"]
        if "canaryWeight" in data:
            raise ValueError("give either 'canaryWeight' or 'weights', not both")
        if not isinstance(weights, dict) or not all(isinstance(w, int) for w in weights.values()):
            return data  # the field's own validation reports the type
        expected = {data.get("stable"), data.get("canary")} - {None}
        if set(weights) != expected:
            raise ValueError(
                f"'weights' must name exactly the stable and canary versions ({', '.join(sorted(map(str, expected)))}), got "
                f"{', '.join(sorted(weights))}"
            )
        total = sum(weights.values())
        if total != 100:
            raise ValueError(f"weights add up to {total}, not 100: {', '.join(f'{v}={w}' for v, w in weights.items())}")
        return {**data, "canaryWeight": weights.get(data.get("canary"), 0)}

    @model_validator(mode="after")
    def _canary(self) -> ReleaseConfig:
        if self.canary is None and self.canary_weight != 0:
            raise ValueError(f"canaryWeight {self.canary_weight} needs a 'canary' version")
        if self.canary is not None and self.canary == self.stable:
            raise ValueError(f"canary {self.canary!r} is the stable version: name another version")
        return self


class ReplicaResources(ConfigModel):
    """What one replica asks for: `gpus` whole GPUs (or time-sliced shares) or one MIG slice."""

    gpus: PositiveInt | None = None
    mig_profile: str | None = None
    cpu: Quantity = "4"
    memory: Quantity = "32Gi"
    # Node-local volume the weights are downloaded to (emptyDir): must hold the checkpoint.
    cache_size: Quantity = "100Gi"

    @model_validator(mode="after")
    def _one_gpu_kind(self) -> ReplicaResources:
        if (self.gpus is None) == (self.mig_profile is None):
            raise ValueError("give exactly one of 'gpus' (whole GPUs per replica) or 'migProfile' (e.g. '1g.10gb')")
        return self


class HpaSettings(ConfigModel):
    gpu_utilization_target: Annotated[int, Field(ge=1, le=100)] | None = 70
    queue_depth_target: PositiveInt | None = 5
    scale_up_stabilization_seconds: Annotated[int, Field(ge=0, le=3600)] = 0
    scale_down_stabilization_seconds: Annotated[int, Field(ge=0, le=3600)] = 300
    scale_down_max_percent: Annotated[int, Field(ge=1, le=100)] = 50
    scale_down_period_seconds: Annotated[int, Field(ge=1, le=1800)] = 60
    scale_up_max_pods: PositiveInt = 4
    scale_up_period_seconds: Annotated[int, Field(ge=1, le=1800)] = 60

    @model_validator(mode="after")
    def _some_metric(self) -> HpaSettings:
        if self.gpu_utilization_target is None and self.queue_depth_target is None:
            raise ValueError("give at least one of 'gpuUtilizationTarget' or 'queueDepthTarget'")
        return self


class KpaSettings(ConfigModel):
    target_concurrency: PositiveInt | None = None
    container_concurrency: NonNegativeInt | None = None
    # Knative's bounds: scale-down delay 0s..1h, stable window 6s..1h.
    scale_down_delay: Annotated[str, AfterValidator(_duration), _duration_between(0, 3600)] = "5m"
    window: Annotated[str, AfterValidator(_duration), _duration_between(6, 3600)] = "60s"
    initial_scale: NonNegativeInt | None = None


class AutoscalingConfig(ConfigModel):
    mode: AutoscalingMode
    min_replicas: NonNegativeInt
    max_replicas: PositiveInt
    hpa: HpaSettings = HpaSettings()
    kpa: KpaSettings = KpaSettings()

    @model_validator(mode="after")
    def _bounds(self) -> AutoscalingConfig:
        if self.max_replicas < self.min_replicas:
            raise ValueError(f"maxReplicas {self.max_replicas} is below minReplicas {self.min_replicas}")
        if self.mode == "hpa" and self.min_replicas < 1:
            raise ValueError("an HPA cannot scale to zero: minReplicas must be at least 1 (use mode 'kpa' for scale-to-zero)")
        return self


class DrainSettings(ConfigModel):
    termination_grace_period_seconds: Annotated[int, Field(ge=30, le=3600)] = 300
    # Time for the endpoint to leave every load balancer before vLLM gets SIGTERM.
    pre_stop_delay_seconds: Annotated[int, Field(ge=0, le=120)] = 15


class ModelConfig(ConfigModel):
    name: ResourceName
    served_model_name: Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._/:-]{0,127}$")] | None = None
    tenant: NamespaceName
    pool: ResourceName
    profile: ProfileName
    resources: ReplicaResources
    versions: Annotated[list[ModelVersion], Field(min_length=1)]
    release: ReleaseConfig
    autoscaling: AutoscalingConfig
    server: ServerArgs = ServerArgs()
    tiers: Annotated[list[TierName], Field(min_length=1)] | None = None
    # Send this model's batch-tier requests to another model's servers (e.g. the same weights
    # on a batch pool); that model answers to this model's served name too.
    batch_model: ResourceName | None = None
    priority_class: PriorityClassName | None = None
    drain: DrainSettings = DrainSettings()

    @property
    def openai_name(self) -> str:
        return self.served_model_name or self.name


# --- traffic -------------------------------------------------------------------------------


class TierPolicy(ConfigModel):
    # The longest a request of this tier may take end to end at the gateway.
    timeout: Duration
    # Requests allowed to wait for a connection per gateway pod and model version before the
    # gateway answers 503 at once (Envoy circuit breaker).
    max_pending_requests: PositiveInt
    # Requests in flight per gateway pod and model version.
    max_requests: PositiveInt
    # Retries of requests that never reached a server (connect failure, refused stream).
    retry_attempts: Annotated[int, Field(ge=0, le=3)]
    # vLLM priority written into the request body (lower is served first).
    vllm_priority: Annotated[int, Field(ge=0, le=100)]


def _default_tiers() -> dict[TierName, TierPolicy]:
    # The route timeout bounds a whole response, streamed ones included, so it must cover a long
    # answer; waiting is bounded by the pending-request limits (503 at once when they are full).
    # Batch stops at 600 s: what Knative's activator drains (KNATIVE_ACTIVATOR_GRACE_SECONDS).
    return {
        "premium": TierPolicy(timeout="120s", max_pending_requests=64, max_requests=512, retry_attempts=1, vllm_priority=0),
        "standard": TierPolicy(timeout="300s", max_pending_requests=32, max_requests=256, retry_attempts=1, vllm_priority=1),
        "batch": TierPolicy(timeout="600s", max_pending_requests=16, max_requests=128, retry_attempts=0, vllm_priority=2),
    }


class TrafficConfig(ConfigModel):
    hosts: Annotated[list[str], Field(min_length=1)] = ["*"]
    tls_credential_name: str | None = None
    tier_header: HeaderName = "x-tier"
    # What a request with no (or an unknown) tier header is treated as.
    default_tier: TierName = "standard"
    bucket_header: HeaderName = "x-user-bucket"
    model_header: HeaderName = "x-model"
    # Largest request body the gateway buffers (the filter reads the JSON body); beyond it: 413.
    max_request_body_bytes: Annotated[int, Field(ge=1 << 20, le=256 << 20)] = 16 << 20
    tiers: dict[TierName, TierPolicy] = Field(default_factory=_default_tiers)

    @field_validator("tiers", mode="after")
    @classmethod
    def _every_tier(cls, tiers: dict[TierName, TierPolicy]) -> dict[TierName, TierPolicy]:
        # A stack may tune some tiers; the others keep their defaults.
        return {**_default_tiers(), **tiers}


# --- the rest ------------------------------------------------------------------------------


class CapacityConfig(ConfigModel):
    # Allowed ratio of summed tenant quotas to what the pools provide at max size.
    overcommit_ratio: Annotated[float, Field(ge=1.0, le=10.0)] = 1.0


class MonitoringConfig(ConfigModel):
    # Install kube-prometheus-stack; turn off where the cluster already runs a Prometheus
    # Operator that selects ServiceMonitors from every namespace.
    install_prometheus_stack: bool = True
    # Install metrics-server (the resource metrics API CPU-based HPAs need: the gateway's,
    # Knative's); turn off where the cluster already runs one.
    install_metrics_server: bool = True
    # Where prometheus-adapter finds Prometheus when the platform does not install it.
    prometheus_url: Annotated[str, Field(pattern=r"^https?://[^\s]+$")] | None = None


class ProfileOverride(ConfigModel):
    concurrency_per_replica: PositiveInt | None = None
    request_timeout_seconds: PositiveInt | None = None
    prefix_caching: bool | None = None
    tiers: Annotated[list[TierName], Field(min_length=1)] | None = None


class PlatformConfig(ConfigModel):
    """Every top-level key under `inference-platform:` in a stack file."""

    environment: Literal["development", "staging", "production"]
    cluster: ClusterConfig
    node_pools: Annotated[list[NodePoolConfig], Field(min_length=1)]
    tenants: Annotated[list[TenantConfig], Field(min_length=1)]
    models: list[ModelConfig] = []
    traffic: TrafficConfig = TrafficConfig()
    profiles: dict[ProfileName, ProfileOverride] = {}
    capacity: CapacityConfig = CapacityConfig()
    monitoring: MonitoringConfig = MonitoringConfig()


# Top-level keys that hold secrets: read with get_secret, never stored in the model.
SECRET_KEYS = ("huggingFaceToken",)
