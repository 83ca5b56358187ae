"""The trainer's options: one frozen dataclass per group, written out, each field with its command-line help, range
and how it defaults in its metadata (``option``), as transformers' ``HfArgumentParser`` reads its dataclasses. They
are the one home of the options' names, types, ranges and built-in defaults: ``cli.build_parser`` makes the command
line from their ``fields()`` when it is asked for, and ``check_option_types`` checks a recipe or ``args.yaml`` by
them. An editor, mypy and pyright see each field's type.

A stage takes the groups it reads (building the model its ``ModelOptions``, the optimizer its
``OptimisationOptions``, ...), never the whole command line. The options the plan decides (the model's full name, the
recipe, the device, precision, compilation, processes and threads) are ``PlannedOptions``, in no stage's group, so a
stage cannot read an undecided value: it reads the plan's decision. ``PlannedOptions`` keeps them as they were given,
for ``args.yaml``.

Defaults: a field's own, or, for a field made with ``option(recipe=True)``, the default recipe's
(``recipes/default.yaml``, the one image folders train with): each dataset's recipe sets those.
"""
import argparse
import dataclasses
import re
import typing
from dataclasses import MISSING, dataclass, field, fields
from typing import Any, Callable, Dict, Iterator, List, Literal, Mapping, Optional, Tuple

from ..cli import number
from ..models.datasets import MIN_CROP_PCT
from .trackers import tracker_name

__all__ = ['Option', 'option', 'option_of', 'OptionGroup', 'Options', 'PlannedOptions', 'RunOptions', 'ModelOptions',
           'DistillationOptions', 'OptimisationOptions', 'DataPathOptions', 'AugmentationOptions', 'SECTIONS',
           'PLANNED', 'all_fields', 'argument_of', 'fixed_options', 'group_of', 'recipe_keys', 'ModelKwargs',
           'DATA_PATHS', 'DISTILL_TYPES', 'TOKEN_DISTILL_TYPES', 'WEIGHT_INITS', 'CPU_COMPILE_MIN_IMAGES',
           'FUSED_ADAM_DEVICES']

# On a 2-core CPU a cold torch.compile of std_mlp_6x1 cost 27 s and made its trainer epochs 1.11x faster (the
# median of three alternated runs, benchmarks/cpu_modes_trainer.md; 1.03x and 1.21x in single runs), which repays
# the compilation after about 180,000 training images; the default asks about three times that, so the tests, the
# demo and short runs stay eager (cpu.policy.default_compile).
CPU_COMPILE_MIN_IMAGES = 500_000

# The devices where Adam and AdamW take torch's fused kernel (``fused=True``): one kernel over every parameter. On the
# CPU the default loops over the parameters, a few small ops each; in turns with it in one process on a 2-core AMX
# Xeon, the fused kernel made the compiled training step of sym_6x4 1.044x as fast (MNIST, fp32) and 1.028x (CIFAR-10,
# bf16), the eager fp32 step 0.999x (``scripts/fused_adamw.py``, medians of 12 rounds): where the step is short, the
# optimizer's ops are a part of it. The trainer, the CPU decision's probes and the training benchmark use it.
FUSED_ADAM_DEVICES = ('cuda', 'cpu')

# the allowed range of every numeric option, in one place: the command line, recipes and args.yaml go through these
COUNT, SIZE, FINITE = number(int, 0), number(int, 1), number(float)
SEED = number(int, 0, 2 ** 63 - 1)  # torch.manual_seed takes up to 2**64 - 1; the seed mixing keeps 63 bits
POSITIVE, NON_NEGATIVE, FRACTION = number(float, 0, above=True), number(float, 0), number(float, 0, 1)
BELOW_ONE = number(float, 0, 1, below=True)  # a rate that must leave something: dropout, smoothing
# soft distillation's loss is KL x T^2 and its gradient at most T: below 0.1 the teacher all but leaves the loss
TEMPERATURE = number(float, 0.1)
DEGREES = number(float, 0, 180)
MAX_CLASSES = 1_000_000
MAX_ERASE_COUNT = 64  # rectangles per image: timm's RandomErasing draws each, so a huge count never ends a batch

