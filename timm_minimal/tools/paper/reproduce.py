"""Train the grid of the paper's Tables 1 and 2 and put our numbers next to the paper's.

    timm-minimal-reproduce --tables 2 --epochs 5 --data-dir ../shared/data --runs-dir runs/reproduce_mnist
    timm-minimal-reproduce --tables 2 --datasets mnist --epochs 5 --jobs 4 --runs-dir runs/reproduce_mnist
    timm-minimal-reproduce --tables 1 --datasets cifar10 --epochs 100 --launcher "accelerate launch --num_processes 4 -m"
    timm-minimal-reproduce --tables 1 2 --report-only --runs-dir runs/reproduce_mnist   # rebuild the table only

Each (model, dataset) of the selected rows is trained once with ``timm_minimal.training.train`` into
``<runs-dir>/<model>.<dataset>/`` (a run that finished is reused, an interrupted one resumed); the
paper's numbers are data in this module (``TABLE1``, ``TABLE2``, from Bermeitinger et al., KDIR 2024).
Every run is a subprocess whose output is appended to ``<runs-dir>/logs/<model>.<dataset>.log``.
By default the runs go one after another with their output also on the console; ``--jobs N`` runs
up to N of them at the same time on the same device (the models are small enough to leave a GPU
mostly idle) and prints one line when each starts and one when it ends. ``run_commands`` is that
pool, usable by any grid script.
Outputs: a markdown report (``--results``), a PNG (``--plot``) and a JSON list of rows (``--json``)
with our and the paper's parameters, epochs, train/validation loss and accuracy. Like the paper, the
numbers are those of the last epoch and the validation set is the test split.
"""
import argparse
import json
import os
import shlex
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, TextIO, Tuple

from ..models.datasets import DATASETS
from ..models.paper import BASELINE, NUM_CLASSES, PAPER, PAPER_EPOCHS, TABLE1, TABLE2, TABLE2_CIFAR10, PaperRow
from ..cli import HelpFormatter, OneLineParser, UsageError, command, positive_int
from ..training.cli import SEED
from ..training.files import FolderBusy
from ..training.run_folder import RunFolder

__all__ = ['PaperRow', 'TABLE1', 'TABLE2', 'Command', 'CommandResult', 'run_commands', 'select_rows',
           'train_command', 'train_rows', 'collect', 'write_markdown', 'write_plot', 'main']

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


# -- a pool of commands, N at a time ---------------------------------------------------------------
@dataclass(frozen=True)
class Command:
    """One command for ``run_commands``: a name for the console, its argv, its log file and environment
    (None: this process's)."""
    name: str
    argv: List[str]
    log: Path
    env: Optional[Dict[str, str]] = None


@dataclass(frozen=True)
class CommandResult:
    """How a command of ``run_commands`` ended: its exit status (negative: killed by that signal; 127: it
    could not be started), the seconds it ran and its wall-clock start and end (``time.time()``)."""
    name: str
    returncode: int
    seconds: float
    started: float
    ended: float
    log: Path


_console_lock = threading.Lock()


def _say(text: str, end: str = '\n') -> None:
    with _console_lock:
        print(text, end=end, flush=True)


def _tee(proc: subprocess.Popen, log: TextIO) -> None:
    """Copy the output of ``proc`` line by line to ``log`` and, indented, to the console."""
    for line in proc.stdout:
        log.write(line)
        log.flush()
        _say(f'  {line}', end='')


