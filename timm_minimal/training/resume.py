"""Resuming a run: its checkpoint is read, checked and loaded into the rebuilt run.

A resumed run may change its schedule (epochs, learning rates, warm-up) and system options; the options that
shape its optimizer state and data order stay fixed. A checkpoint of another structure, of another
architecture or with non-finite weights is refused: a run never resumes from it.
"""
import json
from pathlib import Path
from typing import Any, Dict

import torch

from .run import checkpoint as ckpt
from .cli import UsageError
from ..cli import listed
from .engine import Run, TrainState, set_rng_state
from .log import say
from .options import fixed_options

__all__ = ['restore', 'FIXED_ON_RESUME', 'FIXED_TEACHER', 'SCHEDULE_OPTIONS']

# which options may not change is their fields' metadata (``options.Option.fixed``)
FIXED_ON_RESUME = fixed_options('state')
SCHEDULE_OPTIONS = ('epochs', 'lr', 'sched', 'warmup_epochs', 'warmup_lr', 'min_lr')
# The teacher and how it enters the loss: run.json and the run's card state one for every epoch of the run
FIXED_TEACHER = fixed_options('teacher')


def restore(run: Run, state: TrainState, last_dir: Path) -> None:
    """Load a checkpoint's weights, optimizer, scheduler, scaler, EMA, RNG states and position."""
    values, acc = run.options.values(), run.accelerator
    saved = run.folder.read_args()  # the options of the launch before this one
    last_weights = last_dir / ckpt.MODEL_FILE
    for keys, why in ((FIXED_ON_RESUME, f"the checkpoint's optimizer state and data order belong to it. Start a new run, "
                                        f"e.g. with --pretrained-path {last_weights} to begin from these weights."),
                      (FIXED_TEACHER, f"the run's record states one teacher for all its epochs. Start a new run, e.g. "
                                      f"with --pretrained-path {last_weights} to distil these weights further.")):
        changed = next((k for k in keys if k in saved and saved[k] != values[k]), None)
        if changed:
            raise UsageError(f'--{changed.replace("_", "-")} cannot change when resuming (the run used {saved[changed]}, '
                             f'the command line asks for {values[changed]}): {why}')
    _check_the_same_run(run, last_dir, saved)
    try:
        training_state = torch.load(last_dir / ckpt.STATE_FILE, map_location='cpu', weights_only=True)
        weights = ckpt.load_weights(last_dir / ckpt.MODEL_FILE)
    except Exception as e:  # noqa: BLE001 (a truncated or foreign file)
        raise UsageError(f'Cannot resume from {last_dir}: its checkpoint files cannot be read ({type(e).__name__}: '
                         f'{str(e).strip()[:200]}).') from e
    _check_resumable(last_dir, training_state, weights)
    if training_state.get('batch_size') not in (None, values['batch_size']):
        raise UsageError(f"The run was trained with --batch-size {training_state['batch_size']}; resume it with the same.")
    try:
        run.unwrapped.load_state_dict(weights, strict=True)
        run.optimizer.load_state_dict(training_state['optimizer'])
    except (RuntimeError, ValueError, KeyError) as e:
        raise UsageError(f'Cannot resume from {last_dir}: its weights do not fit {run.model_name} (the model its '
                         f'args.yaml names): {" ".join(str(e).split())[:300]}') from e
    _apply_changed_options(run, saved)
    changed = [k for k in SCHEDULE_OPTIONS if k in saved and saved[k] != values[k]]
    if training_state.get('epochs') not in (None, values['epochs']) and 'epochs' not in changed:
        changed.append('epochs')
    if run.scheduler is not None and training_state.get('scheduler') is not None:
        if not changed:
            run.scheduler.load_state_dict(training_state['scheduler'])
        else:
            say('Resuming with ' + ', '.join(f'--{k.replace("_", "-")} {values[k]}' for k in changed) +
                ': the learning-rate schedule follows the new values from the current update on.')
    if acc.scaler is not None and training_state.get('scaler') is not None:
        acc.scaler.load_state_dict(training_state['scaler'])
    if run.ema is not None:
        ema_file = last_dir / ckpt.EMA_FILE
        run.ema.module.load_state_dict(ckpt.load_weights(ema_file) if ema_file.is_file() else run.unwrapped.state_dict())
    set_rng_state(training_state['rng'])
    state.load_state_dict(training_state)
    say(f'Resumed {run.folder} from {last_dir} at epoch {state.epoch + 1}, batch {state.batch}/'
        f'{run.batches_per_epoch} (optimizer update {state.update}).')


