"""The report's PNG plots (matplotlib, imported on first use, Agg backend)."""
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from ...models.paper import PAPER_EPOCHS
from .accuracy import PAPER_TABLE2
from ..figures import label_points, pyplot
from .measure import median


def matplotlib_ticker():
    import matplotlib.ticker  # lazy: matplotlib where a figure is drawn
    return matplotlib.ticker


def plot_speedups(points: List[Dict[str, Any]], path: str) -> str:
    """Per variant: the speed-up FLOPs predict, and the measured inference and training speed-ups."""
    plt = pyplot()
    points = sorted(points, key=lambda p: p['flops'], reverse=True)
    y = np.arange(len(points))
    h = 0.27
    fig, ax = plt.subplots(figsize=(8, 0.42 * len(points) + 1.6))
    ax.barh(y - h, [1 / p['flops'] for p in points], h, color='lightgray', edgecolor='gray',
            label='FLOP-predicted (baseline FLOPs / variant FLOPs)')
    ax.barh(y, [p['infer'] for p in points], h, color='tab:blue', label='inference, measured')
    ax.barh(y + h, [p['train'] for p in points], h, color='tab:orange', label='training, measured')
    ax.axvline(1, color='black', lw=0.8)
    ax.set_yticks(y)
    ax.set_yticklabels([p['label'] for p in points])
    ax.invert_yaxis()
    ax.set_xlabel('speed-up over the baseline std_mlp (throughput ratio, median)')
    ax.set_title('Minimal variants against the baseline: do they get faster as FLOPs predict?', fontsize=10)
    ax.grid(True, axis='x', alpha=0.3)
    ax.legend(fontsize=8, loc='upper right')
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_scaling(points: List[Dict[str, Any]], axis: str, path: str) -> str:
    plt = pyplot()
    has_mem = any('mem_train' in p for p in points)
    ncols = 3 if has_mem else 2
    fig, axes = plt.subplots(1, ncols, figsize=(4.2 * ncols, 4))
    series: Dict[Tuple[str, bool], List[Dict[str, Any]]] = {}
    for p in points:
        series.setdefault((p['name'], p['fused']), []).append(p)
    metrics = [('infer', 'inference images/s'), ('train', 'training images/s')]
    if has_mem:
        metrics.append(('mem_train', 'training working memory per image (MiB)'))
    for ax, (metric, label) in zip(axes, metrics):
        for (name, fused), pts in sorted(series.items()):
            pts = sorted(pts, key=lambda p: p['value'])
            if metric == 'mem_train':
                ys = [p['mem_train'] / p['batch_size'] for p in pts]
            else:
                ys = [median(p[metric]) for p in pts]
            ax.plot([p['value'] for p in pts], ys, marker='o', ls='-' if fused else ':',
                    label=f'{name.replace("vit_minimal_", "")}{"" if fused else " (SDPA off)"}')
        ax.set_xscale('log', base=2)
        ax.set_yscale('log')
        ax.set_xticks(sorted({p['value'] for p in points}))
        ax.get_xaxis().set_major_formatter(matplotlib_ticker().ScalarFormatter())
        ax.get_xaxis().set_minor_locator(matplotlib_ticker().NullLocator())
        ax.set_xlabel('tokens' if axis == 'tokens' else 'depth (blocks)')
        ax.set_ylabel(label)
        ax.grid(True, which='both', alpha=0.3)
    axes[0].legend(fontsize=7)
    fig.suptitle(f'Scaling with {"the token count" if axis == "tokens" else "depth"}')
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_accuracy(repro: Optional[List[Dict[str, Any]]], path: str) -> str:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7.5, 5))
    paper = PAPER_TABLE2
    ax.scatter([p['params'] for p in paper], [p['val_acc'] for p in paper], marker='x', color='black',
               label=f'paper, Table 2 (MNIST, 6 layers, {PAPER_EPOCHS} epochs)', zorder=3)
    points = [(p['params'], p['val_acc'], p['model'], 'dimgray') for p in paper]
    if repro:
        datasets = sorted({str(r.get('dataset', '')) for r in repro})
        for ds in datasets:
            sel = [r for r in repro if str(r.get('dataset', '')) == ds]
            dots = ax.scatter([r['params'] for r in sel], [r['val_acc'] for r in sel], marker='o',
                              label=f'this project ({ds or "?"})', zorder=4)
            points += [(r['params'], r['val_acc'], str(r.get('model', '')).split('.')[0],
                        dots.get_facecolor()[0]) for r in sel]
        title = 'Validation accuracy against parameters: the paper\'s Table 2 and this project'
    else:
        title = 'Validation accuracy against parameters (paper only: no reproduction results yet)'
    ax.set_xscale('log')
    xs = [p['params'] for p in paper] + [float(r['params']) for r in (repro or [])]
    ax.set_xlim(min(xs) / 1.5, max(xs) * 1.6)
    ticks = [t for t in (1e4, 2e4, 5e4, 1e5, 2e5, 5e5, 1e6, 2e6, 5e6) if min(xs) / 1.5 <= t <= max(xs) * 1.6]
    ax.set_xticks(ticks)
    ax.set_xticklabels([f'{t / 1000:g}k' for t in ticks])
    ax.get_xaxis().set_minor_formatter(matplotlib_ticker().NullFormatter())
    ax.set_xlabel('parameters')
    ax.set_ylabel('validation accuracy (%)')
    ax.set_title(title, fontsize=10)
    ax.grid(True, which='both', alpha=0.3)
    ax.legend(fontsize=8, loc='lower right')
    fig.tight_layout()
    label_points(ax, [(x, y) for x, y, _, _ in points], [m.replace('vit_minimal_', '') for _, _, m, _ in points],
                 [c for _, _, _, c in points])
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path

