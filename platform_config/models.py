"""Typed stack configuration: one pydantic model per config block, read once, validated once.

Keys are camelCase in the stack files (Pulumi's convention); every model forbids unknown keys so
a misspelt key is an error, and is strict so "4" is not silently taken for 4. Checks that need
more than one field (references between blocks, capacity, MIG geometry) live in `checks.py`,
which reports them through the same error format.
"""

from __future__ import annotations

import ipaddress
import json
import re
import urllib.parse
from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator
from pydantic.alias_generators import to_camel

from .cpu_instances import CPU_INSTANCE_TYPES, cpu_catalog_summary
from .gpu_catalog import COMPUTE_SLICES, INSTANCE_TYPES
from .profiles import AutoscalingMode, PriorityClassName, ProfileName, TierName
from .quantity import parse_quantity

PROJECT = "inference-platform"


class ConfigModel(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
        strict=True,
        frozen=True,
        alias_generator=to_camel,
        # The docstring under a field is its description: the config reference (docs/reference/config.md)
        # and the stack-file JSON schema are generated from them.
        use_attribute_docstrings=True,
        # Stack files use the camelCase keys only (the loader validates by alias alone); Python
        # code may build models by field name.
        validate_by_name=True,
        validate_by_alias=True,
    )


# --- reusable field types ------------------------------------------------------------------
# Every pattern here is applied with `fullmatch`: Python's `$` also matches before a trailing
# newline, so `re.match(r"^...$")` would let "qwen\n" through to an object name. (Field(pattern=)
# runs in pydantic-core's Rust regex engine, where `$` is the end of the text only.)

_DNS_1035 = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
# An S3 location the platform puts into shell scripts, IAM policy resources and annotations: a bucket
# name by S3's rules, then a key of letters, digits and `-_.=/` only (S3's safe characters less those a
# shell, an IAM ARN or a glob reads specially: `*`, `'`, `(`, `)`, `!`, and no space, `$`, `;` or `|`),
# at most 1,024 characters (S3's key limit).
S3_URI_PATTERN = r"^s3://[a-z0-9][a-z0-9.-]{1,61}[a-z0-9](/[A-Za-z0-9._=/-]{0,1024})?$"
# Weakenings a production change may acknowledge (`acknowledge`), found by platform_config/guard_rails.py:
# kinds, and removals or widenings of one named model or tenant (`<kind>:<name>`).
ACKNOWLEDGED_KINDS = ("weaken-authentication", "disable-tenant-scoping", "plain-http-internet-facing", "public-api-endpoint")
ACKNOWLEDGED_SCOPED_KINDS = ("remove-model", "remove-tenant", "widen-callers")
_ACKNOWLEDGEMENT = (
    rf"({'|'.join(ACKNOWLEDGED_KINDS)}|({'|'.join(ACKNOWLEDGED_SCOPED_KINDS)}):[a-z0-9]([a-z0-9-]{{0,61}}[a-z0-9])?)"
)
_ACKNOWLEDGEMENT_NAMES = (
    f"is not a weakening's name: {', '.join(ACKNOWLEDGED_KINDS)}, or "
    f"{', '.join(f'{kind}:<name>' for kind in ACKNOWLEDGED_SCOPED_KINDS)}"
)
_DNS_1123 = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")


def _full_match(pattern: str | re.Pattern[str], what_it_is_not: str, max_length: int | None = None) -> AfterValidator:
    """A value the whole of which matches `pattern` (never a prefix, nor a match that stops
    before a trailing newline), and is at most `max_length` characters long; the error says what
    the value is not and gives an example."""
    compiled = re.compile(pattern)

    def check(value: str) -> str:
        if (max_length is not None and len(value) > max_length) or not compiled.fullmatch(value):
            raise ValueError(f"{value!r} {what_it_is_not}")
        return value

    return AfterValidator(check)


def _dns_label(max_length: int, *, letter_first: bool) -> AfterValidator:
    first = "a letter" if letter_first else "a letter or digit"
    return _full_match(
        _DNS_1035 if letter_first else _DNS_1123,
        f"is not a valid name: a DNS-1123 label of lowercase letters, digits and '-', starting with {first} and ending "
        f"with a letter or digit, at most {max_length} characters",
        max_length,
    )


# Names that become Kubernetes object names with suffixes (Services must be DNS-1035 labels).
ResourceName = Annotated[str, _dns_label(30, letter_first=True)]
VersionName = Annotated[str, _dns_label(12, letter_first=True)]
NamespaceName = Annotated[str, _dns_label(40, letter_first=True)]


def _quantity(value: str) -> str:
    parse_quantity(value)
    return value


Quantity = Annotated[str, AfterValidator(_quantity)]


def _positive_quantity(value: str) -> str:
    if parse_quantity(value) <= 0:
        raise ValueError(f"{value!r} must be more than zero: a pod with no memory or CPU request is not admitted")
    return value


PositiveQuantity = Annotated[str, AfterValidator(_positive_quantity)]

# At most 15 digits: anything longer is beyond the protobuf Duration maximum anyway.
_DURATION = re.compile(r"^([0-9]{1,15})(ms|s|m|h)$")
_DURATION_SECONDS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600}
# google.protobuf.Duration's range (protobuf src/google/protobuf/duration.proto: "+315,576,000,000
# seconds"); Envoy and Istio refuse a longer duration.
MAX_DURATION_SECONDS = 315_576_000_000


def duration_seconds(value: str) -> float:
    match = _DURATION.fullmatch(value)
    if not match:
        raise ValueError(f"{value!r} is not a duration: use a whole number with ms, s, m or h, e.g. '5s' or '5m'")
    seconds = int(match[1]) * _DURATION_SECONDS[match[2]]
    if seconds > MAX_DURATION_SECONDS:
        raise ValueError(f"{value!r} is longer than the largest duration, {MAX_DURATION_SECONDS} s (protobuf's Duration)")
    return seconds


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
_IMAGE = re.compile(rf"([a-z0-9.-]+:[0-9]+/)?[a-z0-9][a-z0-9._/-]*(:{IMAGE_TAG_PATTERN})?(@{IMAGE_DIGEST_PATTERN})?")


def _pinned_image(value: str) -> str:
    match = _IMAGE.fullmatch(value)
    has_tag = ":" in value.split("/")[-1].split("@")[0]
    if not match or not (has_tag or "@sha256:" in value):
        raise ValueError(f"{value!r} is not a pinned image: give a tag or a digest, e.g. 'vllm/vllm-openai:v0.11.0'")
    tag = value.split("@")[0].rsplit("/", 1)[-1].partition(":")[2]
    if tag in FORBIDDEN_IMAGE_TAGS:
        raise ValueError(f"{value!r} uses the {tag!r} tag: pin a release tag or a sha256 digest")
    return value


PinnedImage = Annotated[str, AfterValidator(_pinned_image)]


def _refuse_retired_keys(data: Any, retired: Mapping[str, str]) -> Any:
    """A model's raw input, refused when it holds a key the platform no longer reads, with why
    (a `before` validator: an unknown key would only list the allowed ones)."""
    if isinstance(data, dict):
        for key, why in retired.items():
            if key in data:
                raise ValueError(f"'{key}' is no longer read: {why}")
    return data


# Header names no setting may name, by why (RFC 9110 and what the gateway's proxies own): the
# platform's headers are set, read or stripped by the gateway filter, so each must be one that
# nothing else on the path means or rewrites.
FORBIDDEN_HEADER_NAMES: dict[str, frozenset[str]] = {
    # Hop-by-hop (RFC 9110 7.6.1, RFC 9112 7.1-7.4): consumed or rewritten by every proxy.
    "a hop-by-hop header": frozenset(
        {"connection", "proxy-connection", "keep-alive", "te", "trailer", "transfer-encoding", "upgrade"}
    ),
    # The request's representation and framing (RFC 9110 8, 7.2, 10.1.1): rewriting one breaks the body.
    "a representation or framing header": frozenset(
        {
            "content-length",
            "content-type",
            "content-encoding",
            "content-language",
            "content-location",
            "content-range",
            "content-md5",
            "digest",
            "expect",
            "host",
            "range",
        }
    ),  # fmt: skip
    # Credentials: the gateway verifies the token in Authorization, and a credential must never be
    # copied into another header or a metric label.
    "a credential header": frozenset(
        {
            "authorization",
            "proxy-authorization",
            "proxy-authenticate",
            "www-authenticate",
            "cookie",
            "set-cookie",
            "x-api-key",
            "api-key",
            "x-amz-security-token",
        }
    ),  # fmt: skip
    # Set by the mesh's proxies on every request (Envoy's x-forwarded-*, x-request-id, tracing:
    # W3C, B3, Jaeger, AWS X-Ray, Google Cloud, SkyWalking; Envoy's x-client-trace-id).
    "a header the mesh's proxies set": frozenset(
        {
            "forwarded",
            "via",
            "x-request-id",
            "x-real-ip",
            "traceparent",
            "tracestate",
            "b3",
            "uber-trace-id",
            "x-amzn-trace-id",
            "x-cloud-trace-context",
            "grpc-trace-bin",
            "sw8",
            "x-client-trace-id",
        }
    ),  # fmt: skip
    # Rewrites what the request means to a proxy or framework in front of the servers.
    "a method or route override": frozenset({"x-http-method-override", "x-http-method", "x-method-override", "x-original-url"}),
}
# Prefixes of headers Envoy and Istio set or act on (x-envoy-*: Envoy's router and filters;
# x-forwarded-*: the connection manager; x-b3-*: tracing; x-istio-*, x-ot-*).
FORBIDDEN_HEADER_PREFIXES: tuple[str, ...] = ("x-envoy-", "x-forwarded-", "x-b3-", "x-istio-", "x-ot-", "uberctx-", "x-datadog-")
HEADER_NAME_MAX_LENGTH = 64


