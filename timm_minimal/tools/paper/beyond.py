"""Beyond the paper: each architecture trained as well as it can be, variant against variant at one budget.

    python -m timm_minimal.tools.paper.beyond --data-dir ../shared/data --runs-dir ../runs/beyond --jobs 2
    python -m timm_minimal.tools.paper.beyond --runs-dir ../runs/beyond --report-only --output results/beyond_pilots.md
    python -m timm_minimal.tools.paper.beyond --recipe cifar10 --epochs 300 --jobs 4 --runs-dir ../runs/beyond-gpu \
        --only std_mlp_6x4-strong std_mlp_6x1-strong qk_mlp_6x1-strong qkonly_mlp_6x1-strong \
        --output results/beyond_gpu.md -- --batch-size 1024 --lr 4e-3 --warmup-epochs 45

A variant is a model and the trainer options that change its recipe: mimetic initialisation
(``--model-kwargs weight_init=mimetic``), distillation from the zoo's best MLP model (``--teacher``, with label
smoothing off: the teacher's soft targets take its place), stronger augmentation for the models that overfit
(mixup, cutmix, random erasing and the GPU recipe's zoom and 4-px shift, all on the device data path; RandAugment is
a per-image transform of the loader path, which trains several times slower on a CPU, so the pilots leave it out).
Every variant starts from the dataset's recipe (``--recipe``, default CIFAR-10's CPU recipe) at one budget, seed 0
(a pilot repeated with another seed says so in its name: ``-seed1``), with timm's initialisation (``--weight-init
default``, where the CPU recipe's own is mimetic) unless it is mimetic;
trainer options after ``--`` change that base for every variant (the GPU runs: the converged grid's batch 1024, lr 4e-3
and 45 warm-up epochs, so that each variant differs from the grid's run of its model in the variant's options alone).

Each variant trains once into ``<runs-dir>/<name>/`` (a finished run is reused, an interrupted one resumed), up to
``--jobs`` at a time with the cores split among them. The report lists, per variant, the test accuracy of the last
epoch (no checkpoint is chosen on the test split), the best epoch's for reference, and the last epoch's training
accuracy, which tells underfitting from overfitting; a figure beside it (``--plot``) draws both per epoch. A pilot
whose folder is gone keeps its row of the report's earlier JSON, with the CPU it trained on and its curves. The
reading of the runs is written by hand under the report's heading "What the runs say", which a regenerated report
keeps.
"""
import argparse
import json
import os
import shlex
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

from ...cli import HelpFormatter, OneLineParser, UsageError, command, positive_int
from ...training.run.files import write_file_atomic, write_text_atomic
from ...training.run.folder import RunFolder
from .grid import PAPER_START, finished_run, thread_env
from .pool import Command, run_commands, say
from .reproduce import split_argv
from .results_summary import check_row, load_pilots, pilot_seed, pilot_setup
from ..common import portable_command
from ..figures import pyplot

__all__ = ['Variant', 'PILOTS', 'variant_command', 'collect', 'cpu_threads', 'write_report', 'write_plot', 'main']

TEACHER = 'vit_minimal_std_mlp_6x4.cifar10'  # the paper recipe's best CIFAR-10 model (79.34%, its card)
STRONG_TEACHER = 'vit_minimal_std_mlp_6x4.mixup_cifar10'  # the zoo's best CIFAR-10 model (82.41%, its card)
MIMETIC = ('--model-kwargs', 'weight_init=mimetic')
DISTILLED = ('--teacher', TEACHER, '--smoothing', '0')
DISTILLED_STRONG = ('--teacher', STRONG_TEACHER, '--smoothing', '0')
STRONG_AUG = ('--mixup', '0.8', '--cutmix', '1.0', '--reprob', '0.25', '--scale', '0.81', '1.21',
              '--translate', '0.125')
