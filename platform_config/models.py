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
        # The docstring under a field is its description: the config reference (docs/config.md)
        # and the stack-file JSON schema are generated from them.
        use_attribute_docstrings=True,
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


# The schema carries the pattern too, so editors flag a bad duration before a preview does; the
# validator keeps the error message that says what is allowed.
_DURATION_SCHEMA = Field(json_schema_extra={"pattern": _DURATION.pattern})
Duration = Annotated[str, AfterValidator(_duration), _DURATION_SCHEMA]


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
    """EC2 instance type of the CPU nodes (any type pulumi-aws's `ec2.InstanceType` knows)."""
    min_size: PositiveInt = 2
    """Fewest system nodes."""
    max_size: PositiveInt = 4
    """Most system nodes."""
    desired_size: PositiveInt = 2
    """System nodes at creation."""


class EksSettings(ConfigModel):
    region: str | None = None
    """Region of the cluster, for the kubeconfig and the controllers; must equal `aws:region` when both are set.
    Default: `aws:region`."""
    subnet_ids: Annotated[list[SubnetId], Field(min_length=2)]
    """Existing VPC subnets (at least two) for the control plane and every node group; the gateway's load balancer finds
    its subnets by their `kubernetes.io/role/elb` tags."""
    endpoint_public_access: bool = False
    """Expose the Kubernetes API endpoint publicly (restrict it with `publicAccessCidrs`)."""
    public_access_cidrs: list[str] = []
    """CIDRs allowed to reach a public API endpoint."""
    admin_principal_arns: list[IamPrincipalArn] = []
    """IAM roles or users given cluster-admin through EKS access entries."""
    workload_identity: Literal["podIdentity", "irsa"] = "podIdentity"
    """How pods get IAM roles (the autoscaler, the load balancer controller, S3 weights): EKS Pod Identity or IRSA."""
    system_node_group: SystemNodeGroup = SystemNodeGroup()
    """CPU nodes for the platform's own controllers."""


class KubeconfigSettings(ConfigModel):
    path: str | None = None
    """Kubeconfig file. Default: the user's default kubeconfig."""
    context: str | None = None
    """Context in it. Default: its current context."""


class ClusterConfig(ConfigModel):
    name: ResourceName
    """Cluster name (the EKS cluster's name in mode `eks`)."""
    mode: Literal["eks", "kubeconfig"]
    """`eks`: create an EKS cluster; `kubeconfig`: use an existing cluster."""
    kubernetes_version: KubernetesVersion = "1.33"
    """Kubernetes minor version: the EKS version, the cluster autoscaler chart and image, and the version objects are
    validated against."""
    eks: EksSettings | None = None
    """EKS settings (mode `eks` only)."""
    kubeconfig: KubeconfigSettings | None = None
    """How to reach the existing cluster (mode `kubeconfig` only)."""

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
    """How many GPUs of each node, in device order, take this layout."""
    mig_enabled: bool = True
    """Split these GPUs by MIG; false keeps them whole."""
    profiles: dict[str, PositiveInt] = {}
    """MIG profile -> slices per GPU, e.g. `{3g.40gb: 2}`; must fit one GPU at non-overlapping placements."""


class MigGeometry(ConfigModel):
    name: Annotated[str, Field(pattern=r"^[a-z0-9][a-z0-9.-]{0,62}$")]
    """Name of the geometry (a mig-parted config; not a built-in name)."""
    devices: Annotated[list[MigDeviceGroup], Field(min_length=1)]
    """Device groups; their `gpus` add up to the GPUs of a node."""


class GpuSharing(ConfigModel):
    mode: Literal["none", "mig", "timeSlicing"] = "none"
    """`none`: whole GPUs; `mig`: MIG slices; `timeSlicing`: several pods per GPU, no isolation."""
    mig_config: str | None = None
    """Mode `mig`: one of the GPU Operator's built-in configs for the pool's GPU (`all-1g.10gb`, `all-3g.40gb`,
    `all-balanced`, ...)."""
    mig_geometry: MigGeometry | None = None
    """Mode `mig`: a custom geometry instead of `migConfig`."""
    replicas: Annotated[int, Field(ge=2, le=48)] | None = None
    """Mode `timeSlicing`: pods per GPU (2-48)."""

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
    """Pool name; its nodes carry `inference.platform/pool=<name>`."""
    instance_type: InstanceTypeName
    """GPU instance type from the platform's catalog (p5, p4d/p4de, g6, g6e, g5)."""
    ami_type: Literal["AL2023_x86_64_NVIDIA", "BOTTLEROCKET_x86_64_NVIDIA"] = "AL2023_x86_64_NVIDIA"
    """Node image; GPU sharing needs AL2023 (the GPU Operator configures it)."""
    capacity_type: Literal["ON_DEMAND", "SPOT"] = "ON_DEMAND"
    """On-demand or spot capacity."""
    min_size: NonNegativeInt = 0
    """Fewest nodes."""
    max_size: PositiveInt
    """Most nodes: capacity, quotas and every model's peak are checked against the pool at this size."""
    desired_size: NonNegativeInt | None = None
    """Nodes at creation (the cluster autoscaler owns the size after that). Default: `minSize`."""
    disk_size_gib: Annotated[int, Field(ge=50, le=16384)] = 200
    """Node disk in GiB: holds the images and the weights caches."""
    labels: dict[str, str] = {}
    """Extra node labels."""
    sharing: GpuSharing = GpuSharing()
    """How the pool's GPUs are shared."""

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
    """`nvidia.com/gpu`: whole GPUs on unshared pools, shares on time-sliced pools."""
    mig: dict[str, NonNegativeInt] = {}
    """MIG profile -> slices, e.g. `{1g.10gb: 8}`."""
    cpu: Quantity | None = None
    """CPU requests (a quantity, e.g. `"64"`)."""
    memory: Quantity | None = None
    """Memory requests and limits (a quantity, e.g. `200Gi`)."""
    pods: NonNegativeInt | None = None
    """Pods."""


