"""One report over several reproduce runs: each dataset and depth at its own budget (or budgets), side by side.

    timm-minimal-reproduce --combine results/reproduce_paper.json results/cifar10_6layer.json --output RESULTS.md

Each JSON is the ``--json`` output of one ``timm-minimal-reproduce`` run (one list of rows); its report,
with the recipe, hardware and versions, is the markdown file of the same name beside it. The combined report
puts the paper's claim (parameters saved against accuracy lost, at equal budget) for every dataset in one
table, against the baseline of the same dataset, depth and budget (the unchanged transformer with its MLP, one
head). A dataset and depth trained at two budgets (a short grid and a converged one) gets a column for each and a
paragraph on what the longer budget did to the claim.
"""
import json
import math
import os
from pathlib import Path
from statistics import median
from typing import Any, Dict, List, Optional, Sequence, Tuple

from ...models.datasets import DATASETS
from ...models.paper import PAPER, PAPER_DATASETS, PAPER_EPOCHS, arch_name
from ..figures import label_points, pyplot
from .grid_row import read_grid_rows

__all__ = ['load_rows', 'write_summary', 'cell', 'check_row', 'load_pilots', 'pilot_setup', 'pilot_seed']

Row = Dict[str, Any]


def cell(v: Optional[float], fmt: str) -> str:
    """One table cell, '–' where there is no number (both reports, this one and reproduce's, format so)."""
    return '–' if v is None else format(v, fmt)
Group = Tuple[str, int, int]  # (dataset, depth, epochs)


def load_rows(paths: Sequence[Path]) -> List[Row]:
    """The trained rows of the JSON files (one per model, rows shared by Tables 1 and 2 once), each with its file;
    each file read by ``grid_row.read_grid_rows``, the grid row's one reader."""
    rows: Dict[Tuple[str, str], Row] = {}
    for path in paths:
        for r in read_grid_rows(Path(path)):
            if r.get('val_acc') is None:
                continue
            key = (r['model'], r['dataset'], r['epochs'])
            if key in rows and rows[key]['source'] != str(path):
                raise ValueError(f'{r["model"]} at {r["epochs"]} epochs is in both {rows[key]["source"]} and {path}: '
                                 'pass one of them')
            if key not in rows or (rows[key]['paper_val_acc'] is None and r.get('paper_val_acc') is not None):
                rows[key] = dict(r, source=str(path))
    if not rows:
        raise ValueError('no trained rows in ' + ', '.join(map(str, paths)))
    return list(rows.values())


def check_row(r: Row, where: str, keys: Dict[str, Any], ranges: Dict[str, Tuple],
              optional: Sequence[str] = ()) -> None:
    """``r`` is a JSON object with each of ``keys`` of its type (a type or a tuple of them) within ``ranges``; the
    ``optional`` keys are checked only where the row has them. A ValueError names the row, the key and what it takes."""
    if not isinstance(r, dict):
        raise ValueError(f'{where}: not a row (a JSON object), got {r!r}')
    for key, kind in keys.items():
        if key not in r and key in optional:
            continue
        if key not in r:
            raise ValueError(f'{where}: the key "{key}" is missing (a row needs '
                             f'{", ".join(k for k in keys if k not in optional)})')
        value, kinds = r[key], kind if isinstance(kind, tuple) else (kind,)
        numeric = float in kinds and isinstance(value, int) and not isinstance(value, bool)
        if not (isinstance(value, kinds) and not isinstance(value, bool)) and not numeric:
            raise ValueError(f'{where}: "{key}" must be {"a number" if float in kinds else kinds[0].__name__}, '
                             f'got {value!r}')
        low, high = ranges.get(key, (None, None))
        if isinstance(value, (int, float)) and (not math.isfinite(value) or (low is not None and value < low)
                                                or (high is not None and value > high)):
            raise ValueError(f'{where}: "{key}" must be {"at least " + str(low) if high is None else f"from {low} to {high}"}, '
                             f'got {value!r}')
    if 'dataset' in keys and r['dataset'] not in DATASETS:
        raise ValueError(f'{where}: unknown dataset {r["dataset"]!r}; the datasets are {", ".join(DATASETS)}')


def _name(dataset: str) -> str:
    return DATASETS[dataset].display_name if dataset in DATASETS else dataset


def _group(r: Row) -> Group:
    return r['dataset'], r['depth'], r['epochs']


