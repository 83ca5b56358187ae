"""The plan of a run: what ``timm-minimal-train`` decides once, after its options are resolved, and every later
stage reads.

The options come from ``cli.parse_args`` (defaults < recipe < a resumed run's ``args.yaml`` < command line).
``resolve_plan`` then decides, once and in this order: the dataset kind; the model's full name (an untagged minimal
transformer takes its dataset's tag); the device; the recipe (the one ``cli.parse_args`` chose for that device); the
precision; compilation and its mode; the head padding; and, on the CPU, the processes and the threads. The stages
after it (the accelerator, the model, the loop, the run record) read the plan, as transformers' modules read one
config, and each takes the typed option groups it reads (``RunPlan.options``, ``options.Options``). Those groups do not
hold the options the plan decided (``options.PLANNED``), so no stage can read an undecided value. ``args.yaml``
records the options as given, with the process count, the threads, the compilation and the padding decided here, so
a resumed run keeps them.
"""
import argparse
import json
import os
from dataclasses import dataclass, field
from typing import Any, Dict, Optional

import timm
import torch
from timm.models import split_model_name_tag

from ..cli import UsageError, env_number
from ..models.datasets import dataset_for_kind, tag_for_kind
from ..models.paper import is_minimal
from .cli import Provenance, check_model_kwargs, check_numbers, training_device
from .cpu.policy import SPLIT_RATES_ENV, cpu_decision, cpu_precision, cpu_threads, default_compile
from .data.names import dataset_kind
from .options import PLANNED, Options, PlannedOptions, RunOptions, group_of

__all__ = ['RunPlan', 'PLANNED', 'resolve_plan', 'known_architecture', 'resolve_model_name', 'planned_images']


@dataclass(frozen=True)
class RunPlan:
    """What a run decided, once: read by every stage after the options are resolved."""
    dataset_kind: str  # 'mnist', 'cifar10', 'imagenet', 'folder', ... (``data.names.dataset_kind``)
    model: str  # the full timm name; an untagged minimal transformer carries its dataset's tag
    recipe: Optional[str]  # the recipe the options started from
    device: str  # the device type the run trains on: 'cuda', 'xpu', 'mps' or 'cpu'
    precision: str  # accelerate's mixed precision: 'no', 'bf16' or 'fp16'
    compile: bool  # torch.compile the training forward
    compile_mode: Optional[str]  # torch.compile's mode (None: its default)
    pad_heads: bool  # the attention pads its heads in training (``models.layers.set_head_padding``)
    processes: Optional[int]  # the CPU split's process count as args.yaml keeps it; None where none was decided
    starts_split: bool  # this command starts ``processes`` processes of the run itself (the CPU split)
    threads: Optional[int]  # torch threads of this process; None: it keeps what it was given (a launched group)
    options: Options = field(repr=False)  # the other options, one typed group per stage
    given: PlannedOptions = field(repr=False)  # the planned options as they were given
    provenance: Provenance = field(repr=False, default_factory=Provenance)  # where the options came from
    cpu_rates: Optional[Dict[str, float]] = None  # what the CPU decision measured per candidate (img/s), if it did

    def saved_options(self) -> Dict[str, Any]:
        """The run's options for ``args.yaml``: as given, with what the CPU decision chose (the process count, the
        compilation, the head padding, the precision) and the threads, so that a resume trains the same way."""
        saved = {**self.options.values(), **self.given.values(), 'cpu_processes': self.processes,
                 'threads': self.threads}
        if self.processes is not None:  # the CPU decision may have measured these too
            saved.update(compile=self.compile, pad_heads=self.pad_heads, mixed_precision=self.precision)
        saved.pop('resume')  # how this launch started is not the run's
        return saved


def known_architecture(name: str) -> str:
    """The architecture of ``name`` (its tag set aside), refused in one line where timm knows none such."""
    arch = split_model_name_tag(name)[0]
    if not timm.is_model(arch):
        minimal = ', '.join(timm.list_models('vit_minimal*'))
        raise UsageError(f"Unknown model '{arch}'. The minimal transformers are: {minimal} "
                         f"(any other timm model name works too).")
    return arch


def resolve_model_name(name: str, kind: str) -> str:
    """``name`` as timm creates it: a known architecture (``known_architecture``), and for an untagged minimal
    transformer the tag of its dataset kind (``tag_for_kind``: the dataset's own, else ImageNet's geometry)."""
    arch, tag = known_architecture(name), split_model_name_tag(name)[1]
    if not tag and is_minimal(arch):
        tag = tag_for_kind(kind)
    return f'{arch}.{tag}' if tag else arch


