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
import argparse
import sys
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence

import numpy as np
import timm
import torch
from accelerate import Accelerator
from timm.data import resolve_data_config

from ..training.data.batch_augment import BatchAugment, BatchAugmentConfig
from ..training.data.loading import DatasetError, build_transforms, load_dataset
from ..training.data.device_data import images_to_array
from ..training.engine import confusion_counts, eval_metrics, eval_sums
from ..training.trackers import check_trackers, log_figures, project_name, start_trackers, tracker_name
from ..plots.confusion import confusion_figure
from ..models.datasets import DATASETS
from ..models.pretrained import tag_dataset as pretrained_tag_dataset
from ..models.images import image_mode
from .common import describe_load_error
from ..cli import UsageError, command, listed, progress
from .cli import EVAL_BATCH_SIZE, build_parser
from ..models.pretrained import WEIGHTS_DIR
from .eval_report import class_table, model_table, per_class, wilson_interval, write_confusion_figure, write_json

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
    class_names: Sequence[str] = ()  # in the model's class order

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
    names = list(label_names) if label_names and len(label_names) == num_classes else \
        list(data.classes) + [str(i) for i in range(len(data.classes), num_classes)]
    return EvalSplit(data.name, split, images, mapping[labels] if mapping is not None else labels, names)


@torch.no_grad()
def evaluate_split(forwards: Mapping[str, Callable[[torch.Tensor], torch.Tensor]], data: EvalSplit,
                   data_cfg: Mapping[str, Any], num_classes: int, batch_size: int = EVAL_BATCH_SIZE,
                   device: str = 'cpu', confusion_matrix: bool = False) -> Dict[str, Dict[str, Any]]:
    """Loss and top-1 / top-5 accuracy (%) of each function from images to logits over the prepared split ``data``,
    normalised with the mean and std of ``data_cfg``; with ``confusion_matrix``, also the confusion matrix (a list
    of rows, one per true class) and the classes' names."""
    if batch_size < 1:
        raise ValueError(f'the batch size must be at least 1, got {batch_size}')
    normalize = BatchAugment(BatchAugmentConfig(), data_cfg['mean'], data_cfg['std'], torch.device(device))
    sums = {key: torch.zeros(4, dtype=torch.float64, device=device) for key in forwards}
    confusion = {key: torch.zeros(num_classes * num_classes, dtype=torch.int64, device=device) for key in forwards
                 if confusion_matrix}
    for i in progress(range(0, len(data.images), batch_size), desc=f'evaluating on {data.dataset} {data.split}',
                      unit='batch'):
        x = normalize(torch.from_numpy(data.images[i:i + batch_size].copy()).to(device), None)
        y = torch.from_numpy(data.labels[i:i + batch_size].copy()).to(device)
        for key, forward in forwards.items():
            logits = forward(x)
            sums[key] += eval_sums(logits, y)
            if confusion_matrix:
                confusion[key] += confusion_counts(logits, y, num_classes)
    results = {}
    for key in forwards:
        res = eval_metrics(sums[key], num_classes=num_classes)
        results[key] = dict(dataset=data.dataset, split=data.split, samples=res['count'], loss=res['loss'],
                            acc=res['acc'], acc5=res.get('acc5'))
        if confusion_matrix:
            results[key].update(class_names=list(data.class_names),
                                confusion=confusion[key].view(num_classes, num_classes).tolist())
    return results


def evaluate_forwards(forwards: Mapping[str, Callable[[torch.Tensor], torch.Tensor]], data_cfg: Mapping[str, Any],
                      num_classes: int, dataset: str, data_dir: Optional[str] = None, batch_size: int = EVAL_BATCH_SIZE,
                      device: str = 'cpu', download: bool = False, label_names: Optional[Sequence[str]] = None,
                      labels_by_order: bool = False, download_hint: str = '',
                      data_option: str = '--data-dir', split: Optional[str] = None,
                      confusion_matrix: bool = False) -> Dict[str, Dict[str, Any]]:
    """``evaluate_split`` over ``load_eval_split``: the split is read and prepared once for all ``forwards``."""
    if batch_size < 1:
        raise ValueError(f'the batch size must be at least 1, got {batch_size}')
    data = load_eval_split(data_cfg, num_classes, dataset, data_dir, download, label_names, labels_by_order,
                           download_hint, data_option, split)
    return evaluate_split(forwards, data, data_cfg, num_classes, batch_size, device, confusion_matrix)


def model_label_names(model: torch.nn.Module) -> Optional[List[str]]:
    """The class names a model was trained on (its pretrained config's ``label_names``), where it has them."""
    names = (getattr(model, 'pretrained_cfg', None) or {}).get('label_names')
    return list(names) if names and len(names) == getattr(model, 'num_classes', len(names)) else None