def _header_name(value: str) -> str:
    if len(value) > HEADER_NAME_MAX_LENGTH or not re.fullmatch(r"[a-z0-9][a-z0-9-]*", value):
        raise ValueError(
            f"{value!r} is not an HTTP header name: use lowercase letters, digits and '-', at most "
            f"{HEADER_NAME_MAX_LENGTH} characters"
        )
    for why, names in FORBIDDEN_HEADER_NAMES.items():
        if value in names:
            raise ValueError(f"{value!r} is {why}: the platform's headers must be its own; use another name")
    if value.startswith(FORBIDDEN_HEADER_PREFIXES):
        raise ValueError(
            f"{value!r} is under a prefix Envoy or Istio set or act on ({', '.join(FORBIDDEN_HEADER_PREFIXES)}); use another name"
        )
    return value


HeaderName = Annotated[str, AfterValidator(_header_name)]


def _instance_type(value: str) -> str:
    if value not in INSTANCE_TYPES:
        allowed = ", ".join(sorted(INSTANCE_TYPES))
        raise ValueError(f"unknown instance type {value!r}; allowed: {allowed}")
    return value


InstanceTypeName = Annotated[str, AfterValidator(_instance_type)]


def _system_instance_type(value: str) -> str:
    """A CPU type of the system node catalog, whose vCPUs and memory size the system nodes."""
    if value not in CPU_INSTANCE_TYPES:
        raise ValueError(f"{value!r} is not an EC2 instance type in the system node catalog; allowed: {cpu_catalog_summary()}")
    return value


SystemInstanceTypeName = Annotated[str, AfterValidator(_system_instance_type)]

SubnetId = Annotated[str, _full_match(r"subnet-[0-9a-f]{8,17}", "is not a subnet ID such as 'subnet-0123456789abcdef0'")]

IamPrincipalArn = Annotated[
    str,
    _full_match(
        r"arn:aws[a-z-]*:iam::[0-9]{12}:(role|user)/[\w+=,.@/-]+",
        "is not an IAM role or user ARN such as 'arn:aws:iam::123456789012:role/admin'",
    ),
]


AwsRegion = Annotated[str, _full_match(r"[a-z]{2}(-[a-z]+)+-[0-9]", "is not an AWS region such as 'us-east-1'")]


def _ipv4_cidr(value: str) -> str:
    try:
        ipaddress.IPv4Network(value, strict=True)
    except ValueError as error:
        raise ValueError(f"{value!r} is not an IPv4 CIDR with no host bits set, e.g. '203.0.113.0/24' ({error})") from None
    if "/" not in value:
        raise ValueError(f"{value!r} has no prefix length: write it as a CIDR, e.g. '{value}/32'")
    return value


# EKS takes IPv4 CIDR blocks for its public endpoint (pulumi-aws eks.ClusterVpcConfig.public_access_cidrs).
Ipv4Cidr = Annotated[str, AfterValidator(_ipv4_cidr)]

# Label keys and values as the API server validates them (kubernetes/apimachinery
# pkg/util/validation/validation.go at v0.33.9: IsQualifiedName, IsValidLabelValue,
# IsDNS1123Subdomain).
_QUALIFIED_NAME = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
_DNS_1123_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


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


LabelKey = Annotated[str, AfterValidator(_label_key)]
LabelValue = Annotated[str, AfterValidator(_label_value)]

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

# Counts, sizes and seconds end up in int32 fields (replicas, node group sizes, HPA and pod
# seconds): the API server refuses anything larger than this.
INT32_MAX = 2**31 - 1
PositiveInt = Annotated[int, Field(gt=0, le=INT32_MAX)]
NonNegativeInt = Annotated[int, Field(ge=0, le=INT32_MAX)]
Percent = Annotated[int, Field(ge=0, le=100)]

# Amazon EKS's quotas (EKS user guide, "Amazon EKS service quotas"): nodes per managed node group (default 450, an
# account may raise it: a stack then needs no more node groups), managed node groups per cluster (default 30, the
# system node group included) and public endpoint CIDR ranges per cluster (40, not adjustable).
EKS_NODES_PER_NODE_GROUP = 450
EKS_NODE_GROUPS_PER_CLUSTER = 30
EKS_PUBLIC_ACCESS_CIDRS = 40
NodeGroupSize = Annotated[int, Field(ge=0, le=EKS_NODES_PER_NODE_GROUP)]

# Knative refuses a containerConcurrency above its `container-concurrency-max-limit`, 1000 by
# default (knative/serving knative-v1.23.0: pkg/apis/config/defaults.go
# DefaultMaxRevisionContainerConcurrency, checked in pkg/apis/serving/metadata_validation.go).
KNATIVE_MAX_CONTAINER_CONCURRENCY = 1000


# --- cluster -------------------------------------------------------------------------------

KubernetesVersion = Literal["1.30", "1.31", "1.32", "1.33", "1.34"]


# The pool label value of the EKS system node group's nodes (`inference.platform/pool=system`):
# no GPU pool may take it, or system pods could be placed on its nodes.
SYSTEM_POOL_NAME = "system"


class SystemNodeGroup(ConfigModel):
    """CPU nodes for the platform's own controllers (Istio, Knative, operators, autoscaler)."""

    instance_type: SystemInstanceTypeName = "m6i.2xlarge"
    """EC2 instance type of the CPU nodes, from the platform's catalog of CPU types (m5, m6i, m6a, m7i, m7a, c6i, c7i,
    r6i, r7i; large to 16xlarge)."""
    min_size: Annotated[int, Field(ge=1, le=EKS_NODES_PER_NODE_GROUP)] = 2
    """Fewest system nodes."""
    max_size: Annotated[int, Field(ge=1, le=EKS_NODES_PER_NODE_GROUP)] = 4
    """Most system nodes (at most 450, EKS's default quota of nodes per managed node group)."""
    desired_size: Annotated[int, Field(ge=1, le=EKS_NODES_PER_NODE_GROUP)] = 2
    """System nodes at creation."""
    price_per_hour: Annotated[float, Field(gt=0, le=10_000)] | None = None
    """USD per node-hour, for the cost report. Default: the dated AWS on-demand list price of the instance type in
    the cluster's region (platform_config/prices.py), where the list covers it."""


class EksSettings(ConfigModel):
    region: AwsRegion | None = None
    """Region of the cluster, for the kubeconfig and the controllers; must equal `aws:region` when both are set.
    Default: `aws:region`."""
    subnet_ids: Annotated[list[SubnetId], Field(min_length=2)]
    """Existing VPC subnets (at least two) for the control plane and every node group; the gateway's load balancer finds
    its subnets by their `kubernetes.io/role/elb` tags."""
    endpoint_public_access: bool = False
    """Expose the Kubernetes API endpoint publicly (restrict it with `publicAccessCidrs`)."""
    public_access_cidrs: Annotated[list[Ipv4Cidr], Field(max_length=EKS_PUBLIC_ACCESS_CIDRS)] = []
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
    # A GPU has 7 compute slices, so no profile fits more than 7 times (and the placement search
    # stays tiny).
    profiles: dict[str, Annotated[int, Field(gt=0, le=COMPUTE_SLICES)]] = {}
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


def _tenant_group(value: str) -> str:
    # `system:` groups are Kubernetes' own (system:authenticated is every signed-in user,
    # system:serviceaccounts every pod): binding one would open the tenant to all of them.
    if not value or value.startswith("system:"):
        raise ValueError(f"{value!r} is not a tenant group: give an identity-provider group, not empty or a 'system:' group")
    return value


class TenantConfig(ConfigModel):
    name: NamespaceName
    """The tenant's namespace (not one the platform or Kubernetes uses)."""
    groups: list[Annotated[str, AfterValidator(_tenant_group)]] = []
    """Identity-provider groups (never `system:` ones) bound to the tenant's Role in the namespace: read its workloads,
    logs and events, restart its pods; never read Secrets, exec into or attach to pods, or create workloads."""
    quota: ResourceBudget
    """The tenant's whole budget."""
    experiment_quota: ResourceBudget = ResourceBudget()
    """The part of `quota` experiments may use; the rest is reserved for production."""
    pools: Annotated[list[str], Field(min_length=1)] | None = None
    """Pools whose capacity backs the quota. Default: every pool."""
    pod_security: Literal["restricted", "baseline"] = "restricted"
    """Pod Security Standard the namespace enforces."""
    s3_prefixes: Annotated[list[Annotated[str, Field(pattern=S3_URI_PATTERN)]], Field(max_length=64)] = []
    """S3 prefixes that hold the tenant's data (`s3://bucket` or `s3://bucket/folder`): every S3 location its models,
    adapters and batch jobs name (weights, adapters, batch inputs and outputs, and what the registry or its lock file
    resolves to) must lie under one, no other tenant's may overlap them, and none may be in the weight mirror's bucket
    (the platform's: a tenant's servers read their own copies under `<bucket>/<tenant>/`, written by the mirror only)."""
    batch_quota: dict[str, ResourceBudget] = {}
    """Pool -> what the tenant's batch jobs are guaranteed there (Kueue's nominal quota of the tenant's ClusterQueue on
    that pool's ResourceFlavor). Batch pods run at `inference-experiment` priority, so the sum over pools is part of
    `experimentQuota`; beyond it a job may borrow what other tenants leave idle on the pool, up to `experimentQuota`,
    and lent GPUs are reclaimed by preemption (README, Batch jobs)."""