DataPath = Literal['auto', 'device', 'loader']
# --distill-type: what timm.task offers (soft: LogitDistillationTask; hard: DeiT's on the logits; token and
# hard-token: TokenDistillationTask, soft and hard, on a distillation token)
DistillType = Literal['soft', 'hard', 'token', 'hard-token']
# --weight-init: 'default' passes no keyword; the others are the minimal transformers' ``weight_init`` values
# (``models.model_args.WeightInitType``, which imports torch: a test keeps the two lists one)
WeightInit = Literal['default', 'mimetic']
DATA_PATHS, DISTILL_TYPES, WEIGHT_INITS = typing.get_args(DataPath), typing.get_args(DistillType), typing.get_args(WeightInit)
TOKEN_DISTILL_TYPES = ('token', 'hard-token')


class ModelKwargs(argparse.Action):
    """timm's ``ParseKwargs`` (``key=value``, each value read as a Python literal), which imports timm only when
    the option is given, so that ``--help`` answers without it."""

    def __call__(self, parser, namespace, values, option_string=None):
        from timm.utils import ParseKwargs  # lazy: --help answers without timm
        bare = [v for v in values if '=' not in v]
        if bare:  # timm's parser ends in a traceback ("not enough values to unpack")
            parser.error(f'argument {option_string}: takes key=value pairs (depth=2 weight_init=mimetic), got '
                         f'{", ".join(map(repr, bare))}')
        ParseKwargs.__call__(self, parser, namespace, values, option_string)


def teacher_name(text: str) -> str:
    """``--teacher``: a model name; an empty one would train without a teacher, silently."""
    if not text.strip():
        raise argparse.ArgumentTypeError('needs a model name: a timm name, a zoo tag, local-dir:PATH or hf-hub:ORG/NAME '
                                         '(leave --teacher out to train without one)')
    return text


MAX_TRAIN_SIZE = 4096  # pixels a side: the models' own size limits hold beyond it anyway
TRAIN_SIZE_FORMS = (f'SIZE@EPOCH or SIZE@P% (a size of 1 to {MAX_TRAIN_SIZE:,} pixels; an epoch from 1, or '
                    f'0 <= P < 100)')


def train_size(text: str) -> str:
    """A ``--train-sizes`` entry as its canonical text: ``SIZE@EPOCH`` (an epoch from 1) or ``SIZE@P%`` (from the
    point P% of the way through the run, 0 <= P < 100: a recipe's, which holds whatever --epochs says)."""
    match = re.fullmatch(r'\s*(\d+)\s*@\s*(\d+(?:\.\d+)?)\s*(%?)\s*', str(text))
    size, at, percent = (int(match[1]), float(match[2]), match[3]) if match else (0, 0.0, '')
    ok = 1 <= size <= MAX_TRAIN_SIZE and (at < 100 if percent else at >= 1 and at.is_integer())
    if not ok:
        raise argparse.ArgumentTypeError(f'must be {TRAIN_SIZE_FORMS}, got {text!r}')
    return f'{size}@{at:g}%' if percent else f'{size}@{int(at)}'


# what cli.check_option_types reads of a type, as of cli.number's: the forms it takes, and the kind of a value
setattr(train_size, 'wanted', TRAIN_SIZE_FORMS)
setattr(train_size, 'kind', str)


@dataclass(frozen=True)
class Option:
    """What the command line needs of a field beyond its name, type and default (``option``'s arguments)."""
    help: Optional[str] = None
    type: Optional[Callable[[Any], Any]] = None  # the parse and range check of one value (``cli.number``)
    nargs: Any = None  # a list field takes one or more values unless this says otherwise
    action: Any = None  # an argparse action beyond what the field's type implies (a bool is a flag)
    metavar: Optional[str] = None
    const: Any = None
    recipe: bool = False  # no built-in default: the default recipe is its home
    fixed: Optional[str] = None  # cannot change on a resume: 'state' (optimizer state, data order) or 'teacher'
    section: Optional[str] = None  # a planned option's place in --help ('run' or 'system')


