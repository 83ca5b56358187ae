"""The device-resident data path: a dataset that fits in memory lives on the training device.

The train and evaluation splits are held as uint8 tensors (N, C, H, W) on the training device, at
the model's input size; a batch is an index into them, augmented there by ``BatchAugment`` (one
affine sampling grid per batch, flips, random erasing). Nothing is decoded or transformed per image
on the CPU during training, so small models train at the speed of the device.

- MNIST and CIFAR-10 (held in memory as arrays at the input size) go to the device as they are.
- Any other map-style dataset (an image folder, a timm factory dataset) goes through timm's
  evaluation transform once (resize, centre crop, uint8), and image folders cache the result on disk
  (``<cache-dir>/device-arrays/*.npz``), so the next run starts at once.

The sample order is ``seeding.epoch_order`` (a permutation per (seed, epoch), as the loader path's), the augmentation a pure
function of (seed, epoch, sample) (``batch_augment.epoch_uniforms``); every process of a
multi-process run takes its own contiguous share of each global batch, and its own contiguous shard
of the evaluation split.
"""
import hashlib
import logging
from pathlib import Path
from typing import Any, Dict, Iterator, Optional, Sequence, Tuple

import numpy as np
import torch
from torch.utils.data import Dataset

from .batch_augment import BatchAugment, BatchAugmentConfig, epoch_uniforms
from ...cli import progress
from ...models.images import convert_image
from .loading import ArrayImageDataset, IndexSubset
from ..run.files import read_derived_npz, write_file_atomic
from ..seeding import epoch_order
from .names import DatasetError

_logger = logging.getLogger(__name__)

__all__ = ['DeviceDataPath', 'dataset_bytes', 'images_to_array', 'device_budget_bytes', 'read_cache', 'MAX_DECODED_BYTES']

Batch = Tuple[torch.Tensor, torch.Tensor]


def dataset_bytes(num_samples: int, input_size: Sequence[int]) -> int:
    """Bytes of ``num_samples`` uint8 images of ``input_size`` (C, H, W)."""
    return int(num_samples) * int(np.prod(input_size))


