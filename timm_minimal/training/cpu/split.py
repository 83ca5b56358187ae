"""One training run on a multi-core CPU as data-parallel processes, where that is measured faster here.

At these model sizes torch's intra-op threads leave most of a second core idle: on 2 cores two 1-thread processes
train 1.2-2.4x the images per second of one 2-thread process (``benchmarks/cpu_modes.md``), by how much depending
on the CPU. So ``timm-minimal-train`` on a CPU splits a long run (``SPLIT_MIN_IMAGES`` training images or more)
into processes (accelerate's multi-process CPU set-up, gloo), each with its share of the cores as threads, when a
measurement on this machine says that pays:

- the cores a run may use are its CPU affinity, or ``OMP_NUM_THREADS`` where that is set (so ``reproduce --jobs N``,
  which gives each job ``cores / N`` threads, never makes N x processes x threads exceed the cores);
- first, on a CPU with native bf16 where the run names no precision, bf16 autocast against fp32, the two taking
  turns in one process (``bf16_speedup``, with a check that bf16 computes fp32's loss); then, in fp32, the head
  padding the same way (``padding_speedup``), of the compiled step where one will be measured (the eager step then
  keeps its heads padded);
- the candidates are 1 process with all of them as threads and one process per core, eager, the two taking turns
  (``split_speedup``), then compiled at each count (where the run leaves compilation to the decision); each is
  measured as the run's own training step (its model and keywords at its batch, in the chosen precision), the
  processes of a split at once as one DDP group, their gradients averaged every step as the run averages them
  (``measure``);
- every measurement of a decision runs in the same probe processes, one per core, each importing torch once
  (``probes``);
- bf16, a split, or a compilation, must be measured at least 5% faster (``MARGIN``), or the run stays one eager fp32
  process;
- the answer is kept in the machine's cache folder per CPU (model name, flags, cores), torch version, model, batch
  and step, so a machine measures once (a measurement disturbed by other load is not kept); ``--cpu-processes N``,
  ``--compile``/``--no-compile``, ``--pad-heads``/``--no-pad-heads`` and ``--mixed-precision`` override it, and every
  launch records what ran in ``run.json``.
"""
import contextlib
import functools
import hashlib
import json
import logging
import math
import os
import signal
import socket
import statistics
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, NamedTuple, Optional, Sequence, Tuple

import psutil
import timm
import torch
import torch.distributed as dist
from torch.distributed import TCPStore

from ...cli import env_number, timed_progress
from ...machine import cpu_signature, usable_cores
from ..options import FUSED_ADAM_DEVICES
from ..run.files import read_regular_file, write_json_atomic
from .probes import die_with_parent, probe_pool, run_calls
from ...models.layers import set_head_padding

__all__ = ['Decision', 'SPLIT_MIN_IMAGES', 'core_budget', 'bare_step_rate', 'padding_speedup', 'bf16_speedup',
           'split_speedup', 'measure', 'measure_padding', 'measure_bf16', 'measure_split', 'decide',
           'worker_command', 'run_split_processes',
           'end_process_group', 'NEVER_FREED']

_logger = logging.getLogger(__name__)

SPLIT_MIN_IMAGES = 500_000  # a shorter run (the tests, the demo) stays one process: a split costs seconds to start
# timed, after PROBE_WARMUP steps. In probe processes that keep what a step frees (``probes.serve``), 3 s measured what
# 6 s did, the two lengths taking turns three times in one pool on a 2-core AMX Xeon (``scripts/probe_length.py``):
# medians 1.04x (1 x 2 compiled) and 1.03x (2 x 1 compiled) for the MNIST model in fp32, 1.00x and 0.99x for the
# CIFAR-10 one in bf16, each within its rounds' spread and the same for both counts
PROBE_SECONDS = 3.0
PROBE_WARMUP = 5
PROBE_TIMEOUT = 120.0  # seconds for all the probes of one candidate together
# what is measured in turns (bf16 against fp32, the head padding, one process against a split): rounds of one block
# of steps each (``_speedup_in_turns``). Half-second blocks measured what one-second ones did, in about 0.6 of the
# time (a 2-core AMX Xeon, alternating, three of each for the MNIST model: bf16 0.87-0.89x fp32 against 0.88-0.92x,
# 2 x 1 0.98-1.02x 1 x 2 against 0.97-0.99x; two of each for the CIFAR-10 one: 1.24x against 1.25-1.27x, 1.12-1.17x
# against 1.14-1.24x).
TURN_ROUNDS = 8
TURN_BLOCK_SECONDS = 0.5
PROBE_START = 5.0  # seconds for the probe processes to import torch and timm, all at once (``probes``)
# What a split's processes never free (the DDP models of the probe processes, the run of a split run's process), left
# to the process's end without its interpreter's cleanup (``_run_probes``, ``training.train._exit``): on torch 2.13
# freeing one hung at random (3 probes in 30), its reducer freeing the gloo group, which joins its worker threads with
# the GIL held while a worker waits for the GIL to free a tensor of its last work.
NEVER_FREED: List[Any] = []
# how the candidates were measured, part of the cache key: a split's processes as one DDP group (``measure``), the
# head padding in turns in one process (``measure_padding``), in processes whose allocator keeps what a step frees
# (``probes.serve``), as the trainer's does, with AdamW's fused kernel, as the trainer steps it, the compiled step's
# padding in turns
PROBE = 'ddp, padding in turns, freed memory kept, fused adamw, compiled padding in turns'
MARGIN = 1.05  # a split or a compilation must be measured this much faster: a tie keeps the simpler eager process


