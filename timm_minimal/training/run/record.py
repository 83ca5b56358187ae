"""``run.json`` as two typed records, written and read here alone: ``RunRecord``, what a run is and how it ended,
and ``Launch``, one start of its process (the first, then one per resume). The pattern is transformers'
``TrainerState`` (``save_to_json`` / ``load_from_json``); every report (the cards, the reproduce reports, the
benchmarks) reads a run through it, so they agree.

Two rules settle what a report states about a run that was resumed:

- *how it trained* (device, precision, processes, compilation) is the launch that ran its last epoch,
  ``RunRecord.last_launch``: the weights it reports on came out of that launch;
- *how long it took* is the sum over its launches, each to its last finished epoch (``total_wall_time``): what
  a killed launch did after its last saved epoch was lost and is done again. A killed launch never wrote its own
  wall time; ``add_launch`` fills it in from ``metrics.jsonl`` when the run is resumed.
"""
import dataclasses
import json
import math
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

from .files import write_json_atomic

__all__ = ['Launch', 'RunRecord', 'RUN_FORMAT']

RUN_FORMAT = 'timm-minimal-run/1'


def _json_types(annotation: Any) -> Tuple[type, ...]:
    """The JSON value types a field's annotation admits (None for Optional), e.g. (int,) for ``int``."""
    if annotation is Any:
        return (object,)
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is Union:
        return tuple(t for a in args for t in _json_types(a))
    if annotation is type(None):
        return (type(None),)
    if origin in (dict, list):
        return (origin,)
    if annotation is float:
        return (int, float)
    return (annotation,)


def _check_types(cls: type, data: Dict[str, Any]) -> None:
    """TypeError naming the key unless every field ``cls`` knows has a value of its annotated type (a bool is no
    number; a float must be finite)."""
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        if f.name == 'extra' or f.name not in data or f.name == 'launches':
            continue
        value, allowed = data[f.name], _json_types(hints[f.name])
        ok = isinstance(value, allowed) and not (isinstance(value, bool) and bool not in allowed)
        if ok and isinstance(value, float) and not math.isfinite(value):
            ok = False
        if not ok:
            names = ' or '.join('null' if t is type(None) else t.__name__ for t in allowed)
            raise TypeError(f'"{f.name}" must be {names}, got {value!r}'[:200])


def _split(cls: type, data: Dict[str, Any]) -> Dict[str, Any]:
    """``data`` as keyword arguments of the dataclass ``cls`` (each of the type it declares); keys it does not know
    go to ``extra``."""
    _check_types(cls, data)
    names = {f.name for f in dataclasses.fields(cls)} - {'extra'}
    return dict({k: v for k, v in data.items() if k in names}, extra={k: v for k, v in data.items() if k not in names})


def _join(record: Any) -> Dict[str, Any]:
    data = {f.name: getattr(record, f.name) for f in dataclasses.fields(record) if f.name != 'extra'}
    return dict(data, **record.extra)


@dataclass
class Launch:
    """One start of the training process."""
    command: str = ''
    started: str = ''
    num_processes: int = 1
    device: str = 'cpu'
    device_name: Optional[str] = None
    cpu_flags: Optional[str] = None  # the CPU's SIMD flags, for a run on the CPU
    cpu_rates: Optional[Dict[str, float]] = None  # img/s of each candidate the CPU decision measured, if it did
    mixed_precision: Optional[str] = None
    compiled: bool = False
    compile_mode: Optional[str] = None
    data_path: Optional[Dict[str, Any]] = None
    torch_threads: Optional[int] = None
    num_workers: Optional[int] = None
    resumed_from: Optional[str] = None
    first_epoch: Optional[int] = None  # the first epoch this launch trains
    wall_time: Optional[float] = None  # seconds; None while it runs, or where it was killed and never resumed
    extra: Dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, data: Dict[str, Any]) -> 'Launch':
        return cls(**_split(cls, data))

    def to_dict(self) -> Dict[str, Any]:
        return _join(self)