def _groups(rows: List[Row]) -> List[Group]:
    order = {name: i for i, name in enumerate(PAPER_DATASETS)}
    return sorted({_group(r) for r in rows}, key=lambda g: (g[1], order.get(g[0], len(order)), g[0], g[2]))


def _label(rows: List[Row], group: Group) -> str:
    """The dataset's name, with the budget where the same dataset and depth has more than one."""
    budgets = {g[2] for g in _groups(rows) if g[:2] == group[:2]}
    return _name(group[0]) + (f' ({group[2]} epochs)' if len(budgets) > 1 else '')


def _baseline(rows: List[Row], group: Group) -> Optional[Row]:
    name = arch_name('std', True, group[1], 1)
    return next((r for r in rows if _group(r) == group and r['architecture'] == name), None)


def _link(target: str, out: Path) -> str:
    return f'[`{target}`]({os.path.relpath(target, out.parent)})'


def budgets_section(rows: List[Row], out: Path) -> List[str]:
    lines = ['## Budgets', '', 'One budget per table, the same for every model in it. The paper '
             f'trained {PAPER_EPOCHS} epochs and reports the last; so do we, at our budget.', '',
             '| dataset | layers | models | epochs per model | at or above the paper | report | rows |',
             '|---|---:|---:|---:|---:|---|---|']
    for group in _groups(rows):
        g = [r for r in rows if _group(r) == group]
        paper = [r for r in g if r.get('paper_val_acc') is not None]
        above = f"{sum(r['val_acc'] >= r['paper_val_acc'] for r in paper)} of {len(paper)}" if paper else '–'
        for source in sorted({r['source'] for r in g}):
            report = str(Path(source).with_suffix('.md'))
            n = [r for r in g if r['source'] == source]
            epochs = ', '.join(map(str, sorted({r['epochs'] for r in n})))
            lines.append(f"| {_name(group[0])} | {group[1]} | {len(n)} | {epochs} | {above} "
                         f"| {_link(report, out) if Path(report).is_file() else '–'} | {_link(source, out)} |")
    return lines + ['']


def paper_section(rows: List[Row]) -> List[str]:
    lines = ['## Against the paper', '', f"Our last-epoch validation accuracy next to the paper's ({PAPER_EPOCHS} epochs); "
             '– where the paper has no number (Table 2 beyond MNIST).', '']
    for group in _groups(rows):
        g = sorted((r for r in rows if _group(r) == group), key=lambda r: -r['params'])
        lines += [f'### {_label(rows, group)}, {group[1]} layers', '',
                  '| model | params | epochs | val acc % | paper % | Δ (pp) |', '|---|---:|---:|---:|---:|---:|']
        for r in g:
            gap = None if r.get('paper_val_acc') is None else r['val_acc'] - r['paper_val_acc']
            lines.append(f"| `{r['architecture']}` | {r['params']:,} | {r['epochs']} | **{r['val_acc']:.2f}** "
                         f"| {cell(r.get('paper_val_acc'), '.2f')} | {cell(gap, '+.2f')} |")
        lines.append('')
    return lines


def _paper_failed(base: Row) -> bool:
    """The paper's run of this baseline ended at chance (its 12-layer CIFAR-10 one: 10.00%, 10 classes)."""
    chance = 100 / DATASETS[base['dataset']].num_classes if base['dataset'] in DATASETS else None
    return chance is not None and base.get('paper_val_acc') is not None and base['paper_val_acc'] <= chance


def _delta(r: Optional[Row], base: Optional[Row], key: str) -> Optional[float]:
    if r is None or base is None or r.get(key) is None or base.get(key) is None:
        return None
    return r[key] - base[key]


