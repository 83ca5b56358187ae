"""What ``timm-minimal-evaluate`` reports beyond one line: a table of several models, each accuracy with its 95%
interval, a row per class, the confusion matrices as a figure, and all of it as JSON for scripts.

Every number comes from the confusion matrix and the sums of ``evaluate.evaluate_split``; nothing here runs a model.
"""
import json
import math
from pathlib import Path
from typing import Any, Dict, List, Sequence, Tuple

import numpy as np

from ..plots.confusion import draw_confusion, panel_inches
from ..training.run.files import write_file_atomic

__all__ = ['wilson_interval', 'per_class', 'model_table', 'class_table', 'write_confusion_figure', 'write_json']

Z95 = 1.959963984540054  # the standard normal's 97.5% quantile


def wilson_interval(hits: int, n: int, z: float = Z95) -> Tuple[float, float]:
    """The Wilson score interval of an accuracy of ``hits`` in ``n`` (in %), at 95% by default."""
    if n <= 0:
        raise ValueError('an accuracy over no images has no interval')
    p = hits / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return 100 * max(0.0, centre - half), 100 * min(1.0, centre + half)


def per_class(confusion: np.ndarray, names: Sequence[str]) -> List[Dict[str, Any]]:
    """Each class that has images: its name, image count and accuracy (%); rows of ``confusion`` are the true class."""
    rows = []
    for i, name in enumerate(names):
        n = int(confusion[i].sum())
        if n:
            rows.append(dict(name=str(name), images=n, acc=100.0 * int(confusion[i, i]) / n))
    return rows


def model_table(results: Sequence[Dict[str, Any]]) -> List[str]:
    """One line a model: top-1 with its 95% interval, top-5, loss, parameters."""
    width = max(len('model'), *(len(r['model']) for r in results))
    lines = [f'{"model":<{width}}  {"top-1 %":>8}  {"95% interval":>13}  {"top-5 %":>8}  {"loss":>7}  {"params":>11}']
    for r in results:
        low, high = r['acc_interval']
        top5 = f'{r["acc5"]:8.2f}' if r.get('acc5') is not None else f'{"-":>8}'
        lines.append(f'{r["model"]:<{width}}  {r["acc"]:8.2f}  {f"{low:.2f}-{high:.2f}":>13}  {top5}  '
                     f'{r["loss"]:7.4f}  {r["params"]:>11,}')
    return lines


def class_table(results: Sequence[Dict[str, Any]]) -> List[str]:
    """One line a class: its images and each model's accuracy on them (%), the models in the order given."""
    names = [c['name'] for c in results[0]['per_class']]
    width = max(len('class'), *(len(n) for n in names))
    heads = [f'#{i + 1}' if len(results) > 1 else 'top-1 %' for i in range(len(results))]
    lines = [f'{"class":<{width}}  {"images":>7}  ' + '  '.join(f'{h:>8}' for h in heads)]
    by_name = [{c['name']: c for c in r['per_class']} for r in results]
    for name in names:
        accs = '  '.join(f'{m[name]["acc"]:8.2f}' for m in by_name)
        lines.append(f'{name:<{width}}  {by_name[0][name]["images"]:>7,}  {accs}')
    if len(results) > 1:
        lines += [f'#{i + 1}: {r["model"]}' for i, r in enumerate(results)]
    return lines


def write_confusion_figure(path: Path, results: Sequence[Dict[str, Any]], names: Sequence[str]) -> None:
    """The confusion matrix of each model, side by side (rows: true class, columns: predicted), as a PNG."""
    from matplotlib.figure import Figure  # lazy: matplotlib where a figure is drawn
    side = panel_inches(len(names))
    fig = Figure(figsize=(side * len(results), side - 0.5), layout='constrained')
    for ax, r in zip(fig.subplots(1, len(results), squeeze=False)[0], results):
        draw_confusion(ax, np.asarray(r['confusion']), names, f'{r["model"]}\ntop-1 {r["acc"]:.2f}%')
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    write_file_atomic(path, lambda tmp: fig.savefig(tmp, format='png', dpi=120))


def write_json(path: Path, report: Dict[str, Any]) -> None:
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    write_file_atomic(path, lambda tmp: tmp.write_text(json.dumps(report, indent=2) + '\n'))
