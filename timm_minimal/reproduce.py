"""Train the grid of the paper's Tables 1 and 2 and put our numbers next to the paper's.

    timm-minimal-reproduce --tables 2 --epochs 5 --data-dir ../shared/data --runs-dir runs/reproduce_mnist
    timm-minimal-reproduce --tables 1 --datasets cifar10 --epochs 100 --launcher "accelerate launch --num_processes 4"
    timm-minimal-reproduce --tables 1 2 --report-only --runs-dir runs/reproduce_mnist   # rebuild the table only

Each (model, dataset) of the selected rows is trained once with ``timm_minimal.train`` into
``<runs-dir>/<model>.<dataset>/`` (a run that finished is reused, an interrupted one resumed); the
paper's numbers are data in this module (``TABLE1``, ``TABLE2``, from Bermeitinger et al., KDIR 2024).
Outputs: a markdown report (``--results``), a PNG (``--plot``) and a JSON list of rows (``--json``)
with our and the paper's parameters, epochs, train/validation loss and accuracy. Like the paper, the
numbers are those of the last epoch and the validation set is the test split.
"""
import argparse
import json
import os
import platform
import shlex
import shutil
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

__all__ = ['PaperRow', 'TABLE1', 'TABLE2', 'select_rows', 'collect', 'write_markdown', 'write_plot', 'main']

PAPER = 'Bermeitinger et al., "Reducing the Transformer Architecture to a Minimum", KDIR 2024 (arXiv:2410.13732)'
PAPER_EPOCHS = 500
TRAIN_SAMPLES = {'mnist': 60000, 'cifar10': 50000}
NUM_CLASSES = 10
# The paper's modification names -> our attention variants.
MODIFICATIONS = {'unchanged': 'std', 'Wqk': 'qk', 'Wqk + no Wv,Wo': 'qkonly', 'symmetry': 'sym'}


@dataclass(frozen=True)
class PaperRow:
    """One row of the paper's Table 1 or 2 (accuracies in percent, losses as cross-entropy)."""
    table: int
    dataset: str
    depth: int
    heads: int
    mlp: bool
    modification: str
    q: float
    train_loss: float
    val_loss: float
    train_acc: float
    val_acc: float
    params: Optional[int] = None  # as stated in the paper (None where it states only Q)

    @property
    def arch(self) -> str:
        return f'vit_minimal_{MODIFICATIONS[self.modification]}{"_mlp" if self.mlp else ""}_{self.depth}x{self.heads}'

    @property
    def model(self) -> str:
        return f'{self.arch}.{self.dataset}'

    @property
    def row_id(self) -> str:
        return f't{self.table}-{self.dataset}-{MODIFICATIONS[self.modification]}{"-mlp" if self.mlp else ""}-{self.depth}x{self.heads}'

    @property
    def params_from_q(self) -> int:
        """The parameter count Q implies: training samples x classes / Q (rounded; Q has 3 digits)."""
        return round(TRAIN_SAMPLES[self.dataset] * NUM_CLASSES / self.q)

    @property
    def label(self) -> str:
        return f'{self.depth}-{self.heads} {"MLP" if self.mlp else "no MLP"} {self.modification}'


def _t1(dataset, lh, mlp, q, tl, vl, ta, va, params=None):
    depth, heads = (int(v) for v in lh.split('-'))
    return PaperRow(1, dataset, depth, heads, mlp, 'unchanged', q, tl, vl, ta, va, params)


