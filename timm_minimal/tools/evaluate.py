"""Evaluate a model on the whole test split of a dataset (or its training split): top-1 and top-5 accuracy and the
loss.

    timm-minimal-evaluate --model vit_minimal_sym_6x4.mnist --dataset mnist --data-dir data
    timm-minimal-evaluate --model local-dir:runs/x/checkpoints/last --dataset cifar10 --data-dir data
    timm-minimal-evaluate --model vit_minimal_sym_6x4.cifar10 --data-dir data --split train

The model is any timm name (``pretrained=True``: the shipped weights of a tag, ``local-dir:``,
``hf-hub:``); the images go through the model's own evaluation preprocessing (its pretrained
config: input size, crop, mean and std), as in training. The numbers are those the model cards
report. ``--split train`` evaluates the training images the same way, without the augmentation of training: how
well a model fits its training set, where the trainer's train accuracy is that of augmented batches.
"""
import sys
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence

import numpy as np
import torch

from ..training.batch_augment import BatchAugment, BatchAugmentConfig
from ..training.data import DatasetError, build_transforms, load_dataset
from ..training.device_data import images_to_array
from ..training.engine import eval_metrics, eval_sums
from ..models.datasets import DATASETS
from ..models.pretrained import tag_dataset as pretrained_tag_dataset
from ..models.images import image_mode
from .common import describe_load_error
from ..cli import UsageError, command, listed
from .cli import EVAL_BATCH_SIZE, build_parser

__all__ = ['evaluate_model', 'evaluate_forwards', 'load_eval_split', 'evaluate_split', 'EvalSplit', 'main']


def map_labels(data_classes: Sequence[str], label_names: Optional[Sequence[str]], by_order: bool,
               where: str) -> Optional[np.ndarray]:
    """The model's class index for each class of the data (their folder names), by name; None where the data's
    labels are the model's already (the same names in the same order, no names to map by, or ``by_order``).
    Folders whose names are not among the model's ``label_names`` are refused, naming them."""
    if by_order or not label_names or list(data_classes) == list(label_names):
        return None
    index = {str(name): i for i, name in enumerate(label_names)}
    unknown = [c for c in data_classes if str(c) not in index]
    if unknown:
        raise DatasetError(f'the classes of {where} ({listed(unknown, 8)}) are not among the model\'s label names '
                           f'({listed(label_names, 10)}): '
                           f'name the folders after them, or pass --labels-by-order to take the folders in '
                           f'alphabetical order as class 0, 1, ...')
    return np.asarray([index[str(c)] for c in data_classes], dtype=np.int64)


@dataclass
class EvalSplit:
    """A split read and prepared for evaluation (``load_eval_split``): its images after the evaluation preprocessing
    (uint8, not yet normalised) and their labels in the model's class order. A split without images is refused, not
    scored (``DatasetError``)."""
    dataset: str
    split: str
    images: np.ndarray
    labels: np.ndarray

    def __post_init__(self) -> None:
        if len(self.images) == 0:
            raise DatasetError(f'the {self.split} split of {self.dataset} holds no images: nothing was evaluated.')


def load_eval_split(data_cfg: Mapping[str, Any], num_classes: int, dataset: str, data_dir: Optional[str] = None,
                    download: bool = False, label_names: Optional[Sequence[str]] = None, labels_by_order: bool = False,
                    download_hint: str = '', data_option: str = '--data-dir', split: Optional[str] = None) -> EvalSplit:
    """The evaluation split of ``dataset`` (or ``split``: that split's name, or ``'train'``) through the preprocessing
    ``data_cfg`` (timm's ``resolve_data_config``). The data's classes are matched to the model's ``label_names`` by
    name (``map_labels``) unless ``labels_by_order``. Missing data, an unknown split or classes the model lacks raise
    ``DatasetError`` here, before any model runs."""
    data = load_dataset(dataset, data_dir, download=download, download_hint=download_hint, data_option=data_option)
    split = split or data.eval_split
    if split not in ('train', data.eval_split):
        raise DatasetError(f'{data.name} has no split {split!r}; its splits are train and {data.eval_split}')
    mapping = map_labels(data.classes, label_names, labels_by_order, data.source or dataset)
    if mapping is None and data.num_classes > num_classes:
        raise DatasetError(f'{data.name} has {data.num_classes} classes and the model {num_classes} outputs: '
                           f'evaluate a model trained on these classes.')
    _, eval_tf = build_transforms(data_cfg['input_size'], data_cfg['mean'], data_cfg['std'],
                                  interpolation=data_cfg['interpolation'], crop_pct=data_cfg['crop_pct'])
    images, labels = images_to_array(data.train if split == 'train' else data.eval, eval_tf, data_cfg['input_size'],
                                     image_mode(data_cfg['input_size'][0]))
    return EvalSplit(data.name, split, images, mapping[labels] if mapping is not None else labels)


