"""How a run's images reach the model: its preprocessing (``data_config``), and one of two data paths (``--data-path``):
a dataset that fits lives on the training device as uint8 and is augmented there in whole batches
(``device_data``), the others go through a ``DataLoader`` with timm's per-image transforms (``loader_data``)."""
from pathlib import Path
from typing import Any, Dict, Optional, Sequence, Tuple

import numpy as np
import torch
import torch.nn as nn
from timm.data import resolve_data_config
from timm.data.random_erasing import RandomErasing

from ...cli import UsageError
from ...models.datasets import channel_stats
from ...models.images import convert_image, image_mode
from .batch_augment import ERASE_MODES, BatchAugment, BatchAugmentConfig
from .loading import ImageData, build_transforms, subset, subset_indices
from ..log import say
from ..options import AugmentationOptions, DataPathOptions, ModelOptions, RunOptions
from .device_data import DeviceDataPath, cache_file, dataset_bytes, device_budget_bytes, images_to_array
from .loader_data import LoaderDataPath, TransformDataset
from ..seeding import mix_seed
from ...machine import default_cache_dir

__all__ = ['data_config', 'device_path_blockers', 'build_data_path', 'count_batches']


def data_config(model: nn.Module, opts: ModelOptions) -> Dict[str, Any]:
    """Input size and preprocessing for the model: its pretrained config, its actual geometry, the model options'
    overrides (--mean, --std, --interpolation, --crop-pct)."""
    cfg = resolve_data_config({}, model=model)
    in_chans = getattr(model, 'in_chans', cfg['input_size'][0])
    patch_embed = getattr(model, 'patch_embed', None)
    img_size = getattr(patch_embed, 'img_size', None)
    hw = tuple(img_size) if img_size is not None else tuple(cfg['input_size'][1:])
    cfg['input_size'] = (in_chans, *hw)
    for key in ('mean', 'std'):
        try:
            cfg[key] = tuple(channel_stats(getattr(opts, key) or cfg[key], in_chans, f'--{key}'))
        except ValueError as e:
            raise UsageError(str(e)) from e
    if opts.interpolation:
        cfg['interpolation'] = opts.interpolation
    if opts.crop_pct:
        cfg['crop_pct'] = opts.crop_pct
    return cfg


class _ConvertThen:
    """Convert a PIL image to a mode ('L' or 'RGB'), then apply a transform."""

    def __init__(self, mode: str, transform: Any) -> None:
        self.mode, self.transform = mode, transform

    def __call__(self, img):
        return self.transform(convert_image(img, self.mode))


def _batch_augment_config(aug: AugmentationOptions) -> BatchAugmentConfig:
    if aug.no_aug:
        return BatchAugmentConfig()
    return BatchAugmentConfig(  # raises UsageError for a value it cannot take
        scale=tuple(aug.scale or (0.08, 1.0)), ratio=tuple(aug.ratio or (3 / 4, 4 / 3)),
        translate=aug.translate, rotate=aug.rotate, hflip=aug.hflip, vflip=aug.vflip, reprob=aug.reprob,
        remode=aug.remode)


def device_path_blockers(path: DataPathOptions, aug: AugmentationOptions, data: ImageData, input_size: Sequence[int],
                         device: torch.device) -> list:
    """Why the device data path cannot take this run (empty when it can)."""
    reasons = []
    if isinstance(data.train, torch.utils.data.IterableDataset):
        reasons.append('the dataset is streamed (an iterable dataset)')
    for opt, value in (('aa', aug.aa), ('color-jitter', aug.color_jitter)):
        if value and not aug.no_aug:
            reasons.append(f'--{opt} {value} is a per-image transform')
    if aug.reprob > 0 and (aug.remode not in ERASE_MODES or aug.recount != 1):
        reasons.append(f'random erasing with --remode {aug.remode} --recount {aug.recount} (the device path '
                       f'erases one rectangle, --remode {" or ".join(ERASE_MODES)})')
    if not reasons:
        size = dataset_bytes(len(data.train) + len(data.eval), input_size)
        budget = device_budget_bytes(device, path.device_data_limit)
        if size > budget:
            reasons.append(f'the data need {size / 2 ** 30:.2f} GiB at the input size, more than the device path '
                           f'holds ({budget / 2 ** 30:.2f} GiB: --device-data-limit'
                           f'{", at most half the free GPU memory" if device.type == "cuda" else ""})')
    return reasons


def _device_arrays(cache_dir: Optional[str], data: ImageData, split: str, indices: np.ndarray, eval_tf, data_cfg,
                   img_mode: str):
    ds = data.train if split == 'train' else data.eval
    cache, content = None, data.fingerprint('train' if split == 'train' else 'eval')
    if content:  # only where the content is known: a cache is never read for other images
        cache = cache_file(Path(cache_dir) if cache_dir else default_cache_dir(), content, split,
                           data_cfg['input_size'], img_mode, eval_tf)
    images, labels = images_to_array(ds, eval_tf, data_cfg['input_size'], img_mode, cache)
    return images[indices], labels[indices]


