"""The trainer's command line: its options, the recipes they default to, and the checks of their values.

Options come from three places, later ones winning: built-in defaults, the dataset's recipe
(``timm_minimal/training/recipes/<recipe>.yaml`` or ``--recipe``), the command line; a resumed run adds its
own ``args.yaml`` below the command line. A recipe or ``args.yaml`` is plain YAML (``safe_load``) whose keys
are option names and whose values have the option's type.
"""
import argparse
import sys
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import yaml

from ..cli import OneLineParser, UsageError, number
from ..models.datasets import MIN_CROP_PCT, dataset_for_kind
from ..models.paper import is_minimal
from .data.names import DatasetError, dataset_kind
from .run.folder import RunFolder
from .trackers import check_trackers, tracker_name

# On a 2-core CPU a cold torch.compile of std_mlp_6x1 cost 27 s and made its trainer epochs 1.11x faster (the
# median of three alternated runs, benchmarks/cpu_modes_trainer.md; 1.03x and 1.21x in single runs), which repays
# the compilation after about 180,000 training images; the default asks about three times that, so the tests, the
# demo and short runs stay eager (cpu.policy.default_compile).
CPU_COMPILE_MIN_IMAGES = 500_000

__all__ = ['UsageError', 'OneLineParser', 'DATA_PATHS', 'Provenance', 'build_parser', 'parse_args', 'load_recipe',
           'read_options_yaml', 'check_option_types', 'option_groups', 'recipe_for', 'help_parser', 'training_device',
           'check_numbers', 'check_model_kwargs']

DATA_PATHS = ('auto', 'device', 'loader')
DESCRIPTION = ('Train a minimal transformer (or any timm model) with accelerate, on one CPU, one GPU or several: MNIST, '
               'CIFAR-10, ImageNet, an image folder or a timm dataset. Options come from the dataset\'s recipe, then '
               'from the command line. On a CPU the threads are OMP_NUM_THREADS (default: every core this process may '
               'use), and a long run may train as several processes (--cpu-processes).')


# -- command line ----------------------------------------------------------------------------------

def _floats(n: Optional[int] = None, kind=None):
    return dict(type=kind or number(float), nargs=n or '+')


class ModelKwargs(argparse.Action):
    """timm's ``ParseKwargs`` (``key=value``, each value read as a Python literal), which imports timm only when
    the option is given, so that ``--help`` answers without it."""

    def __call__(self, parser, namespace, values, option_string=None):
        from timm.utils import ParseKwargs
        bare = [v for v in values if '=' not in v]
        if bare:  # timm's parser ends in a traceback ("not enough values to unpack")
            parser.error(f'argument {option_string}: takes key=value pairs (depth=2 weight_init=mimetic), got '
                         f'{", ".join(map(repr, bare))}')
        ParseKwargs.__call__(self, parser, namespace, values, option_string)


# --distill-type: what timm.task offers (soft: LogitDistillationTask; hard: DeiT's on the logits; token and
# hard-token: TokenDistillationTask, soft and hard, on a distillation token)
TOKEN_DISTILL_TYPES = ('token', 'hard-token')
DISTILL_TYPES = ('soft', 'hard', *TOKEN_DISTILL_TYPES)
# the allowed range of every numeric option, in one place: the command line, recipes and args.yaml go through these
COUNT, SIZE = number(int, 0), number(int, 1)
SEED = number(int, 0, 2 ** 63 - 1)  # torch.manual_seed takes up to 2**64 - 1; the seed mixing keeps 63 bits
POSITIVE, NON_NEGATIVE, FRACTION = number(float, 0, above=True), number(float, 0), number(float, 0, 1)
BELOW_ONE = number(float, 0, 1, below=True)  # a rate that must leave something: dropout, smoothing
# soft distillation's loss is KL x T^2 and its gradient at most T: below 0.1 the teacher all but leaves the loss
TEMPERATURE = number(float, 0.1)
DEGREES = number(float, 0, 180)
MAX_CLASSES = 1_000_000
# --weight-init: 'default' passes no keyword; the others are the minimal transformers' ``weight_init`` values
# (``models.model_args.WeightInitType``, which imports torch: a test keeps the two lists one)
WEIGHT_INITS = ('default', 'mimetic')
MAX_ERASE_COUNT = 64  # rectangles per image: timm's RandomErasing draws each, so a huge count never ends a batch