def claim_table(rows: List[Row], depth: int) -> Tuple[List[str], Dict[str, Dict[str, float]]]:
    """The equal-budget table of one depth: per model and dataset, params saved and Δ to the baseline."""
    groups = [g for g in _groups(rows) if g[1] == depth]
    bases = {g: _baseline(rows, g) for g in groups}
    groups = [g for g in groups if bases[g] is not None]
    if not groups:
        return [], {}
    failed = [g for g in groups if _paper_failed(bases[g])]
    by = {(r['architecture'], _group(r)): r for r in rows if r['depth'] == depth}
    first = {a: i for i, (a, g) in reversed(list(enumerate(by)))}  # the order of the paper's tables breaks ties
    archs = sorted({a for a, g in by if g in groups},
                   key=lambda a: (-max(by[a, g]['params'] for g in groups if (a, g) in by), first[a]))
    head = '| model | ' + ' | '.join(f'{_label(rows, g)}: params saved | val acc % | Δ ours (pp) | Δ paper (pp)'
                                     for g in groups) + ' |'
    lines = [head, '|---|' + '---:|' * 4 * len(groups)]
    deltas: Dict[str, Dict[str, float]] = {_label(rows, g): {} for g in groups}
    for a in archs:
        cells = []
        for g in groups:
            r, base = by.get((a, g)), bases[g]
            if r is None:
                cells += ['–'] * 4
                continue
            deltas[_label(rows, g)][a] = r['val_acc'] - base['val_acc']
            paper = None if g in failed else _delta(r, base, 'paper_val_acc')
            cells += [f"{1 - r['params'] / base['params']:.0%}", f"{r['val_acc']:.2f}", f"{deltas[_label(rows, g)][a]:+.2f}",
                      cell(paper, '+.2f')]
        lines.append(f'| `{a}` | ' + ' | '.join(cells) + ' |')
    notes = [f"- {_label(rows, g)}: the paper's run of the baseline `{bases[g]['architecture']}` failed "
             f"({bases[g]['paper_val_acc']:.2f}%, chance), so there is no Δ paper to compare with." for g in failed]
    return lines + [''] + notes, deltas


def _ranks(values: Sequence[float]) -> List[float]:
    order = sorted(range(len(values)), key=lambda i: values[i])
    ranks = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):
            ranks[order[k]] = (i + j) / 2 + 1
        i = j + 1
    return ranks


def spearman(a: Sequence[float], b: Sequence[float]) -> Optional[float]:
    """Spearman's rank correlation of two equal-length sequences (None below 3 pairs or without spread)."""
    if len(a) != len(b) or len(a) < 3:
        return None
    ra, rb = _ranks(a), _ranks(b)
    ma, mb = sum(ra) / len(ra), sum(rb) / len(rb)
    cov = sum((x - ma) * (y - mb) for x, y in zip(ra, rb))
    va, vb = sum((x - ma) ** 2 for x in ra), sum((y - mb) ** 2 for y in rb)
    return None if va == 0 or vb == 0 else cov / (va * vb) ** 0.5


def claim_summary(deltas: Dict[str, Dict[str, float]], depth: int) -> List[str]:
    """Per dataset, how many models stay within 1 pp of the baseline; across datasets, whether they rank alike."""
    lines = []
    for d, dd in deltas.items():
        others = {a: v for a, v in dd.items() if a != arch_name('std', True, depth, 1)}
        if not others:
            continue
        worst = min(others, key=others.get)
        lines.append(f"- {d}: {sum(v >= -1 for v in others.values())} of {len(others)} models within 1 pp of "
                     f"the baseline or above it; the largest loss is `{worst}`, {others[worst]:+.2f} pp.")
    names, baseline = list(deltas), arch_name('std', True, depth, 1)
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            shared = sorted((set(deltas[a]) & set(deltas[b])) - {baseline})
            rho = spearman([deltas[a][m] for m in shared], [deltas[b][m] for m in shared])
            if rho is not None:
                lines.append(f'- The ranking of the {len(shared)} models beside the baseline by accuracy lost, {a} against '
                             f"{b}: Spearman's ρ = {rho:.2f}.")
    return lines + [''] if lines else []


def budget_paragraph(rows: List[Row], deltas: Dict[str, Dict[str, float]], depth: int) -> List[str]:
    """Per dataset trained at several budgets at this depth: what the longest did to the claim against the shortest,
    from ``claim_table``'s differences to the baseline."""
    baseline, lines = arch_name('std', True, depth, 1), []
    for dataset in dict.fromkeys(g[0] for g in _groups(rows) if g[1] == depth):
        groups = [g for g in _groups(rows) if g[:2] == (dataset, depth) and _label(rows, g) in deltas]
        if len(groups) < 2:
            continue
        short, long = groups[0], groups[-1]
        before, after = ({a: v for a, v in deltas[_label(rows, g)].items() if a != baseline} for g in (short, long))
        if len(set(before) & set(after)) >= 3:
            lines.append(_budget_sentence(rows, short, long, before, after))
    return lines + [''] if lines else []