class TenantConfig(ConfigModel):
    name: NamespaceName
    """The tenant's namespace (not one the platform or Kubernetes uses)."""
    groups: list[str] = []
    """Identity-provider groups bound to edit rights in the namespace."""
    quota: ResourceBudget
    """The tenant's whole budget."""
    experiment_quota: ResourceBudget = ResourceBudget()
    """The part of `quota` experiments may use; the rest is reserved for production."""
    pools: Annotated[list[str], Field(min_length=1)] | None = None
    """Pools whose capacity backs the quota. Default: every pool."""
    pod_security: Literal["restricted", "baseline"] = "restricted"
    """Pod Security Standard the namespace enforces."""


# --- models --------------------------------------------------------------------------------


class ModelSource(ConfigModel):
    huggingface: str | None = None
    """Hugging Face repository `org/name`."""
    s3_uri: Annotated[str, Field(pattern=r"^s3://[a-z0-9][a-z0-9.-]{1,61}[a-z0-9](/.*)?$")] | None = None
    """S3 prefix holding the weights (needs EKS: read with the model's workload role)."""
    revision: Annotated[str, Field(min_length=1)]
    """Hugging Face: the full 40-character commit SHA (never a branch); S3: the subfolder of the version."""

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
    """vLLM `--max-model-len`."""
    gpu_memory_utilization: Annotated[float, Field(gt=0.1, le=0.98)] | None = None
    """vLLM `--gpu-memory-utilization`. Default: 0.90, divided by the sharing pods on time-sliced pools."""
    max_num_seqs: PositiveInt | None = None
    """vLLM `--max-num-seqs`. Default: Knative's `containerConcurrency`, else the profile's concurrency per replica."""
    quantization: Literal["fp8", "awq", "gptq", "bitsandbytes", "compressed-tensors"] | None = None
    """vLLM `--quantization`."""
    dtype: Literal["auto", "bfloat16", "float16"] | None = None
    """vLLM `--dtype`."""
    extra_args: list[str] = []
    """More `vllm serve` arguments, appended (checked against the pinned vLLM's flags)."""


class ModelVersion(ConfigModel):
    name: VersionName
    """Version name (a DNS label of at most 12 characters)."""
    source: ModelSource
    """Where the weights come from."""
    image: PinnedImage | None = None
    """A pinned vLLM image (tag or digest, never `latest`). Default: the pinned `vllm/vllm-openai`."""
    server: ServerArgs = ServerArgs()
    """vLLM settings of this version, over the model's."""


class ReleaseConfig(ConfigModel):
    stable: VersionName
    """The version that takes the traffic the canary does not."""
    canary: VersionName | None = None
    """The version under test, if any."""
    canary_weight: Percent = 0
    """Percent of traffic (and of sticky users) the canary gets."""
    weights: dict[VersionName, Percent] | None = None
    """The same split as `{stable: 90, canary: 10}`, instead of `canaryWeight`; adds up to 100."""
    override_header: HeaderName = "x-model-version"
    """Header that sends a request to a named version whatever the split."""
    user_key_header: HeaderName = "x-user-id"
    """Header whose value keeps a user on one side of the split."""

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
    """Whole GPUs (or time-sliced shares) per replica: the tensor-parallel size."""
    mig_profile: str | None = None
    """One MIG slice per replica instead of `gpus`, e.g. `1g.10gb`."""
    cpu: Quantity = "4"
    """CPU request per replica (no CPU limit: throttling a tokenizer costs latency)."""
    memory: Quantity = "32Gi"
    """Memory request and limit per replica."""
    cache_size: Quantity = "100Gi"
    """Node-local volume the weights are downloaded to: must hold the checkpoint."""

    @model_validator(mode="after")
    def _one_gpu_kind(self) -> ReplicaResources:
        if (self.gpus is None) == (self.mig_profile is None):
            raise ValueError("give exactly one of 'gpus' (whole GPUs per replica) or 'migProfile' (e.g. '1g.10gb')")
        return self