class _Processes:
    """The subprocesses a pool started; once stopped, it starts no more and terminates those still running."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._procs: List[subprocess.Popen] = []
        self._stopped = False

    def start(self, command: Command, stdout: Any) -> Optional[subprocess.Popen]:
        """Start ``command`` (None once stopped); raises OSError when it cannot be started."""
        with self._lock:
            if self._stopped:
                return None
            proc = subprocess.Popen(command.argv, stdout=stdout, stderr=subprocess.STDOUT, text=True,
                                    bufsize=1 if stdout is subprocess.PIPE else -1, env=command.env)
            self._procs.append(proc)
            return proc

    def stop(self) -> None:
        with self._lock:
            self._stopped = True
            for proc in self._procs:
                if proc.poll() is None:
                    proc.terminate()


def _execute(command: Command, stream: bool, log: TextIO, processes: _Processes) -> int:
    """Start ``command`` with its output to ``log`` (and the console, when streaming); its exit status."""
    try:
        proc = processes.start(command, subprocess.PIPE if stream else log)
    except OSError as e:
        log.write(f'cannot start {shlex.join(command.argv)}: {e}\n')
        return 127
    if proc is None:
        return -signal.SIGTERM  # the pool was stopped before this command started
    if stream:
        _tee(proc, log)
    return proc.wait()


def _run_command(command: Command, stream: bool, prefix: str, processes: _Processes) -> CommandResult:
    """Run one command to its end with its output appended to its log; its result."""
    command.log.parent.mkdir(parents=True, exist_ok=True)
    _say(f'{prefix}{command.name}: {shlex.join(command.argv)}  (log: {command.log})')
    started, t0 = time.time(), time.perf_counter()
    with open(command.log, 'a') as log:
        returncode = _execute(command, stream, log, processes)
    seconds = time.perf_counter() - t0
    if not stream or returncode != 0:
        _say(f'{prefix}{command.name}: exit status {returncode} after {seconds:.1f} s  (log: {command.log})')
    return CommandResult(command.name, returncode, seconds, started, started + seconds, command.log)


def run_commands(commands: Sequence[Command], jobs: int = 1, stream: Optional[bool] = None,
                 prefix: str = '') -> List[CommandResult]:
    """Run ``commands`` as subprocesses, at most ``jobs`` of them at the same time, in the order given.

    Each command's stdout and stderr are appended to its ``log`` file. With ``stream`` (default: when
    ``jobs`` is 1) every output line also goes to the console, indented; otherwise the console gets
    one line when a command starts (its argv and log) and one when it ends (exit status, seconds,
    log). A command that fails does not stop the others. If this function is interrupted (e.g.
    KeyboardInterrupt), commands not yet started are dropped and running ones are terminated.
    Returns one ``CommandResult`` per command, in the order of ``commands``.
    """
    if jobs < 1:
        raise ValueError(f'jobs must be >= 1, got {jobs}')
    stream = jobs == 1 if stream is None else stream
    processes = _Processes()
    pool = ThreadPoolExecutor(max_workers=jobs, thread_name_prefix='run_commands')
    futures = [pool.submit(_run_command, c, stream, prefix, processes) for c in commands]
    try:
        return [f.result() for f in futures]
    except BaseException:
        pool.shutdown(wait=False, cancel_futures=True)
        processes.stop()
        raise
    finally:
        pool.shutdown(wait=True)


# -- the training runs of the grid -----------------------------------------------------------------
def _thread_env(jobs: int) -> Optional[Dict[str, str]]:
    """With several runs at once, split this machine's CPU cores among them (unless OMP_NUM_THREADS is set)."""
    if jobs == 1 or 'OMP_NUM_THREADS' in os.environ:
        return None
    cores = len(os.sched_getaffinity(0)) if hasattr(os, 'sched_getaffinity') else (os.cpu_count() or 1)
    return dict(os.environ, OMP_NUM_THREADS=str(max(1, cores // jobs)))


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


def train_command(row: PaperRow, args: argparse.Namespace, extra: Sequence[str]) -> Optional[Command]:
    """The command that trains (or resumes) the run of one row; None when its finished run can be reused.

    The folder was checked by ``check_folder``: absent, empty (a start killed before it wrote anything), or a run
    of this grid, resumed."""
    folder = RunFolder(_run_dir(Path(args.runs_dir), row))
    if folder.is_run() and folder.status == 'finished' and len(folder.read_metrics()) >= args.epochs:
        _say(f'[reproduce] {row.model}: finished run in {folder}, reused')
        return None
    argv = shlex.split(args.launcher) if args.launcher else [sys.executable, '-m']
    argv += ['timm_minimal.training.train']
    if folder.args_file.is_file():
        argv += ['--resume', str(folder), '--epochs', str(args.epochs)]
    else:
        argv += ['--model', row.model, '--dataset', row.dataset, '--output', str(folder), '--epochs', str(args.epochs),
                 '--seed', str(args.seed), '--no-progress']
        if args.data_dir:
            argv += ['--data-dir', args.data_dir]
        if args.recipe:
            argv += ['--recipe', args.recipe]
        argv += list(extra)
    log = Path(args.runs_dir) / 'logs' / f'{row.model}.log'
    return Command(row.model, argv, log, env=_thread_env(args.jobs))


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
            _say(f'[reproduce] {c.name}: {shlex.join(c.argv)}  (log: {c.log})')
        return []
    results = run_commands(todo, jobs=args.jobs, prefix='[reproduce] ')
    failed = [r for r in results if r.returncode != 0]
    if failed:
        _say(f'[reproduce] {len(failed)} of {len(results)} training run(s) failed: '
             + ', '.join(f'{r.name} (exit status {r.returncode}, see {r.log})' for r in failed))
    return results


def collect(rows: Sequence[PaperRow], runs_dir: Path) -> List[Dict[str, Any]]:
    """One result dict per paper row: our last-epoch numbers (None where the run is missing) and the paper's."""
    results = []
    for row in rows:
        folder = RunFolder(_run_dir(runs_dir, row))
        metrics = folder.read_metrics() if folder.is_run() else []
        ours: Dict[str, Any] = dict(params=None, epochs=0, train_loss=None, train_acc=None, val_loss=None,
                                    val_acc=None, best_val_acc=None, best_epoch=None, train_time_s=None, q=None,
                                    wall_time_s=None, mixed_precision=None,
                                    status='missing')
        if metrics:
            m, run = metrics, folder.read_run()
            last = m[-1]
            best = max(m, key=lambda r: r['test_acc'])
            params = run.get('num_params')
            ours = dict(
                params=params, epochs=last['epoch'], train_loss=last['train_loss'], train_acc=last['train_acc'],
                val_loss=last['test_loss'], val_acc=last['test_acc'], best_val_acc=best['test_acc'],
                best_epoch=best['epoch'], train_time_s=sum(r['epoch_time'] for r in m),
                q=(DATASETS[row.dataset].train_samples * NUM_CLASSES / params) if params else None,
                status=run.get('status', 'unknown'), wall_time_s=run.get('wall_time'),
                mixed_precision=(run.get('launches') or [{}])[0].get('mixed_precision'),
                val_acc_per_epoch=[r['test_acc'] for r in m])
        results.append(dict(
            table=row.table, row_id=row.row_id, label=row.label, model=row.model, architecture=row.arch,
            dataset=row.dataset, depth=row.depth, heads=row.heads, mlp=row.mlp, modification=row.modification,
            **ours, run_dir=str(_run_dir(runs_dir, row)),
            paper_params=row.params, paper_params_from_q=row.params_from_q, paper_q=row.q,
            paper_epochs=PAPER_EPOCHS, paper_train_loss=row.train_loss, paper_train_acc=row.train_acc,
            paper_val_loss=row.val_loss, paper_val_acc=row.val_acc,
            val_acc_gap=_difference(ours['val_acc'], row.val_acc),
        ))
    return results


def _f(v: Optional[float], fmt: str) -> str:
    return '–' if v is None else format(v, fmt)


def _params(r: Dict[str, Any]) -> str:
    paper = (f"{r['paper_params']:,}" if r['paper_params'] else
             f"≈{r['paper_params_from_q']:,}¹" if r['paper_params_from_q'] else '–')
    return f"{_f(r['params'], ',')} / {paper}"


def _unique(rows: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """One row per model, in first-seen order; a row with the paper's numbers wins over one without."""
    out: Dict[str, Dict[str, Any]] = {}
    for r in rows:
        if r['model'] not in out or (out[r['model']]['paper_val_acc'] is None and r['paper_val_acc'] is not None):
            out[r['model']] = r
    return list(out.values())


def _table_title(table: int, dataset: str) -> str:
    name = DATASETS[dataset].display_name if dataset in DATASETS else dataset
    if table == 1:
        return f'Table 1: MLP vs no MLP ({name})'
    beyond = '' if dataset == 'mnist' else ' (beyond the paper, which tested them on MNIST only: no paper numbers)'
    return f'Table 2: {name}, 6 layers, the matrix variants{beyond}'


def _table_sections(results: List[Dict[str, Any]]) -> List[str]:
    """One table per (paper table, dataset): ours next to the paper, row by row."""
    lines: List[str] = []
    for table, dataset in sorted({(r['table'], r['dataset']) for r in results}, key=lambda k: (k[0], k[1] != 'mnist')):
        rows = [r for r in results if r['table'] == table and r['dataset'] == dataset]
        lines += [f'## {_table_title(table, dataset)}', '']
        lines += ['| data | layers-heads | MLP | modification | model | params (ours / paper) | epochs (ours / paper) '
                  '| train loss (ours / paper) | train acc % (ours / paper) | val loss (ours / paper) '
                  '| val acc % (ours / paper) | Δ val acc (pp) | best val acc % (epoch) |',
                  '|---|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|']
        for r in rows:
            lines.append(
                f"| {r['dataset']} | {r['depth']}-{r['heads']} | {'yes' if r['mlp'] else 'no'} | {r['modification']} "
                f"| `{r['architecture']}` | {_params(r)} | {r['epochs']} / {r['paper_epochs']} "
                f"| {_f(r['train_loss'], '.4f')} / {_f(r['paper_train_loss'], '.4f')} "
                f"| {_f(r['train_acc'], '.2f')} / {_f(r['paper_train_acc'], '.2f')} "
                f"| {_f(r['val_loss'], '.4f')} / {_f(r['paper_val_loss'], '.4f')} "
                f"| **{_f(r['val_acc'], '.2f')}** / {_f(r['paper_val_acc'], '.2f')} | {_f(r['val_acc_gap'], '+.2f')} "
                f"| {_f(r['best_val_acc'], '.2f')} ({r['best_epoch'] or '–'}) |")
        lines.append('')
        if any(not r['paper_params'] and r['paper_params_from_q'] for r in rows):
            lines += ['¹ The paper states no count for this row; ≈ is the count its overdetermination ratio Q implies '
                      '(training samples × classes / Q).', '']
    return lines

def _count_and_rank_bullets(uniq: List[Dict[str, Any]]) -> List[str]:
    """Parameter counts against the paper's, and both rankings by validation accuracy."""
    lines: List[str] = []
    same = [r for r in uniq if r['paper_params'] and r['params'] == r['paper_params']]
    lines.append(f"- Parameter counts equal to the paper's: {len(same)} of "
                 f"{sum(1 for r in uniq if r['paper_params'])} rows with a stated count "
                 f"({', '.join('`' + r['architecture'] + '`' for r in same) or 'none'}).")
    short = lambda r: r['architecture'].replace('vit_minimal_', '')  # noqa: E731
    ours_rank = sorted(uniq, key=lambda r: -r['val_acc'])
    paper_rank = sorted(uniq, key=lambda r: -r['paper_val_acc'])
    lines.append('- Ranked by validation accuracy, ours: ' +
                 ' > '.join(f"`{short(r)}` {r['val_acc']:.2f}" for r in ours_rank) + '; the paper\'s: ' +
                 ' > '.join(f"`{short(r)}` {r['paper_val_acc']:.2f}" for r in paper_rank) + '.')
    differ = [r for r in uniq if r['paper_params'] and r['params'] != r['paper_params']]
    if differ:
        lines.append('- Parameter counts that differ from the paper\'s stated ones (ours minus the paper\'s): ' +
                     ', '.join(f"`{r['architecture']}` {r['params'] - r['paper_params']:+,}" for r in differ) +
                     '. Our models follow the architecture the paper\'s counts imply (width 60, MLP 256, sin-cos '
                     'positions without parameters); the paper\'s 4-head rows carry 8,640 more (a 144 x 60 table that '
                     'fits no 16-token input), its Wqk row with MLP 720 more (Q and K biases) and its symmetry rows '
                     'a count no natural parameterisation gives (`../shared/paper.md` has the arithmetic).')
    return lines


def _progress_bullets(uniq: List[Dict[str, Any]]) -> List[str]:
    """When each model reached the paper, the means with and without MLP, and the training time."""
    lines: List[str] = []
    first_reach = []
    for r in uniq:
        curve = r.get('val_acc_per_epoch') or []
        hit = next((i + 1 for i, a in enumerate(curve) if a >= r['paper_val_acc']), None)
        first_reach.append((r, hit))
    reached = [(r, e) for r, e in first_reach if e]
    if reached:
        lines.append('- First epoch at which our validation accuracy reached the paper\'s 500-epoch value: ' +
                     ', '.join(f"`{r['architecture']}` {e}" for r, e in reached) + '.')
    for mlp in (True, False):
        group = [r for r in uniq if r['mlp'] == mlp]
        if group:
            ours = sum(r['val_acc'] for r in group) / len(group)
            paper = sum(r['paper_val_acc'] for r in group) / len(group)
            lines.append(f"- {'With' if mlp else 'Without'} MLP ({len(group)} models): mean validation accuracy "
                         f"{ours:.2f}% (paper {paper:.2f}%).")
    times = [r['train_time_s'] for r in uniq if r['train_time_s']]
    if times:
        lines.append(f"- Training time (train + evaluation, all epochs) per model: {min(times) / 60:.1f} to "
                     f"{max(times) / 60:.1f} min, {sum(times) / 60:.1f} min in all.")
    return lines


def _summary_section(results: List[Dict[str, Any]]) -> List[str]:
    """The summary, computed from the rows that have both our and the paper's validation accuracy."""
    done = [r for r in results if r['val_acc'] is not None and r['paper_val_acc'] is not None]
    if not done:
        return []
    lines: List[str] = []
    uniq = _unique(done)  # one entry per trained model (rows shared by both tables count once)
    gaps = [r['val_acc_gap'] for r in uniq]
    within = lambda t: sum(abs(g) <= t for g in gaps)  # noqa: E731
    worst = min(uniq, key=lambda r: r['val_acc_gap'])
    bestr = max(uniq, key=lambda r: r['val_acc_gap'])
    epochs = sorted({r['epochs'] for r in uniq})
    lines += ['## Summary', '']
    lines += [
        f"- {len(uniq)} models trained for {', '.join(map(str, epochs))} epoch(s) each, against the paper's "
        f"{PAPER_EPOCHS}; the numbers are those of the last epoch, as in the paper.",
        f"- Validation accuracy, ours minus the paper's: mean {sum(gaps) / len(gaps):+.2f} pp, from "
        f"{worst['val_acc_gap']:+.2f} pp (`{worst['architecture']}`, {worst['val_acc']:.2f}% vs "
        f"{worst['paper_val_acc']:.2f}%) to {bestr['val_acc_gap']:+.2f} pp (`{bestr['architecture']}`, "
        f"{bestr['val_acc']:.2f}% vs {bestr['paper_val_acc']:.2f}%).",
        f"- Within 0.25 pp of the paper: {within(0.25)} of {len(uniq)}; within 0.5 pp: {within(0.5)}; "
        f"within 1 pp: {within(1.0)}.",
        f"- Models at or above the paper's validation accuracy: {sum(g >= 0 for g in gaps)} of {len(uniq)}.",
    ]
    lines += _count_and_rank_bullets(uniq) + _progress_bullets(uniq)
    lines.append('')
    most = max(r['epochs'] for r in uniq)
    above = sum(g >= 0 for g in gaps)
    lines += [f"These runs had {most} epoch(s) each, {100 * most / PAPER_EPOCHS:.1f}% of the paper's {PAPER_EPOCHS}; "
              f"{above} of {len(uniq)} models are already at or above the paper's {PAPER_EPOCHS}-epoch validation "
              f"accuracy. Rerunning the command with a larger `--epochs` resumes and extends every run folder (the "
              f"learning-rate schedule is then recomputed for the new length, which is not the same as a fresh "
              f"run of that length; use a new `--runs-dir` for that).", '']
    return lines

def write_markdown(results: List[Dict[str, Any]], path: Path, setup: Dict[str, Any], plot: Optional[Path]) -> str:
    """The report: per table, ours vs the paper, then a summary computed from the same numbers."""
    lines = ['# Reproducing the paper\'s Tables 1 and 2', '']
    lines += [f'Our minimal transformers trained with `timm_minimal.training.train`, next to the numbers of {PAPER}. '
              f'Generated by `{setup["command"]}`.', '']
    lines += ['**Setup.** ' + setup['text'], '']
    lines += _table_sections(results) + _summary_section(results)
    trained = _unique([r for r in results if r['val_acc'] is not None])
    lines += equal_budget_section(trained) + convergence_section(trained)
    if plot is not None:
        lines += [f'![validation accuracy vs parameters]({os.path.relpath(plot, path.parent)})', '']
    lines += ['Reproduce: the command above; `--report-only` rebuilds this file from the run folders. '
              f"The machine-readable rows are in `{setup.get('json', 'results/reproduce_paper.json')}`.", '']
    text = '\n'.join(lines)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return text




def equal_budget_section(uniq: List[Dict[str, Any]]) -> List[str]:
    """The paper's claim at equal budget: each model's accuracy and parameters against the baseline's."""
    lines: List[str] = []
    for dataset in sorted({r['dataset'] for r in uniq}):
        rows = [r for r in uniq if r['dataset'] == dataset]
        base = next((r for r in rows if r['architecture'] == BASELINE), None)
        if base is None or len(rows) < 2:
            continue
        lines += [f'## At equal budget: each model against the baseline (`{BASELINE}`, {dataset})', '',
                  'The paper claims that the minimal variants lose little accuracy for the parameters they save. '
                  'Here every model had the same budget (epochs, recipe, seed), so the differences are the '
                  'architecture\'s.', '',
                  '| model | params | params saved | val acc % | Δ to baseline (pp), ours | Δ to baseline (pp), paper |',
                  '|---|---:|---:|---:|---:|---:|']
        for r in sorted(rows, key=lambda r: -r['params']):
            lines.append(f"| `{r['architecture']}` | {r['params']:,} | {1 - r['params'] / base['params']:.0%} "
                         f"| {r['val_acc']:.2f} | {r['val_acc'] - base['val_acc']:+.2f} "
                         f"| {_f(_difference(r['paper_val_acc'], base['paper_val_acc']), '+.2f')} |")
        lines.append('')
    return lines


def _difference(a: Optional[float], b: Optional[float]) -> Optional[float]:
    return None if a is None or b is None else a - b


def convergence_section(uniq: List[Dict[str, Any]]) -> List[str]:
    """Per row: the best epoch, and how much the validation accuracy moved over the last tenth of the run."""
    lines = ['## Convergence', '', 'The learning rate decays to its minimum at the end of each run (cosine), so a flat end '
             'says the run settled at this budget, not that more epochs would not help.', '', '| model | epochs | best val acc % (epoch) | last val acc % '
             '| change over the last 10% of epochs (pp) | train acc % | note |', '|---|---:|---:|---:|---:|---:|---|']
    for r in uniq:
        curve = r.get('val_acc_per_epoch') or []
        if len(curve) < 2:
            continue
        tail = max(1, len(curve) // 10)
        change = curve[-1] - curve[-1 - tail]
        note = ('flat at the end of the schedule' if abs(change) < 0.15
                else 'still rising at the end of the schedule' if change > 0 else 'falling at the end of the schedule')
        if r['train_acc'] - r['val_acc'] > 2:
            note += '; overfits (train well above validation)'
        lines.append(f"| `{r['architecture']}` ({r['dataset']}) | {r['epochs']} | {r['best_val_acc']:.2f} "
                     f"({r['best_epoch']}) | {r['val_acc']:.2f} | {change:+.2f} | {r['train_acc']:.2f} | {note} |")
    return lines + ['']


def write_plot(results: List[Dict[str, Any]], path: Path) -> None:
    """Validation accuracy vs parameters (ours and the paper's) and our validation accuracy per epoch."""
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    done = _unique([r for r in results if r['val_acc'] is not None])
    if not done:
        return
    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(15, 6))
    colors = plt.rcParams['axes.prop_cycle'].by_key()['color']
    for i, r in enumerate(done):
        c = colors[i % len(colors)]
        paper_params = r['paper_params'] or r['paper_params_from_q']
        ax.scatter([r['params']], [r['val_acc']], color=c, s=60, zorder=3,
                   label=f"{r['architecture']}.{r['dataset']}")
        if r['paper_val_acc'] is not None:
            ax.scatter([paper_params], [r['paper_val_acc']], facecolors='none', edgecolors=c, s=60, zorder=3)
            ax.plot([r['params'], paper_params], [r['val_acc'], r['paper_val_acc']], color=c, lw=.8, ls=':')
        curve = r.get('val_acc_per_epoch') or []
        ax2.plot(range(1, len(curve) + 1), curve, 'o-', color=c, label=r['architecture'])
        if r['paper_val_acc'] is not None:
            ax2.axhline(r['paper_val_acc'], color=c, lw=.6, ls='--')
    ax.set_xscale('log')
    ax.set(xlabel='parameters', ylabel='validation accuracy (%)',
           title=f'filled: ours ({max(r["epochs"] for r in done)} epochs max), hollow: paper (500 epochs)')
    ax.legend(fontsize=7, loc='lower right')
    ax.grid(alpha=.3, which='both')
    from matplotlib.ticker import MaxNLocator
    ax2.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax2.set(xlabel='epoch', ylabel='validation accuracy (%)',
            title="ours per epoch; dashed: the paper's value after 500 epochs")
    ax2.legend(fontsize=7, loc='lower right')
    ax2.grid(alpha=.3)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def build_parser() -> argparse.ArgumentParser:
    p = OneLineParser(
        prog='timm-minimal-reproduce', description=__doc__.split('\n\n')[0],
        formatter_class=HelpFormatter,
        epilog='Options after -- go to timm_minimal.training.train unchanged (e.g. -- --lr 5e-4).\n'
               'Several runs at once on one device, each in its own process with its output in <runs-dir>/logs/:\n'
               '  timm-minimal-reproduce --tables 2 --datasets mnist --jobs 4 --epochs 5 --data-dir data')
    p.add_argument('--tables', type=int, nargs='+', choices=(1, 2), default=[1, 2])
    p.add_argument('--datasets', nargs='+', choices=('mnist', 'cifar10'), default=['mnist', 'cifar10'])
    p.add_argument('--rows', nargs='+', help='only these row ids (e.g. t2-mnist-sym-6x4) or model names')
    p.add_argument('--epochs', type=positive_int, default=500, help="epochs per model (the paper's: 500)")
    p.add_argument('--runs-dir', default='runs/reproduce', help='one run folder per model: <runs-dir>/<model>.<dataset>')
    p.add_argument('--data-dir', default=None, help='dataset root passed to the trainer')
    p.add_argument('--recipe', default=None, help="trainer recipe (default: the dataset's)")
    p.add_argument('--seed', type=SEED, default=0, help='0 to 2**63 - 1')
    p.add_argument('--launcher', default=None,
                   help='command that runs a python module, e.g. "accelerate launch --num_processes 4 -m" '
                        '(default: this python -m)')
    p.add_argument('--jobs', type=positive_int, default=1, metavar='N',
                   help='train up to N runs at the same time, each in its own process on the same device '
                        '(default 1: one after another, output on the console and in <runs-dir>/logs/<model>.log). '
                        'With N > 1 the output goes to the log only, the console gets a line when each run starts '
                        'and ends, and the CPU cores are split among the runs unless OMP_NUM_THREADS is set. '
                        'A multi-process --launcher needs a rendezvous port of its own per concurrent run.')
    p.add_argument('--results', default='RESULTS.md', help='markdown report')
    p.add_argument('--json', default='results/reproduce_paper.json', help='machine-readable rows')
    p.add_argument('--plot', default=None,
                   help='PNG: accuracy vs parameters, accuracy per epoch (default results/reproduce_paper.png; '
                        'with --combine: none unless given)')
    p.add_argument('--report-only', action='store_true', help='train nothing; rebuild the report from the run folders')
    p.add_argument('--dry-run', action='store_true', help='print the training commands only')
    p.add_argument('--combine', nargs='+', metavar='JSON',
                   help='train nothing; write --results over the --json files of earlier runs, each dataset and depth '
                        'at its own budget (tools/results_summary.py)')
    p.add_argument('--note', default='', help='a sentence for the report\'s setup (e.g. how the runs shared a device)')
    return p


def _training_setup(results: List[Dict[str, Any]]) -> Optional[Dict[str, Any]]:
    """Recipe, versions and hardware of the first run folder of ``results`` that has a ``run.json``."""
    for r in results:
        run = RunFolder(r['run_dir']).read_run()
        if not run:
            continue
        launch = (run.get('launches') or [{}])[0]
        values = run.get('recipe_values') or {}
        return dict(name=run.get('recipe'), values=values, versions=run.get('versions') or {},
                    device=launch.get('device'), processes=launch.get('num_processes'),
                    threads=launch.get('torch_threads'), workers=launch.get('num_workers'),
                    overrides={k: v for k, v in (run.get('args') or {}).items()
                               if k in values and values[k] != v and k != 'epochs'})
    return None


def _precision_text(results: List[Dict[str, Any]]) -> str:
    """The mixed precision the runs trained in (the trainer's default depends on the device and the model)."""
    by_mode: Dict[str, List[str]] = {}
    for r in {r['model']: r for r in results}.values():
        mode = r.get('mixed_precision')
        if mode:
            by_mode.setdefault(mode, []).append(f"`{r['model'].split('.')[0].replace('vit_minimal_', '')}`")
    if len(by_mode) <= 1:
        return f'Mixed precision: {next(iter(by_mode))}. ' if by_mode else ''
    return 'Mixed precision: ' + '; '.join(f"{mode} for {', '.join(models)}" for mode, models in by_mode.items()) + '. '


def _setup_text(results: List[Dict[str, Any]], seed: int) -> str:
    """The report's setup paragraph: epochs, recipe, hardware, versions and wall time, from the run folders."""
    epochs = sorted({r['epochs'] for r in results if r['epochs']})
    text = f"Epochs per model: {', '.join(map(str, epochs)) or '–'} (the paper: {PAPER_EPOCHS}). "
    recipe = _training_setup(results)
    if recipe:
        v = recipe['values']
        text += (f"Recipe `{recipe['name']}` (`timm_minimal/training/recipes/{recipe['name']}.yaml`): "
                 f"{v.get('opt')} lr {v.get('lr')}, weight decay {v.get('weight_decay')}, batch "
                 f"{v.get('batch_size')}, {v.get('sched')} schedule with {v.get('warmup_epochs')} warmup epoch(s), "
                 f"random resized crop scale {v.get('scale')} ratio {v.get('ratio')}, horizontal flip "
                 f"{v.get('hflip')}, RandAugment {v.get('aa')}, mixup {v.get('mixup')}, label smoothing "
                 f"{v.get('smoothing')}; seed {seed}. "
                 + (f"Changed from the recipe: {recipe['overrides']}. " if recipe['overrides'] else '')
                 + f"Trained on {recipe['device']} with {recipe['processes']} process(es)"
                 + (f", {recipe['threads']} torch thread(s)" if recipe['threads'] else '')
                 + (f" and {recipe['workers']} data-loading worker(s)" if recipe['workers'] is not None else '')
                 + '; '
                 f"torch {recipe['versions'].get('torch')}, timm {recipe['versions'].get('timm')}, "
                 f"accelerate {recipe['versions'].get('accelerate')}. ") + _precision_text(results)
    walls = [r['wall_time_s'] for r in {r['model']: r for r in results}.values() if r.get('wall_time_s')]
    if walls:
        text += (f'Wall time of the training processes: {sum(walls) / 60:.1f} min in all '
                 f'({min(walls) / 60:.1f} to {max(walls) / 60:.1f} min per model, start-up included)'
                 + (f' on {os.cpu_count()} CPU cores.' if recipe and recipe['device'] == 'cpu' else '.'))
    return text


def _split_argv(argv: Sequence[str]) -> Tuple[List[str], List[str]]:
    """Our options and the trainer's (those after ``--``)."""
    argv = list(argv)
    if '--' in argv:
        i = argv.index('--')
        return argv[:i], argv[i + 1:]
    return argv, []


def _combine(args: argparse.Namespace, argv: Sequence[str], parser: argparse.ArgumentParser) -> int:
    from .results_summary import write_summary
    missing = [p for p in args.combine if not Path(p).is_file()]
    if missing:
        parser.error(f"--combine: no such file: {', '.join(missing)}")
    try:
        write_summary([Path(p) for p in args.combine], Path(args.results), 'timm-minimal-reproduce ' + shlex.join(argv),
                      Path(args.plot) if args.plot else None)
    except ValueError as e:
        parser.error(str(e))
    _say(f'[reproduce] wrote {args.results}' + (f', {args.plot}' if args.plot else ''))
    return 0


@command('timm-minimal-reproduce')
def main(argv: Optional[Sequence[str]] = None) -> int:
    """The command line: 0 when every run it launched finished, 1 when one failed (named, with its log), 2 for
    misuse or a run folder it may not use."""
    argv, extra = _split_argv(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.combine:
        return _combine(args, argv, parser)
    args.plot = 'results/reproduce_paper.png' if args.plot is None else args.plot
    if Path(args.runs_dir).exists() and not Path(args.runs_dir).is_dir():
        parser.error(f'--runs-dir {args.runs_dir} is a file; it names the folder that holds one run folder per model')
    try:
        rows = select_rows(args.tables, args.datasets, args.rows)
    except ValueError as e:
        parser.error(str(e))
    if not rows:
        parser.error('no rows selected (check --tables/--datasets/--rows)')
    failed = []
    if not args.report_only:
        failed = [r for r in train_rows(rows, args, extra) if r.returncode != 0]
        if args.dry_run:
            return 0
    try:
        results = collect(rows, Path(args.runs_dir))
    except ValueError as e:
        raise UsageError(str(e)) from None
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(results, indent=2) + '\n')
    plot = Path(args.plot) if args.plot else None
    if plot is not None:
        write_plot(results, plot)
    cmd_argv = [a for a in argv if a not in ('--report-only', '--dry-run')]
    command_line = 'timm-minimal-reproduce ' + shlex.join(cmd_argv) + (' -- ' + shlex.join(extra) if extra else '')
    setup = dict(command=command_line, text=_setup_text(results, args.seed) + (' ' + args.note if args.note else ''),
                 json=args.json)
    write_markdown(results, Path(args.results), setup, plot)
    _say(f'[reproduce] wrote {args.results}, {args.json}' + (f', {plot}' if plot else ''))
    if failed:
        _say('[reproduce] error: ' + ', '.join(f'{r.name} failed (exit status {r.returncode}, log {r.log})'
                                              for r in failed))
        return 1
    return 0


if __name__ == '__main__':
    sys.exit(main())
