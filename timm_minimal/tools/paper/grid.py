"""The training runs of the paper's grid: the rows selected, one trainer command per row (a finished run is
reused, an interrupted one resumed, a folder that is not the grid's own refused), the cores split among the runs
at once, and the runs' numbers collected from their run folders (through ``RunRecord``)."""
import argparse
import os
import shlex
import sys
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

from ...models.datasets import DATASETS
from ...models.paper import PAPER_EPOCHS, TABLE1, TABLE2, TABLE2_CIFAR10, PaperRow
from ...cli import UsageError
from ...machine import usable_cores
from ...training.run.files import FolderBusy
from ...training.run.folder import RunFolder
from .grid_row import GridRow
from .pool import Command, CommandResult, run_commands, say

__all__ = ['select_rows', 'check_folder', 'train_command', 'train_rows', 'collect', 'difference']


def select_rows(tables: Sequence[int], datasets: Sequence[str], rows: Optional[Sequence[str]] = None) -> List[PaperRow]:
    """The paper rows of the given tables and datasets, optionally only those whose id or model is in ``rows``.

    Table 2 on CIFAR-10 is beyond the paper (``TABLE2_CIFAR10``: its architectures, no paper numbers).
    """
    tables_ = ((1, TABLE1), (2, TABLE2 + TABLE2_CIFAR10))
    out = [r for t, table in tables_ if t in tables for r in table if r.dataset in datasets]
    if rows:
        wanted = set(rows)
        known = {r.row_id for r in out} | {r.model for r in out} | {r.arch for r in out}
        unknown = sorted(wanted - known)
        if unknown:
            raise ValueError(f'unknown rows {unknown}; choose from row ids '
                             f'{sorted(r.row_id for r in out)} or model names {sorted({r.model for r in out})}.')
        out = [r for r in out if wanted & {r.row_id, r.model, r.arch}]
    return out


def _run_dir(runs_dir: Path, row: PaperRow) -> Path:
    return runs_dir / row.model


