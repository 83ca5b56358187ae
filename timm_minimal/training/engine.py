"""The training loop's parts: the run's state, one epoch, the evaluation, checkpoints.

``timm_minimal.training.train`` builds a ``Run`` (model, optimizer, scheduler, data path, ...) and a
``TrainState`` (position, history, best) and calls ``train_one_epoch`` and ``evaluate`` epoch by
epoch. The step waits for the host nowhere: losses and accuracies add up on the device, and a
non-finite loss or gradient norm is recorded on the device by ``FiniteGuard`` and read at the
synchronisations the loop has anyway (log lines, checkpoints, epoch ends).
"""
import hashlib
import json
import logging
import math
import random
import time
from dataclasses import dataclass, field, fields
from datetime import datetime, timezone
from typing import Any, Callable, Dict, List, Optional

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from ..models.weights_check import weights_record
from ..cli import EXIT_DIVERGED, Failure, progress
from .run import checkpoint as ckpt
from .cli import Provenance
from .options import Options
from .plan import RunPlan
from .log import say
from .seeding import mix_seed, seed_rngs
from .sizes import TrainSizes
from .run.folder import RunFolder
from .trackers import StepLog

_logger = logging.getLogger('timm_minimal.training.train')

__all__ = ['TrainState', 'TrainHooks', 'FiniteGuard', 'Run', 'Diverged', 'CheckpointNotWritten', 'train_one_epoch', 'evaluate',
           'eval_sums', 'eval_metrics', 'save_checkpoint', 'weights_hash']


class Diverged(Failure):
    """The training loss (or the gradients, or the weights) became NaN or infinite (exit status 3); ``update``: the
    optimizer update it happened in (1: before the learning rate had moved a weight), where known."""

    def __init__(self, message: str, update: Optional[int] = None) -> None:
        super().__init__(message, status=EXIT_DIVERGED)
        self.update = update


# the options that scale the loss itself (a loss that is not finite in the first update is theirs, not the lr's)
_LOSS_OPTIONS = ('distill_weight', 'distill_task_weight', 'distill_temperature', 'smoothing')


def divergence_advice(values: Dict[str, Any], provenance: Provenance, update: Optional[int], compiled: bool) -> str:
    """What to change after a divergence, the option most likely to have caused it first: in the first update no
    weight has moved yet, so the loss options given are to blame, not the learning rate; later, a --lr above the
    recipe's, then the loss options given, then the usual remedies. ``values``: the run's options by name
    (``options.Options.values``)."""
    given = [f'--{k.replace("_", "-")} {values[k]:g}' for k in _LOSS_OPTIONS
             if k in provenance.explicit and values[k] is not None]
    if update == 1:
        return ('It happened in the first update, before the learning rate had moved a weight: the loss itself was '
                'not finite. ' + (f'Check the options that scale it: {", ".join(given)}.' if given else
                                  'Check the data (non-finite pixels) and --mixed-precision no.'))
    recipe_lr = provenance.recipe_values.get('lr')
    first = []
    if recipe_lr and 'lr' in provenance.explicit and values['lr'] > recipe_lr:
        first.append(f'--lr {values["lr"]:g} is above the recipe\'s {recipe_lr:g}: try the recipe\'s')
    if given:
        first.append(f'check the options that scale the loss: {", ".join(given)}')
    usual = ('try a lower --lr, --clip-grad 1.0, a longer --warmup-epochs, or --mixed-precision no'
             + (' (or --no-compile: a compiled step can compute otherwise)' if compiled else ''))
    text = '; '.join(first + [('otherwise ' if first else '') + usual])
    return text[0].upper() + text[1:] + '.'


def _zero_partial() -> Dict[str, float]:
    return dict(loss_sum=0.0, correct=0.0, count=0.0, train_time=0.0)


