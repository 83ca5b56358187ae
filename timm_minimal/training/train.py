"""Train a minimal transformer (or any timm model) with accelerate: MNIST, CIFAR-10, ImageNet, image folders.

    timm-minimal-train --model vit_minimal_sym_6x4 --dataset mnist --data-dir data --output runs/mnist_sym
    accelerate launch --num_processes 8 -m timm_minimal.training.train --model vit_minimal_sym_6x4 --dataset imagenet ...
    timm-minimal-train --resume runs/mnist_sym          # continue an interrupted run where it stopped

The same command runs on one CPU, one GPU, several GPUs or several nodes (launched by
``accelerate launch`` or ``torchrun``). ``--batch-size`` is the global batch: it is split between
the processes, so a run gives the same training whatever the number of devices.

Options come from three places, later ones winning: built-in defaults, the dataset's recipe
(``timm_minimal/recipes/<dataset>.yaml`` or ``--recipe``), the command line. A resumed run takes
its options from its own ``args.yaml`` and the command line.

Two data paths (``--data-path``): a dataset that fits (MNIST, CIFAR-10, small image folders) lives
on the training device as uint8 and is augmented there in whole batches
(``timm_minimal.training.device_data``); the others go through a ``DataLoader`` with timm's per-image
transforms. On a CUDA GPU the model is compiled (``torch.compile``) and runs in bf16 autocast by
default, AdamW is the fused kernel, and the step never waits for the host: losses, accuracies and
the non-finite check stay on the device until the loop synchronises anyway.

The run folder (``--output``) holds ``run.json``, ``args.yaml``, ``metrics.jsonl`` (one line per
epoch), ``curves.png`` and ``checkpoints/{last,best}`` (see ``timm_minimal.training.run_folder``).

Randomness is a function of the seed: the model is initialised from ``--seed``, data order and
augmentation of a sample depend on (seed, epoch, index), and the RNGs used by the training step
(dropout, random erasing noise, mixup) are reseeded at every step from (seed, epoch, step, rank). A
run resumed from a checkpoint therefore ends where the uninterrupted run would.

Exit status: 0 when training finished, 2 for a bad command line or dataset, 3 when the loss, the
gradients or the weights became NaN or infinite (the last good checkpoint is kept).
"""
import argparse
import logging
import os
import platform
import shlex
import sys
import time
from datetime import datetime, timezone
from importlib import resources
from pathlib import Path
from typing import Any, Dict, Optional, Sequence, Tuple

import numpy as np
import torch
import torch.nn as nn
import yaml

from . import checkpoint as ckpt
from .batch_augment import BatchAugment, BatchAugmentConfig
from .data import (
    DatasetError, ImageData, LoaderDataPath, TransformDataset, build_transforms, dataset_kind, load_dataset, mix_seed,
    subset,
)
from .device_data import DeviceDataPath, cache_file, dataset_bytes, device_budget_bytes, images_to_array
from .engine import (
    Diverged, FiniteGuard, Run, TrainHooks, TrainState, check_finite, epoch_row, evaluate, save_checkpoint,
    set_rng_state, train_one_epoch, weights_hash,
)
from .files import FolderBusy, describe_write_error, is_disk_full
from .run_folder import RUN_FORMAT, RunFolder

_logger = logging.getLogger('timm_minimal.training.train')

__all__ = ['build_parser', 'parse_args', 'train', 'main', 'Diverged', 'UsageError', 'TrainHooks', 'RECIPES',
           'load_recipe']

RECIPES = {'mnist': 'mnist', 'cifar10': 'cifar10', 'imagenet': 'imagenet', 'folder': 'default', 'timm': 'default'}
DATA_PATHS = ('auto', 'device', 'loader')
EXIT_BAD_INPUT = 2
EXIT_DIVERGED = 3
EXIT_WRITE_FAILED = 1
# A resumed run may change its schedule (epochs, learning rates, warm-up) and system options; these stay fixed
FIXED_ON_RESUME = ('opt', 'seed', 'grad_accum_steps', 'train_subset', 'model_kwargs', 'drop_path', 'drop')
SCHEDULE_OPTIONS = ('epochs', 'lr', 'sched', 'warmup_epochs', 'warmup_lr', 'min_lr')
MAX_WARMUP_FRACTION = 0.25  # the warm-up is capped at this part of the run
PLOT_INTERVAL = 30.0  # seconds between redraws of curves.png during a run (a plot costs more than a fast epoch)


class WriteFailed(RuntimeError):
    """The run could not write its folder (a full disk); the message names the cause and the checkpoint kept."""


class UsageError(ValueError):
    """A command line that cannot run; the message says what is wrong and what is allowed."""


# -- command line ----------------------------------------------------------------------------------

def _floats(n: Optional[int] = None):
    return dict(type=float, nargs=n or '+')