def _budget_sentence(rows: List[Row], short: Group, long: Group, before: Dict[str, float],
                     after: Dict[str, float]) -> str:
    """The baseline, the median and largest loss of the others, how many stay within 1 pp, whether the ranking
    held, who closed the gap, and the train accuracy of those who did not."""
    shared = sorted(set(before) & set(after))
    d0, d1 = [before[a] for a in shared], [after[a] for a in shared]
    base0, base1 = _baseline(rows, short), _baseline(rows, long)
    gained = [a for a in shared if after[a] - before[a] > 1]
    held = [r for r in rows if _group(r) == long and r['architecture'] in shared
            and r['architecture'] not in gained and after[r['architecture']] < -1]
    text = (f"- {_name(short[0])}, {short[2]} against {long[2]} epochs: the baseline went from {base0['val_acc']:.2f}% "
            f"to {base1['val_acc']:.2f}%. The median loss of the {len(shared)} other models went from "
            f"{median(d0):+.2f} to {median(d1):+.2f} pp and the largest from {min(d0):+.2f} to {min(d1):+.2f} pp; "
            f"{sum(b > a for a, b in zip(d0, d1))} of {len(shared)} closed some of their gap, and "
            f"{sum(v >= -1 for v in d1)} (before: {sum(v >= -1 for v in d0)}) are within 1 pp of the baseline or "
            f"above it. Their ranking by accuracy lost at the two budgets: Spearman's ρ = {spearman(d0, d1):.2f}. ")
    if gained:
        text += 'Closed by more than 1 pp: ' + ', '.join(f"`{a}` ({before[a]:+.2f} → {after[a]:+.2f})"
                                                          for a in gained) + '. '
    if held and all(r.get('train_acc') is not None for r in held):
        text += (f"The {len(held)} others that still lose more than 1 pp end at a train accuracy of "
                 f"{min(r['train_acc'] for r in held):.2f} to {max(r['train_acc'] for r in held):.2f}% "
                 f"(the baseline: {base1['train_acc']:.2f}%).")
    return text


def claim_section(rows: List[Row]) -> List[str]:
    lines = ['## The paper\'s claim at equal budget: parameters saved against accuracy lost', '',
             'The paper claims that the minimal variants lose little accuracy for the parameters they save. '
             'Within each dataset and depth every model had the same budget (epochs, recipe, seed), so the '
             'differences to the baseline (the unchanged transformer with its MLP and one head) are the '
             f"architecture's. Δ paper is the same difference in the paper's numbers ({PAPER_EPOCHS} epochs), where it has them.",
             '']
    for depth in sorted({r['depth'] for r in rows}):
        table, deltas = claim_table(rows, depth)
        if table:
            lines += [f'### {depth} layers', ''] + table + claim_summary(deltas, depth) + budget_paragraph(rows, deltas, depth)
    return lines


def write_plot(rows: List[Row], path: Path) -> None:
    """Accuracy lost against parameters saved, one panel per dataset, depth and budget (each against its baseline),
    every point named."""
    plt = pyplot()
    groups = [(group, _baseline(rows, group)) for group in _groups(rows)]
    groups = [(group, base) for group, base in groups if base is not None]
    if not groups:
        return
    cols = min(3, len(groups))
    fig, axes = plt.subplots(-(-len(groups) // cols), cols, figsize=(4.6 * cols, 3.6 * -(-len(groups) // cols)),
                             squeeze=False, sharex=True)
    for ax in axes.flat[len(groups):]:
        ax.set_visible(False)
    named = []
    for ax, (group, base) in zip(axes.flat, groups):
        g = [r for r in rows if _group(r) == group]
        points = [(100 * (1 - r['params'] / base['params']), r['val_acc'] - base['val_acc']) for r in g]
        named.append((ax, points, [r['architecture'].replace('vit_minimal_', '') for r in g]))
        ax.scatter(*zip(*points), s=18, zorder=3)
        ax.axhline(0, color='grey', lw=0.8)
        ax.set_title(f'{_name(group[0])}, {group[1]} layers, {g[0]["epochs"]} epochs', fontsize=9)
        ax.grid(alpha=.3)
        low, high = min(y for _, y in points), max(y for _, y in points)
        pad = max(1.0, (high - low) * .15)
        ax.set_ylim(low - pad, high + pad)
        ax.set_xlim(-12, 100)
    for ax in axes[-1]:
        ax.set_xlabel('parameters saved (%)')
    for row in axes:
        row[0].set_ylabel('accuracy against\nthe baseline (pp)')
    fig.suptitle('Accuracy lost against parameters saved, each panel against its baseline, std_mlp_<depth>x1',
                 fontsize=10)
    fig.tight_layout()
    for ax, points, names in named:  # once the layout is final
        label_points(ax, points, names, fontsize=6, step=4)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)