def option(help: Optional[str] = None, *, default: Any = MISSING, **meta: Any) -> Any:
    """A field of an option group: its default (none with ``recipe=True``) and its ``Option`` metadata."""
    mutable = isinstance(default, (dict, list))
    return field(default=MISSING if mutable else default,
                 default_factory=(lambda: type(default)(default)) if mutable else MISSING,
                 metadata={'option': Option(help=help, **meta)})


def option_of(f: dataclasses.Field) -> Option:
    """A field's ``Option``."""
    return f.metadata['option']


class OptionGroup:
    """The base of the option groups: a frozen dataclass of option values."""

    def values(self) -> Dict[str, Any]:
        """The group's options by name (the values themselves, not copies)."""
        return {f.name: getattr(self, f.name) for f in fields(self)}  # type: ignore[arg-type]


@dataclass(frozen=True, kw_only=True)
class RunOptions(OptionGroup):
    """What to train on, where the run lives and how it reports."""
    dataset: Optional[str] = option('mnist, cifar10, imagenet, a path to an image folder with train/ and val/ (or '
                                    'test/), or a timm dataset name (hfds/..., wds/..., tfds/..., hfids/..., torch/...)',
                                    default=None, fixed='run')
    data_dir: Optional[str] = option('dataset root (MNIST idx files, CIFAR-10 archive/folder, ImageNet folders, timm '
                                     'dataset root); default ./data', default=None)
    output: Optional[str] = option('run folder (metrics, checkpoints, plots); default runs/<dataset>-<model>-<time>',
                                   default=None)
    resume: Optional[str] = option('continue the run in RUN (default: --output) from its last checkpoint', default=None,
                                   nargs='?', const='', metavar='RUN')
    epochs: int = option(recipe=True, type=SIZE)
    batch_size: int = option('global batch per step, split over all processes', recipe=True, type=SIZE)
    eval_batch_size: Optional[int] = option('global evaluation batch (default 2x --batch-size)', default=None, type=SIZE)
    seed: int = option('0 to 2**63 - 1', default=0, type=SEED, fixed='state')
    num_workers: int = option('data loading worker processes per training process', recipe=True, type=COUNT)
    train_subset: Optional[int] = option('train on a seeded random subset of this many samples', default=None,
                                         type=SIZE, fixed='state')
    eval_subset: Optional[int] = option('evaluate on a seeded random subset of this many samples', default=None,
                                        type=SIZE)
    train_split: str = option('training split (timm factory datasets)', default='train')
    val_split: Optional[str] = option('evaluation split (timm factory datasets; default validation)', default=None)
    num_classes: Optional[int] = option('number of classes (only if the dataset cannot tell)', default=None,
                                        type=number(int, 1, MAX_CLASSES), fixed='run')
    no_download: bool = option('never download a missing dataset', default=False)
    cache_dir: Optional[str] = option('where archives are decoded once (default $TIMM_MINIMAL_CACHE or '
                                      '~/.cache/timm_minimal; the CPU decision stays there, whatever this says)',
                                      default=None)
    checkpoint_interval: int = option('also checkpoint every N optimizer updates inside an epoch (0: at epoch ends '
                                      'only)', default=0, type=COUNT)
    no_progress: bool = option('no progress bar', default=False)
    log_interval: int = option('without a progress bar, log every N updates (0: epochs only)', default=50, type=COUNT)
    log_with: Optional[List[str]] = option(
        'experiment trackers through accelerate: tensorboard, wandb, mlflow, ... (several allowed); the training curve '
        'every --log-interval updates, each epoch\'s metrics, the options and the run\'s figures, one tracker run '
        'across resumes, files under <run>/trackers (W&B offline unless WANDB_MODE says otherwise; MLflow\'s store '
        'there unless MLFLOW_TRACKING_URI is set)', default=None, type=tracker_name, metavar='TRACKER')
    tracker_project: Optional[str] = option('the trackers\' project: W&B project, MLflow experiment, TensorBoard '
                                            'folder under <run>/trackers (default $WANDB_PROJECT, else timm-minimal)',
                                            default=None, metavar='NAME')
    rank_report: bool = option('each process writes rank<N>.json (weights hash, samples seen) into the run folder',
                               default=False)