# --- models --------------------------------------------------------------------------------


# MLflow's own rule for an alias (mlflow/utils/validation.py `_validate_model_alias_name` at
# v3.17.2): letters, digits, '_' and '-'; never `latest` in any case (`_validate_model_alias_name_reserved`
# compares it lower-cased) nor `v<digits>`, which name versions.
_MLFLOW_ALIAS = re.compile(r"(?!(?i:latest)$)(?![vV]\d+$)[A-Za-z0-9_-]{1,255}")
# Where a lock file lives: a .json file in the stack files' folder, named relative to the project.
LOCK_FILE_PATTERN = re.compile(r"stacks/(?!\.)[\w.-]+\.json")
_ALIAS_MESSAGE = "is not an MLflow alias: letters, digits, '_' and '-' (not 'latest' or 'v<n>')"


class MlflowReference(ConfigModel):
    """A version in the MLflow model registry, resolved at preview and at `pulumi up`."""

    model: Annotated[str, _full_match(r"[^\x00-\x1f/]{1,256}", "is not a registered model name: 1-256 characters, no '/'")]
    """The registered model's name."""
    alias: Annotated[str, _full_match(_MLFLOW_ALIAS, _ALIAS_MESSAGE)] | None = None
    """An alias of the registered model (e.g. `champion`): served is the version it points at when the stack is
    previewed or deployed."""
    version: PositiveInt | None = None
    """A version number of the registered model."""

    @model_validator(mode="after")
    def _alias_or_version(self) -> MlflowReference:
        if (self.alias is None) == (self.version is None):
            raise ValueError("give exactly one of 'alias' (e.g. champion) or 'version' (a version number)")
        return self


class ModelSource(ConfigModel):
    huggingface: str | None = None
    """Hugging Face repository `org/name`."""
    s3_uri: Annotated[str, Field(pattern=S3_URI_PATTERN)] | None = None
    """S3 prefix holding the weights (needs EKS: read with the model's workload role)."""
    revision: Annotated[str, Field(min_length=1)] | None = None
    """Hugging Face: the full 40-character commit SHA (never a branch); S3: the subfolder of the version. Not given
    with `mlflow`: the registry names it."""
    mlflow: MlflowReference | None = None
    """A model version in the MLflow registry (`registry` config), resolved at every preview and `pulumi up`: served
    are the weights its `registry.weightsTag` tag names, else its source URI, which must be pinned
    (`hf://org/name@<commit SHA>`, or `s3://bucket/prefix/<folder>`: the last segment is the version's subfolder).
    The version each reference resolved to is on its pods' annotations and in the `modelRegistry` stack output."""

    @model_validator(mode="after")
    def _one_source(self) -> ModelSource:
        given = [self.huggingface is not None, self.s3_uri is not None, self.mlflow is not None]
        if sum(given) != 1:
            raise ValueError(
                "give exactly one of 'huggingface' (org/name), 's3Uri' (s3://bucket/prefix) or 'mlflow' ({model, alias} "
                "or {model, version})"
            )
        if self.mlflow is not None:
            if self.revision is not None:
                raise ValueError("'revision' is not given with 'mlflow': the registry's version names the weights")
            return self
        if self.revision is None:
            raise ValueError("'revision' is required: the commit SHA (Hugging Face) or the version's subfolder (S3)")
        if self.huggingface is not None:
            if not re.fullmatch(r"[A-Za-z0-9][\w.-]*/[\w.-]+", self.huggingface):
                raise ValueError(f"{self.huggingface!r} is not a Hugging Face repository id 'org/name'")
            if not re.fullmatch(r"[0-9a-f]{40}", self.revision):
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
    """vLLM `--max-num-seqs`. Default: `autoscaling.kpa.containerConcurrency` (mode `kpa`), else the profile's
    concurrency per replica."""
    # vLLM 0.28.0 moved bitsandbytes out of tree (a plugin the image does not hold): not offered.
    quantization: Literal["fp8", "awq", "gptq", "compressed-tensors"] | None = None
    """vLLM `--quantization`."""
    dtype: Literal["auto", "bfloat16", "float16"] | None = None
    """vLLM `--dtype`."""
    # The settings below are the only other `vllm serve` flags a stack may set: each exists in
    # vLLM 0.33.0 and is typed as its argument is there (vllm/config/{model,cache,scheduler,
    # offload}.py at v0.33.0). Flags the platform computes (port, served names, parallelism,
    # memory share, drain, scheduling policy, prefix caching, revision) are not settable, nor are
    # credentials or code execution (`--api-key`, `--hf-token`, `--trust-remote-code`), nor
    # `--kv-cache-memory-bytes` (it overrides the memory share).
    enforce_eager: bool | None = None
    """vLLM `--enforce-eager` when true: no CUDA graphs (less memory, slower decoding)."""
    max_num_batched_tokens: PositiveInt | None = None
    """vLLM `--max-num-batched-tokens`: tokens one scheduler step may process."""
    long_prefill_token_threshold: NonNegativeInt | None = None
    """vLLM `--long-prefill-token-threshold`: a prompt longer than this counts as long (0: vLLM's default)."""
    kv_cache_dtype: Literal["auto", "float16", "bfloat16", "fp8", "fp8_e4m3", "fp8_e5m2", "fp8_inc", "fp8_ds_mla"] | None = None
    """vLLM `--kv-cache-dtype`."""
    block_size: PositiveInt | None = None
    """vLLM `--block-size`: tokens per KV-cache block."""
    cpu_offload_gb: Annotated[float, Field(ge=0)] | None = None
    """vLLM `--cpu-offload-gb`: GiB of weights kept in CPU memory per GPU."""
    seed: NonNegativeInt | None = None
    """vLLM `--seed`."""
    # vLLM 0.31.0 removed the `slow` mode.
    tokenizer_mode: Literal["auto", "hf", "mistral", "deepseek_v32"] | None = None
    """vLLM `--tokenizer-mode`."""
    max_logprobs: NonNegativeInt | None = None
    """vLLM `--max-logprobs`: the most log probabilities a request may ask for (vLLM's -1, no cap, is refused: it
    can exhaust memory)."""
    prefill_tokens_per_second: Annotated[int, Field(ge=1, le=10_000_000)] | None = None
    """Prompt tokens one replica prefills per second, as measured on its GPU (e.g. `vllm bench serve`). Where no
    endpoint picker times the queue (a Knative model that scales to zero), vLLM then admits a request only while the
    prompts it still has to prefill take at most the shortest served tier's `queueTimeout` (`--max-num-queued-tokens`),
    and answers 503 at once otherwise. Refused where a picker times the queue (it would be ignored); a batch job has no
    such queue and refuses it."""

    @model_validator(mode="before")
    @classmethod
    def _no_retired_keys(cls, data: Any) -> Any:
        return _refuse_retired_keys(
            data,
            {
                "extraArgs": "vLLM flags are the typed settings of 'server' (enforceEager, maxNumBatchedTokens, "
                "kvCacheDtype, ...); the platform computes --port, --served-model-name, --tensor-parallel-size, "
                "--gpu-memory-utilization, --shutdown-timeout, --scheduling-policy and prefix caching, and credentials "
                "(--api-key, --hf-token) or --trust-remote-code are never arguments",
                "maxNumPartialPrefills": "vLLM 0.27.0 removed --max-num-partial-prefills, and the pinned vLLM would "
                "refuse to start with it",
            },
        )


class ModelArchitecture(ConfigModel):
    """The model's architecture, as its `config.json` at the pinned revision states it: what the preview's Serving
    performance stage sizes the KV cache from, bounds `maxModelLen` by, and predicts latency for
    (docs/design/serving-performance.md). Either the name of the config aiconfigurator-core ships for the same
    architecture (read in place from the installed package), or the config's keys declared here."""

    performance_model: (
        Annotated[str, _full_match(r"[A-Za-z0-9][\w.-]{0,63}/[\w.-]{1,96}", "is not a model name 'org/name'")] | None
    ) = None
    """The model in aiconfigurator-core's `model_configs` whose architecture this checkpoint has, e.g.
    `meta-llama/Meta-Llama-3.1-8B` for Llama-3.1-8B-Instruct (a fine-tune keeps its base's shape): its config and,
    where the database measured it, its latency."""
    family: (
        Annotated[
            str,
            _full_match(r"[A-Z][A-Za-z0-9]{0,63}For(CausalLM|ConditionalGeneration)", "is not an HF architecture"),
        ]
        | None
    ) = None
    """`architectures[0]`, e.g. `Qwen2ForCausalLM`."""
    hidden_size: Annotated[int, Field(ge=64, le=65536)] | None = None
    """`hidden_size`."""
    intermediate_size: Annotated[int, Field(ge=64, le=262144)] | None = None
    """`intermediate_size`."""
    num_hidden_layers: Annotated[int, Field(ge=1, le=1024)] | None = None
    """`num_hidden_layers`."""
    num_attention_heads: Annotated[int, Field(ge=1, le=1024)] | None = None
    """`num_attention_heads`."""
    num_key_value_heads: Annotated[int, Field(ge=1, le=1024)] | None = None
    """`num_key_value_heads`."""
    head_dim: Annotated[int, Field(ge=8, le=1024)] | None = None
    """`head_dim`. Default: `hiddenSize / numAttentionHeads`."""
    max_position_embeddings: Annotated[int, Field(ge=128, le=16_777_216)] | None = None
    """`max_position_embeddings`: the longest context the model was trained for, which `maxModelLen` may not exceed."""
    vocab_size: Annotated[int, Field(ge=1, le=4_194_304)] | None = None
    """`vocab_size`."""
    tie_word_embeddings: bool = False
    """`tie_word_embeddings`."""

    @model_validator(mode="after")
    def _named_or_declared(self) -> ModelArchitecture:
        declared = {name: getattr(self, name) for name in DECLARED_ARCHITECTURE_KEYS}
        if self.performance_model is not None:
            given = sorted(to_camel(name) for name, value in declared.items() if value is not None)
            if given or self.head_dim is not None:
                raise ValueError(
                    f"give either performanceModel (its config is read from the package) or the config's keys, not both: "
                    f"{', '.join(given or ['headDim'])}"
                )
            return self
        missing = sorted(to_camel(name) for name, value in declared.items() if value is None)
        if missing:
            raise ValueError(f"without performanceModel, the config's keys are needed: {', '.join(missing)} missing")
        return self

    def hf_config(self) -> dict[str, Any] | None:
        """The declared keys as `config.json` writes them (None when the package's config is named instead)."""
        if self.performance_model is not None:
            return None
        config: dict[str, Any] = {"architectures": [self.family], "torch_dtype": "bfloat16"}
        for name in (*DECLARED_ARCHITECTURE_KEYS, "head_dim", "tie_word_embeddings"):
            value = getattr(self, name)
            if name != "family" and value is not None:
                config[name] = value
        return config


