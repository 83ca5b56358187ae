"""How a run trains on the CPU: bf16 where it pays, compilation for a long enough run, the threads of one process
and the processes of a split (``cpu_split`` measures and launches them). Each choice is kept in the run's options
(``args.yaml``), so a resumed run keeps it."""
import argparse
import os
import tempfile
from pathlib import Path
from typing import Any, Dict, Optional, Sequence

import torch
from timm.models import split_model_name_tag

from ..cli import EXIT_FAILURE, UsageError
from ..models.datasets import dataset_for_kind, tag_for_kind
from .cli import CPU_COMPILE_MIN_IMAGES, trains_on_cpu
from .data import dataset_kind, load_dataset

__all__ = ['cpu_has_bf16', 'minimal_with_mlp', 'cpu_bf16_pays', 'cpu_precision', 'default_compile', 'cpu_processes',
           'model_for_probe', 'cpu_threads', 'run_split', 'SPLIT_STATUS_ENV']


def cpu_has_bf16() -> bool:
    """Whether this CPU multiplies bf16 natively (AVX512-BF16 or AMX); elsewhere bf16 autocast is emulated and slow."""
    probes = ('_is_avx512_bf16_supported', '_is_amx_tile_supported')
    return any(getattr(torch.cpu, name, lambda: False)() for name in probes)


def minimal_with_mlp(model: Optional[str], model_kwargs: Optional[Dict[str, Any]] = None) -> bool:
    """Whether ``model`` is a minimal transformer with an MLP (``*_mlp_*``, or ``use_mlp`` set): the family whose
    step the MLP's matmuls dominate, which the CPU defaults below treat apart. Other timm models: False."""
    from ..models.paper import parse_arch
    try:
        mlp = parse_arch(split_model_name_tag(model or '')[0])['mlp']
    except ValueError:
        return False
    return bool((model_kwargs or {}).get('use_mlp', mlp))


def cpu_bf16_pays(model: Optional[str], model_kwargs: Optional[Dict[str, Any]] = None) -> bool:
    """bf16 autocast by default on the CPU: for a minimal transformer with an MLP, on a CPU with native bf16.

    As measured side by side in ``benchmarks/cpu_modes.md``: the MLP's matmuls dominate the step of the ``*_mlp_*``
    models and bf16 runs them faster, while the attention-only models spend their step in small ops that bf16
    slows down. Other timm models are not measured and stay in fp32."""
    return minimal_with_mlp(model, model_kwargs) and cpu_has_bf16()


def cpu_precision(args: argparse.Namespace) -> str:
    """The autocast of a CPU run: ``--mixed-precision`` or accelerate's environment where given, else bf16 where it
    pays (``cpu_bf16_pays``), else 'no'."""
    given = args.mixed_precision or os.environ.get('ACCELERATE_MIXED_PRECISION')
    if given:
        return given
    return 'bf16' if cpu_bf16_pays(args.model, args.model_kwargs) else 'no'


def default_compile(args: argparse.Namespace, device_type: str, train_images: int) -> bool:
    """``--compile``/``--no-compile`` where given; else always on a CUDA GPU, and on the CPU for the minimal
    transformers with an MLP in a run of at least ``CPU_COMPILE_MIN_IMAGES`` training images (epochs x images per
    epoch), long enough to repay a cold compilation. The attention-only models gain nothing from it on the CPU."""
    if args.compile is not None:
        return args.compile
    if device_type == 'cuda':
        return True
    return (device_type == 'cpu' and minimal_with_mlp(args.model, args.model_kwargs)
            and args.epochs * train_images >= CPU_COMPILE_MIN_IMAGES)