@dataclass(frozen=True, kw_only=True)
class ModelOptions(OptionGroup):
    """The model's keywords, its starting point and its input preprocessing."""
    model_kwargs: Dict[str, Any] = option('extra model arguments, e.g. depth=2 embed_dim=96 img_size=64', default={},
                                          nargs='*', action=ModelKwargs, fixed='state')
    weight_init: WeightInit = option(
        'the starting point of a vit_minimal model (its weight_init keyword, which --model-kwargs overrides): default '
        '(timm\'s ViT initialisation) or mimetic (each attention layer\'s W_Q W_K^T near a multiple of the identity, '
        'W_V W_O near minus one); other models start from their own', default='default', fixed='state')
    pretrained: bool = option("start from the model's pretrained weights", default=False)
    pretrained_path: Optional[str] = option('start from these weights (safetensors or .pth; a classifier of another '
                                            'size is replaced)', default=None)
    drop: float = option('dropout before the classifier', default=0.0, type=BELOW_ONE, fixed='state')
    drop_path: float = option('stochastic depth rate', recipe=True, type=BELOW_ONE, fixed='state')
    mean: Optional[List[float]] = option("normalisation mean (default: the model's)", default=None, type=FINITE)
    std: Optional[List[float]] = option("normalisation std (default: the model's)", default=None, type=POSITIVE)
    interpolation: Optional[str] = option("resize interpolation (default: the model's)", default=None)
    crop_pct: Optional[float] = option("evaluation crop fraction (default: the model's)", default=None,
                                       type=number(float, MIN_CROP_PCT, 1))


@dataclass(frozen=True, kw_only=True)
class DistillationOptions(OptionGroup):
    """The teacher and how it enters the loss (timm.task: the teacher sees the same augmented batch, in eval mode)."""
    teacher: Optional[str] = option(
        'distil from this pretrained model: a timm name, a zoo tag (vit_minimal_std_mlp_6x4.cifar10; untagged: the '
        'dataset\'s), local-dir:PATH or hf-hub:ORG/NAME; it must have the student\'s classes and input size',
        default=None, type=teacher_name, metavar='NAME', fixed='teacher')
    teacher_labels_by_order: bool = option(
        "take the teacher's classes as the data's in order, where their names differ (by default a teacher whose label "
        "names are not the data's class names, in their order, is refused)", default=False, fixed='teacher')
    distill_type: DistillType = option(
        'soft: KL divergence of the softened logits (timm\'s LogitDistillationTask); hard: cross-entropy with the '
        'teacher\'s top class (DeiT); token, hard-token: the same, soft or hard, on a distillation token and its own '
        'head (timm\'s TokenDistillationTask; a vit_minimal student is built with distill_token=True, and predicts the '
        'mean of its two heads)', default='soft', fixed='teacher')
    distill_temperature: float = option(
        "softmax temperature of soft distillation (at least 0.1: the T^2 factor of a colder one leaves the teacher no "
        "weight; --distill-type hard takes the teacher's top class)", default=1.0, type=TEMPERATURE, fixed='teacher')
    distill_weight: Optional[float] = option("weight of the distillation loss (timm's: 1, or 1 - --distill-task-weight "
                                             "where only that is set)", default=None, type=NON_NEGATIVE, fixed='teacher')
    distill_task_weight: Optional[float] = option("weight of the task loss (timm's: 1)", default=None,
                                                  type=NON_NEGATIVE, fixed='teacher')


