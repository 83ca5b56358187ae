"""Train a minimal transformer (or any timm model) with accelerate: MNIST, CIFAR-10, ImageNet, image folders.

    timm-minimal-train --model vit_minimal_std_mlp_6x1 --dataset mnist --data-dir ../shared/data --output runs/mnist_std
    accelerate launch --num_processes 8 -m timm_minimal.train --model vit_minimal_sym_6x4 --dataset imagenet ...
    timm-minimal-train --resume runs/mnist_std          # continue an interrupted run where it stopped

The same command runs on one CPU, one GPU, several GPUs or several nodes (launched by
``accelerate launch`` or ``torchrun``). ``--batch-size`` is the global batch: it is split between
the processes, so a run gives the same training whatever the number of devices.

Options come from three places, later ones winning: built-in defaults, the dataset's recipe
(``timm_minimal/recipes/<dataset>.yaml`` or ``--recipe``), the command line. A resumed run takes
its options from its own ``args.yaml`` and the command line.

The run folder (``--output``) holds ``run.json`` (command line, resolved options, model, dataset,
parameter count, library versions, status), ``args.yaml``, ``metrics.jsonl`` (one line per epoch),
``curves.png`` and ``checkpoints/{last,best}`` (see ``timm_minimal.checkpoint``).

Randomness is a function of the seed: the model is initialised from ``--seed``, data order and
augmentation of a sample depend on (seed, epoch, index), and the RNGs used by the training step
(dropout, random erasing, mixup) are reseeded at every step from (seed, epoch, step, rank). A run
resumed from a checkpoint therefore ends where the uninterrupted run would.

Exit status: 0 when training finished, 2 for a bad command line or dataset, 3 when the loss became
NaN or infinite (the last good checkpoint is kept).

Test hooks (environment variables, for the test suite): ``TIMM_MINIMAL_TEST_KILL_AT_UPDATE=N``
kills the process with SIGKILL right after optimizer update N (and its checkpoint, if one is due);
and ``TIMM_MINIMAL_TEST_KILL_IN_SAVE=N`` kills it in the middle of writing its N-th checkpoint.
"""
import argparse
import hashlib
import json
import logging
import math
import os
import platform
import random
import shlex
import signal
import sys
import time
from datetime import datetime, timezone
from importlib import resources
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import yaml

from . import checkpoint as ckpt
from .data import (
    DatasetError, EpochSampler, ImageData, TransformDataset, build_transforms, dataset_kind, load_dataset, mix_seed,
    subset,
)

_logger = logging.getLogger('timm_minimal.train')

__all__ = ['build_parser', 'parse_args', 'train', 'main', 'Diverged', 'RECIPES', 'load_recipe']

RECIPES = {'mnist': 'mnist', 'cifar10': 'cifar10', 'imagenet': 'imagenet', 'folder': 'default', 'timm': 'default'}
EXIT_BAD_INPUT = 2
EXIT_DIVERGED = 3


class Diverged(RuntimeError):
    """The training loss became NaN or infinite."""


class UsageError(ValueError):
    """A command line that cannot run; the message says what is wrong and what is allowed."""


# -- command line ----------------------------------------------------------------------------------

def _floats(n: Optional[int] = None):
    return dict(type=float, nargs=n or '+')