# d(value) in build_parser: an option's default keyword, or none where the parser is built without defaults
_DefaultOf = Callable[[Any], Dict[str, Any]]


def build_parser(suppress: bool = False) -> argparse.ArgumentParser:
    """The command line. With ``suppress=True`` no defaults are set (to find the options given explicitly)."""
    kw = dict(argument_default=argparse.SUPPRESS) if suppress else {}
    p = OneLineParser(
        prog='timm-minimal-train', description=DESCRIPTION, **kw)

    def d(value: Any) -> Dict[str, Any]:  # a default, unless suppressed
        return {} if suppress else {'default': value}

    for _, title, add in _GROUPS:
        add(p.add_argument_group(title), d)
    if not suppress:  # the training keys: the default recipe (the one for image folders) is their home
        p.set_defaults(**load_recipe('default'))
    for action in p._actions:  # argparse prints no default for an option without help text
        if action.help is None:
            action.help = '(default: %(default)s)'
    return p


def _run_options(g: argparse._ArgumentGroup, d: _DefaultOf) -> None:
    """What to train on, where the run lives and how it reports."""
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
    g.add_argument('--epochs', type=SIZE)
    g.add_argument('--batch-size', type=SIZE, help='global batch per step, split over all processes')
    g.add_argument('--eval-batch-size', type=SIZE, **d(None), help='global evaluation batch (default 2x --batch-size)')
    g.add_argument('--seed', type=SEED, **d(0), help='0 to 2**63 - 1')
    g.add_argument('--num-workers', type=COUNT, help='data loading worker processes per training process')
    g.add_argument('--train-subset', type=SIZE, **d(None), help='train on a seeded random subset of this many samples')
    g.add_argument('--eval-subset', type=SIZE, **d(None), help='evaluate on a seeded random subset of this many samples')
    g.add_argument('--train-split', **d('train'), help='training split (timm factory datasets)')
    g.add_argument('--val-split', **d(None), help='evaluation split (timm factory datasets; default validation)')
    g.add_argument('--num-classes', type=number(int, 1, MAX_CLASSES), **d(None), help='number of classes (only if the dataset cannot tell)')
    g.add_argument('--no-download', action='store_true', **d(False), help='never download a missing dataset')
    g.add_argument('--cache-dir', **d(None), help='where archives are decoded once (default $TIMM_MINIMAL_CACHE '
                   'or ~/.cache/timm_minimal; the CPU decision stays there, whatever this says)')
    g.add_argument('--checkpoint-interval', type=COUNT, **d(0),
                   help='also checkpoint every N optimizer updates inside an epoch (0: at epoch ends only)')
    g.add_argument('--no-progress', action='store_true', **d(False), help='no progress bar')
    g.add_argument('--log-interval', type=COUNT, **d(50), help='without a progress bar, log every N updates (0: epochs only)')
    g.add_argument('--log-with', type=tracker_name, nargs='+', **d(None), metavar='TRACKER',
                   help='experiment trackers through accelerate: tensorboard, wandb, mlflow, ... (several allowed); '
                        'the training curve every --log-interval updates, each epoch\'s metrics, the options and the '
                        'run\'s figures, one tracker run across resumes, files under <run>/trackers (W&B offline '
                        'unless WANDB_MODE says otherwise; MLflow\'s store there unless MLFLOW_TRACKING_URI is set)')
    g.add_argument('--tracker-project', **d(None), metavar='NAME',
                   help='the trackers\' project: W&B project, MLflow experiment, TensorBoard folder under '
                        '<run>/trackers (default $WANDB_PROJECT, else timm-minimal)')
    g.add_argument('--rank-report', action='store_true', **d(False),
                   help='each process writes rank<N>.json (weights hash, samples seen) into the run folder')


