"""The training step on the CPU in each mode, side by side, measured in one run: which default pays here.

    timm-minimal-benchmark cpu-modes                                    # sym_6x4 and std_mlp_6x1, CIFAR-10
    timm-minimal-benchmark cpu-modes --models vit_minimal_sym_6x4.cifar10 --batch-size 256

For every model: the bare training step (forward, cross-entropy, backward, AdamW; resident random inputs;
``timm_minimal.tools.benchmark.training.bare_step_throughput``) with all the process's cores as torch threads,
in five modes: eager fp32 with SDPA on the true head width (``eager-unpadded``, the reference: the plain step
before the attention padded its heads, ``MinimalAttention.head_pad``), eager fp32, ``torch.compile``, bf16
autocast, and both; ``--modes bf16-sdpa`` adds bf16 with the attention kept on SDPA (its CPU kernel before
``models.layers.sdpa_pays``), the reference of the bf16 attention. Then the step as ``--jobs`` concurrent processes with ``cores / jobs`` threads each (what
``timm-minimal-reproduce --jobs N`` runs), eager and in bf16 (``--jobs-modes``), their images per second summed.
With ``--trainer-data-dir``, last, ``timm-minimal-train`` itself (only the batch size, a training subset and 3
epochs are set), with its defaults and with ``--compile``: its median epoch throughput after the first, and the
first epoch's extra time (for ``--compile`` a cold compilation: each trainer run gets an empty
``TORCHINDUCTOR_CACHE_DIR``); ``--trainer-repeats N`` alternates the two N times and reports the medians over the
runs, which a shared machine needs. Every step figure is the median of ``--repeats`` timed blocks, and every ratio is
against the first mode of the same model in the same run. ``--rounds N`` measures the modes N times in turn (the
order reversed every other round) and reports each ratio as the median of the rounds' ratios, with their range: a
shared machine's speed drifts by more than the differences measured here within a minute, which a single pass
(``--rounds 1``) puts on the modes. The machine should be otherwise idle.
"""
import argparse
import contextlib
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Sequence

import timm
import torch

from ...machine import cpu_signature, default_cache_dir, torch_threads, usable_cores
from ...training.run.folder import RunFolder
from ..common import write_report
from ...cli import HelpFormatter, OneLineParser, UsageError, command, positive_int
from ...models import layers
from ...models.datasets import DATASETS
from ...models.pretrained import tag_dataset
from .training import bare_step_throughput, read_metrics, run_trainer_subprocess
from ...training.cpu.split import decide

__all__ = ['MODES', 'measure_mode', 'measure_jobs', 'measure_trainer', 'run', 'main']

PROG = 'timm-minimal-benchmark cpu-modes'  # the one spelling, in the help, the errors and the reports
# mode: (torch.compile, autocast dtype, heads padded for SDPA)
MODES = {'eager-unpadded': (False, None, False), 'eager': (False, None, True), 'compile': (True, None, True),
         'bf16': (False, torch.bfloat16, True), 'compile+bf16': (True, torch.bfloat16, True),
         'bf16-sdpa': (False, torch.bfloat16, True)}
# the reference of the bf16 attention: bf16 with SDPA kept, as the attention ran before ``models.layers.sdpa_pays``
SDPA_KEPT = ('bf16-sdpa',)
DEFAULT_MODES = ['eager-unpadded', 'eager', 'compile', 'bf16', 'compile+bf16']


def measure_mode(model: str, mode: str, batch_size: int, threads: int, steps: int, warmup: int,
                 repeats: int) -> List[float]:
    """Images per second of the bare step of ``model`` in ``mode`` with ``threads`` torch threads."""
    compile_, dtype, pad_heads = MODES[mode]
    with torch_threads(threads), _sdpa_kept(mode in SDPA_KEPT):
        return bare_step_throughput(model, batch_size, torch.device('cpu'), compile_, dtype, steps, warmup, repeats,
                                    compile_mode=None, pad_heads=pad_heads)


@contextlib.contextmanager
def _sdpa_kept(kept: bool) -> Iterator[None]:
    """Within: the attention runs SDPA in every precision (``models.layers.sdpa_pays`` answers True) where ``kept``."""
    chosen = layers.sdpa_pays
    if kept:
        layers.sdpa_pays = lambda q: True
    try:
        yield
    finally:
        layers.sdpa_pays = chosen


