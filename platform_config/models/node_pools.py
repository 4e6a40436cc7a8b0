"""GPU node pools: instance type, sizes, node labels, how the GPUs are shared (whole, MIG, time-sliced) and where
replicas' weights land on the nodes."""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import AfterValidator, Field, model_validator

from ..gpu_catalog import COMPUTE_SLICES, INSTANCE_TYPES
from .base import _DNS_1123_SUBDOMAIN, INSTANCE_TYPE_FORM, ConfigModel, MigProfileName, PositiveInt, ResourceName, _full_match
from .cluster import EKS_NODES_PER_NODE_GROUP


def _instance_type(value: str) -> str:
    if value not in INSTANCE_TYPES:
        allowed = ", ".join(sorted(INSTANCE_TYPES))
        raise ValueError(f"unknown instance type {value!r}; allowed: {allowed}")
    return value


InstanceTypeName = Annotated[
    str, _full_match(INSTANCE_TYPE_FORM, "is not an EC2 instance type such as 'p5.48xlarge'"), AfterValidator(_instance_type)
]


# Label keys and values as the API server validates them (kubernetes/apimachinery
# pkg/util/validation/validation.go at v0.33.9: IsQualifiedName, IsValidLabelValue; a key's prefix is a
# DNS-1123 subdomain, IsDNS1123Subdomain).
_QUALIFIED_NAME = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")


def _label_key(value: str) -> str:
    prefix, slash, name = value.rpartition("/")
    valid_prefix = not slash or (len(prefix) <= 253 and _DNS_1123_SUBDOMAIN.fullmatch(prefix) is not None)
    if not (valid_prefix and len(name) <= 63 and _QUALIFIED_NAME.fullmatch(name)):
        raise ValueError(
            f"{value!r} is not a label key: an optional DNS subdomain prefix and '/', then at most 63 letters, digits, "
            "'-', '_' or '.', starting and ending with a letter or digit"
        )
    return value


def _label_value(value: str) -> str:
    if len(value) > 63 or (value and not _QUALIFIED_NAME.fullmatch(value)):
        raise ValueError(
            f"{value!r} is not a label value: at most 63 letters, digits, '-', '_' or '.', starting and ending with a "
            "letter or digit (or empty)"
        )
    return value


# Their characters and length first (a prefix of 253 and '/' and a name of 63), then the rules above.
LabelKey = Annotated[
    str, _full_match(r"[A-Za-z0-9._/-]{1,317}", "is not a label key: letters, digits and '._/-'"), AfterValidator(_label_key)
]
LabelValue = Annotated[
    str,
    _full_match(r"[A-Za-z0-9._-]{0,63}", "is not a label value: at most 63 letters, digits and '._-'"),
    AfterValidator(_label_value),
]

# Node labels reach the kubelet as --node-labels, and it refuses to start (the node never joins)
# on a label in the kubernetes.io or k8s.io namespaces other than its own: kubernetes/kubernetes
# cmd/kubelet/app/options/options.go ValidateKubeletFlags, isKubernetesLabel; the allowed ones are
# kubernetes/kubelet pkg/apis/well_known_labels.go at v0.33.9 (kubeletLabels, IsKubeletLabel).
_KUBELET_LABELS = frozenset(
    {
        "kubernetes.io/hostname",
        "topology.kubernetes.io/zone",
        "topology.kubernetes.io/region",
        "failure-domain.beta.kubernetes.io/zone",
        "failure-domain.beta.kubernetes.io/region",
        "beta.kubernetes.io/instance-type",
        "node.kubernetes.io/instance-type",
        "kubernetes.io/os",
        "kubernetes.io/arch",
        "beta.kubernetes.io/os",
        "beta.kubernetes.io/arch",
    }
)
_KUBELET_LABEL_NAMESPACES = ("kubelet.kubernetes.io", "node.kubernetes.io")


def _in_namespace(namespace: str, domain: str) -> bool:
    return namespace == domain or namespace.endswith("." + domain)


def _kubelet_may_set(value: str) -> str:
    namespace = value.split("/", 1)[0] if "/" in value else ""
    reserved = _in_namespace(namespace, "kubernetes.io") or _in_namespace(namespace, "k8s.io")
    allowed = value in _KUBELET_LABELS or any(_in_namespace(namespace, n) for n in _KUBELET_LABEL_NAMESPACES)
    if reserved and not allowed:
        raise ValueError(
            f"{value!r} is in the kubernetes.io/k8s.io namespaces, where a kubelet sets only its own labels "
            f"({', '.join(f'{n}/...' for n in _KUBELET_LABEL_NAMESPACES)} and well-known ones): the node would not join"
        )
    return value


NodeLabelKey = Annotated[LabelKey, AfterValidator(_kubelet_may_set)]

# A pool's node count, within EKS's quota of nodes per managed node group.
NodeGroupSize = Annotated[int, Field(ge=0, le=EKS_NODES_PER_NODE_GROUP)]


class MigDeviceGroup(ConfigModel):
    """`gpus` GPUs of each node, in device order, share this layout."""

    gpus: PositiveInt
    """How many GPUs of each node, in device order, take this layout."""
    mig_enabled: bool = True
    """Split these GPUs by MIG; false keeps them whole."""
    # A GPU has 7 compute slices, so no profile fits more than 7 times (and the placement search
    # stays tiny).
    profiles: dict[MigProfileName, Annotated[int, Field(gt=0, le=COMPUTE_SLICES)]] = {}
    """MIG profile -> slices per GPU, e.g. `{3g.40gb: 2}`; must fit one GPU at non-overlapping placements."""