def _model_options(g: argparse._ArgumentGroup, d: _DefaultOf) -> None:
    """The model, its starting point and its input normalisation."""
    g.add_argument('--model-kwargs', nargs='*', action=ModelKwargs, **d({}),
                   help='extra model arguments, e.g. depth=2 embed_dim=96 img_size=64')
    g.add_argument('--weight-init', choices=WEIGHT_INITS, **d('default'),
                   help='the starting point of a vit_minimal model (its weight_init keyword, which --model-kwargs '
                        'overrides): default (timm\'s ViT initialisation) or mimetic (each attention layer\'s W_Q W_K^T '
                        'near a multiple of the identity, W_V W_O near minus one); other models start from their own')
    g.add_argument('--pretrained', action='store_true', **d(False), help="start from the model's pretrained weights")
    g.add_argument('--pretrained-path', **d(None), help='start from these weights (safetensors or .pth; a '
                   'classifier of another size is replaced)')
    g.add_argument('--drop', type=BELOW_ONE, **d(0.0), help='dropout before the classifier')
    g.add_argument('--drop-path', type=BELOW_ONE, help='stochastic depth rate')
    g.add_argument('--mean', **_floats(), **d(None), help='normalisation mean (default: the model\'s)')
    g.add_argument('--std', **_floats(kind=POSITIVE), **d(None), help='normalisation std (default: the model\'s)')
    g.add_argument('--interpolation', **d(None), help='resize interpolation (default: the model\'s)')
    g.add_argument('--crop-pct', type=number(float, MIN_CROP_PCT, 1), **d(None), help='evaluation crop fraction (default: the model\'s)')


def _teacher_name(text: str) -> str:
    """``--teacher``: a model name; an empty one would train without a teacher, silently."""
    if not text.strip():
        raise argparse.ArgumentTypeError('needs a model name: a timm name, a zoo tag, local-dir:PATH or hf-hub:ORG/NAME '
                                         '(leave --teacher out to train without one)')
    return text


def _distillation_options(g: argparse._ArgumentGroup, d: _DefaultOf) -> None:
    """The teacher and how its predictions enter the loss (timm.task)."""
    g.add_argument('--teacher', type=_teacher_name, **d(None), metavar='NAME',
                   help='distil from this pretrained model: a timm name, a zoo tag (vit_minimal_std_mlp_6x4.cifar10; '
                        'untagged: the dataset\'s), local-dir:PATH or hf-hub:ORG/NAME; it must have the student\'s '
                        'classes and input size')
    g.add_argument('--teacher-labels-by-order', action='store_true',
                   help="take the teacher's classes as the data's in order, where their names differ (by default a "
                        "teacher whose label names are not the data's class names, in their order, is refused)")
    g.add_argument('--distill-type', choices=DISTILL_TYPES, **d('soft'),
                   help='soft: KL divergence of the softened logits (timm\'s LogitDistillationTask); hard: '
                        'cross-entropy with the teacher\'s top class (DeiT); token, hard-token: the same, soft or '
                        'hard, on a distillation token and its own head (timm\'s TokenDistillationTask; a vit_minimal '
                        'student is built with distill_token=True, and predicts the mean of its two heads)')
    g.add_argument('--distill-temperature', type=TEMPERATURE, **d(1.0),
                   help='softmax temperature of soft distillation (at least 0.1: the T^2 factor of a colder one leaves '
                        "the teacher no weight; --distill-type hard takes the teacher's top class)")
    g.add_argument('--distill-weight', type=NON_NEGATIVE, **d(None),
                   help="weight of the distillation loss (timm's: 1, or 1 - --distill-task-weight where only that is set)")
    g.add_argument('--distill-task-weight', type=NON_NEGATIVE, **d(None),
                   help="weight of the task loss (timm's: 1)")


def _optimisation_options(g: argparse._ArgumentGroup, d: _DefaultOf) -> None:
    """The optimizer, its schedule and the weight average."""
    g.add_argument('--opt', help='timm optimizer name (create_optimizer_v2)')
    g.add_argument('--lr', type=NON_NEGATIVE)
    g.add_argument('--weight-decay', type=NON_NEGATIVE)
    g.add_argument('--momentum', type=FRACTION, **d(0.9))
    g.add_argument('--opt-eps', type=POSITIVE, **d(None), help="optimizer epsilon (default: the optimizer's)")
    g.add_argument('--opt-betas', **_floats(kind=BELOW_ONE))
    g.add_argument('--sched', help='timm scheduler name (create_scheduler_v2), or none')
    g.add_argument('--warmup-epochs', type=NON_NEGATIVE)
    g.add_argument('--warmup-lr', type=NON_NEGATIVE)
    g.add_argument('--min-lr', type=NON_NEGATIVE)
    g.add_argument('--clip-grad', type=POSITIVE, help='gradient clipping threshold (off when unset)')
    g.add_argument('--clip-mode', choices=('norm', 'value'), **d('norm'))
    g.add_argument('--grad-accum-steps', type=SIZE, **d(1), help='batches per optimizer update')
    g.add_argument('--model-ema', action=argparse.BooleanOptionalAction, help='keep EMA weights (ModelEmaV3)')
    g.add_argument('--model-ema-decay', type=FRACTION, **d(0.9998))
    g.add_argument('--model-ema-warmup', action=argparse.BooleanOptionalAction, **d(True))