def cpu_processes(args: argparse.Namespace, explicit: bool = True) -> int:
    """How many processes this run trains as: 1 on a GPU, inside a launched process group or for a short run;
    else ``--cpu-processes`` or, unset, what ``cpu_split.decide`` measured on this machine. The count is kept in
    ``args`` (and so in ``args.yaml``): a resumed run keeps it, on fewer cores too (said), unless ``explicit`` (given on
    this command line) asks for another. A count above the core budget is refused otherwise."""
    from .cpu_split import SPLIT_MIN_IMAGES, core_budget, decide
    from .data import default_cache_dir
    if 'WORLD_SIZE' in os.environ or not trains_on_cpu(vars(args)):
        return 1
    if args.cpu_processes is None:
        info = dataset_for_kind(dataset_kind(args.dataset))
        images = min(args.train_subset or info.train_samples, info.train_samples) if info else 0
        long_run = args.epochs * images >= SPLIT_MIN_IMAGES and core_budget() > 1
        step = dict(model_kwargs=args.model_kwargs, bf16=cpu_precision(args) == 'bf16',
                    compiled=default_compile(args, 'cpu', images))
        args.cpu_processes = decide(model_for_probe(args), args.batch_size,
                                    Path(args.cache_dir) if args.cache_dir else default_cache_dir(),
                                    **step) if long_run else 1
    budget = core_budget()
    if args.cpu_processes > budget:
        if args.resume is None or explicit:
            raise UsageError(f'--cpu-processes {args.cpu_processes} is more than the {budget} core(s) this run may use '
                             f'(its CPU affinity, capped by OMP_NUM_THREADS); give at most {budget}.')
        print(f'The resumed run trained as {args.cpu_processes} processes; this machine gives it {budget} core(s), so '
              f'they share them (slower, the same training). --cpu-processes {budget} changes the split.', flush=True)
    return args.cpu_processes


def model_for_probe(args: argparse.Namespace) -> str:
    """The model the split's probe times: the run's, with the tag the trainer gives an untagged one
    (``tag_for_kind``: its dataset's, else ImageNet's geometry)."""
    arch, tag = split_model_name_tag(args.model)
    tag = tag or tag_for_kind(dataset_kind(args.dataset))
    return f'{arch}.{tag}' if arch.startswith('vit_minimal') else arch


def cpu_threads(args: argparse.Namespace) -> None:
    """The torch threads of a one-process CPU run: ``--threads``, else OMP_NUM_THREADS where set, else the cores
    that other work leaves free at the start (``cpu_split.free_cores``); kept in ``args`` (and so ``args.yaml``): a
    resumed run keeps it, as it keeps its process count. A process of a launched group keeps what it was given."""
    from .cpu_split import core_budget, free_cores
    if 'WORLD_SIZE' in os.environ or not trains_on_cpu(vars(args)):
        return
    if args.threads is None:
        budget = core_budget()
        args.threads = budget if 'OMP_NUM_THREADS' in os.environ or budget == 1 else free_cores(budget)
        if args.threads < budget:
            print(f'Other work keeps {budget - args.threads} of the {budget} cores busy: training on {args.threads} '
                  f'thread(s) (--threads sets the count).', flush=True)
    torch.set_num_threads(args.threads)


def run_split(args: argparse.Namespace, argv: Sequence[str], processes: int) -> int:
    """This run as ``processes`` processes of ``cores / processes`` threads each (``cpu_split``); its exit status,
    the main process's (2 bad input, 3 diverged), which it leaves in a file."""
    from .cpu_split import core_budget, run_split_processes
    threads = max(1, core_budget() // processes)
    # the data are found (downloaded, extracted) here first: a missing dataset is one line, not one per process
    load_dataset(args.dataset, args.data_dir, download=not args.no_download, cache_dir=args.cache_dir,
                 train_split=args.train_split, eval_split=args.val_split, num_classes=args.num_classes, seed=args.seed,
                 batch_size=args.batch_size // processes, download_hint='drop --no-download')
    print(f'Training as {processes} processes x {threads} thread(s) on the CPU (--cpu-processes 1 for one).',
          flush=True)
    with tempfile.TemporaryDirectory(prefix='timm-minimal-split-') as tmp:
        status_file = Path(tmp) / 'status'
        env = dict(os.environ, OMP_NUM_THREADS=str(threads), **{SPLIT_STATUS_ENV: str(status_file)})
        rc = run_split_processes(argv, processes, env)
        text = status_file.read_text().strip() if status_file.is_file() else ''
    return int(text) if text.isdigit() else (EXIT_FAILURE if rc else 0)


SPLIT_STATUS_ENV = 'TIMM_MINIMAL_SPLIT_STATUS'
