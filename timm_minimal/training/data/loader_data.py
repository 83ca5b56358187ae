"""The loader data path: a ``DataLoader`` over per-image transforms (timm's), for datasets that do not fit on the
training device; the counterpart of ``timm_minimal.training.data.device_data``.

Keys are ``(epoch, index)`` pairs of a seeded order (``EpochSampler``), each process takes its share of every
global batch (``RankBatchSampler``), and the transform of a sample is seeded from (seed, epoch, index)
(``TransformDataset``): the batches do not depend on the number of workers or processes, and a run resumed in
the middle of an epoch sees the batches an uninterrupted one would.
"""
from typing import Any, Dict, Iterator, List, Optional, Tuple, Union

import torch
from torch.utils.data import DataLoader, Dataset, IterableDataset, Sampler

from ...models.images import convert_image
from ..seeding import epoch_order, mix_seed, seed_rngs

__all__ = ['TransformDataset', 'EpochSampler', 'RankBatchSampler', 'LoaderDataPath']

class TransformDataset(Dataset):
    """Applies an image transform to a dataset of (PIL image, label), with seeded randomness.

    Keys are sample indices or ``(epoch, index)`` pairs (``EpochSampler`` yields the latter): the
    transform's random draws (python ``random``, numpy, torch) are seeded from (seed, epoch, index),
    so an augmented sample does not depend on the worker or process that makes it, nor on what ran
    before. Images are converted to ``img_mode`` ('L' or 'RGB') first. ``seed=None``: no seeding (for
    deterministic evaluation transforms).
    """

    def __init__(self, dataset: Dataset, transform: Any, img_mode: str, seed: Optional[int] = 0) -> None:
        self.dataset = dataset
        self.transform = transform
        self.img_mode = img_mode
        self.seed = seed

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, key: Union[int, Tuple[int, int]]) -> Tuple[torch.Tensor, int]:
        epoch, index = key if isinstance(key, tuple) else (0, key)
        img, target = self.dataset[index]
        img = convert_image(img, self.img_mode)
        if self.transform is not None:
            if self.seed is not None:
                seed_rngs(mix_seed(self.seed, epoch, index), all_devices=False)
            img = self.transform(img)
        return img, target


class EpochSampler(Sampler):
    """Yields ``(epoch, index)`` keys: a seeded permutation per epoch (or the identity), from a position.

    ``set_position(epoch, start)`` selects the epoch and skips its first ``start`` samples (a run
    resumed mid-epoch); ``num_samples`` caps the samples drawn per epoch (whole batches only). The
    order depends on (seed, epoch) only, so every process of a distributed run draws the same
    global order and takes its own share of each batch.
    """

    def __init__(self, size: int, seed: int = 0, shuffle: bool = True, num_samples: Optional[int] = None) -> None:
        self.size = size
        self.seed = seed
        self.shuffle = shuffle
        self.num_samples = size if num_samples is None else min(num_samples, size)
        self.epoch = 0
        self.start = 0

    def set_position(self, epoch: int, start: int = 0) -> None:
        self.epoch = epoch
        self.start = start

    def __len__(self) -> int:
        return max(0, self.num_samples - self.start)

    def __iter__(self) -> Iterator[Tuple[int, int]]:
        if self.shuffle:
            order = epoch_order(self.size, self.seed, self.epoch)[:self.num_samples].tolist()
        else:
            order = range(self.num_samples)
        epoch = self.epoch
        for i in order[self.start:]:
            yield epoch, i