# Table 1: 500 epochs, MLP vs no MLP (train / validation).
TABLE1: List[PaperRow] = [
    _t1('mnist', '6-1', True, 2.15, 0.0067, 0.0747, 99.78, 98.38, 279_106),
    _t1('mnist', '6-1', False, 6.46, 0.0277, 0.1023, 99.07, 97.49, 92_890),
    _t1('mnist', '6-4', True, 2.09, 0.0018, 0.0739, 99.95, 98.26, 287_746),
    _t1('mnist', '6-4', False, 5.91, 0.0021, 0.0912, 99.92, 98.29, 101_530),
    _t1('mnist', '12-1', True, 1.08, 0.0052, 0.0652, 99.81, 98.71),
    _t1('mnist', '12-1', False, 3.29, 0.0117, 0.0970, 99.62, 97.94),
    _t1('mnist', '12-4', True, 1.08, 0.0025, 0.0656, 99.92, 98.70, 563_242),
    _t1('mnist', '12-4', False, 3.29, 0.0026, 0.1002, 99.93, 98.10),
    _t1('cifar10', '6-1', True, 1.74, 0.1533, 2.2418, 94.63, 60.24),
    _t1('cifar10', '6-1', False, 4.93, 0.9341, 1.3590, 66.16, 55.30),
    _t1('cifar10', '6-4', True, 1.74, 0.1109, 2.4033, 96.01, 60.46, 287_686),
    _t1('cifar10', '6-4', False, 4.92, 0.5621, 1.6984, 80.82, 52.37, 101_470),
    _t1('cifar10', '12-1', True, 0.89, 2.3026, 2.3026, 9.82, 10.00),
    _t1('cifar10', '12-1', False, 2.52, 0.5604, 1.7219, 79.48, 54.06),
    _t1('cifar10', '12-4', True, 0.89, 0.0632, 2.6379, 97.92, 58.02),
    _t1('cifar10', '12-4', False, 2.52, 0.1787, 2.3200, 93.59, 55.60),
]


def _t2(heads, mlp, mod, params, q, tl, vl, ta, va):
    return PaperRow(2, 'mnist', 6, heads, mlp, mod, q, tl, vl, ta, va, params)


# Table 2: MNIST, 6 layers, the matrix variants.
TABLE2: List[PaperRow] = [
    _t2(1, True, 'unchanged', 279_106, 2.15, 0.0067, 0.0747, 99.78, 98.38),
    _t2(4, True, 'unchanged', 287_746, 2.09, 0.0018, 0.0739, 99.95, 98.26),
    _t2(1, True, 'Wqk', 257_506, 2.33, 0.0037, 0.0794, 99.89, 98.43),
    _t2(1, True, 'Wqk + no Wv,Wo', 212_866, 2.82, 0.0063, 0.0951, 99.78, 98.27),
    _t2(1, False, 'unchanged', 92_890, 6.46, 0.0277, 0.1023, 99.07, 97.49),
    _t2(4, False, 'unchanged', 101_530, 5.91, 0.0021, 0.0912, 99.92, 98.29),
    _t2(1, False, 'symmetry', 69_910, 8.58, 0.0331, 0.0783, 98.85, 97.80),
    _t2(4, False, 'symmetry', 69_910, 8.58, 0.0158, 0.0762, 99.46, 98.24),
    _t2(1, False, 'Wqk', 70_570, 8.50, 0.0374, 0.0996, 98.70, 97.60),
    _t2(1, False, 'Wqk + no Wv,Wo', 26_650, 22.51, 0.1697, 0.1536, 94.82, 95.32),
]


def select_rows(tables: Sequence[int], datasets: Sequence[str], rows: Optional[Sequence[str]] = None) -> List[PaperRow]:
    """The paper rows of the given tables and datasets, optionally only those whose id or model is in ``rows``."""
    out = [r for t, table in ((1, TABLE1), (2, TABLE2)) if t in tables for r in table if r.dataset in datasets]
    if rows:
        wanted = set(rows)
        known = {r.row_id for r in out} | {r.model for r in out} | {r.arch for r in out}
        unknown = sorted(wanted - known)
        if unknown:
            raise SystemExit(f'timm-minimal-reproduce: unknown rows {unknown}; choose from row ids '
                             f'{sorted(r.row_id for r in out)} or model names {sorted({r.model for r in out})}.')
        out = [r for r in out if wanted & {r.row_id, r.model, r.arch}]
    return out


def _run_dir(runs_dir: Path, row: PaperRow) -> Path:
    return runs_dir / row.model