def _data_path_options(g: argparse._ArgumentGroup, d: _DefaultOf) -> None:
    """Where the data live during training and how they are augmented."""
    g.add_argument('--data-path', choices=DATA_PATHS, **d('auto'),
                   help='device: the dataset lives on the training device as uint8 and is augmented there in batches '
                        '(MNIST, CIFAR-10, small image folders); loader: a DataLoader with per-image timm transforms '
                        '(ImageNet, streaming datasets, RandAugment, colour jitter); auto: device wherever the data '
                        'fit and the augmentation allows it')
    g.add_argument('--device-data-limit', type=number(float, 0, 2 ** 20, above=True), **d(4.0), metavar='GB',
                   help='largest dataset (train + evaluation, uint8 at the input size) the device path holds; '
                        'on a GPU also at most half its free memory')


def _augmentation_options(g: argparse._ArgumentGroup, d: _DefaultOf) -> None:
    """The training augmentation: geometry, colour, erasing, mixup/cutmix, label smoothing."""
    g.add_argument('--no-aug', action='store_true', **d(False), help='no training augmentation')
    g.add_argument('--translate', type=FRACTION, **d(0.0), help='random shift, at most this fraction of the image size')
    g.add_argument('--rotate', type=DEGREES, **d(0.0), help='random rotation, at most this many degrees')
    g.add_argument('--scale', **_floats(2, POSITIVE), help='random resized crop area range')
    g.add_argument('--ratio', **_floats(2, POSITIVE), help='random resized crop aspect range')
    g.add_argument('--hflip', type=FRACTION)
    g.add_argument('--vflip', type=FRACTION)
    g.add_argument('--color-jitter', type=NON_NEGATIVE)
    g.add_argument('--aa', help='RandAugment/AutoAugment policy, e.g. rand-m9-mstd0.5-inc1')
    g.add_argument('--train-interpolation', **d(None), help='training resize interpolation (default: the model\'s)')
    g.add_argument('--reprob', type=FRACTION, help='random erasing probability')
    g.add_argument('--remode', **d('pixel'))
    g.add_argument('--recount', type=number(int, 1, MAX_ERASE_COUNT), **d(1), help='random erasing: at most this many rectangles per image')
    g.add_argument('--mixup', type=NON_NEGATIVE, help='mixup alpha (0: off)')
    g.add_argument('--cutmix', type=NON_NEGATIVE, help='cutmix alpha (0: off)')
    g.add_argument('--cutmix-minmax', **_floats(2, number(float, 0, 1, above=True)), **d(None),
                   help='cutmix box size range, fractions of the image (default: drawn from --cutmix alpha)')
    g.add_argument('--mixup-prob', type=FRACTION, **d(1.0))
    g.add_argument('--mixup-switch-prob', type=FRACTION, **d(0.5))
    g.add_argument('--mixup-mode', **d('batch'))
    g.add_argument('--smoothing', type=BELOW_ONE, help='label smoothing')


def _system_options(g: argparse._ArgumentGroup, d: _DefaultOf) -> None:
    """Precision, compilation and the CPU processes and threads."""
    g.add_argument('--mixed-precision', choices=('no', 'fp16', 'bf16'), **d(None),
                   help="default: accelerate's configuration (accelerate launch --mixed_precision) if one is set, "
                        "else bf16 on a GPU that supports it, bf16 on a CPU with native bf16 for the models with an MLP, "
                        "and no elsewhere")
    g.add_argument('--compile', action=argparse.BooleanOptionalAction, **d(None),
                   help='torch.compile the model (default: on a CUDA GPU, and on the CPU for the models with an MLP in '
                        f'runs of {CPU_COMPILE_MIN_IMAGES:,} training images or more; a failure falls back to eager '
                        'with a warning)')
    g.add_argument('--pad-heads', action=argparse.BooleanOptionalAction, **d(None),
                   help='pad each attention head to a multiple of 8 columns in training (the same outputs; which one '
                        'trains faster depends on the CPU, so a long CPU run measures both; default: padded)')
    g.add_argument('--compile-mode', **d(None), help='torch.compile mode (default: reduce-overhead, i.e. CUDA graphs, '
                   'for one process on a GPU; torch\'s default otherwise)')
    g.add_argument('--cpu', action='store_true', **d(False), help='train on the CPU even if a GPU is present')
    g.add_argument('--threads', type=number(int, 1, 4096), **d(None), metavar='N',
                   help='torch threads of a one-process CPU run (default: OMP_NUM_THREADS where set, else the cores '
                        'that other work leaves free when the run starts, measured in a fraction of a second; a '
                        'resumed run keeps its count)')
    g.add_argument('--cpu-processes', type=SIZE, **d(None), metavar='N',
                   help='on a CPU, train as N data-parallel processes sharing the cores (default: measured once per '
                        'machine and model, for runs of 500,000 training images or more; 1 otherwise)')