class RankBatchSampler(Sampler):
    """This process's share of every global batch: batches of ``EpochSampler`` keys, sliced by rank."""

    def __init__(self, sampler: EpochSampler, batch_size: int, world: int = 1, rank: int = 0) -> None:
        self.sampler, self.batch_size, self.world, self.rank = sampler, batch_size, world, rank
        self.per_process = batch_size // world

    def __len__(self) -> int:
        return len(self.sampler) // self.batch_size

    def __iter__(self) -> Iterator[List[Tuple[int, int]]]:
        keys = list(self.sampler)
        lo = self.rank * self.per_process
        for b in range(len(keys) // self.batch_size):
            yield keys[b * self.batch_size + lo:b * self.batch_size + lo + self.per_process]


class LoaderDataPath:
    """Training and evaluation batches from a ``DataLoader``: per-image timm transforms in worker processes.

    For datasets that do not fit the device (ImageNet) or need per-image transforms (RandAugment,
    colour jitter), and for streaming datasets. Batches arrive as uint8 and are normalised (and
    randomly erased) on the device. ``train_batches(epoch, start)`` yields this process's share of
    every global batch from batch ``start`` on; ``eval_batches()`` this process's part of the
    evaluation split (a contiguous shard; streaming datasets: every ``world``-th batch).
    """
    name = 'loader'

    def __init__(self, train: Dataset, evaluation: Dataset, normalize: Any, eraser: Any, device: torch.device,
                 seed: int, batch_size: int, batches_per_epoch: int, eval_batch_size: int, num_workers: int,
                 world: int = 1, rank: int = 0) -> None:
        self.train, self.evaluation = train, evaluation
        self.normalize, self.eraser, self.device = normalize, eraser, device
        self.batch_size, self.batches_per_epoch, self.world, self.rank = batch_size, batches_per_epoch, world, rank
        self.eval_batch_size = max(1, eval_batch_size // world)
        self.loader_kw = dict(num_workers=num_workers, pin_memory=device.type == 'cuda')
        self.iterable = isinstance(train, IterableDataset)
        self.sampler = None if self.iterable else EpochSampler(
            len(train), seed=seed, shuffle=True, num_samples=batches_per_epoch * batch_size)

    def _to_device(self, x: torch.Tensor, y: Any, training: bool) -> Tuple[torch.Tensor, torch.Tensor]:
        x = self.normalize(x.to(self.device, non_blocking=True))
        if training and self.eraser is not None:
            x = self.eraser(x)
        return x, torch.as_tensor(y).to(self.device, non_blocking=True)

    def train_batches(self, epoch: int, start: int = 0) -> Iterator[Tuple[torch.Tensor, torch.Tensor]]:
        if self.iterable:  # streaming: every process reads the stream and keeps its slice of each global batch
            if hasattr(self.train, 'set_epoch'):
                self.train.set_epoch(epoch)
            loader = DataLoader(self.train, batch_size=self.batch_size, drop_last=True, **self.loader_kw)
            lo, per = self.rank * (self.batch_size // self.world), self.batch_size // self.world
            for b, (x, y) in enumerate(loader):
                if b >= self.batches_per_epoch:
                    break
                yield self._to_device(x[lo:lo + per], y[lo:lo + per], True)
            return
        self.sampler.set_position(epoch, start * self.batch_size)
        loader = DataLoader(self.train, batch_sampler=RankBatchSampler(
            self.sampler, self.batch_size, self.world, self.rank), **self.loader_kw)
        for x, y in loader:
            yield self._to_device(x, y, True)

    def eval_batches(self) -> Iterator[Tuple[torch.Tensor, torch.Tensor]]:
        ds = self.evaluation
        if isinstance(ds, IterableDataset):
            loader = DataLoader(ds, batch_size=self.eval_batch_size, **self.loader_kw)
            batches = (b for i, b in enumerate(loader) if i % self.world == self.rank)
        else:
            n = len(ds)
            shard = torch.utils.data.Subset(ds, range(n * self.rank // self.world, n * (self.rank + 1) // self.world))
            batches = iter(DataLoader(shard, batch_size=self.eval_batch_size, shuffle=False, **self.loader_kw))
        for x, y in batches:
            yield self._to_device(x, y, False)

    def describe(self) -> Dict[str, Any]:
        return dict(path=self.name, num_workers=self.loader_kw['num_workers'])
