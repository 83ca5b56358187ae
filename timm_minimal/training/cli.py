"""The trainer's command line: its options, the recipes they default to, and the checks of their values.

Options come from three places, later ones winning: built-in defaults, the dataset's recipe
(``timm_minimal/training/recipes/<recipe>.yaml`` or ``--recipe``), the command line; a resumed run adds its
own ``args.yaml`` below the command line. A recipe or ``args.yaml`` is plain YAML (``safe_load``) whose keys
are option names and whose values have the option's type.
"""
import argparse
import inspect
import sys
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, Dict, Mapping, Optional, Sequence, Tuple

import yaml

from ..cli import OneLineParser, UsageError
from ..models.datasets import dataset_for_kind
from ..models.paper import is_minimal
from .data.names import DatasetError, dataset_kind
from .options import (DATA_PATHS, DISTILL_TYPES, TOKEN_DISTILL_TYPES, WEIGHT_INITS, SECTIONS, all_fields, argument_of,
                      built_in_defaults, option_of, recipe_keys, section_fields)
from .run.folder import RunFolder
from .trackers import check_trackers

__all__ = ['UsageError', 'OneLineParser', 'DATA_PATHS', 'DISTILL_TYPES', 'TOKEN_DISTILL_TYPES', 'WEIGHT_INITS',
           'Provenance', 'build_parser', 'option_defaults', 'parse_args', 'load_recipe', 'read_options_yaml',
           'check_option_types', 'recipe_for', 'help_parser', 'training_device', 'check_numbers', 'check_model_kwargs']

DESCRIPTION = ('Train a minimal transformer (or any timm model) with accelerate, on one CPU, one GPU or several: MNIST, '
               'CIFAR-10, ImageNet, an image folder or a timm dataset. Options come from the dataset\'s recipe, then '
               'from the command line. On a CPU the threads are OMP_NUM_THREADS (default: every core this process may '
               'use), and a long run may train as several processes (--cpu-processes).')


# -- command line ----------------------------------------------------------------------------------

def build_parser(suppress: bool = False) -> argparse.ArgumentParser:
    """The command line, made from the option groups' fields (``options``). Its defaults are the options' own and
    the default recipe's; with ``suppress=True`` it sets none, so that a parse holds the options given and nothing
    else (what a launch parses with)."""
    p = OneLineParser(prog='timm-minimal-train', description=DESCRIPTION,
                      **(dict(argument_default=argparse.SUPPRESS) if suppress else {}))
    defaults = {} if suppress else option_defaults()
    for key, title, _ in SECTIONS:
        g = p.add_argument_group(title)
        for f in section_fields(key):
            kw = argument_of(f)
            kw.setdefault('help', '(default: %(default)s)')  # argparse prints no default for an option without help
            if suppress:  # a flag's action sets its own default (False), which would count as given
                kw['default'] = argparse.SUPPRESS
            else:
                kw['default'] = defaults.get(f.name)
            g.add_argument('--' + f.name.replace('_', '-'), **kw)
    return p


def option_defaults(given: Optional[Mapping[str, Any]] = None) -> Dict[str, Any]:
    """Every option's default: its field's, and for an option whose home is a recipe, the default recipe's; that
    recipe is read only where ``given`` (a run's recipe, or a resumed run's options) lacks such an option."""
    out = built_in_defaults()
    wanted = [k for k in recipe_keys() if given is None or k not in given]
    if wanted:
        default = load_recipe('default')
        out.update({k: default.get(k) for k in wanted})
    return out


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


def check_option_types(values: Mapping[str, Any], what: str) -> None:
    """Each value of a recipe, ``args.yaml`` or an options namespace must be what the option's command line takes:
    one of its choices, or a number of the option's kind within its range (its field's ``Option.type``), as many as
    it takes."""
    for f in all_fields():
        value = values.get(f.name)
        if value is None:
            continue
        arg, flag = argument_of(f), f'--{f.name.replace("_", "-")}'
        choices = arg.get('choices')
        if choices is not None and value not in choices:
            raise UsageError(f'{what}: {f.name} must be one of {", ".join(map(str, choices))}, got '
                             f'{value!r} (as {flag} takes).')
        kind = option_of(f).type
        wanted = getattr(kind, 'wanted', None)
        if kind is None or wanted is None:
            continue
        nargs = arg.get('nargs')
        items = value if isinstance(value, (list, tuple)) and nargs not in (None, '?') else [value]
        if isinstance(nargs, int) and len(items) != nargs:
            raise UsageError(f'{what}: {f.name} takes {nargs} values (as {flag} does), got {value!r}.')
        for item in items:
            try:
                if isinstance(item, bool) or not isinstance(item, str if kind.kind is str else (int, float)):
                    raise argparse.ArgumentTypeError(f'must be {wanted}, got {item!r}')
                kind(item)
            except argparse.ArgumentTypeError as e:
                raise UsageError(f'{what}: {f.name} {e} (as {flag} takes).') from None