# what the section reads of each row of tools/paper/beyond.py's --json
_PILOT_KEYS = {'name': str, 'model': str, 'what': str, 'options': list, 'status': str, 'epochs': int,
               'planned_epochs': int, 'test_acc': float, 'seed': int}
_PILOT_RANGES = {'epochs': (1, None), 'planned_epochs': (1, None), 'test_acc': (0, 100), 'seed': (0, None)}
_PILOT_OPTIONAL = ('seed',)  # rows of reports that recorded no seed ran with seed 0


def load_pilots(path: Path, empty_ok: bool = False) -> List[Row]:
    """The rows of the pilots' JSON (``python -m timm_minimal.tools.paper.beyond --json``), each checked; an empty
    list only where ``empty_ok``."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError) as e:
        raise ValueError(f'{path}: not a pilots JSON file ({e})') from None
    if not isinstance(data, list) or not (data or empty_ok):
        raise ValueError(f'{path}: not a pilots JSON file (expected a {"" if empty_ok else "non-empty "}list of rows)')
    for i, r in enumerate(data, 1):
        check_row(r, f'{path} row {i}', _PILOT_KEYS, _PILOT_RANGES, _PILOT_OPTIONAL)
    return data


def pilot_setup(row: Row) -> Tuple[str, str]:
    """The recipe a pilot row started from and the kind of device it trained on (the rows of the first CPU pilots
    name neither: the CPU recipe on a CPU)."""
    return row.get('recipe') or 'cifar10_cpu', row.get('device_type') or 'cpu'


def pilot_seed(row: Row) -> int:
    """The seed a pilot row trained with (rows of reports that recorded none: seed 0)."""
    return row.get('seed', 0)


def _beyond_baseline(r: Row, pilots: Sequence[Row], rows: Sequence[Row],
                     others: Sequence[Row] = ()) -> Optional[Tuple[float, str]]:
    """The run ``r`` of the report ``pilots`` is measured against: the plain pilot of its model in that report at its
    budget and seed, else such a pilot of another report (``others``) with the same recipe on the same kind of device,
    else the grid's run of the model at that budget (the paper's recipe, which the converged variants start from; its
    seed is 0, the seed of a row that names none)."""
    def plain(p: Row) -> bool:
        return (p['model'] == r['model'] and not p['options'] and p['status'] == 'finished'
                and p['epochs'] == r['epochs'] and pilot_seed(p) == pilot_seed(r) and p is not r)

    own = [p for p in pilots if plain(p)]
    if own:
        return own[0]['test_acc'], 'the plain pilot'
    elsewhere = [p for p in others if plain(p) and pilot_setup(p) == pilot_setup(r)]
    if elsewhere:
        return elsewhere[0]['test_acc'], 'the plain pilot of another report'
    grid = [g for g in rows if g['model'] == r['model'] and g['epochs'] == r['epochs']]
    return (grid[0]['val_acc'], 'the grid\'s run') if grid and r['options'] and pilot_seed(r) == 0 else None


def beyond_section(reports: Sequence[List[Row]], paths: Sequence[Path], rows: Sequence[Row], out: Path) -> List[str]:
    """Each run beyond the paper against the run of its model without its changes, at the same budget: the plain
    pilot of its report or of another with its recipe, or the grid's run (``_beyond_baseline``)."""
    links = ', '.join(_link(str(p.with_suffix('.md')), out) for p in paths if p.with_suffix('.md').is_file())
    where = f'; the reports, with their commands, recipes and devices: {links}' if links else ''
    lines = ['## Beyond the paper: CIFAR-10', '',
             f'Each architecture trained past the paper\'s recipe, every change against the run of the same model '
             f'without it at the same budget (the plain pilot of its report or of another with its recipe, or the '
             f'grid\'s run of the paper\'s recipe), one seed each (seed 0 where the change names none){where}. Train '
             f'accuracy tells underfitting (low) from overfitting (near 100%); with mixup and cutmix it is measured '
             f'against each image\'s own label and reads low.',
             '', '| model | what changes | epochs | train acc % | test acc % | Δ (against) |',
             '|---|---|---:|---:|---:|---|']
    every = [(r, pilots) for pilots in reports for r in pilots]
    for r, pilots in sorted(every, key=lambda e: (e[0]['model'], e[0]['epochs'], bool(e[0]['options']), e[0]['name'])):
        done = r['status'] == 'finished'
        base = _beyond_baseline(r, pilots, rows, [p for p, _ in every]) if done else None
        epochs = f"{r['epochs']}" if done else f"{r['epochs']} of {r['planned_epochs']} (unfinished)"
        delta = f"{r['test_acc'] - base[0]:+.2f} ({base[1]}, {base[0]:.2f})" if base else '–'
        lines.append(f"| `{r['model']}` | {r['what']} | {epochs} | {cell(r.get('train_acc'), '.2f')} "
                     f"| {r['test_acc']:.2f} | {delta} |")
    return lines + ['']