# the parser's argument groups: (key, title, what adds its options); ``options`` makes one typed class of each
_GROUPS = (
    ('run', 'run', _run_options),
    ('model', 'model', _model_options),
    ('distillation', 'distillation (timm.task: the teacher sees the same augmented batch, in eval mode)',
     _distillation_options),
    ('optimisation', 'optimisation', _optimisation_options),
    ('data_path', 'data path', _data_path_options),
    ('augmentation', 'augmentation', _augmentation_options),
    ('system', 'system', _system_options),
)


def option_groups(parser: argparse.ArgumentParser) -> Dict[str, List[argparse.Action]]:
    """The actions of each of ``build_parser``'s argument groups, by the group's key ('run', 'model', ...)."""
    keys = {title: key for key, title, _ in _GROUPS}
    return {keys[g.title]: list(g._group_actions) for g in parser._action_groups if g.title in keys}


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
    """Each value of a recipe, ``args.yaml`` or an options namespace must be what the option's command line takes:
    one of its choices, or a number of the option's kind within its range (the types above), as many as it takes."""
    for action in parser._actions:
        value = values.get(action.dest)
        if value is None:
            continue
        flag = f'--{action.dest.replace("_", "-")}'
        if action.choices is not None and value not in action.choices:
            raise UsageError(f'{what}: {action.dest} must be one of {", ".join(map(str, action.choices))}, got '
                             f'{value!r} (as {flag} takes).')
        wanted = getattr(action.type, 'wanted', None)
        if wanted is None:
            continue
        many = action.nargs not in (None, '?')
        items = value if isinstance(value, (list, tuple)) and many else [value]
        if isinstance(action.nargs, int) and len(items) != action.nargs:
            raise UsageError(f'{what}: {action.dest} takes {action.nargs} values (as {flag} does), got {value!r}.')
        for item in items:
            try:
                if isinstance(item, bool) or not isinstance(item, (int, float)):
                    raise argparse.ArgumentTypeError(f'must be {wanted}, got {item!r}')
                action.type(item)
            except argparse.ArgumentTypeError as e:
                raise UsageError(f'{what}: {action.dest} {e} (as {flag} takes).') from None


def recipe_for(recipe: Optional[str], dataset: Optional[str], on_cpu: bool = False) -> str:
    """The recipe a run uses: ``--recipe`` if given, else its dataset's (on a CPU, the dataset's CPU recipe where it
    has one: CIFAR-10's GPU recipe trains at batch 2048 for 200 epochs, its CPU one at 256 for 36; MNIST's at 1024
    for 40 and at 256 for 16)."""
    if recipe:
        return recipe
    info = dataset_for_kind(dataset_kind(dataset))
    if info is None:
        return 'default'  # image folders and timm datasets
    return info.cpu_recipe if on_cpu and info.cpu_recipe else info.recipe


def training_device(cpu: bool) -> str:
    """The device a run trains on, the one rule that the plan and the recipe both follow: the CPU with ``--cpu``,
    else the first accelerator torch finds (CUDA, XPU, MPS), else the CPU."""
    if cpu:
        return 'cpu'
    import torch
    if torch.cuda.is_available():
        return 'cuda'
    if hasattr(torch, 'xpu') and torch.xpu.is_available():
        return 'xpu'
    mps = getattr(torch.backends, 'mps', None)
    return 'mps' if mps is not None and mps.is_available() else 'cpu'