def _read_run(run_dir: Path) -> Optional[Dict[str, Any]]:
    run_file, metrics_file = run_dir / 'run.json', run_dir / 'metrics.jsonl'
    if not run_file.is_file() or not metrics_file.is_file():
        return None
    run = json.loads(run_file.read_text())
    metrics = [json.loads(line) for line in metrics_file.read_text().splitlines() if line.strip()]
    return dict(run=run, metrics=metrics)


def train_row(row: PaperRow, args: argparse.Namespace, extra: Sequence[str]) -> float:
    """Train (or resume, or reuse) the run of one row; returns the seconds spent."""
    run_dir = _run_dir(Path(args.runs_dir), row)
    found = _read_run(run_dir)
    if found and found['run'].get('status') == 'finished' and len(found['metrics']) >= args.epochs:
        print(f'[reproduce] {row.model}: finished run in {run_dir}, reused', flush=True)
        return 0.0
    cmd = shlex.split(args.launcher) if args.launcher else [sys.executable, '-m']
    cmd += ['timm_minimal.train']
    if run_dir.exists() and (run_dir / 'args.yaml').is_file():
        cmd += ['--resume', str(run_dir), '--epochs', str(args.epochs)]
    else:
        if run_dir.exists():
            shutil.rmtree(run_dir)  # a start that never got as far as writing its options
        cmd += ['--model', row.model, '--dataset', row.dataset, '--output', str(run_dir), '--epochs', str(args.epochs),
                '--seed', str(args.seed), '--no-progress']
        if args.data_dir:
            cmd += ['--data-dir', args.data_dir]
        if args.recipe:
            cmd += ['--recipe', args.recipe]
        cmd += list(extra)
    log_dir = Path(args.runs_dir) / 'logs'
    log_dir.mkdir(parents=True, exist_ok=True)
    log_file = log_dir / f'{row.model}.log'
    print(f'[reproduce] {row.model}: {shlex.join(cmd)}  (log: {log_file})', flush=True)
    if args.dry_run:
        return 0.0
    t0 = time.perf_counter()
    with open(log_file, 'a') as log:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1)
        for line in proc.stdout:
            log.write(line)
            log.flush()
            print(f'  {line}', end='', flush=True)
        rc = proc.wait()
    dt = time.perf_counter() - t0
    if rc != 0:
        print(f'[reproduce] {row.model}: training exited with status {rc} (see {log_file}); continuing', flush=True)
    return dt


def collect(rows: Sequence[PaperRow], runs_dir: Path) -> List[Dict[str, Any]]:
    """One result dict per paper row: our last-epoch numbers (None where the run is missing) and the paper's."""
    results = []
    for row in rows:
        found = _read_run(_run_dir(runs_dir, row))
        ours: Dict[str, Any] = dict(params=None, epochs=0, train_loss=None, train_acc=None, val_loss=None,
                                    val_acc=None, best_val_acc=None, best_epoch=None, train_time_s=None, q=None,
                                    wall_time_s=None,
                                    status='missing')
        if found and found['metrics']:
            m, run = found['metrics'], found['run']
            last = m[-1]
            best = max(m, key=lambda r: r['test_acc'])
            params = run.get('num_params')
            ours = dict(
                params=params, epochs=last['epoch'], train_loss=last['train_loss'], train_acc=last['train_acc'],
                val_loss=last['test_loss'], val_acc=last['test_acc'], best_val_acc=best['test_acc'],
                best_epoch=best['epoch'], train_time_s=sum(r['epoch_time'] for r in m),
                q=(TRAIN_SAMPLES[row.dataset] * NUM_CLASSES / params) if params else None,
                status=run.get('status', 'unknown'), wall_time_s=run.get('wall_time'),
                val_acc_per_epoch=[r['test_acc'] for r in m])
        results.append(dict(
            table=row.table, row_id=row.row_id, label=row.label, model=row.model, architecture=row.arch,
            dataset=row.dataset, depth=row.depth, heads=row.heads, mlp=row.mlp, modification=row.modification,
            **ours, run_dir=str(_run_dir(runs_dir, row)),
            paper_params=row.params, paper_params_from_q=row.params_from_q, paper_q=row.q,
            paper_epochs=PAPER_EPOCHS, paper_train_loss=row.train_loss, paper_train_acc=row.train_acc,
            paper_val_loss=row.val_loss, paper_val_acc=row.val_acc,
            val_acc_gap=(ours['val_acc'] - row.val_acc) if ours['val_acc'] is not None else None,
        ))
    return results