RANDAUG = ('--data-path', 'loader', '--aa', 'rand-m9-mstd0.5-inc1')
LESS_REG = ('--weight-decay', '0', '--smoothing', '0')
NO_AUG = ('--hflip', '0', '--translate', '0')  # what is left of the CPU recipe's augmentation: flips and a 1-px shift
READING = '## What the runs say'  # a report's hand-written part: from this heading on, kept when it regenerates


@dataclass(frozen=True)
class Variant:
    """One pilot: a name (its run folder), the model, the options that change the recipe and the seed."""
    name: str
    model: str
    options: Sequence[str] = ()
    what: str = 'the recipe as it is'
    seed: int = 0


def _family(arch: str) -> List[Variant]:
    """The four pilots of an architecture (its CIFAR-10 tag): plain, mimetic, distilled, mimetic and distilled."""
    model = f'vit_minimal_{arch}.cifar10'
    return [Variant(f'{arch}-plain', model), Variant(f'{arch}-mimetic', model, MIMETIC, 'mimetic initialisation'),
            Variant(f'{arch}-kd', model, DISTILLED, f'distilled from {TEACHER}, no label smoothing'),
            Variant(f'{arch}-mimetic-kd', model, MIMETIC + DISTILLED, 'mimetic initialisation and distillation')]


def _strong_teacher(arch: str) -> Variant:
    return Variant(f'{arch}-mimetic-kd-strong-teacher', f'vit_minimal_{arch}.cifar10', MIMETIC + DISTILLED_STRONG,
                   f'mimetic initialisation and distillation from {STRONG_TEACHER}')


def _less_reg(arch: str) -> Variant:
    return Variant(f'{arch}-mimetic-less-reg', f'vit_minimal_{arch}.cifar10', MIMETIC + LESS_REG,
                   'mimetic initialisation, no weight decay, no label smoothing')


def _no_reg(arch: str) -> Variant:
    """Less regularisation with the augmentation off too: nothing left between the model and its training images,
    so its fit of them is what its capacity allows at the budget."""
    less = _less_reg(arch)
    return Variant(f'{arch}-mimetic-no-reg', less.model, less.options + NO_AUG, f'{less.what}, no flips or shifts')


def _through_token(v: Variant, distill_type: str = 'token') -> Variant:
    """``v``, a pilot distilled on the logits (``-kd`` in its name), distilled through a distillation token instead
    (timm's TokenDistillationTask), to be measured against it."""
    kind = '(hard, DeiT\'s)' if distill_type == 'hard-token' else '(soft)'
    return replace(v, name=v.name.replace('-kd', f'-{distill_type}'),
                   options=(*v.options, '--distill-type', distill_type),
                   what=f'{v.what} through a distillation token {kind}')


def _token(arch: str, distill_type: str) -> Variant:
    """The mimetic start with distillation through a distillation token, against ``<arch>-mimetic-kd``."""
    return _through_token(_family(arch)[3], distill_type)


def _less_reg_token(arch: str) -> Variant:
    """The three changes for a model that underfits at once: the mimetic start, no weight decay and distillation
    through a token (which turns label smoothing off), against each of them alone."""
    token = _token(arch, 'token')
    return Variant(f'{arch}-mimetic-less-reg-token', token.model, (*token.options, '--weight-decay', '0'),
                   'mimetic initialisation, no weight decay, no label smoothing, distillation through a distillation '
                   'token (soft)')


def _hot(arch: str) -> Variant:
    """``<arch>-mimetic-kd`` at the temperature and loss weights of timm's own example for its distillation task
    (temperature 4, task 0.3, distillation 0.7) instead of timm's defaults (1; 1 and 1), against it."""
    kd = _family(arch)[3]
    return replace(kd, name=f'{kd.name}-t4', options=(*kd.options, '--distill-temperature', '4',
                                                      '--distill-task-weight', '0.3'),
                   what=f'{kd.what}, temperature 4, loss weights task 0.3 / distillation 0.7')


def _seeded(v: Variant, seed: int) -> Variant:
    """``v`` again with another seed: how far one seed's result is from another's."""
    return replace(v, name=f'{v.name}-seed{seed}', what=f'{v.what}, seed {seed}', seed=seed)


