"""What the platform knows about GPU hardware: EC2 GPU instance types, GPU models, MIG profiles.

Pure data and pure functions only (no Pulumi imports): the config checks, the components and the
capacity report all read the same catalog, so a number is written down exactly once.

MIG facts follow NVIDIA's MIG user guide ("Supported MIG Profiles"): a MIG-capable GPU has
7 compute slices and 8 memory slices; every GPU-instance profile takes a fixed number of each and
may only start at documented memory-slice positions ("placements", `nvidia-smi mig -lgipp`).
A geometry fits a GPU when every requested instance gets a placement that does not overlap any
other instance's memory slices and the compute slices add up to at most 7.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from typing import Mapping

GPU_RESOURCE = "nvidia.com/gpu"
MIG_RESOURCE_PREFIX = "nvidia.com/mig-"

COMPUTE_SLICES = 7
MEMORY_SLICES = 8


def mig_resource(profile: str) -> str:
    """The extended resource a MIG slice is advertised as under the `mixed` MIG strategy."""
    return f"{MIG_RESOURCE_PREFIX}{profile}"


@dataclass(frozen=True)
class MigProfile:
    name: str
    compute_slices: int
    memory_slices: int
    # Memory-slice indices at which an instance of this profile may start.
    placements: tuple[int, ...]

    @property
    def max_per_gpu(self) -> int:
        # Placements of one profile never overlap each other only when they are spaced by the
        # profile's memory size; the documented maxima equal this count, bounded by compute.
        return min(_max_disjoint(self.placements, self.memory_slices), COMPUTE_SLICES // self.compute_slices)


def _max_disjoint(starts: tuple[int, ...], size: int) -> int:
    count, free_from = 0, 0
    for start in sorted(starts):
        if start >= free_from:
            count += 1
            free_from = start + size
    return count


@dataclass(frozen=True)
class GpuModel:
    name: str
    memory_gib: int
    mig_profiles: Mapping[str, MigProfile] = field(default_factory=dict)
    # The system aiconfigurator's performance database describes this GPU as (aiconfigurator-core 0.12.0
    # `systems/<name>.yaml`), None where it has none: the preview's Serving performance stage predicts from it.
    performance_system: str | None = None

    @property
    def supports_mig(self) -> bool:
        return bool(self.mig_profiles)


def _profiles(*profiles: MigProfile) -> dict[str, MigProfile]:
    return {p.name: p for p in profiles}


# EC2's H100s (p5) and A100s (p4d, p4de) are SXM boards, as aiconfigurator's `h100_sxm` and `a100_sxm` describe; the
# A100 40GB and the A10G have no system there.
# Placements per NVIDIA's MIG user guide (A100/H100 families share the slice layout; the memory
# per slice differs). 1g profiles may start at 0..6; 2g at 0, 2, 4; 3g at 0 or 4; 4g and 7g at 0.
_ONE = (0, 1, 2, 3, 4, 5, 6)
_TWO = (0, 2, 4)
_TWO_MEM = (0, 2, 4, 6)
_THREE = (0, 4)
_ZERO = (0,)

H100_80GB = GpuModel(
    name="H100-80GB",
    memory_gib=80,
    performance_system="h100_sxm",
    mig_profiles=_profiles(
        MigProfile("1g.10gb", 1, 1, _ONE),
        MigProfile("1g.20gb", 1, 2, _TWO_MEM),
        MigProfile("2g.20gb", 2, 2, _TWO),
        MigProfile("3g.40gb", 3, 4, _THREE),
        MigProfile("4g.40gb", 4, 4, _ZERO),
        MigProfile("7g.80gb", 7, 8, _ZERO),
    ),
)
A100_40GB = GpuModel(
    name="A100-40GB",
    memory_gib=40,
    mig_profiles=_profiles(
        MigProfile("1g.5gb", 1, 1, _ONE),
        MigProfile("1g.10gb", 1, 2, _TWO_MEM),
        MigProfile("2g.10gb", 2, 2, _TWO),
        MigProfile("3g.20gb", 3, 4, _THREE),
        MigProfile("4g.20gb", 4, 4, _ZERO),
        MigProfile("7g.40gb", 7, 8, _ZERO),
    ),
)
A100_80GB = GpuModel(
    name="A100-80GB",
    memory_gib=80,
    performance_system="a100_sxm",
    mig_profiles=_profiles(
        MigProfile("1g.10gb", 1, 1, _ONE),
        MigProfile("1g.20gb", 1, 2, _TWO_MEM),
        MigProfile("2g.20gb", 2, 2, _TWO),
        MigProfile("3g.40gb", 3, 4, _THREE),
        MigProfile("4g.40gb", 4, 4, _ZERO),
        MigProfile("7g.80gb", 7, 8, _ZERO),
    ),
)
L4_24GB = GpuModel(name="L4-24GB", memory_gib=24, performance_system="l4")
A10G_24GB = GpuModel(name="A10G-24GB", memory_gib=24)
L40S_48GB = GpuModel(name="L40S-48GB", memory_gib=48, performance_system="l40s")


@dataclass(frozen=True)
class InstanceType:
    name: str
    gpu: GpuModel
    gpus: int
    vcpus: int
    memory_gib: int
    # NVMe instance store in GB (10^9 bytes, as AWS states it; 0: none) and network bandwidth in
    # Gbit/s ("up to" figures taken as stated): see INSTANCE_TYPES.
    instance_store_gb: int = 0
    network_gbps: float = 0.0


def _family(gpu: GpuModel, rows: list[tuple[str, int, int, int, int, float]]) -> dict[str, InstanceType]:
    return {row[0]: InstanceType(row[0], gpu, *row[1:]) for row in rows}


# (instance type, GPUs, vCPUs, memory GiB, instance store GB, network Gbit/s) from the EC2 accelerated-computing
# instance tables; the last two from the EC2 instance type specifications ("Accelerated computing": "Instance storage"
# and "Network bandwidth" columns, docs.aws.amazon.com/ec2/latest/instancetypes/ac.html): p5.48xlarge 8 x 3840 GB NVMe
# SSD and 3200 Gbps; p4d/p4de.24xlarge 8 x 1000 GB and 400 Gbps; g6 1 x 250 GB (xlarge) to 8 x 940 GB (48xlarge); g5
# 1 x 250 GB to 2 x 3800 GB; g6e 1 x 250 GB to 4 x 1900 GB. A new instance type is one row here (its price, where the
# dated list has none, is asked of the stack: pools[].pricePerHour).
INSTANCE_TYPES: dict[str, InstanceType] = {
    **_family(H100_80GB, [("p5.48xlarge", 8, 192, 2048, 8 * 3840, 3200)]),
    **_family(A100_40GB, [("p4d.24xlarge", 8, 96, 1152, 8 * 1000, 400)]),
    **_family(A100_80GB, [("p4de.24xlarge", 8, 96, 1152, 8 * 1000, 400)]),
    **_family(
        L4_24GB,
        [
            ("g6.xlarge", 1, 4, 16, 250, 10),
            ("g6.2xlarge", 1, 8, 32, 450, 10),
            ("g6.4xlarge", 1, 16, 64, 600, 25),
            ("g6.8xlarge", 1, 32, 128, 2 * 450, 25),
            ("g6.16xlarge", 1, 64, 256, 2 * 940, 25),
            ("g6.12xlarge", 4, 48, 192, 4 * 940, 40),
            ("g6.24xlarge", 4, 96, 384, 4 * 940, 50),
            ("g6.48xlarge", 8, 192, 768, 8 * 940, 100),
        ],
    ),
    **_family(
        A10G_24GB,
        [
            ("g5.xlarge", 1, 4, 16, 250, 10),
            ("g5.2xlarge", 1, 8, 32, 450, 10),
            ("g5.4xlarge", 1, 16, 64, 600, 25),
            ("g5.8xlarge", 1, 32, 128, 900, 25),
            ("g5.16xlarge", 1, 64, 256, 1900, 25),
            ("g5.12xlarge", 4, 48, 192, 3800, 40),
            ("g5.24xlarge", 4, 96, 384, 3800, 50),
            ("g5.48xlarge", 8, 192, 768, 2 * 3800, 100),
        ],
    ),
    **_family(
        L40S_48GB,
        [
            ("g6e.xlarge", 1, 4, 32, 250, 20),
            ("g6e.2xlarge", 1, 8, 64, 450, 20),
            ("g6e.4xlarge", 1, 16, 128, 600, 20),
            ("g6e.8xlarge", 1, 32, 256, 900, 25),
            ("g6e.16xlarge", 1, 64, 512, 1900, 35),
            ("g6e.12xlarge", 4, 48, 384, 2 * 1900, 100),
            ("g6e.24xlarge", 4, 96, 768, 2 * 1900, 200),
            ("g6e.48xlarge", 8, 192, 1536, 4 * 1900, 400),
        ],
    ),
}


# Every GPU model the platform knows, by name, in the order of INSTANCE_TYPES: those its instance types carry, so a new
# GpuModel is registered by its row alone (the pack's MIG profiles and the performance stage's systems read this).
GPU_MODELS: dict[str, GpuModel] = {instance.gpu.name: instance.gpu for instance in INSTANCE_TYPES.values()}


@dataclass(frozen=True)
class MigDeviceLayout:
    """One group of GPUs on a node that share a MIG layout (mig-parted's per-device entry)."""

    gpus: int | None  # None: every GPU of the node ("devices: all")
    mig_enabled: bool
    profiles: tuple[tuple[str, int], ...] = ()


@dataclass(frozen=True)
class MigGeometryDef:
    name: str
    layouts: tuple[MigDeviceLayout, ...]


def builtin_mig_configs(gpu: GpuModel) -> dict[str, MigGeometryDef]:
    """The GPU Operator's built-in mig-parted configs for this GPU, by the names the node label
    `nvidia.com/mig.config` takes: all-disabled, all-<profile> (as many as fit) and all-balanced
    (2 x the smallest 1g, 1 x 2g, 1 x 3g)."""
    if not gpu.supports_mig:
        return {}
    configs = {"all-disabled": MigGeometryDef("all-disabled", (MigDeviceLayout(None, False),))}
    for profile in gpu.mig_profiles.values():
        name = f"all-{profile.name}"
        configs[name] = MigGeometryDef(name, (MigDeviceLayout(None, True, ((profile.name, profile.max_per_gpu),)),))
    by_size = sorted(gpu.mig_profiles.values(), key=lambda p: (p.compute_slices, p.memory_slices))
    smallest = {c: next(p.name for p in by_size if p.compute_slices == c) for c in (1, 2, 3)}
    configs["all-balanced"] = MigGeometryDef(
        "all-balanced", (MigDeviceLayout(None, True, ((smallest[1], 2), (smallest[2], 1), (smallest[3], 1))),)
    )
    return configs


def fits_on_gpu(gpu: GpuModel, profile_counts: Mapping[str, int]) -> bool:
    """Whether these MIG instances can all be placed on one GPU at once.

    Exhaustive placement search: at most 7 instances on 8 memory slices, so it is tiny.
    """
    wanted: list[MigProfile] = []
    for name, count in profile_counts.items():
        wanted.extend([gpu.mig_profiles[name]] * count)
    if sum(p.compute_slices for p in wanted) > COMPUTE_SLICES:
        return False
    # Biggest first prunes the search fastest.
    wanted.sort(key=lambda p: (-p.memory_slices, -p.compute_slices, p.name))
    return _place(tuple(wanted), 0)


@lru_cache(maxsize=4096)
def _place(remaining: tuple[MigProfile, ...], used_mask: int) -> bool:
    if not remaining:
        return True
    head, rest = remaining[0], remaining[1:]
    for start in head.placements:
        mask = ((1 << head.memory_slices) - 1) << start
        if start + head.memory_slices <= MEMORY_SLICES and not used_mask & mask:
            if _place(rest, used_mask | mask):
                return True
    return False
