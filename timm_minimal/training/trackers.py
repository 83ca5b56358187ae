"""Experiment trackers through accelerate: ``--log-with tensorboard`` (or wandb, mlflow, ...: accelerate's names,
several allowed).

The main process starts them once the run folder is known, with the resolved options and the run's name. What they get,
always with the optimizer update as the step:

- every ``--log-interval`` updates (and at each epoch's end), ``train/loss`` (the mean over the updates since the last
  point), ``train/lr`` and ``train/grad_norm``; the same rows go to ``<run>/steps.jsonl``, which ``curves.png`` draws;
- each epoch's numbers in groups (``EPOCH_TAGS``): ``train/...``, ``test/...``, ``time/...``;
- at the end, the best and final test accuracy as the run's summary (TensorBoard's HParams metrics, W&B's summary, MLflow
  metrics) and the run's figures as images.

One training run is one tracker run: each tracker's run id goes into ``run.json`` (``trackers``) and a resume goes on
in it (TensorBoard: the same folder), logging no step twice (``StepLog``). Files go under ``<run>/trackers``:
TensorBoard's events in ``trackers/<project>``, W&B's offline run in ``trackers/wandb``, MLflow's store in
``trackers/mlflow.db`` and its artifacts in ``trackers/mlflow-artifacts`` unless ``MLFLOW_TRACKING_URI`` names
another store. The project (W&B project, MLflow experiment,
TensorBoard folder) is ``--tracker-project``, else ``$WANDB_PROJECT``, else ``timm-minimal``. The packages are optional:
a tracker whose package is missing is refused before the run starts, naming what to install.
"""
import argparse
import json
import os
from pathlib import Path
from typing import Any, Dict, Mapping, Optional, Sequence

from ..cli import MissingExtra, require_extra

__all__ = ['TRACKING_DIR', 'PROJECT', 'EPOCH_TAGS', 'SUMMARY_TAGS', 'tracker_name', 'check_trackers', 'project_name',
           'start_trackers', 'log_epoch', 'log_summary', 'log_figures', 'StepLog']

TRACKING_DIR = 'trackers'
PROJECT = 'timm-minimal'  # the default project: W&B project, MLflow experiment, TensorBoard's folder under trackers/
EXTRAS = ('tensorboard', 'wandb', 'mlflow')  # the package's extras of the same names install them
# a metrics.jsonl row's numbers as the trackers group them (the learning rate is a step value: train/lr)
EPOCH_TAGS = {
    'epoch': 'train/epoch', 'train_loss': 'train/epoch_loss', 'train_acc': 'train/acc', 'throughput': 'train/throughput',
    'test_loss': 'test/loss', 'test_acc': 'test/acc', 'test_acc5': 'test/acc5', 'ema_test_loss': 'test/ema_loss',
    'ema_test_acc': 'test/ema_acc', 'epoch_time': 'time/epoch', 'train_time': 'time/train', 'eval_time': 'time/eval',
    'elapsed': 'time/elapsed'}
STEP_TAGS = {'loss': 'train/loss', 'lr': 'train/lr', 'grad_norm': 'train/grad_norm'}
SUMMARY_TAGS = ('test/best_acc', 'test/final_acc')  # the run's result: TensorBoard's HParams metrics


def _tracker_names() -> Sequence[str]:
    from accelerate.utils import LoggerType  # lazy: --help answers without it
    return [str(t) for t in LoggerType]


def tracker_name(text: str) -> str:
    """``--log-with``: one of accelerate's tracker names."""
    name = text.strip().lower()
    if name not in _tracker_names():
        raise argparse.ArgumentTypeError(f'unknown tracker {text!r}; accelerate has {", ".join(_tracker_names())}')
    return name


def project_name(option: Optional[str]) -> str:
    """The trackers' project: the option, else ``$WANDB_PROJECT``, else ``PROJECT``."""
    return option or os.environ.get('WANDB_PROJECT') or PROJECT


def check_trackers(names: Sequence[str]) -> None:
    """Refuse a tracker whose package is not installed (accelerate would drop it without a word)."""
    from accelerate.tracking import get_available_trackers  # lazy: --help answers without it
    available = {str(t) for t in get_available_trackers()}
    if 'all' in names and not available:
        require_extra(('tensorboard',), 'tensorboard', '--log-with all')
    for name in names:
        if name != 'all' and name not in available:
            if name in EXTRAS:
                require_extra((name,), name, f'--log-with {name}')
            raise MissingExtra(f'--log-with {name} needs {name}, which is not installed: pip install {name}')


def _hparam(value: Any) -> Any:
    """An option's value as TensorBoard's HParams store it: a number, a string or a bool."""
    return value if isinstance(value, (bool, int, float, str)) else json.dumps(value, default=str)


def _store_hparams(writer: Any, config: Mapping[str, Any], metrics: Sequence[str]) -> None:
    """The options into TensorBoard's HParams view, in the run itself (accelerate's ``add_hparams`` makes a sub-run
    without a metric), with the scalars ``metrics`` as its metrics; an option that is None is left blank."""
    from torch.utils.tensorboard.summary import hparams  # lazy: --help answers without it
    values = {k: _hparam(v) for k, v in config.items() if v is not None}
    for summary in hparams(values, {tag: 0.0 for tag in metrics}):
        writer._get_file_writer().add_summary(summary)


def _use_mlflow_store(logging_dir: Path) -> None:
    """MLflow's store under the run folder (mlflow's default is the working folder)."""
    import mlflow  # lazy: the mlflow extra, only with --log-with mlflow
    mlflow.set_tracking_uri(f'sqlite:///{(logging_dir / "mlflow.db").resolve()}')