def _f(v: Optional[float], fmt: str) -> str:
    return '–' if v is None else format(v, fmt)


def _params(r: Dict[str, Any]) -> str:
    paper = f"{r['paper_params']:,}" if r['paper_params'] else f"≈{r['paper_params_from_q']:,}¹"
    return f"{_f(r['params'], ',')} / {paper}"


def write_markdown(results: List[Dict[str, Any]], path: Path, setup: Dict[str, Any], plot: Optional[Path]) -> str:
    """The report: per table, ours vs the paper, then a summary computed from the same numbers."""
    lines = ['# Reproducing the paper\'s Tables 1 and 2', '']
    lines += [f'Our minimal transformers trained with `timm_minimal.train`, next to the numbers of {PAPER}. '
              f'Generated by `{setup["command"]}`.', '']
    lines += ['**Setup.** ' + setup['text'], '']
    for table in (1, 2):
        rows = [r for r in results if r['table'] == table]
        if not rows:
            continue
        title = ('Table 1: MLP vs no MLP' if table == 1 else 'Table 2: MNIST, 6 layers, the matrix variants')
        lines += [f'## {title}', '']
        lines += ['| data | layers-heads | MLP | modification | model | params (ours / paper) | epochs (ours / paper) '
                  '| train loss (ours / paper) | train acc % (ours / paper) | val loss (ours / paper) '
                  '| val acc % (ours / paper) | Δ val acc (pp) | best val acc % (epoch) |',
                  '|---|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|']
        for r in rows:
            lines.append(
                f"| {r['dataset']} | {r['depth']}-{r['heads']} | {'yes' if r['mlp'] else 'no'} | {r['modification']} "
                f"| `{r['architecture']}` | {_params(r)} | {r['epochs']} / {r['paper_epochs']} "
                f"| {_f(r['train_loss'], '.4f')} / {r['paper_train_loss']:.4f} "
                f"| {_f(r['train_acc'], '.2f')} / {r['paper_train_acc']:.2f} "
                f"| {_f(r['val_loss'], '.4f')} / {r['paper_val_loss']:.4f} "
                f"| **{_f(r['val_acc'], '.2f')}** / {r['paper_val_acc']:.2f} | {_f(r['val_acc_gap'], '+.2f')} "
                f"| {_f(r['best_val_acc'], '.2f')} ({r['best_epoch'] or '–'}) |")
        lines.append('')
        if any(not r['paper_params'] for r in rows):
            lines += ['¹ The paper states no count for this row; ≈ is the count its overdetermination ratio Q implies '
                      '(training samples × classes / Q).', '']
    done = [r for r in results if r['val_acc'] is not None]
    if done:
        # one entry per trained model (rows shared by both tables count once)
        uniq = list({r['model']: r for r in done}.values())
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
        gains = [r['val_acc_per_epoch'][-1] - r['val_acc_per_epoch'][-2] for r in uniq
                 if len(r.get('val_acc_per_epoch') or []) >= 2]
        if gains:
            lines.append(f"- Still rising: in the last epoch the validation accuracy changed by {sum(gains) / len(gains):+.2f} "
                         f"pp on average ({min(gains):+.2f} to {max(gains):+.2f}); training accuracy at the end is "
                         f"{min(r['train_acc'] for r in uniq):.2f} to {max(r['train_acc'] for r in uniq):.2f}% "
                         f"(paper {min(r['paper_train_acc'] for r in uniq):.2f} to "
                         f"{max(r['paper_train_acc'] for r in uniq):.2f}%): these runs are far from converged.")
        times = [r['train_time_s'] for r in uniq if r['train_time_s']]
        if times:
            lines.append(f"- Training time (train + evaluation, all epochs) per model: {min(times) / 60:.1f} to "
                         f"{max(times) / 60:.1f} min, {sum(times) / 60:.1f} min in all.")
        lines.append('')
        most = max(r['epochs'] for r in uniq)
        lines += [f"These runs had {most} epoch(s) each, {100 * most / PAPER_EPOCHS:.1f}% of the paper's {PAPER_EPOCHS}, "
                  f"so the gaps above are dominated by the short training and say little yet about whether our "
                  f"models match the paper's after {PAPER_EPOCHS} epochs; the paper publishes no learning curves to "
                  f"compare at equal epochs. Rerunning the command with a larger `--epochs` resumes and extends every run folder (the "
                  f"learning-rate schedule is then recomputed for the new length, which is not the same as a fresh "
                  f"run of that length; use a new `--runs-dir` for that).", '']
    if plot is not None:
        lines += [f'![validation accuracy vs parameters]({os.path.relpath(plot, path.parent)})', '']
    lines += ['Reproduce: the command above; `--report-only` rebuilds this file from the run folders. '
              f"The machine-readable rows are in `{setup.get('json', 'results/reproduce_paper.json')}`.", '']
    text = '\n'.join(lines)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return text