@dataclass(frozen=True, kw_only=True)
class OptimisationOptions(OptionGroup):
    """The optimizer, its schedule and the EMA."""
    opt: str = option('timm optimizer name (create_optimizer_v2)', recipe=True, fixed='state')
    lr: float = option(recipe=True, type=NON_NEGATIVE)
    weight_decay: float = option(recipe=True, type=NON_NEGATIVE)
    momentum: float = option(default=0.9, type=FRACTION)
    opt_eps: Optional[float] = option("optimizer epsilon (default: the optimizer's)", default=None, type=POSITIVE)
    opt_betas: List[float] = option(recipe=True, type=BELOW_ONE)
    sched: str = option('timm scheduler name (create_scheduler_v2), or none', recipe=True)
    warmup_epochs: float = option(recipe=True, type=NON_NEGATIVE)
    warmup_lr: float = option(recipe=True, type=NON_NEGATIVE)
    min_lr: float = option(recipe=True, type=NON_NEGATIVE)
    clip_grad: Optional[float] = option('gradient clipping threshold (off when unset)', recipe=True, type=POSITIVE)
    clip_mode: Literal['norm', 'value'] = option(default='norm')
    grad_accum_steps: int = option('batches per optimizer update', default=1, type=SIZE, fixed='state')
    model_ema: Optional[bool] = option('keep EMA weights (ModelEmaV3)', recipe=True)
    model_ema_decay: float = option(default=0.9998, type=FRACTION)
    model_ema_warmup: Optional[bool] = option(default=True)


@dataclass(frozen=True, kw_only=True)
class DataPathOptions(OptionGroup):
    """Where the data live during training."""
    data_path: DataPath = option(
        'device: the dataset lives on the training device as uint8 and is augmented there in batches (MNIST, CIFAR-10, '
        'small image folders); loader: a DataLoader with per-image timm transforms (ImageNet, streaming datasets, '
        'RandAugment, colour jitter); auto: device wherever the data fit and the augmentation allows it', default='auto')
    device_data_limit: float = option('largest dataset (train + evaluation, uint8 at the input size) the device path '
                                      'holds; on a GPU also at most half its free memory', default=4.0,
                                      type=number(float, 0, 2 ** 20, above=True), metavar='GB')


@dataclass(frozen=True, kw_only=True)
class AugmentationOptions(OptionGroup):
    """The training augmentation (geometry, colour, erasing, mixup/cutmix) and label smoothing."""
    no_aug: bool = option('no training augmentation', default=False)
    translate: float = option('random shift, at most this fraction of the image size', default=0.0, type=FRACTION)
    rotate: float = option('random rotation, at most this many degrees', default=0.0, type=DEGREES)
    scale: List[float] = option('random resized crop area range', recipe=True, type=POSITIVE, nargs=2)
    ratio: List[float] = option('random resized crop aspect range', recipe=True, type=POSITIVE, nargs=2)
    hflip: float = option(recipe=True, type=FRACTION)
    vflip: float = option(recipe=True, type=FRACTION)
    color_jitter: float = option(recipe=True, type=NON_NEGATIVE)
    aa: Optional[str] = option('RandAugment/AutoAugment policy, e.g. rand-m9-mstd0.5-inc1', recipe=True)
    train_interpolation: Optional[str] = option("training resize interpolation (default: the model's)", default=None)
    reprob: float = option('random erasing probability', recipe=True, type=FRACTION)
    remode: str = option(default='pixel')
    recount: int = option('random erasing: at most this many rectangles per image', default=1,
                          type=number(int, 1, MAX_ERASE_COUNT))
    mixup: float = option('mixup alpha (0: off)', recipe=True, type=NON_NEGATIVE)
    cutmix: float = option('cutmix alpha (0: off)', recipe=True, type=NON_NEGATIVE)
    cutmix_minmax: Optional[List[float]] = option('cutmix box size range, fractions of the image (default: drawn from '
                                                  '--cutmix alpha)', default=None,
                                                  type=number(float, 0, 1, above=True), nargs=2)
    mixup_prob: float = option(default=1.0, type=FRACTION)
    mixup_switch_prob: float = option(default=0.5, type=FRACTION)
    mixup_mode: str = option(default='batch')
    smoothing: float = option('label smoothing', recipe=True, type=BELOW_ONE)
    train_sizes: Optional[List[str]] = option(
        'progressive resizing: train at SIZE x SIZE pixels from epoch EPOCH on, or from P%% of the way through the '
        'run (24@1 32@15: 24 x 24 in epochs 1-14, 32 x 32 from 15; 24@0%% 32@50%%: 24 x 24 in the first half); the '
        'epochs before the first entry, and evaluation, take the model\'s input size; with no entries, it throughout',
        default=None, type=train_size, metavar='SIZE@EPOCH', nargs='*')