def planned_images(run: RunOptions, kind: str) -> Optional[int]:
    """The training images the run will see (epochs x images per epoch) from the dataset's facts, capped by
    ``--train-subset``; None for a dataset whose size is known only once it is read (image folders, timm
    datasets), which the length-based defaults below then treat as short."""
    info = dataset_for_kind(kind)
    if info is None:
        return None
    return run.epochs * min(run.train_subset or info.train_samples, info.train_samples)


def _asked_precision(given: PlannedOptions, device: str) -> Optional[str]:
    """``--mixed-precision``, else accelerate's environment; None where neither names one."""
    asked = given.mixed_precision or os.environ.get('ACCELERATE_MIXED_PRECISION')
    if asked == 'fp16' and device == 'cpu':  # accelerate would train in fp32, saying nothing
        raise UsageError('--mixed-precision fp16 does not run on a CPU (the run would train in fp32); use bf16 or no.')
    return asked or None


def _precision(given: PlannedOptions, model_kwargs: Dict[str, Any], device: str) -> str:
    """The precision named (``_asked_precision``), else bf16 on a GPU that has it, and on the CPU where it pays
    (``cpu.policy.cpu_precision``; a long CPU run measures it, ``cpu.policy.cpu_decision``); 'no' elsewhere."""
    asked = _asked_precision(given, device)
    if asked:
        return asked
    if device == 'cuda':
        return 'bf16' if torch.cuda.is_bf16_supported() else 'no'
    return cpu_precision(given.model, model_kwargs) if device == 'cpu' else 'no'


def _split_rates() -> Optional[Dict[str, float]]:
    """The rates a CPU split's launcher measured (``SPLIT_RATES_ENV``); None where the variable is unset or holds
    anything but an object of numbers (it is a record, never trusted as it is)."""
    try:
        rates = json.loads(os.environ.get(SPLIT_RATES_ENV) or 'null')
    except ValueError:
        return None
    ok = isinstance(rates, dict) and all(isinstance(v, (int, float)) for v in rates.values())
    return rates if ok else None


def resolve_plan(args: argparse.Namespace, provenance: Optional[Provenance] = None, split: bool = True) -> RunPlan:
    """The plan of the run ``args`` (``cli.parse_args``'s options) describes, checked: every number in its range.
    ``split``: whether this command may measure and start a CPU split (``timm-minimal-train`` does; ``train(args)``
    from Python trains in this process)."""
    check_numbers(args)
    check_model_kwargs(args)
    provenance = provenance or Provenance(recipe=args.recipe)
    given, options = group_of(PlannedOptions, vars(args)), Options.from_values(vars(args))
    kind = dataset_kind(options.run.dataset)
    model = resolve_model_name(given.model, kind)
    device = training_device(given.cpu)
    kwargs = options.model.model_kwargs
    precision = _precision(given, kwargs, device)
    images = planned_images(options.run, kind)
    compiled = default_compile(given.compile, model, kwargs, device, images)
    launched = 'WORLD_SIZE' in os.environ  # a process of a group that accelerate, torchrun or the split started
    world = env_number('WORLD_SIZE', int, 1, low=1)
    mode = given.compile_mode or ('reduce-overhead' if device == 'cuda' and world == 1 else None)
    processes, threads, padded = given.cpu_processes, given.threads, given.pad_heads is not False
    rates = _split_rates() if launched else None  # a split's process: what its launcher measured
    if device == 'cpu' and not launched and split:
        asked = _asked_precision(given, device)
        decision = cpu_decision(given, options, model, images, asked == 'bf16' if asked else None,
                                explicit='cpu_processes' in provenance.explicit)
        processes, compiled, padded, rates = decision[:4]
        precision = asked or ('bf16' if decision.bf16 else 'no')
        threads = cpu_threads(given.threads) if processes == 1 else None
    return RunPlan(dataset_kind=kind, model=model, recipe=provenance.recipe, device=device, precision=precision,
                   compile=compiled, compile_mode=mode, pad_heads=padded, processes=processes,
                   starts_split=bool(processes and processes > 1 and device == 'cpu' and not launched and split),
                   threads=threads, cpu_rates=rates, options=options, given=given, provenance=provenance)