def write_plot(results: List[Dict[str, Any]], path: Path) -> None:
    """Validation accuracy vs parameters (ours and the paper's) and our validation accuracy per epoch."""
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    done = list({r['model']: r for r in results if r['val_acc'] is not None}.values())
    if not done:
        return
    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(15, 6))
    colors = plt.rcParams['axes.prop_cycle'].by_key()['color']
    for i, r in enumerate(done):
        c = colors[i % len(colors)]
        paper_params = r['paper_params'] or r['paper_params_from_q']
        ax.scatter([r['params']], [r['val_acc']], color=c, s=60, zorder=3,
                   label=f"{r['architecture']}.{r['dataset']}")
        ax.scatter([paper_params], [r['paper_val_acc']], facecolors='none', edgecolors=c, s=60, zorder=3)
        ax.plot([r['params'], paper_params], [r['val_acc'], r['paper_val_acc']], color=c, lw=.8, ls=':')
        curve = r.get('val_acc_per_epoch') or []
        ax2.plot(range(1, len(curve) + 1), curve, 'o-', color=c, label=r['architecture'])
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
    p = argparse.ArgumentParser(prog='timm-minimal-reproduce', description=__doc__.split('\n\n')[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog='Options after -- go to timm_minimal.train unchanged (e.g. -- --lr 5e-4).')
    p.add_argument('--tables', type=int, nargs='+', choices=(1, 2), default=[1, 2])
    p.add_argument('--datasets', nargs='+', choices=('mnist', 'cifar10'), default=['mnist', 'cifar10'])
    p.add_argument('--rows', nargs='+', help='only these row ids (e.g. t2-mnist-sym-6x4) or model names')
    p.add_argument('--epochs', type=int, default=500, help="epochs per model (the paper's: 500)")
    p.add_argument('--runs-dir', default='runs/reproduce', help='one run folder per model: <runs-dir>/<model>.<dataset>')
    p.add_argument('--data-dir', default=None, help='dataset root passed to the trainer')
    p.add_argument('--recipe', default=None, help="trainer recipe (default: the dataset's)")
    p.add_argument('--seed', type=int, default=0)
    p.add_argument('--launcher', default=None,
                   help='command that runs a python module, e.g. "accelerate launch --num_processes 4 -m" '
                        '(default: this python -m)')
    p.add_argument('--results', default='RESULTS.md', help='markdown report')
    p.add_argument('--json', default='results/reproduce_paper.json', help='machine-readable rows')
    p.add_argument('--plot', default='results/reproduce_paper.png', help='PNG: accuracy vs parameters, accuracy per epoch')
    p.add_argument('--report-only', action='store_true', help='train nothing; rebuild the report from the run folders')
    p.add_argument('--dry-run', action='store_true', help='print the training commands only')
    return p


def main(argv: Optional[Sequence[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    extra: List[str] = []
    if '--' in argv:
        i = argv.index('--')
        argv, extra = argv[:i], argv[i + 1:]
    args = build_parser().parse_args(argv)
    rows = select_rows(args.tables, args.datasets, args.rows)
    if not rows:
        raise SystemExit('timm-minimal-reproduce: no rows selected (check --tables/--datasets/--rows).')
    runs_dir = Path(args.runs_dir)
    t0 = time.perf_counter()
    trained = 0.0
    if not args.report_only:
        seen = set()
        for row in rows:
            if row.model in seen:
                continue
            seen.add(row.model)
            trained += train_row(row, args, extra)
        if args.dry_run:
            return 0
    wall = time.perf_counter() - t0
    results = collect(rows, runs_dir)
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(results, indent=2) + '\n')
    plot = Path(args.plot) if args.plot else None
    if plot is not None:
        write_plot(results, plot)
    recipe = None
    for r in results:
        run_json = Path(r['run_dir']) / 'run.json'
        if run_json.is_file():
            run = json.loads(run_json.read_text())
            launch = (run.get('launches') or [{}])[0]
            recipe = dict(name=run.get('recipe'), values=run.get('recipe_values'), versions=run.get('versions'),
                          device=launch.get('device'), processes=launch.get('num_processes'),
                          threads=launch.get('torch_threads'), workers=launch.get('num_workers'),
                          overrides={k: v for k, v in (run.get('args') or {}).items()
                                     if k in (run.get('recipe_values') or {}) and run['recipe_values'][k] != v
                                     and k != 'epochs'})
            break
    epochs = sorted({r['epochs'] for r in results if r['epochs']})
    setup_text = (f"Epochs per model: {', '.join(map(str, epochs)) or '–'} (the paper: {PAPER_EPOCHS}). ")
    if recipe:
        v = recipe['values'] or {}
        setup_text += (f"Recipe `{recipe['name']}` (`timm_minimal/recipes/{recipe['name']}.yaml`): "
                       f"{v.get('opt')} lr {v.get('lr')}, weight decay {v.get('weight_decay')}, batch "
                       f"{v.get('batch_size')}, {v.get('sched')} schedule with {v.get('warmup_epochs')} warmup epoch(s), "
                       f"random resized crop scale {v.get('scale')} ratio {v.get('ratio')}, horizontal flip "
                       f"{v.get('hflip')}, RandAugment {v.get('aa')}, mixup {v.get('mixup')}, label smoothing "
                       f"{v.get('smoothing')}; seed {args.seed}. "
                       + (f"Changed from the recipe: {recipe['overrides']}. " if recipe['overrides'] else '')
                       + f"Trained on {recipe['device']} with {recipe['processes']} process(es)"
                       + (f", {recipe['threads']} torch thread(s)" if recipe['threads'] else '')
                       + (f" and {recipe['workers']} data-loading worker(s)" if recipe['workers'] is not None else '')
                       + '; '
                       f"torch {recipe['versions'].get('torch')}, timm {recipe['versions'].get('timm')}, "
                       f"accelerate {recipe['versions'].get('accelerate')}. ")
    walls = [r['wall_time_s'] for r in {r['model']: r for r in results}.values() if r.get('wall_time_s')]
    if walls:
        setup_text += (f'Wall time of the training processes: {sum(walls) / 60:.1f} min in all '
                       f'({min(walls) / 60:.1f} to {max(walls) / 60:.1f} min per model, start-up included)'
                       + (f' on {os.cpu_count()} CPU cores.' if recipe and recipe['device'] == 'cpu' else '.'))
    cmd_argv = [a for a in argv if a not in ('--report-only', '--dry-run')]
    command = 'timm-minimal-reproduce ' + shlex.join(cmd_argv) + (' -- ' + shlex.join(extra) if extra else '')
    write_markdown(results, Path(args.results), dict(command=command, text=setup_text, json=args.json), plot)
    print(f'[reproduce] wrote {args.results}, {args.json}' + (f', {plot}' if plot else ''), flush=True)
    return 0


if __name__ == '__main__':
    sys.exit(main())