def recipe_for(recipe: Optional[str], dataset: Optional[str], on_cpu: bool = False) -> str:
    """The recipe a run uses: ``--recipe`` if given, else its dataset's (on a CPU, the dataset's CPU recipe where it
    has one: CIFAR-10's GPU recipe trains at batch 2048 for 200 epochs, its CPU one at 256 for 44; MNIST's at 1024
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
    import torch  # lazy: --help answers without it
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
    explicit = vars(build_parser(suppress=True).parse_known_args([a for a in argv if a not in ('-h', '--help')])[0])
    parser = build_parser()
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
    explicit = vars(build_parser(suppress=True).parse_args(argv))  # the one parse: what was given, nothing else
    saved = _resumed_options(explicit) if 'resume' in explicit else {}
    dataset = explicit.get('dataset', saved.get('dataset'))
    if not dataset:
        raise UsageError('--dataset is required: mnist, cifar10, imagenet, an image folder path or a timm dataset name.')
    model = explicit.get('model', saved.get('model'))
    if not model:
        raise UsageError('--model is required, e.g. vit_minimal_std_mlp_6x1 (see timm.list_models("vit_minimal*")).')
    recipe_name = recipe_for(explicit.get('recipe', saved.get('recipe')), dataset,
                             training_device(bool({**saved, **explicit}.get('cpu'))) == 'cpu')
    recipe = load_recipe(recipe_name)
    names = {f.name for f in all_fields()}
    unknown = sorted(set(recipe) - names)
    if unknown:
        raise UsageError(f'Recipe {recipe_name} has unknown keys {unknown}; keys are option names such as '
                         f'lr, batch_size, epochs.')
    check_option_types(recipe, f'Recipe {recipe_name}')
    # a resumed run's args.yaml holds every option as its start resolved it; an option it lacks is younger than the
    # run, which therefore trained as with the option's built-in default (not with the recipe's value of today)
    resolved = dict(quiet=False, verbose=False, **option_defaults(saved or recipe))  # -q, -v: OneLineParser's
    resolved.update(recipe if not saved else {})
    resolved.update({k: v for k, v in saved.items() if k in names})
    resolved.update(explicit)
    _minimal_weight_init(resolved, model, explicit)
    resolved['recipe'] = recipe_name
    resolved['resume'] = explicit.get('resume')
    args = argparse.Namespace(**resolved)
    if args.log_with:
        check_trackers(args.log_with)
    return args, Provenance(recipe=recipe_name, recipe_values=recipe, explicit=tuple(sorted(explicit)))


def _resumed_options(explicit: Dict[str, Any]) -> Dict[str, Any]:
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
        check_option_types(saved, str(args_file))
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
    from timm.models import split_model_name_tag  # lazy: --help answers without it
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
    import timm  # lazy: --help answers without it
    from timm.models import split_model_name_tag  # lazy: --help answers without it
    kwargs = args.model_kwargs or {}
    for key in kwargs:
        if key in TRAINER_MODEL_KWARGS:
            raise UsageError(f'--model-kwargs {key}=...: {TRAINER_MODEL_KWARGS[key]}.')
    if is_minimal(split_model_name_tag(args.model)[0]):
        from ..models.vit_minimal import MODEL_KEYWORDS  # lazy: --help answers without it
        factory = [k for k in inspect.signature(timm.create_model).parameters if k not in ('model_name', 'kwargs')]
        allowed = [k for k in (*MODEL_KEYWORDS, 'weight_init', *factory) if k not in TRAINER_MODEL_KWARGS]
        unknown = sorted(set(kwargs) - set(allowed))
        if unknown:
            names = ', '.join(k or repr(k) for k in unknown)
            raise UsageError(f"--model-kwargs {names}: not a keyword of {args.model}; it takes {', '.join(allowed)}.")


def check_numbers(args: argparse.Namespace) -> None:
    """Every numeric option of a resolved run within its range (the fields' types), however the options were
    made (the command line, a recipe, ``args.yaml`` or ``train(args)`` from Python)."""
    check_option_types(vars(args), 'options')
