"""Where a training process runs: its device and its place in a (possibly single-process) data-parallel run.

Started by ``torchrun`` (``WORLD_SIZE`` > 1) a process joins a process group (gloo on CPU, NCCL on CUDA); every
rank walks the same seeded batch order and takes every WORLD_SIZE-th batch (:func:`shard`); rank 0 validates,
checkpoints and reports, and broadcasts its decisions.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np
import torch
import torch.distributed as dist
from torch import nn

from trainer.runsettings import TrainingError


@dataclass(frozen=True)
class Dist:
    """This process's place in a (possibly single-process) data-parallel run."""

    rank: int = 0
    world: int = 1
    local_rank: int = 0

    @property
    def main(self) -> bool:
        return self.rank == 0

    @property
    def active(self) -> bool:
        return self.world > 1


def init_distributed(device: torch.device) -> Dist:
    """Join the process group torchrun describes (``WORLD_SIZE`` > 1), else a single process."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return Dist()
    if device.type == "cuda":
        torch.cuda.set_device(device)  # NCCL binds each rank to its own GPU
    if not dist.is_initialized():
        dist.init_process_group(backend="nccl" if device.type == "cuda" else "gloo")
    return Dist(dist.get_rank(), dist.get_world_size(), int(os.environ.get("LOCAL_RANK", "0")))


def resolve_device(name: str) -> torch.device:
    """'auto' is CUDA when available, else the CPU; 'cuda' without CUDA is an error naming --device."""
    if name not in ("auto", "cpu", "cuda"):
        raise TrainingError(f"--device: expected auto, cpu or cuda, got {name!r}")
    if name == "cuda" and not torch.cuda.is_available():
        raise TrainingError("--device cuda: CUDA is not available on this machine")
    if name == "cpu" or not torch.cuda.is_available():
        return torch.device("cpu")
    local = int(os.environ.get("LOCAL_RANK", "0"))
    torch.backends.cudnn.benchmark = True  # fixed 224 x 224 pictures: cuDNN picks its fastest kernels once
    return torch.device("cuda", local)


def shard(batches: list[np.ndarray], world: Dist) -> list[np.ndarray]:
    """This rank's share of an epoch's batches (every rank the same number)."""
    if not world.active:
        return batches
    usable = len(batches) // world.world * world.world
    if usable == 0:
        raise TrainingError(f"--batch-size: {len(batches)} batches cannot be shared by {world.world} processes")
    return batches[:usable][world.rank::world.world]


def wrap(module: nn.Module, world: Dist, device: torch.device) -> nn.Module:
    """``module`` itself, or its DistributedDataParallel wrapper under torchrun."""
    if not world.active:
        return module
    return nn.parallel.DistributedDataParallel(
        module, device_ids=[device.index] if device.type == "cuda" else None, find_unused_parameters=True)


def gpu_peak(device: torch.device) -> dict[str, float]:
    """``{"gpu_peak_mib": ...}``, the most GPU memory this process's tensors have held, on CUDA; else ``{}``."""
    if device.type != "cuda":
        return {}
    return {"gpu_peak_mib": round(torch.cuda.max_memory_allocated(device) / 2**20, 1)}