def build_parser(suppress: bool = False) -> argparse.ArgumentParser:
    """The command line. With ``suppress=True`` no defaults are set (to find the options given explicitly)."""
    kw = dict(argument_default=argparse.SUPPRESS) if suppress else {}
    p = argparse.ArgumentParser(
        prog='timm-minimal-train', description=__doc__.split('\n\n')[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter, **kw)

    def d(value):  # a default, unless suppressed
        return {} if suppress else {'default': value}

    g = p.add_argument_group('run')
    g.add_argument('--model', **d(None), help='timm model name, e.g. vit_minimal_std_mlp_6x1 or vit_minimal_sym_6x4.cifar10 '
                   '(without a tag the dataset picks it: .mnist, .cifar10, .in1k for image folders)')
    g.add_argument('--dataset', **d(None), help="mnist, cifar10, imagenet, a path to an image folder with train/ and "
                   "val/ (or test/), or a timm dataset name (hfds/..., wds/..., tfds/..., hfids/..., torch/...)")
    g.add_argument('--data-dir', **d(None), help='dataset root (MNIST idx files, CIFAR-10 archive/folder, ImageNet '
                   'folders, timm dataset root); default ./data')
    g.add_argument('--output', **d(None), help='run folder (metrics, checkpoints, plots); default runs/<dataset>-<model>-<time>')
    g.add_argument('--resume', nargs='?', const='', **d(None), metavar='RUN',
                   help='continue the run in RUN (default: --output) from its last checkpoint')
    g.add_argument('--recipe', **d(None), help='recipe name (mnist, cifar10, imagenet, default) or YAML file; '
                   'default: the dataset\'s')
    g.add_argument('--epochs', type=int, **d(10))
    g.add_argument('--batch-size', type=int, **d(256), help='global batch per step, split over all processes')
    g.add_argument('--eval-batch-size', type=int, **d(None), help='global evaluation batch (default 2x --batch-size)')
    g.add_argument('--seed', type=int, **d(0))
    g.add_argument('--num-workers', type=int, **d(0), help='data loading worker processes per training process')
    g.add_argument('--train-subset', type=int, **d(None), help='train on a seeded random subset of this many samples')
    g.add_argument('--eval-subset', type=int, **d(None), help='evaluate on a seeded random subset of this many samples')
    g.add_argument('--train-split', **d('train'), help='training split (timm factory datasets)')
    g.add_argument('--val-split', **d(None), help='evaluation split (timm factory datasets; default validation)')
    g.add_argument('--num-classes', type=int, **d(None), help='number of classes (only if the dataset cannot tell)')
    g.add_argument('--no-download', action='store_true', **d(False), help='never download a missing dataset')
    g.add_argument('--cache-dir', **d(None), help='where archives are extracted once (default $TIMM_MINIMAL_CACHE '
                   'or ~/.cache/timm_minimal)')
    g.add_argument('--checkpoint-interval', type=int, **d(0),
                   help='also checkpoint every N optimizer updates inside an epoch (0: at epoch ends only)')
    g.add_argument('--no-progress', action='store_true', **d(False), help='no progress bar')
    g.add_argument('--log-interval', type=int, **d(50), help='without a progress bar, log every N updates (0: epochs only)')
    g.add_argument('--rank-report', action='store_true', **d(False),
                   help='each process writes rank<N>.json (weights hash, samples seen) into the run folder')

    g = p.add_argument_group('model')
    from timm.utils import ParseKwargs
    g.add_argument('--model-kwargs', nargs='*', action=ParseKwargs, **d({}),
                   help='extra model arguments, e.g. depth=2 embed_dim=96 img_size=64')
    g.add_argument('--pretrained', action='store_true', **d(False), help="start from the model's pretrained weights")
    g.add_argument('--pretrained-path', **d(None), help='start from these weights (safetensors or .pth; a '
                   'classifier of another size is replaced)')
    g.add_argument('--drop', type=float, **d(0.0), help='dropout before the classifier')
    g.add_argument('--drop-path', type=float, **d(0.0), help='stochastic depth rate')
    g.add_argument('--mean', **_floats(), **d(None), help='normalisation mean (default: the model\'s)')
    g.add_argument('--std', **_floats(), **d(None), help='normalisation std (default: the model\'s)')
    g.add_argument('--interpolation', **d(None), help='resize interpolation (default: the model\'s)')
    g.add_argument('--crop-pct', type=float, **d(None), help='evaluation crop fraction (default: the model\'s)')

    g = p.add_argument_group('optimisation')
    g.add_argument('--opt', **d('adamw'), help='timm optimizer name (create_optimizer_v2)')
    g.add_argument('--lr', type=float, **d(1e-3))
    g.add_argument('--weight-decay', type=float, **d(1e-4))
    g.add_argument('--momentum', type=float, **d(0.9))
    g.add_argument('--opt-eps', type=float, **d(None))
    g.add_argument('--opt-betas', **_floats(), **d(None))
    g.add_argument('--sched', **d('cosine'), help='timm scheduler name (create_scheduler_v2), or none')
    g.add_argument('--warmup-epochs', type=float, **d(0.0))
    g.add_argument('--warmup-lr', type=float, **d(1e-5))
    g.add_argument('--min-lr', type=float, **d(0.0))
    g.add_argument('--clip-grad', type=float, **d(None), help='gradient clipping threshold (off when unset)')
    g.add_argument('--clip-mode', choices=('norm', 'value'), **d('norm'))
    g.add_argument('--grad-accum-steps', type=int, **d(1), help='batches per optimizer update')
    g.add_argument('--model-ema', action=argparse.BooleanOptionalAction, **d(False), help='keep EMA weights (ModelEmaV3)')
    g.add_argument('--model-ema-decay', type=float, **d(0.9998))
    g.add_argument('--model-ema-warmup', action=argparse.BooleanOptionalAction, **d(True))

    g = p.add_argument_group('augmentation (timm)')
    g.add_argument('--no-aug', action='store_true', **d(False), help='no training augmentation')
    g.add_argument('--scale', **_floats(2), **d(None), help='random resized crop area range')
    g.add_argument('--ratio', **_floats(2), **d(None), help='random resized crop aspect range')
    g.add_argument('--hflip', type=float, **d(0.5))
    g.add_argument('--vflip', type=float, **d(0.0))
    g.add_argument('--color-jitter', type=float, **d(0.0))
    g.add_argument('--aa', **d(None), help='RandAugment/AutoAugment policy, e.g. rand-m9-mstd0.5-inc1')
    g.add_argument('--train-interpolation', **d(None))
    g.add_argument('--reprob', type=float, **d(0.0), help='random erasing probability')
    g.add_argument('--remode', **d('pixel'))
    g.add_argument('--recount', type=int, **d(1))
    g.add_argument('--mixup', type=float, **d(0.0), help='mixup alpha (0: off)')
    g.add_argument('--cutmix', type=float, **d(0.0), help='cutmix alpha (0: off)')
    g.add_argument('--cutmix-minmax', **_floats(2), **d(None))
    g.add_argument('--mixup-prob', type=float, **d(1.0))
    g.add_argument('--mixup-switch-prob', type=float, **d(0.5))
    g.add_argument('--mixup-mode', **d('batch'))
    g.add_argument('--smoothing', type=float, **d(0.0), help='label smoothing')

    g = p.add_argument_group('system')
    g.add_argument('--mixed-precision', choices=('no', 'fp16', 'bf16'), **d(None),
                   help="default: accelerate's configuration (accelerate launch --mixed_precision)")
    g.add_argument('--compile', action=argparse.BooleanOptionalAction, **d(False), help='torch.compile the model')
    g.add_argument('--compile-mode', **d(None), help='torch.compile mode, e.g. max-autotune')
    g.add_argument('--cpu', action='store_true', **d(False), help='train on the CPU even if a GPU is present')
    return p


def load_recipe(name_or_path: str) -> Dict[str, Any]:
    """A recipe by name (shipped in timm_minimal/recipes) or from a YAML file."""
    path = Path(name_or_path)
    if path.suffix in ('.yaml', '.yml') or path.is_file():
        if not path.is_file():
            raise UsageError(f'Recipe file {path} does not exist.')
        text = path.read_text()
    else:
        shipped = sorted(p.name[:-5] for p in resources.files('timm_minimal').joinpath('recipes').iterdir()
                         if p.name.endswith('.yaml'))
        if name_or_path not in shipped:
            raise UsageError(f"Unknown recipe '{name_or_path}'; choose one of {', '.join(shipped)} or a YAML file.")
        text = resources.files('timm_minimal').joinpath(f'recipes/{name_or_path}.yaml').read_text()
    cfg = yaml.safe_load(text) or {}
    if not isinstance(cfg, dict):
        raise UsageError(f'Recipe {name_or_path} must be a mapping of option names to values.')
    return cfg


def parse_args(argv: Optional[Sequence[str]] = None) -> Tuple[argparse.Namespace, Dict[str, Any]]:
    """Resolve the options: defaults < recipe < the resumed run's args.yaml < command line.

    Returns the options and a dict describing where they came from (recipe name and values).
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    defaults = vars(parser.parse_args([]))
    explicit = vars(build_parser(suppress=True).parse_args(argv))
    dests = set(defaults)

    saved: Dict[str, Any] = {}
    if 'resume' in explicit:
        run_dir = explicit['resume'] or explicit.get('output')
        if not run_dir:
            raise UsageError('--resume needs a run folder: --resume RUN, or --output RUN --resume.')
        args_file = Path(run_dir) / 'args.yaml'
        if args_file.is_file():
            saved = yaml.safe_load(args_file.read_text()) or {}
        elif not Path(run_dir).exists() or 'model' not in explicit:
            raise UsageError(f'Cannot resume {run_dir}: no args.yaml there (is it a run folder?).')
        for key in ('model', 'dataset'):
            if key in explicit and key in saved and explicit[key] != saved[key]:
                raise UsageError(f'--{key} {explicit[key]} differs from the resumed run\'s ({saved[key]}).')
        explicit.setdefault('output', str(run_dir))

    dataset = explicit.get('dataset', saved.get('dataset'))
    if not dataset:
        raise UsageError('--dataset is required: mnist, cifar10, imagenet, an image folder path or a timm dataset name.')
    model = explicit.get('model', saved.get('model'))
    if not model:
        raise UsageError('--model is required, e.g. vit_minimal_std_mlp_6x1 (see timm.list_models("vit_minimal*")).')
    kind = dataset_kind(dataset)
    recipe_name = explicit.get('recipe', saved.get('recipe')) or RECIPES[kind]
    recipe = load_recipe(recipe_name)
    unknown = sorted(set(recipe) - dests)
    if unknown:
        raise UsageError(f'Recipe {recipe_name} has unknown keys {unknown}; keys are option names such as '
                         f'lr, batch_size, epochs.')
    resolved = dict(defaults)
    resolved.update(recipe)
    resolved.update({k: v for k, v in saved.items() if k in dests})
    resolved.update(explicit)
    resolved['recipe'] = recipe_name
    resolved['resume'] = explicit.get('resume')
    args = argparse.Namespace(**resolved)
    return args, dict(recipe=recipe_name, recipe_values=recipe, explicit=sorted(explicit))


# -- helpers ---------------------------------------------------------------------------------------

def split_model_name(name: str) -> Tuple[str, Optional[str]]:
    arch, _, tag = name.partition('.')
    return arch, (tag or None)


def resolve_model_name(name: str, data: ImageData) -> str:
    import timm
    arch, tag = split_model_name(name)
    if not timm.is_model(arch):
        minimal = ', '.join(timm.list_models('vit_minimal*'))
        raise UsageError(f"Unknown model '{arch}'. The minimal transformers are: {minimal} "
                         f"(any other timm model name works too).")
    if tag is None and arch.startswith('vit_minimal'):
        tag = data.default_tag
    return f'{arch}.{tag}' if tag else arch


def _versions() -> Dict[str, str]:
    import accelerate
    import timm
    import torchvision
    from . import __version__
    return dict(python=platform.python_version(), torch=torch.__version__, torchvision=torchvision.__version__,
                timm=timm.__version__, accelerate=accelerate.__version__, timm_minimal=__version__,
                numpy=np.__version__)


def _data_config(model: nn.Module, args: argparse.Namespace) -> Dict[str, Any]:
    """Input size and preprocessing for the model: its pretrained config, its actual geometry, overrides."""
    from timm.data import resolve_data_config
    cfg = resolve_data_config({}, model=model)
    in_chans = getattr(model, 'in_chans', cfg['input_size'][0])
    patch_embed = getattr(model, 'patch_embed', None)
    img_size = getattr(patch_embed, 'img_size', None)
    hw = tuple(img_size) if img_size is not None else tuple(cfg['input_size'][1:])
    cfg['input_size'] = (in_chans, *hw)
    for key in ('mean', 'std'):
        val = tuple(getattr(args, key) or cfg[key])
        if len(val) != in_chans:
            val = val * in_chans if len(val) == 1 else (float(np.mean(val)),) * in_chans
        cfg[key] = val
    if args.interpolation:
        cfg['interpolation'] = args.interpolation
    if args.crop_pct:
        cfg['crop_pct'] = args.crop_pct
    return cfg


def _rng_state() -> Dict[str, Any]:
    py = random.getstate()
    np_state = np.random.get_state()
    state = dict(
        python=[py[0], list(py[1]), py[2]],
        numpy=[np_state[0], torch.from_numpy(np_state[1].astype(np.int64)), int(np_state[2]), int(np_state[3]),
               float(np_state[4])],
        torch=torch.get_rng_state(),
    )
    if torch.cuda.is_available():
        state['cuda'] = torch.cuda.get_rng_state_all()
    return state


def _set_rng_state(state: Dict[str, Any]) -> None:
    py = state['python']
    random.setstate((py[0], tuple(py[1]), py[2]))
    n = state['numpy']
    np.random.set_state((n[0], n[1].numpy().astype(np.uint32), n[2], n[3], n[4]))
    torch.set_rng_state(state['torch'])
    if 'cuda' in state and torch.cuda.is_available() and len(state['cuda']) == torch.cuda.device_count():
        torch.cuda.set_rng_state_all(state['cuda'])


def _seed_step(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % (1 << 32))
    torch.manual_seed(seed)


def _weights_hash(state_dict: Dict[str, torch.Tensor]) -> str:
    h = hashlib.sha256()
    for k in sorted(state_dict):
        h.update(k.encode())
        h.update(state_dict[k].detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()


def _env_int(name: str) -> Optional[int]:
    v = os.environ.get(name)
    return int(v) if v else None


def plot_curves(metrics: List[Dict[str, Any]], path: Path, title: str = '') -> None:
    """Loss, accuracy and learning rate per epoch as a PNG (written atomically)."""
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    if not metrics:
        return
    ep = [m['epoch'] for m in metrics]
    fig, axes = plt.subplots(1, 3, figsize=(15, 4))
    axes[0].plot(ep, [m['train_loss'] for m in metrics], 'o-', label='train')
    axes[0].plot(ep, [m['test_loss'] for m in metrics], 's-', label='test')
    if 'ema_test_loss' in metrics[0]:
        axes[0].plot(ep, [m['ema_test_loss'] for m in metrics], '^--', label='test (EMA)')
    axes[0].set(xlabel='epoch', ylabel='loss', title='loss')
    axes[1].plot(ep, [m['train_acc'] for m in metrics], 'o-', label='train')
    axes[1].plot(ep, [m['test_acc'] for m in metrics], 's-', label='test')
    if 'ema_test_acc' in metrics[0]:
        axes[1].plot(ep, [m['ema_test_acc'] for m in metrics], '^--', label='test (EMA)')
    axes[1].set(xlabel='epoch', ylabel='accuracy (%)', title='accuracy')
    axes[2].plot(ep, [m['lr'] for m in metrics], 'o-')
    axes[2].set(xlabel='epoch', ylabel='learning rate', title='learning rate (end of epoch)')
    for ax in axes[:2]:
        ax.legend()
    for ax in axes:
        ax.grid(alpha=.3)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    tmp = path.with_name(f'.{path.name}.{os.getpid()}.tmp.png')
    fig.savefig(tmp, dpi=100)
    plt.close(fig)
    os.replace(tmp, path)


class _ConvertThen:
    """Convert a PIL image to a mode ('L' or 'RGB'), then apply a transform."""

    def __init__(self, mode: str, transform: Any) -> None:
        self.mode, self.transform = mode, transform

    def __call__(self, img):
        return self.transform(img.convert(self.mode) if img.mode != self.mode else img)


def _len_or_none(ds: Any) -> Optional[int]:
    try:
        return len(ds)
    except TypeError:
        return None


def _read_json(path: Path) -> Dict[str, Any]:
    return json.loads(path.read_text()) if path.is_file() else {}


# -- training --------------------------------------------------------------------------------------

def train(args: argparse.Namespace, provenance: Optional[Dict[str, Any]] = None,
          argv: Optional[Sequence[str]] = None) -> Dict[str, Any]:
    """Run (or resume) one training run; returns the run summary written to run.json."""
    import timm
    from accelerate import Accelerator, DataLoaderConfiguration
    from accelerate.utils import TorchDynamoPlugin
    from timm.data import Mixup
    from timm.data.random_erasing import RandomErasing
    from timm.loss import LabelSmoothingCrossEntropy, SoftTargetCrossEntropy
    from timm.optim import create_optimizer_v2
    from timm.scheduler import create_scheduler_v2
    from timm.utils import ModelEmaV3

    from . import vit_minimal  # noqa: F401  (registers the architectures)

    provenance = provenance or {}
    dynamo = None
    if args.compile:
        dynamo = TorchDynamoPlugin(backend='inductor', mode=args.compile_mode)
    # Several processes without a GPU (torchrun, accelerate launch --multi_gpu on a CPU machine): accelerate
    # only sets up CPU data parallelism (gloo) when told to use the CPU.
    has_gpu = torch.cuda.is_available() or (hasattr(torch, 'xpu') and torch.xpu.is_available())
    multi_cpu = not has_gpu and int(os.environ.get('WORLD_SIZE', '1')) > 1
    accelerator = Accelerator(
        mixed_precision=args.mixed_precision,
        gradient_accumulation_steps=args.grad_accum_steps,
        cpu=args.cpu or multi_cpu,
        dataloader_config=DataLoaderConfiguration(split_batches=True, even_batches=True),
        dynamo_plugin=dynamo,
        step_scheduler_with_optimizer=False,
    )
    world, rank = accelerator.num_processes, accelerator.process_index
    is_main = accelerator.is_main_process
    log = accelerator.print

    if args.batch_size % world:
        raise UsageError(f'--batch-size {args.batch_size} must be a multiple of the number of processes ({world}).')
    if args.grad_accum_steps < 1:
        raise UsageError('--grad-accum-steps must be at least 1.')
    eval_bs = args.eval_batch_size or 2 * args.batch_size
    eval_bs = int(math.ceil(eval_bs / world) * world)
    mixup_active = args.mixup > 0 or args.cutmix > 0 or args.cutmix_minmax is not None
    if mixup_active and (args.batch_size // world) % 2:
        raise UsageError(f'mixup/cutmix needs an even batch per process; got {args.batch_size // world}.')

    # -- run folder ----------------------------------------------------------------------------
    kind = dataset_kind(args.dataset)
    if args.output is None:
        stamp = datetime.now().strftime('%Y%m%d-%H%M%S')
        ds_short = Path(args.dataset).name if kind == 'folder' else args.dataset.replace('/', '_')
        name = [str(Path('runs') / f'{ds_short}-{args.model.replace(".", "_")}-{stamp}')]
        if world > 1:  # one folder for all processes: the main process's time stamp
            from accelerate.utils import broadcast_object_list
            broadcast_object_list(name)
        args.output = name[0]
    out = Path(args.output)
    resuming = args.resume is not None
    last_dir = ckpt.find_checkpoint(out) if resuming else None
    if not resuming and out.exists() and any(out.iterdir()):
        raise UsageError(f'Run folder {out} already exists and is not empty; pass --resume to continue that run, '
                         f'or choose another --output.')
    accelerator.wait_for_everyone()
    if is_main:
        out.mkdir(parents=True, exist_ok=True)
        ckpt.clean_stale_temp(out / 'checkpoints')
    accelerator.wait_for_everyone()
    if resuming and last_dir is None:
        log(f'No checkpoint in {out} yet: starting the run from the beginning.')

    # -- data and model ------------------------------------------------------------------------
    with accelerator.main_process_first():
        data = load_dataset(
            args.dataset, args.data_dir, download=not args.no_download, cache_dir=args.cache_dir,
            train_split=args.train_split, eval_split=args.val_split, num_classes=args.num_classes, seed=args.seed,
            batch_size=args.batch_size // world)
    model_name = resolve_model_name(args.model, data)
    torch.manual_seed(args.seed)
    model_kwargs = dict(args.model_kwargs or {})
    if args.drop_path:
        model_kwargs.setdefault('drop_path_rate', args.drop_path)
    if args.drop:
        model_kwargs.setdefault('drop_rate', args.drop)
    create_kwargs = dict(num_classes=data.num_classes, **model_kwargs)
    if args.pretrained_path:
        if not Path(args.pretrained_path).is_file():
            raise UsageError(f'--pretrained-path {args.pretrained_path} does not exist.')
        create_kwargs['pretrained_cfg_overlay'] = dict(file=str(args.pretrained_path))
    try:
        model = timm.create_model(model_name, pretrained=bool(args.pretrained or args.pretrained_path), **create_kwargs)
    except (TypeError, RuntimeError, ValueError) as e:
        raise UsageError(f'Cannot build {model_name} (model arguments {model_kwargs}'
                         f'{", pretrained" if args.pretrained or args.pretrained_path else ""}): {e}') from e
    num_params = sum(p.numel() for p in model.parameters())
    data_cfg = _data_config(model, args)
    in_chans = data_cfg['input_size'][0]
    img_mode = 'L' if in_chans == 1 else 'RGB'

    train_tf, eval_tf = build_transforms(
        data_cfg['input_size'], data_cfg['mean'], data_cfg['std'], interpolation=data_cfg['interpolation'],
        crop_pct=data_cfg['crop_pct'], no_aug=args.no_aug, scale=args.scale, ratio=args.ratio, hflip=args.hflip,
        vflip=args.vflip, color_jitter=args.color_jitter, auto_augment=args.aa,
        train_interpolation=args.train_interpolation)
    train_base = subset(data.train, args.train_subset, mix_seed(args.seed, 1))
    eval_base = subset(data.eval, args.eval_subset, mix_seed(args.seed, 2))
    iterable = isinstance(train_base, torch.utils.data.IterableDataset)
    if iterable:  # streaming datasets (wds/, hfids/, tfds/) apply the transform themselves; not seeded per sample
        train_base.transform = _ConvertThen(img_mode, train_tf)
        eval_base.transform = _ConvertThen(img_mode, eval_tf)
        train_ds, eval_ds = train_base, eval_base
    else:
        train_ds = TransformDataset(train_base, train_tf, img_mode, seed=args.seed)
        eval_ds = TransformDataset(eval_base, eval_tf, img_mode, seed=None)

    accum = args.grad_accum_steps
    if iterable:
        n_train = len(train_ds) if hasattr(train_ds, '__len__') else None
        if n_train is None:
            raise UsageError('An iterable dataset without a length cannot be scheduled; use a map-style dataset.')
        updates_per_epoch = n_train // (args.batch_size * accum)
        sampler = None
    else:
        n_train = len(train_ds)
        updates_per_epoch = n_train // (args.batch_size * accum)
        sampler = EpochSampler(n_train, seed=args.seed, shuffle=True,
                               num_samples=updates_per_epoch * accum * args.batch_size)
    if updates_per_epoch < 1:
        raise UsageError(f'{n_train} training samples make no full batch of {args.batch_size} x {accum} '
                         f'accumulation steps; lower --batch-size.')
    batches_per_epoch = updates_per_epoch * accum
    loader_kw = dict(num_workers=args.num_workers, pin_memory=torch.cuda.is_available() and not args.cpu,
                     persistent_workers=False)
    train_loader = torch.utils.data.DataLoader(
        train_ds, batch_size=args.batch_size, sampler=sampler, drop_last=True, **loader_kw)
    eval_loader = torch.utils.data.DataLoader(eval_ds, batch_size=eval_bs, shuffle=False, drop_last=False, **loader_kw)

    optimizer = create_optimizer_v2(
        model, opt=args.opt, lr=args.lr, weight_decay=args.weight_decay, momentum=args.momentum,
        **({'eps': args.opt_eps} if args.opt_eps is not None else {}),
        **({'betas': tuple(args.opt_betas)} if args.opt_betas else {}))
    scheduler = None
    if args.sched and args.sched != 'none':
        scheduler, _ = create_scheduler_v2(
            optimizer, sched=args.sched, num_epochs=args.epochs, warmup_epochs=args.warmup_epochs,
            warmup_lr=args.warmup_lr, min_lr=args.min_lr, step_on_epochs=False, updates_per_epoch=updates_per_epoch)

    model, optimizer, train_loader, eval_loader = accelerator.prepare(model, optimizer, train_loader, eval_loader)
    unwrapped = accelerator.unwrap_model(model, keep_torch_compile=False)
    device = accelerator.device
    ema = ModelEmaV3(unwrapped, decay=args.model_ema_decay, use_warmup=args.model_ema_warmup) if args.model_ema else None

    mixup_fn = None
    if mixup_active:
        mixup_fn = Mixup(mixup_alpha=args.mixup, cutmix_alpha=args.cutmix, cutmix_minmax=args.cutmix_minmax,
                         prob=args.mixup_prob, switch_prob=args.mixup_switch_prob, mode=args.mixup_mode,
                         label_smoothing=args.smoothing, num_classes=data.num_classes)
        train_loss_fn = SoftTargetCrossEntropy()
    elif args.smoothing > 0:
        train_loss_fn = LabelSmoothingCrossEntropy(smoothing=args.smoothing)
    else:
        train_loss_fn = nn.CrossEntropyLoss()
    eraser = RandomErasing(args.reprob, mode=args.remode, max_count=args.recount, device=device) if args.reprob > 0 else None
    mean = torch.tensor(data_cfg['mean'], device=device).view(1, -1, 1, 1) * 255
    std = torch.tensor(data_cfg['std'], device=device).view(1, -1, 1, 1) * 255

    def normalize(x: torch.Tensor) -> torch.Tensor:
        return x.to(device, non_blocking=True).float().sub_(mean).div_(std)

    # -- state: fresh or resumed ---------------------------------------------------------------
    start_epoch, start_batch, update = 0, 0, 0
    history: List[Dict[str, Any]] = []
    best = dict(test_acc=-1.0, epoch=None)
    partial = dict(loss_sum=0.0, correct=0.0, count=0.0, train_time=0.0)
    if last_dir is not None:
        state = torch.load(last_dir / ckpt.STATE_FILE, map_location='cpu', weights_only=True)
        unwrapped.load_state_dict(ckpt.load_weights(last_dir / ckpt.MODEL_FILE), strict=True)
        optimizer.load_state_dict(state['optimizer'])
        if scheduler is not None and state.get('scheduler') is not None:
            if state.get('epochs') == args.epochs:
                scheduler.load_state_dict(state['scheduler'])
            else:
                log(f"--epochs changed from {state.get('epochs')} to {args.epochs}: the schedule follows the new length.")
        if accelerator.scaler is not None and state.get('scaler') is not None:
            accelerator.scaler.load_state_dict(state['scaler'])
        if ema is not None:
            if (last_dir / ckpt.EMA_FILE).is_file():
                ema.module.load_state_dict(ckpt.load_weights(last_dir / ckpt.EMA_FILE))
            else:
                ema.module.load_state_dict(unwrapped.state_dict())
        _set_rng_state(state['rng'])
        start_epoch, start_batch, update = state['epoch'], state['batch'], state['update']
        history = list(state['history'])
        best = dict(state['best'])
        partial = dict(state['partial']) if start_batch else partial
        if state.get('batch_size') not in (None, args.batch_size):
            raise UsageError(f"The run was trained with --batch-size {state['batch_size']}; resume it with the same.")
        log(f'Resumed {out} from {last_dir} at epoch {start_epoch + 1}, batch {start_batch}/{batches_per_epoch} '
            f'(optimizer update {update}).')
    if scheduler is not None:
        scheduler.step_update(update)

    # -- run.json, args.yaml, metrics.jsonl ------------------------------------------------------
    run_file = out / 'run.json'
    metrics_file = out / 'metrics.jsonl'
    if is_main:
        saved_args = {k: v for k, v in vars(args).items() if k != 'resume'}
        saved_args['output'] = str(out)
        ckpt.write_text_atomic(out / 'args.yaml', yaml.safe_dump(saved_args, sort_keys=True))
        run = _read_json(run_file) if resuming else {}
        command = 'timm-minimal-train ' + ' '.join(shlex.quote(a) for a in (sys.argv[1:] if argv is None else argv))
        launch = dict(command=command, started=datetime.now(timezone.utc).isoformat(timespec='seconds'),
                      num_processes=world, device=str(device), mixed_precision=accelerator.mixed_precision,
                      torch_threads=torch.get_num_threads(), num_workers=args.num_workers,
                      resumed_from=str(last_dir) if last_dir else None)
        if run:
            run.setdefault('launches', []).append(launch)
            run['status'] = 'running'
        else:
            run = dict(
                format='timm-minimal-run/1',
                status='running',
                command=command,
                model=model_name,
                architecture=split_model_name(model_name)[0],
                model_kwargs=model_kwargs,
                num_params=num_params,
                num_classes=data.num_classes,
                dataset=dict(data.describe(), train_samples_used=_len_or_none(train_base),
                             eval_samples_used=_len_or_none(eval_base)),
                data_config={k: (list(v) if isinstance(v, tuple) else v) for k, v in data_cfg.items()},
                recipe=provenance.get('recipe', args.recipe),
                recipe_values=provenance.get('recipe_values'),
                args={k: v for k, v in vars(args).items() if k != 'resume'},
                distributed=dict(num_processes=world, global_batch_size=args.batch_size,
                                 per_process_batch_size=args.batch_size // world, grad_accum_steps=accum,
                                 effective_batch_size=args.batch_size * accum),
                updates_per_epoch=updates_per_epoch,
                train_samples_per_epoch=batches_per_epoch * args.batch_size,
                units=dict(accuracy='percent', loss='cross-entropy (nats)', throughput='training images per second',
                           time='seconds'),
                versions=_versions(),
                launches=[launch],
            )
        ckpt.write_json_atomic(run_file, run)
        ckpt.write_text_atomic(metrics_file, ''.join(json.dumps(m) + '\n' for m in history))

    log(f'{model_name}: {num_params:,} parameters; {data.name}: {n_train:,} train / {len(eval_ds):,} '
        f'{data.eval_split} images, {data.num_classes} classes; {world} process(es) on {device}, '
        f'batch {args.batch_size} ({args.batch_size // world} per process) x {accum}, '
        f'{updates_per_epoch} updates/epoch, mixed precision {accelerator.mixed_precision}.')

    # -- checkpointing -------------------------------------------------------------------------
    kill_at = _env_int('TIMM_MINIMAL_TEST_KILL_AT_UPDATE')
    kill_in_save = _env_int('TIMM_MINIMAL_TEST_KILL_IN_SAVE')
    saves = [0]

    def model_config() -> Dict[str, Any]:
        cfg = dict(getattr(unwrapped, 'pretrained_cfg', {}) or {})
        cfg = {k: (list(v) if isinstance(v, tuple) else v) for k, v in cfg.items()
               if not callable(v) and k not in ('file', 'source', 'state_dict')}  # where it came from, not what it is
        cfg.update(num_classes=data.num_classes, input_size=list(data_cfg['input_size']),
                   mean=list(data_cfg['mean']), std=list(data_cfg['std']), label_names=data.classes)
        return dict(architecture=split_model_name(model_name)[0], num_classes=data.num_classes,
                    num_features=getattr(unwrapped, 'num_features', None), model_args=model_kwargs,
                    pretrained_cfg=cfg)

    def save(epoch: int, batch: int, part: Dict[str, float], is_best: bool) -> None:
        """Write checkpoints/last (and best) at a position; collective-free, main process only."""
        if not is_main:
            return
        saves[0] += 1
        weights = unwrapped.state_dict()
        ema_weights = ema.module.state_dict() if ema is not None else None
        position = dict(epoch=epoch, batch=batch, update=update, epochs=args.epochs,
                        batches_per_epoch=batches_per_epoch, completed_epochs=len(history))
        meta = dict(model=model_name, epoch=str(epoch), batch=str(batch), update=str(update))
        state = dict(
            optimizer=optimizer.state_dict(),
            scheduler=scheduler.state_dict() if scheduler is not None else None,
            scaler=accelerator.scaler.state_dict() if accelerator.scaler is not None else None,
            rng=_rng_state(), history=history, best=best, partial=part, batch_size=args.batch_size,
            **position)

        def write(tmp: Path) -> None:
            ckpt.save_weights(weights, tmp / ckpt.MODEL_FILE, meta)
            if kill_in_save == saves[0]:
                os.kill(os.getpid(), signal.SIGKILL)
            if ema_weights is not None:
                ckpt.save_weights(ema_weights, tmp / ckpt.EMA_FILE, meta)
            torch.save(state, tmp / ckpt.STATE_FILE)
            (tmp / ckpt.STATE_JSON).write_text(json.dumps(dict(
                model=model_name, **position, best=best,
                saved=datetime.now(timezone.utc).isoformat(timespec='seconds')), indent=2) + '\n')
            (tmp / ckpt.CONFIG_FILE).write_text(json.dumps(model_config(), indent=2, default=str) + '\n')

        ckpt.atomic_write_dir(out / 'checkpoints' / 'last', write)
        if is_best:
            def write_best(tmp: Path) -> None:
                ckpt.save_weights(weights, tmp / ckpt.MODEL_FILE, meta)
                if ema_weights is not None:
                    ckpt.save_weights(ema_weights, tmp / ckpt.EMA_FILE, meta)
                (tmp / ckpt.STATE_JSON).write_text(json.dumps(dict(
                    model=model_name, **position, metrics=history[-1] if history else None), indent=2) + '\n')
                (tmp / ckpt.CONFIG_FILE).write_text(json.dumps(model_config(), indent=2, default=str) + '\n')
            ckpt.atomic_write_dir(out / 'checkpoints' / 'best', write_best)

    def global_partial(loss_sum, correct, count, train_time) -> Dict[str, float]:
        t = torch.tensor([loss_sum, correct, count], dtype=torch.float64, device=device)
        t = accelerator.reduce(t, reduction='sum')
        return dict(loss_sum=float(t[0]), correct=float(t[1]), count=float(t[2]), train_time=train_time)

    @torch.no_grad()
    def evaluate(net: nn.Module) -> Dict[str, float]:
        net.eval()
        loss_sum = torch.zeros((), dtype=torch.float64, device=device)
        correct = torch.zeros((), dtype=torch.float64, device=device)
        correct5 = torch.zeros((), dtype=torch.float64, device=device)
        count = 0
        k = min(5, data.num_classes)
        for x, y in eval_loader:
            with accelerator.autocast():
                out_ = net(normalize(x))
            out_ = out_.float()
            loss = F.cross_entropy(out_, y, reduction='none')
            top = out_.topk(k, dim=-1).indices
            hit1 = (top[:, 0] == y)
            hit5 = (top == y[:, None]).any(-1)
            loss, hit1, hit5 = accelerator.gather_for_metrics((loss, hit1, hit5))
            loss_sum += loss.double().sum()
            correct += hit1.double().sum()
            correct5 += hit5.double().sum()
            count += len(loss)
        res = dict(loss=float(loss_sum) / count, acc=100. * float(correct) / count, count=count)
        if data.num_classes > 5:
            res['acc5'] = 100. * float(correct5) / count
        return res

    # -- the loop ------------------------------------------------------------------------------
    from tqdm.auto import tqdm
    samples_seen_local = 0
    status, message = 'finished', None
    t_run = time.perf_counter()
    try:
        for epoch in range(start_epoch, args.epochs):
            first = epoch == start_epoch
            b0 = start_batch if first else 0
            part = partial if (first and b0) else dict(loss_sum=0.0, correct=0.0, count=0.0, train_time=0.0)
            if sampler is not None:
                sampler.set_position(epoch, b0 * args.batch_size)
            elif hasattr(train_ds, 'set_epoch'):
                train_ds.set_epoch(epoch)
            accelerator.step = 0
            model.train()
            loss_sum = torch.tensor(part['loss_sum'] if is_main else 0., dtype=torch.float64, device=device)
            correct = torch.tensor(part['correct'] if is_main else 0., dtype=torch.float64, device=device)
            count = torch.tensor(part['count'] if is_main else 0., dtype=torch.float64, device=device)
            train_time = part['train_time']
            bar = tqdm(total=batches_per_epoch, initial=b0, desc=f'epoch {epoch + 1}/{args.epochs}', leave=False,
                       disable=(not is_main) or args.no_progress or None, dynamic_ncols=True, mininterval=1.0)
            show_log = is_main and args.log_interval > 0 and bar.disable
            t0 = time.perf_counter()
            batch = b0
            for x, y in train_loader:
                if batch >= batches_per_epoch:  # iterable datasets: whole updates only
                    break
                with accelerator.accumulate(model):
                    _seed_step(mix_seed(args.seed, 0xB47C, epoch, batch, rank))
                    x = normalize(x)
                    if eraser is not None:
                        x = eraser(x)
                    target = y
                    if mixup_fn is not None:
                        x, target = mixup_fn(x, y)
                    output = model(x)
                    loss = train_loss_fn(output.float(), target)
                    loss_value = loss.detach()
                    bad = (~torch.isfinite(loss_value)).float()
                    if world > 1:
                        bad = accelerator.reduce(bad, reduction='sum')
                    if bad.item() > 0:
                        raise Diverged(f'loss is {loss.item()} at epoch {epoch + 1}, batch {batch + 1}/'
                                       f'{batches_per_epoch} (update {update + 1}, lr {optimizer.param_groups[0]["lr"]:.3g})')
                    accelerator.backward(loss)
                    if accelerator.sync_gradients and args.clip_grad is not None:
                        if args.clip_mode == 'value':
                            accelerator.clip_grad_value_(model.parameters(), args.clip_grad)
                        else:
                            accelerator.clip_grad_norm_(model.parameters(), args.clip_grad)
                    optimizer.step()
                    optimizer.zero_grad(set_to_none=True)
                n = y.shape[0]
                samples_seen_local += n
                loss_sum += loss_value.double() * n
                correct += (output.detach().argmax(-1) == y).double().sum()
                count += n
                batch += 1
                bar.update(1)
                if accelerator.sync_gradients:
                    update += 1
                    if scheduler is not None:
                        scheduler.step_update(update)
                    if ema is not None:
                        ema.update(unwrapped, step=update)
                    if args.checkpoint_interval and update % args.checkpoint_interval == 0 and batch < batches_per_epoch:
                        g = global_partial(float(loss_sum), float(correct), float(count),
                                           train_time + time.perf_counter() - t0)
                        save(epoch, batch, g, is_best=False)
                    if show_log and update % args.log_interval == 0:
                        log(f'  epoch {epoch + 1} batch {batch}/{batches_per_epoch}: loss {loss_value.item():.4f}, '
                            f'lr {optimizer.param_groups[0]["lr"]:.3g}', flush=True)
                    elif not bar.disable and batch % 10 == 0:
                        bar.set_postfix(loss=f'{loss_value.item():.4f}', lr=f'{optimizer.param_groups[0]["lr"]:.2e}')
                    if kill_at is not None and update == kill_at:
                        os.kill(os.getpid(), signal.SIGKILL)
            bar.close()
            train_time += time.perf_counter() - t0
            g = global_partial(float(loss_sum), float(correct), float(count), train_time)
            t1 = time.perf_counter()
            ev = evaluate(model)
            row = dict(epoch=epoch + 1, update=update, train_loss=g['loss_sum'] / g['count'],
                       train_acc=100. * g['correct'] / g['count'], test_loss=ev['loss'], test_acc=ev['acc'])
            if 'acc5' in ev:
                row['test_acc5'] = ev['acc5']
            if ema is not None:
                ev_ema = evaluate(ema.module)
                row.update(ema_test_loss=ev_ema['loss'], ema_test_acc=ev_ema['acc'])
            eval_time = time.perf_counter() - t1
            row.update(lr=optimizer.param_groups[0]['lr'], throughput=g['count'] / max(train_time, 1e-9),
                       epoch_time=train_time + eval_time, train_time=train_time, eval_time=eval_time,
                       train_samples=int(g['count']), test_samples=ev['count'])
            history.append(row)
            is_best = row['test_acc'] > best['test_acc']
            if is_best:
                best = dict(test_acc=row['test_acc'], test_loss=row['test_loss'], epoch=epoch + 1)
            if is_main:
                with open(metrics_file, 'a') as f:
                    f.write(json.dumps(row) + '\n')
            save(epoch + 1, 0, dict(loss_sum=0.0, correct=0.0, count=0.0, train_time=0.0), is_best=is_best)
            if is_main:
                plot_curves(history, out / 'curves.png', title=f'{model_name} on {data.name}')
            log(f"epoch {epoch + 1}/{args.epochs}: train loss {row['train_loss']:.4f} acc {row['train_acc']:.2f}% | "
                f"test loss {row['test_loss']:.4f} acc {row['test_acc']:.2f}% | lr {row['lr']:.2e} | "
                f"{row['throughput']:.0f} img/s | {row['epoch_time']:.1f} s", flush=True)
    except Diverged as e:
        status = 'diverged'
        kept = ckpt.find_checkpoint(out)
        message = (f'Training diverged: {e}. Stopped without saving; the last good checkpoint is '
                   f'{kept if kept else "none (the run diverged before its first checkpoint)"}. Try a lower --lr, '
                   f'--clip-grad 1.0, a longer --warmup-epochs, or --mixed-precision no.')

    accelerator.wait_for_everyone()
    if args.rank_report:
        sd = unwrapped.state_dict()
        ckpt.write_json_atomic(out / f'rank{rank}.json', dict(
            rank=rank, num_processes=world, weights_sha256=_weights_hash(sd),
            per_process_batch_size=args.batch_size // world, local_train_samples=samples_seen_local,
            status=status))
    summary: Dict[str, Any] = {}
    if is_main:
        run = _read_json(run_file)
        run['status'] = status
        run['finished'] = datetime.now(timezone.utc).isoformat(timespec='seconds')
        if run.get('launches'):
            run['launches'][-1]['wall_time'] = time.perf_counter() - t_run
        run['wall_time'] = sum(la.get('wall_time', 0.0) for la in run.get('launches', []))
        run['epochs_completed'] = len(history)
        run['final'] = history[-1] if history else None
        run['best'] = best if best.get('epoch') else None
        if message:
            run['message'] = message
        ckpt.write_json_atomic(run_file, run)
        if history:
            plot_curves(history, out / 'curves.png', title=f'{model_name} on {data.name}')
        summary = run
    accelerator.wait_for_everyone()
    accelerator.end_training()
    if status == 'diverged':
        raise Diverged(message)
    return summary


def main(argv: Optional[Sequence[str]] = None) -> int:
    logging.basicConfig(level=logging.WARNING, format='%(message)s')
    try:
        args, provenance = parse_args(argv)
        train(args, provenance, argv)
    except (UsageError, DatasetError) as e:
        print(f'timm-minimal-train: error: {e}', file=sys.stderr, flush=True)
        return EXIT_BAD_INPUT
    except Diverged as e:
        print(f'timm-minimal-train: {e}', file=sys.stderr, flush=True)
        return EXIT_DIVERGED
    return 0


if __name__ == '__main__':
    sys.exit(main())