class Decision(NamedTuple):
    """How a CPU run trains: its process count, whether its step is compiled, whether its attention pads the
    heads (``models.layers.set_head_padding``) and whether it trains in bf16 autocast; ``rates``: the images per
    second each candidate measured ('2 x 1 compiled': ...), where the decision measured (now or from the cache)."""
    processes: int
    compiled: bool
    padded: bool = True
    rates: Optional[Dict[str, float]] = None
    bf16: bool = False


def _label(processes: int, threads: int, compiled: bool, padded: bool = True, bf16: bool = False) -> str:
    return (f'{processes} x {threads}{" compiled" if compiled else ""}{"" if padded else " unpadded"}'
            f'{" bf16" if bf16 else ""}')


def core_budget() -> int:
    """The cores this run may use: its CPU affinity, capped by ``OMP_NUM_THREADS`` where that is set."""
    cores = usable_cores()
    threads = env_number('OMP_NUM_THREADS', int, cores, low=1)
    return max(1, min(cores, threads))


def free_cores(budget: int, seconds: float = 0.3) -> int:
    """The cores of ``budget`` that other work leaves free now: the budget less the cores' measured busy share over
    ``seconds`` (this process sleeps meanwhile), at least one. On a machine busy with another job, one training
    thread beside it runs several times faster than two that fight it."""
    cores = sorted(os.sched_getaffinity(0)) if hasattr(os, 'sched_getaffinity') else None
    percents = psutil.cpu_percent(interval=seconds, percpu=True)
    if cores is not None and max(cores) < len(percents):
        percents = [percents[c] for c in cores]
    busy = sum(percents) / 100.0
    return max(1, min(budget, round(len(percents) - busy)))


def _training_step(model: str, batch: int, threads: int, model_kwargs: Optional[Dict[str, Any]], bf16: bool
                   ) -> Tuple[torch.nn.Module, Callable[..., torch.Tensor]]:
    """``model`` built with ``model_kwargs`` on ``threads`` threads, and its bare training step on ``batch`` random
    images (forward through the module it is given, cross-entropy, backward, AdamW's fused kernel as the trainer's;
    in bf16 autocast where ``bf16``, which a call may change), which returns the loss (without ``update``: the loss
    alone, no gradients recorded)."""
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    net = timm.create_model(model, **(model_kwargs or {})).train()
    x = torch.randn(batch, *net.pretrained_cfg['input_size'])
    y = torch.randint(0, max(1, net.num_classes), (batch,))
    opt = torch.optim.AdamW(net.parameters(), lr=1e-4, fused='cpu' in FUSED_ADAM_DEVICES)  # as the trainer's

    def step(forward: Callable[[torch.Tensor], torch.Tensor], update: bool = True, bf16: bool = bf16) -> torch.Tensor:
        opt.zero_grad(set_to_none=True)
        with torch.set_grad_enabled(update), torch.autocast('cpu', dtype=torch.bfloat16, enabled=bf16):
            loss = torch.nn.functional.cross_entropy(forward(x), y)
        if update:
            loss.backward()
            opt.step()
        return loss
    return net, step


def bare_step_rate(model: str, batch: int, threads: int, seconds: float, warmup: int = PROBE_WARMUP,
                   model_kwargs: Optional[Dict[str, Any]] = None, bf16: bool = False, compiled: bool = False,
                   padded: bool = True, group: Optional[Tuple[int, int, int]] = None) -> float:
    """Images per second of the bare training step (``_training_step``) of ``model`` built with ``model_kwargs``, as
    the run will take it: in bf16 autocast where ``bf16``, through ``torch.compile`` where ``compiled`` (the warm-up
    steps compile), with the heads padded where ``padded``. ``group`` (store port, rank, processes) makes it one
    process of a split: the model in DDP over gloo, its gradients averaged every step as the split's run averages
    them, through the store the caller serves on 127.0.0.1 (``measure``)."""
    net, step = _training_step(model, batch, threads, model_kwargs, bf16)
    set_head_padding(net, padded)
    with _in_group(net, group) as net:
        forward = _compiled(net) if compiled else net
        if compiled:
            _check_compiled(net, forward, step)
        steps, t0 = 0, None
        while True:
            step(forward)
            steps += 1
            if steps == warmup:
                t0 = time.perf_counter()
            elif t0 is not None and _all_done(time.perf_counter() - t0 > seconds and steps >= 2 * warmup, group):
                return (steps - warmup) * batch / (time.perf_counter() - t0)


def _compiled(net: torch.nn.Module) -> Callable[[torch.Tensor], torch.Tensor]:
    """``net`` through ``torch.compile`` with static shapes, as the trainer compiles it; the graphs of earlier probes
    in this process dropped (``probes``: a probe process measures one step after another)."""
    torch._dynamo.reset()
    return torch.compile(net, dynamic=False)


def _check_compiled(net: torch.nn.Module, forward: Callable[[torch.Tensor], torch.Tensor],
                    step: Callable[..., torch.Tensor]) -> None:
    """The first training step through the compiled ``forward`` (which compiles it) against the eager step's loss
    (``_check_loss``)."""
    expected = step(net, update=False).item()
    _check_loss('compiled', step(forward).item(), expected)


