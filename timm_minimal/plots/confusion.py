"""A confusion matrix (rows: true class, columns: predicted) as a heat map with its counts, for the evaluation tool's
report and a training run's trackers."""
from typing import Any, Sequence

import numpy as np

__all__ = ['draw_confusion', 'confusion_figure', 'panel_inches']


def panel_inches(classes: int) -> float:
    """The side of one matrix's panel, so that its class names stay readable (16 inches at most: above 40 classes
    only every k/20-th is named)."""
    return min(max(4.0, 0.45 * classes + 2), 16.0)


def draw_confusion(ax: Any, matrix: np.ndarray, names: Sequence[str], title: str) -> None:
    """``matrix`` on ``ax``: names on both axes (every one up to 40 classes, 20 of them above), counts in the cells
    up to 20 classes."""
    k = len(names)
    ax.imshow(matrix, cmap='Blues')
    ax.set_title(title, fontsize=9)
    ax.set_xlabel('predicted')
    ax.set_ylabel('true')
    ticks = list(range(k) if k <= 40 else range(0, k, max(1, k // 20)))
    ax.set_xticks(ticks, [str(names[i]) for i in ticks], rotation=90, fontsize=7)
    ax.set_yticks(ticks, [str(names[i]) for i in ticks], fontsize=7)
    if k <= 20:
        for (i, j), v in np.ndenumerate(matrix):
            if v:
                ax.text(j, i, str(v), ha='center', va='center', fontsize=6,
                        color='white' if v > matrix.max() / 2 else 'black')


def confusion_figure(matrix: np.ndarray, names: Sequence[str], title: str) -> Any:
    """One confusion matrix as a figure."""
    from matplotlib.figure import Figure  # lazy: matplotlib where a figure is drawn
    side = panel_inches(len(names))
    fig = Figure(figsize=(side, side - 0.5), layout='constrained')
    draw_confusion(fig.add_subplot(), np.asarray(matrix), names, title)
    return fig