def device_budget_bytes(device: torch.device, limit_gb: float) -> int:
    """What the device path may hold: ``limit_gb``, and at most half of the free memory of a GPU."""
    limit = int(limit_gb * 2 ** 30)
    if device.type == 'cuda':
        free, _ = torch.cuda.mem_get_info(device)
        limit = min(limit, free // 2)
    return limit


def _array_fast_path(ds: Dataset, input_size: Sequence[int]) -> Optional[Tuple[np.ndarray, np.ndarray]]:
    """The arrays of an in-memory dataset whose images already have the input size and channels."""
    base, idx = ds, None
    if isinstance(ds, IndexSubset) and isinstance(ds.dataset, ArrayImageDataset):
        base, idx = ds.dataset, np.asarray(ds.indices)
    if not isinstance(base, ArrayImageDataset):
        return None
    images = base.images if base.images.ndim == 4 else base.images[..., None]
    c, h, w = input_size
    if images.shape[1:] != (h, w, c):
        return None
    images, labels = (images, base.labels) if idx is None else (images[idx], base.labels[idx])
    return np.ascontiguousarray(images.transpose(0, 3, 1, 2)), np.asarray(labels, dtype=np.int64)


def _transform_all(ds: Dataset, transform: Any, img_mode: str) -> Tuple[np.ndarray, np.ndarray]:
    images, labels = [], []
    for i in progress(range(len(ds)), desc='decoding images once', unit='image'):
        img, label = ds[i]
        img = convert_image(img, img_mode)
        images.append(np.asarray(transform(img), dtype=np.uint8))
        labels.append(int(label))
    return np.stack(images), np.asarray(labels, dtype=np.int64)


MAX_DECODED_BYTES = 8 * 2 ** 30  # the largest split decoded into memory at once (uint8 at the input size)


def images_to_array(ds: Dataset, transform: Any, input_size: Sequence[int], img_mode: str,
                    cache: Optional[Path] = None) -> Tuple[np.ndarray, np.ndarray]:
    """A dataset of (PIL image, label) as uint8 (N, C, H, W) images at the input size and int64 labels.

    ``transform`` is the deterministic evaluation transform ending in a uint8 tensor; ``cache`` an
    .npz file that keeps the result between runs. A split that would take more than ``MAX_DECODED_BYTES`` at the
    input size is refused (``DatasetError``) before any image is decoded.
    """
    fast = _array_fast_path(ds, input_size)
    if fast is not None:
        return fast
    size = dataset_bytes(len(ds), input_size)
    if size > MAX_DECODED_BYTES:
        raise DatasetError(f'{len(ds):,} images at the input size {"x".join(map(str, input_size))} would take '
                           f'{size / 2 ** 30:,.1f} GiB decoded, more than the {MAX_DECODED_BYTES / 2 ** 30:g} GiB '
                           f'allowed: check the model\'s input size (its img_size).')
    if cache is not None and cache.is_file():
        cached = read_cache(cache, len(ds), input_size, getattr(ds, 'classes', None))
        if cached is not None:
            return cached
    images, labels = _transform_all(ds, transform, img_mode)
    if cache is not None:
        cache.parent.mkdir(parents=True, exist_ok=True)
        write_file_atomic(cache, lambda tmp: np.savez(tmp, images=images, labels=labels), suffix='.tmp.npz')
    return images, labels


def read_cache(cache: Path, num_samples: int, input_size: Sequence[int],
               classes: Optional[Sequence[Any]]) -> Optional[Tuple[np.ndarray, np.ndarray]]:
    """The arrays kept in ``cache`` where they are what this module writes: uint8 images (N, C, H, W) at the input
    size and int64 labels in the class range, N the dataset's size (``files.read_derived_npz``: else None, with a
    one-line warning, and the caller decodes the images anew)."""
    wanted = (num_samples, *map(int, input_size))

    def problem(d: Dict[str, np.ndarray]) -> Optional[str]:
        images, labels = d['images'], d['labels']
        return ('the images are not uint8' if images.dtype != np.uint8 else
                f'the images are {images.shape}, not {wanted}' if images.shape != wanted else
                'the labels are not one integer per image' if labels.dtype.kind not in 'iu'
                or labels.shape != (num_samples,) else
                'a label is out of range' if len(labels) and (labels.min() < 0 or (
                    classes is not None and labels.max() >= len(classes))) else None)
    arrays = read_derived_npz(cache, problem)
    return None if arrays is None else (arrays['images'], arrays['labels'].astype(np.int64))


def cache_file(cache_dir: Path, content: str, split: str, input_size: Sequence[int], img_mode: str,
               transform: Any) -> Path:
    """Where the decoded arrays of an image-folder split are kept: the key covers the images' content (a digest
    of their paths, sizes and modification times) and everything that shapes the arrays."""
    key = '|'.join(map(str, (content, split, tuple(input_size), img_mode, transform)))
    return cache_dir / 'device-arrays' / f'{split}-{hashlib.sha256(key.encode()).hexdigest()[:16]}.npz'


def _to_device(array: np.ndarray, device: torch.device) -> torch.Tensor:
    return torch.from_numpy(np.array(array, copy=not array.flags.writeable)).to(device)


class DeviceDataPath:
    """Training and evaluation batches drawn from uint8 tensors on the device.

    ``train_batches(epoch, start)`` yields this process's share of every global batch of the epoch
    from batch ``start`` on, augmented and normalised; ``eval_batches()`` this process's shard of the
    evaluation split, normalised.
    """
    name = 'device'

    def __init__(self, train: Tuple[np.ndarray, np.ndarray], evaluation: Tuple[np.ndarray, np.ndarray],
                 augment: BatchAugmentConfig, mean: Sequence[float], std: Sequence[float], device: torch.device,
                 seed: int, batch_size: int, batches_per_epoch: int, eval_batch_size: int,
                 world: int = 1, rank: int = 0) -> None:
        self.device = device
        n_eval = len(evaluation[0])
        lo, hi = n_eval * rank // world, n_eval * (rank + 1) // world  # this process's shard
        self.train_images, self.train_labels = (_to_device(a, device) for a in train)
        self.eval_images, self.eval_labels = (_to_device(a[lo:hi], device) for a in evaluation)
        self.augment = BatchAugment(augment, mean, std, device)
        self.no_aug = BatchAugment(BatchAugmentConfig(), mean, std, device)
        self.seed, self.batch_size, self.batches_per_epoch = seed, batch_size, batches_per_epoch
        self.eval_batch_size = max(1, eval_batch_size // world)
        self.world, self.rank = world, rank
        self.per_process = batch_size // world

    @property
    def num_train(self) -> int:
        return len(self.train_images)

    def train_batches(self, epoch: int, start: int = 0) -> Iterator[Batch]:
        order = epoch_order(self.num_train, self.seed, epoch).to(self.device)
        uniforms = epoch_uniforms(self.seed, epoch, self.num_train).to(self.device)
        for b in range(start, self.batches_per_epoch):
            first = b * self.batch_size + self.rank * self.per_process
            idx = order[first:first + self.per_process]
            yield self.augment(self.train_images[idx], uniforms[idx]), self.train_labels[idx]

    def eval_batches(self) -> Iterator[Batch]:
        for i in range(0, len(self.eval_images), self.eval_batch_size):
            x = self.eval_images[i:i + self.eval_batch_size]
            yield self.no_aug(x, None), self.eval_labels[i:i + self.eval_batch_size]

    def describe(self) -> Dict[str, Any]:
        return dict(path=self.name, augment=self.augment.cfg.describe(),
                    bytes_on_device=int(self.train_images.numel() + self.eval_images.numel()))
