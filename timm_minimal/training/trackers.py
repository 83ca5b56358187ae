"""Experiment trackers through accelerate: ``--log-with tensorboard`` (or wandb, mlflow, ...: accelerate's names,
several allowed).

The main process starts them once the run folder is known, stores the resolved options and the run's name, and logs
each epoch's metrics with the epoch as the step. Trackers that write files write them under ``<run>/trackers``
(TensorBoard's events in ``trackers/timm-minimal``; W&B's offline run in ``trackers/wandb``). The packages are
optional: a tracker whose package is missing is refused before the run starts, naming what to install.
"""
import argparse
import json
import os
from pathlib import Path
from typing import Any, Dict, Mapping, Sequence

from ..cli import MissingExtra, require_extra

__all__ = ['TRACKING_DIR', 'PROJECT', 'tracker_name', 'check_trackers', 'start_trackers', 'log_epoch']

TRACKING_DIR = 'trackers'
PROJECT = 'timm-minimal'  # the W&B project, the MLflow experiment, TensorBoard's folder under trackers/
EXTRAS = ('tensorboard', 'wandb', 'mlflow')  # the package's extras of the same names install them


def _tracker_names() -> Sequence[str]:
    from accelerate.utils import LoggerType
    return [str(t) for t in LoggerType]


def tracker_name(text: str) -> str:
    """``--log-with``: one of accelerate's tracker names."""
    name = text.strip().lower()
    if name not in _tracker_names():
        raise argparse.ArgumentTypeError(f'unknown tracker {text!r}; accelerate has {", ".join(_tracker_names())}')
    return name


def check_trackers(names: Sequence[str]) -> None:
    """Refuse a tracker whose package is not installed (accelerate would drop it without a word)."""
    from accelerate.tracking import get_available_trackers
    available = {str(t) for t in get_available_trackers()}
    if 'all' in names and not available:
        require_extra(('tensorboard',), 'tensorboard', '--log-with all')
    for name in names:
        if name != 'all' and name not in available:
            if name in EXTRAS:
                require_extra((name,), name, f'--log-with {name}')
            raise MissingExtra(f'--log-with {name} needs {name}, which is not installed: pip install {name}')


def _hparam(value: Any) -> Any:
    """An option's value as trackers store hyperparameters: a number, a string or a bool."""
    return value if isinstance(value, (bool, int, float, str)) else json.dumps(value, default=str)


def start_trackers(accelerator: Any, names: Sequence[str], folder: Path, options: Mapping[str, Any]) -> None:
    """Start ``names`` for the run in ``folder`` (the main process alone), with ``options`` as its configuration."""
    from accelerate.tracking import filter_trackers
    logging_dir = Path(folder) / TRACKING_DIR
    if accelerator.is_main_process:
        logging_dir.mkdir(exist_ok=True)
    accelerator.project_configuration.logging_dir = str(logging_dir)
    accelerator.log_with = filter_trackers(list(names), logging_dir)
    config = {k: _hparam(v) for k, v in options.items()}
    config['run_name'] = Path(folder).name
    init_kwargs = {'wandb': dict(name=Path(folder).name, dir=str(logging_dir),
                                 mode=os.environ.get('WANDB_MODE', 'offline')),
                   'mlflow': dict(run_name=Path(folder).name)}
    accelerator.init_trackers(PROJECT, config=config, init_kwargs=init_kwargs)


def log_epoch(accelerator: Any, row: Mapping[str, Any], epoch: int) -> None:
    """An epoch's metrics (the numbers of its metrics.jsonl row), with the epoch as the step."""
    values: Dict[str, float] = {k: v for k, v in row.items()
                                if isinstance(v, (int, float)) and not isinstance(v, bool) and k != 'epoch'}
    accelerator.log(values, step=epoch)