_CHILD = ('import json, sys; from timm_minimal.tools.benchmark.cpu_modes import measure_mode; '
          'print(json.dumps(measure_mode(sys.argv[1], sys.argv[2], *map(int, sys.argv[3:]))))')


def measure_jobs(model: str, mode: str, jobs: int, batch_size: int, steps: int, warmup: int,
                 repeats: int) -> List[List[float]]:
    """The step in ``mode`` as ``jobs`` processes at once, ``cores // jobs`` threads each: each process's rates."""
    threads = max(1, usable_cores() // jobs)
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    argv = [sys.executable, '-c', _CHILD, model, mode, str(batch_size), str(threads), str(steps), str(warmup),
            str(repeats)]
    procs = [subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(jobs)]
    out = []
    for p in procs:
        stdout, stderr = p.communicate()
        if p.returncode != 0:
            raise RuntimeError(f'a concurrent step process failed: {stderr.strip().splitlines()[-1:]}')
        out.append(json.loads(stdout.strip().splitlines()[-1]))
    return out


TRAINER_MODES = {'defaults': [], '--compile': ['--compile']}


def measure_trainer(model: str, batch_size: int, data_dir: str, train_subset: int, threads: int,
                    extra_args: Sequence[str] = ()) -> Dict[str, Any]:
    """``timm-minimal-train`` with its defaults (and ``extra_args``) on the model's dataset (its tag): 3 epochs of
    ``train_subset`` images in a temporary folder, with an empty compilation cache of its own; the median epoch
    throughput after the first, the first epoch's extra training time over the median of the others (start-up and
    a cold compilation), and the precision and compile mode the run used."""
    dataset = DATASETS[tag_dataset(model.split('.')[1])].kind
    with tempfile.TemporaryDirectory(prefix='cpu-modes-trainer-') as tmp:
        out = Path(tmp) / 'run'
        run_trainer_subprocess(['--model', model, '--dataset', dataset, '--data-dir', data_dir, '--output', str(out),
                                '--epochs', '3', '--batch-size', str(batch_size), '--train-subset', str(train_subset),
                                '--eval-subset', '256', '--seed', '0', '--no-progress', '--log-interval', '0',
                                *extra_args], out, threads=threads,
                               env_extra={'TORCHINDUCTOR_CACHE_DIR': str(Path(tmp) / 'inductor-cache')})
        rows = read_metrics(out)
        launch = RunFolder(out).read_record().last_launch
    rates, times = [float(r['throughput']) for r in rows], [float(r['train_time']) for r in rows]
    return dict(rates=rates, median=statistics.median(rates[1:]), train_time=times,
                first_epoch_extra_s=times[0] - statistics.median(times[1:]), mixed_precision=launch.mixed_precision,
                compiled=launch.compiled)


def _merge_trainer_runs(runs: List[Dict[str, Any]]) -> Dict[str, Any]:
    """Repeated trainer runs of one mode: the median over the runs of their throughput and first-epoch extra time;
    ``compiled`` only where every run compiled (a fallback to eager shows)."""
    return dict(runs=runs, median=statistics.median(r['median'] for r in runs),
                first_epoch_extra_s=statistics.median(r['first_epoch_extra_s'] for r in runs),
                mixed_precision=runs[0]['mixed_precision'], compiled=all(r['compiled'] for r in runs))


def _trainer_label(name: str, t: Dict[str, Any]) -> str:
    how = (f"{t['mixed_precision']}, {'compiled' if t['compiled'] else 'eager'}; "
           f"first epoch {round(t['first_epoch_extra_s']):+d} s")
    if len(t.get('runs', ())) > 1:
        each = ', '.join(f"{r['median']:,.0f}" for r in t['runs'])
        how += f"; median of {len(t['runs'])} runs: {each}"
    return f'timm-minimal-train, {name} ({how})'


def _ratio(r: Dict[str, Any], mode: str, pooled: float) -> str:
    """A mode's ratio to the first: the median of the rounds' ratios and their range where there were rounds."""
    per_round = r.get('round_ratios', {}).get(mode, [])
    if len(per_round) < 2:
        return f'{pooled:.2f}'
    return f'{statistics.median(per_round):.2f} ({min(per_round):.2f}-{max(per_round):.2f})'


def _rows(results: Dict[str, Any]) -> List[str]:
    lines = ['| model | batch | mode | processes x threads | img/s (median) | / first row |',
             '|---|---:|---|---|---:|---:|']
    for model, r in results['models'].items():
        eager = statistics.median(next(iter(r['modes'].values())))
        for mode, rates in r['modes'].items():
            lines.append(f"| `{model}` | {results['batch_size']} | {mode} | 1 x {results['threads']} "
                         f"| {statistics.median(rates):,.0f} | {_ratio(r, mode, statistics.median(rates) / eager)} |")
        for mode, jobs in r.get('jobs', {}).items():
            per = [statistics.median(rates) for rates in jobs]
            lines.append(f"| `{model}` | {results['batch_size']} | {mode}, {len(per)} processes at once "
                         f"| {len(per)} x {r['job_threads']} | {sum(per):,.0f} ({' + '.join(f'{v:,.0f}' for v in per)}) "
                         f"| {sum(per) / eager:.2f} |")
        split = r.get('trainer_processes', 1)
        for name, t in r.get('trainer', {}).items():
            lines.append(f"| `{model}` | {results['batch_size']} | {_trainer_label(name, t)} "
                         f"| {split} x {max(1, results['threads'] // split)} | {t['median']:,.0f} "
                         f"| {t['median'] / eager:.2f} |")
    return lines


def render(results: Dict[str, Any]) -> str:
    env = results['environment']
    return '\n'.join([
        f"## The training step on the CPU by mode: {env['cpu']}, {env['cores']} cores", '',
        f"- CPU flags: {env.get('flags') or 'not recorded'}",
        f"- torch {env['torch']}, python {env['python']}; date {env['date']}",
        f"- command: `{results['command']}`",
        f"- bare step (forward, cross-entropy, backward, AdamW) on resident random inputs; {results['warmup']} warm-up "
        f"steps (compilation included), then the median of {results['repeats']} x {results['steps']} steps"
        + (f"; {results['rounds']} rounds of the modes in turn, each ratio the median of the rounds' ratios (range)"
           if results.get('rounds', 1) > 1 else ''), '',
        *_rows(results), ''])


def run(models: Sequence[str], batch_size: int, modes: Sequence[str], jobs: int, steps: int, warmup: int,
        repeats: int, jobs_modes: Sequence[str] = ('eager',), trainer_data_dir: Optional[str] = None,
        trainer_subset: int = 10240, trainer_repeats: int = 1, rounds: int = 1) -> Dict[str, Any]:
    threads = usable_cores()
    results: Dict[str, Any] = dict(batch_size=batch_size, threads=threads, steps=steps, warmup=warmup, repeats=repeats,
                                   rounds=rounds, models={}, environment=dict(
                                       cpu=cpu_signature()['cpu'], flags=cpu_signature()['flags'], cores=threads,
                                       torch=torch.__version__, python=platform.python_version(),
                                       date=time.strftime('%Y-%m-%dT%H:%M:%S%z')))
    for model in models:
        r: Dict[str, Any] = dict(modes={mode: [] for mode in modes}, round_ratios={mode: [] for mode in modes})
        for i in range(rounds):
            medians = {}
            for mode in (modes if i % 2 == 0 else modes[::-1]):
                rates = measure_mode(model, mode, batch_size, threads, steps, warmup, repeats)
                r['modes'][mode] += rates
                medians[mode] = statistics.median(rates)
                print(f'{model} {mode}: {medians[mode]:,.0f} img/s', flush=True)
            for mode in modes:
                r['round_ratios'][mode].append(medians[mode] / medians[modes[0]])
        if jobs > 1:
            r['job_threads'] = max(1, threads // jobs)
            r['jobs'] = {mode: measure_jobs(model, mode, jobs, batch_size, steps, warmup, repeats)
                         for mode in jobs_modes}
        if trainer_data_dir:
            # the process split a full run takes by default (cpu.split.decide, measured here once); the short runs
            # below would stay one process, so it is passed to them
            split = decide(model, batch_size, default_cache_dir(), budget=threads).processes  # of the eager step
            r['trainer_processes'] = split
            runs: Dict[str, List[Dict[str, Any]]] = {name: [] for name in TRAINER_MODES}
            for _ in range(trainer_repeats):  # alternated, so that a busy spell of a shared machine hits both
                for name, extra in TRAINER_MODES.items():
                    runs[name].append(measure_trainer(model, batch_size, trainer_data_dir, trainer_subset, threads,
                                                      [*extra, '--cpu-processes', str(split)]))
                    print(f"{model} timm-minimal-train, {name}: {runs[name][-1]['median']:,.0f} img/s", flush=True)
            r['trainer'] = {name: _merge_trainer_runs(rs) for name, rs in runs.items()}
        results['models'][model] = r
    return results


def build_parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog=PROG, description=__doc__.split('\n\n')[0], formatter_class=HelpFormatter)
    p.add_argument('--models', nargs='+', default=['vit_minimal_sym_6x4.cifar10', 'vit_minimal_std_mlp_6x1.cifar10'],
                   help='timm names with their tag')
    p.add_argument('--batch-size', type=positive_int, default=256, help='images per step')
    p.add_argument('--modes', nargs='+', default=DEFAULT_MODES, choices=list(MODES),
                   help='step modes to measure (bf16-sdpa: bf16 with the attention on SDPA, its kernel before)')
    p.add_argument('--jobs', type=positive_int, default=2, help='concurrent processes of the last rows (1: none)')
    p.add_argument('--jobs-modes', nargs='+', default=['eager', 'bf16'], choices=list(MODES),
                   help='modes of the concurrent processes')
    p.add_argument('--trainer-data-dir', default=None, metavar='DIR',
                   help="also run timm-minimal-train with its defaults on the model's dataset, in DIR")
    p.add_argument('--trainer-subset', type=positive_int, default=10240, metavar='N',
                   help='training images per epoch of that run')
    p.add_argument('--trainer-repeats', type=positive_int, default=1, metavar='N',
                   help='trainer runs per mode, alternated; the medians over them are reported')
    p.add_argument('--rounds', type=positive_int, default=1, metavar='N',
                   help='measure the modes N times in turn; each ratio is the median of the rounds\' ratios')
    p.add_argument('--steps', type=positive_int, default=10, help='steps per timed block')
    p.add_argument('--warmup', type=positive_int, default=3, help='steps before timing (compilation included)')
    p.add_argument('--repeats', type=positive_int, default=5, help='timed blocks; the median is reported')
    p.add_argument('--output', default='reports/cpu_modes.md',
                   help='the markdown report ("" for none; the committed one: benchmarks/cpu_modes.md)')
    p.add_argument('--json', default='reports/cpu_modes.json', help='raw results ("" for none)')
    p.add_renamed('--out-md', '--output')
    p.add_renamed('--out-json', '--json')
    return p


@command(PROG)
def main(argv: Optional[Sequence[str]] = None) -> int:
    """The command line; returns the exit status (0 done, 2 bad command line)."""
    args = build_parser().parse_args(argv)
    unknown = [m for m in args.models if not timm.is_model(m.split('.')[0])]
    if unknown:
        raise UsageError(f'unknown model {unknown[0]!r}: a vit_minimal_* name with its tag, e.g. '
                         f'vit_minimal_sym_6x4.cifar10')
    if args.trainer_data_dir:
        untagged = [m for m in args.models if m.partition('.')[2] not in DATASETS]
        if untagged:
            raise UsageError(f'--trainer-data-dir trains on the dataset of the tag; {untagged[0]!r} has none of '
                             f'{", ".join(DATASETS)}')
        if not Path(args.trainer_data_dir).is_dir():
            raise UsageError(f'--trainer-data-dir {args.trainer_data_dir!r} is not a directory')
    results = run(args.models, args.batch_size, args.modes, args.jobs, args.steps, args.warmup, args.repeats,
                  args.jobs_modes, args.trainer_data_dir, args.trainer_subset, args.trainer_repeats, args.rounds)
    results['command'] = ' '.join([PROG, *(argv if argv is not None else sys.argv[1:])])
    write_report(results, render(results), args.json, args.output)
    return 0


if __name__ == '__main__':
    sys.exit(main())