def evaluate_model(model: torch.nn.Module, dataset: str, data_dir: Optional[str] = None,
                   batch_size: int = EVAL_BATCH_SIZE, device: str = 'cpu', download: bool = False,
                   labels_by_order: bool = False, download_hint: str = '', split: Optional[str] = None,
                   confusion_matrix: bool = False) -> Dict[str, Any]:
    """Loss and top-1 / top-5 accuracy (%) of ``model`` over the evaluation split of ``dataset`` (or ``split``),
    with the confusion matrix where asked (``evaluate_split``)."""
    return evaluate_models({'model': model}, dataset, data_dir, batch_size, device, download, labels_by_order,
                           download_hint, split, confusion_matrix)['model']


def evaluate_models(models: Mapping[str, torch.nn.Module], dataset: str, data_dir: Optional[str] = None,
                    batch_size: int = EVAL_BATCH_SIZE, device: str = 'cpu', download: bool = False,
                    labels_by_order: bool = False, download_hint: str = '', split: Optional[str] = None,
                    confusion_matrix: bool = False) -> Dict[str, Dict[str, Any]]:
    """``evaluate_model`` of each of ``models`` by name; the models that see the images alike (the same
    preprocessing, classes and label names) share one reading and preparation of the split and one pass over it.
    An error (``DatasetError``, ``RuntimeError``, ``ValueError``) names the models it concerns where there are
    several."""
    groups: Dict[str, List[str]] = {}
    configs = {}
    for name, model in models.items():
        model.to(device).eval()
        configs[name] = resolve_data_config({}, model=model)
        check_config_size(model, configs[name]['input_size'])
        seen = (sorted(configs[name].items()), model.num_classes, model_label_names(model))
        groups.setdefault(repr(seen), []).append(name)
    results = {}
    for names in groups.values():
        first, cfg = models[names[0]], configs[names[0]]
        try:
            data = load_eval_split(cfg, first.num_classes, dataset, data_dir, download, model_label_names(first),
                                   labels_by_order, download_hint, split=split)
            results.update(evaluate_split({n: models[n] for n in names}, data, cfg, first.num_classes, batch_size,
                                          device, confusion_matrix))
        except (DatasetError, RuntimeError, ValueError) as e:
            if len(models) == 1:
                raise
            kind = next(k for k in (DatasetError, RuntimeError, ValueError) if isinstance(e, k))
            raise kind(f'{", ".join(names)}: {e}') from None
    return results


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


def _load(name: str) -> torch.nn.Module:
    try:
        return timm.create_model(name, pretrained=True)
    except (RuntimeError, ValueError, OSError) as e:
        raise UsageError(describe_load_error(name, e)) from None


def _dataset(args, models: Dict[str, torch.nn.Module]) -> str:
    """``--dataset``, else the one dataset the models' tags name."""
    if args.dataset:
        return args.dataset
    tagged = {name: tag_dataset(model) for name, model in models.items()}
    named = sorted({d for d in tagged.values() if d})
    if len(named) == 1 and all(tagged.values()):
        return named[0]
    untagged = [name for name, d in tagged.items() if d is None]
    raise UsageError('--dataset is needed: ' + (f'{listed(untagged, 3)} names no dataset by its tag (mnist, cifar10, '
                     f'in1k)' if untagged else f'the models\' tags name {", ".join(named)}')
                     + '; give mnist, cifar10, imagenet or an image folder.')


def _report(args, results: List[Dict[str, Any]]) -> None:
    """The table of the models (one model: its line), the rows per class, and the files asked for."""
    first = results[0]
    if len(results) == 1:
        r = first
        top5 = f", top-5 {r['acc5']:.2f}%" if r['acc5'] is not None else ''
        low, high = r['acc_interval']
        print(f"{r['model']} on {r['dataset']} {r['split']} ({r['samples']:,} images): top-1 {r['acc']:.2f}%"
              f"{top5}, loss {r['loss']:.4f} (top-1 95% interval {low:.2f}-{high:.2f}%)")
    else:
        print(f"{first['dataset']} {first['split']}, {first['samples']:,} images:")
        print('\n'.join(model_table(results)))
    if args.per_class:
        print('\n'.join(class_table(results)))
    if args.confusion:
        write_confusion_figure(args.confusion, results, first['class_names'])
        print(f'wrote {args.confusion}')
    if args.json:
        write_json(args.json, dict(dataset=first['dataset'], split=first['split'], samples=first['samples'],
                                   models=results))
        print(f'wrote {args.json}')