# What a declared architecture must state (head_dim has a default).
DECLARED_ARCHITECTURE_KEYS = (
    "family",
    "hidden_size",
    "intermediate_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "max_position_embeddings",
    "vocab_size",
)


# A chat template in the project: a .jinja file under templates/, no hidden or parent segment.
CHAT_TEMPLATE_FILE_PATTERN = re.compile(r"templates/(?:[A-Za-z0-9_-][\w.-]*/)*[A-Za-z0-9_-][\w.-]*\.jinja")


class ChatTemplate(ConfigModel):
    """The chat template a version's server applies to chat requests (vLLM's `--chat-template`): how messages become
    the prompt, and the system prompt it writes where a request has none. A file committed in the project, pinned by
    its SHA-256: a new template (or system prompt) is a new version of the model with the same weights, canaried and
    promoted like any version (header override, sticky users), and the pull request's diff shows the file, the pin
    and every server it changes."""

    file: Annotated[
        str,
        _full_match(
            CHAT_TEMPLATE_FILE_PATTERN,
            "is not a .jinja file under templates/ in the project, e.g. templates/summarizer/concise-v2.jinja",
            max_length=256,
        ),
    ]
    """The template, relative to the project, e.g. `templates/summarizer/concise-v2.jinja`."""
    sha256: Annotated[str, _full_match(r"[0-9a-f]{64}", "is not a SHA-256 in lower-case hex (`sha256sum <file>`)")]
    """The file's SHA-256: a template that changes without this pin changing is refused."""


class ModelVersion(ConfigModel):
    name: VersionName
    """Version name (a DNS label of at most 12 characters)."""
    source: ModelSource
    """Where the weights come from."""
    image: PinnedImage | None = None
    """A pinned vLLM image (tag or digest, never `latest`). Default: the pinned `vllm/vllm-openai`."""
    server: ServerArgs = ServerArgs()
    """vLLM settings of this version, over the model's."""
    architecture: ModelArchitecture | None = None
    """The version's architecture where its weights are another model's (a new base, a different size), over the
    model's `architecture`."""
    chat_template: ChatTemplate | None = None
    """The chat template (and default system prompt) its server applies; none: the one the weights ship with."""


class StepOverride(ConfigModel):
    reason: Annotated[str, Field(min_length=10, max_length=500)]
    """Why this change skips the configured steps (at least 10 characters), e.g. a hotfix for an incident."""


class CanaryAnalysis(ConfigModel):
    """What `python -m platform_tools canary` reads from Prometheus and how it decides."""

    window: Annotated[Duration, _duration_between(60, 86400)] = "30m"
    """The window the metrics are read over (1m-24h)."""
    min_requests: PositiveInt = 300
    """Fewest requests each of the canary and the stable version must have served in the window for a verdict;
    fewer: hold."""
    max_latency_ratio: Annotated[float, Field(ge=1.0, le=10.0)] = 1.2
    """Roll back when the canary's TTFT p95 or end-to-end p95 exceeds the stable version's by this factor."""
    max_error_rate: Annotated[float, Field(ge=0.0, le=1.0)] = 0.01
    """Roll back when the canary's fraction of 5xx answers other than 503 exceeds this and the stable version's."""
    max_shed_rate: Annotated[float, Field(ge=0.0, le=1.0)] = 0.05
    """Roll back when the canary's fraction of 503 (shed) answers exceeds this and the stable version's."""


def off_the_steps(canary_weight: int, steps: list[int]) -> str | None:
    """Why a canary weight (a model's, or one of its adapters') is not one the release's steps allow: 0 or a step."""
    if canary_weight in (0, *steps):
        return None
    return f"canaryWeight {canary_weight} is not a step: give 0 or one of {', '.join(map(str, steps))}"


# The bounds of `release.hold`'s reason, which the canary tool's `step hold --reason` also checks.
HOLD_REASON_LENGTH = (10, 500)


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
    steps: Annotated[list[Annotated[int, Field(ge=1, le=100)]], Field(min_length=1)] = [10, 25, 50, 100]
    """The canary weights a release goes through, rising, ending at 100 (its LoRA adapters' canaries too): the canary
    command moves one step at a time, and the policy pack refuses a rise of more than one step per change."""
    step_override: StepOverride | None = None
    """Lets this change raise the canary weight (the model's or its adapters') by more than one step (or promote
    before 100): the reason is recorded on the route and in the policy report. Remove it with the next change."""
    analysis: CanaryAnalysis = CanaryAnalysis()
    """How the canary command judges the canary against the stable version and the profile's targets."""
    hold: Annotated[str, Field(min_length=HOLD_REASON_LENGTH[0], max_length=HOLD_REASON_LENGTH[1])] | None = None
    """Why a person holds the canary at its weight (at least 10 characters), e.g. while an incident is looked into:
    `python -m platform_tools canary` still judges it but writes no step, and `canaries` leaves it out, until a person
    promotes or rolls it back (`python -m platform_tools step`), which removes the hold."""

    @model_validator(mode="before")
    @classmethod
    def _weights_to_canary_weight(cls, data: Any) -> Any:
        if not isinstance(data, dict) or data.get("weights") is None:
            return data
        weights = data["weights"]
        if "canaryWeight" in data:
            raise ValueError("give either 'canaryWeight' or 'weights', not both")
        versions = (data.get("stable"), data.get("canary"))
        if not isinstance(weights, dict) or not all(isinstance(w, int) for w in weights.values()):
            return data  # the field's own validation reports the type
        if not all(v is None or isinstance(v, str) for v in versions):
            return data  # so do `stable` and `canary`'s (a list would not even hash)
        expected = set(versions) - {None}
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
        if any(low >= high for low, high in zip(self.steps, self.steps[1:])) or self.steps[-1] != 100:
            raise ValueError(f"steps {self.steps} must rise strictly and end at 100")
        if (off := off_the_steps(self.canary_weight, self.steps)) is not None:
            raise ValueError(off)
        if self.hold is not None and self.canary is None:
            raise ValueError("'hold' holds a canary: this release has none")
        return self


class ReplicaResources(ConfigModel):
    """What one replica asks for: `gpus` whole GPUs (or time-sliced shares) or one MIG slice."""

    gpus: PositiveInt | None = None
    """Whole GPUs (or time-sliced shares) per replica: the tensor-parallel size."""
    mig_profile: str | None = None
    """One MIG slice per replica instead of `gpus`, e.g. `1g.10gb`."""
    cpu: PositiveQuantity = "4"
    """CPU request per replica (no CPU limit: throttling a tokenizer costs latency)."""
    memory: PositiveQuantity = "32Gi"
    """Memory request and limit per replica."""
    cache_size: PositiveQuantity = "100Gi"
    """Node-local volume the weights are downloaded to: must hold the checkpoint. On a pool that streams weights
    (`weightCache.medium: s3Stream`) the volume holds only the LoRA adapters' files and is sized from them (their
    ranks and `lora.baseShape`, with a margin); `cacheSize` sizes it there only when the base's shape is unknown."""
    weights_size: PositiveQuantity | None = None
    """The checkpoint's size on disk (its safetensors files), from which the expected cold start is derived. Default:
    `cacheSize` (an upper bound)."""

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
    ttft_p99_target_ms: Annotated[int, Field(ge=10, le=600_000)] | None = None
    """Also scale on latency: the P99 time to first token (ms) each version's pods average, over 5 minutes of
    requests (prometheus-adapter, from vLLM's histogram), beside queue depth and GPU activity; the HPA takes the most
    replicas any of them asks for. Needs a streaming profile (its latency is TTFT) and `scaleUpStabilizationSeconds`
    of at least 60, so that a burst of slow requests does not add replicas it then keeps. Default: none. Knative's KPA
    cannot: it scales on concurrency or requests per second only."""
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
    container_concurrency: Annotated[int, Field(ge=1, le=KNATIVE_MAX_CONTAINER_CONCURRENCY)] | None = None
    """Requests one replica runs at once (vLLM `--max-num-seqs` unless `server.maxNumSeqs` says otherwise); without an
    endpoint picker its vLLM takes 10 times as many waiting, then answers 503 at once. Default: the profile's
    concurrency per replica. The Knative Service's own `containerConcurrency` is always 0: queue-proxy's queue has no
    time bound."""
    scale_down_delay: Annotated[Duration, _duration_between(0, 3600)] = "5m"
    """How long Knative keeps replicas after load drops (0s-1h)."""
    window: Annotated[Duration, _duration_between(6, 3600)] = "60s"
    """Knative's stable window (6s-1h)."""
    initial_scale: NonNegativeInt | None = None
    """Replicas a new revision starts with."""