def build_data_path(run: RunOptions, path: DataPathOptions, aug: AugmentationOptions, data: ImageData,
                    data_cfg: Dict[str, Any], accelerator: Any, batches_per_epoch: int) -> Any:
    """The device data path where it can run (``--data-path auto``), else the loader path."""
    device, world, rank = accelerator.device, accelerator.num_processes, accelerator.process_index
    input_size = data_cfg['input_size']
    try:
        img_mode = image_mode(input_size[0])
    except ValueError as e:
        raise UsageError(f'{e} (the model takes {input_size[0]} input channels)') from e
    blockers = device_path_blockers(path, aug, data, input_size, device)
    if path.data_path == 'device' and blockers:
        raise UsageError('--data-path device cannot take this run: ' + '; '.join(blockers) + '. Use --data-path loader.')
    _, eval_tf = build_transforms(input_size, data_cfg['mean'], data_cfg['std'],
                                  interpolation=data_cfg['interpolation'], crop_pct=data_cfg['crop_pct'])
    eval_bs = run.eval_batch_size or 2 * run.batch_size
    common = dict(device=device, seed=run.seed, batch_size=run.batch_size, batches_per_epoch=batches_per_epoch,
                  eval_batch_size=eval_bs, world=world, rank=rank)
    if path.data_path == 'loader' or blockers:
        if path.data_path == 'auto':
            say('Data path: loader (' + '; '.join(blockers) + ').')
        return _loader_path(run, aug, data, data_cfg, img_mode, eval_tf, common)
    with accelerator.main_process_first():
        train = _device_arrays(run.cache_dir, data, 'train', subset_indices(len(data.train), run.train_subset,
                                                                             mix_seed(run.seed, 1)),
                               eval_tf, data_cfg, img_mode)
        evaluation = _device_arrays(run.cache_dir, data, 'eval', subset_indices(len(data.eval), run.eval_subset,
                                                                                 mix_seed(run.seed, 2)),
                                    eval_tf, data_cfg, img_mode)
    return DeviceDataPath(train, evaluation, _batch_augment_config(aug), data_cfg['mean'], data_cfg['std'], **common)


def _loader_path(run: RunOptions, aug: AugmentationOptions, data: ImageData, data_cfg, img_mode: str, eval_tf,
                 common: Dict[str, Any]) -> LoaderDataPath:
    device = common['device']
    train_tf, _ = build_transforms(
        data_cfg['input_size'], data_cfg['mean'], data_cfg['std'], interpolation=data_cfg['interpolation'],
        crop_pct=data_cfg['crop_pct'], no_aug=aug.no_aug, scale=aug.scale, ratio=aug.ratio, hflip=aug.hflip,
        vflip=aug.vflip, color_jitter=aug.color_jitter, auto_augment=aug.aa,
        train_interpolation=aug.train_interpolation, translate=aug.translate, rotate=aug.rotate)
    train_base = subset(data.train, run.train_subset, mix_seed(run.seed, 1))
    eval_base = subset(data.eval, run.eval_subset, mix_seed(run.seed, 2))
    if isinstance(train_base, torch.utils.data.IterableDataset):  # streaming: the dataset applies the transform
        train_base.transform = _ConvertThen(img_mode, train_tf)
        eval_base.transform = _ConvertThen(img_mode, eval_tf)
        train_ds, eval_ds = train_base, eval_base
    else:
        train_ds = TransformDataset(train_base, train_tf, img_mode, seed=run.seed)
        eval_ds = TransformDataset(eval_base, eval_tf, img_mode, seed=None)
    normalize = BatchAugment(BatchAugmentConfig(), data_cfg['mean'], data_cfg['std'], device).normalize
    eraser = None
    if aug.reprob > 0 and not aug.no_aug:
        eraser = RandomErasing(aug.reprob, mode=aug.remode, max_count=aug.recount, device=device)
    return LoaderDataPath(train_ds, eval_ds, normalize, eraser, num_workers=run.num_workers, **common)


def count_batches(run: RunOptions, grad_accum_steps: int, data: ImageData) -> Tuple[int, int, int]:
    """Training samples used, optimizer updates per epoch and batches per epoch (whole global batches only)."""
    n_train = len(data.train) if run.train_subset is None else min(run.train_subset, len(data.train))
    updates = n_train // (run.batch_size * grad_accum_steps)
    if updates < 1:
        raise UsageError(f'{n_train} training samples make no full batch of {run.batch_size} x '
                         f'{grad_accum_steps} accumulation steps; lower --batch-size.')
    return n_train, updates, updates * grad_accum_steps