class HpaSettings(ConfigModel):
    gpu_utilization_target: Annotated[int, Field(ge=1, le=100)] | None = 70
    """Average GPU activity (DCGM, percent) the HPA aims at; null to scale on queue depth only."""
    queue_depth_target: PositiveInt | None = 5
    """Average waiting requests per replica (vLLM) the HPA aims at; null to scale on GPU activity only."""
    scale_up_stabilization_seconds: Annotated[int, Field(ge=0, le=3600)] = 0
    """HPA scale-up stabilization window."""
    scale_down_stabilization_seconds: Annotated[int, Field(ge=0, le=3600)] = 300
    """HPA scale-down stabilization window."""
    scale_down_max_percent: Annotated[int, Field(ge=1, le=100)] = 50
    """At most this percent of replicas removed per `scaleDownPeriodSeconds`."""
    scale_down_period_seconds: Annotated[int, Field(ge=1, le=1800)] = 60
    """Period of the scale-down policy."""
    scale_up_max_pods: PositiveInt = 4
    """At most this many replicas added per `scaleUpPeriodSeconds`."""
    scale_up_period_seconds: Annotated[int, Field(ge=1, le=1800)] = 60
    """Period of the scale-up policy."""

    @model_validator(mode="after")
    def _some_metric(self) -> HpaSettings:
        if self.gpu_utilization_target is None and self.queue_depth_target is None:
            raise ValueError("give at least one of 'gpuUtilizationTarget' or 'queueDepthTarget'")
        return self


class KpaSettings(ConfigModel):
    target_concurrency: PositiveInt | None = None
    """Requests in flight per replica Knative aims at. Default: the profile's concurrency per replica."""
    container_concurrency: NonNegativeInt | None = None
    """Hard cap of requests in flight per replica (0: none). Default: the profile's concurrency per replica."""
    scale_down_delay: Annotated[Duration, _duration_between(0, 3600)] = "5m"
    """How long Knative keeps replicas after load drops (0s-1h)."""
    window: Annotated[Duration, _duration_between(6, 3600)] = "60s"
    """Knative's stable window (6s-1h)."""
    initial_scale: NonNegativeInt | None = None
    """Replicas a new revision starts with."""


class AutoscalingConfig(ConfigModel):
    mode: AutoscalingMode
    """`hpa`: a Deployment scaled by an HPA on queue depth and GPU activity; `kpa`: a Knative Service scaled on
    concurrency (may scale to zero)."""
    min_replicas: NonNegativeInt
    """Fewest replicas of each running version."""
    max_replicas: PositiveInt
    """Most replicas of each running version (versions split one model's traffic by weight: at peak the heaviest
    runs at its maximum, the others at their share)."""
    hpa: HpaSettings = HpaSettings()
    """Mode `hpa` settings."""
    kpa: KpaSettings = KpaSettings()
    """Mode `kpa` settings."""

    @model_validator(mode="after")
    def _bounds(self) -> AutoscalingConfig:
        if self.max_replicas < self.min_replicas:
            raise ValueError(f"maxReplicas {self.max_replicas} is below minReplicas {self.min_replicas}")
        return self


class DrainSettings(ConfigModel):
    termination_grace_period_seconds: Annotated[int, Field(ge=30, le=3600)] = 300
    """Seconds a stopping replica has to finish in-flight requests; raised where needed to cover the preStop delay, the
    longest request the server takes (its profile's or a tier's timeout) and a margin."""
    pre_stop_delay_seconds: Annotated[int, Field(ge=0, le=120)] = 15
    """Seconds for the endpoint to leave every load balancer before vLLM gets SIGTERM."""