class AutoscalingConfig(ConfigModel):
    mode: AutoscalingMode
    """`hpa`: a Deployment scaled by an HPA on queue depth and GPU activity; `kpa`: a Knative Service scaled on
    concurrency (it may scale to zero only with `endpointPicker.enabled: false`)."""
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


class EndpointPickerSettings(ConfigModel):
    enabled: bool | None = None
    """Put the llm-d endpoint picker (flow control per tier, queue-, KV-cache- and prefix-cache-aware endpoint
    picking) in front of each version's servers: on, and refused off (the picker's queue is the only one bounded in
    time per tier) but for a Knative model that scales to zero outside production. In mode `kpa` the picker dials
    each pod's queue-proxy, so Knative still counts the load; it dials ready pods only and cannot wake a revision at
    zero, so `minReplicas: 0` needs the picker off (Knative's activator then holds a request from zero, untimed, and
    each replica's vLLM bounds its queue in requests)."""
    replicas: Annotated[int, Field(ge=1, le=16)] = 2
    """Endpoint picker pods per version, active-active (each holds its own queues); at least 2 in production."""


class DrainSettings(ConfigModel):
    termination_grace_period_seconds: Annotated[int, Field(ge=30, le=3600)] = 300
    """Seconds a stopping replica has to finish in-flight requests; raised where needed to cover the preStop delay, the
    longest request the server takes (its profile's or a tier's timeout) and a margin."""
    pre_stop_delay_seconds: Annotated[int, Field(ge=0, le=120)] = 15
    """Seconds for the endpoint to leave every load balancer before vLLM gets SIGTERM."""


# An objective is a fraction of requests over the 30-day budget: above one half (below, the
# "objective" is a coin toss) and at most four nines (past that, one failed request spends a
# day's budget at the traffic a model sees).
Objective = Annotated[float, Field(gt=0.5, le=0.9999)]


class WorkloadPeak(ConfigModel):
    """The load a model must meet within its latency target: what the preview's Serving performance stage judges its
    `maxReplicas` by (docs/design/serving-performance.md)."""

    requests_per_second: Annotated[float, Field(gt=0, le=1_000_000)]
    """Requests per second at peak, to each model of the profile (or to this model)."""
    prompt_tokens: Annotated[int, Field(ge=1, le=10_000_000)] | None = None
    """Prompt tokens of a typical request at peak. Default: the profile's."""
    output_tokens: Annotated[int, Field(ge=1, le=1_000_000)] | None = None
    """Output tokens of a typical request at peak. Default: the profile's."""


class SloOverride(ConfigModel):
    """The model's service level objectives where they differ from its profile's (README, Service level objectives)."""

    latency_target_ms: PositiveInt | None = None
    """Latency target in milliseconds: time to first token for streaming profiles, the whole request otherwise.
    Alerts count a request as slow above the histogram boundary at or below it. Default: the profile's target."""
    latency_objective: Objective | None = None
    """Fraction of requests within the latency target, e.g. `0.95`. Default: the profile's."""
    availability_objective: Objective | None = None
    """Fraction of answers that are not 5xx (503 included), e.g. `0.995`. Default: the profile's."""
    peak: WorkloadPeak | None = None
    """The peak this model must meet. Default: the profile's (`profiles.<name>.peak`)."""


# --- LoRA adapters ---------------------------------------------------------------------------

# What `--max-lora-rank` accepts in vLLM 0.33.0 (vllm/config/lora.py at v0.33.0, `MaxLoRARanks`).
VLLM_MAX_LORA_RANKS: tuple[int, ...] = (1, 8, 16, 32, 64, 128, 256, 320, 512)
MaxLoraRank = Literal[1, 8, 16, 32, 64, 128, 256, 320, 512]
# The OpenAI `model` a client sends: no '=' or ',' (vLLM 0.33.0 reads `--lora-modules name=path`
# as the old form only when the item holds '=' and no ',', vllm/entrypoints/common/cli_args.py
# LoRAParserAction) and no '@', which the platform keeps for adapter revisions' module names.
OpenAiModelName = Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._/:-]{0,127}$")]


class AdapterVersion(ConfigModel):
    name: VersionName
    """Revision name (a DNS label of at most 12 characters), unique within the adapter and distinct from the base
    model's version names: the model's `release.overrideHeader` names either."""
    source: ModelSource
    """Where the adapter's weights come from: a Hugging Face repository at a 40-character commit SHA, an S3 prefix and
    its version subfolder, or an MLflow registry version (resolved like a model version's)."""


class AdapterRelease(ConfigModel):
    """Which adapter revisions are loaded, and how the adapter's requests split between them: a user's sticky bucket
    (the gateway filter's, from the token's user) picks the canary for the top `canaryWeight` buckets, the base model's
    canary takes the bottom ones, so the two canaries overlap as little as their weights allow; requests without a user
    split by weight; the model's `release.overrideHeader` naming a revision forces it (only for the principals in
    `traffic.authentication.versionOverridePrincipals`)."""

    stable: VersionName
    """The revision that serves the requests the canary does not."""
    canary: VersionName | None = None
    """The revision under test, loaded beside the stable one on the same servers."""
    canary_weight: Percent = 0
    """Percent of the adapter's requests (and of its sticky users) the canary gets: 0 or one of the model's
    `release.steps`, rising one step per change unless the model's `release.stepOverride` gives a reason (policy
    `canary-weight-steps`)."""

    @model_validator(mode="after")
    def _canary(self) -> AdapterRelease:
        if self.canary is None and self.canary_weight != 0:
            raise ValueError(f"canaryWeight {self.canary_weight} needs a 'canary' revision")
        if self.canary is not None and self.canary == self.stable:
            raise ValueError(f"canary {self.canary!r} is the stable revision: name another revision")
        return self


class LoraAdapter(ConfigModel):
    """A LoRA adapter served by the base model's servers (vLLM `--lora-modules`): clients reach it by its own name,
    with the base model's tiers, canary, priorities, tenant and callers."""

    name: OpenAiModelName
    """The OpenAI `model` clients send for it; unique across every model's served name, batch alias and adapter."""
    rank: Annotated[int, Field(ge=1, le=VLLM_MAX_LORA_RANKS[-1])]
    """The adapter's LoRA rank (`r` in its adapter_config.json): sizes vLLM's `--max-lora-rank` and its memory."""
    tenant: NamespaceName | None = None
    """The tenant that owns the adapter. It must be the base model's tenant (an adapter never rides on another
    tenant's base model). Default: the base model's tenant."""
    source: ModelSource | None = None
    """Where its weights come from, for an adapter with one revision. Give this or `versions`."""
    versions: Annotated[list[AdapterVersion], Field(min_length=1)] | None = None
    """Its revisions, for an adapter with a canary (with `release`). Give this or `source`."""
    release: AdapterRelease | None = None
    """Which revisions run and how requests split between them (with `versions`)."""

    @model_validator(mode="after")
    def _source_or_versions(self) -> LoraAdapter:
        if (self.source is None) == (self.versions is None):
            raise ValueError("give exactly one of 'source' (one revision) or 'versions' with 'release' (revisions)")
        if self.versions is None:
            if self.release is not None:
                raise ValueError("'release' goes with 'versions': an adapter with one 'source' has one revision")
            return self
        if self.release is None:
            raise ValueError("'versions' needs a 'release' naming the stable revision (and the canary, if any)")
        names = [v.name for v in self.versions]
        repeated = sorted({n for n in names if names.count(n) > 1})
        if repeated:
            raise ValueError(f"revision names are listed twice: {', '.join(repeated)}")
        for key, revision in (("stable", self.release.stable), ("canary", self.release.canary)):
            if revision is not None and revision not in names:
                raise ValueError(f"release.{key} {revision!r} is not one of its versions ({', '.join(names)})")
        return self


class BaseShape(ConfigModel):
    """The base model's shape, as its Hugging Face `config.json` states it: what the adapters' memory is estimated
    from (README, LoRA adapters)."""

    hidden_size: Annotated[int, Field(ge=64, le=65536)]
    """`hidden_size`."""
    intermediate_size: Annotated[int, Field(ge=64, le=262144)]
    """`intermediate_size` (of the MLP)."""
    num_hidden_layers: Annotated[int, Field(ge=1, le=1024)]
    """`num_hidden_layers`."""
    num_attention_heads: Annotated[int, Field(ge=1, le=1024)]
    """`num_attention_heads`."""
    num_key_value_heads: Annotated[int, Field(ge=1, le=1024)]
    """`num_key_value_heads`."""


class LoraSettings(ConfigModel):
    """vLLM's LoRA limits for the base model's servers; each defaults to what its adapters need (README, LoRA
    adapters)."""

    max_lora_rank: MaxLoraRank | None = None
    """vLLM `--max-lora-rank`, one of 1, 8, 16, 32, 64, 128, 256, 320, 512 (vLLM 0.33.0's choices): no adapter may have
    a higher rank. Default: the smallest choice that holds the highest adapter rank."""
    max_loras: Annotated[int, Field(ge=1, le=64)] | None = None
    """vLLM `--max-loras`: adapter modules resident on the GPU at once (one batch mixes at most this many). Default:
    every loaded module (each adapter revision); a latency-sensitive profile needs them all resident."""
    max_cpu_loras: Annotated[int, Field(ge=1, le=1024)] | None = None
    """vLLM `--max-cpu-loras`: adapter modules cached in CPU memory, at least `maxLoras`. Default: every loaded module,
    and at least `maxLoras`."""
    base_shape: BaseShape | None = None
    """The base model's shape, for the estimate of what the adapters hold in GPU and CPU memory (the capacity report
    and checks). Without it the memory is not estimated."""