@dataclass
class TrainState:
    """Where a run is: the next (epoch, batch), optimizer updates so far, the epochs' metrics and the best."""
    epoch: int = 0
    batch: int = 0
    update: int = 0
    history: List[Dict[str, Any]] = field(default_factory=list)
    best: Dict[str, Any] = field(default_factory=lambda: dict(test_acc=-1.0, epoch=None))
    partial: Dict[str, float] = field(default_factory=_zero_partial)  # sums of the epoch so far (mid-epoch)

    def state_dict(self) -> Dict[str, Any]:
        return dict(epoch=self.epoch, batch=self.batch, update=self.update, history=list(self.history),
                    best=dict(self.best), partial=dict(self.partial), completed_epochs=len(self.history))

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        self.epoch, self.batch, self.update = int(state['epoch']), int(state['batch']), int(state['update'])
        self.history = list(state['history'])
        self.best = dict(state['best'])
        self.partial = dict(state['partial']) if self.batch else _zero_partial()

    def end_epoch(self, row: Dict[str, Any]) -> bool:
        """Record an epoch's metrics and move to the next epoch; True if it is the best so far."""
        self.history.append(row)
        self.epoch, self.batch, self.partial = row['epoch'], 0, _zero_partial()
        if row['test_acc'] > self.best['test_acc']:
            self.best = dict(test_acc=row['test_acc'], test_loss=row['test_loss'], epoch=row['epoch'])
            return True
        return False


class TrainHooks:
    """Callbacks into the loop (for tests and tools); the defaults do nothing."""

    def after_update(self, update: int) -> None:
        """Called after optimizer update ``update`` (and its checkpoint, if one was due)."""

    def after_epoch(self, row: Dict[str, Any]) -> None:
        """Called with an epoch's metrics row once that epoch is saved and logged."""

    def writing_checkpoint(self, count: int) -> None:
        """Called in the middle of writing this process's ``count``-th checkpoint (weights written, state not)."""


class FiniteGuard:
    """Records on the device the first batch whose loss or gradient norm was not finite.

    ``observe`` adds no host synchronisation; ``first_bad`` reads the record (one synchronisation),
    agreed over all processes.
    """

    def __init__(self, device: torch.device, batches_done: int = 0) -> None:
        self.count = torch.full((), batches_done, dtype=torch.int64, device=device)
        self.bad_at = torch.full((), -1, dtype=torch.int64, device=device)

    def observe(self, *values: Optional[torch.Tensor]) -> None:
        self.count += 1
        bad = torch.zeros((), dtype=torch.bool, device=self.count.device)
        for v in values:
            if v is not None:
                bad = bad | ~torch.isfinite(v.detach()).all()
        self.bad_at = torch.where((self.bad_at < 0) & bad, self.count, self.bad_at)

    def first_bad(self, accelerator: Any) -> Optional[int]:
        """The 1-based number of the first non-finite batch over all processes, or None."""
        at = torch.where(self.bad_at < 0, torch.iinfo(torch.int64).max, self.bad_at)
        if accelerator.num_processes > 1:
            at = accelerator.gather(at[None]).min()
        at = int(at)
        return None if at == torch.iinfo(torch.int64).max else at


@dataclass(frozen=True)
class LoopConfig:
    """The options the training loop reads (of the run's and the optimisation's groups)."""
    epochs: int
    batch_size: int
    grad_accum_steps: int
    seed: int
    clip_grad: Optional[float]
    clip_mode: str
    checkpoint_interval: int
    log_interval: int
    no_progress: bool

    @classmethod
    def from_options(cls, options: Options) -> 'LoopConfig':
        values = options.values()
        return cls(**{f.name: values[f.name] for f in fields(cls)})


@dataclass
class Run:
    """What the loop needs: built once by ``timm_minimal.training.train``."""
    plan: RunPlan  # what the run decided, and its options (``plan.options``: one typed group per stage)
    loop: LoopConfig
    accelerator: Any
    model: nn.Module  # prepared (DDP) and possibly compiled: the training forward
    unwrapped: nn.Module  # the plain model: evaluation, checkpoints, EMA
    optimizer: Any
    scheduler: Any
    ema: Any
    data: Any  # DeviceDataPath or LoaderDataPath
    loss_fn: Callable
    mixup_fn: Optional[Callable]
    folder: RunFolder
    model_name: str
    model_config: Dict[str, Any]  # config.json of a checkpoint
    batches_per_epoch: int
    hooks: TrainHooks = field(default_factory=TrainHooks)
    distill: Optional[nn.Module] = None  # timm's distillation task over ``model`` (training/distill.py), or None
    compiled: bool = False
    compile_checked: bool = False  # the first step ran: later errors are the model's, not the compiler's
    sizes: Optional[TrainSizes] = None  # progressive resizing (the model's own size throughout when None)
    guard: Optional[FiniteGuard] = None
    steps: Optional[StepLog] = None  # the training curve's points (set up with the run)
    saves: int = 0

    @property
    def options(self) -> Options:
        return self.plan.options

    @property
    def device(self) -> torch.device:
        return self.accelerator.device

    @property
    def world(self) -> int:
        return self.accelerator.num_processes

    @property
    def rank(self) -> int:
        return self.accelerator.process_index

    @property
    def is_main(self) -> bool:
        return self.accelerator.is_main_process

    def lr(self) -> float:
        return self.optimizer.param_groups[0]['lr']

    def fall_back_to_eager(self, error: BaseException) -> None:
        """torch.compile failed on the first step: warn once and train the uncompiled model."""
        say(f'WARNING: torch.compile failed ({type(error).__name__}: {str(error).strip()[:300]}); '
            f'training without compilation (pass --no-compile to skip the attempt).', warning=True)
        self.model = getattr(self.model, '_orig_mod', self.model)
        if self.distill is not None:
            self.distill.trainable_module = self.model
        self.compiled = False
        self.optimizer.zero_grad(set_to_none=True)


