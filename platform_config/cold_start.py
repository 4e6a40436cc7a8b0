"""How long a new replica takes to serve, from the pool's weight cache (`nodePools[].weightCache`), the model's
checkpoint size and the `coldStart` figures: pulling the image, fetching the weights, starting the engine. The startup
probe, the rollout deadlines and the cluster autoscaler's node provisioning time derive from it, and the config checks
hold latency-sensitive models to the scale-up budget with it (pure: no Pulumi imports).

The figures and where they come from:
- instance store and network bandwidth: the EC2 instance type specifications (`gpu_catalog.INSTANCE_TYPES`);
- traffic leaving the VPC (Hugging Face, Docker Hub) through an internet gateway: at most half the instance's bandwidth
  on instances with 32 or more vCPUs, 5 Gbit/s below that (EC2 User Guide, "Amazon EC2 instance network bandwidth");
- a gp3 root volume without a throughput setting writes at gp3's baseline, 125 MiB/s (EBS User Guide, "General
  Purpose SSD volumes"; `components/cluster.node_launch_template` sets none);
- weights streamed from S3 (`s3Stream`) arrive at the streamer's connections times what one S3 connection sustains
  (S3 User Guide, "Performance guidelines for Amazon S3": about 85-90 MB/s each), within the instance's bandwidth (traffic
  within the Region may use all of it: EC2 User Guide, as above); there is no separate download before vLLM loads them;
- what a Hugging Face download sustains (ASSUMED_SOURCE_GBPS), the engine's start and the image's size are
  assumptions, each a config value to measure and set.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from decimal import Decimal

from .adapters import adapter_files_bytes, carried_adapters
from .gpu_catalog import INSTANCE_TYPES, InstanceType
from .models import BatchModel, ModelConfig, NodePoolConfig, PlatformConfig, duration_seconds
from .quantity import gib_quantity, parse_quantity, show_gb, show_gb_per_second

INSTANCE_STORE = "instanceStore"
ROOT_VOLUME = "rootVolume"
# vLLM reads the weights from S3 itself, with the Run:ai Model Streamer its image installs (docker/Dockerfile at
# v0.33.0, stage vllm-runtime-base: `runai-model-streamer[s3,gcs,azure]>=0.15.7`).
S3_STREAM = "s3Stream"
# AMIs whose nodeadm can stripe the instance store (awslabs/amazon-eks-ami nodeadm/api/v1alpha1/nodeconfig_types.go:
# spec.instance.localStorage.strategy RAID0); Bottlerocket has its own settings, not written here.
NODEADM_AMIS = ("AL2023_x86_64_NVIDIA",)

GBIT = 10**9 / 8  # bytes per second in one Gbit/s
GP3_BASELINE_BYTES_PER_S = 125 * 2**20
# Traffic through an internet gateway (EC2 User Guide, "Amazon EC2 instance network bandwidth").
INTERNET_GATEWAY_SHARE = 0.5
INTERNET_GATEWAY_MIN_VCPUS = 32
INTERNET_GATEWAY_SMALL_GBPS = 5.0
# An assumption, not a published figure: what one node's Hugging Face download sustains with its clients' default
# parallelism (a handful of files at once, each one TCP flow, which AWS caps at 5 Gbit/s outside a placement group).
ASSUMED_SOURCE_GBPS = 10.0
# S3 connections one streaming process keeps open: the `concurrency` the platform gives vLLM's Run:ai streamer loader
# (vllm/model_executor/model_loader/runai_streamer_loader.py at v0.33.0 sets RUNAI_STREAMER_CONCURRENCY from it), and
# what one of them sustains: the low end of the S3 User Guide's 85-90 MB/s per connection (an assumption to measure).
STREAM_CONCURRENCY = 32
S3_CONNECTION_MBPS = 85

# The startup probe allows this many times the expected weights download and engine start, and never less than
# STARTUP_FLOOR_SECONDS: a replica that slow is stuck, and the kubelet restarts it.
STARTUP_SAFETY_FACTOR = 3
STARTUP_FLOOR_SECONDS = 300
# An assumption: an EC2 GPU instance launched, booted on the AL2023 NVIDIA AMI and joined (nodeadm) until its node
# is Ready, and the RAID0 assembly of an instance store (mdadm and mkfs before the kubelet starts) on top.
NODE_JOIN_SECONDS = 300
RAID0_ASSEMBLY_SECONDS = 60
# The cluster autoscaler gives up on a node group after this many times the slowest pool's expected join.
NODE_PROVISION_SAFETY_FACTOR = 2


def instance_of(pool: NodePoolConfig) -> InstanceType:
    return INSTANCE_TYPES[pool.instance_type]


def cache_medium(pool: NodePoolConfig) -> str:
    """The pool's weight cache medium: its own, else the node disk the pool would have by default (`node_disk`)."""
    if pool.weight_cache.medium is not None:
        return pool.weight_cache.medium
    return _default_disk(pool)