@contextlib.contextmanager
def _in_group(net: torch.nn.Module, group: Optional[Tuple[int, int, int]]) -> Iterator[torch.nn.Module]:
    """``net`` in DDP over gloo while the block runs, as rank ``group[1]`` of ``group[2]`` processes that meet at the
    store the caller serves on 127.0.0.1, port ``group[0]`` (``measure``); the group left after it, the model never
    freed (``NEVER_FREED``). ``net`` itself where ``group`` is None."""
    if group is None:
        yield net
        return
    port, rank, world = group
    store = dist.TCPStore('127.0.0.1', port, is_master=False, timeout=timedelta(seconds=PROBE_TIMEOUT))
    dist.init_process_group('gloo', store=store, rank=rank, world_size=world)
    split = torch.nn.parallel.DistributedDataParallel(net)
    try:
        yield split
    finally:
        dist.destroy_process_group()
        NEVER_FREED.append(split)


def padding_speedup(model: str, batch: int, threads: int, rounds: int = TURN_ROUNDS,
                    block_seconds: float = TURN_BLOCK_SECONDS, warmup: int = PROBE_WARMUP,
                    model_kwargs: Optional[Dict[str, Any]] = None, bf16: bool = False, compiled: bool = False
                    ) -> float:
    """How many times as fast the bare step of ``model`` (``_training_step``) trains with its heads padded as on
    their true width (> 1: padded is faster): one model in one process takes blocks of steps of about
    ``block_seconds`` in each padding in turn, the order reversed every round; the median of the rounds' ratios.
    Taking turns, the two see the same machine: measured one after the other, a probe of the same split gave 1,017
    and then 783 img/s on a quiet 2-core AVX2 EPYC, and such a drift chose the slower padding there; compiled
    probes of the two paddings ranked them one way in two MNIST decisions and the other way in the next on an AMX
    Xeon. Where ``compiled``, the step runs through ``torch.compile`` (a graph per padding, each checked first
    against the eager step's loss, as ``bare_step_rate`` checks it)."""
    net, step = _training_step(model, batch, threads, model_kwargs, bf16)
    forward = _compiled(net) if compiled else net
    for padded in ((True, False) if compiled else ()):  # each padding's graph compiled and checked before the turns
        set_head_padding(net, padded)
        _check_compiled(net, forward, step)

    def timed(padded: bool, steps: int) -> float:
        set_head_padding(net, padded)
        t0 = time.perf_counter()
        for _ in range(steps):
            step(forward)
        return time.perf_counter() - t0
    return _speedup_in_turns(timed, rounds, block_seconds, warmup, 1 / MARGIN)


def bf16_speedup(model: str, batch: int, threads: int, rounds: int = TURN_ROUNDS,
                 block_seconds: float = TURN_BLOCK_SECONDS, warmup: int = PROBE_WARMUP,
                 model_kwargs: Optional[Dict[str, Any]] = None, padded: bool = True) -> float:
    """How many times as fast the eager bare step of ``model`` trains in bf16 autocast as in fp32, the two taking
    turns in one model as ``padding_speedup`` does (the fp32 step with its heads ``padded`` or not). First the check
    that bf16 computes the fp32 step's loss, within ``_check_loss``'s tolerance: a RuntimeError where it does not."""
    net, step = _training_step(model, batch, threads, model_kwargs, False)
    set_head_padding(net, padded)
    _check_loss('bf16', step(net, update=False, bf16=True).item(), step(net, update=False).item(), 'fp32')

    def timed(bf16: bool, steps: int) -> float:
        t0 = time.perf_counter()
        for _ in range(steps):
            step(net, bf16=bf16)
        return time.perf_counter() - t0
    return _speedup_in_turns(timed, rounds, block_seconds, warmup, MARGIN)