def weights_hash(state_dict: Dict[str, torch.Tensor]) -> str:
    h = hashlib.sha256()
    for k in sorted(state_dict):
        h.update(k.encode())
        h.update(state_dict[k].detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()


# -- one step, one epoch -----------------------------------------------------------------------------

def _forward_backward(run: Run, x: torch.Tensor, y: torch.Tensor):
    target = y
    if run.mixup_fn is not None:
        x, target = run.mixup_fn(x, y)
    if run.distill is not None:  # timm's distillation task: the student's loss with the teacher's
        result = run.distill(x, target)
        output, loss = result['output'], result['loss']
    else:
        output = run.model(x)
        loss = run.loss_fn(output.float(), target)
    run.accelerator.backward(loss)
    return output, loss


def _step(run: Run, x: torch.Tensor, y: torch.Tensor, seed: int, want_norm: bool = False):
    """One batch: forward, backward, clipping and (when the accumulation is complete) the optimizer step; returns the
    output, the loss and, where clipping by norm or ``want_norm`` asked for it, the update's gradient norm."""
    loop, acc = run.loop, run.accelerator
    with acc.accumulate(run.model):
        seed_rngs(seed)
        try:
            output, loss = _forward_backward(run, x, y)
        except Exception as e:  # noqa: BLE001 (compilation happens in the first step: a failure falls back to eager)
            if not run.compiled or run.compile_checked:
                raise
            run.fall_back_to_eager(e)
            seed_rngs(seed)
            output, loss = _forward_backward(run, x, y)
        grad_norm = None
        if acc.sync_gradients and loop.clip_grad is not None:
            if loop.clip_mode == 'value':
                acc.clip_grad_value_(run.model.parameters(), loop.clip_grad)
            else:
                grad_norm = acc.clip_grad_norm_(run.model.parameters(), loop.clip_grad)
        if acc.sync_gradients and want_norm and grad_norm is None:  # a point of the curve: the norm, nothing clipped
            grad_norm = acc.clip_grad_norm_(run.model.parameters(), math.inf)
        run.optimizer.step()
        run.optimizer.zero_grad(set_to_none=True)
    run.compile_checked = True
    run.guard.observe(loss, grad_norm)
    return output.detach(), loss.detach(), grad_norm


class _CurvePoints:
    """The points of an epoch's training curve (``run.steps``): the mean loss of the main process's batches since the
    last point, from the epoch's running sums."""

    def __init__(self, run: Run, sums: torch.Tensor, count: float) -> None:
        self.run, self.loss_sum, self.count = run, float(sums[0]), count

    def write(self, update: int, sums: torch.Tensor, count: float, grad_norm: Optional[torch.Tensor]) -> Dict[str, Any]:
        loss_sum = float(sums[0])
        point = dict(update=update, epoch=update / (self.run.batches_per_epoch // self.run.loop.grad_accum_steps),
                     loss=(loss_sum - self.loss_sum) / max(count - self.count, 1), lr=self.run.lr(),
                     grad_norm=None if grad_norm is None else float(grad_norm))
        self.run.steps.write(point)
        self.loss_sum, self.count = loss_sum, count
        return point


def global_partial(run: Run, sums: torch.Tensor, count: float) -> Dict[str, float]:
    """The epoch's summed loss and hits (on the device) and image count (on the host) over all processes,
    in one synchronisation."""
    total = torch.cat([sums, sums.new_tensor([count])])
    if run.world > 1:
        total = run.accelerator.reduce(total, reduction='sum')
    loss_sum, correct, count = total.tolist()
    return dict(loss_sum=loss_sum, correct=correct, count=count)


def check_finite(run: Run, state: TrainState) -> None:
    """Raise ``Diverged`` if a batch since the start had a non-finite loss or gradient norm."""
    bad = run.guard.first_bad(run.accelerator)
    if bad is None:
        return
    accum = run.loop.grad_accum_steps
    epoch, batch = divmod(bad - 1, run.batches_per_epoch)
    update = (bad - 1) // accum + 1
    raise Diverged(f'loss or gradient norm not finite at epoch {epoch + 1}, batch {batch + 1}/{run.batches_per_epoch} '
                   f'(update {update}, lr {_lr_of_update(run, update):.3g})', update)


def _lr_of_update(run: Run, update: int) -> float:
    """The learning rate update ``update`` (from 1) was taken with: timm's schedule after update - 1 (without its
    noise; the guard finds a bad batch only later, when the rate has moved on), else the optimizer's."""
    values = run.scheduler._get_values(update - 1, on_epoch=False) if run.scheduler is not None else None
    return float(values[0]) if values else run.lr()


def train_one_epoch(run: Run, state: TrainState, epoch: int) -> Dict[str, float]:
    """Train from (epoch, state.batch) to the epoch's end; returns the epoch's summed loss, hits, count, time."""
    loop, acc = run.loop, run.accelerator
    part = state.partial if state.batch else _zero_partial()
    sums = torch.tensor([part['loss_sum'], part['correct']] if run.is_main else [0.0, 0.0], dtype=torch.float64,
                        device=run.device)
    count = part['count'] if run.is_main else 0.0  # images, known on the host
    train_time, batch = part['train_time'], state.batch
    acc.step = 0
    run.model.train()
    bar = progress(total=run.batches_per_epoch, initial=batch, desc=f'epoch {epoch + 1}/{loop.epochs}',
                   disable=(not run.is_main) or loop.no_progress or None)
    show_log = run.is_main and loop.log_interval > 0 and bar.disable
    t0 = time.perf_counter()
    curve = _CurvePoints(run, sums, count)
    batches = run.data.train_batches(epoch, batch)
    for x, y in (batches if run.sizes is None else run.sizes.batches(epoch, batches)):
        output, loss, grad_norm = _step(run, x, y, mix_seed(loop.seed, 0xB47C, epoch, batch, run.rank),
                                        want_norm=run.steps.due(state.update + 1))
        n = y.shape[0]
        sums += torch.stack([loss.double() * n, (output.argmax(-1) == y).sum().double()])
        count += n
        batch += 1
        bar.update(1)
        if not acc.sync_gradients:
            continue
        state.update += 1
        if run.scheduler is not None:
            run.scheduler.step_update(state.update)
        if run.ema is not None:
            run.ema.update(run.unwrapped, step=state.update)
        if loop.checkpoint_interval and state.update % loop.checkpoint_interval == 0 and batch < run.batches_per_epoch:
            state.batch = batch
            state.partial = dict(global_partial(run, sums, count), train_time=train_time + time.perf_counter() - t0)
            save_checkpoint(run, state, is_best=False)
        if run.steps.due(state.update):
            point = curve.write(state.update, sums, count, grad_norm)
            if show_log:
                say(f'  epoch {epoch + 1} batch {batch}/{run.batches_per_epoch}: loss {point["loss"]:.4f}, '
                    f'lr {point["lr"]:.3g}')
            elif not bar.disable:
                bar.set_postfix(loss=f'{point["loss"]:.4f}', lr=f'{point["lr"]:.2e}')
        run.hooks.after_update(state.update)
    if run.steps.due(state.update, epoch_end=True) and count > curve.count:
        curve.write(state.update, sums, count, None)
    bar.close()
    result = global_partial(run, sums, count)  # waits for the device: the epoch's time includes its last steps
    return dict(result, train_time=train_time + time.perf_counter() - t0)


@torch.no_grad()
def evaluate(run: Run, net: nn.Module) -> Dict[str, float]:
    """Loss, top-1 and top-5 accuracy (%) over the whole evaluation split (all processes' shards)."""
    net.eval()
    sums = torch.zeros(4, dtype=torch.float64, device=run.device)
    for x, y in run.data.eval_batches():
        with run.accelerator.autocast():
            out = net(x)
        sums += eval_sums(out, y)
    if run.world > 1:
        sums = run.accelerator.reduce(sums, reduction='sum')
    return eval_metrics(sums, run.model_config['num_classes'])


@torch.no_grad()
def confusion(run: Run, net: nn.Module) -> torch.Tensor:
    """The evaluation split's confusion matrix (rows: true class, columns: predicted), over all processes' shards."""
    net.eval()
    k = run.model_config['num_classes']
    counts = torch.zeros(k * k, dtype=torch.int64, device=run.device)
    for x, y in run.data.eval_batches():
        with run.accelerator.autocast():
            out = net(x)
        counts += confusion_counts(out, y, k)
    if run.world > 1:
        counts = run.accelerator.reduce(counts, reduction='sum')
    return counts.view(k, k)


def confusion_counts(logits: torch.Tensor, y: torch.Tensor, num_classes: int) -> torch.Tensor:
    """A batch's confusion counts, flat (true class * num_classes + predicted class), int64 on the device."""
    return torch.bincount(y * num_classes + logits.argmax(-1), minlength=num_classes * num_classes)


def eval_sums(logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """A batch's summed cross-entropy, top-1 hits, top-5 hits and count (float64, on the device)."""
    out = logits.float()
    top = out.topk(min(5, out.shape[-1]), dim=-1).indices
    return torch.stack([F.cross_entropy(out, y, reduction='sum').double(), (top[:, 0] == y).sum().double(),
                        (top == y[:, None]).any(-1).sum().double(),
                        torch.full((), y.shape[0], dtype=torch.float64, device=out.device)])


def eval_metrics(sums: torch.Tensor, num_classes: int) -> Dict[str, float]:
    """Loss, top-1 and (with more than five classes) top-5 accuracy in % from summed ``eval_sums``."""
    loss_sum, hit1, hit5, count = sums.tolist()
    res = dict(loss=loss_sum / max(count, 1), acc=100. * hit1 / max(count, 1), count=int(count))
    if num_classes > 5:
        res['acc5'] = 100. * hit5 / max(count, 1)
    return res


# -- checkpoints -------------------------------------------------------------------------------------

def _finite_weights(model: nn.Module) -> bool:
    flags = [torch.isfinite(t).all() for t in model.state_dict().values() if t.is_floating_point()]
    return bool(torch.stack(flags).all()) if flags else True


class CheckpointNotWritten(RuntimeError):
    """Another process (the main one) could not write the checkpoint: every process stops with it."""


def save_checkpoint(run: Run, state: TrainState, is_best: bool) -> None:
    """Write checkpoints/last (and best) at the state's position; never non-finite weights.

    Raises ``Diverged`` (in every process) instead of saving when the guard saw a non-finite value or
    the weights are not finite. Only the main process writes; where that fails (a full disk), every process learns
    it in the same step and stops: the main one with the error, the others with ``CheckpointNotWritten`` (none of
    them goes on into the next epoch while another waits).
    """
    check_finite(run, state)
    if not _finite_weights(run.unwrapped):
        raise Diverged(f'the weights are not finite (update {state.update}, lr {run.lr():.3g})', state.update)
    failure: Optional[BaseException] = None
    if run.is_main:
        try:
            _write_checkpoint(run, state, is_best)
        except Exception as e:  # noqa: BLE001 (told to every process below, then raised)
            failure = e
    if run.world > 1:
        failed = torch.tensor([1.0 if failure is not None else 0.0], device=run.device)
        if float(run.accelerator.reduce(failed, reduction='sum')) and failure is None:
            raise CheckpointNotWritten('the main process could not write the checkpoint')
    if failure is not None:
        raise failure


def _write_checkpoint(run: Run, state: TrainState, is_best: bool) -> None:
    """The main process's part of ``save_checkpoint``: the files of checkpoints/last (and best)."""
    run.saves += 1
    weights = run.unwrapped.state_dict()
    ema_weights = run.ema.module.state_dict() if run.ema is not None else None
    acc = run.accelerator
    position = dict(epoch=state.epoch, batch=state.batch, update=state.update, epochs=run.loop.epochs,
                    batches_per_epoch=run.batches_per_epoch, completed_epochs=len(state.history))
    meta = dict(model=run.model_name, epoch=str(state.epoch), batch=str(state.batch), update=str(state.update),
                **weights_record(getattr(run.unwrapped, 'init_kwargs', None)))  # a vit_minimal model's keywords
    training_state = dict(
        optimizer=run.optimizer.state_dict(),
        scheduler=run.scheduler.state_dict() if run.scheduler is not None else None,
        scaler=acc.scaler.state_dict() if acc.scaler is not None else None,
        rng=rng_state(), batch_size=run.loop.batch_size, **state.state_dict(), epochs=run.loop.epochs,
        batches_per_epoch=run.batches_per_epoch)
    config_text = json.dumps(run.model_config, indent=2, default=str) + '\n'
    saved = datetime.now(timezone.utc).isoformat(timespec='seconds')

    def write(tmp, described: Dict[str, Any], resumable: bool) -> None:
        """The weights (and EMA weights), state.json and config.json; the training state where resumable."""
        ckpt.save_weights(weights, tmp / ckpt.MODEL_FILE, meta)
        if resumable:
            run.hooks.writing_checkpoint(run.saves)
        if ema_weights is not None:
            ckpt.save_weights(ema_weights, tmp / ckpt.EMA_FILE, meta)
        if resumable:
            torch.save(training_state, tmp / ckpt.STATE_FILE)
        (tmp / ckpt.STATE_JSON).write_text(json.dumps(dict(model=run.model_name, **position, **described),
                                                      indent=2) + '\n')
        (tmp / ckpt.CONFIG_FILE).write_text(config_text)

    ckpt.atomic_write_dir(run.folder.checkpoint('last'),
                          lambda tmp: write(tmp, dict(best=state.best, saved=saved), resumable=True))
    if is_best:
        ckpt.atomic_write_dir(run.folder.checkpoint('best'), lambda tmp: write(
            tmp, dict(metrics=state.history[-1] if state.history else None), resumable=False))


def rng_state() -> Dict[str, Any]:
    """The host and device RNG states, as ``torch.load(weights_only=True)`` can read them back."""
    py = random.getstate()
    np_state = np.random.get_state()
    state = dict(
        python=[py[0], list(py[1]), py[2]],
        numpy=[np_state[0], torch.from_numpy(np_state[1].astype(np.int64)), int(np_state[2]), int(np_state[3]),
               float(np_state[4])],
        torch=torch.get_rng_state(),
    )
    if torch.cuda.is_available():
        state['cuda'] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: Dict[str, Any]) -> None:
    py = state['python']
    random.setstate((py[0], tuple(py[1]), py[2]))
    n = state['numpy']
    np.random.set_state((n[0], n[1].numpy().astype(np.uint32), n[2], n[3], n[4]))
    torch.set_rng_state(state['torch'])
    if 'cuda' in state and torch.cuda.is_available() and len(state['cuda']) == torch.cuda.device_count():
        torch.cuda.set_rng_state_all(state['cuda'])


def epoch_row(run: Run, state: TrainState, epoch: int, part: Dict[str, float], ev: Dict[str, float],
              ema_ev: Optional[Dict[str, float]], eval_time: float, elapsed: float) -> Dict[str, Any]:
    """The metrics.jsonl line of an epoch."""
    row = dict(epoch=epoch + 1, update=state.update, train_loss=part['loss_sum'] / max(part['count'], 1),
               train_acc=100. * part['correct'] / max(part['count'], 1), test_loss=ev['loss'], test_acc=ev['acc'])
    if 'acc5' in ev:
        row['test_acc5'] = ev['acc5']
    if ema_ev is not None:
        row.update(ema_test_loss=ema_ev['loss'], ema_test_acc=ema_ev['acc'])
    train_time = part['train_time']
    row.update(lr=run.lr(), throughput=part['count'] / max(train_time, 1e-9), epoch_time=train_time + eval_time,
               train_time=train_time, eval_time=eval_time, elapsed=elapsed, train_samples=int(part['count']),
               test_samples=ev['count'])
    if not all(math.isfinite(v) for v in (row['train_loss'], row['test_loss'])):
        raise Diverged(f'the loss is not finite at the end of epoch {epoch + 1} (lr {run.lr():.3g})')
    return row