@dataclass(frozen=True, kw_only=True)
class PlannedOptions(OptionGroup):
    """The options the plan decides (``plan.resolve_plan``), as they were given (``args.yaml`` keeps them so); the
    stages after the plan read its decisions."""
    model: Optional[str] = option('timm model name, e.g. vit_minimal_std_mlp_6x1 or vit_minimal_sym_6x4.cifar10 '
                                  '(without a tag the dataset picks it: .mnist, .cifar10, .in1k for image folders)',
                                  default=None, section='run')
    recipe: Optional[str] = option("recipe name (mnist, cifar10, imagenet, default) or YAML file; default: the "
                                   "dataset's", default=None, section='run')
    mixed_precision: Optional[Literal['no', 'fp16', 'bf16']] = option(
        "default: accelerate's configuration (accelerate launch --mixed_precision) if one is set, else bf16 on a GPU "
        "that supports it, bf16 on a CPU with native bf16 for the models with an MLP, and no elsewhere", default=None,
        section='system')
    compile: Optional[bool] = option(
        'torch.compile the model (default: on a CUDA GPU, and on the CPU for the models with an MLP in runs of '
        f'{CPU_COMPILE_MIN_IMAGES:,} training images or more; a failure falls back to eager with a warning)',
        default=None, section='system')
    pad_heads: Optional[bool] = option(
        'pad each attention head to a multiple of 8 columns in training (the same outputs; which one trains faster '
        'depends on the CPU, so a long CPU run measures both; default: padded)', default=None, section='system')
    compile_mode: Optional[str] = option('torch.compile mode (default: reduce-overhead, i.e. CUDA graphs, for one '
                                         'process on a GPU; torch\'s default otherwise)', default=None, section='system')
    cpu: bool = option('train on the CPU even if a GPU is present', default=False, section='system')
    threads: Optional[int] = option(
        'torch threads of a one-process CPU run (default: OMP_NUM_THREADS where set, else the cores that other work '
        'leaves free when the run starts, measured in a fraction of a second; a resumed run keeps its count)',
        default=None, type=number(int, 1, 4096), metavar='N', section='system')
    cpu_processes: Optional[int] = option(
        'on a CPU, train as N data-parallel processes sharing the cores (default: measured once per machine and model, '
        'for runs of 500,000 training images or more; 1 otherwise)', default=None, type=SIZE, metavar='N',
        section='system')


@dataclass(frozen=True)
class Options:
    """The resolved options that the stages read, one typed group each."""
    run: RunOptions
    model: ModelOptions
    distillation: DistillationOptions
    optimisation: OptimisationOptions
    data_path: DataPathOptions
    augmentation: AugmentationOptions

    @classmethod
    def from_values(cls, values: Mapping[str, Any]) -> 'Options':
        """The groups of a resolved option mapping (``cli.parse_args``'s, or ``vars`` of a namespace); every option
        of every group must be there."""
        hints = typing.get_type_hints(cls)
        return cls(**{f.name: group_of(hints[f.name], values) for f in fields(cls)})

    def values(self) -> Dict[str, Any]:
        """Every option of every group by name: what the groups hold, flat."""
        return {k: v for f in fields(self) for k, v in getattr(self, f.name).values().items()}


