"""Seeding: every random draw of a run is a function of (seed, epoch, sample or step), never of the process.

``mix_seed`` derives unrelated seeds from tuples of integers (splitmix64), ``epoch_order`` is the training
order of an epoch, and ``seed_rngs`` seeds the generators that timm's transforms and the training step draw
from (python, numpy, torch). Not accelerate's ``set_seed``: it hands the seed to ``np.random.seed`` as it is,
which refuses the 63-bit seeds ``mix_seed`` derives, and it has no CPU-only mode for data-loading workers.
"""
import random

import numpy as np
import torch

__all__ = ['mix_seed', 'epoch_order', 'seed_rngs']

_MASK64 = (1 << 64) - 1


def mix_seed(*parts: int) -> int:
    """A 63-bit seed derived from integers (splitmix64 over the parts); distinct parts give unrelated seeds."""
    x = 0x9E3779B97F4A7C15
    for p in parts:
        x = (x ^ (int(p) & _MASK64)) & _MASK64
        x = (x + 0x9E3779B97F4A7C15) & _MASK64
        z = x
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK64
        x = z ^ (z >> 31)
    return x >> 1


def epoch_order(size: int, seed: int, epoch: int) -> torch.Tensor:
    """The training order of an epoch: a permutation of ``range(size)`` that depends on (seed, epoch) only."""
    g = torch.Generator().manual_seed(mix_seed(seed, 0x5A3D, epoch))
    return torch.randperm(size, generator=g)


def seed_rngs(seed: int, all_devices: bool = True) -> None:
    """Seed python's, numpy's and torch's generators in this process: torch's on every device, or only the CPU
    one (``all_devices=False``: a data-loading worker, which must not touch the GPU)."""
    random.seed(seed)
    np.random.seed(seed % (1 << 32))
    if all_devices:
        torch.manual_seed(seed)
    else:
        torch.default_generator.manual_seed(seed)