class ModelConfig(ConfigModel):
    name: ResourceName
    """Model name; Kubernetes names derive from it."""
    served_model_name: Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._/:-]{0,127}$")] | None = None
    """The OpenAI `model` clients send; unique across models. Default: `name`."""
    tenant: NamespaceName
    """Tenant (namespace) that runs it; callers whose token names this tenant may call it."""
    callers: list[NamespaceName] = []
    """Other tenants whose members (by the token's `traffic.authentication.tenantClaim`) may call it too."""
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
    model answers to this model's name too, and loads this model's LoRA adapters, whose batch tier goes there as well
    (it must then serve the weights of one of this model's versions, in the adapters' tenant)."""
    priority_class: PriorityClassName | None = None
    """PriorityClass of its pods. Default: the profile's."""
    drain: DrainSettings = DrainSettings()
    """How a stopping replica drains."""
    endpoint_picker: EndpointPickerSettings = EndpointPickerSettings()
    """The endpoint picker in front of each version's servers."""
    slo: SloOverride = SloOverride()
    """Service level objectives the model's alerts hold it to, where they differ from its profile's."""
    architecture: ModelArchitecture | None = None
    """The model's architecture (its config.json): the preview sizes its KV cache, bounds its context length and
    predicts its latency from it. Without it none of that is checked (the report says so)."""
    adapters: list[LoraAdapter] = []
    """LoRA adapters its servers load beside the base weights, each reached by its own OpenAI name (README, LoRA
    adapters)."""
    lora: LoraSettings = LoraSettings()
    """vLLM's LoRA limits, where they differ from what the adapters need."""

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
    max_request_body_bytes: Annotated[int, Field(ge=1 << 10, le=64 << 20)] = 4 << 20
    """Largest request body of this tier, in bytes: a larger one gets 413 from the gateway filter (by its
    content-length before the body is read). The gateway buffers up to the largest tier's limit per connection."""
    queue_timeout: Annotated[Duration, _duration_between(1, 600)] = "10s"
    """The longest a request of this tier waits in a model version's endpoint picker queue before the gateway answers
    503 with `Retry-After` (1s-10m), and that `Retry-After`. Each tier waits its own: the picker's proxy times it per
    tier, the picker's own queue TTL is the longest of the tiers its servers take (see the README)."""
    max_queued_requests: Annotated[int, Field(ge=1, le=100_000)] = 256
    """Requests of this tier one endpoint picker replica holds in its queue; past it: 503 with `Retry-After`."""
    max_queued_bytes: PositiveQuantity = "256Mi"
    """Request bytes of this tier one endpoint picker replica holds in its queue; past it: 503 with `Retry-After`."""
    sheddable: bool = False
    """Whether the endpoint picker may drop this tier's queued requests first when the servers are saturated. A
    sheddable tier may not rank above one that is not."""

    @model_validator(mode="before")
    @classmethod
    def _no_retired_keys(cls, data: Any) -> Any:
        return _refuse_retired_keys(
            data,
            {
                "endpointPickerFailure": "a request whose picker cannot be asked always gets 503 with Retry-After. The "
                "picker's proxy streams the request body to the picker (ext_proc FULL_DUPLEX_STREAMED, as llm-d-router "
                "v0.10.0 needs), so once the picker fails Envoy 1.38 holds no body to send on unpicked (see the README, "
                "Endpoint picking and flow control)",
            },
        )


def _default_tiers() -> dict[TierName, TierPolicy]:
    # The route timeout bounds a whole response, streamed ones included, so it must cover a long
    # answer; waiting is bounded by the pending-request limits (503 at once when they are full).
    # Batch stops at 600 s: what Knative's activator drains (KNATIVE_ACTIVATOR_GRACE_SECONDS).
    # Bodies: 4 MiB holds a 128k-token prompt several times over; batch prompts come in lists.
    return {
        "premium": TierPolicy(
            timeout="120s", max_pending_requests=64, max_requests=512, retry_attempts=1, vllm_priority=0, queue_timeout="5s"
        ),
        "standard": TierPolicy(
            timeout="300s", max_pending_requests=32, max_requests=256, retry_attempts=1, vllm_priority=1, queue_timeout="10s"
        ),
        "batch": TierPolicy(
            timeout="600s",
            max_pending_requests=16,
            max_requests=128,
            retry_attempts=0,
            vllm_priority=2,
            max_request_body_bytes=16 << 20,
            queue_timeout="60s",
            max_queued_requests=128,
            max_queued_bytes="512Mi",
            sheddable=True,
        ),
    }


# Hosts as an Istio Gateway and VirtualService take them: `*`, or a DNS name whose first label may
# be `*` (istio/istio 1.30.3 pkg/config/validation/agent/validation.go, ValidateWildcardDomain:
# at most 255 characters, labels of at most 63 letters, digits and '-').
_HOST_LABEL = r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?"
_GATEWAY_HOST = re.compile(rf"\*|(\*\.)?{_HOST_LABEL}(\.{_HOST_LABEL})*")


GatewayHost = Annotated[
    str,
    _full_match(
        _GATEWAY_HOST,
        "is not a gateway host: give a lowercase DNS name such as 'api.example.com', '*.example.com' or '*' (labels of "
        "letters, digits and '-', at most 63 characters each)",
        max_length=253,
    ),
]
SecretName = Annotated[
    str,
    _full_match(
        _DNS_1123_SUBDOMAIN,
        "is not a Secret name: a DNS-1123 subdomain of lowercase letters, digits, '-' and '.', at most 253 characters",
        max_length=253,
    ),
]


def _https_url(value: str) -> str:
    parts = urllib.parse.urlsplit(value) if len(value) <= 2048 and value.isascii() and value.isprintable() else None
    if parts is None or parts.scheme != "https" or not parts.hostname or "@" in parts.netloc or " " in value or parts.fragment:
        raise ValueError(
            f"{value!r} is not an https URL: give 'https://host/path' (no credentials, spaces or fragment), "
            "at most 2048 characters"
        )
    return value


HttpsUrl = Annotated[str, AfterValidator(_https_url)]

# Members of a JWK that hold private or shared-secret key material (RFC 7518 sections 6.2.2,
# 6.3.2 and 6.4.1): a gateway needs only public keys, and a config file must not carry secrets.
_PRIVATE_JWK_MEMBERS = frozenset({"d", "p", "q", "dp", "dq", "qi", "oth", "k"})
_PUBLIC_KEY_TYPES = ("RSA", "EC", "OKP")


def _inline_jwks(value: str) -> str:
    if len(value) > 64 << 10:
        raise ValueError("an inline JWKS is at most 64 KiB: publish a larger key set and give 'jwksUri'")
    try:
        document = json.loads(value)
    except ValueError:
        raise ValueError('is not JSON: give a JSON Web Key Set such as \'{"keys": [{"kty": "RSA", ...}]}\'') from None
    keys = document.get("keys") if isinstance(document, dict) else None
    if not isinstance(keys, list) or not keys or not all(isinstance(key, dict) for key in keys):
        raise ValueError("is not a JSON Web Key Set: give an object whose 'keys' is a non-empty list of keys")
    for index, key in enumerate(keys):
        if key.get("kty") not in _PUBLIC_KEY_TYPES:
            raise ValueError(f"key {index} has kty {key.get('kty')!r}: only public keys ({', '.join(_PUBLIC_KEY_TYPES)})")
        private = sorted(_PRIVATE_JWK_MEMBERS & key.keys())
        if private:
            raise ValueError(f"key {index} holds private key material ({', '.join(private)}): give only the public key")
    return value


InlineJwks = Annotated[str, AfterValidator(_inline_jwks)]

# A claim name as the gateway filter looks it up in the verified token's payload: printable ASCII
# without spaces, so it is also a valid Lua string literal once JSON-quoted.
ClaimName = Annotated[str, Field(pattern=r"^[!-~]{1,128}$")]
Audience = Annotated[str, Field(pattern=r"^[!-~]{1,512}$")]


class GatewayAuthentication(ConfigModel):
    issuer: HttpsUrl
    """The `iss` of the tokens the gateway accepts (an https URL); a token of any other issuer gets 401."""
    jwks_uri: HttpsUrl | None = None
    """Where the issuer publishes its public keys (an https URL). Give this or `jwks`."""
    jwks: InlineJwks | None = None
    """The issuer's public keys as an inline JSON Web Key Set (no private or shared-secret keys). Give this or
    `jwksUri`."""
    audiences: Annotated[list[Audience], Field(min_length=1)]
    """Audiences (`aud`) a token must name one of: a token minted for another application of the same issuer is
    refused."""
    tier_claim: ClaimName = "tier"
    """Claim naming the caller's tier. Missing: the default tier; naming no tier of `traffic.tiers`: 403."""
    user_claim: ClaimName = "sub"
    """Claim identifying the user: their sticky canary bucket and the user-key header the model servers receive."""
    tenant_claim: ClaimName | None = "tenant"
    """Claim naming the tenant (a string) or tenants (a list of strings) the caller belongs to: a request for a model
    gets 403 unless the claim names the model's tenant or one of its `callers`. null: any authenticated caller may
    call any model."""
    version_override_principals: list[Annotated[str, Field(pattern=r"^[!-~]{1,1024}$")]] = []
    """Request principals (`<issuer>/<sub>`, e.g. canary analysis or testers) allowed to pick a model version with a
    release's override header; anyone else sending that header gets 403."""

    @field_validator("version_override_principals", mode="after")
    @classmethod
    def _principals_of_the_issuer(cls, principals: list[str], info: ValidationInfo) -> list[str]:
        issuer = info.data.get("issuer")  # absent when the issuer itself is invalid (reported there)
        for principal in principals if issuer is not None else []:
            subject = principal.removeprefix(f"{issuer}/")
            if subject == principal or not subject or "*" in principal:
                raise ValueError(
                    f"{principal!r} is not '<issuer>/<sub>' of the issuer {issuer!r} (no wildcards): tokens of other "
                    "issuers never reach the gateway"
                )
        return principals

    @model_validator(mode="after")
    def _one_key_source(self) -> GatewayAuthentication:
        if (self.jwks_uri is None) == (self.jwks is None):
            raise ValueError("give exactly one of 'jwksUri' (https URL of the issuer's keys) or 'jwks' (inline key set)")
        return self