def help_parser(argv: Sequence[str]) -> argparse.ArgumentParser:
    """The parser whose --help shows the defaults a run of ``argv`` on this machine will use: those of the recipe
    of --dataset (or --recipe) for the device it would train on, else the default recipe's, which is what an image
    folder or a timm dataset trains with. The console script's help and the module's both print it."""
    parser = build_parser()
    explicit = vars(build_parser(suppress=True).parse_known_args([a for a in argv if a not in ('-h', '--help')])[0])
    if explicit.get('dataset') or explicit.get('recipe'):
        try:
            name = recipe_for(explicit.get('recipe'), explicit.get('dataset'),
                              training_device(bool(explicit.get('cpu'))) == 'cpu')
            parser.set_defaults(**load_recipe(name))
            parser.epilog = f'Defaults shown are those of the {name} recipe (--dataset {explicit.get("dataset")}).'
        except (UsageError, DatasetError):
            pass
    else:
        parser.epilog = ('Defaults shown are those of the default recipe, which image folders and timm datasets '
                         'train with; MNIST, CIFAR-10 and ImageNet have their own (timm-minimal-train --dataset mnist '
                         '--help shows its).')
    return parser


def _cannot_resume(run_dir: Path) -> str:
    """Why ``--resume run_dir`` has nothing to resume, and what to run instead."""
    if not run_dir.exists():
        return f'Cannot resume {run_dir}: there is no such folder; --resume takes the --output of an earlier run.'
    if not run_dir.is_dir():
        return f'Cannot resume {run_dir}: it is a file; --resume takes the --output folder of an earlier run.'
    if RunFolder(run_dir).is_empty():
        return (f'Cannot resume {run_dir}: its run was stopped before it wrote its options (args.yaml), so it has '
                f'nothing to continue; start it anew with --model, --dataset and --output {run_dir}.')
    return (f'Cannot resume {run_dir}: it holds no args.yaml, so it is not the folder of a timm-minimal-train run; '
            f'--resume takes the --output folder of an earlier run.')


@dataclass(frozen=True)
class Provenance:
    """Where a run's options came from: its recipe, the recipe's values, and the options given on the command line."""
    recipe: Optional[str] = None
    recipe_values: Dict[str, Any] = field(default_factory=dict)
    explicit: Tuple[str, ...] = ()