@torch.no_grad()
def evaluate_split(forwards: Mapping[str, Callable[[torch.Tensor], torch.Tensor]], data: EvalSplit,
                   data_cfg: Mapping[str, Any], num_classes: int, batch_size: int = EVAL_BATCH_SIZE,
                   device: str = 'cpu') -> Dict[str, Dict[str, Any]]:
    """Loss and top-1 / top-5 accuracy (%) of each function from images to logits over the prepared split ``data``,
    normalised with the mean and std of ``data_cfg``."""
    if batch_size < 1:
        raise ValueError(f'the batch size must be at least 1, got {batch_size}')
    normalize = BatchAugment(BatchAugmentConfig(), data_cfg['mean'], data_cfg['std'], torch.device(device))
    sums = {key: torch.zeros(4, dtype=torch.float64, device=device) for key in forwards}
    for i in range(0, len(data.images), batch_size):
        x = normalize(torch.from_numpy(data.images[i:i + batch_size].copy()).to(device), None)
        y = torch.from_numpy(data.labels[i:i + batch_size].copy()).to(device)
        for key, forward in forwards.items():
            sums[key] += eval_sums(forward(x), y)
    results = {}
    for key in forwards:
        res = eval_metrics(sums[key], num_classes=num_classes)
        results[key] = dict(dataset=data.dataset, split=data.split, samples=res['count'], loss=res['loss'],
                            acc=res['acc'], acc5=res.get('acc5'))
    return results


def evaluate_forwards(forwards: Mapping[str, Callable[[torch.Tensor], torch.Tensor]], data_cfg: Mapping[str, Any],
                      num_classes: int, dataset: str, data_dir: Optional[str] = None, batch_size: int = EVAL_BATCH_SIZE,
                      device: str = 'cpu', download: bool = False, label_names: Optional[Sequence[str]] = None,
                      labels_by_order: bool = False, download_hint: str = '',
                      data_option: str = '--data-dir', split: Optional[str] = None) -> Dict[str, Dict[str, Any]]:
    """``evaluate_split`` over ``load_eval_split``: the split is read and prepared once for all ``forwards``."""
    if batch_size < 1:
        raise ValueError(f'the batch size must be at least 1, got {batch_size}')
    data = load_eval_split(data_cfg, num_classes, dataset, data_dir, download, label_names, labels_by_order,
                           download_hint, data_option, split)
    return evaluate_split(forwards, data, data_cfg, num_classes, batch_size, device)


def model_label_names(model: torch.nn.Module) -> Optional[List[str]]:
    """The class names a model was trained on (its pretrained config's ``label_names``), where it has them."""
    names = (getattr(model, 'pretrained_cfg', None) or {}).get('label_names')
    return list(names) if names and len(names) == getattr(model, 'num_classes', len(names)) else None


def evaluate_model(model: torch.nn.Module, dataset: str, data_dir: Optional[str] = None,
                   batch_size: int = EVAL_BATCH_SIZE, device: str = 'cpu', download: bool = False,
                   labels_by_order: bool = False, download_hint: str = '', split: Optional[str] = None
                   ) -> Dict[str, Any]:
    """Loss and top-1 / top-5 accuracy (%) of ``model`` over the evaluation split of ``dataset`` (or ``split``)."""
    from timm.data import resolve_data_config
    model = model.to(device).eval()
    cfg = resolve_data_config({}, model=model)
    check_config_size(model, cfg['input_size'])
    return evaluate_forwards({'model': model}, cfg, model.num_classes, dataset, data_dir, batch_size, device,
                             download, model_label_names(model), labels_by_order, download_hint,
                             split=split)['model']


def check_config_size(model: torch.nn.Module, input_size: Sequence[int]) -> None:
    """ValueError unless the input size of a model's config (what every image is resized to) is one the model takes:
    its own size, or any within the model's size limits where it takes any (``dynamic_img_size``)."""
    img_size = getattr(getattr(model, 'patch_embed', None), 'img_size', None)
    if img_size is None or getattr(model, 'dynamic_img_size', False):
        return
    if tuple(input_size[1:]) != tuple(img_size):
        raise ValueError(f'the model\'s config gives the input size {"x".join(map(str, input_size))}, but the model '
                         f'takes {img_size[0]}x{img_size[1]} images: the config and the weights do not belong together.')


def tag_dataset(model: torch.nn.Module) -> Optional[str]:
    """The dataset (the trainer's ``--dataset``) of the model's pretrained tag, what evaluate and export take when
    not told; None for a model without a dataset tag."""
    tag = (getattr(model, 'pretrained_cfg', None) or {}).get('tag')
    dataset = pretrained_tag_dataset(tag)
    return DATASETS[dataset].kind if dataset else None


@command('timm-minimal-evaluate')
def main(argv: Optional[Sequence[str]] = None) -> int:
    import timm
    args = build_parser().parse_args(argv)
    try:
        model = timm.create_model(args.model, pretrained=True)
    except (RuntimeError, ValueError, OSError) as e:
        raise UsageError(describe_load_error(args.model, e)) from None
    dataset = args.dataset or tag_dataset(model)
    if dataset is None:
        raise UsageError(f'--dataset is needed: {args.model} names no dataset by its tag (mnist, cifar10, in1k); '
                         f'give mnist, cifar10, imagenet or an image folder.')
    try:
        res = evaluate_model(model, dataset, args.data_dir, args.batch_size, args.device, args.download,
                             args.labels_by_order, download_hint='drop --no-download', split=args.split)
    except (DatasetError, RuntimeError, ValueError) as e:
        raise UsageError(str(e)) from None
    top5 = f", top-5 {res['acc5']:.2f}%" if res['acc5'] is not None else ''
    print(f"{args.model} on {res['dataset']} {res['split']} ({res['samples']:,} images): top-1 {res['acc']:.2f}%"
          f"{top5}, loss {res['loss']:.4f}")
    return 0


if __name__ == '__main__':
    sys.exit(main())