_STRONG_WHAT = 'mixup 0.8, cutmix 1.0, random erasing 0.25, zoom +-10%, 4-px shift'

# In the order they run: the questions that decide the most first.
_SYM, _QK = _family('sym_6x4'), _family('qk_6x1')
PILOTS: List[Variant] = [
    _SYM[1], _SYM[2], _SYM[0],
    Variant('std_mlp_6x4-strong', 'vit_minimal_std_mlp_6x4.cifar10', STRONG_AUG, _STRONG_WHAT),
    _SYM[3], _QK[1], _QK[2], _QK[0],
    Variant('std_mlp_6x4-plain', 'vit_minimal_std_mlp_6x4.cifar10'), _QK[3],
    # the recipe the sym_6x4 pilots chose, for the other 4-head model's converged run (--epochs 150)
    _family('std_6x4')[3],
    # the other MLP models with the strong augmentation (converged runs on a GPU)
    *(Variant(f'{arch}-strong', f'vit_minimal_{arch}.cifar10', STRONG_AUG, _STRONG_WHAT)
      for arch in ('std_mlp_6x1', 'qk_mlp_6x1', 'qkonly_mlp_6x1')),
    # the other models without an MLP with the chosen recipe, and four of them with the stronger teacher
    *(_family(arch)[3] for arch in ('std_6x1', 'sym_6x1', 'qkonly_6x1')),
    *(_strong_teacher(arch) for arch in ('sym_6x4', 'std_6x4', 'qk_6x1', 'std_6x1')),
    # the strong augmentation with RandAugment, a per-image transform of the loader path (CCT's CIFAR-10 recipe has it)
    Variant('std_mlp_6x4-strong-randaug', 'vit_minimal_std_mlp_6x4.cifar10', STRONG_AUG + RANDAUG,
            _STRONG_WHAT + ', RandAugment m9 (loader path)'),
    # qkonly_6x1 as the recipe is, the run its mimetic start with distillation is measured against at the CPU budget
    _family('qkonly_6x1')[0],
    # less regularisation for the models that underfit: the mimetic start without weight decay or label smoothing,
    # against the mimetic pilots above (std_6x4's mimetic pilot, the one it is measured against, beside it)
    _less_reg('sym_6x4'), _less_reg('qk_6x1'), _family('std_6x4')[1],
    _less_reg('std_6x4'),
    # the same comparison with a second seed, for the two models whose gain was within one seed's spread
    *(_seeded(v, 1) for arch in ('sym_6x4', 'qk_6x1')
      for v in (_family(arch)[1], _less_reg(arch))),
    # and the plain runs of seed 1 they are measured against
    *(_seeded(_family(arch)[0], 1) for arch in ('qk_6x1', 'sym_6x4')),
    # distillation through DeiT's distillation token, soft and hard, against the same on the logits (-mimetic-kd)
    *(_token(arch, kind) for arch in ('sym_6x4', 'qk_6x1') for kind in ('token', 'hard-token')),
    # and with less regularisation too: do the two gains of the underfitting models add up?
    *(_less_reg_token(arch) for arch in ('sym_6x4', 'qk_6x1')),
    *(_seeded(_less_reg_token(arch), 1) for arch in ('qk_6x1', 'sym_6x4')),
    # no regularisation at all, augmentation included: is what the models without an MLP fit bound by capacity?
    *(_no_reg(arch) for arch in ('sym_6x4', 'qk_6x1')),
    # the token against the logits with a second seed: the token's lead over them was within one seed's spread
    *(_seeded(v, 1) for v in (_token('sym_6x4', 'token'), _SYM[3])),
    # and for the one-head model: does the token's lead hold where the student has a single head?
    *(_seeded(v, 1) for v in (_token('qk_6x1', 'token'), _QK[3])),
    # the temperature and loss weights of timm's example for its distillation task, against timm's defaults, which
    # every distilled run so far used: does the softer, teacher-heavier loss pay for a student that underfits?
    *(_hot(arch) for arch in ('sym_6x4', 'qk_6x1')),
    # the converged runs still to do (a GPU's): the last 6-layer one-head model with the stronger teacher, and the
    # 12-layer models with their family's recipe
    _strong_teacher('sym_6x1'), _strong_teacher('std_12x1'), _strong_teacher('std_12x4'),
    *(Variant(f'{arch}-strong', f'vit_minimal_{arch}.cifar10', STRONG_AUG, _STRONG_WHAT)
      for arch in ('std_mlp_12x1', 'std_mlp_12x4')),
    # and the 4-head models' converged runs through the token, against their -mimetic-kd-strong-teacher runs
    *(_through_token(_strong_teacher(arch)) for arch in ('sym_6x4', 'std_6x4')),
    # and one of them with a second seed: is the token's lead over the logits at the full budget more than a seed's?
    _seeded(_through_token(_strong_teacher('std_6x4')), 1),
]