LoadBalancerScheme = Literal["internal", "internet-facing"]


class TrafficConfig(ConfigModel):
    authentication: GatewayAuthentication
    """Who may call the gateway: every request needs a valid JWT of this issuer (401 when invalid, 403 when
    missing); its claims, never client headers, give the tier and the user."""
    hosts: Annotated[list[GatewayHost], Field(min_length=1)] = ["*"]
    """Hosts the gateway serves: DNS names, `*.domain` wildcards or `*`."""
    tls_credential_name: SecretName | None = None
    """A TLS Secret in `istio-system`: HTTPS on 443, HTTP redirects to it. Required in production unless
    `plainHttp`."""
    plain_http: bool = False
    """Serve plain HTTP without TLS on purpose (a production stack must say so to have no TLS credential)."""
    load_balancer_scheme: LoadBalancerScheme = "internal"
    """The gateway's AWS load balancer: reachable inside the VPC only (`internal`), or from the internet."""
    tier_header: HeaderName = "x-tier"
    """Header the gateway filter sets to the token's tier, which routes match on (client values are replaced)."""
    default_tier: TierName = "standard"
    """The tier of a token without a tier claim."""
    bucket_header: HeaderName = "x-user-bucket"
    """Header the gateway filter sets to the user's sticky bucket (client values are replaced)."""
    model_header: HeaderName = "x-model"
    """Header the gateway filter sets to the body's `model` (client values are replaced)."""
    tiers: dict[TierName, TierPolicy] = Field(default_factory=_default_tiers)
    """Per tier: timeout, queue bounds, retries, vLLM priority and largest body; tiers not given keep their defaults
    (premium 120s/64/512/1/0/4 MiB, standard 300s/32/256/1/1/4 MiB, batch 600s/16/128/0/2/16 MiB). A Knative-served
    model's requests may take at most 600 s, what Knative's activator drains."""

    @field_validator("hosts", mode="after")
    @classmethod
    def _distinct_hosts(cls, hosts: list[str]) -> list[str]:
        repeated = sorted({host for host in hosts if hosts.count(host) > 1})
        if repeated:
            raise ValueError(f"hosts are listed twice: {', '.join(repeated)}")
        return hosts

    @field_validator("tiers", mode="after")
    @classmethod
    def _every_tier(cls, tiers: dict[TierName, TierPolicy]) -> dict[TierName, TierPolicy]:
        # A stack may tune some tiers; the others keep their defaults.
        return {**_default_tiers(), **tiers}

    @model_validator(mode="after")
    def _tls_or_plain_http(self) -> TrafficConfig:
        if self.plain_http and self.tls_credential_name is not None:
            raise ValueError("give either 'tlsCredentialName' (HTTPS) or 'plainHttp: true', not both")
        return self


# --- the rest ------------------------------------------------------------------------------


class CapacityConfig(ConfigModel):
    overcommit_ratio: Annotated[float, Field(ge=1.0, le=10.0)] = 1.0
    """Allowed ratio of summed tenant quotas to what the pools provide at maxSize."""


class ColdStartConfig(ConfigModel):
    """How long adding a replica may take, and the figures of its expected cold start besides the pool's weight cache
    (`nodePools[].weightCache`)."""

    scale_up_budget: Annotated[Duration, _duration_between(30, 3600)] = "5m"
    """How long a latency-sensitive model may take to add a replica: a model whose expected cold start (image,
    weights, engine start) is longer must keep a warm minimum (`minReplicas` > 0)."""
    engine_start_seconds: Annotated[int, Field(ge=1, le=3600)] = 90
    """Seconds vLLM takes from weights on local disk to serving (loading them into GPU memory, profiling, CUDA graph
    capture and compilation): an assumption for vLLM 0.33 with empty compile caches; measure it and set it."""
    image_size: PositiveQuantity = "10Gi"
    """Compressed size of the vLLM image a new node pulls (the `vllm/vllm-openai` amd64 image is about 10 GiB): the
    image part of a cold start on a node that has not pulled it yet."""
    image_unpack_mbps: Annotated[int, Field(ge=10, le=10000)] = 150
    """MB/s containerd unpacks the image's layers at (one layer at a time, gzip in one thread): an assumption; an image
    pull takes its size over the slower of this and the download."""


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
    concurrency_per_replica: Annotated[int, Field(gt=0, le=KNATIVE_MAX_CONTAINER_CONCURRENCY)] | None = None
    """Requests one replica works on at once (vLLM's `--max-num-seqs` and Knative's target by default: at most 1000)."""
    request_timeout_seconds: PositiveInt | None = None
    """The longest a request may take."""
    prefix_caching: bool | None = None
    """vLLM prefix caching."""
    tiers: Annotated[list[TierName], Field(min_length=1)] | None = None
    """Tiers its models serve."""
    peak: WorkloadPeak | None = None
    """The peak each model of the profile must meet within the profile's latency target (a model's `slo.peak`
    overrides it). Without one, the preview predicts latency but judges no replica count."""


class S3GatewayEndpoint(ConfigModel):
    """An S3 gateway VPC endpoint the platform creates, so that streaming and mirroring reach S3 inside the Region
    without the NAT or internet gateway (and its per-flow and half-bandwidth limits)."""

    route_table_ids: Annotated[
        list[Annotated[str, _full_match(r"rtb-[0-9a-f]{8,17}", "is not a route table ID (rtb-...)")]], Field(min_length=1)
    ]
    """The route tables of the nodes' subnets (in the cluster's VPC). Leave `s3GatewayEndpoint` out where the VPC
    already has an S3 gateway endpoint on them: AWS refuses a second one for the same route table."""


class WeightMirrorConfig(ConfigModel):
    """An S3 bucket that holds a copy of every Hugging Face revision the streaming pools serve, written once per
    revision by a Job in the platform's `model-weights` namespace before any server of it starts; the servers stream
    from the copy (README, Cold start). Needs `cluster.mode: eks` (the Job and the servers get their S3 roles through
    the cluster's workload identity). Where it is set, pools without a `weightCache.medium` stream (`s3Stream`)."""

    bucket: Annotated[
        str,
        _full_match(
            r"(?!xn--)(?!.*-s3alias$)[a-z0-9][a-z0-9-]{1,61}[a-z0-9]",
            "is not an S3 bucket name (3-63 lowercase letters, digits and hyphens; no dots, so TLS names match)",
        ),
    ]
    """The bucket's name. Each tenant's copies are under `<bucket>/<tenant>/`; a tenant's servers read only their
    own prefix, and the mirror's role for a tenant writes only there."""
    create: bool = True
    """Create the bucket (private, owner-enforced, TLS-only); `false`: it exists already."""
    s3_gateway_endpoint: S3GatewayEndpoint | None = None
    """The S3 gateway endpoint to create on the nodes' route tables, if the VPC has none."""


class ServingAliases(ConfigModel):
    """The aliases that say in the registry what this environment serves, moved by `python -m platform_tools aliases`
    after each `pulumi up` (deploy.yml) from the stack's `canaryReleases` and `modelRegistry` outputs: a promotion or a
    rollback, once deployed, shows in the registry. Written by the platform, never read by it: no version or adapter
    source may name them. MLflow's stages, which once played this part, are deprecated since 2.9.0
    (mlflow/tracking/client.py at v3.17.2)."""

    stable: Annotated[str, _full_match(_MLFLOW_ALIAS, _ALIAS_MESSAGE)]
    """The alias on the registry version each model serves as its stable version, e.g. `staging` or `production`."""
    canary: Annotated[str, _full_match(_MLFLOW_ALIAS, _ALIAS_MESSAGE)]
    """The alias on the registry version a model's canary serves while its weight is above 0, e.g. `staging-canary`;
    removed when no canary takes traffic (a rollback to weight 0, or a promotion to stable)."""

    @model_validator(mode="after")
    def _two_aliases(self) -> ServingAliases:
        if self.stable == self.canary:
            raise ValueError(f"stable and canary are both {self.stable!r}: the canary's alias would take the stable one's")
        return self


