"""Accuracy against parameters: the paper's Table 2 and this project's reproduce-paper results."""
import json
import os
from typing import Any, Dict, List, Optional, Sequence

from ...models.paper import TABLE2

# The paper's Table 2 (MNIST, 6 layers, 500 epochs, numbers of the last epoch), as the accuracy plot reads it.
PAPER_TABLE2: List[Dict[str, Any]] = [
    dict(model=r.arch, heads=r.heads, mlp=r.mlp, modification=r.modification, params=r.params,
         train_acc=r.train_acc, val_acc=r.val_acc) for r in TABLE2]


def load_reproduce_results(path: str) -> Optional[List[Dict[str, Any]]]:
    """Rows of the reproduce-paper results (a list of dicts, or ``{'rows': [...]}``), None if absent."""
    if not path or not os.path.exists(path):
        return None
    with open(path) as f:
        data = json.load(f)
    if isinstance(data, dict):
        data = data.get('rows', data.get('results', []))
    rows = [r for r in data if isinstance(r, dict) and r.get('params') is not None and r.get('val_acc') is not None]
    return list({r.get('model', i): r for i, r in enumerate(rows)}.values())  # a model in both tables counts once


def as_percent(values: Sequence[float]) -> List[float]:
    """Accuracies as percentages (a column whose values are all <= 1 is read as fractions)."""
    values = [float(v) for v in values]
    return [v * 100. for v in values] if values and max(values) <= 1.0 else values