# --help's sections, in order: (key, title, the group whose fields it shows first the planned options it places)
SECTIONS: Tuple[Tuple[str, str, Optional[type]], ...] = (
    ('run', 'run', RunOptions),
    ('model', 'model', ModelOptions),
    ('distillation', 'distillation (timm.task: the teacher sees the same augmented batch, in eval mode)',
     DistillationOptions),
    ('optimisation', 'optimisation', OptimisationOptions),
    ('data_path', 'data path', DataPathOptions),
    ('augmentation', 'augmentation', AugmentationOptions),
    ('system', 'system', None),
)
GROUPS = tuple(cls for _, _, cls in SECTIONS if cls is not None)
PLANNED = tuple(f.name for f in fields(PlannedOptions))


def all_fields() -> Iterator[dataclasses.Field]:
    """Every option's field: the stages' groups', then the planned options'."""
    for cls in (*GROUPS, PlannedOptions):
        yield from fields(cls)


def section_fields(key: str) -> List[dataclasses.Field]:
    """The fields --help shows in the section ``key``: the planned options placed there, then its group's."""
    group = dict((k, cls) for k, _, cls in SECTIONS)[key]
    planned = [f for f in fields(PlannedOptions) if option_of(f).section == key]
    return planned + (list(fields(group)) if group else [])


def _hints() -> Dict[str, Any]:
    return {name: hint for cls in (*GROUPS, PlannedOptions) for name, hint in typing.get_type_hints(cls).items()}


def argument_of(f: dataclasses.Field, hint: Any = None) -> Dict[str, Any]:
    """``add_argument``'s keywords (but the default) for a field, from its type and ``Option``: a bool is a flag
    (``--x/--no-x`` where it may be None), a Literal its choices, a list one or more values."""
    hint = _hints()[f.name] if hint is None else hint
    meta, kw = option_of(f), dict()  # type: Tuple[Option, Dict[str, Any]]
    args = typing.get_args(hint)
    optional = typing.get_origin(hint) is typing.Union and type(None) in args
    base = next(a for a in args if a is not type(None)) if optional else hint
    if base is bool:
        kw['action'] = argparse.BooleanOptionalAction if optional else 'store_true'
    if typing.get_origin(base) is Literal:
        kw['choices'] = typing.get_args(base)
    if typing.get_origin(base) is list:
        kw['nargs'] = meta.nargs or '+'
    elif meta.nargs is not None:
        kw['nargs'] = meta.nargs
    for name in ('type', 'action', 'metavar', 'const', 'help'):
        if getattr(meta, name) is not None:
            kw[name] = getattr(meta, name)
    return kw


def recipe_keys() -> Tuple[str, ...]:
    """The options without a built-in default, which every recipe may set and the default recipe does."""
    return tuple(f.name for f in all_fields() if option_of(f).recipe)


def fixed_options(kind: str) -> Tuple[str, ...]:
    """The options a resume may not change, of one kind: 'state' (the checkpoint's optimizer state and data order
    belong to them), 'teacher' (the run's record states one teacher for all its epochs) or 'run' (what defines the
    data beside those)."""
    return tuple(f.name for f in all_fields() if option_of(f).fixed == kind)


def built_in_defaults() -> Dict[str, Any]:
    """Every option's own default (the recipe options have none and are left out)."""
    out = {}
    for f in all_fields():
        if f.default is not MISSING:
            out[f.name] = f.default
        elif f.default_factory is not MISSING:
            out[f.name] = f.default_factory()
    return out


def group_of(cls: type, values: Mapping[str, Any]) -> Any:
    """The ``cls`` group of ``values`` (its fields, taken by name)."""
    names = [f.name for f in fields(cls)]
    missing = [n for n in names if n not in values]
    if missing:
        raise TypeError(f'{cls.__name__} needs the options {", ".join(missing)} (resolve them with cli.parse_args).')
    return cls(**{n: values[n] for n in names})