def variant_command(v: Variant, args: argparse.Namespace) -> Optional[Command]:
    """The trainer command of a variant (a resume where its folder holds a run); None when it finished."""
    folder = RunFolder(Path(args.runs_dir) / v.name)
    if finished_run(folder, args.epochs):
        say(f'[beyond] {v.name}: finished run in {folder}, reused')
        return None
    argv = [sys.executable, '-m', 'timm_minimal.training.train']
    if folder.args_file.is_file():
        argv += ['--resume', str(folder)]
    else:
        if folder.path.exists() and not folder.is_empty():
            raise UsageError(f'{folder.path} holds files that are not a run of this tool; move them away or choose '
                             f'another --runs-dir. Nothing was trained.')
        argv += ['--model', v.model, '--dataset', 'cifar10', '--recipe', args.recipe, '--epochs', str(args.epochs),
                 '--seed', str(v.seed), '--output', str(folder), '--no-progress', '--cpu-processes', '1',
                 *PAPER_START, *args.trainer_args, *v.options]
        if args.data_dir:
            argv += ['--data-dir', args.data_dir]
    return Command(v.name, argv, Path(args.runs_dir) / 'logs' / f'{v.name}.log', env=thread_env(args.jobs))


def collect(variants: Sequence[Variant], runs_dir: Path) -> List[Dict[str, Any]]:
    """One row per variant with a run: its last epoch, its best epoch, its teacher and its wall time."""
    rows = []
    for v in variants:
        folder = RunFolder(runs_dir / v.name)
        if not folder.is_run():
            continue
        record, metrics = folder.read_record(), folder.read_metrics()
        if not metrics:
            continue
        last = metrics[-1]
        best = max(metrics, key=lambda m: m['test_acc'])
        rows.append(dict(name=v.name, model=v.model, what=v.what, options=list(v.options), params=record.num_params,
                         status=record.status, epochs=last['epoch'],
                         planned_epochs=(folder.read_args() or {}).get('epochs'),
                         test_acc=last['test_acc'], train_acc=last['train_acc'], best_test_acc=best['test_acc'],
                         best_epoch=best['epoch'], teacher=record.teacher, seed=v.seed,
                         wall_time=sum(m['epoch_time'] for m in metrics), threads=record.last_launch.torch_threads,
                         device=record.last_launch.device_name, device_type=record.last_launch.device,
                         cpu_flags=record.last_launch.cpu_flags, recipe=record.recipe,
                         command=portable_command(record.command, v.name) if record.command else None,
                         train_acc_per_epoch=[round(m['train_acc'], 2) for m in metrics],
                         test_acc_per_epoch=[round(m['test_acc'], 2) for m in metrics]))
    return rows


# what the report reads of a row kept from its earlier JSON, beyond what results_summary checks of every pilot row
_NONE = type(None)
_KEPT_KEYS = {'params': (int, _NONE), 'train_acc': float, 'best_test_acc': float, 'best_epoch': int,
              'wall_time': float, 'device': (str, _NONE), 'threads': (int, _NONE), 'teacher': (dict, _NONE),
              'cpu_flags': (str, _NONE), 'device_type': str, 'recipe': (str, _NONE), 'command': (str, _NONE),
              'train_acc_per_epoch': list, 'test_acc_per_epoch': list}