RESUME_KEYS = ('optimizer', 'rng', 'epoch', 'batch', 'update')
# what defines the data beside the options that must not change: run.json records them as the run began (the model is
# checked against the checkpoint's own config)
FIXED_RUN = (*fixed_options('run'), *FIXED_ON_RESUME, *FIXED_TEACHER)


def _check_the_same_run(run: Run, last_dir: Path, saved: Dict[str, Any]) -> None:
    """Refuse a resume whose options, as args.yaml (``saved``) states them now, define another model or data than the
    run's own record (run.json, as the run began) and its checkpoint (the checkpoint's config.json); a missing or
    unreadable run.json is named, never rebuilt from the launches that follow."""
    folder = run.folder
    restart = f'start a new run, e.g. with --pretrained-path {last_dir / ckpt.MODEL_FILE} to begin from these weights'
    try:
        record = folder.read_record()
    except (OSError, ValueError) as e:
        missing = not folder.run_file.is_file()
        raise UsageError(f'Cannot resume {folder}: its {folder.run_file.name}, the record of its earlier launches, is '
                         f'{"missing" if missing else f"unreadable ({e})"}; put it back, or {restart}.') from None
    changed = next((k for k in FIXED_RUN if k in record.args and k in saved and record.args[k] != saved[k]), None)
    if changed:
        raise UsageError(f'{folder.args_file} asks for {changed}={saved[changed]!r}, but the run began with '
                         f'{record.args[changed]!r} ({folder.run_file.name}): {folder.args_file.name} was changed since; '
                         f'put its value back, or {restart}.')
    try:
        trained = json.loads((last_dir / ckpt.CONFIG_FILE).read_text())
    except (OSError, ValueError) as e:
        raise UsageError(f'Cannot resume from {last_dir}: its {ckpt.CONFIG_FILE} cannot be read ({e}).') from None
    asked = json.loads(json.dumps(run.model_config, default=str))  # as the checkpoint's config wrote it
    wrong = [k for k in ('architecture', 'num_classes', 'model_args') if trained.get(k) != asked.get(k)]
    if wrong:
        raise UsageError(f'{folder.args_file} asks for a model its checkpoint {last_dir} was not trained as '
                         f'({", ".join(f"{k} {asked.get(k)!r}, not {trained.get(k)!r}" for k in wrong)}): put '
                         f'{folder.args_file.name} back, or {restart}.')


def _check_resumable(last_dir: Path, training_state: Any, weights: Dict[str, torch.Tensor]) -> None:
    """Refuse a training state of another structure and weights that are not finite (a run never resumes from them)."""
    missing = [k for k in RESUME_KEYS if not isinstance(training_state, dict) or k not in training_state]
    if missing:
        raise UsageError(f'Cannot resume from {last_dir}: {ckpt.STATE_FILE} is not a timm-minimal training state '
                         f'(missing {", ".join(missing)}).')
    bad = [k for k, v in weights.items() if v.is_floating_point() and not bool(torch.isfinite(v).all())]
    if bad:
        raise UsageError(f'Cannot resume from {last_dir}: its weights are not finite ({listed(bad, 3)}); start a new run.')


def _apply_changed_options(run: Run, saved: Dict[str, Any]) -> None:
    """Options a resumed run may change that live in the optimizer's param groups (the loaded state holds the old)."""
    opt = run.options.optimisation
    for group in run.optimizer.param_groups:
        if 'weight_decay' in saved and saved['weight_decay'] != opt.weight_decay and group.get('weight_decay'):
            group['weight_decay'] = opt.weight_decay  # groups without decay (norms, biases) keep 0
        if run.scheduler is None:
            group['lr'] = opt.lr
