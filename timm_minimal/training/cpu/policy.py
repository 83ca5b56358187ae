"""How a run trains on the CPU: bf16 where it pays, compilation for a long enough run, the threads of one process
and the processes of a split (``cpu.split`` measures and launches them). The rules live here; ``plan.resolve_plan``
applies them once per run, and ``args.yaml`` keeps the process count and the threads, so a resumed run keeps them."""
import json
import logging
import os
import signal
from typing import Any, Dict, Optional, Sequence

from timm.models import split_model_name_tag

from ...cli import Failure, UsageError
from ...machine import cpu_has_bf16, default_cache_dir
from ..data.loading import load_run_data
from ..options import CPU_COMPILE_MIN_IMAGES, Options, PlannedOptions
from ..run.clock import LAUNCHED_AT_ENV, launched_at
from ...models.paper import is_minimal, parse_arch
from . import split

__all__ = ['minimal_with_mlp', 'cpu_bf16_pays', 'cpu_precision', 'default_compile', 'cpu_decision',
           'cpu_threads', 'run_split', 'SPLIT_STATUS_ENV', 'SPLIT_RATES_ENV']

_logger = logging.getLogger(__name__)


def minimal_with_mlp(model: Optional[str], model_kwargs: Optional[Dict[str, Any]] = None) -> bool:
    """Whether ``model`` is a minimal transformer with an MLP (``*_mlp_*``, or ``use_mlp`` set): the family whose
    step the MLP's matmuls dominate, which the CPU defaults below treat apart. Other timm models: False."""
    try:
        mlp = parse_arch(split_model_name_tag(model or '')[0])['mlp']
    except ValueError:
        return False
    return bool((model_kwargs or {}).get('use_mlp', mlp))


def cpu_bf16_pays(model: Optional[str], model_kwargs: Optional[Dict[str, Any]] = None) -> bool:
    """bf16 autocast by default on the CPU, where nothing measured it: for a minimal transformer, on a CPU with
    native bf16. Its bf16 step, the attention off SDPA there (``models.layers.sdpa_pays``), trained at 2.06x the
    fp32 step of ``sym_6x4`` and 1.80x that of ``std_mlp_6x1`` on an AVX512-BF16 EPYC
    (``benchmarks/cpu_modes_bf16_attention_avx512.md``). Other timm models are not measured and stay in fp32; a long
    run measures it (``cpu_decision``). ``model_kwargs``: those the run builds the model with (unused here)."""
    return is_minimal(split_model_name_tag(model or '')[0]) and cpu_has_bf16()


def cpu_precision(model: Optional[str], model_kwargs: Optional[Dict[str, Any]] = None) -> str:
    """The autocast of a CPU run that names none (``--mixed-precision``, accelerate's environment): bf16 where it
    pays (``cpu_bf16_pays``), else 'no'."""
    return 'bf16' if cpu_bf16_pays(model, model_kwargs) else 'no'


def default_compile(given: Optional[bool], model: str, model_kwargs: Optional[Dict[str, Any]], device_type: str,
                    run_images: Optional[int]) -> bool:
    """``--compile``/``--no-compile`` where ``given``; else always on a CUDA GPU, and on the CPU for the minimal
    transformers with an MLP in a run of at least ``CPU_COMPILE_MIN_IMAGES`` training images (epochs x images per
    epoch; None, unknown before the data are read, counts as short), long enough to repay a cold compilation. The
    attention-only models gain nothing from it on the CPU."""
    if given is not None:
        return given
    if device_type == 'cuda':
        return True
    return (device_type == 'cpu' and minimal_with_mlp(model, model_kwargs)
            and (run_images or 0) >= CPU_COMPILE_MIN_IMAGES)