class _DefaultsFormatter(argparse.HelpFormatter):
    """Every option's help ends with its default (argparse's own formatter skips options without help)."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ''
        states_its_default = '%(default)' in text or (action.default is None and 'default' in text)
        if action.default is not argparse.SUPPRESS and action.option_strings and not states_its_default \
                and not isinstance(action, argparse._HelpAction):
            text += (' ' if text else '') + '(default: %(default)s)'
        return text


def build_parser(suppress: bool = False) -> argparse.ArgumentParser:
    """The command line. With ``suppress=True`` no defaults are set (to find the options given explicitly)."""
    kw = dict(argument_default=argparse.SUPPRESS) if suppress else {}
    p = argparse.ArgumentParser(
        prog='timm-minimal-train', description=__doc__.split('\n\n')[0],
        formatter_class=_DefaultsFormatter, **kw)

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

    g = p.add_argument_group('data path')
    g.add_argument('--data-path', choices=DATA_PATHS, **d('auto'),
                   help='device: the dataset lives on the training device as uint8 and is augmented there in batches '
                        '(MNIST, CIFAR-10, small image folders); loader: a DataLoader with per-image timm transforms '
                        '(ImageNet, streaming datasets, RandAugment, colour jitter); auto: device wherever the data '
                        'fit and the augmentation allows it')
    g.add_argument('--device-data-limit', type=float, **d(4.0), metavar='GB',
                   help='largest dataset (train + evaluation, uint8 at the input size) the device path holds; '
                        'on a GPU also at most half its free memory')

    g = p.add_argument_group('augmentation')
    g.add_argument('--no-aug', action='store_true', **d(False), help='no training augmentation')
    g.add_argument('--translate', type=float, **d(0.0), help='random shift, at most this fraction of the image size')
    g.add_argument('--rotate', type=float, **d(0.0), help='random rotation, at most this many degrees')
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
                   help="default: accelerate's configuration (accelerate launch --mixed_precision) if one is set, "
                        "else bf16 on a GPU that supports it and no elsewhere")
    g.add_argument('--compile', action=argparse.BooleanOptionalAction, **d(None),
                   help='torch.compile the model (default: on a CUDA GPU; a failure falls back to eager with a warning)')
    g.add_argument('--compile-mode', **d(None), help='torch.compile mode (default: reduce-overhead, i.e. CUDA graphs, '
                   'for one process on a GPU; torch\'s default otherwise)')
    g.add_argument('--cpu', action='store_true', **d(False), help='train on the CPU even if a GPU is present')
    for action in p._actions:  # argparse prints no default for an option without help text
        if action.help is None:
            action.help = '(default: %(default)s)'
    return p


def load_recipe(name_or_path: str) -> Dict[str, Any]:
    """A recipe by name (shipped in timm_minimal/recipes) or from a YAML file."""
    path = Path(name_or_path)
    if path.suffix in ('.yaml', '.yml') or path.is_file():
        if not path.is_file():
            raise UsageError(f'Recipe file {path} does not exist.')
        text = path.read_text()
    else:
        shipped = sorted(p.name[:-5] for p in resources.files('timm_minimal.training').joinpath('recipes').iterdir()
                         if p.name.endswith('.yaml'))
        if name_or_path not in shipped:
            raise UsageError(f"Unknown recipe '{name_or_path}'; choose one of {', '.join(shipped)} or a YAML file.")
        text = resources.files('timm_minimal.training').joinpath(f'recipes/{name_or_path}.yaml').read_text()
    return read_options_yaml(text, f'Recipe {name_or_path}')


def read_options_yaml(text: str, what: str) -> Dict[str, Any]:
    """A YAML mapping of option names to plain values (safe_load: no Python tags); UsageError otherwise."""
    try:
        cfg = yaml.safe_load(text) or {}
    except yaml.YAMLError as e:
        where = getattr(e, 'problem_mark', None)
        raise UsageError(f'{what} is not valid YAML' + (f' (line {where.line + 1})' if where else '') + ': '
                         + ' '.join(str(getattr(e, 'problem', None) or e).split())) from e
    if not isinstance(cfg, dict):
        raise UsageError(f'{what} must be a mapping of option names to values.')
    return cfg


def check_option_types(parser: argparse.ArgumentParser, values: Dict[str, Any], what: str) -> None:
    """Each value of a recipe or args.yaml must be what the option's command-line type gives."""
    for action in parser._actions:
        value = values.get(action.dest)
        if value is None or action.type not in (int, float):
            continue
        items = value if isinstance(value, list) and action.nargs not in (None, '?') else [value]
        for item in items:
            ok = isinstance(item, (int, float)) and not isinstance(item, bool)
            if not ok or (action.type is int and isinstance(item, float) and not item.is_integer()):
                raise UsageError(f'{what}: {action.dest} must be {"an integer" if action.type is int else "a number"}'
                                 f' (as --{action.dest.replace("_", "-")} takes), got {item!r}.')


def recipe_for(recipe: Optional[str], dataset: Optional[str]) -> str:
    """The recipe a run uses: ``--recipe`` if given, else its dataset's."""
    return recipe or RECIPES[dataset_kind(dataset)]


def print_help(parser: argparse.ArgumentParser, argv: Sequence[str]) -> None:
    """--help with the defaults that apply: the built-in ones, overridden by the recipe of --dataset if given."""
    explicit = vars(build_parser(suppress=True).parse_known_args([a for a in argv if a not in ('-h', '--help')])[0])
    if explicit.get('dataset') or explicit.get('recipe'):
        try:
            name = recipe_for(explicit.get('recipe'), explicit.get('dataset'))
            parser.set_defaults(**load_recipe(name))
            parser.epilog = f'Defaults shown are those of the {name} recipe (--dataset {explicit.get("dataset")}).'
        except (UsageError, DatasetError):
            pass
    else:
        parser.epilog = ('Defaults shown are the built-in ones; each dataset has a recipe that changes some '
                         '(timm-minimal-train --dataset mnist --help shows them).')
    parser.print_help()
    sys.exit(0)


