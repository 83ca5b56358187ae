"""How close the trainer gets to what the hardware allows, measured in one run.

    timm-minimal-benchmark training                                        # MNIST and CIFAR-10, batch 1024
    timm-minimal-benchmark training --time-to-target                       # + a whole default-recipe run per dataset
    timm-minimal-benchmark training --quick --datasets mnist               # smoke test
    timm-minimal-benchmark training ...                      # the same, as a module

For every model, dataset and batch size:

(a) **trainer throughput**: ``python -m timm_minimal.training.train`` runs in a fresh process for a few epochs
    (``--epochs``, at least 3) with the real data path; its ``metrics.jsonl`` gives the training images per
    second of every epoch, and the trainer's throughput is the median over epochs 2..n (the first one
    includes compilation). On CUDA the trainer is asked for ``--compile`` and bf16 mixed precision (when the
    GPU supports it), on the CPU for neither, so that it runs what (b) runs;
(b) **bare step throughput**: the same model and batch, resident random inputs and labels on the device, the
    training step alone (forward, cross-entropy, backward, AdamW step, ``zero_grad``), ``torch.compile`` and
    bf16 autocast on CUDA, fused AdamW; warm-up, then ``--repeats`` timed blocks of ``--steps``
    steps; the median images/s;
(c) with ``--time-to-target``: the trainer with the dataset's default recipe (only ``--model --dataset
    --data-dir --output --no-progress``, plus ``--cpu`` on the CPU and any trainer arguments after ``--``);
    the ``elapsed`` time (from the launch: start-up, data loading and compilation included) at the end of
    the first epoch whose test accuracy reaches each target (``--targets``; CIFAR-10 has two, read off the same
    run), or "not reached" with the best accuracy.

The report (printed last, also written to ``--output`` and, with every raw number, to ``--json``) holds
the device, the library versions, the date and the tables; "trainer / bare" is (a) / (b).
Trainer arguments after ``--`` are appended to every trainer command line, in (a) as well as in (c)
(they win over ours, e.g. ``-- --data-path loader``).

Exit status: 0 on success, 2 for a bad command line (unknown model, missing data folder, ...), 1 when a
measurement failed (the trainer's exit status and the tail of its stderr are printed).
"""
import argparse
import json
import os
import platform
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import timm
import torch
import torch.nn.functional as F
from timm.data import resolve_model_data_config
from timm.optim import create_optimizer_v2

from ...models.layers import set_head_padding
from ...models.paper import TABLE2
from ...models.vit_minimal import ARCHITECTURES
from ..common import cpu_environment, cpu_flags_lines, markdown_table, write_report
from ...cli import Failure, OneLineParser, UsageError, command, non_negative_int, number, positive_int
from ...machine import keep_freed_memory, torch_threads
from ...training.options import FUSED_ADAM_DEVICES, SEED
from ...training.run.folder import RunFolder

__all__ = [
    'TrainingBenchmarkConfig', 'MeasurementError', 'TrainerError', 'UsageError', 'TrainerThroughput', 'TimeToTarget',
    'bare_step_throughput', 'trainer_throughput', 'time_to_target', 'run_trainer_subprocess', 'read_metrics',
    'throughput_table', 'time_to_target_table', 'render_markdown', 'run', 'build_parser', 'main',
]

PROG = 'timm-minimal-benchmark training'  # the one spelling, in the help, the errors and the reports
# the datasets with a device-path recipe, which this benchmark times
BENCHMARK_DATASETS = ('mnist', 'cifar10')
# time to target: the paper's 500-epoch MNIST accuracy of the default model, and 60% and 70% on CIFAR-10 (the paper
# has no CIFAR-10 row for it); each dataset's targets are read off one run
DEFAULT_TARGETS: Dict[str, Tuple[float, ...]] = {
    'mnist': (next(r.val_acc for r in TABLE2 if r.arch == 'vit_minimal_sym_6x4'),), 'cifar10': (60.0, 70.0)}
TRAINER = (sys.executable, '-m', 'timm_minimal.training.train')

# A trainer runner gets the trainer's arguments and its run folder (also in the arguments, as --output);
# it returns when the run finished and raises TrainerError when it failed.
TrainerRunner = Callable[[Sequence[str], Path], None]




class MeasurementError(Failure):
    """A measurement failed; the message says which and why (exit 1)."""


class TrainerError(MeasurementError):
    """The trainer failed: it exited with an error, or wrote no usable metrics."""


# -- (b) the bare training step --------------------------------------------------------------------

def _sync(device: torch.device) -> None:
    if device.type == 'cuda':
        torch.cuda.synchronize(device)