def parse_args(argv: Optional[Sequence[str]] = None) -> Tuple[argparse.Namespace, Provenance]:
    """Resolve the options: defaults < recipe < the resumed run's args.yaml < command line.

    Returns the options and where they came from (``Provenance``).
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    if '-h' in argv or '--help' in argv:
        help_parser(argv).parse_args(argv)  # prints the help and exits
    parser = build_parser()
    defaults = vars(parser.parse_args([]))
    explicit = vars(build_parser(suppress=True).parse_args(argv))
    dests = set(defaults)

    saved = _resumed_options(parser, explicit) if 'resume' in explicit else {}
    dataset = explicit.get('dataset', saved.get('dataset'))
    if not dataset:
        raise UsageError('--dataset is required: mnist, cifar10, imagenet, an image folder path or a timm dataset name.')
    model = explicit.get('model', saved.get('model'))
    if not model:
        raise UsageError('--model is required, e.g. vit_minimal_std_mlp_6x1 (see timm.list_models("vit_minimal*")).')
    recipe_name = recipe_for(explicit.get('recipe', saved.get('recipe')), dataset,
                             training_device(bool({**saved, **explicit}.get('cpu'))) == 'cpu')
    recipe = load_recipe(recipe_name)
    unknown = sorted(set(recipe) - dests)
    if unknown:
        raise UsageError(f'Recipe {recipe_name} has unknown keys {unknown}; keys are option names such as '
                         f'lr, batch_size, epochs.')
    check_option_types(parser, recipe, f'Recipe {recipe_name}')
    resolved = dict(defaults)
    # a resumed run's args.yaml holds every option as its start resolved it; an option it lacks is younger than the
    # run, which therefore trained as with the option's built-in default (not with the recipe's value of today)
    resolved.update(recipe if not saved else {})
    resolved.update({k: v for k, v in saved.items() if k in dests})
    resolved.update(explicit)
    _minimal_weight_init(resolved, model, explicit)
    resolved['recipe'] = recipe_name
    resolved['resume'] = explicit.get('resume')
    args = argparse.Namespace(**resolved)
    if args.log_with:
        check_trackers(args.log_with)
    return args, Provenance(recipe=recipe_name, recipe_values=recipe, explicit=tuple(sorted(explicit)))


def _resumed_options(parser: argparse.ArgumentParser, explicit: Dict[str, Any]) -> Dict[str, Any]:
    """The options of the run ``--resume`` names, from its args.yaml (none where a killed start left the folder with
    nothing but its lock file and --model is given: the run starts there; a folder of other files is no run, and is
    refused); its folder becomes ``explicit``'s --output. A --model or --dataset that differs from the run's is
    refused."""
    run_dir = explicit['resume'] or explicit.get('output')
    if not run_dir:
        raise UsageError('--resume needs a run folder: --resume RUN, or --output RUN --resume.')
    args_file = Path(run_dir) / 'args.yaml'
    saved: Dict[str, Any] = {}
    if args_file.is_file():
        saved = read_options_yaml(args_file.read_text(), str(args_file))
        if not saved:
            raise UsageError(f'{args_file} is empty: a resumed run takes its options from it (run.json\'s "args" '
                             f'holds those it began with); put them back, or start a new run in another folder.')
        check_option_types(parser, saved, str(args_file))
    elif 'model' not in explicit or not Path(run_dir).is_dir() or not RunFolder(run_dir).is_empty():
        raise UsageError(_cannot_resume(Path(run_dir)))
    for key in ('model', 'dataset'):
        if key in explicit and key in saved and explicit[key] != saved[key]:
            raise UsageError(f'--{key} {explicit[key]} differs from the resumed run\'s ({saved[key]}).')
    explicit.setdefault('output', str(run_dir))
    return saved


def _minimal_weight_init(resolved: Dict[str, Any], model: str, explicit: Dict[str, Any]) -> None:
    """``--weight-init`` is the minimal transformers' keyword: another model asked for one on the command line is
    refused; a recipe's (``cifar10_cpu``) leaves it to its own initialisation."""
    from timm.models import split_model_name_tag
    if resolved['weight_init'] == 'default' or is_minimal(split_model_name_tag(model)[0]):
        return
    if 'weight_init' in explicit:
        raise UsageError(f"--weight-init {resolved['weight_init']} sets the starting point of the vit_minimal models; "
                         f"{model} has its own (its keywords go through --model-kwargs).")
    resolved['weight_init'] = 'default'


# --model-kwargs go to timm.create_model beside what the trainer passes: these are the trainer's, or make it return
# something other than the classifier it trains
TRAINER_MODEL_KWARGS = {
    'num_classes': 'the class count comes from the dataset (--num-classes where the dataset cannot tell)',
    'pretrained': 'use --pretrained or --pretrained-path',
    'device': 'the trainer places the model (--cpu, or accelerate launch)',
    'dtype': 'the trainer sets the precision (--mixed-precision)',
    'features_only': 'the trainer trains a classifier', 'out_indices': 'the trainer trains a classifier',
    'feature_cfg': 'the trainer trains a classifier',
}


def check_model_kwargs(args: argparse.Namespace) -> None:
    """``--model-kwargs`` before anything is built or written: none of the trainer's own keywords, and for a
    vit_minimal model only the keywords its class and timm's ``create_model`` take (named in the refusal)."""
    import inspect
    import timm
    from timm.models import split_model_name_tag
    kwargs = args.model_kwargs or {}
    for key in kwargs:
        if key in TRAINER_MODEL_KWARGS:
            raise UsageError(f'--model-kwargs {key}=...: {TRAINER_MODEL_KWARGS[key]}.')
    if is_minimal(split_model_name_tag(args.model)[0]):
        from ..models.vit_minimal import MODEL_KEYWORDS
        factory = [k for k in inspect.signature(timm.create_model).parameters if k not in ('model_name', 'kwargs')]
        allowed = [k for k in (*MODEL_KEYWORDS, 'weight_init', *factory) if k not in TRAINER_MODEL_KWARGS]
        unknown = sorted(set(kwargs) - set(allowed))
        if unknown:
            names = ', '.join(k or repr(k) for k in unknown)
            raise UsageError(f"--model-kwargs {names}: not a keyword of {args.model}; it takes {', '.join(allowed)}.")


def check_numbers(args: argparse.Namespace) -> None:
    """Every numeric option of a resolved run within its range (the parser's types), however the options were
    made (the command line, a recipe, ``args.yaml`` or ``train(args)`` from Python)."""
    check_option_types(build_parser(), vars(args), 'options')