@dataclass
class RunRecord:
    """What ``run.json`` holds: the run (model, data, recipe, options, versions), its launches and its end."""
    command: str = ''
    model: str = ''
    format: str = RUN_FORMAT
    status: str = 'running'
    architecture: Optional[str] = None
    model_kwargs: Dict[str, Any] = field(default_factory=dict)
    num_params: Optional[int] = None
    num_classes: Optional[int] = None
    dataset: Dict[str, Any] = field(default_factory=dict)
    data_config: Dict[str, Any] = field(default_factory=dict)
    recipe: Optional[str] = None
    recipe_values: Optional[Dict[str, Any]] = None
    teacher: Optional[Dict[str, Any]] = None  # a distilled run's teacher (training/distill.py TeacherInfo)
    args: Dict[str, Any] = field(default_factory=dict)
    distributed: Dict[str, Any] = field(default_factory=dict)
    updates_per_epoch: Optional[int] = None
    train_samples_per_epoch: Optional[int] = None
    units: Dict[str, str] = field(default_factory=dict)
    versions: Dict[str, str] = field(default_factory=dict)
    launches: List[Launch] = field(default_factory=list)
    trackers: Dict[str, str] = field(default_factory=dict)  # the trackers' project and each one's run id (a resume goes on in it)
    finished: Optional[str] = None
    wall_time: Optional[float] = None
    epochs_completed: Optional[int] = None
    final: Optional[Dict[str, Any]] = None
    best: Optional[Dict[str, Any]] = None
    message: Optional[str] = None
    extra: Dict[str, Any] = field(default_factory=dict)  # keys this version does not know, kept as they were

    # -- the file ------------------------------------------------------------------------------------
    @classmethod
    def from_dict(cls, data: Dict[str, Any]) -> 'RunRecord':
        launches = data.get('launches') or []
        if not isinstance(launches, list) or not all(isinstance(la, dict) for la in launches):
            raise ValueError('"launches" must be a list of objects')
        kwargs = _split(cls, data)
        kwargs['launches'] = [Launch.from_dict(la) for la in launches]
        return cls(**kwargs)

    def to_dict(self) -> Dict[str, Any]:
        data = _join(self)
        data['launches'] = [la.to_dict() for la in self.launches]
        return {k: v for k, v in data.items() if v is not None or k in ('final', 'best')}

    @classmethod
    def load_from_json(cls, path: Union[str, Path]) -> 'RunRecord':
        """The record in ``path``; ``ValueError`` naming the file where it is not one."""
        try:
            data = json.loads(Path(path).read_text())
        except (ValueError, RecursionError) as e:  # RecursionError: nested deeper than any record is
            raise ValueError(f'{path} is not valid JSON ({type(e).__name__}: {str(e)[:120]})') from None
        if not isinstance(data, dict):
            raise ValueError(f'{path} is not a JSON object')
        if data.get('format', RUN_FORMAT) != RUN_FORMAT:
            raise ValueError(f'{path} is a record of another format ({str(data["format"])[:80]!r}), not a run record '
                             f'({RUN_FORMAT})')
        try:
            return cls.from_dict(data)
        except (TypeError, ValueError) as e:
            raise ValueError(f'{path} is not a run record: {e}') from e

    def save_to_json(self, path: Union[str, Path]) -> None:
        """Write the record atomically (a reader sees the old file or the new one, never half of one)."""
        write_json_atomic(path, self.to_dict())

    # -- what the reports read -----------------------------------------------------------------------
    @property
    def last_launch(self) -> Launch:
        """The launch that ran the last epoch: the device, precision and processes the reported weights came from."""
        return self.launches[-1] if self.launches else Launch(command=self.command, started='')

    def total_wall_time(self, metrics: Sequence[Dict[str, Any]] = ()) -> Optional[float]:
        """Seconds of training over all launches, start-up, data and compilation included: each launch's
        ``elapsed`` at its last finished epoch in ``metrics`` (a launch's clock starts when its interpreter imports
        the package), so a launch that was killed counts to the epoch it saved. The launches' ``first_epoch`` tell whose epoch is
        whose; a record written before launches kept it is told apart by the clock starting again. Without
        metrics, the launches' own wall times, else the record's; None where nothing tells."""
        if metrics and 'elapsed' in metrics[0] and self.launches and \
                all(la.first_epoch is not None for la in self.launches):
            ends = [la.first_epoch for la in self.launches[1:]] + [None]
            return float(sum(_elapsed_of(la, metrics, end) or 0.0 for la, end in zip(self.launches, ends)))
        segmented = _segmented_elapsed(metrics)
        if segmented is not None:
            return segmented
        times = [la.wall_time for la in self.launches if la.wall_time is not None]
        return float(sum(times)) if times else self.wall_time

    # -- what the trainer writes ---------------------------------------------------------------------
    def add_launch(self, launch: Launch, metrics: Sequence[Dict[str, Any]]) -> None:
        """Start a new launch; a killed one before it gets the wall time to its last finished epoch."""
        if self.launches and self.launches[-1].wall_time is None:
            self.launches[-1].wall_time = _elapsed_of(self.launches[-1], metrics)
        self.launches.append(launch)
        self.status = 'running'

    def close(self, status: str, finished: str, wall_time: float, metrics: Sequence[Dict[str, Any]],
              best: Optional[Dict[str, Any]], message: Optional[str] = None) -> None:
        """End the current launch: its wall time, the run's status, total wall time and final and best metrics."""
        if self.launches:
            self.launches[-1].wall_time = wall_time
        self.status, self.finished, self.wall_time = status, finished, self.total_wall_time(metrics)
        self.epochs_completed = len(metrics)
        self.final = dict(metrics[-1]) if metrics else None
        self.best = best
        if message:
            self.message = message


def _elapsed_of(launch: Launch, metrics: Sequence[Dict[str, Any]], end: Optional[int] = None) -> Optional[float]:
    """The ``elapsed`` of the last epoch that ``launch`` finished, its epochs being ``first_epoch`` up to ``end``
    (the next launch's first; each launch's clock starts when its interpreter imports the package); None where it
    finished none, or where the record does not say which epochs were its own."""
    if launch.first_epoch is None:
        return None
    own = [m for m in metrics if launch.first_epoch <= m.get('epoch', 0) and (end is None or m['epoch'] < end)]
    return float(own[-1]['elapsed']) if own and 'elapsed' in own[-1] else None


def _segmented_elapsed(metrics: Sequence[Dict[str, Any]]) -> Optional[float]:
    """Seconds over all launches from ``metrics`` alone: each launch's ``elapsed`` at its last epoch (a launch's
    clock starts again when its interpreter imports the package)."""
    if not metrics or 'elapsed' not in metrics[0]:
        return None
    total, previous = 0.0, 0.0
    for row in metrics:
        if row['elapsed'] < previous:  # a new launch
            total += previous
        previous = row['elapsed']
    return total + previous