def _default_disk(pool: NodePoolConfig) -> str:
    """The instance store where the instance type has one and nodeadm can stripe it, else the root volume."""
    if instance_of(pool).instance_store_gb > 0 and pool.ami_type in NODEADM_AMIS:
        return INSTANCE_STORE
    return ROOT_VOLUME


def streams_weights(pool: NodePoolConfig) -> bool:
    """Whether the pool's replicas stream their weights from S3 into GPU memory rather than caching them on the node."""
    return cache_medium(pool) == S3_STREAM


def node_disk(pool: NodePoolConfig) -> str:
    """Where the kubelet's and containerd's directories (the pods' emptyDirs, the images) are on the pool's nodes: the
    weight cache's medium, or on a streaming pool, which caches no weights, the disk the default would pick."""
    medium = cache_medium(pool)
    return _default_disk(pool) if medium == S3_STREAM else medium


def download_gbps(pool: NodePoolConfig) -> float:
    """Gbit/s one node of the pool downloads from outside the VPC at: the pool's figure, else AWS's internet gateway
    ceiling for its instance type capped by ASSUMED_SOURCE_GBPS."""
    if pool.weight_cache.download_gbps is not None:
        return pool.weight_cache.download_gbps
    instance = instance_of(pool)
    if instance.vcpus >= INTERNET_GATEWAY_MIN_VCPUS:
        ceiling = instance.network_gbps * INTERNET_GATEWAY_SHARE
    else:
        ceiling = min(instance.network_gbps, INTERNET_GATEWAY_SMALL_GBPS)
    return min(ceiling, ASSUMED_SOURCE_GBPS)


def stream_gbps(pool: NodePoolConfig) -> float:
    """Gbit/s one replica of a streaming pool reads its weights from S3 at: the pool's figure, else
    STREAM_CONCURRENCY connections at S3_CONNECTION_MBPS within the instance's network bandwidth."""
    if pool.weight_cache.stream_gbps is not None:
        return pool.weight_cache.stream_gbps
    return min(instance_of(pool).network_gbps, STREAM_CONCURRENCY * S3_CONNECTION_MBPS * 8 / 1000)


def fill_rate(pool: NodePoolConfig) -> float:
    """Bytes per second the node's disk fills at from outside the VPC (the weights cache, the image): the download, or
    the disk's writes where they are slower."""
    rate = download_gbps(pool) * GBIT
    if node_disk(pool) == ROOT_VOLUME:
        rate = min(rate, GP3_BASELINE_BYTES_PER_S)
    return rate


def weights_rate(pool: NodePoolConfig) -> float:
    """Bytes per second a replica's weights arrive at: streamed from S3, else the node disk's fill."""
    return stream_gbps(pool) * GBIT if streams_weights(pool) else fill_rate(pool)


def node_disk_gib(pool: NodePoolConfig) -> int:
    """The disk the kubelet's emptyDirs and containerd's images share on one node: the RAID0 of the instance store
    (GB to GiB, rounded down), else the root volume."""
    if node_disk(pool) == INSTANCE_STORE:
        return instance_of(pool).instance_store_gb * 10**9 // 2**30
    return pool.disk_size_gib


def has_model_volume(pool: NodePoolConfig, loads_adapters: bool) -> bool:
    """Whether a replica keeps files in a model volume (`model_volume_size`) on its node: its weights, unless its pool streams
    them, and the LoRA modules it loads (its model's, and those of the models whose batch tier it takes), which init
    containers download wherever the weights come from."""
    return not streams_weights(pool) or loads_adapters


def model_volume_size(config: PlatformConfig, model: ModelConfig) -> str | None:
    """The size of a replica's model volume (`has_model_volume`; None without one): `cacheSize` where it holds the
    weights; on a streaming pool, where it holds only the LoRA modules, their files (`adapter_files_bytes`) in whole
    GiB, or `cacheSize` when the base's shape is unknown (no `lora.baseShape`) and they cannot be estimated."""
    pool = pool_named(config, model.pool)
    if not has_model_volume(pool, bool(carried_adapters(config, model))):
        return None
    modules = adapter_files_bytes(config, model) if streams_weights(pool) else None
    return model.resources.cache_size if modules is None else gib_quantity(math.ceil(modules / 2**30))


def weights_bytes(model: ModelConfig | BatchModel) -> Decimal:
    size = model.resources.weights_size if model.resources.weights_size is not None else model.resources.cache_size
    return parse_quantity(size)


