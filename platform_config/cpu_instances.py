"""The EC2 CPU instance types the EKS system node group may use, and what each one has.

Pure data and pure functions only (no Pulumi imports), like `gpu_catalog`: the config check on
`cluster.eks.systemNodeGroup.instanceType` and the system nodes' allocatable read the same table.

Source: AWS's published instance specifications (Amazon EC2 "Instance types" guide, the general
purpose, compute optimized and memory optimized tables, docs.aws.amazon.com/ec2/latest/
instancetypes/gp.html, co.html, mo.html). In the families listed here every size from large to
16xlarge has 2 vCPUs per "large" (large 2, xlarge 4, 2xlarge 8, ..., 16xlarge 64) and a fixed
memory per vCPU by family: 4 GiB for the general purpose m families, 2 GiB for the compute
optimized c families, 8 GiB for the memory optimized r families. Every figure the rule gives
was compared with kubernetes/autoscaler cluster-autoscaler-1.33.0
cluster-autoscaler/cloudprovider/aws/ec2_instance_types.go (generated from the AWS price list);
tests/test_cpu_instances.py repeats the comparison when that repository's mirror is present.
"""

from __future__ import annotations

from dataclasses import dataclass

# GiB of memory per vCPU, by family: the families a system node group may use. Intel (m5, m6i,
# m7i, c6i, c7i, r6i, r7i) and AMD (m6a, m7a), all x86_64 like the group's AL2023_x86_64 AMI.
MEMORY_GIB_PER_VCPU: dict[str, int] = {
    "m5": 4,
    "m6i": 4,
    "m6a": 4,
    "m7i": 4,
    "m7a": 4,
    "c6i": 2,
    "c7i": 2,
    "r6i": 8,
    "r7i": 8,
}
# vCPUs by size, the same in every family above. Smaller sizes (medium) are left out: a node of
# one or two vCPUs holds no more than a controller or two after the kubelet's reserve.
VCPUS_BY_SIZE: dict[str, int] = {
    "large": 2,
    "xlarge": 4,
    "2xlarge": 8,
    "4xlarge": 16,
    "8xlarge": 32,
    "12xlarge": 48,
    "16xlarge": 64,
}


@dataclass(frozen=True)
class CpuInstanceType:
    name: str
    vcpus: int
    memory_gib: int


CPU_INSTANCE_TYPES: dict[str, CpuInstanceType] = {
    f"{family}.{size}": CpuInstanceType(f"{family}.{size}", vcpus, vcpus * gib_per_vcpu)
    for family, gib_per_vcpu in MEMORY_GIB_PER_VCPU.items()
    for size, vcpus in VCPUS_BY_SIZE.items()
}


def cpu_catalog_summary() -> str:
    """What the catalog allows, in one line for config errors and the config reference."""
    return f"families {', '.join(MEMORY_GIB_PER_VCPU)} in sizes {', '.join(VCPUS_BY_SIZE)} (e.g. 'm6i.xlarge')"