def cpu_decision(given: PlannedOptions, options: Options, model: str, run_images: Optional[int],
                 bf16: Optional[bool], explicit: bool = True):
    """How a CPU run of ``model`` trains (a ``cpu.split.Decision``: processes, compiled, padded, bf16), from the
    system options as ``given`` and the run's ``options``; ``bf16``: the precision the run named, None where it
    named none.

    - ``--cpu-processes`` where set; compilation then follows ``--compile`` or the rule of ``default_compile``.
    - A short run (under ``SPLIT_MIN_IMAGES`` training images: the tests and the demo among them), a machine of
      one core and a batch that the cores do not divide pay no probe: one process, compiled by the same rule.
    - Else what ``cpu.split.decide`` measured here on the run's own step (its model kwargs): bf16 or fp32 on a CPU
      with native bf16 unless the run named a precision, one process or one per core, eager and compiled unless
      ``--compile``/``--no-compile`` chose, the heads padded and not unless ``--pad-heads``/``--no-pad-heads``
      chose; kept in the machine's cache folder (``$TIMM_MINIMAL_CACHE``), which ``--cache-dir`` does not move.

    Elsewhere the heads are padded unless ``--no-pad-heads``, and the precision is the one named, else bf16 where it
    pays by the rule (``cpu_bf16_pays``).

    A resumed run keeps its count (and its compilation) from ``args.yaml``, on fewer cores too (said), unless
    ``explicit`` (given on this command line) asks for another; a count above the core budget is refused otherwise."""
    budget = split.core_budget()
    run, kwargs = options.run, options.model.model_kwargs
    ruled = default_compile(given.compile, model, kwargs, 'cpu', run_images)
    ruled_bf16 = cpu_bf16_pays(model, kwargs) if bf16 is None else bf16
    decision = split.Decision(given.cpu_processes or 1, ruled, given.pad_heads is not False, bf16=ruled_bf16)
    # a split is one process per core, and only where the batch divides into them
    if given.cpu_processes is None and (run_images or 0) >= split.SPLIT_MIN_IMAGES and budget > 1 and \
            run.batch_size % budget == 0:
        # the machine's cache, not --cache-dir: the answer describes this CPU, not where a dataset is decoded, so a
        # run with a new data cache does not measure the machine again
        decision = split.decide(model, run.batch_size, default_cache_dir(), model_kwargs=kwargs,
                                bf16=None if bf16 is None and cpu_has_bf16() else ruled_bf16, compiled=given.compile,
                                padded=given.pad_heads, before=lambda: load_run_data(run))
    if decision.processes > budget:
        if run.resume is None or explicit:
            raise UsageError(f'--cpu-processes {decision.processes} is more than the {budget} core(s) this run may '
                             f'use (its CPU affinity, capped by OMP_NUM_THREADS); give at most {budget}.')
        _logger.info(f'The resumed run trained as {decision.processes} processes; this machine gives it {budget} '
                     f'core(s), so they share them (slower, the same training). --cpu-processes {budget} changes the '
                     f'split.')
    if run.batch_size % decision.processes:  # refused once, here, before any process of the split starts
        raise UsageError(f'--batch-size {run.batch_size} must be a multiple of --cpu-processes {decision.processes}: '
                         f'each process trains an equal share of every batch.')
    return decision


def cpu_threads(given: Optional[int]) -> int:
    """The torch threads of a one-process CPU run: ``--threads`` (``given``), else OMP_NUM_THREADS where set, else
    the cores that other work leaves free at the start (``cpu.split.free_cores``)."""
    if given is not None:
        return given
    budget = split.core_budget()
    threads = budget if 'OMP_NUM_THREADS' in os.environ or budget == 1 else split.free_cores(budget)
    if threads < budget:
        _logger.info(f'Other work keeps {budget - threads} of the {budget} cores busy: training on {threads} '
                     f'thread(s) (--threads sets the count).')
    return threads


def run_split(plan: Any, argv: Sequence[str]) -> int:
    """The run of ``plan`` (a ``plan.RunPlan``) as ``plan.processes`` processes of ``cores / processes`` threads each
    (``cpu.split``); its exit status, the main process's (2 bad input, 3 diverged), which that process writes into a
    pipe that it alone inherits (nothing on disk outlives a launcher that is killed). A process that is killed, or
    ends without a status, is named in one line with the command that resumes the run."""
    run, processes = plan.options.run, plan.processes
    threads = max(1, split.core_budget() // processes)
    # the data are found (downloaded, extracted) here, before the processes: a missing dataset is one line, not one
    # per process
    load_run_data(run, processes)
    _logger.info(f'Training as {processes} processes x {threads} thread(s) on the CPU (--cpu-processes 1 for one).')
    read_end, write_end = os.pipe()
    with os.fdopen(read_end, 'r') as status:
        env = dict(os.environ, OMP_NUM_THREADS=str(threads), **{SPLIT_STATUS_ENV: str(write_end),
                                                                SPLIT_RATES_ENV: json.dumps(plan.cpu_rates),
                                                                LAUNCHED_AT_ENV: repr(launched_at())})
        try:
            rank, rc = split.run_split_processes(argv, processes, env, compiled=plan.compile, padded=plan.pad_heads,
                                                 bf16=plan.precision == 'bf16', main_fds=(write_end,))
        finally:
            os.close(write_end)  # the processes have ended: the read below meets the end of the pipe
        text = status.read().strip()
    if rc < 0 or (rc and not text.isdigit()):  # killed, or ended without a status: the main one cannot say why
        how = f'was ended by signal {-rc} ({signal.Signals(-rc).name})' if rc < 0 else f'exited with status {rc}'
        raise Failure(f'process {rank} of the {processes} of this run {how}; the others were stopped. Resume it from '
                      f'its last checkpoint: timm-minimal-train --resume {run.output}')
    return int(text) if text.isdigit() else 0


SPLIT_STATUS_ENV = 'TIMM_MINIMAL_SPLIT_STATUS'
SPLIT_RATES_ENV = 'TIMM_MINIMAL_SPLIT_RATES'  # what the decision measured, for the run record of the split's processes