@dataclass(frozen=True)
class ColdStart:
    """A new replica's expected start on its pool: each part in whole seconds (rounded up)."""

    pool: str
    medium: str
    # Gbit/s the weights come from their source at: the download from outside the VPC (`weightCache.downloadGbps`), or
    # on a streaming pool the S3 stream (`streamGbps`); the `coldStarts` output keeps the name `downloadGbps` for both.
    download_gbps: float
    # Bytes per second the weights arrive at (the download, the disk's writes, or the stream).
    rate: float
    # Bytes per second the image is pulled at: the same, or containerd's unpacking where slower.
    image_rate: float
    image_bytes: Decimal
    weights_bytes: Decimal
    image_seconds: int
    weights_seconds: int
    engine_seconds: int
    # When no node of the pool has room: the new node's expected join first (`node_join_seconds`).
    node_join_seconds: int

    @property
    def total_seconds(self) -> int:
        return self.image_seconds + self.weights_seconds + self.engine_seconds

    @property
    def on_new_node_seconds(self) -> int:
        return self.node_join_seconds + self.total_seconds

    def arithmetic(self) -> str:
        """The sum as the report and the README show it."""
        rate = show_gb_per_second(self.rate) + (" streamed from S3" if self.medium == S3_STREAM else "")
        return (
            f"image {show_gb(self.image_bytes)} / {show_gb_per_second(self.image_rate)} = {self.image_seconds} s; "
            f"weights {show_gb(self.weights_bytes)} / {rate} "
            f"= {self.weights_seconds} s; engine start {self.engine_seconds} s; total {self.total_seconds} s "
            f"({show_minutes(self.total_seconds)})"
        )


def show_minutes(seconds: int) -> str:
    return f"{seconds // 60} min {seconds % 60:02d} s"


def pool_named(config: PlatformConfig, name: str) -> NodePoolConfig:
    return next(p for p in config.node_pools if p.name == name)


def cold_start(config: PlatformConfig, model: ModelConfig) -> ColdStart:
    """A new replica of `model` on a node of its pool that has not pulled the image yet (the pre-pull DaemonSet takes
    the image part away on a node that has been up)."""
    pool = pool_named(config, model.pool)
    rate = weights_rate(pool)
    image_rate = min(fill_rate(pool), config.cold_start.image_unpack_mbps * 1e6)
    image = parse_quantity(config.cold_start.image_size)
    weights = weights_bytes(model)
    return ColdStart(
        pool=pool.name,
        medium=cache_medium(pool),
        download_gbps=stream_gbps(pool) if streams_weights(pool) else download_gbps(pool),
        rate=rate,
        image_rate=image_rate,
        image_bytes=image,
        weights_bytes=weights,
        image_seconds=math.ceil(float(image) / image_rate),
        weights_seconds=math.ceil(float(weights) / rate),
        engine_seconds=config.cold_start.engine_start_seconds,
        node_join_seconds=node_join_seconds(pool),
    )


def startup_budget_seconds(start: ColdStart) -> int:
    """What the startup probe allows (vLLM downloads Hugging Face weights, or streams S3 ones, itself, after the image
    is pulled):
    STARTUP_SAFETY_FACTOR times the weights and the engine start, at least STARTUP_FLOOR_SECONDS, in whole probe
    periods of 10 s."""
    seconds = max(STARTUP_FLOOR_SECONDS, STARTUP_SAFETY_FACTOR * (start.weights_seconds + start.engine_seconds))
    return math.ceil(seconds / 10) * 10


def node_join_seconds(pool: NodePoolConfig) -> int:
    return NODE_JOIN_SECONDS + (RAID0_ASSEMBLY_SECONDS if node_disk(pool) == INSTANCE_STORE else 0)


def max_node_provision_seconds(config: PlatformConfig) -> int:
    """The cluster autoscaler's `--max-node-provision-time`: how long it waits for a node it asked for to register
    before trying another group. Its clock stops when the node registers (clusterstate/clusterstate.go at
    cluster-autoscaler-1.33.0), so weights and images play no part: NODE_PROVISION_SAFETY_FACTOR times the slowest
    pool's join, in whole minutes."""
    slowest = max(node_join_seconds(p) for p in config.node_pools)
    return math.ceil(NODE_PROVISION_SAFETY_FACTOR * slowest / 60) * 60


def progress_deadline(start: ColdStart, node_provision_seconds: int) -> int:
    """How long a rollout may make no progress: a new node for the pod (the autoscaler's provisioning time,
    `max_node_provision_seconds`), the image pull and the startup probe's budget."""
    return node_provision_seconds + start.image_seconds + startup_budget_seconds(start)


def scale_up_budget_seconds(config: PlatformConfig) -> int:
    return int(duration_seconds(config.cold_start.scale_up_budget))