_KEPT_OPTIONAL = ('cpu_flags', 'device_type', 'recipe', 'command', 'train_acc_per_epoch', 'test_acc_per_epoch')
_KEPT_RANGES = {'train_acc': (0, 100), 'best_test_acc': (0, 100), 'best_epoch': (1, None), 'wall_time': (0, None),
                'threads': (1, None)}
_TEACHER_KEYS = {'name': str, 'num_params': int, 'test_acc': float, 'precision': str, 'distill_type': str,
                 'temperature': float, 'task_weight': float, 'distill_weight': float}


def read_earlier(path: Path) -> List[Dict[str, Any]]:
    """The rows of the report's earlier JSON (none where it has none yet), each checked for what the report reads of
    it; a bad file is refused in one line before anything is written (it holds the rows of pilots whose run folders
    are gone, so the tool neither drops nor overwrites it)."""
    if not path.is_file():
        return []
    try:
        rows = load_pilots(path, empty_ok=True)
        for i, r in enumerate(rows, 1):
            where = f'{path} row {i}'
            check_row(r, where, _KEPT_KEYS, _KEPT_RANGES, _KEPT_OPTIONAL)
            if r['teacher'] is not None:
                check_row(r['teacher'], f'{where} teacher', _TEACHER_KEYS, {})
            curves = [r.get(k) for k in ('train_acc_per_epoch', 'test_acc_per_epoch')]
            if any(c is not None for c in curves) and not (
                    all(isinstance(c, list) for c in curves) and len(curves[0]) == len(curves[1])
                    and all(isinstance(v, (int, float)) and not isinstance(v, bool) for c in curves for v in c)):
                raise ValueError(f'{where}: "train_acc_per_epoch" and "test_acc_per_epoch" must be lists of numbers '
                                 'of one length')
    except ValueError as e:
        raise UsageError(f'{e}; fix or move it away (a report rebuilt without it loses the rows of the pilots whose '
                         'run folders are gone)') from None
    return rows


def keep_earlier(rows: List[Dict[str, Any]], earlier: Sequence[Dict[str, Any]],
                 variants: Sequence[Variant]) -> List[Dict[str, Any]]:
    """``rows`` and, for each chosen pilot with no run folder here, its row of an earlier report (run folders may not
    outlive the machine that trained them; their measurements stay), in the order of ``variants``."""
    by_name = {r['name']: r for r in earlier}
    by_name.update({r['name']: r for r in rows})
    return [by_name[v.name] for v in variants if v.name in by_name]


def _machine(row: Dict[str, Any]) -> str:
    """The device a row trained on, as its run recorded it: a GPU by its name, a CPU with its flags (rows of runs
    that recorded no flags say so)."""
    if pilot_setup(row)[1] != 'cpu':
        return f"{row['device']} (GPU)"
    return f"{row['device']} (CPU flags: {row.get('cpu_flags') or 'not recorded'})"


def reading(path: Path) -> List[str]:
    """The hand-written reading of an existing report: its lines from the ``READING`` heading on, which a new report
    keeps (the tables regenerate from the runs, the reading of them does not)."""
    lines = path.read_text().splitlines() if path.is_file() else []
    return lines[lines.index(READING):] if READING in lines else []


def cpu_threads(rows: Sequence[Dict[str, Any]]) -> str:
    """How the CPU runs used their machine, from the thread count each run recorded (the first pilots': one)."""
    by_count: Dict[int, List[str]] = {}
    for r in rows:
        if pilot_setup(r)[1] == 'cpu':
            by_count.setdefault(r.get('threads') or 1, []).append(r['name'])
    if not by_count:
        return ''
    if set(by_count) == {1}:
        return '; CPU runs as one process of one thread beside one other run'
    return '; CPU runs as one process each, ' + ', '.join(
        f'of {n} thread{"s" if n > 1 else ""} ({", ".join(names)})' for n, names in sorted(by_count.items()))