class MigGeometry(ConfigModel):
    # The node label `nvidia.com/mig.config` takes it: a label value, so it ends with a letter or digit too.
    name: Annotated[str, Field(pattern=r"^[a-z0-9]([a-z0-9.-]{0,61}[a-z0-9])?$")]
    """Name of the geometry (a mig-parted config; not a built-in name)."""
    devices: Annotated[list[MigDeviceGroup], Field(min_length=1)]
    """Device groups; their `gpus` add up to the GPUs of a node."""


class GpuSharing(ConfigModel):
    mode: Literal["none", "mig", "timeSlicing"] = "none"
    """`none`: whole GPUs; `mig`: MIG slices; `timeSlicing`: several pods per GPU, no isolation."""
    mig_config: (
        Annotated[str, _full_match(r"[a-z0-9]([a-z0-9.-]{0,61}[a-z0-9])?", "is not a mig-parted config such as 'all-1g.10gb'")]
        | None
    ) = None
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


class WeightCache(ConfigModel):
    """Where a replica's weights (and its image, and the compile caches) land on a node, and the figures its expected
    cold start is derived from (`platform_config/cold_start.py`; the README's "Cold start" shows the arithmetic)."""

    medium: Literal["instanceStore", "rootVolume", "s3Stream"] | None = None
    """`instanceStore`: the node's NVMe instance store, striped as RAID0 by the AL2023 AMI's nodeadm (`localStorage:
    RAID0`), holds the kubelet's and containerd's directories, so the pod's emptyDirs and the images are on NVMe (writes
    at GB/s, never the bottleneck). `rootVolume`: the node's gp3 root volume (`diskSizeGib`), which writes at gp3's
    baseline 125 MiB/s (the launch template sets no throughput). `s3Stream`: no weights on the node: vLLM streams them
    from S3 straight into GPU memory with the Run:ai Model Streamer (`--load-format runai_streamer`, vLLM 0.33.0), so
    every model version on the pool needs S3 weights (`s3Uri`, an `mlflow` version whose weights are in S3, or a
    Hugging Face revision with the stack's `weightMirror`); the images and scratch sit on the disk the default would
    pick. Default: `s3Stream` where the stack has a `weightMirror`, which copies the Hugging Face revisions to S3
    once; else `instanceStore` where the instance type has an instance store and the AMI is AL2023 (p5, g6), else
    `rootVolume`; `rootVolume` on an existing cluster (`cluster.mode: kubeconfig`), whose nodes the platform does not
    launch."""
    download_gbps: Annotated[float, Field(gt=0, le=3200)] | None = None
    """What one node sustains downloading weights and images from outside the VPC (Hugging Face, a registry), in
    Gbit/s. Default: the lower of AWS's ceiling for traffic through an internet gateway (half the instance's bandwidth
    with 32 or more vCPUs, else 5 Gbit/s) and 10 Gbit/s, an assumption for a Hugging Face download with its clients'
    default parallelism: measure it on the pool and set it. On `instanceStore` and `rootVolume` it is the weights' rate
    (on `rootVolume` within the disk's writes) and the images'; on `s3Stream` the images' only, the weights coming at
    `streamGbps`. The `coldStarts` output's `downloadGbps` is the rate the weights come at: this figure, or on
    `s3Stream` the stream's."""
    stream_gbps: Annotated[float, Field(gt=0, le=3200)] | None = None
    """Medium `s3Stream` only: what one replica streams its weights from S3 at, in Gbit/s. Default: the lower of the
    instance's network bandwidth (S3 in the Region counts against all of it, not the internet gateway's half) and 32
    connections (the streamer's `concurrency` the platform sets) at 85 MB/s each, AWS's S3 performance guideline for
    one connection (about 85-90 MB/s): 21.76 Gbit/s on p5 and g6.12xlarge. Reaching S3 in the Region assumes an S3
    gateway endpoint on the nodes' route tables; measure it on the pool and set it."""
    allow_scale_down: bool = True
    """Whether the cluster autoscaler may remove a node whose model pods hold only the weights cache and scratch
    emptyDirs (listed in the pods' `cluster-autoscaler.kubernetes.io/safe-to-evict-local-volumes`): a moved replica
    fetches its weights again. `false` keeps such a node until its pods leave by themselves."""

    @model_validator(mode="after")
    def _stream_rate_only_when_streaming(self) -> WeightCache:
        if self.stream_gbps is not None and self.medium != "s3Stream":
            raise ValueError("'streamGbps' is read only with 'medium: s3Stream'")
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
    price_per_hour: Annotated[float, Field(gt=0, le=10_000)] | None = None
    """What one node of the pool costs per hour in USD, at your rate (on-demand, savings plan or spot): the preview's
    cost, the overview dashboard's cost panel and the cost per token read it. Default: the instance type's AWS
    on-demand list price in us-east-1 as of the dated table in platform_config/prices.py (a spot pool's list price is
    a ceiling); no price in another region or on a cluster reached by kubeconfig."""
    min_size: NodeGroupSize = 0
    """Fewest nodes."""
    max_size: Annotated[int, Field(ge=1, le=EKS_NODES_PER_NODE_GROUP)]
    """Most nodes: capacity, quotas and every model's peak are checked against the pool at this size (at most 450,
    EKS's default quota of nodes per managed node group)."""
    desired_size: NodeGroupSize | None = None
    """Nodes at creation (the cluster autoscaler owns the size after that). Default: `minSize`."""
    disk_size_gib: Annotated[int, Field(ge=50, le=16384)] = 200
    """Node disk in GiB: holds the images and the weights caches."""
    labels: dict[NodeLabelKey, LabelValue] = {}
    """Extra node labels."""
    sharing: GpuSharing = GpuSharing()
    """How the pool's GPUs are shared."""
    weight_cache: WeightCache = WeightCache()
    """Where replicas' weights land on the pool's nodes, and the figures of its expected cold start."""

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