def parse_args(argv: Optional[Sequence[str]] = None) -> Tuple[argparse.Namespace, Dict[str, Any]]:
    """Resolve the options: defaults < recipe < the resumed run's args.yaml < command line.

    Returns the options and a dict describing where they came from (recipe name and values).
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    if '-h' in argv or '--help' in argv:
        print_help(parser, argv)
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
            saved = read_options_yaml(args_file.read_text(), str(args_file))
            check_option_types(parser, saved, str(args_file))
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
    recipe_name = recipe_for(explicit.get('recipe', saved.get('recipe')), dataset)
    recipe = load_recipe(recipe_name)
    unknown = sorted(set(recipe) - dests)
    if unknown:
        raise UsageError(f'Recipe {recipe_name} has unknown keys {unknown}; keys are option names such as '
                         f'lr, batch_size, epochs.')
    check_option_types(parser, recipe, f'Recipe {recipe_name}')
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
    from .. import __version__
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


def _device_name(device: torch.device) -> str:
    if device.type == 'cuda':
        return torch.cuda.get_device_name(device)
    return f'{platform.processor() or platform.machine()}, {os.cpu_count()} cores'


def _process_elapsed() -> float:
    """Seconds since this process started (imports, data loading and compilation included)."""
    import psutil
    return time.time() - psutil.Process().create_time()


# -- set-up ----------------------------------------------------------------------------------------

def check_numbers(args: argparse.Namespace) -> None:
    """Options that must be positive (or non-negative), with what is allowed."""
    for name, low in (('epochs', 1), ('batch_size', 1), ('grad_accum_steps', 1), ('num_workers', 0),
                      ('checkpoint_interval', 0), ('log_interval', 0)):
        value = getattr(args, name)
        if value < low:
            raise UsageError(f'--{name.replace("_", "-")} must be at least {low}, got {value}.')
    for name in ('eval_batch_size', 'train_subset', 'eval_subset'):
        value = getattr(args, name)
        if value is not None and value < 1:
            raise UsageError(f'--{name.replace("_", "-")} must be at least 1, got {value}.')
    if args.device_data_limit <= 0:
        raise UsageError(f'--device-data-limit must be a positive number of GB, got {args.device_data_limit}.')


def make_accelerator(args: argparse.Namespace):
    """accelerate's Accelerator: CPU, one or several GPUs; bf16 autocast by default where the GPU supports it."""
    from accelerate import Accelerator
    has_gpu = torch.cuda.is_available() or (hasattr(torch, 'xpu') and torch.xpu.is_available())
    # several processes without a GPU (torchrun, accelerate launch on a CPU machine): accelerate only
    # sets up CPU data parallelism (gloo) when told to use the CPU
    multi_cpu = not has_gpu and int(os.environ.get('WORLD_SIZE', '1')) > 1
    precision = args.mixed_precision
    if precision is None and 'ACCELERATE_MIXED_PRECISION' not in os.environ:
        on_cuda = torch.cuda.is_available() and not args.cpu
        precision = 'bf16' if on_cuda and torch.cuda.is_bf16_supported() else 'no'
    return Accelerator(mixed_precision=precision, gradient_accumulation_steps=args.grad_accum_steps,
                       cpu=args.cpu or multi_cpu, step_scheduler_with_optimizer=False)


def prepare_folder(args: argparse.Namespace, accelerator: Any) -> Tuple[RunFolder, Optional[Path]]:
    """The run folder (named by the main process when --output is not given) and the checkpoint to resume."""
    if args.output is None:
        kind = dataset_kind(args.dataset)
        stamp = datetime.now().strftime('%Y%m%d-%H%M%S')
        ds_short = Path(args.dataset).name if kind == 'folder' else args.dataset.replace('/', '_')
        name = [str(Path('runs') / f'{ds_short}-{args.model.replace(".", "_")}-{stamp}')]
        if accelerator.num_processes > 1:  # one folder for all processes: the main process's time stamp
            from accelerate.utils import broadcast_object_list
            broadcast_object_list(name)
        args.output = name[0]
    folder = RunFolder(args.output)
    resuming = args.resume is not None
    if not resuming and not folder.is_empty():
        raise UsageError(f'Run folder {folder} already exists and is not empty; pass --resume to continue that run, '
                         f'or choose another --output.')
    accelerator.wait_for_everyone()
    if accelerator.is_main_process:
        try:
            folder.lock()  # released when this process ends, however it ends
        except FolderBusy as e:
            raise UsageError(f'{e}: one run folder takes one training run at a time; wait for it to end, or '
                             f'choose another --output.') from e
        folder.prepare()
    last_dir = folder.find_checkpoint() if resuming else None
    accelerator.wait_for_everyone()
    if resuming and last_dir is None:
        accelerator.print(f'No checkpoint in {folder} yet: starting the run from the beginning.')
    return folder, last_dir


def build_model(args: argparse.Namespace, data: ImageData) -> Tuple[nn.Module, str, Dict[str, Any]]:
    """The timm model (seeded), its full name with tag, and the model arguments given."""
    import timm
    from ..models import vit_minimal  # noqa: F401  (registers the architectures)
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
    except Exception as e:  # noqa: BLE001 (wrong model arguments, unreadable or mismatched weights)
        raise UsageError(f'Cannot build {model_name} (model arguments {model_kwargs}'
                         f'{", pretrained" if args.pretrained or args.pretrained_path else ""}): {e}') from e
    return model, model_name, model_kwargs