def _synthetic_batch(model: torch.nn.Module, batch_size: int,
                     device: torch.device) -> Tuple[torch.Tensor, torch.Tensor]:
    """Random normalised inputs of the model's input size and random labels, on ``device``."""
    in_chans, height, width = resolve_model_data_config(model)['input_size']
    x = torch.randn(batch_size, in_chans, height, width, device=device)
    y = torch.randint(0, model.num_classes, (batch_size,), device=device)
    return x, y


def _make_step(net: torch.nn.Module, optimizer: torch.optim.Optimizer, device: torch.device,
               amp_dtype: Optional[torch.dtype]) -> Callable[[torch.Tensor, torch.Tensor], None]:
    """One training step: forward (autocast when ``amp_dtype``), cross-entropy, backward, step, zero_grad."""
    def step(x: torch.Tensor, y: torch.Tensor) -> None:
        with torch.autocast(device.type, dtype=amp_dtype, enabled=amp_dtype is not None):
            loss = F.cross_entropy(net(x), y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    return step


def _release(device: torch.device, compiled: bool) -> None:
    """Forget compiled graphs (so later models never hit the recompile limit) and cached GPU memory."""
    if compiled:
        torch._dynamo.reset()
    if device.type == 'cuda':
        torch.cuda.empty_cache()


def _timed(step: Callable[[torch.Tensor, torch.Tensor], None], x: torch.Tensor, y: torch.Tensor, steps: int,
           device: torch.device) -> float:
    """Seconds of ``steps`` back-to-back steps, the device synchronised before and after."""
    _sync(device)
    t0 = time.perf_counter()
    for _ in range(steps):
        step(x, y)
    _sync(device)
    return max(time.perf_counter() - t0, 1e-9)


def bare_step_throughput(model_name: str, batch_size: int, device: torch.device, compile: bool,
                         amp_dtype: Optional[torch.dtype], steps: int, warmup: int, repeats: int,
                         compile_mode: Optional[str] = None, pad_heads: bool = True) -> List[float]:
    """Images per second of the bare training step, one value per timed repeat.

    ``model_name`` is a timm name with its tag (``vit_minimal_sym_6x4.mnist``). The model (optionally
    ``torch.compile``-d, in ``compile_mode``), AdamW (``create_optimizer_v2``, lr 1e-3, weight decay 0.05, fused as
    the trainer's) and a batch of random inputs and labels live on ``device``; ``warmup`` steps (compilation
    included), then ``repeats`` blocks of ``steps`` steps, each timed with the device synchronised before and after.
    The global RNG state is left as it was (the model is initialised from seed 0). ``pad_heads=False`` runs
    SDPA on the true head width (``MinimalAttention.head_pad`` set to 0), the step as it was before that padding.
    The process's allocator keeps what a step frees, as the trainer's does (``machine.keep_freed_memory``).
    """
    if batch_size < 1 or steps < 1 or repeats < 1 or warmup < 0:
        raise ValueError('bare_step_throughput needs batch_size, steps, repeats >= 1 and warmup >= 0.')
    rng_devices = [device.index if device.index is not None else torch.cuda.current_device()] \
        if device.type == 'cuda' else []
    keep_freed_memory()
    with torch.random.fork_rng(devices=rng_devices):
        torch.manual_seed(0)
        model = timm.create_model(model_name).to(device).train()
        set_head_padding(model, pad_heads)
        optimizer = create_optimizer_v2(
            model, 'adamw', lr=1e-3, weight_decay=0.05, fused=device.type in FUSED_ADAM_DEVICES)
        x, y = _synthetic_batch(model, batch_size, device)
        step = _make_step(torch.compile(model, mode=compile_mode) if compile else model, optimizer, device, amp_dtype)
        try:
            for _ in range(warmup):
                step(x, y)
            rates = [batch_size * steps / _timed(step, x, y, steps, device) for _ in range(repeats)]
        finally:
            del model, optimizer, step, x, y
            _release(device, compile)
    return rates


# -- the trainer -----------------------------------------------------------------------------------

def _tail(path: Path, lines: int = 15) -> str:
    """The last ``lines`` non-empty lines of a text file, indented (empty when it does not exist)."""
    if not path.is_file():
        return ''
    text = [ln for ln in path.read_text(errors='replace').splitlines() if ln.strip()]
    return '\n'.join('    ' + ln for ln in text[-lines:])


def run_trainer_subprocess(args: Sequence[str], output: Path, threads: Optional[int] = None,
                           env_extra: Optional[Dict[str, str]] = None) -> None:
    """Run ``python -m timm_minimal.training.train ARGS`` in a fresh process; stdout and stderr go to files beside
    ``output`` (``<output>.stdout.txt``, ``<output>.stderr.txt``). ``threads`` sets ``OMP_NUM_THREADS``
    (torch's default thread count), ``env_extra`` more environment variables; raises TrainerError with the tail
    of stderr when the trainer fails."""
    output.parent.mkdir(parents=True, exist_ok=True)
    out_log = output.parent / f'{output.name}.stdout.txt'
    err_log = output.parent / f'{output.name}.stderr.txt'
    env = dict(os.environ, **(env_extra or {}))
    if threads:
        env['OMP_NUM_THREADS'] = str(threads)
    command = [*TRAINER, *args]
    with open(out_log, 'w') as out_f, open(err_log, 'w') as err_f:
        rc = subprocess.run(command, stdout=out_f, stderr=err_f, env=env).returncode
    if rc != 0:
        raise TrainerError(f"the trainer failed (exit status {rc}): {shlex.join(['python', *command[1:]])}\n"
                           f'  last lines of its stderr ({err_log}):\n{_tail(err_log) or "    (empty)"}')


def read_metrics(output: Path) -> List[Dict[str, Any]]:
    """The rows of ``<output>/metrics.jsonl`` (one per epoch); TrainerError when missing or unreadable."""
    path = Path(output) / 'metrics.jsonl'
    if not path.is_file():
        raise TrainerError(f'the trainer wrote no {path}')
    try:
        rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    except json.JSONDecodeError as e:
        raise TrainerError(f'{path} is not JSON lines: {e}') from e
    if not rows:
        raise TrainerError(f'{path} holds no epoch')
    return rows


def _field(rows: Sequence[Dict[str, Any]], name: str, path: Path) -> List[float]:
    """Column ``name`` of the metrics rows; TrainerError naming the field when a row lacks it."""
    if any(name not in r for r in rows):
        raise TrainerError(f"{path / 'metrics.jsonl'} has no '{name}' field (a trainer older than this benchmark?)")
    return [float(r[name]) for r in rows]


@dataclass
class TrainerThroughput:
    """(a): the trainer's images/s per epoch (all epochs) and the median over epochs 2..n."""
    command: List[str]
    per_epoch: List[float]
    median: float
    train_time: List[Optional[float]] = field(default_factory=list)
    elapsed: Optional[float] = None


def trainer_throughput_args(model: str, dataset: str, batch_size: int, data_dir: str, output: Path, *,
                            epochs: int = 3, device_type: str = 'cuda', compile: bool = True,
                            compile_mode: Optional[str] = None, mixed_precision: str = 'bf16', train_subset: Optional[int] = None,
                            eval_subset: Optional[int] = None, seed: int = 0,
                            extra_args: Sequence[str] = ()) -> List[str]:
    """The trainer's command line (after ``python -m timm_minimal.training.train``) for measurement (a)."""
    args = ['--model', model, '--dataset', dataset, '--data-dir', str(data_dir), '--output', str(output),
            '--epochs', str(epochs), '--batch-size', str(batch_size), '--seed', str(seed),
            '--no-progress', '--log-interval', '0', '--compile' if compile else '--no-compile',
            '--mixed-precision', mixed_precision]
    if compile and compile_mode:
        args += ['--compile-mode', compile_mode]
    if train_subset:
        args += ['--train-subset', str(train_subset)]
    if eval_subset:
        args += ['--eval-subset', str(eval_subset)]
    if device_type == 'cpu':
        args.append('--cpu')
    return args + list(extra_args)


def _recorded(args: Sequence[str], output: Path) -> List[str]:
    """The trainer's command as the results keep it: the run folder by its name (a temporary folder's, or one under
    ``--keep-runs``), so that no machine's path enters a committed report."""
    return ['timm_minimal.training.train', *(output.name if a == str(output) else a for a in args)]


def trainer_throughput(model: str, dataset: str, batch_size: int, data_dir: str, output: Path, *,
                       epochs: int = 3, runner: Optional[TrainerRunner] = None, **options: Any) -> TrainerThroughput:
    """Measurement (a): run the trainer for ``epochs`` (>= 3) epochs in ``output`` and read its throughput.

    ``options`` are those of ``trainer_throughput_args`` (device_type, compile, mixed_precision,
    train_subset, eval_subset, seed, extra_args); ``runner`` runs the trainer (default: a subprocess).
    """
    if epochs < 3:
        raise ValueError(f'the trainer throughput needs at least 3 epochs (the median of epochs 2..n), got {epochs}')
    args = trainer_throughput_args(model, dataset, batch_size, data_dir, output, epochs=epochs, **options)
    (runner or run_trainer_subprocess)(args, output)
    rows = read_metrics(output)
    per_epoch = _field(rows, 'throughput', output)
    if len(per_epoch) < 3:
        raise TrainerError(f"{output / 'metrics.jsonl'} holds {len(per_epoch)} epochs; at least 3 are needed")
    return TrainerThroughput(
        command=_recorded(args, output), per_epoch=per_epoch, median=statistics.median(per_epoch[1:]),
        train_time=[r.get('train_time') for r in rows],
        elapsed=float(rows[-1]['elapsed']) if 'elapsed' in rows[-1] else None)


@dataclass
class TimeToTarget:
    """(c): the first epoch reaching the target test accuracy (%), and the elapsed seconds at its end."""
    command: List[str]
    target: float
    reached_epoch: Optional[int]
    elapsed: Optional[float]
    best_acc: float
    best_epoch: int
    final_acc: float
    epochs: int
    total_elapsed: float
    test_acc: List[float] = field(default_factory=list)
    elapsed_per_epoch: List[float] = field(default_factory=list)
    trainer_rate: Optional[float] = None  # median images/s of epochs 2..n
    cpu_rates: Optional[Dict[str, float]] = None  # what the run's CPU decision measured per candidate, if it did


def decided_rates(output: Path) -> Optional[Dict[str, float]]:
    """The images per second of each candidate that the run's CPU decision measured (its last launch's record), or
    None where it measured nothing (a GPU, a short run, a count given)."""
    try:
        return RunFolder(output).read_record().last_launch.cpu_rates
    except (OSError, ValueError, AttributeError):
        return None


def first_reaching(rows: Sequence[Dict[str, Any]], target: float) -> Optional[Dict[str, Any]]:
    """The first metrics row whose ``test_acc`` is at least ``target``, or None."""
    return next((r for r in rows if float(r['test_acc']) >= target), None)


def time_to_target(model: str, dataset: str, data_dir: str, output: Path, targets: Sequence[float], *,
                   device_type: str = 'cuda', extra_args: Sequence[str] = (),
                   runner: Optional[TrainerRunner] = None) -> List[TimeToTarget]:
    """Measurement (c): one run of the dataset's default recipe; when it first reached each of ``targets``."""
    args = ['--model', model, '--dataset', dataset, '--data-dir', str(data_dir), '--output', str(output),
            '--no-progress'] + (['--cpu'] if device_type == 'cpu' else []) + list(extra_args)
    (runner or run_trainer_subprocess)(args, output)
    rows = read_metrics(output)
    acc, elapsed = _field(rows, 'test_acc', output), _field(rows, 'elapsed', output)
    best = max(range(len(acc)), key=lambda i: acc[i])
    rates = [float(r['throughput']) for r in rows[1:] if isinstance(r.get('throughput'), (int, float))]
    run = dict(command=_recorded(args, output), best_acc=acc[best],
               best_epoch=int(rows[best].get('epoch', best + 1)), final_acc=acc[-1], epochs=len(rows),
               total_elapsed=elapsed[-1], test_acc=acc, elapsed_per_epoch=elapsed,
               trainer_rate=statistics.median(rates) if rates else None,
               cpu_rates=decided_rates(output))  # the same for every target
    hits = [(target, first_reaching(rows, target)) for target in targets]
    return [TimeToTarget(target=target, reached_epoch=int(hit['epoch']) if hit else None,
                         elapsed=float(hit['elapsed']) if hit else None, **run) for target, hit in hits]


# -- report ----------------------------------------------------------------------------------------

def environment(device: torch.device) -> Dict[str, str]:
    """Device name (and a CPU's SIMD flags), library versions and the date, for the report's header."""
    if device.type == 'cuda':
        env = dict(device=torch.cuda.get_device_name(device))
    else:
        env = cpu_environment()
        env['device'] += f', {torch.get_num_threads()} torch threads'
    return dict(env, torch=torch.__version__, timm=timm.__version__, python=platform.python_version(),
                date=datetime.now(timezone.utc).isoformat(timespec='seconds'))


def throughput_table(rows: Sequence[Dict[str, Any]]) -> str:
    """Markdown table of (a), (b) and their ratio; ``rows`` hold model, dataset, batch_size, device,
    trainer (median img/s) and bare (median img/s)."""
    return markdown_table(
        ('model', 'dataset', 'batch', 'device', 'trainer img/s', 'bare step img/s', 'trainer / bare'),
        [(r['model'], r['dataset'], str(r['batch_size']), r['device'], f"{r['trainer']:,.0f}", f"{r['bare']:,.0f}",
          f"{r['trainer'] / r['bare']:.2f}" if r['bare'] > 0 else 'n/a') for r in rows])


def time_to_target_table(rows: Sequence[Dict[str, Any]]) -> str:
    """Markdown table of (c); ``rows`` hold model, dataset and the fields of ``TimeToTarget``."""
    cells = []
    for r in rows:
        if r['reached_epoch'] is not None:
            epoch, wall = f"{r['reached_epoch']} of {r['epochs']}", f"{r['elapsed']:,.1f}"
        else:
            epoch = f"not reached (best {r['best_acc']:.2f}% at epoch {r['best_epoch']})"
            wall = f"{r['total_elapsed']:,.1f} (whole run, {r['epochs']} epochs)"
        cells.append((r['model'], r['dataset'], f"{r['target']:g}%", epoch, wall, f"{r['final_acc']:.2f}%",
                      _against_decision(r)))
    return markdown_table(('model', 'dataset', 'target', 'reached at epoch', 'wall s (incl. start-up and compile)',
                      'final acc', 'trainer img/s (epochs 2..n) / fastest candidate of its CPU decision'), cells)


def _against_decision(r: Dict[str, Any]) -> str:
    """The run's training speed against the fastest candidate its CPU decision measured, or why there is none."""
    rates, trainer = r.get('cpu_rates'), r.get('trainer_rate')
    if not rates or not trainer:
        return 'no decision measured'
    label = max(rates, key=rates.get)
    return f'{trainer:,.0f} / {rates[label]:,.0f} ({label}) = {trainer / rates[label]:.2f}'


def render_markdown(results: Dict[str, Any]) -> str:
    """Header (device, versions, date, settings) and the tables of a results dict from ``run``."""
    env, s = results['environment'], results['settings']
    lines = [f"## Trainer against the bare training step: {env['device']}", '',
             f"- device: {env['device']}",
             *cpu_flags_lines(env),
             f"- torch {env['torch']}, timm {env['timm']}, python {env['python']}",
             f"- date: {env['date']}",
             f"- command: `{results['command']}`",
             f"- trainer: {s['epochs']} epochs" + (f" of {s['train_subset']} images" if s['train_subset'] else '')
             + ', img/s = median of epochs 2..n (the first one compiles); compile and precision as the bare step',
             f"- bare step: {s['warmup']} warm-up steps, then the median of {s['repeats']} x {s['steps']} steps; "
             f"compile {('mode ' + str(s['compile_mode'])) if s['compile'] else 'off'}, autocast {s['amp_dtype'] or 'off'}, "
             f"AdamW{' (fused)' if s['device'] in FUSED_ADAM_DEVICES else ''}; random inputs resident on the device"]
    if s.get('quick'):
        lines.append('- --quick: smoke-test settings, the numbers say nothing about the speed')
    lines += ['', throughput_table(results['throughput'])]
    if results.get('time_to_target'):
        lines += ['', '### Wall time to the target test accuracy (default recipe, one run)', '',
                  time_to_target_table(results['time_to_target'])]
    return '\n'.join(lines) + '\n'


# -- the run ---------------------------------------------------------------------------------------

@dataclass
class TrainingBenchmarkConfig:
    """Everything one run of the training benchmark depends on."""
    models: Tuple[str, ...] = ('vit_minimal_sym_6x4',)
    datasets: Tuple[str, ...] = BENCHMARK_DATASETS
    batch_sizes: Tuple[int, ...] = (1024,)
    data_dir: str = 'data'
    device: str = 'auto'
    epochs: int = 3
    train_subset: Optional[int] = None
    eval_subset: Optional[int] = 2048
    steps: int = 40
    warmup: int = 15
    repeats: int = 5
    threads: Optional[int] = None
    compile_mode: Optional[str] = 'reduce-overhead'  # the trainer's default for one process on a GPU
    time_to_target: bool = False
    targets: Dict[str, Tuple[float, ...]] = field(default_factory=lambda: dict(DEFAULT_TARGETS))
    out_json: Optional[str] = 'reports/training.json'  # the committed ones: benchmarks/training_<device>.*
    out_md: Optional[str] = 'reports/training.md'
    keep_runs: Optional[str] = None
    trainer_args: Tuple[str, ...] = ()
    target_args: Tuple[str, ...] = ()  # trainer arguments of (c) only, before trainer_args (--quick's)
    quick: bool = False
    seed: int = 0
    command: str = ''

    def resolved_device(self) -> torch.device:
        """cuda when available for 'auto'; UsageError for a device that is not there."""
        if self.device == 'auto':
            return torch.device('cuda' if torch.cuda.is_available() else 'cpu')
        if self.device not in ('cpu', 'cuda'):
            raise UsageError(f"--device must be auto, cpu or cuda, got '{self.device}'")
        if self.device == 'cuda' and not torch.cuda.is_available():
            raise UsageError('--device cuda, but torch sees no CUDA GPU')
        return torch.device(self.device)


def _unique_dir(parent: Path, name: str) -> Path:
    """``parent/name``, or ``parent/name-2``, ... when that exists (the trainer refuses a non-empty folder)."""
    path, i = parent / name, 1
    while path.exists() or (parent / f'{path.name}.stdout.txt').exists():
        i += 1
        path = parent / f'{name}-{i}'
    return path


def _log(text: str) -> None:
    print(text, flush=True)


def _measure_pair(config: TrainingBenchmarkConfig, model: str, dataset: str, batch: int, device: torch.device,
                  runs: Path, runner: Optional[TrainerRunner]) -> Dict[str, Any]:
    """(a) and (b) for one model, dataset and batch size; a row of the throughput table with raw numbers."""
    compile_, amp = device.type == 'cuda', _amp_dtype(device)
    output = _unique_dir(runs, f'throughput-{dataset}-{model}-b{batch}')
    _log(f'[trainer] {model} {dataset} batch {batch}: {config.epochs} epochs in {output}')
    a = trainer_throughput(
        model, dataset, batch, config.data_dir, output, epochs=config.epochs, runner=runner,
        device_type=device.type, compile=compile_, compile_mode=config.compile_mode,
        mixed_precision='bf16' if amp is torch.bfloat16 else 'no',
        train_subset=config.train_subset, eval_subset=config.eval_subset, seed=config.seed,
        extra_args=config.trainer_args)
    _log(f'[bare step] {model}.{dataset} batch {batch}: {config.warmup} warm-up + {config.repeats} x '
         f'{config.steps} steps')
    try:
        b = bare_step_throughput(f'{model}.{dataset}', batch, device, compile_, amp, config.steps, config.warmup,
                                 config.repeats, compile_mode=config.compile_mode)
    except RuntimeError as e:  # CUDA out of memory included
        first = (str(e).strip().splitlines() or [type(e).__name__])[0]
        raise MeasurementError(f'the bare step of {model}.{dataset} at batch {batch} failed: {first}') from e
    bare = statistics.median(b)
    _log(f'  trainer {a.median:,.0f} img/s, bare step {bare:,.0f} img/s, ratio {a.median / bare:.2f}')
    return dict(model=model, dataset=dataset, batch_size=batch, device=device.type, trainer=a.median, bare=bare,
                ratio=a.median / bare, trainer_run=asdict(a), bare_repeats=b)


def _amp_dtype(device: torch.device) -> Optional[torch.dtype]:
    """bf16 autocast on a CUDA GPU that supports it, none otherwise (the trainer's default)."""
    return torch.bfloat16 if device.type == 'cuda' and torch.cuda.is_bf16_supported() else None


def _measure_target(config: TrainingBenchmarkConfig, model: str, dataset: str, device: torch.device, runs: Path,
                    runner: Optional[TrainerRunner]) -> List[Dict[str, Any]]:
    """(c) for one model and dataset: one run, a row of the time-to-target table per target."""
    output = _unique_dir(runs, f'target-{dataset}-{model}')
    targets = config.targets[dataset]
    _log(f'[time to target] {model} {dataset}: default recipe until the end, targets '
         f"{', '.join(f'{t:g}%' for t in targets)} in {output}")
    readings = time_to_target(model, dataset, config.data_dir, output, targets, device_type=device.type,
                              extra_args=(*config.target_args, *config.trainer_args), runner=runner)
    for t in readings:
        _log(f'  {t.target:g}%: ' + (f'reached at epoch {t.reached_epoch}, {t.elapsed:,.1f} s'
                                     if t.reached_epoch is not None
                                     else f'not reached: best {t.best_acc:.2f}%, {t.total_elapsed:,.1f} s'))
    return [dict(model=model, dataset=dataset, **asdict(t)) for t in readings]


def run(config: TrainingBenchmarkConfig, runner: Optional[TrainerRunner] = None) -> Dict[str, Any]:
    """All measurements of ``config``; the results dict (settings, environment, raw numbers)."""
    device = config.resolved_device()
    if runner is None and config.threads:
        runner = lambda args, output: run_trainer_subprocess(args, output, threads=config.threads)  # noqa: E731
    amp = _amp_dtype(device)
    settings = dict(asdict(config), device=device.type, compile=device.type == 'cuda',
                    amp_dtype=str(amp).replace('torch.', '') if amp else None)
    with torch_threads(config.threads or None), tempfile.TemporaryDirectory(prefix='training-benchmark-') as tmp:
        results: Dict[str, Any] = dict(command=config.command, settings=settings, environment=environment(device),
                                       throughput=[], time_to_target=[])
        runs = Path(config.keep_runs) if config.keep_runs else Path(tmp)
        for dataset in config.datasets:
            for model in config.models:
                for batch in config.batch_sizes:
                    results['throughput'].append(_measure_pair(config, model, dataset, batch, device, runs, runner))
                if config.time_to_target:
                    results['time_to_target'].extend(_measure_target(config, model, dataset, device, runs, runner))
    return results


# -- command line ----------------------------------------------------------------------------------

_positive_int = positive_int
_ACCURACY = number(float, 0, 100)


def _target(text: str) -> Tuple[str, float]:
    name, sep, value = text.partition('=')
    if not sep:
        raise argparse.ArgumentTypeError(f"expected DATASET=ACCURACY, e.g. mnist=98.24, got '{text}'")
    try:
        return name.strip(), _ACCURACY(value)
    except argparse.ArgumentTypeError as e:
        raise argparse.ArgumentTypeError(f'expected DATASET=ACCURACY, e.g. mnist=98.24; the accuracy of {name.strip()} '
                                         f'{e}') from None


def build_parser() -> argparse.ArgumentParser:
    """The command line; trainer arguments follow ``--``."""
    d = TrainingBenchmarkConfig()
    p = OneLineParser(prog=PROG, description=(
        'Measure the trainer against the bare training step on the same hardware: (a) trainer images/s with the '
        'real data path (median of epochs 2..n), (b) the bare step on resident random data (compile and bf16 on '
        'CUDA), their ratio; (c) with --time-to-target, the wall time of a default-recipe run to a test accuracy. '
        'Prints a markdown report last. Trainer arguments may follow "--" (appended to every trainer run).'))
    p.add_argument('--models', nargs='+', default=list(d.models), metavar='NAME',
                   help=f'vit_minimal architectures without a tag, the dataset picks it (default {d.models[0]})')
    p.add_argument('--datasets', nargs='+', default=list(d.datasets), choices=BENCHMARK_DATASETS, help='default: mnist cifar10')
    p.add_argument('--batch-sizes', nargs='+', type=_positive_int, default=None, metavar='B',
                   help='default 1024 (--quick: 64)')
    p.add_argument('--data-dir', default=d.data_dir, metavar='DIR', help="the trainer's --data-dir (default data)")
    p.add_argument('--device', default=d.device, choices=('auto', 'cpu', 'cuda'), help='default: cuda if available')
    _add_measurement_args(p, d)
    p.add_argument('--time-to-target', action='store_true',
                   help='(c): also one whole default-recipe run per model and dataset (long)')
    p.add_argument('--targets', nargs='+', type=_target, default=[], metavar='DATASET=ACC',
                   help='test accuracy targets in percent, one or more per dataset, read off one run (default '
                        'mnist=98.24 cifar10=60 cifar10=70)')
    p.add_argument('--output', default=None, metavar='PATH',
                   help=f'markdown report (default {d.out_md}; --quick: none; "" for none)')
    p.add_argument('--json', default=None, metavar='PATH',
                   help=f'raw results (default {d.out_json}; --quick: none; "" for none)')
    p.add_renamed('--out-md', '--output')
    p.add_renamed('--out-json', '--json')
    p.add_argument('--keep-runs', default=None, metavar='DIR',
                   help='keep the trainer runs in DIR (default: a temporary folder, removed at the end)')
    p.add_argument('--quick', action='store_true', help='smoke test: batch 64, 512 training images per epoch, '
                   '2 warm-up + 2 x 3 steps; (c) shortened to 2 epochs; writes no files unless asked')
    return p


def _add_measurement_args(p: argparse.ArgumentParser, d: TrainingBenchmarkConfig) -> None:
    """The options of measurements (a) and (b)."""
    p.add_argument('--epochs', metavar='N', type=_positive_int, default=d.epochs,
                   help=f'(a): trainer epochs, at least 3 (default {d.epochs})')
    p.add_argument('--train-subset', metavar='N', type=_positive_int, default=None,
                   help='(a): train on this many images per epoch (default: all; --quick: 512)')
    p.add_argument('--eval-subset', metavar='N', type=_positive_int, default=None,
                   help=f'(a): evaluate on this many images (default {d.eval_subset}; --quick: 256)')
    p.add_argument('--seed', type=SEED, default=d.seed, help="(a): the trainer's --seed (default 0)")
    p.add_argument('--steps', metavar='N', type=_positive_int, default=None,
                   help=f'(b): steps per timed repeat (default {d.steps}; --quick: 3)')
    p.add_argument('--warmup', metavar='N', type=non_negative_int, default=None,
                   help=f'(b): warm-up steps, compilation included (default {d.warmup}; --quick: 2)')
    p.add_argument('--repeats', metavar='N', type=_positive_int, default=None,
                   help=f'(b): timed repeats, the median is reported (default {d.repeats}; --quick: 2)')
    p.add_argument('--compile-mode', default=TrainingBenchmarkConfig.compile_mode, metavar='MODE',
                   help="torch.compile mode of the trainer and the bare step on a GPU (default reduce-overhead, the "
                        "trainer's own default for one process; 'default' for plain torch.compile)")
    p.add_argument('--threads', metavar='N', type=_positive_int, default=None,
                   help="CPU: torch threads of (b) and of the trainer (OMP_NUM_THREADS); default torch's")


QUICK = dict(batch_sizes=(64,), train_subset=512, eval_subset=256, steps=3, warmup=2, repeats=2,
             target_args=('--epochs', '2', '--train-subset', '512', '--eval-subset', '256'), out_json=None,
             out_md=None)


def _check_models(models: Sequence[str]) -> None:
    for name in models:
        if '.' in name:
            raise UsageError(f"model '{name}': give the architecture without a tag, the dataset picks it "
                             f"(e.g. --models {name.split('.')[0]})")
        if name not in ARCHITECTURES:
            raise UsageError(f"unknown model '{name}'; the vit_minimal architectures are: {', '.join(ARCHITECTURES)}")


def config_from_args(args: argparse.Namespace, trainer_args: Sequence[str] = (),
                     command: str = '') -> TrainingBenchmarkConfig:
    """Validated configuration (UsageError naming the problem) from parsed arguments."""
    _check_models(args.models)
    if args.epochs < 3:
        raise UsageError(f'--epochs must be at least 3 (the median of epochs 2..n), got {args.epochs}')
    if args.warmup is not None and args.warmup < 0:
        raise UsageError(f'--warmup must be >= 0, got {args.warmup}')
    if not Path(args.data_dir).is_dir():
        raise UsageError(f"data folder '{args.data_dir}' does not exist; pass --data-dir with the MNIST / CIFAR-10 "
                         f"files the trainer reads")
    given: Dict[str, Tuple[float, ...]] = {}
    for name, value in args.targets:
        if name not in BENCHMARK_DATASETS:
            raise UsageError(f"--targets: expected DATASET=ACCURACY with DATASET in {', '.join(BENCHMARK_DATASETS)}, "
                             f"got '{name}={value:g}'")
        given[name] = given.get(name, ()) + (value,)
    targets = {**DEFAULT_TARGETS, **given}  # a dataset on the command line replaces its default targets
    values: Dict[str, Any] = dict(QUICK) if args.quick else {}
    for key in ('batch_sizes', 'train_subset', 'eval_subset', 'steps', 'warmup', 'repeats', 'json', 'output'):
        if getattr(args, key) is not None:
            field = dict(json='out_json', output='out_md').get(key, key)
            values[field] = tuple(args.batch_sizes) if key == 'batch_sizes' else getattr(args, key)
    values.update(models=tuple(args.models), datasets=tuple(dict.fromkeys(args.datasets)), data_dir=args.data_dir,
                  device=args.device, epochs=args.epochs, threads=args.threads, compile_mode=args.compile_mode,
                  time_to_target=args.time_to_target,
                  targets=targets, keep_runs=args.keep_runs, trainer_args=tuple(trainer_args), quick=args.quick,
                  seed=args.seed, command=command)
    config = TrainingBenchmarkConfig(**values)
    config.resolved_device()
    return config


@command(PROG)
def main(argv: Optional[Sequence[str]] = None) -> int:
    """The command line; returns the exit status (0 done, 1 a measurement failed, 2 bad input);
    argparse exits with 2 for a bad command line."""
    argv = list(sys.argv[1:] if argv is None else argv)
    ours, trainer_args = (argv[:argv.index('--')], argv[argv.index('--') + 1:]) if '--' in argv else (argv, [])
    args = build_parser().parse_args(ours)  # --help and a bad command line exit here, as in every tool
    config = config_from_args(args, trainer_args, command=f'{PROG} {shlex.join(argv)}'.rstrip())
    results = run(config)
    write_report(results, render_markdown(results), config.out_json, config.out_md)
    return 0


if __name__ == '__main__':
    sys.exit(main())
