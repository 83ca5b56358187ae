"""The run folder of a training run: one class that writes and reads its files.

A run folder holds

- ``run.json``: what the run is (command, options, model, dataset, versions, launches, status, final
  and best metrics),
- ``args.yaml``: the resolved options (what ``--resume`` reads back),
- ``metrics.jsonl``: one JSON line per finished epoch,
- ``steps.jsonl``: one JSON line per point of the training curve (``trackers.StepLog``: every ``--log-interval``
  updates and each epoch's end),
- ``curves.png``: loss, accuracy and learning rate, per update where ``steps.jsonl`` has them,
- ``checkpoints/last`` and ``checkpoints/best`` (see ``timm_minimal.training.run.checkpoint``),
- ``.lock``: an OS lock held by the training process, so that two runs never write one folder.

Every file is written atomically (temporary file, then rename). The trainer writes through this
class; ``timm_minimal.tools.paper.reproduce`` and ``timm_minimal.tools.hub.publish`` read through it.
"""
import json
import math
import os
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple, Union

import yaml

from ...cli import INT_LIMIT
from . import checkpoint as ckpt
from .files import LOCK_FILE, FolderLock, missing_folders, remove_empty, write_file_atomic, write_text_atomic
from .record import RUN_FORMAT, RunRecord

__all__ = ['RunFolder', 'RUN_FORMAT']


# The numbers of a metrics.jsonl row (engine.epoch_row) and their ranges: every reader gets them checked here.
METRIC_RANGES: Dict[str, Tuple[type, float, float]] = {
    'epoch': (int, 1, INT_LIMIT), 'update': (int, 0, INT_LIMIT), 'train_samples': (int, 0, INT_LIMIT),
    'test_samples': (int, 0, INT_LIMIT), 'train_loss': (float, 0, math.inf), 'test_loss': (float, 0, math.inf),
    'train_acc': (float, 0, 100), 'test_acc': (float, 0, 100), 'test_acc5': (float, 0, 100),
    'ema_test_loss': (float, 0, math.inf), 'ema_test_acc': (float, 0, 100), 'lr': (float, 0, math.inf),
    'throughput': (float, 0, math.inf), 'epoch_time': (float, 0, math.inf), 'train_time': (float, 0, math.inf),
    'eval_time': (float, 0, math.inf), 'elapsed': (float, 0, math.inf),
}
REQUIRED_METRICS = ('epoch', 'train_loss', 'train_acc', 'test_loss', 'test_acc', 'epoch_time')


def check_metrics_row(row: Dict[str, Any], where: str) -> None:
    """ValueError naming ``where`` and the key unless every known number of ``row`` is a finite number of its kind
    within its range and the keys every report reads are there."""
    missing = [k for k in REQUIRED_METRICS if k not in row]
    if missing:
        raise ValueError(f'{where} lacks {", ".join(missing)}')
    for key, (kind, low, high) in METRIC_RANGES.items():
        if key not in row:
            continue
        value = row[key]
        ok = isinstance(value, (int, float)) and not isinstance(value, bool) and (kind is float or isinstance(value, int))
        if not ok or not math.isfinite(value) or not low <= value <= high:
            wanted = f'{"an integer" if kind is int else "a finite number"} from {low:g} to {high:g}'
            raise ValueError(f'{where}: {key} must be {wanted}, got {value!r}')