def write_report(rows: Sequence[Dict[str, Any]], path: Path, command_line: str, plot: Optional[Path] = None) -> None:
    machines = list(dict.fromkeys(_machine(r) for r in rows))
    recipes = list(dict.fromkeys(pilot_setup(r)[0] for r in rows))
    cpu_runs = cpu_threads(rows)
    seeds = sorted({pilot_seed(r) for r in rows})
    seed = f'seed {seeds[0]}' if len(seeds) == 1 else "seed 0 unless the pilot's name ends with another (-seed1)"
    lines = [
        '# Beyond the paper: CIFAR-10 pilots', '',
        f'Command: `{command_line}`', '',
        f'Every run: the {" and ".join(f"`{r}`" for r in recipes)} recipe at the budget shown, {seed}, with the '
        f'options its trainer command (below) adds, on the device the last column names{cpu_runs}. Test accuracy is '
        'that of the last epoch on the full CIFAR-10 test split; the best epoch is shown for reference only (no '
        'checkpoint was chosen on the test split). Train accuracy is measured on the augmented batches of the last '
        'epoch (with mixup and cutmix: against each image\'s own label, so it reads low). Wall times are those of a '
        'shared machine, not benchmarks.', '',
        '| pilot | model | parameters | what changes | epochs | train acc % | test acc % (last) | best test % (epoch) '
        '| wall time (s) | device |',
        '|---|---|---:|---|---:|---:|---:|---:|---:|---:|',
    ]
    for r in rows:
        done = f'{r["epochs"]}' + ('' if r['status'] == 'finished' else f' of {r["planned_epochs"]} (unfinished)')
        params = f'{r["params"]:,}' if r['params'] is not None else '-'
        lines.append(f'| {r["name"]} | `{r["model"]}` | {params} | {r["what"]} | {done} | {r["train_acc"]:.2f} '
                     f'| {r["test_acc"]:.2f} | {r["best_test_acc"]:.2f} ({r["best_epoch"]}) | {r["wall_time"]:,.0f} '
                     f'| {machines.index(_machine(r)) + 1} |')
    lines += [''] + [f'Device {i}: {m}.' for i, m in enumerate(machines, 1)]
    ways = ('name', 'distill_type', 'temperature', 'task_weight', 'distill_weight')
    # one line per teacher and way of distilling from it
    teachers = {tuple(r['teacher'][k] for k in ways): r['teacher'] for r in rows if r.get('teacher')}
    for (name, *_), t in teachers.items():
        lines += ['', f'Teacher `{name}` ({t["num_params"]:,} parameters): {t["test_acc"]:.2f}% on the test split as '
                      f'the runs measured it ({t["precision"]} inference), {t["distill_type"]} distillation at '
                      f'temperature {t["temperature"]:g}, loss weights task {t["task_weight"]:g} / distillation '
                      f'{t["distill_weight"]:g}.']
    commands = [r for r in rows if r.get('command')]  # rows kept from reports that recorded none show none
    if commands:
        lines += ['', 'The trainer commands, as the runs recorded them (with the datasets under `data/`):', '']
        lines += [f'- {r["name"]}: `{r["command"]}`' for r in commands]
    if plot is not None:
        lines += ['', f'![Test and train accuracy per epoch of each run]({os.path.relpath(plot, path.parent)})']
    kept = reading(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(path, '\n'.join(lines + [''] + kept) + '\n')


def write_plot(rows: Sequence[Dict[str, Any]], path: Path) -> bool:
    """Test accuracy (left) and train accuracy (right) per epoch, one colour per run: underfitting shows as train
    close to test and flat, overfitting as train far above it. Rows without curves (kept from reports that recorded
    none) are left out; False when no row has one."""
    curves = [r for r in rows if r.get('test_acc_per_epoch')]
    if not curves:
        return False
    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(15, 6), sharex=True)
    for r in curves:
        epochs = range(1, len(r['test_acc_per_epoch']) + 1)
        line, = axes[0].plot(epochs, r['test_acc_per_epoch'], lw=1, label=r['name'])
        axes[1].plot(epochs, r['train_acc_per_epoch'], lw=1, color=line.get_color(), label=r['name'])
    axes[0].set(xlabel='epoch', ylabel='test accuracy (%)', title='test accuracy, full CIFAR-10 test split')
    axes[1].set(xlabel='epoch', ylabel='train accuracy (%)',
                title='train accuracy, augmented batches (with mixup or cutmix: against the own label)')
    for ax in axes:
        ax.grid(alpha=.3)
        ax.legend(fontsize=7, loc='lower right')
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    write_file_atomic(path, lambda tmp: fig.savefig(tmp, dpi=100, format='png'))
    plt.close(fig)
    return True


