"""The report of one grid: our numbers next to the paper's tables (markdown), the setup it ran with (recipe,
hardware, versions, wall time: read through ``RunRecord``), and the per-epoch plot."""
import math
import os
from pathlib import Path
from typing import Any, Dict, List, Optional

from ...models.datasets import DATASETS
from ...models.paper import BASELINE, PAPER, PAPER_EPOCHS
from ...training.run.folder import RunFolder
from ..figures import pyplot
from .grid import difference
from .results_summary import cell  # one cell format for both reports

__all__ = ['write_markdown', 'write_plot', 'setup_text', 'precision_text']


def _params(r: Dict[str, Any]) -> str:
    paper = (f"{r['paper_params']:,}" if r['paper_params'] else
             f"≈{r['paper_params_from_q']:,}¹" if r['paper_params_from_q'] else '–')
    return f"{cell(r['params'], ',')} / {paper}"


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
                f"| {cell(r['train_loss'], '.4f')} / {cell(r['paper_train_loss'], '.4f')} "
                f"| {cell(r['train_acc'], '.2f')} / {cell(r['paper_train_acc'], '.2f')} "
                f"| {cell(r['val_loss'], '.4f')} / {cell(r['paper_val_loss'], '.4f')} "
                f"| **{cell(r['val_acc'], '.2f')}** / {cell(r['paper_val_acc'], '.2f')} | {cell(r['val_acc_gap'], '+.2f')} "
                f"| {cell(r['best_val_acc'], '.2f')} ({r['best_epoch'] or '–'}) |")
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
        lines.append(f'- First epoch at which our validation accuracy reached the paper\'s {PAPER_EPOCHS}-epoch value: ' +
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
                         f"| {cell(difference(r['paper_val_acc'], base['paper_val_acc']), '+.2f')} |")
        lines.append('')
    return lines



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
    """Validation accuracy vs parameters (ours and the paper's), our validation accuracy per epoch, and the same
    curves zoomed in where they crowd (within 5 points of the best)."""
    plt = pyplot()
    done = _unique([r for r in results if r['val_acc'] is not None])
    if not done:
        return
    fig, (ax, ax2, ax3) = plt.subplots(1, 3, figsize=(21, 6.2), gridspec_kw=dict(width_ratios=[1.1, 1, 1]))
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
        for axis in (ax2, ax3):
            axis.plot(range(1, len(curve) + 1), curve, '-', lw=1.2, color=c,
                      label=r['architecture'].replace('vit_minimal_', ''))
            if r['paper_val_acc'] is not None:
                axis.axhline(r['paper_val_acc'], color=c, lw=.7, ls='--')
    ax.set_xscale('log')
    ax.set(xlabel='parameters', ylabel='validation accuracy (%)',
           title=f'filled: ours ({max(r["epochs"] for r in done)} epochs max), hollow: paper ({PAPER_EPOCHS} epochs)')
    ax.legend(fontsize=7, loc='lower right')
    ax.grid(alpha=.3, which='both')
    from matplotlib.ticker import MaxNLocator  # lazy: matplotlib where a figure is drawn
    finals = [r['val_acc_per_epoch'][-1] for r in done if r.get('val_acc_per_epoch')]
    for axis in (ax2, ax3):
        axis.xaxis.set_major_locator(MaxNLocator(integer=True))
        axis.set(xlabel='epoch', ylabel='validation accuracy (%)')
        axis.grid(alpha=.3)
    ax2.set_title(f"ours per epoch; dashed: the paper's value after {PAPER_EPOCHS} epochs")
    ax2.legend(fontsize=7, loc='lower right', ncol=2)
    if finals:
        crowd = [f for f in finals if f >= max(finals) - 5]
        top = max([max(r.get('val_acc_per_epoch') or [0]) for r in done] +
                  [r['paper_val_acc'] or 0 for r in done])
        low = math.floor(min(crowd) - 1)
        ax3.set_ylim(low, min(100.0, top + .3))
        ax3.set_title(f'the same, {low}% and above')
    fig.suptitle('Reproducing the paper: validation accuracy', fontsize=12)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _training_setup(results: List[Dict[str, Any]]) -> Optional[Dict[str, Any]]:
    """Recipe, versions and hardware of the first run folder of ``results`` that has a ``run.json`` (its launch that
    ran the last epoch, as the cards state)."""
    for r in results:
        folder = RunFolder(r['run_dir'])
        if not folder.run_file.is_file():
            continue
        run = folder.read_record()
        launch, values = run.last_launch, run.recipe_values or {}
        return dict(name=run.recipe, values=values, versions=run.versions,
                    device=launch.device, device_name=launch.device_name, processes=launch.num_processes,
                    threads=launch.torch_threads, workers=launch.num_workers,
                    overrides={k: v for k, v in run.args.items()
                               if k in values and values[k] != v and k != 'epochs'})
    return None


def precision_text(results: List[Dict[str, Any]]) -> str:
    """The mixed precision the runs trained in (the trainer's default depends on the device and the model)."""
    by_mode: Dict[str, List[str]] = {}
    for r in {r['model']: r for r in results}.values():
        mode = r.get('mixed_precision')
        if mode:
            by_mode.setdefault(mode, []).append(f"`{r['model'].split('.')[0].replace('vit_minimal_', '')}`")
    if len(by_mode) <= 1:
        return f'Mixed precision: {next(iter(by_mode))}. ' if by_mode else ''
    return 'Mixed precision: ' + '; '.join(f"{mode} for {', '.join(models)}" for mode, models in by_mode.items()) + '. '


def setup_text(results: List[Dict[str, Any]], seed: int) -> str:
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
                 f"accelerate {recipe['versions'].get('accelerate')}. ") + precision_text(results)
    walls = [r['wall_time_s'] for r in {r['model']: r for r in results}.values() if r.get('wall_time_s')]
    if walls:
        text += (f'Wall time of the training processes: {sum(walls) / 60:.1f} min in all '
                 f'({min(walls) / 60:.1f} to {max(walls) / 60:.1f} min per model, start-up included)'
                 + (f" on {recipe['device_name']}." if recipe and recipe.get('device_name') else '.'))
    return text