def model_config(model: nn.Module, model_name: str, model_kwargs: Dict[str, Any], data: ImageData,
                 data_cfg: Dict[str, Any]) -> Dict[str, Any]:
    """A checkpoint's config.json: timm's Hub layout (architecture, num_classes, model_args, pretrained_cfg)."""
    from ..models.vit_minimal import describe_pretrained_cfg
    cfg = describe_pretrained_cfg(getattr(model, 'pretrained_cfg', None) or {}, input_size=data_cfg['input_size'],
                                  mean=data_cfg['mean'], std=data_cfg['std'])
    cfg.update(num_classes=data.num_classes, label_names=data.classes)  # timm reads these from here too
    return dict(architecture=split_model_name(model_name)[0], num_classes=data.num_classes,
                num_features=getattr(model, 'num_features', None), model_args=model_kwargs, pretrained_cfg=cfg)


# -- data paths ------------------------------------------------------------------------------------

def _batch_augment_config(args: argparse.Namespace) -> BatchAugmentConfig:
    if args.no_aug:
        return BatchAugmentConfig()
    try:
        return BatchAugmentConfig(
            scale=tuple(args.scale or (0.08, 1.0)), ratio=tuple(args.ratio or (3 / 4, 4 / 3)),
            translate=args.translate, rotate=args.rotate, hflip=args.hflip, vflip=args.vflip, reprob=args.reprob,
            remode=args.remode)
    except ValueError as e:
        raise UsageError(str(e)) from e


def device_path_blockers(args: argparse.Namespace, data: ImageData, input_size: Sequence[int],
                         device: torch.device) -> list:
    """Why the device data path cannot take this run (empty when it can)."""
    from .batch_augment import ERASE_MODES
    reasons = []
    if isinstance(data.train, torch.utils.data.IterableDataset):
        reasons.append('the dataset is streamed (an iterable dataset)')
    for opt, value in (('aa', args.aa), ('color-jitter', args.color_jitter)):
        if value and not args.no_aug:
            reasons.append(f'--{opt} {value} is a per-image transform')
    if args.reprob > 0 and (args.remode not in ERASE_MODES or args.recount != 1):
        reasons.append(f'random erasing with --remode {args.remode} --recount {args.recount} (the device path '
                       f'erases one rectangle, --remode {" or ".join(ERASE_MODES)})')
    if not reasons:
        size = dataset_bytes(len(data.train) + len(data.eval), input_size)
        budget = device_budget_bytes(device, args.device_data_limit)
        if size > budget:
            reasons.append(f'the data need {size / 2 ** 30:.2f} GiB at the input size, more than the device path '
                           f'holds ({budget / 2 ** 30:.2f} GiB: --device-data-limit'
                           f'{", at most half the free GPU memory" if device.type == "cuda" else ""})')
    return reasons


def _device_arrays(args, data: ImageData, split: str, indices: np.ndarray, eval_tf, data_cfg, img_mode: str):
    from .data import default_cache_dir
    ds = data.train if split == 'train' else data.eval
    cache, content = None, data.fingerprints.get('train' if split == 'train' else 'eval')
    if content:  # only where the content is known: a cache is never read for other images
        cache_dir = Path(args.cache_dir) if args.cache_dir else default_cache_dir()
        cache = cache_file(cache_dir, content, split, data_cfg['input_size'], img_mode, eval_tf)
    images, labels = images_to_array(ds, eval_tf, data_cfg['input_size'], img_mode, cache)
    return images[indices], labels[indices]


def build_data_path(args: argparse.Namespace, data: ImageData, data_cfg: Dict[str, Any], accelerator: Any,
                    batches_per_epoch: int) -> Any:
    """The device data path where it can run (``--data-path auto``), else the loader path."""
    from .data import subset_indices
    device, world, rank = accelerator.device, accelerator.num_processes, accelerator.process_index
    input_size = data_cfg['input_size']
    img_mode = 'L' if input_size[0] == 1 else 'RGB'
    blockers = device_path_blockers(args, data, input_size, device)
    if args.data_path == 'device' and blockers:
        raise UsageError('--data-path device cannot take this run: ' + '; '.join(blockers) + '. Use --data-path loader.')
    _, eval_tf = build_transforms(input_size, data_cfg['mean'], data_cfg['std'],
                                  interpolation=data_cfg['interpolation'], crop_pct=data_cfg['crop_pct'])
    eval_bs = args.eval_batch_size or 2 * args.batch_size
    common = dict(device=device, seed=args.seed, batch_size=args.batch_size, batches_per_epoch=batches_per_epoch,
                  eval_batch_size=eval_bs, world=world, rank=rank)
    if args.data_path == 'loader' or blockers:
        if args.data_path == 'auto':
            accelerator.print('Data path: loader (' + '; '.join(blockers) + ').')
        return _loader_path(args, data, data_cfg, img_mode, eval_tf, common)
    with accelerator.main_process_first():
        train = _device_arrays(args, data, 'train', subset_indices(len(data.train), args.train_subset,
                                                                    mix_seed(args.seed, 1)), eval_tf, data_cfg, img_mode)
        evaluation = _device_arrays(args, data, 'eval', subset_indices(len(data.eval), args.eval_subset,
                                                                        mix_seed(args.seed, 2)), eval_tf, data_cfg, img_mode)
    return DeviceDataPath(train, evaluation, _batch_augment_config(args), data_cfg['mean'], data_cfg['std'], **common)