def start_trackers(accelerator: Any, names: Sequence[str], folder: Path, options: Mapping[str, Any],
                   project: str, run_ids: Mapping[str, str], metrics: Sequence[str] = SUMMARY_TAGS) -> Dict[str, str]:
    """Start ``names`` for the run in ``folder`` (main process; files under ``folder/trackers``), with ``options`` as
    its configuration and the scalars ``metrics`` as its result (TensorBoard's HParams metrics), resuming the tracker
    runs of ``run_ids`` (tracker name: run id); returns the run ids to keep."""
    from accelerate.tracking import filter_trackers  # lazy: --help answers without it
    logging_dir = Path(folder) / TRACKING_DIR
    if not accelerator.is_main_process:
        return {}
    logging_dir.mkdir(exist_ok=True)
    accelerator.project_configuration.logging_dir = str(logging_dir)
    accelerator.log_with = filter_trackers(list(names), logging_dir)
    wandb = dict(name=Path(folder).name, dir=str(logging_dir), mode=os.environ.get('WANDB_MODE', 'offline'))
    if run_ids.get('wandb'):
        wandb.update(id=run_ids['wandb'], resume='allow')
    mlflow = dict(run_name=Path(folder).name, run_id=run_ids.get('mlflow'))
    if any(str(t) == 'mlflow' for t in accelerator.log_with) and not os.environ.get('MLFLOW_TRACKING_URI'):
        _use_mlflow_store(logging_dir)
        mlflow['logging_dir'] = str((logging_dir / 'mlflow-artifacts').resolve())  # else ./mlruns
    accelerator.init_trackers(project, init_kwargs={'wandb': wandb, 'mlflow': mlflow})
    config = dict(options, run_name=Path(folder).name)
    ids = {}
    for tracker in accelerator.trackers:
        if tracker.name == 'tensorboard':
            _store_hparams(tracker.writer, config, metrics)
        elif not (tracker.name == 'mlflow' and run_ids.get('mlflow')):  # MLflow's params are fixed once logged
            tracker.store_init_configuration(config)
        if tracker.name == 'wandb':
            ids['wandb'] = tracker.run.id
        elif tracker.name == 'mlflow':
            ids['mlflow'] = tracker.active_run.info.run_id
    return ids


def log_epoch(accelerator: Any, row: Mapping[str, Any]) -> None:
    """An epoch's metrics (its metrics.jsonl row) in their groups, at the epoch's last update."""
    accelerator.log({tag: row[key] for key, tag in EPOCH_TAGS.items() if key in row}, step=row['update'])


def log_summary(accelerator: Any, best: Optional[float], final: Optional[float], step: int) -> None:
    """The run's result: its best and final test accuracy, as metrics at ``step`` and in the W&B summary."""
    values = {tag: v for tag, v in zip(SUMMARY_TAGS, (best, final)) if v is not None}
    if not values:
        return
    accelerator.log(values, step=step)
    for tracker in accelerator.trackers:
        if tracker.name == 'wandb':
            tracker.run.summary.update(values)


def log_figures(accelerator: Any, figures: Mapping[str, Any], step: int) -> None:
    """matplotlib figures as images (name: figure): TensorBoard's ``add_figure``, ``wandb.Image``, MLflow's
    ``log_figure``; other trackers get none."""
    for tracker in accelerator.trackers:
        for name, fig in figures.items():
            if tracker.name == 'tensorboard':
                tracker.writer.add_figure(name, fig, global_step=step, close=False)
            elif tracker.name == 'wandb':
                import wandb  # lazy: the wandb extra, only with --log-with wandb
                tracker.run.log({name: wandb.Image(_rgb(fig))}, step=step)
            elif tracker.name == 'mlflow':
                import mlflow  # lazy: the mlflow extra, only with --log-with mlflow
                mlflow.log_figure(fig, f'{name}.png')
        if tracker.name == 'tensorboard':
            tracker.writer.flush()


def _rgb(fig: Any) -> Any:
    """A figure's pixels as an (H, W, 3) uint8 array."""
    import numpy as np  # lazy: --help answers without it
    from matplotlib.backends.backend_agg import FigureCanvasAgg  # lazy: matplotlib where a figure is drawn
    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    return np.asarray(canvas.buffer_rgba())[..., :3].copy()


class StepLog:
    """The points of the training curve: every ``interval`` updates and at each epoch's end, the mean training loss
    since the last point, the learning rate and the gradient norm, into ``steps.jsonl`` and the trackers (main process).
    A resumed run writes no update it wrote before (the folder's last row says how far it got)."""

    def __init__(self, folder: Any, accelerator: Any, interval: int, trackers: bool) -> None:
        self.folder, self.accelerator, self.interval, self.trackers = folder, accelerator, interval, trackers
        self.main = accelerator.is_main_process
        rows = folder.read_steps() if self.main else []
        self.written_through = max((r['update'] for r in rows), default=0)

    def due(self, update: int, epoch_end: bool = False) -> bool:
        """Whether ``update`` is a point of the curve that is not written yet."""
        return self.main and update > self.written_through and (
            epoch_end or (self.interval > 0 and update % self.interval == 0))

    def write(self, row: Dict[str, Any]) -> None:
        """One point: ``update``, ``epoch`` (fractional), ``loss``, ``lr`` and ``grad_norm`` (None where not known)."""
        self.folder.append_step(row)
        self.written_through = row['update']
        if self.trackers:
            values = {tag: row[key] for key, tag in STEP_TAGS.items() if row.get(key) is not None}
            self.accelerator.log(values, step=row['update'])
