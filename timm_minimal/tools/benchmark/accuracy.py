"""Accuracy against parameters: the paper's Table 2 and this project's reproduce-paper results."""
import os
from pathlib import Path
from typing import Any, Dict, List, Optional

from ...cli import UsageError
from ...models.paper import TABLE2
from ..paper.results_summary import load_rows

# The paper's Table 2 (MNIST, 6 layers, 500 epochs, numbers of the last epoch), as the accuracy plot reads it.
PAPER_TABLE2: List[Dict[str, Any]] = [
    dict(model=r.arch, heads=r.heads, mlp=r.mlp, modification=r.modification, params=r.params,
         train_acc=r.train_acc, val_acc=r.val_acc) for r in TABLE2]


def load_reproduce_results(path: str) -> Optional[List[Dict[str, Any]]]:
    """The trained rows of a ``timm-minimal-reproduce --json`` file, read by the reader of its own reports
    (``results_summary.load_rows``: every key typed, accuracies in percent, a bad row named in one line); None
    if there is no file."""
    if not path or not os.path.exists(path):
        return None
    try:
        return load_rows([Path(path)])
    except ValueError as e:
        raise UsageError(f'--results: {e}') from None