def split_speedup(model: str, batch: int, budget: int, group: Tuple[int, int, int], rounds: int = TURN_ROUNDS,
                  block_seconds: float = TURN_BLOCK_SECONDS, warmup: int = PROBE_WARMUP,
                  model_kwargs: Optional[Dict[str, Any]] = None, bf16: bool = False, padded: bool = True
                  ) -> Optional[Tuple[float, float]]:
    """How many times as fast the eager bare step of ``model`` at ``batch`` trains as a split, ``group`` (store port,
    rank, processes) each on ``budget // processes`` threads with its share in DDP, as the first of them alone on
    ``budget`` threads with the whole batch: the two take turns as in ``padding_speedup``, the other processes
    waiting for the next block while the first trains alone. Measured one after the other, the two ranked the counts
    one way in one MNIST decision and the other way in the next on a 2-core AMX Xeon (4,398 against 4,049 img/s,
    then 4,480 against 4,889). The first process returns the median ratio and the images per second alone (the
    median of its blocks after the first); the others None."""
    world = group[2]
    net, step = _training_step(model, batch // world, budget // world, model_kwargs, bf16)
    set_head_padding(net, padded)
    with _in_group(net, group) as split:
        if group[1]:
            return _follow(split, step)
        whole, whole_step = _training_step(model, batch, budget, model_kwargs, bf16)
        set_head_padding(whole, padded)
        alone: List[float] = []

        def timed(in_split: bool, steps: int) -> float:
            dist.broadcast(torch.tensor([float(in_split), float(steps)]), 0)
            torch.set_num_threads(budget // world if in_split else budget)
            t0 = time.perf_counter()
            for _ in range(steps):
                if in_split:
                    step(split)
                else:
                    whole_step(whole)
            seconds = time.perf_counter() - t0
            if not in_split:
                alone.append(steps * batch / seconds)
            return seconds
        try:
            speedup = _speedup_in_turns(timed, rounds, block_seconds, warmup, 1 / MARGIN, MARGIN)
        finally:
            dist.broadcast(torch.tensor([-1.0, 0.0]), 0)
        return speedup, statistics.median(alone[1:])  # the first: the warm-up


def _follow(split: torch.nn.Module, step: Callable[..., torch.Tensor]) -> None:
    """A process of ``split_speedup`` after the first: the steps of each block the first broadcasts, in the split,
    none while the first trains alone, until it broadcasts the end."""
    block = torch.zeros(2)  # [in the split (1) or not (0), or the end (-1); steps]
    while True:
        dist.broadcast(block, 0)
        if block[0] < 0:
            return None
        for _ in range(int(block[1]) if block[0] else 0):
            step(split)


def _speedup_in_turns(timed: Callable[[bool, int], float], rounds: int, block_seconds: float, warmup: int,
                      *thresholds: float) -> float:
    """How many times as fast ``timed(True, steps)`` runs its steps as ``timed(False, steps)`` (each returns its
    seconds): blocks of about ``block_seconds`` in turn, the order reversed every round, after ``warmup`` steps of
    each; the median of the rounds' ratios. The decision compares it with ``thresholds``: once more than half of the
    ``rounds`` measured a ratio on one side of each, the median of all of them lies on that side whatever the others
    measure, so they are not run (on a 2-core AMX Xeon the medians of bf16 against fp32 were 0.89-0.96x for the MNIST
    model and 1.26-1.30x for the CIFAR-10 one, far from the margin)."""
    for side in (False, True):
        timed(side, warmup)
    steps = max(1, round(block_seconds / (timed(True, warmup) / warmup)))
    ratios = []
    for r in range(rounds):
        times = {side: timed(side, steps) for side in ((True, False) if r % 2 == 0 else (False, True))}
        ratios.append(times[False] / times[True])
        above = [sum(ratio >= threshold for ratio in ratios) for threshold in thresholds]
        if all(max(n, len(ratios) - n) > rounds // 2 for n in above):
            break
    return statistics.median(ratios)


def _check_loss(what: str, loss: float, reference: float, against: str = 'eager') -> None:
    """A compiled (or bf16) step must compute the eager (fp32) step's loss, within 5%: bf16 and fused kernels round
    differently. torch 2.14's inductor, generating AVX2 code, computed NaN for the padded 6-layer models at batch 64
    and more."""
    if not math.isfinite(loss) or abs(loss - reference) > 0.05 * abs(reference) + 1e-3:
        raise RuntimeError(f'the {what} step computes a loss of {loss:.4g} where the {against} step computes '
                           f'{reference:.4g}')


def _all_done(done: bool, group: Optional[Tuple[int, int, int]]) -> bool:
    """Whether every process of the probe is done: the processes of a split stop at the same step, or one would
    wait for the others' gradients forever (one flag summed across them, a few bytes a step)."""
    if group is None:
        return done
    flag = torch.tensor([float(done)])
    torch.distributed.all_reduce(flag)
    return bool(flag.item())


@contextlib.contextmanager
def _loopback_store(processes: int, timeout: timedelta) -> Iterator[int]:
    """A store for ``processes`` ranks, served by this process on the loopback address alone (torch's own listens on
    every interface, without authentication) on a port the system picks, while the block runs; yields the port."""
    with socket.socket() as sock:
        sock.bind(('127.0.0.1', 0))
        sock.listen(128)
        port = sock.getsockname()[1]
        store = TCPStore('127.0.0.1', port, world_size=processes, is_master=True,  # noqa: F841 (served while it lives)
                         master_listen_fd=sock.fileno(), wait_for_workers=False, timeout=timeout)
        yield port


def measure(model: str, batch: int, processes: int, threads: int, seconds: float = PROBE_SECONDS,
            **step: Any) -> float:
    """Images per second of ``processes`` concurrent processes of ``threads`` threads, each stepping its share of
    the global ``batch`` (``step``: ``bare_step_rate``'s model_kwargs, bf16, compiled, padded): what a run of that split
    trains, summed. The processes of a split are one process group, their gradients averaged every step as in the
    run (independent processes measured 1.1-1.3x what the split then trained: ``benchmarks/ddp_cpu_overhead.md``).
    No probe outlives this call: on a failure or a timeout of one, every one is ended."""
    timeout = _timeout(step)
    store = _loopback_store(processes, timedelta(seconds=timeout)) if processes > 1 else contextlib.nullcontext()
    with store as port:  # a split's processes meet there; bound until they have ended
        return _run_probes(model, batch, processes, threads, seconds, timeout, port, step)


def _timeout(step: Dict[str, Any]) -> float:
    """Seconds for the probes of one measurement together: more where they compile (a cold compilation on one thread
    takes a minute)."""
    return PROBE_TIMEOUT * (3 if step.get('compiled') else 1)


def _run_probes(model: str, batch: int, processes: int, threads: int, seconds: float, timeout: float,
                port: Optional[int], step: Dict[str, Any]) -> float:
    calls = [f'bare_step_rate({model!r}, {max(1, batch // processes)}, {threads}, {seconds}, '
             f'group={(port, rank, processes) if port is not None else None!r}, **{step!r})'
             for rank in range(processes)]
    return sum(run_calls(calls, timeout, f'the measurement of {processes} x {threads}'))


def measure_padding(model: str, batch: int, threads: int, **step: Any) -> float:
    """``padding_speedup`` in a probe process (``probes``) on ``threads`` threads (``step``: its model_kwargs, bf16,
    compiled)."""
    call = f'padding_speedup({model!r}, {batch}, {threads}, **{step!r})'
    return run_calls([call], _timeout(step), 'the measurement of the head padding')[0]


def measure_bf16(model: str, batch: int, threads: int, **step: Any) -> float:
    """``bf16_speedup`` in a probe process on ``threads`` threads (``step``: its model_kwargs)."""
    call = f'bf16_speedup({model!r}, {batch}, {threads}, **{step!r})'
    return run_calls([call], PROBE_TIMEOUT, 'the measurement of bf16 against fp32')[0]


def measure_split(model: str, batch: int, budget: int, **step: Any) -> Tuple[float, float]:
    """``split_speedup`` in ``budget`` probe processes (``step``: its model_kwargs, bf16, padded): how many times as
    fast ``budget`` processes of one thread train as one of ``budget`` threads, and that one's images per second."""
    with _loopback_store(budget, timedelta(seconds=PROBE_TIMEOUT)) as port:
        calls = [f'split_speedup({model!r}, {batch}, {budget}, {(port, rank, budget)!r}, **{step!r})'
                 for rank in range(budget)]
        speedup, alone = run_calls(calls, PROBE_TIMEOUT, f'the measurement of 1 x {budget} against {budget} x 1')[0]
    return speedup, alone


def _candidates(budget: int) -> List[int]:
    return [1] if budget < 2 else [1, budget]


# The record of every decision a machine kept is a few kB; a file far larger is not one (nor read whole). A decision
# measured at most a few candidates, and its rates travel to the processes of a split in their environment.
MAX_CACHE_BYTES = 1 << 20
MAX_RATES = 16


def _check_entry(key: str, entry: Any) -> None:
    """One kept decision: a whole ``processes`` of at least 1, true-or-false flags, at most ``MAX_RATES`` rates."""
    if not isinstance(entry, dict) or type(entry.get('processes')) is not int or entry['processes'] < 1:
        raise ValueError(f'entry {key} has no whole "processes" of at least 1')
    for flag in ('compiled', 'padded', 'bf16'):
        if not isinstance(entry.get(flag, False), bool):
            raise ValueError(f'entry {key} has a "{flag}" that is not true or false')
    rates = entry.get('rates', {})
    if not isinstance(rates, dict) or len(rates) > MAX_RATES or not all(
            isinstance(k, str) and len(k) <= 100 and isinstance(v, (int, float)) for k, v in rates.items()):
        raise ValueError(f'entry {key} has "rates" that are not at most {MAX_RATES} labelled numbers')


def read_cache(path: Path, say=_logger.warning) -> Dict[str, Dict[str, Any]]:
    """The decisions kept in ``path``, each checked (``_check_entry``); a file that is not such a record (too large,
    nested past reading, or with an entry that fails) is set aside as ``<name>.invalid`` with a one-line warning and
    measured anew: it is this module's own derived file, never trusted as it is."""
    if not path.is_file():
        return {}
    try:
        known = json.loads(read_regular_file(path, MAX_CACHE_BYTES))
        if not isinstance(known, dict):
            raise ValueError('not a JSON object')
        for key, entry in known.items():
            _check_entry(key, entry)
        return known
    except (OSError, ValueError, RecursionError) as e:
        aside = path.with_name(path.name + '.invalid')
        try:
            os.replace(path, aside)
        except OSError:
            aside = None
        say(f'{path} is not a record of CPU measurements ({type(e).__name__}: {str(e)[:120]}); '
            + (f'set aside as {aside.name}; ' if aside else '') + 'measuring again.')
        return {}


def _cached(entry: Optional[Dict[str, Any]], processes: Sequence[int], modes: Sequence[bool],
            pads: Sequence[bool], precisions: Sequence[bool]) -> Optional[Decision]:
    if (entry is None or entry['processes'] not in processes or entry.get('compiled', modes[0]) not in modes
            or entry.get('padded', True) not in pads or entry.get('bf16', precisions[0]) not in precisions):
        return None
    return Decision(entry['processes'], bool(entry.get('compiled', modes[0])), bool(entry.get('padded', True)),
                    entry.get('rates'), bool(entry.get('bf16', precisions[0])))


def _pads(model: str, model_kwargs: Optional[Dict[str, Any]], padded: Optional[bool]) -> List[bool]:
    """The head paddings to measure: the one given, else both where the model has head widths to pad."""
    if padded is not None:
        return [bool(padded)]
    try:
        net = timm.create_model(model, **(model_kwargs or {}))
    except Exception:  # noqa: BLE001 (bad model arguments: the run's own build names them, in one line)
        return [True]
    return [True, False] if set_head_padding(net, True) else [True]


def _odds(candidate: Tuple[int, bool, bool], compile_chosen: bool) -> float:
    """What ``candidate`` must win by: ``MARGIN`` for each departure from one eager process (the padding and the
    precision won their margins before)."""
    n, compiled, _ = candidate
    return MARGIN ** ((n > 1) + (compiled and compile_chosen))


_PROBE_FAILED = (RuntimeError, ValueError, IndexError, subprocess.SubprocessError, OSError)


def _choose_bf16(model: str, batch: int, threads: int, precisions: Sequence[bool], step: Dict[str, Any],
                 padded: Optional[bool], failed: Dict[str, str]) -> Tuple[bool, Optional[float]]:
    """Whether the run trains in bf16 autocast, and the speed-up of its step where it was measured: the precision
    given, else bf16 only where its eager step computes the fp32 step's loss and runs faster by the margin, the two
    taking turns in one process (``measure_bf16``, as ``_choose_padding`` measures). Where that fails, fp32."""
    if len(precisions) < 2:
        return precisions[0], None
    try:
        speedup = measure_bf16(model, batch, threads, model_kwargs=step['model_kwargs'], padded=padded is not False)
    except _PROBE_FAILED as e:
        failed['bf16 against fp32'] = str(e)
        return False, None
    return speedup >= MARGIN, speedup


def _choose_padding(model: str, batch: int, threads: int, pads: Sequence[bool], step: Dict[str, Any],
                    failed: Dict[str, str]) -> Tuple[bool, Optional[float]]:
    """The padding every candidate is measured with, and the speed-up of the padded step where it was measured: the
    one given, else the true width only where the padded step measured slower by the margin, the two taking turns in
    one process (``measure_padding``, at ``batch`` and ``threads``: one process of the widest split). Where that
    measurement fails, the padding, with why in ``failed``. The compiled step's padding where ``step`` says
    ``compiled``."""
    if len(pads) < 2:
        return pads[0], None
    try:
        speedup = measure_padding(model, batch, threads, **step)
    except _PROBE_FAILED as e:
        failed[f'{"compiled " if step.get("compiled") else ""}heads padded against unpadded'] = str(e)
        return True, None
    return speedup * MARGIN >= 1.0, speedup


def _measure_candidates(model: str, batch: int, budget: int, processes: Sequence[int], modes: Sequence[bool],
                        pad: Dict[bool, bool], pads: Sequence[bool], step: Dict[str, Any], failed: Dict[str, str]
                        ) -> Dict[Tuple[int, bool, bool], float]:
    """The rate of each candidate, a candidate whose probe fails left out with why in ``failed`` (a compiled step
    that computes another loss, an abort, a timeout). Every process count is measured in each mode (eager, the
    counts taking turns, ``_counts_in_turns``; then compiled, where the run leaves compilation to the decision or
    compiles), with the padding ``pad`` gives for the mode (``pad[compiled]``); a compiled count whose padding
    fails takes the other (torch 2.14.1's inductor aborted on the unpadded 15-wide heads of an AVX-512 CPU). The
    eager ranking of the counts does not hold compiled: on a 2-core AMX Xeon, 2 x 1 bf16 measured 1.21x 1 x 2 eager
    for the CIFAR-10 model, and 1 x 2 compiled 1.11-1.25x 2 x 1 compiled (1,646-1,931 against 1,484-1,550 img/s);
    1 x 2 and 2 x 1 tied eager for the MNIST one, compiled 5,632 and 4,596 img/s."""
    rates: Dict[Tuple[int, bool, bool], float] = {}

    def probe(n: int, compiled: bool, padded: bool) -> bool:
        label = _label(n, budget // n, compiled, padded, step['bf16'])
        if (n, compiled, padded) in rates or label in failed:
            return (n, compiled, padded) in rates
        try:
            rates[(n, compiled, padded)] = measure(model, batch, n, budget // n, compiled=compiled, padded=padded,
                                                   **step)
            return True
        except _PROBE_FAILED as e:
            failed[label] = str(e)
            return False
    if modes[0] is False and len(processes) > 1:
        _counts_in_turns(model, batch, budget, pad[False], step, rates, failed)
    for compiled in modes:
        chosen = pad[compiled]
        for n in processes:  # each alone where the turns did not measure it
            any(probe(n, compiled, p) for p in ([chosen, not chosen] if compiled and len(pads) > 1 else [chosen]))
    return rates


def _counts_in_turns(model: str, batch: int, budget: int, pad: bool, step: Dict[str, Any],
                     rates: Dict[Tuple[int, bool, bool], float], failed: Dict[str, str]) -> None:
    """The eager step of one process and of ``budget`` processes, taking turns (``measure_split``), into ``rates``:
    the one process's images per second, and the split's as that times the median ratio of the turns. Where that
    fails, why in ``failed``."""
    label = (f'{_label(1, budget, False, pad, step["bf16"])} against {_label(budget, 1, False, pad, step["bf16"])} '
             f'in turns')
    try:
        speedup, alone = measure_split(model, batch, budget, padded=pad, **step)
    except _PROBE_FAILED as e:
        failed[label] = str(e)
        return
    rates[(1, False, pad)] = alone
    rates[(budget, False, pad)] = alone * speedup


def _probe_seconds(processes: Sequence[int], modes: Sequence[bool], pads: Sequence[bool],
                   precisions: Sequence[bool]) -> float:
    """About how long the measurement takes: a compiled probe compiles for 5-30 s (the MNIST model on a 2-core AMX
    Xeon, inductor's cache warm or empty), the probe processes import torch first. Where bf16 is measured
    (only where the CPU has it natively, ``policy.cpu_bf16_pays``) it is counted as the choice, in which the padding
    is not measured; an fp32 choice adds the padding's turns (of the compiled step where one is measured)."""
    pads = [True] if len(precisions) > 1 else pads
    turns = 2 * TURN_ROUNDS * TURN_BLOCK_SECONDS + 4
    compile_seconds = 20.0
    compiled = len(processes) if True in modes else 0  # every count compiled, with the padding chosen
    compilations = compiled + 2 * (len(pads) > 1 and True in modes)  # and the two paddings' steps for their turns
    eager = (len(processes) < 2) * (PROBE_SECONDS + 4) if modes[0] is False else 0  # two counts: in turns
    turned = (len(pads) > 1) + (len(precisions) > 1) + (modes[0] is False and len(processes) > 1)
    return PROBE_START + eager + compiled * PROBE_SECONDS + compilations * compile_seconds + turns * turned


def decide(model: str, batch: int, cache_dir: Path, budget: Optional[int] = None, say=_logger.info,
           model_kwargs: Optional[Dict[str, Any]] = None, bf16: Optional[bool] = False,
           compiled: Optional[bool] = False, padded: Optional[bool] = True,
           before: Optional[Callable[[], None]] = None) -> Decision:
    """The process count (and, where ``bf16``, ``compiled`` or ``padded`` is None, the precision, the compilation or
    the head padding) that trains ``model`` at ``batch`` fastest here, measured on the step the run will take (its
    model kwargs, bf16 autocast, compilation, padding) once per machine, model, batch and step, and kept in
    ``cache_dir/cpu_split.json`` (said when it is used); one process (eager, padded and fp32 where those were left to
    it) where nothing else can run or a measurement fails.

    The precision is chosen first (``_choose_bf16``), then, in fp32, the padding (``_choose_padding``) of the
    compiled step where one will be measured, else of the eager one (bf16 runs the attention without SDPA,
    ``models.layers.sdpa_pays``, where the padding changes nothing), and the candidates are measured with them
    (``_measure_candidates``). A measurement taken while other work keeps cores busy decides this run only: it is not
    kept as the machine's answer. ``before`` runs first where a measurement will (the run's checks that are quick
    beside it: a missing dataset is named before a minute of it)."""
    budget = core_budget() if budget is None else budget
    processes = [n for n in _candidates(budget) if batch % n == 0]
    modes = [False, True] if compiled is None else [bool(compiled)]
    precisions = [False, True] if bf16 is None else [bool(bf16)]
    step = dict(model_kwargs=dict(model_kwargs or {}), bf16=bf16)
    # ``probe``: how a split was measured; decisions kept from the independent probes of before are measured again
    facts = dict(cpu_signature(), model=model, batch=batch, budget=budget, compiled=compiled, padded=padded,
                 probe=PROBE, **step)
    key = hashlib.sha256(json.dumps(facts, sort_keys=True, default=repr).encode()).hexdigest()[:16]
    path = Path(cache_dir) / 'cpu_split.json'
    known = read_cache(path)
    # a kept decision first: it was measured for these very facts, so no model is built to list the paddings
    cached = _cached(known.get(key), processes, modes, [True, False] if padded is None else [bool(padded)],
                     precisions)
    if cached is not None:
        say(f'This CPU measured before how {model} at batch {batch} trains fastest: '
            f'{_label(cached.processes, budget // cached.processes, cached.compiled, cached.padded, cached.bf16)} '
            f'({path}; remove it to measure again).')
        return cached
    pads = _pads(model, model_kwargs, padded) if precisions != [True] else [True]
    if len(processes) * len(modes) < 2 and len(pads) < 2 and len(precisions) < 2:
        return Decision(1, modes[0], pads[0], bf16=precisions[0])
    if before is not None:
        before()
    quiet = free_cores(budget) >= budget
    say(f'Measuring once on this CPU how {model} at batch {batch} trains fastest (processes x threads'
        f'{", compiled or not" if len(modes) > 1 else ""}{", bf16 or fp32" if len(precisions) > 1 else ""}'
        f'{", heads padded or not" if len(pads) > 1 else ""}; '
        f'{_probe_seconds(processes, modes, pads, precisions):.0f} s or so) ...')
    with timed_progress(_probe_seconds(processes, modes, pads, precisions), 'measuring this CPU'), \
            probe_pool(budget):
        best, found, speedups = _measure(model, batch, budget, processes, modes, pads, precisions, padded, step)
    chosen = _label(best.processes, budget // best.processes, best.compiled, best.padded, best.bf16)
    say('  ' + ', '.join(found) + f' -> {chosen if best.rates else "1 process"}')
    if not best.rates:
        return best
    if not quiet:
        say('  (other work kept cores busy: this decision is not kept, the next long run measures again)')
        return best
    known[key] = dict(processes=best.processes, compiled=best.compiled, padded=best.padded, bf16=best.bf16,
                      compile_given=compiled, pad_given=padded, bf16_given=bf16, **cpu_signature(), model=model,
                      batch=batch, budget=budget, model_kwargs=step['model_kwargs'], rates=best.rates, **speedups)
    _keep(path, known)
    return best


def _measure(model: str, batch: int, budget: int, processes: Sequence[int], modes: Sequence[bool],
             pads: Sequence[bool], precisions: Sequence[bool], padded: Optional[bool], step: Dict[str, Any]
             ) -> Tuple[Decision, List[str], Dict[str, Optional[float]]]:
    """What ``decide`` measures: the precision, the padding, then the candidates. The fastest (each departure from
    one eager process by the margin: a tie keeps the simpler) with the rates by label, the findings in words and
    the speed-ups measured in turns."""
    failed: Dict[str, str] = {}
    widest = (max(1, batch // processes[-1]), budget // processes[-1])  # one process of the widest split
    bf16, bf16_speedup = _choose_bf16(model, *widest, precisions, step, padded, failed)
    step = dict(step, bf16=bf16)
    if bf16:
        pads = [True]
    # where a compiled step is measured, its padding is chosen (inductor's kernels may prefer the other one than the
    # eager ones) and the eager step keeps the padding; else the eager step's
    pad, pad_speedup = _choose_padding(model, *widest, pads if True not in modes else pads[:1], step, failed)
    cpad, cpad_speedup = _choose_padding(model, *widest, pads if True in modes else pads[:1],
                                         dict(step, compiled=True), failed)
    rates = _measure_candidates(model, batch, budget, processes, modes, {False: pad, True: cpad}, pads, step, failed)
    speedups = dict(bf16_speedup=bf16_speedup, padding_speedup=pad_speedup, compiled_padding_speedup=cpad_speedup)
    found = [f'bf16: {bf16_speedup:.2f}x fp32'] if bf16_speedup is not None else []
    found += [f'heads padded: {pad_speedup:.2f}x the true width'] if pad_speedup is not None else []
    found += [f'compiled heads padded: {cpad_speedup:.2f}x the true width'] if cpad_speedup is not None else []
    labelled = {_label(n, budget // n, c, p, bf16): round(r, 1) for (n, c, p), r in rates.items()}
    found += [f'{label}: {r:,.0f} img/s' for label, r in labelled.items()]
    found += [f'{label}: left out ({why})' for label, why in failed.items()]
    if not rates:
        found.insert(0, 'every measurement failed (' + '; '.join(failed.values()) + ')')
        return Decision(1, modes[0], pads[0], bf16=bf16), found, speedups
    best = max(rates, key=lambda k: rates[k] / _odds(k, len(modes) > 1))
    return Decision(*best, labelled, bf16), found, speedups


def _keep(path: Path, known: Dict[str, Dict[str, Any]]) -> None:
    """The machine's decisions written whole to ``path``; where it cannot be written, said (the run goes on)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_json_atomic(path, known)
    except OSError as e:
        _logger.warning(f'The CPU decision cannot be kept in {path} ({type(e).__name__}: {e.strerror or e}): the next '
                        f'long run measures again; set TIMM_MINIMAL_CACHE to a writable folder to keep it.')


def _worker_setup(leader: int, parent: int) -> None:
    """A split run's process: in the process group led by ``leader`` (its own, for the first), ended with ``parent``."""
    os.setpgid(0, leader)
    die_with_parent(parent)


def worker_command(argv: Sequence[str], processes: int, compiled: bool, padded: bool = True,
                   bf16: bool = False) -> List[str]:
    """The command of one process of a split run: the same training run, which records ``--cpu-processes``, the
    compilation, the head padding and the precision the decision chose (and so a resume keeps them)."""
    return [sys.executable, '-m', 'timm_minimal.training.train', *argv, '--cpu-processes', str(processes),
            '--compile' if compiled else '--no-compile', '--pad-heads' if padded else '--no-pad-heads',
            '--mixed-precision', 'bf16' if bf16 else 'no']


def run_split_processes(argv: Sequence[str], processes: int, env: Dict[str, str], grace: float = 30.0,
                        compiled: bool = False, padded: bool = True, main_fds: Sequence[int] = (),
                        bf16: bool = False) -> Tuple[int, int]:
    """Run ``processes`` processes of this training run on this machine (``compiled`` or eager, ``padded`` heads or
    not, in ``bf16`` autocast or fp32), gloo through accelerate; the rank and exit status of the first that failed
    ((0, 0) when none did).
    ``main_fds``: file descriptors the first process (rank 0) inherits.

    The processes meet at a store this process serves on the loopback address alone (``_loopback_store``), and they
    form a process group of their own: Ctrl-C, SIGTERM or SIGHUP to this process, or the failure of any one of them,
    ends them all (SIGTERM, then SIGKILL after ``grace`` seconds) before this function returns; SIGKILL to this
    process ends them through the kernel (``die_with_parent``)."""
    with _loopback_store(processes, timedelta(minutes=10)) as port:
        group: List[subprocess.Popen] = []

        def forward(signum, _frame):  # leaves the wait below; the group is ended in ``finally``, where it is reaped
            if signum == signal.SIGINT:
                raise KeyboardInterrupt
            raise SystemExit(128 + signum)
        previous = {sig: signal.signal(sig, forward) for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
        try:
            for rank in range(processes):
                worker_env = dict(env, RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(processes),
                                  LOCAL_WORLD_SIZE=str(processes), MASTER_ADDR='127.0.0.1', MASTER_PORT=str(port),
                                  TORCHELASTIC_USE_AGENT_STORE='True')  # the ranks join this store, none serves one
                leader = group[0].pid if group else 0  # a process group of their own, led by the first
                group.append(subprocess.Popen(worker_command(argv, processes, compiled, padded, bf16), env=worker_env,
                                              pass_fds=tuple(main_fds) if rank == 0 else (),
                                              preexec_fn=functools.partial(_worker_setup, leader, os.getpid())))
            return _wait_all(group)
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            if group:
                end_process_group(group, grace)


def _wait_all(group: List[subprocess.Popen]) -> Tuple[int, int]:
    """The rank and non-zero exit status of the first process of ``group`` that fails, as soon as one does, else
    (0, 0) once all ended."""
    while True:
        codes = [p.poll() for p in group]
        failed = [(rank, c) for rank, c in enumerate(codes) if c not in (None, 0)]
        if failed:  # one killed by a signal first: the others then fail only for having lost it
            return min(failed, key=lambda f: (f[1] > 0, f[0]))
        if all(c == 0 for c in codes):
            return 0, 0
        time.sleep(0.2)


# how gloo words a collective whose peer process is gone
_LOST_PEER = ('Connection reset by peer', 'Connection closed by peer', 'Broken pipe', 'Connection refused')


def lost_peer(error: BaseException) -> Optional[str]:
    """How gloo said that another process of a distributed run is gone, where ``error`` is a collective's failure
    for that reason; else None."""
    return next((text for text in _LOST_PEER if isinstance(error, RuntimeError) and text in str(error)), None)


def end_process_group(group: List[subprocess.Popen], grace: float) -> None:
    """SIGTERM to the process group led by ``group[0]`` (every process of the run), SIGKILL to what is left after
    ``grace`` seconds; returns once none of them runs."""
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 5.0)):
        if all(p.poll() is not None for p in group):
            return
        try:
            os.killpg(group[0].pid, sig)
        except ProcessLookupError:
            pass
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            if all(p.poll() is not None for p in group):
                return
            time.sleep(0.05)