class RunFolder:
    """Paths and atomic reads and writes of one run folder."""

    def __init__(self, path: Union[str, Path]) -> None:
        self.path = Path(path)
        self._lock: Optional[FolderLock] = None
        self._created: List[Path] = []  # the folders prepare() made, deepest first

    def __repr__(self) -> str:
        return f'RunFolder({str(self.path)!r})'

    def __str__(self) -> str:
        return str(self.path)

    # -- paths --------------------------------------------------------------------------------
    @property
    def run_file(self) -> Path:
        return self.path / 'run.json'

    @property
    def args_file(self) -> Path:
        return self.path / 'args.yaml'

    @property
    def metrics_file(self) -> Path:
        return self.path / 'metrics.jsonl'

    @property
    def steps_file(self) -> Path:
        return self.path / 'steps.jsonl'

    @property
    def curves_file(self) -> Path:
        return self.path / 'curves.png'

    @property
    def checkpoints(self) -> Path:
        return self.path / 'checkpoints'

    def checkpoint(self, name: str = 'last') -> Path:
        return self.checkpoints / name

    def find_checkpoint(self, name: str = 'last') -> Optional[Path]:
        """The complete checkpoint folder ``name`` (or its ``.prev`` during a swap); None if there is none."""
        return ckpt.find_checkpoint(self.path, name)

    # -- state ----------------------------------------------------------------------------------
    def exists(self) -> bool:
        return self.path.is_dir()

    def is_empty(self) -> bool:
        """No files but, perhaps, the lock file of a start that was killed before it wrote anything."""
        return not self.path.exists() or all(p.name == LOCK_FILE for p in self.path.iterdir())

    def lock(self) -> None:
        """Take the folder's OS lock until ``unlock`` or the end of the process (``FolderBusy`` when another
        process holds it)."""
        if self._lock is None:
            self._note_created()
            self._lock = FolderLock(self.path, LOCK_FILE).acquire()

    def _note_created(self) -> None:
        if not self._created:
            self._created = missing_folders(self.path)

    def unlock(self) -> None:
        if self._lock is not None:
            self._lock.release()
            self._lock = None

    def is_run(self) -> bool:
        """Whether the folder holds a run (its ``run.json`` and ``metrics.jsonl``)."""
        return self.run_file.is_file() and self.metrics_file.is_file()

    def discard_start(self) -> bool:
        """Remove the folder of a start that failed before it wrote anything (only the lock file and empty
        folders in it); a folder holding anything else is left as it is. Whether it was removed."""
        if not self.path.is_dir():
            return False
        entries = list(self.path.rglob('*'))
        if any(p.is_file() and p != self.path / LOCK_FILE or p.is_symlink() for p in entries):
            return False
        (self.path / LOCK_FILE).unlink(missing_ok=True)
        for p in sorted((p for p in entries if p.is_dir()), key=lambda p: -len(p.parts)):
            p.rmdir()
        self.path.rmdir()
        remove_empty(self._created[1:])  # the parents that prepare() made, while empty
        return True

    def prepare(self) -> None:
        """Create the folder and remove temporary checkpoint folders a killed run left behind."""
        self._note_created()
        self.path.mkdir(parents=True, exist_ok=True)
        ckpt.clean_stale_temp(self.checkpoints)

    # -- run.json -------------------------------------------------------------------------------
    def read_record(self) -> RunRecord:
        """``run.json`` as a ``RunRecord`` (``ValueError`` naming the file where it is not one)."""
        return RunRecord.load_from_json(self.run_file)

    def write_record(self, record: RunRecord) -> None:
        record.save_to_json(self.run_file)

    @property
    def status(self) -> Optional[str]:
        """The run's status (``running``, ``finished``, ``diverged``, ``failed``); None without a ``run.json``."""
        return self.read_record().status if self.run_file.is_file() else None

    # -- args.yaml ------------------------------------------------------------------------------
    def read_args(self) -> Dict[str, Any]:
        """``args.yaml`` as a dict ({} when absent)."""
        return (yaml.safe_load(self.args_file.read_text()) or {}) if self.args_file.is_file() else {}

    def write_args(self, args: Dict[str, Any]) -> None:
        write_text_atomic(self.args_file, yaml.safe_dump(args, sort_keys=True))

    # -- metrics.jsonl --------------------------------------------------------------------------
    def read_metrics(self) -> List[Dict[str, Any]]:
        """One dict per finished epoch ([] when absent)."""
        if not self.metrics_file.is_file():
            return []
        rows = []
        for number, line in enumerate(self.metrics_file.read_text().splitlines(), 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except (ValueError, RecursionError) as e:
                raise ValueError(f'{self.metrics_file} line {number} is not a JSON record ({type(e).__name__}: '
                                 f'{str(e)[:120]})') from None
            if not isinstance(row, dict):
                raise ValueError(f'{self.metrics_file} line {number} is not a JSON object')
            check_metrics_row(row, f'{self.metrics_file} line {number}')
            rows.append(row)
        return rows

    def write_metrics(self, rows: List[Dict[str, Any]]) -> None:
        """Replace ``metrics.jsonl`` with these rows (a resumed run rewrites the epochs it keeps)."""
        write_text_atomic(self.metrics_file, ''.join(json.dumps(r) + '\n' for r in rows))

    def append_metrics(self, row: Dict[str, Any]) -> None:
        with open(self.metrics_file, 'a') as f:
            f.write(json.dumps(row) + '\n')
            f.flush()
            os.fsync(f.fileno())

    # -- steps.jsonl -----------------------------------------------------------------------------
    def read_steps(self) -> List[Dict[str, Any]]:
        """The curve's points so far ([] when absent); a line that is not a point (a write cut short by a kill) is
        passed over."""
        if not self.steps_file.is_file():
            return []
        rows = []
        for line in self.steps_file.read_text().splitlines():
            try:
                row = json.loads(line)
            except (ValueError, RecursionError):
                continue
            if isinstance(row, dict) and isinstance(row.get('update'), int) and \
                    all(isinstance(row.get(k), (int, float)) for k in ('epoch', 'loss', 'lr')):
                rows.append(row)
        return rows

    def append_step(self, row: Dict[str, Any]) -> None:
        with open(self.steps_file, 'a') as f:
            f.write(json.dumps(row) + '\n')

    # -- curves.png -----------------------------------------------------------------------------
    def plot_curves(self, rows: Optional[List[Dict[str, Any]]] = None, title: str = '') -> None:
        """``curves_figure`` of this run as ``curves.png`` (written atomically)."""
        rows = self.read_metrics() if rows is None else rows
        if rows:
            fig = curves_figure(rows, self.read_steps(), title)
            write_file_atomic(self.curves_file, lambda tmp: fig.savefig(tmp, format='png', dpi=100))


def curves_figure(metrics: List[Dict[str, Any]], steps: List[Dict[str, Any]] = (), title: str = '') -> Any:
    """Loss, accuracy and learning rate over the epochs: the training loss and the learning rate per update where
    ``steps`` (steps.jsonl rows) has them (warm-up and schedule show), each epoch's means and test numbers as marks."""
    from matplotlib.figure import Figure  # lazy: matplotlib where a figure is drawn
    from matplotlib.ticker import MaxNLocator  # lazy: matplotlib where a figure is drawn
    ep = [m['epoch'] for m in metrics]
    fig = Figure(figsize=(15, 4.2), layout='constrained')
    axes = fig.subplots(1, 3)
    if steps:
        axes[0].plot([s['epoch'] for s in steps], [s['loss'] for s in steps], '-', lw=1, alpha=.6,
                     label='train (per update)')
    for ax, key, ylabel in ((axes[0], 'loss', 'loss'), (axes[1], 'acc', 'accuracy (%)')):
        ax.plot(ep, [m[f'train_{key}'] for m in metrics], 'o-', label='train (epoch)')
        ax.plot(ep, [m[f'test_{key}'] for m in metrics], 's-', label='test')
        if f'ema_test_{key}' in metrics[0]:
            ax.plot(ep, [m[f'ema_test_{key}'] for m in metrics], '^--', label='test (EMA)')
        ax.set(xlabel='epoch', ylabel=ylabel, title=key if key == 'loss' else 'accuracy')
        ax.legend()
    if steps:
        axes[2].plot([s['epoch'] for s in steps], [s['lr'] for s in steps], '-')
        axes[2].set(title='learning rate (per update)')
    else:
        axes[2].plot(ep, [m['lr'] for m in metrics], 'o-')
        axes[2].set(title='learning rate (end of epoch)')
    axes[2].set(xlabel='epoch', ylabel='learning rate')
    for ax in axes:
        ax.grid(alpha=.3)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    fig.suptitle(title or 'training curves')
    return fig