@command('timm-minimal-evaluate')
def main(argv: Optional[Sequence[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    names = args.model if isinstance(args.model, list) else [args.model]
    check_output_files(args, names)
    if args.log_with:
        try:
            args.log_with = [tracker_name(t) for t in args.log_with]
        except argparse.ArgumentTypeError as e:
            raise UsageError(f'--log-with: {e}') from None
        check_trackers(args.log_with)
    models = {name: _load(name) for name in dict.fromkeys(names)}
    dataset = _dataset(args, models)
    try:
        evaluated = evaluate_models(models, dataset, args.data_dir, args.batch_size, args.device, args.download,
                                    args.labels_by_order, download_hint='drop --no-download', split=args.split,
                                    confusion_matrix=True)
    except (DatasetError, RuntimeError, ValueError) as e:
        raise UsageError(str(e)) from None
    results = []
    for name, model in models.items():
        res = evaluated[name]
        confusion = np.asarray(res['confusion'])
        res.update(model=name, params=sum(p.numel() for p in model.parameters()),
                   acc_interval=wilson_interval(int(np.trace(confusion)), res['samples']),
                   per_class=per_class(confusion, res['class_names']))
        results.append(res)
    if len({(r['samples'], tuple(r['class_names'])) for r in results}) > 1:
        raise UsageError('the models did not see the same images and classes (their preprocessing or label names '
                         'differ): evaluate them one at a time.')
    _report(args, results)
    if args.log_with:
        _log(args, results)
    return 0


def _log(args, results: List[Dict[str, Any]]) -> None:
    """The evaluation as one tracker run: each model's loss, top-1 and top-5 (``<model>/acc``, ...) and its confusion
    matrix as an image; the options as its configuration."""
    folder = Path(args.log_dir) / f'evaluate-{datetime.now():%Y%m%d-%H%M%S}'
    folder.mkdir(parents=True, exist_ok=True)
    accelerator = Accelerator(cpu=True)
    options = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()}
    start_trackers(accelerator, args.log_with, folder, options, project_name(None), {},
                   metrics=[f'{r["model"]}/acc' for r in results])
    accelerator.log({f'{r["model"]}/{key}': r[key] for r in results for key in ('loss', 'acc', 'acc5')
                     if r[key] is not None}, step=0)
    log_figures(accelerator, {f'{r["model"]}/confusion': confusion_figure(
        np.asarray(r['confusion']), r['class_names'], f'{r["model"]} on {r["dataset"]} {r["split"]}: top-1 '
        f'{r["acc"]:.2f}%') for r in results}, step=0)
    accelerator.end_training()
    print(f'logged to {", ".join(args.log_with)} in {folder}')


def _inputs(args, names: Sequence[str]) -> List[Path]:
    """The folders and files the evaluation reads: each ``local-dir:`` model's folder, the package's weights, and the
    dataset's folder (an image folder given as --dataset, and --data-dir)."""
    inputs = [Path(n[len('local-dir:'):]) for n in names if n.startswith('local-dir:')] + [WEIGHTS_DIR]
    inputs += [Path(p) for p in (args.dataset, args.data_dir) if p and Path(p).exists()]
    return [p.resolve() for p in inputs]


def check_output_files(args, names: Sequence[str] = ()) -> None:
    """``--confusion`` and ``--json`` name files that can be written, checked before any model runs: not a folder,
    not one path for both, nothing the evaluation reads (a model's folder, the dataset), and no existing file unless
    ``--overwrite`` (a missing folder is made when the file is written)."""
    outputs = [(option, path) for option, path in (('--confusion', args.confusion), ('--json', args.json)) if path]
    if len(outputs) == 2 and outputs[0][1].resolve() == outputs[1][1].resolve():
        raise UsageError(f'--confusion and --json both name {outputs[0][1]}; give each its own file')
    inputs = _inputs(args, names)
    for option, path in outputs:
        if path.is_dir():
            raise UsageError(f'{option} {path} is a folder; name the file to write, e.g. {path / "confusion.png"}')
        files_above = [p for p in path.parents if p.exists() and not p.is_dir()]
        if files_above:
            raise UsageError(f'{option} {path}: {files_above[0]} is a file, not a folder; name a file in a folder')
        read = next((i for i in inputs if path.resolve() == i or i in path.resolve().parents), None)
        if read is not None:
            raise UsageError(f'{option} {path} lies in {read}, which this evaluation reads (a model or the dataset); '
                             f'name a file elsewhere')
        if (path.exists() or path.is_symlink()) and not args.overwrite:
            raise UsageError(f'{option} {path} exists; pass --overwrite to replace it, or name a new file')


if __name__ == '__main__':
    sys.exit(main())
