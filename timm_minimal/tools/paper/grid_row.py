"""The grid row: one paper row of a reproduce run, as ``timm-minimal-reproduce --json`` writes it.

``GridRow`` is the record's one home: ``grid.collect`` builds it, ``read_grid_rows`` is its one reader (RESULTS.md's
``--combine``, the benchmark's accuracy plot), which checks every key against the types written here and the
ranges below, so a file from another tool or edited by hand is refused in one line naming the file, the row and the
key. Accuracies are in percent, losses cross-entropy; None where the run is missing or the paper gives no number.
"""
import json
import math
import re
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple, Union, get_args, get_origin, get_type_hints

from typing_extensions import NotRequired, TypedDict

from ...models.datasets import DATASETS

__all__ = ['GridRow', 'RANGES', 'check_row', 'read_grid_rows']


class GridRow(TypedDict):
    """One paper row of a reproduce run: the paper's row, what our run measured, and the paper's numbers."""
    # the paper's row
    model: str  # the tagged name, e.g. vit_minimal_sym_6x4.cifar10
    architecture: str
    dataset: str
    depth: int
    table: NotRequired[int]
    row_id: NotRequired[str]
    label: NotRequired[str]
    heads: NotRequired[int]
    mlp: NotRequired[bool]
    modification: NotRequired[str]
    # what our run measured (its last epoch; the best for reference)
    params: Optional[int]
    epochs: int
    val_acc: Optional[float]
    train_loss: NotRequired[Optional[float]]
    train_acc: NotRequired[Optional[float]]
    val_loss: NotRequired[Optional[float]]
    best_val_acc: NotRequired[Optional[float]]
    best_epoch: NotRequired[Optional[int]]
    train_time_s: NotRequired[Optional[float]]
    wall_time_s: NotRequired[Optional[float]]
    q: NotRequired[Optional[float]]  # training samples x classes / parameters, the paper's Q
    mixed_precision: NotRequired[Optional[str]]
    status: NotRequired[str]  # the run's: finished, running, diverged, failed, missing
    val_acc_per_epoch: NotRequired[List[float]]
    run_dir: NotRequired[str]
    # the paper's numbers
    paper_val_acc: Optional[float]
    paper_params: NotRequired[Optional[int]]
    paper_params_from_q: NotRequired[Optional[int]]
    paper_q: NotRequired[Optional[float]]
    paper_epochs: NotRequired[int]
    paper_train_loss: NotRequired[Optional[float]]
    paper_train_acc: NotRequired[Optional[float]]
    paper_val_loss: NotRequired[Optional[float]]
    val_acc_gap: NotRequired[Optional[float]]  # ours minus the paper's, in points


# no number in a row is larger than this (a parameter count, a wall time); one past it is no run's
MAX_NUMBER = 1e15
# the names a report prints as they are: a checkpoint's or an architecture's, e.g. vit_minimal_sym_6x4.cifar10
_NAME = re.compile(r'[A-Za-z0-9_.\-]+')
# the range of each number (low, high; None: open)
RANGES: Dict[str, Tuple[Optional[float], Optional[float]]] = {
    'depth': (1, None), 'epochs': (0, None), 'params': (1, None), 'val_acc': (0, 100), 'paper_val_acc': (0, 100),
    'train_acc': (0, 100), 'best_val_acc': (0, 100), 'heads': (1, None), 'best_epoch': (1, None)}


def _kinds(hint: Any) -> Tuple[Any, bool]:
    """The value type of a field's hint (NotRequired and Optional taken off) and whether None is allowed."""
    while get_origin(hint) is NotRequired:
        hint = get_args(hint)[0]
    if get_origin(hint) is Union:
        args = [a for a in get_args(hint) if a is not type(None)]
        return args[0], len(args) < len(get_args(hint))
    return hint, False


def _fits(value: Any, kind: Any) -> bool:
    if kind is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if kind is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if get_origin(kind) in (list, List):
        return isinstance(value, list) and all(_fits(v, get_args(kind)[0]) for v in value)
    return isinstance(value, kind)


def _check_value(key: str, value: Any, where: str) -> None:
    """A number within its range (``RANGES``) and ``MAX_NUMBER``, a string on one line (a name: ``_NAME``'s
    characters), so that nothing read can break the report it goes into."""
    if isinstance(value, str):
        if key in ('model', 'architecture') and not _NAME.fullmatch(value):
            raise ValueError(f'{where}: "{key}" must be a name of letters, digits, "_", "." and "-", got {value[:80]!r}')
        if any(not c.isprintable() for c in value):
            raise ValueError(f'{where}: "{key}" must be one line of printable text, got {value[:80]!r}')
        return
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return
    shown = repr(value) if len(repr(value)) <= 40 else f'a number of {len(repr(value))} digits'
    if (isinstance(value, float) and not math.isfinite(value)) or abs(value) > MAX_NUMBER:
        raise ValueError(f'{where}: "{key}" must be a finite number of at most {MAX_NUMBER:g}, got {shown}')
    low, high = RANGES.get(key, (None, None))
    if (low is not None and value < low) or (high is not None and value > high):
        limits = f'at least {low}' if high is None else f'from {low} to {high}'
        raise ValueError(f'{where}: "{key}" must be {limits}, got {shown}')


def check_row(r: Any, where: str) -> GridRow:
    """``r`` as a ``GridRow``: every required key present, every key of its type and range, a known dataset;
    ValueError naming ``where`` and the key otherwise."""
    if not isinstance(r, dict):
        raise ValueError(f'{where}: not a row (a JSON object), got {r!r}')
    hints = get_type_hints(GridRow, include_extras=True)
    for key in GridRow.__required_keys__:
        if key not in r:
            needed = ', '.join(sorted(GridRow.__required_keys__))
            raise ValueError(f'{where}: the key "{key}" is missing (a row needs {needed})')
    for key, hint in hints.items():
        if key not in r:
            continue
        kind, optional = _kinds(hint)
        value = r[key]
        if value is None and optional:
            continue
        if not _fits(value, kind):
            wanted = 'a number' if kind is float else getattr(kind, '__name__', str(kind))
            raise ValueError(f'{where}: "{key}" must be {wanted}, got {value!r}')
        _check_value(key, value, where)
    if r['dataset'] not in DATASETS:
        raise ValueError(f'{where}: unknown dataset {r["dataset"]!r}; the datasets are {", ".join(DATASETS)}')
    return r  # type: ignore[return-value]


def read_grid_rows(path: Path) -> List[GridRow]:
    """Every row of one reproduce JSON file, each checked (``check_row``)."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError, RecursionError) as e:
        raise ValueError(f'{path}: not a reproduce JSON file ({type(e).__name__}: {str(e)[:120]})') from None
    if not isinstance(data, list) or not all(isinstance(r, dict) and 'model' in r for r in data):
        raise ValueError(f'{path}: not a reproduce JSON file (expected a list of rows with a "model")')
    return [check_row(r, f'{path} row {i}') for i, r in enumerate(data, 1)]