def build_parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog='python -m timm_minimal.tools.paper.beyond', description=__doc__.split('\n\n')[0],
                      formatter_class=HelpFormatter)
    p.add_argument('--runs-dir', default='runs/beyond', help='one run folder per pilot: <runs-dir>/<pilot>')
    p.add_argument('--data-dir', default=None, help='dataset root passed to the trainer')
    p.add_argument('--recipe', default='cifar10_cpu', help='the recipe every pilot starts from')
    p.add_argument('--epochs', type=positive_int, default=36, help='the budget of every pilot')
    p.add_argument('--jobs', type=positive_int, default=1, help='pilots at the same time, the cores split among them')
    p.add_argument('--only', nargs='+', metavar='PILOT', help=f'only these pilots ({", ".join(v.name for v in PILOTS)})')
    p.add_argument('--output', default='runs/beyond/pilots.md', help='markdown report')
    p.add_argument('--json', default=None, help='machine-readable rows (default: --output with .json)')
    p.add_argument('--plot', default=None, help='test and train accuracy per epoch (default: --output with .png)')
    p.add_argument('--report-only', action='store_true', help='train nothing; write the report from the run folders')
    p.add_argument('--dry-run', action='store_true', help='print the training commands only')
    p.epilog = 'Trainer options after -- change the base recipe of every pilot (e.g. -- --batch-size 1024 --lr 4e-3).'
    return p


@command('beyond')
def main(argv: Optional[Sequence[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    ours, trainer_args = split_argv(argv)
    args = build_parser().parse_args(ours)
    args.trainer_args = trainer_args
    chosen = [v for v in PILOTS if not args.only or v.name in args.only]
    unknown = sorted(set(args.only or ()) - {v.name for v in PILOTS})
    if unknown:
        raise UsageError(f'unknown pilot(s) {", ".join(unknown)}; choose from {", ".join(v.name for v in PILOTS)}')
    failed = []
    json_path = Path(args.json) if args.json else Path(args.output).with_suffix('.json')
    if not args.report_only:
        commands = [c for c in (variant_command(v, args) for v in chosen) if c is not None]
        if args.dry_run:
            for c in commands:
                say(f'[beyond] {c.name}: {shlex.join(c.argv)}')
            return 0
        read_earlier(json_path)  # a report that could not be written is refused before hours of training
        failed = [r for r in run_commands(commands, jobs=args.jobs, prefix='[beyond] ') if r.returncode != 0]
    earlier = read_earlier(json_path)
    rows = keep_earlier(collect(chosen, Path(args.runs_dir)), earlier, chosen)
    plot = Path(args.plot) if args.plot else Path(args.output).with_suffix('.png')
    plotted = write_plot(rows, plot)
    write_report(rows, Path(args.output), 'python -m timm_minimal.tools.paper.beyond ' + shlex.join(
        [a for a in argv if a not in ('--report-only', '--dry-run')]), plot if plotted else None)
    write_text_atomic(json_path, json.dumps(rows, indent=2) + '\n')
    say(f'[beyond] wrote {args.output}, {json_path}' + (f', {plot}' if plotted else ''))
    return 1 if failed else 0


if __name__ == '__main__':
    sys.exit(main())