class RegistryConfig(ConfigModel):
    """The MLflow tracking server whose model registry names the versions; its token, if it needs one, is the
    secret `registryToken` (`pulumi config set --secret registryToken ...`), sent as a bearer token. A live preview
    records what it resolved as `registry-resolution.json` in its output folder; `python -m preview --registry-file
    <that file>` (or the environment variable `INFERENCE_PLATFORM_REGISTRY_FILE`) previews from it without the
    registry. `pulumi up` always asks the registry, and deploys only what `lockFile` holds when it is set."""

    tracking_uri: (
        Annotated[str, _full_match(r"https?://[^\s/?#@]+(/[^\s?#]*)?", "is not an http(s) URL without query or credentials")]
        | None
    ) = None
    """The tracking server's URL, e.g. `https://mlflow.example.com`; required when a version names an `mlflow`
    source."""
    timeout_seconds: Annotated[int, Field(ge=1, le=60)] = 10
    """How long one registry request may take before the preview stops with an error."""
    weights_tag: Annotated[str, Field(min_length=1, max_length=250)] = "weights"
    """A model-version tag that names the weights (`hf://org/name@<commit SHA>` or `s3://...`) when the version's
    source URI does not (e.g. an MLflow `runs:/` or `models:/` URI)."""
    lock_file: (
        Annotated[
            str,
            _full_match(
                LOCK_FILE_PATTERN,
                "is not a .json file in the stack files' folder, such as stacks/Pulumi.prod.registry.json (a committed "
                "file beside the stack file, never a preview's output)",
                max_length=512,
            ),
        ]
        | None
    ) = None
    """The registry versions this stack may deploy: a live preview's `registry-resolution.json`, committed beside the
    stack file (`stacks/`, e.g. `stacks/Pulumi.prod.registry.json`). `pulumi up` resolves live and stops,
    naming the version's key, when the registry answers anything the file does not hold (a moved alias, a reference
    it lacks), so a new registry version reaches the stack only through a reviewed change of this file. A preview
    resolves from this file (what `pulumi up` may deploy); `--registry-live` asks the registry instead and shows each
    difference in its report and fails. Required in production when a version or adapter names an
    `mlflow` source."""
    serving_aliases: ServingAliases | None = None
    """The aliases the deploy moves so the registry shows what this environment serves (none: the registry is only
    read)."""


# --- batch jobs ----------------------------------------------------------------------------


class BatchModel(ConfigModel):
    """The model a batch job runs: its weights, what one shard's pod asks for, and vLLM's settings."""

    served_model_name: Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._/:-]{0,127}$")]
    """The OpenAI `model` the input lines name (vLLM's `--served-model-name`)."""
    source: ModelSource
    """The weights: Hugging Face at a pinned commit or an S3 prefix and version folder (not MLflow yet)."""
    resources: ReplicaResources
    """What one shard's pod asks for (GPUs are vLLM's tensor-parallel size)."""
    server: ServerArgs = ServerArgs()
    """vLLM engine settings."""
    adapter: Annotated[str, Field(min_length=1, max_length=128)] | None = None
    """A LoRA adapter to run the job with: the OpenAI name of an adapter in `models[]` of the job's tenant, on a model
    one of whose versions has this `source` (the same base weights). The job loads its stable revision under the
    adapter's name, which the input lines' `model` then names (README, Batch jobs on Kueue)."""

    @field_validator("server")
    @classmethod
    def _no_admission_rate(cls, server: ServerArgs) -> ServerArgs:
        if server.prefill_tokens_per_second is not None:
            raise ValueError("prefillTokensPerSecond bounds a serving queue; a batch job has none (its runner feeds vLLM)")
        return server


class BatchInput(ConfigModel):
    """An OpenAI batch-format JSONL file set (one request per line: `custom_id`, `method`, `url`, `body`), pinned."""

    s3_uri: Annotated[str, Field(pattern=S3_URI_PATTERN)] | None = None
    """S3 prefix; the files are `<s3Uri>/<revision>/*.jsonl`, read in name order."""
    huggingface: Annotated[str, Field(pattern=r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")] | None = None
    """Hugging Face dataset repository `org/name`."""
    revision: Annotated[str, Field(min_length=1, max_length=128)] | None = None
    """Pins the input: the dataset's 40-character commit SHA (Hugging Face), or the version folder under `s3Uri` that
    is never rewritten (S3)."""
    files: Annotated[list[Annotated[str, Field(pattern=r"^[A-Za-z0-9_./-]{1,512}\.jsonl$")]], Field(min_length=1)] | None = None
    """Hugging Face: the JSONL files in the dataset, in order (S3 reads every `.jsonl` file of the folder)."""

    @model_validator(mode="after")
    def _one_source(self) -> BatchInput:
        if (self.s3_uri is None) == (self.huggingface is None):
            raise ValueError("give exactly one of 's3Uri' (s3://bucket/prefix) or 'huggingface' (org/dataset)")
        if self.huggingface is not None and self.files is None:
            raise ValueError("a Hugging Face dataset needs 'files': its JSONL files in order")
        if self.s3_uri is not None and self.files is not None:
            raise ValueError("'files' is for Hugging Face datasets: an S3 input reads every .jsonl file of its folder")
        return self


def pinned_s3_uri(source: ModelSource | BatchInput) -> str:
    """A pinned S3 source's version folder: its prefix and its revision (weights, adapters, a batch job's input, the
    weight mirror's copies)."""
    assert source.s3_uri is not None, "an S3 source"
    return f"{source.s3_uri.rstrip('/')}/{source.revision}/"


def weights_location(source: ModelSource) -> str | None:
    """The weights a concrete source names, as one string (platform_config/registry.py `pinned_source`'s
    inverse): what a release records per version, so that weights changed under a version's name are seen."""
    if source.huggingface is not None and source.revision is not None:
        return f"hf://{source.huggingface}@{source.revision}"
    if source.s3_uri is not None and source.revision is not None:
        return pinned_s3_uri(source).rstrip("/")
    return None  # a registry reference, not resolved yet


class BatchJobConfig(ConfigModel):
    """An offline batch job: vLLM's batch runner over an OpenAI batch-format input, queued through Kueue."""

    name: ResourceName
    """Job name (unique); its Job, LocalQueue and runner ConfigMap are named after it."""
    tenant: NamespaceName
    """Tenant whose namespace runs the job and whose batch quota (`tenants[].batchQuota`) it is queued against."""
    pool: ResourceName
    """Node pool its pods run on (one of the tenant's `pools`)."""
    model: BatchModel
    """The model it runs."""
    input: BatchInput
    """What it reads."""
    lines: PositiveInt
    """Requests (non-blank lines) in the input: the job has ceil(lines / shardLines) shards."""
    output: Annotated[str, Field(pattern=S3_URI_PATTERN)]
    """S3 prefix the results go to: `<output>/shard-<i>/chunk-<k>.jsonl`, one OpenAI batch output line per input line."""
    parallelism: PositiveInt = 1
    """Shards that run at once (pods)."""
    shard_lines: PositiveInt = 10_000
    """Input lines per shard (one Job completion index each)."""
    chunk_lines: PositiveInt = 1_000
    """Lines per checkpoint: a finished chunk is uploaded and never redone; a stopped shard resumes at its first
    unfinished chunk. Each chunk starts vLLM's batch runner once (the model loads again), so a chunk should take
    well over the model's load time."""
    tokens_per_line: PositiveInt = 1_000
    """Expected prompt plus completion tokens per request (for the deadline check)."""
    tokens_per_second: PositiveInt
    """Tokens per second one shard's pod processes with this model on this pool (measured; for the deadline check)."""
    deadline: Annotated[Duration, _duration_between(60, 30 * 86400)]
    """How long the job may run once started (the Job's `activeDeadlineSeconds`); at least one shard's estimate."""
    retries_per_shard: Annotated[int, Field(ge=0, le=100)] = 3
    """Failed pods per shard before the shard fails (a preemption is not a failure)."""
    paused: bool = False
    """Hold the job: Kueue evicts its running shards (finished chunks stay done) and admits nothing until it is
    `false` again, when it resumes where it stopped."""


class PlatformConfig(ConfigModel):
    """Every top-level key under `inference-platform:` in a stack file."""

    environment: Literal["development", "staging", "production"]
    """`development`, `staging` or `production` (production HPAs keep at least 2 replicas)."""
    cluster: ClusterConfig
    """Where the platform runs."""
    node_pools: Annotated[list[NodePoolConfig], Field(min_length=1, max_length=EKS_NODE_GROUPS_PER_CLUSTER - 1)]
    """GPU node pools (at most 29: EKS's default quota is 30 managed node groups per cluster, the system one included)."""
    tenants: Annotated[list[TenantConfig], Field(min_length=1)]
    """Tenants: namespaces with GPU quotas, isolation and access."""
    models: list[ModelConfig] = []
    """Served models."""
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
    weight_mirror: WeightMirrorConfig | None = None
    """Where Hugging Face weights are copied for the streaming pools; none by default."""
    batch_jobs: list[BatchJobConfig] = []
    """Offline batch jobs, queued through Kueue on the tenants' batch quotas (README, Batch jobs)."""
    acknowledge: Annotated[list[Annotated[str, _full_match(_ACKNOWLEDGEMENT, _ACKNOWLEDGEMENT_NAMES)]], Field(max_length=64)] = []
    """Weakenings of a production stack this change makes on purpose, each by name: `weaken-authentication` (another
    issuer, new audiences or version-override principals), `disable-tenant-scoping`, `plain-http-internet-facing`,
    `public-api-endpoint` (a CIDR wider than /16), `remove-model:<model>`, `remove-tenant:<tenant>`,
    `widen-callers:<model>`. The pull-request preview refuses any other (README, Guard rails) and lists these."""

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


# Top-level keys that hold secrets: read as Pulumi secrets, never stored in the model. Each
# tenant's Hugging Face token, keyed by tenant (one secret object).
HUGGING_FACE_TOKENS = "huggingFaceTokens"
# The MLflow registry's bearer token (one secret string).
REGISTRY_TOKEN = "registryToken"
SECRET_KEYS = (HUGGING_FACE_TOKENS, REGISTRY_TOKEN)
