"""What GPU memory one replica of a model has, and whether its weights can load there.

One rank of a replica (a whole GPU, a MIG slice, or a time-sliced share of a card) holds its share of the weights
(`resources.weightsSize` over the tensor-parallel size), and vLLM takes `gpu_memory_utilization` of the device's
*total* memory for everything (vLLM 0.33.0 `vllm/v1/worker/gpu_worker.py`: the requested memory is the fraction of
total; the KV cache gets what weights, activations and CUDA graphs leave of it). A time-sliced share sees the whole
card but is given its fraction divided by the pods sharing it (`gpu_memory_fraction`). The KV cache itself, which
needs the model's architecture, is sized by the preview's Serving performance stage (`preview/performance.py`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from .gpu_catalog import MEMORY_SLICES, GpuModel
from .models import ModelConfig, NodePoolConfig, ServerArgs
from .quantity import parse_quantity
from .serving import GPU_MEMORY_UTILIZATION_DEFAULT, time_sliced_memory_share

GIB = 1 << 30


def gpu_memory_fraction(pool: NodePoolConfig, args: ServerArgs) -> float:
    """vLLM's `--gpu-memory-utilization` for a server on the pool: the stack's, else the default, split between
    the pods sharing a time-sliced GPU (each plans for its part only)."""
    if args.gpu_memory_utilization is not None:
        return args.gpu_memory_utilization
    if pool.sharing.mode == "timeSlicing" and pool.sharing.replicas:
        return time_sliced_memory_share(GPU_MEMORY_UTILIZATION_DEFAULT, pool.sharing.replicas)
    return GPU_MEMORY_UTILIZATION_DEFAULT


SliceKind = Literal["whole", "mig", "timeSliced"]


@dataclass(frozen=True)
class RankMemory:
    """The device one rank of a replica runs on, as vLLM sees it."""

    kind: SliceKind
    # What the device reports as its total memory: a MIG slice its own memory slices of the GPU's eight.
    capacity_bytes: int
    # The fraction of it vLLM takes.
    fraction: float
    # Ranks per replica (the tensor-parallel size; 1 on a MIG slice or a time-sliced share).
    ranks: int
    mig_profile: str | None = None
    shared_by: int | None = None

    @property
    def budget_bytes(self) -> int:
        return int(self.capacity_bytes * self.fraction)

    @property
    def replica_bytes(self) -> int:
        """The GPU memory one replica holds: its ranks' devices, or its part of a time-sliced card."""
        if self.kind == "timeSliced" and self.shared_by:
            return self.capacity_bytes // self.shared_by
        return self.capacity_bytes * self.ranks


def rank_memory(gpu: GpuModel, pool: NodePoolConfig, model: ModelConfig, args: ServerArgs) -> RankMemory:
    """The device of one rank of the model's replicas on the pool (a MIG profile the GPU lacks, which the config
    checks refuse on their own, is counted as the whole GPU)."""
    fraction = gpu_memory_fraction(pool, args)
    card = gpu.memory_gib * GIB
    if model.resources.mig_profile is not None:
        profile = gpu.mig_profiles.get(model.resources.mig_profile)
        slices = profile.memory_slices if profile is not None else MEMORY_SLICES
        return RankMemory("mig", card * slices // MEMORY_SLICES, fraction, 1, mig_profile=model.resources.mig_profile)
    if pool.sharing.mode == "timeSlicing":
        return RankMemory("timeSliced", card, fraction, 1, shared_by=pool.sharing.replicas)
    return RankMemory("whole", card, fraction, model.resources.gpus or 1)


def weights_bytes(model: ModelConfig) -> int | None:
    """The checkpoint's size (`resources.weightsSize`), what vLLM loads onto the GPUs."""
    size = model.resources.weights_size
    return None if size is None else int(parse_quantity(size))


def vllm_max_num_batched_tokens(gpu: GpuModel, memory: RankMemory, args: ServerArgs) -> int:
    """vLLM 0.33.0's token budget per forward pass for `vllm serve` when the stack sets none: 8192 on a device of
    70 GiB or more that is not an A100, else 2048 (vllm/engine/arg_utils.py get_batch_defaults at v0.33.0,
    UsageContext.OPENAI_API_SERVER). A MIG slice reports its own memory."""
    if args.max_num_batched_tokens is not None:
        return args.max_num_batched_tokens
    large = memory.capacity_bytes >= 70 * GIB and "a100" not in gpu.name.lower()
    return 8192 if large else 2048