def _loader_path(args, data: ImageData, data_cfg, img_mode: str, eval_tf, common: Dict[str, Any]) -> LoaderDataPath:
    from timm.data.random_erasing import RandomErasing
    device = common['device']
    train_tf, _ = build_transforms(
        data_cfg['input_size'], data_cfg['mean'], data_cfg['std'], interpolation=data_cfg['interpolation'],
        crop_pct=data_cfg['crop_pct'], no_aug=args.no_aug, scale=args.scale, ratio=args.ratio, hflip=args.hflip,
        vflip=args.vflip, color_jitter=args.color_jitter, auto_augment=args.aa,
        train_interpolation=args.train_interpolation, translate=args.translate, rotate=args.rotate)
    train_base = subset(data.train, args.train_subset, mix_seed(args.seed, 1))
    eval_base = subset(data.eval, args.eval_subset, mix_seed(args.seed, 2))
    if isinstance(train_base, torch.utils.data.IterableDataset):  # streaming: the dataset applies the transform
        train_base.transform = _ConvertThen(img_mode, train_tf)
        eval_base.transform = _ConvertThen(img_mode, eval_tf)
        train_ds, eval_ds = train_base, eval_base
    else:
        train_ds = TransformDataset(train_base, train_tf, img_mode, seed=args.seed)
        eval_ds = TransformDataset(eval_base, eval_tf, img_mode, seed=None)
    normalize = BatchAugment(BatchAugmentConfig(), data_cfg['mean'], data_cfg['std'], device).normalize
    eraser = None
    if args.reprob > 0 and not args.no_aug:
        eraser = RandomErasing(args.reprob, mode=args.remode, max_count=args.recount, device=device)
    return LoaderDataPath(train_ds, eval_ds, normalize, eraser, num_workers=args.num_workers, **common)


def count_batches(args: argparse.Namespace, data: ImageData) -> Tuple[int, int, int]:
    """Training samples used, optimizer updates per epoch and batches per epoch (whole global batches only)."""
    n_train = len(data.train) if args.train_subset is None else min(args.train_subset, len(data.train))
    updates = n_train // (args.batch_size * args.grad_accum_steps)
    if updates < 1:
        raise UsageError(f'{n_train} training samples make no full batch of {args.batch_size} x '
                         f'{args.grad_accum_steps} accumulation steps; lower --batch-size.')
    return n_train, updates, updates * args.grad_accum_steps


# -- optimisation ----------------------------------------------------------------------------------

def build_optimization(args: argparse.Namespace, model: nn.Module, updates_per_epoch: int, device: torch.device):
    """timm's optimizer (the fused kernel for Adam/AdamW on CUDA) and scheduler, stepped per update."""
    from timm.optim import create_optimizer_v2
    from timm.scheduler import create_scheduler_v2
    extra: Dict[str, Any] = {}
    if args.opt_eps is not None:
        extra['eps'] = args.opt_eps
    if args.opt_betas:
        extra['betas'] = tuple(args.opt_betas)
    if device.type == 'cuda' and args.opt.lower() in ('adam', 'adamw'):
        extra['fused'] = True
    try:
        optimizer = create_optimizer_v2(model, opt=args.opt, lr=args.lr, weight_decay=args.weight_decay,
                                        momentum=args.momentum, **extra)
    except (AssertionError, ValueError, TypeError) as e:
        raise UsageError(f"Cannot build the optimizer --opt {args.opt}: {e}") from e
    scheduler = None
    if args.sched and args.sched != 'none':
        warmup = min(args.warmup_epochs, MAX_WARMUP_FRACTION * args.epochs)
        if warmup < args.warmup_epochs:
            print(f'--warmup-epochs {args.warmup_epochs:g} is more than {MAX_WARMUP_FRACTION:.0%} of the run\'s '
                  f'{args.epochs} epochs: warming up for {warmup:g} epochs.', flush=True)
        scheduler, _ = create_scheduler_v2(
            optimizer, sched=args.sched, num_epochs=args.epochs, warmup_epochs=warmup,
            warmup_lr=args.warmup_lr, min_lr=args.min_lr, step_on_epochs=False, updates_per_epoch=updates_per_epoch)
    return optimizer, scheduler


def build_loss(args: argparse.Namespace, num_classes: int, per_process_batch: int):
    """The training loss and timm's batch mixup/cutmix (None when off)."""
    from timm.data import Mixup
    from timm.loss import LabelSmoothingCrossEntropy, SoftTargetCrossEntropy
    if args.mixup > 0 or args.cutmix > 0 or args.cutmix_minmax is not None:
        if per_process_batch % 2:
            raise UsageError(f'mixup/cutmix needs an even batch per process; got {per_process_batch}.')
        mixup = Mixup(mixup_alpha=args.mixup, cutmix_alpha=args.cutmix, cutmix_minmax=args.cutmix_minmax,
                      prob=args.mixup_prob, switch_prob=args.mixup_switch_prob, mode=args.mixup_mode,
                      label_smoothing=args.smoothing, num_classes=num_classes)
        return SoftTargetCrossEntropy(), mixup
    if args.smoothing > 0:
        return LabelSmoothingCrossEntropy(smoothing=args.smoothing), None
    return nn.CrossEntropyLoss(), None


def compile_mode(args: argparse.Namespace, accelerator: Any) -> Optional[str]:
    """``--compile-mode``, else CUDA graphs (``reduce-overhead``) for one process on a GPU: the step of these
    small models is launch-bound, and replaying it as a graph removes the launches."""
    if args.compile_mode:
        return args.compile_mode
    if accelerator.device.type == 'cuda' and accelerator.num_processes == 1:
        return 'reduce-overhead'
    return None


# -- resume and the run record ---------------------------------------------------------------------