class ModelConfig(ConfigModel):
    name: ResourceName
    """Model name; Kubernetes names derive from it."""
    served_model_name: Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._/:-]{0,127}$")] | None = None
    """The OpenAI `model` clients send; unique across models. Default: `name`."""
    tenant: NamespaceName
    """Tenant (namespace) that runs it."""
    pool: ResourceName
    """Node pool it runs on."""
    profile: ProfileName
    """Workload profile: its defaults for tiers, concurrency, timeouts, priority and scale-to-zero (README, Workload profiles)."""
    resources: ReplicaResources
    """What one replica asks for."""
    versions: Annotated[list[ModelVersion], Field(min_length=1)]
    """Every version that may run."""
    release: ReleaseConfig
    """Which versions run, and how traffic splits between them."""
    autoscaling: AutoscalingConfig
    """How replicas scale."""
    server: ServerArgs = ServerArgs()
    """vLLM settings for every version."""
    tiers: Annotated[list[TierName], Field(min_length=1)] | None = None
    """Tiers the model serves. Default: the profile's."""
    batch_model: ResourceName | None = None
    """Send this model's batch-tier requests to another model's servers (e.g. the same weights on a batch pool); that
    model answers to this model's name too."""
    priority_class: PriorityClassName | None = None
    """PriorityClass of its pods. Default: the profile's."""
    drain: DrainSettings = DrainSettings()
    """How a stopping replica drains."""

    @property
    def openai_name(self) -> str:
        return self.served_model_name or self.name


# --- traffic -------------------------------------------------------------------------------


class TierPolicy(ConfigModel):
    timeout: Duration
    """The longest a request of this tier may take end to end at the gateway (a duration, e.g. `300s`)."""
    max_pending_requests: PositiveInt
    """Requests allowed to wait for a connection per gateway pod and model version before the gateway answers 503."""
    max_requests: PositiveInt
    """Requests in flight per gateway pod and model version."""
    retry_attempts: Annotated[int, Field(ge=0, le=3)]
    """Retries of requests that never reached a server (connect failure, refused stream)."""
    vllm_priority: Annotated[int, Field(ge=0, le=100)]
    """vLLM priority written into the request body for servers that take several tiers (lower is served first)."""


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
    """Hosts the gateway serves."""
    tls_credential_name: str | None = None
    """A TLS Secret in `istio-system`: HTTPS on 443, HTTP redirects to it."""
    tier_header: HeaderName = "x-tier"
    """Header naming the request's tier."""
    default_tier: TierName = "standard"
    """The tier of a request with no (or an unknown) tier header."""
    bucket_header: HeaderName = "x-user-bucket"
    """Header the gateway filter sets to the user's sticky bucket (client values are replaced)."""
    model_header: HeaderName = "x-model"
    """Header the gateway filter sets to the body's `model` (client values are replaced)."""
    max_request_body_bytes: Annotated[int, Field(ge=1 << 20, le=256 << 20)] = 16 << 20
    """Largest request body the gateway buffers (the filter reads the JSON body); larger ones get 413."""
    tiers: dict[TierName, TierPolicy] = Field(default_factory=_default_tiers)
    """Per tier: timeout, queue bounds, retries and vLLM priority; tiers not given keep their defaults (premium
    120s/64/512/1/0, standard 300s/32/256/1/1, batch 600s/16/128/0/2). A Knative-served model's requests may take at
    most 600 s, what Knative's activator drains."""

    @field_validator("tiers", mode="after")
    @classmethod
    def _every_tier(cls, tiers: dict[TierName, TierPolicy]) -> dict[TierName, TierPolicy]:
        # A stack may tune some tiers; the others keep their defaults.
        return {**_default_tiers(), **tiers}


# --- the rest ------------------------------------------------------------------------------


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
    prometheus_url: Annotated[str, Field(pattern=r"^https?://[^\s]+$")] | None = None
    """Where prometheus-adapter finds Prometheus when the platform does not install it."""


class ProfileOverride(ConfigModel):
    concurrency_per_replica: PositiveInt | None = None
    """Requests one replica works on at once."""
    request_timeout_seconds: PositiveInt | None = None
    """The longest a request may take."""
    prefix_caching: bool | None = None
    """vLLM prefix caching."""
    tiers: Annotated[list[TierName], Field(min_length=1)] | None = None
    """Tiers its models serve."""


class PlatformConfig(ConfigModel):
    """Every top-level key under `inference-platform:` in a stack file."""

    environment: Literal["development", "staging", "production"]
    """`development`, `staging` or `production` (production HPAs keep at least 2 replicas)."""
    cluster: ClusterConfig
    """Where the platform runs."""
    node_pools: Annotated[list[NodePoolConfig], Field(min_length=1)]
    """GPU node pools."""
    tenants: Annotated[list[TenantConfig], Field(min_length=1)]
    """Tenants: namespaces with GPU quotas, isolation and access."""
    models: list[ModelConfig] = []
    """Served models."""
    traffic: TrafficConfig = TrafficConfig()
    """The gateway: hosts, TLS, tiers."""
    profiles: dict[ProfileName, ProfileOverride] = {}
    """Overrides of a workload profile's defaults for every model of that profile."""
    capacity: CapacityConfig = CapacityConfig()
    """Capacity checks."""
    monitoring: MonitoringConfig = MonitoringConfig()
    """Prometheus and metrics."""


# Top-level keys that hold secrets: read with get_secret, never stored in the model.
SECRET_KEYS = ("huggingFaceToken",)