def _changed_runs(reports: Sequence[List[Row]]) -> List[Row]:
    """The finished runs beyond the paper that change something (a plain pilot is the paper's recipe)."""
    return [b for pilots in reports for b in pilots if b['status'] == 'finished' and b['options']]


def _at_best(r: Row, changed: Sequence[Row]) -> Tuple[float, str, int]:
    """The highest last-epoch test accuracy of grid row ``r``'s model at ``r``'s budget: its grid run (the paper's
    recipe) or a run of ``changed`` of the same model and budget, with what that run changes and the parameters of
    its model (a student with a distillation token has the token and a second head more)."""
    runs = [(b['test_acc'], b['what'], b.get('params') or r['params']) for b in changed
            if b['model'] == r['model'] and b['epochs'] == r['epochs']]
    return max([(r['val_acc'], "the paper's recipe", r['params'])] + runs, key=lambda t: t[0])


def _best_at_budget(rows: Sequence[Row], reports: Sequence[List[Row]]) -> Optional[Tuple[Group, Row, List[Tuple]]]:
    """The CIFAR-10 grid at the longest budget that runs beyond the paper reached, its baseline, and each of its rows
    with its best accuracy and recipe (``_at_best``), best first; None where there is no such grid or baseline."""
    changed = _changed_runs(reports)
    groups = [g for g in _groups(list(rows)) if g[0] == 'cifar10' and g[2] in {b['epochs'] for b in changed}]
    group = max(groups, key=lambda g: (g[2], -g[1]), default=None)
    base = _baseline(list(rows), group) if group else None
    if base is None:
        return None
    return group, base, sorted(((r, *_at_best(r, changed)) for r in rows if _group(r) == group), key=lambda e: -e[1])


def best_section(rows: Sequence[Row], reports: Sequence[List[Row]]) -> List[str]:
    """Each CIFAR-10 architecture at its best recipe against the baseline at its best, at the longest budget that
    runs beyond the paper reached: the median difference of the others, for one recipe and for each at its best."""
    found = _best_at_budget(rows, reports)
    if found is None:
        return []
    group, base, best = found
    base_best = next(acc for r, acc, *_ in best if r is base)
    lines = [f'### Each at its best ({_name(group[0])}, {group[1]} layers, {group[2]} epochs)', '',
             f'Each architecture\'s highest test accuracy at {group[2]} epochs among the grid\'s run (the paper\'s '
             f'recipe) and the finished runs above of that budget, against the baseline `{base["architecture"]}` at '
             f'its own best ({base_best:.2f}%); one seed each, last epoch, no checkpoint chosen on the test split; the '
             f'parameters are those of the run at its best (a student distilled through a token has the token and '
             f'a second head more).', '',
             '| model | parameters | paper\'s recipe % | best % | its recipe | Δ baseline, paper\'s recipe | '
             'Δ baseline, each at its best |', '|---|---:|---:|---:|---|---:|---:|']
    one, each = [], []
    for r, acc, what, params in best:
        if r is not base:
            one.append(_delta(r, base, 'val_acc'))
            each.append(acc - base_best)
        lines.append(f"| `{r['architecture']}` | {params:,} | {r['val_acc']:.2f} | {acc:.2f} | {what} | "
                     + ('baseline | baseline |' if r is base else f"{one[-1]:+.2f} | {each[-1]:+.2f} |"))
    lines += ['', f'Median over the {len(one)} others against the baseline: {median(one):+.2f} pp with '
                  f'one recipe, {median(each):+.2f} pp with each at its best.', '']
    return lines + answer_paragraph(best, base, base_best, reports, rows, group[2])