def restore(run: Run, state: TrainState, last_dir: Path) -> None:
    """Load a checkpoint's weights, optimizer, scheduler, scaler, EMA, RNG states and position."""
    args, acc = run.args, run.accelerator
    saved = run.folder.read_args()  # the options of the launch before this one
    for key in FIXED_ON_RESUME:
        if key in saved and saved[key] != getattr(args, key):
            raise UsageError(f'--{key.replace("_", "-")} cannot change when resuming (the run used {saved[key]}, the '
                             f'command line asks for {getattr(args, key)}): the checkpoint\'s optimizer state and data '
                             f'order belong to it. Start a new run, e.g. with --pretrained-path '
                             f'{last_dir / ckpt.MODEL_FILE} to begin from these weights.')
    try:
        training_state = torch.load(last_dir / ckpt.STATE_FILE, map_location='cpu', weights_only=True)
        weights = ckpt.load_weights(last_dir / ckpt.MODEL_FILE)
    except Exception as e:  # noqa: BLE001 (a truncated or foreign file)
        raise UsageError(f'Cannot resume from {last_dir}: its checkpoint files cannot be read ({type(e).__name__}: '
                         f'{str(e).strip()[:200]}).') from e
    _check_resumable(last_dir, training_state, weights)
    if training_state.get('batch_size') not in (None, args.batch_size):
        raise UsageError(f"The run was trained with --batch-size {training_state['batch_size']}; resume it with the same.")
    try:
        run.unwrapped.load_state_dict(weights, strict=True)
        run.optimizer.load_state_dict(training_state['optimizer'])
    except (RuntimeError, ValueError, KeyError) as e:
        raise UsageError(f'Cannot resume from {last_dir}: its weights do not fit {run.model_name} (the model its '
                         f'args.yaml names): {" ".join(str(e).split())[:300]}') from e
    _apply_changed_options(run, saved)
    changed = [k for k in SCHEDULE_OPTIONS if k in saved and saved[k] != getattr(args, k)]
    if training_state.get('epochs') not in (None, args.epochs) and 'epochs' not in changed:
        changed.append('epochs')
    if run.scheduler is not None and training_state.get('scheduler') is not None:
        if not changed:
            run.scheduler.load_state_dict(training_state['scheduler'])
        else:
            acc.print('Resuming with ' + ', '.join(f'--{k.replace("_", "-")} {getattr(args, k)}' for k in changed) +
                      ': the learning-rate schedule follows the new values from the current update on.')
    if acc.scaler is not None and training_state.get('scaler') is not None:
        acc.scaler.load_state_dict(training_state['scaler'])
    if run.ema is not None:
        ema_file = last_dir / ckpt.EMA_FILE
        run.ema.module.load_state_dict(ckpt.load_weights(ema_file) if ema_file.is_file() else run.unwrapped.state_dict())
    set_rng_state(training_state['rng'])
    state.load_state_dict(training_state)
    acc.print(f'Resumed {run.folder} from {last_dir} at epoch {state.epoch + 1}, batch {state.batch}/'
              f'{run.batches_per_epoch} (optimizer update {state.update}).')


RESUME_KEYS = ('optimizer', 'rng', 'epoch', 'batch', 'update')


def _check_resumable(last_dir: Path, training_state: Any, weights: Dict[str, torch.Tensor]) -> None:
    """Refuse a training state of another structure and weights that are not finite (a run never resumes from them)."""
    missing = [k for k in RESUME_KEYS if not isinstance(training_state, dict) or k not in training_state]
    if missing:
        raise UsageError(f'Cannot resume from {last_dir}: {ckpt.STATE_FILE} is not a timm-minimal training state '
                         f'(missing {", ".join(missing)}).')
    bad = [k for k, v in weights.items() if v.is_floating_point() and not bool(torch.isfinite(v).all())]
    if bad:
        raise UsageError(f'Cannot resume from {last_dir}: its weights are not finite ({", ".join(bad[:3])}'
                         f'{", ..." if len(bad) > 3 else ""}); start a new run.')


def _apply_changed_options(run: Run, saved: Dict[str, Any]) -> None:
    """Options a resumed run may change that live in the optimizer's param groups (the loaded state holds the old)."""
    args = run.args
    for group in run.optimizer.param_groups:
        if 'weight_decay' in saved and saved['weight_decay'] != args.weight_decay and group.get('weight_decay'):
            group['weight_decay'] = args.weight_decay  # groups without decay (norms, biases) keep 0
        if run.scheduler is None:
            group['lr'] = args.lr


def write_run_record(run: Run, state: TrainState, info: Dict[str, Any], last_dir: Optional[Path]) -> None:
    """args.yaml, run.json (a new record, or a new launch of a resumed one) and the metrics kept so far."""
    args, acc, folder = run.args, run.accelerator, run.folder
    saved_args = {k: v for k, v in vars(args).items() if k != 'resume'}
    saved_args['output'] = str(folder)
    folder.write_args(saved_args)
    command = 'timm-minimal-train ' + ' '.join(shlex.quote(a) for a in info['argv'])
    launch = dict(command=command, started=datetime.now(timezone.utc).isoformat(timespec='seconds'),
                  num_processes=run.world, device=str(run.device), device_name=_device_name(run.device),
                  mixed_precision=acc.mixed_precision,
                  compiled=run.compiled, compile_mode=compile_mode(args, acc) if run.compiled else None,
                  data_path=run.data.describe(), torch_threads=torch.get_num_threads(),
                  num_workers=args.num_workers, resumed_from=str(last_dir) if last_dir else None)
    record = folder.read_run() if args.resume is not None else {}
    if record:
        record.setdefault('launches', []).append(launch)
        record['status'] = 'running'
    else:
        record = dict(
            format=RUN_FORMAT, status='running', command=command, model=run.model_name,
            architecture=split_model_name(run.model_name)[0], model_kwargs=info['model_kwargs'],
            num_params=info['num_params'], num_classes=run.model_config['num_classes'], dataset=info['dataset'],
            data_config={k: (list(v) if isinstance(v, tuple) else v) for k, v in info['data_cfg'].items()},
            recipe=info['provenance'].get('recipe', args.recipe), recipe_values=info['provenance'].get('recipe_values'),
            args=saved_args,
            distributed=dict(num_processes=run.world, global_batch_size=args.batch_size,
                             per_process_batch_size=args.batch_size // run.world,
                             grad_accum_steps=args.grad_accum_steps,
                             effective_batch_size=args.batch_size * args.grad_accum_steps),
            updates_per_epoch=run.batches_per_epoch // args.grad_accum_steps,
            train_samples_per_epoch=run.batches_per_epoch * args.batch_size,
            units=dict(accuracy='percent', loss='cross-entropy (nats)', throughput='training images per second',
                       time='seconds', elapsed='seconds since the launch\'s process started'),
            versions=_versions(), launches=[launch])
    folder.write_run(record)
    folder.write_metrics(state.history)