def thread_env(jobs: int) -> Optional[Dict[str, str]]:
    """With several runs at once, split this machine's CPU cores among them (unless OMP_NUM_THREADS is set)."""
    if jobs == 1 or 'OMP_NUM_THREADS' in os.environ:
        return None
    return dict(os.environ, OMP_NUM_THREADS=str(max(1, usable_cores() // jobs)))


def _own_run(folder: RunFolder, row: PaperRow) -> bool:
    """Whether ``folder`` holds a run that this grid started for ``row``: its ``args.yaml`` names the folder and
    the row's model (``run.json`` follows it within the same start)."""
    try:
        saved = folder.read_args()
    except (OSError, ValueError):
        return False
    return isinstance(saved, dict) and saved.get('model') == row.model \
        and Path(str(saved.get('output', ''))).resolve() == folder.path.resolve()


def check_folder(folder: RunFolder, row: PaperRow) -> Optional[str]:
    """Why the grid may not train ``row`` in ``folder`` (None when it may): the folder holds something that is
    not a run of its own, or another process is writing it. Nothing is removed: a folder the grid did not write
    is the user's."""
    path = folder.path
    if path.exists() and not path.is_dir():
        return f'{path} is a file, not a run folder'
    if path.is_dir() and not folder.is_empty() and not _own_run(folder, row):
        return (f'{path} holds files that are not a run of {row.model} (no args.yaml of this grid): move them '
                f'away or choose another --runs-dir')
    if path.is_dir():
        try:
            folder.lock()
        except FolderBusy as e:
            return f'{e}: wait for that run to end'
        finally:
            folder.unlock()
    return None


def finished_run(folder: RunFolder, epochs: int) -> bool:
    """Whether ``folder`` holds a finished run of at least ``epochs`` epochs (to reuse rather than train);
    ``UsageError`` naming the file where its records are not what the trainer writes (the user's to look at)."""
    try:
        return folder.is_run() and folder.status == 'finished' and len(folder.read_metrics()) >= epochs
    except ValueError as e:
        raise UsageError(f'{e}. Nothing was trained.') from None


# the paper's starting point (timm's initialisation), whatever the recipe's (the CPU CIFAR-10 recipe's is mimetic)
PAPER_START = ('--weight-init', 'default', '--train-sizes')  # timm's initialisation, the full images throughout


def train_command(row: PaperRow, args: argparse.Namespace, extra: Sequence[str]) -> Optional[Command]:
    """The command that trains (or resumes) the run of one row; None when its finished run can be reused.

    The folder was checked by ``check_folder``: absent, empty (a start killed before it wrote anything), or a run
    of this grid, resumed."""
    folder = RunFolder(_run_dir(Path(args.runs_dir), row))
    if finished_run(folder, args.epochs):
        say(f'[reproduce] {row.model}: finished run in {folder}, reused')
        return None
    argv = shlex.split(args.launcher) if args.launcher else [sys.executable, '-m']
    argv += ['timm_minimal.training.train']
    if folder.args_file.is_file():
        argv += ['--resume', str(folder), '--epochs', str(args.epochs)]
    else:
        argv += ['--model', row.model, '--dataset', row.dataset, '--output', str(folder), '--epochs', str(args.epochs),
                 '--seed', str(args.seed), '--no-progress', *PAPER_START]
        if args.data_dir:
            argv += ['--data-dir', args.data_dir]
        if args.recipe:
            argv += ['--recipe', args.recipe]
        argv += list(extra)
    log = Path(args.runs_dir) / 'logs' / f'{row.model}.log'
    return Command(row.model, argv, log, env=thread_env(args.jobs))


def train_rows(rows: Sequence[PaperRow], args: argparse.Namespace, extra: Sequence[str]) -> List[CommandResult]:
    """Train the run of every model of ``rows`` (once each), ``args.jobs`` at a time; how each launched run ended.

    Every folder is checked first (``check_folder``): one the grid may not use stops the grid before any run
    starts (``UsageError``). On ``--dry-run`` the commands are printed and nothing runs.
    """
    unique = list({row.model: row for row in rows}.values())
    refused = [why for why in (check_folder(RunFolder(_run_dir(Path(args.runs_dir), r)), r) for r in unique) if why]
    if refused:
        raise UsageError('; '.join(refused) + '. Nothing was trained.')
    commands = {row.model: train_command(row, args, extra) for row in unique}
    todo = [c for c in commands.values() if c is not None]
    if args.dry_run:
        for c in todo:
            say(f'[reproduce] {c.name}: {shlex.join(c.argv)}  (log: {c.log})')
        return []
    results = run_commands(todo, jobs=args.jobs, prefix='[reproduce] ')
    failed = [r for r in results if r.returncode != 0]
    if failed:
        say(f'[reproduce] {len(failed)} of {len(results)} training run(s) failed: '
             + ', '.join(f'{r.name} (exit status {r.returncode}, see {r.log})' for r in failed))
    return results


def collect(rows: Sequence[PaperRow], runs_dir: Path) -> List[GridRow]:
    """One ``GridRow`` per paper row: our last-epoch numbers (None where the run is missing) and the paper's."""
    results = []
    for row in rows:
        folder = RunFolder(_run_dir(runs_dir, row))
        metrics = folder.read_metrics() if folder.is_run() else []
        ours: Dict[str, Any] = dict(params=None, epochs=0, train_loss=None, train_acc=None, val_loss=None,
                                    val_acc=None, best_val_acc=None, best_epoch=None, train_time_s=None, q=None,
                                    wall_time_s=None, mixed_precision=None,
                                    status='missing')
        if metrics:
            m, run = metrics, folder.read_record()
            last = m[-1]
            best = max(m, key=lambda r: r['test_acc'])
            params = run.num_params
            ours = dict(
                params=params, epochs=last['epoch'], train_loss=last['train_loss'], train_acc=last['train_acc'],
                val_loss=last['test_loss'], val_acc=last['test_acc'], best_val_acc=best['test_acc'],
                best_epoch=best['epoch'], train_time_s=sum(r['epoch_time'] for r in m),
                q=(DATASETS[row.dataset].train_samples * DATASETS[row.dataset].num_classes / params) if params else None,
                status=run.status, wall_time_s=run.total_wall_time(m),
                mixed_precision=run.last_launch.mixed_precision,
                val_acc_per_epoch=[r['test_acc'] for r in m])
        results.append(GridRow(
            table=row.table, row_id=row.row_id, label=row.label, model=row.model, architecture=row.arch,
            dataset=row.dataset, depth=row.depth, heads=row.heads, mlp=row.mlp, modification=row.modification,
            **ours, run_dir=str(_run_dir(runs_dir, row)),
            paper_params=row.params, paper_params_from_q=row.params_from_q, paper_q=row.q,
            paper_epochs=PAPER_EPOCHS, paper_train_loss=row.train_loss, paper_train_acc=row.train_acc,
            paper_val_loss=row.val_loss, paper_val_acc=row.val_acc,
            val_acc_gap=difference(ours['val_acc'], row.val_acc),
        ))
    return results


def difference(a: Optional[float], b: Optional[float]) -> Optional[float]:
    return None if a is None or b is None else a - b