NOISE_PP = 0.5  # a change this close to its reference is no gain: two seeds of one recipe spread 1.2 points (pilots)
CLOSED_PP = 2.0  # "closes the gap": within this of the baseline at its best (the target of the runs beyond the paper)


def answer_paragraph(best: List[Tuple], base: Row, base_best: float, reports: Sequence[List[Row]],
                     rows: Sequence[Row], epochs: int) -> List[str]:
    """The paper's open question answered from the runs: what distillation did to its students at ``epochs``, how
    far they stay from the baseline, each at its best, against the gap with the paper's recipe on both sides, and each
    change that did not help."""
    grid = {r['model']: r for r, *_ in best}  # a run and the grid's row of its model share the tagged name
    kd = [b for b in _changed_runs(reports) if '--teacher' in b['options'] and b['epochs'] == epochs
          and b['model'] in grid]
    lines = []
    if kd:
        lift = sorted(b['test_acc'] - grid[b['model']]['val_acc'] for b in kd)
        students = {b['model'] for b in kd}
        minimal = [(r, acc) for r, acc, *_ in best if r['model'] in students]
        gaps = [acc - base_best for _, acc in minimal]
        before = [r['val_acc'] - base['val_acc'] for r, _ in minimal]
        closed = [f"`{r['architecture']}`" for r, acc in minimal if acc - base_best >= -CLOSED_PP]
        verb = 'narrows' if median(gaps) > median(before) else 'does not narrow'
        lines += [f'**Does distillation close the minimal models\' gap?** Its {len(kd)} runs of {epochs} epochs moved '
                  f'their students by {lift[0]:+.2f} to {lift[-1]:+.2f} points against the grid\'s runs of the same '
                  f'models (median {median(lift):+.2f}). Each at its best, the {len(minimal)} students stay '
                  f'{min(gaps):+.2f} to {max(gaps):+.2f} points from the baseline at its best (median '
                  f'{median(gaps):+.2f}), against {min(before):+.2f} to {max(before):+.2f} (median '
                  f'{median(before):+.2f}) with the paper\'s recipe on both sides: at this budget it {verb} the gap, '
                  f'and closes it (within {CLOSED_PP:g} points) for {", ".join(closed) if closed else "none of them"}.',
                  '']
    flat, everyone = [], [b for pilots in reports for b in pilots]
    for pilots in reports:
        for b in pilots:
            ref = _beyond_baseline(b, pilots, rows, everyone) if b['status'] == 'finished' and b['options'] else None
            if ref and b['test_acc'] - ref[0] < NOISE_PP:
                flat.append(f"`{b['model']}`, {b['what']}, {b['epochs']} epochs ({b['test_acc'] - ref[0]:+.2f})")
    if flat:
        lines += [f'**What did not help** (under {NOISE_PP:g} points above the run without the change, one seed '
                  f'each): {"; ".join(flat)}.', '']
    return lines


def write_summary(paths: Sequence[Path], out: Path, command: str, plot: Optional[Path] = None,
                  pilots: Sequence[Path] = ()) -> str:
    """RESULTS-style markdown over the rows of ``paths`` (and the reports of runs beyond the paper, the JSON files
    ``pilots``); returns the text written to ``out``."""
    rows = load_rows(paths)
    beyond = [load_pilots(p) for p in pilots]
    lines = ["# Results: the paper's Tables 1 and 2 on MNIST and CIFAR-10", '',
             f'Our minimal transformers next to the numbers of {PAPER}. Generated by `{command}` from the rows of '
             'the reports below; each report was built from its run folders and states its recipe, hardware and '
             'versions.', '']
    lines += budgets_section(rows, out) + claim_section(rows) + paper_section(rows)
    if beyond:
        lines += beyond_section(beyond, pilots, rows, out) + best_section(rows, beyond)
    if plot is not None:
        write_plot(rows, plot)
        lines += [f'![accuracy lost against parameters saved]({os.path.relpath(plot, out.parent)})', '']
    text = '\n'.join(lines)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    return text