def finish_run(run: Run, state: TrainState, status: str, message: Optional[str], launch_time: float) -> Dict[str, Any]:
    """Close run.json (status, wall time, final and best metrics) and the curves; main process only."""
    folder = run.folder
    record = folder.read_run()
    record.update(status=status, finished=datetime.now(timezone.utc).isoformat(timespec='seconds'))
    if record.get('launches'):
        record['launches'][-1]['wall_time'] = launch_time
    record['wall_time'] = sum(la.get('wall_time', 0.0) for la in record.get('launches', []))
    record.update(epochs_completed=len(state.history), final=state.history[-1] if state.history else None,
                  best=state.best if state.best.get('epoch') else None)
    if message:
        record['message'] = message
    folder.write_run(record)
    folder.plot_curves(state.history, title=f'{run.model_name} on {record.get("dataset", {}).get("name")}')
    return record


def _rank_report(run: Run, status: str, samples: int) -> None:
    ckpt.write_json_atomic(run.folder.path / f'rank{run.rank}.json', dict(
        rank=run.rank, num_processes=run.world, weights_sha256=weights_hash(run.unwrapped.state_dict()),
        per_process_batch_size=run.args.batch_size // run.world, local_train_samples=samples, status=status))


# -- the run ---------------------------------------------------------------------------------------

def setup(args: argparse.Namespace, provenance: Dict[str, Any], argv: Sequence[str],
          hooks: TrainHooks) -> Tuple[Run, TrainState, Dict[str, Any], Optional[Path]]:
    """Everything a run needs: accelerator, run folder, data, model, optimizer, data path, state."""
    from timm.utils import ModelEmaV3
    check_numbers(args)
    accelerator = make_accelerator(args)
    world = accelerator.num_processes
    if args.batch_size % world:
        raise UsageError(f'--batch-size {args.batch_size} must be a multiple of the number of processes ({world}).')
    folder, last_dir = prepare_folder(args, accelerator)
    try:
        with accelerator.main_process_first():
            data = load_dataset(
                args.dataset, args.data_dir, download=not args.no_download, cache_dir=args.cache_dir,
                train_split=args.train_split, eval_split=args.val_split, num_classes=args.num_classes, seed=args.seed,
                batch_size=args.batch_size // world)
        model, model_name, model_kwargs = build_model(args, data)
        data_cfg = _data_config(model, args)
        n_train, updates_per_epoch, batches_per_epoch = count_batches(args, data)
        data_path = build_data_path(args, data, data_cfg, accelerator, batches_per_epoch)
        optimizer, scheduler = build_optimization(args, model, updates_per_epoch, accelerator.device)
        loss_fn, mixup_fn = build_loss(args, data.num_classes, args.batch_size // world)
        prepared, optimizer = accelerator.prepare(model, optimizer)
        unwrapped = accelerator.unwrap_model(prepared)
        compiled = args.compile if args.compile is not None else accelerator.device.type == 'cuda'
        train_model = torch.compile(prepared, mode=compile_mode(args, accelerator), dynamic=False) if compiled else prepared
        ema = ModelEmaV3(unwrapped, decay=args.model_ema_decay, use_warmup=args.model_ema_warmup) if args.model_ema else None
        run = Run(args=args, accelerator=accelerator, model=train_model, unwrapped=unwrapped, optimizer=optimizer,
                  scheduler=scheduler, ema=ema, data=data_path, loss_fn=loss_fn, mixup_fn=mixup_fn, folder=folder,
                  model_name=model_name, model_config=model_config(unwrapped, model_name, model_kwargs, data, data_cfg),
                  batches_per_epoch=batches_per_epoch, hooks=hooks, compiled=compiled)
        state = TrainState()
        if last_dir is not None:
            restore(run, state, last_dir)
        if scheduler is not None:
            scheduler.step_update(state.update)
        run.guard = FiniteGuard(accelerator.device, state.epoch * batches_per_epoch + state.batch)
        info = dict(argv=list(argv), model_kwargs=model_kwargs, data_cfg=data_cfg, provenance=provenance,
                    num_params=sum(p.numel() for p in unwrapped.parameters()),
                    dataset=dict(data.describe(), train_samples_used=n_train,
                                 eval_samples_used=len(data.eval) if args.eval_subset is None
                                 else min(args.eval_subset, _len_or_none(data.eval) or args.eval_subset)))
        accelerator.print(
            f'{model_name}: {info["num_params"]:,} parameters; {data.name}: {n_train:,} train / '
            f'{info["dataset"]["eval_samples_used"]:,} {data.eval_split} images, {data.num_classes} classes; {world} '
            f'process(es) on {accelerator.device}, batch {args.batch_size} ({args.batch_size // world} per process) x '
            f'{args.grad_accum_steps}, {updates_per_epoch} updates/epoch, {data_path.name} data path, mixed precision '
            f'{accelerator.mixed_precision}, {"compiled" if compiled else "eager"}.')
    except BaseException:
        folder.unlock()
        raise
    return run, state, info, last_dir


def train(args: argparse.Namespace, provenance: Optional[Dict[str, Any]] = None,
          argv: Optional[Sequence[str]] = None, hooks: Optional[TrainHooks] = None) -> Dict[str, Any]:
    """Run (or resume) one training run; returns the run summary written to run.json."""
    t_launch = time.perf_counter()
    argv = list(sys.argv[1:] if argv is None else argv)
    run, state, info, last_dir = setup(args, provenance or {}, argv, hooks or TrainHooks())
    try:
        return _train(run, state, info, last_dir, args, t_launch)
    finally:
        run.folder.unlock()


def _train(run: Run, state: TrainState, info: Dict[str, Any], last_dir: Optional[Path], args: argparse.Namespace,
           t_launch: float) -> Dict[str, Any]:
    """The epochs of a set-up run, then its record; raises ``Diverged`` or ``WriteFailed`` when it stopped early."""
    acc = run.accelerator
    if run.is_main:
        write_run_record(run, state, info, last_dir)
    status, message, local_samples, last_plot = 'finished', None, 0, time.perf_counter()
    try:
        for epoch in range(state.epoch, args.epochs):
            local_samples += (run.batches_per_epoch - state.batch) * (args.batch_size // run.world)
            part = train_one_epoch(run, state, epoch)
            check_finite(run, state)
            t_eval = time.perf_counter()
            ev = evaluate(run, run.unwrapped)
            ema_ev = evaluate(run, run.ema.module) if run.ema is not None else None
            row = epoch_row(run, state, epoch, part, ev, ema_ev, time.perf_counter() - t_eval, _process_elapsed())
            is_best = state.end_epoch(row)
            save_checkpoint(run, state, is_best=is_best)  # before the metrics line: a logged epoch is a saved one
            if run.is_main:
                run.folder.append_metrics(row)
                if time.perf_counter() - last_plot > PLOT_INTERVAL:  # and once more at the end
                    run.folder.plot_curves(state.history, title=f'{run.model_name} on {info["dataset"]["name"]}')
                    last_plot = time.perf_counter()
            acc.print(f"epoch {epoch + 1}/{args.epochs}: train loss {row['train_loss']:.4f} acc {row['train_acc']:.2f}% | "
                      f"test loss {row['test_loss']:.4f} acc {row['test_acc']:.2f}% | lr {row['lr']:.2e} | "
                      f"{row['throughput']:.0f} img/s | {row['epoch_time']:.1f} s", flush=True)
    except Diverged as e:
        status = 'diverged'
        kept = run.folder.find_checkpoint()
        message = (f'Training diverged: {e}. Stopped without saving; the last good checkpoint is '
                   f'{kept if kept else "none (the run diverged before its first checkpoint)"}. Try a lower --lr, '
                   f'--clip-grad 1.0, a longer --warmup-epochs, or --mixed-precision no.')
    except Exception as e:  # noqa: BLE001 (safetensors and torch.save report a full disk in their own types)
        if not is_disk_full(e, run.folder.path):
            raise
        ckpt.clean_stale_temp(run.folder.checkpoints)
        kept = run.folder.find_checkpoint()
        status, message = 'failed', (f'{describe_write_error(e, run.folder.path)}; the last checkpoint is '
                                     f'{kept or "none"}, and --resume {run.folder} continues from it.')
    acc.wait_for_everyone()
    if args.rank_report:
        _rank_report(run, status, local_samples)
    summary = _finish(run, state, status, message, time.perf_counter() - t_launch) if run.is_main else {}
    acc.wait_for_everyone()
    acc.end_training()
    if status == 'diverged':
        raise Diverged(message)
    if status == 'failed':
        raise WriteFailed(message)
    return summary


def _finish(run: Run, state: TrainState, status: str, message: Optional[str], launch_time: float) -> Dict[str, Any]:
    """``finish_run``; on a full disk, as much of it as fits (the run's status above all)."""
    try:
        return finish_run(run, state, status, message, launch_time)
    except Exception as e:  # noqa: BLE001
        if status == 'finished' or not is_disk_full(e, run.folder.path):
            raise
        return {}


def main(argv: Optional[Sequence[str]] = None, hooks: Optional[TrainHooks] = None) -> int:
    logging.basicConfig(level=logging.WARNING, format='%(message)s')
    try:
        args, provenance = parse_args(argv)
        train(args, provenance, argv, hooks)
    except (UsageError, DatasetError) as e:
        print(f'timm-minimal-train: error: {e}', file=sys.stderr, flush=True)
        return EXIT_BAD_INPUT
    except Diverged as e:
        print(f'timm-minimal-train: {e}', file=sys.stderr, flush=True)
        return EXIT_DIVERGED
    except WriteFailed as e:
        print(f'timm-minimal-train: error: {e}', file=sys.stderr, flush=True)
        return EXIT_WRITE_FAILED
    return 0


if __name__ == '__main__':
    sys.exit(main())
