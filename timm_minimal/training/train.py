"""Train a minimal transformer (or any timm model) with accelerate: MNIST, CIFAR-10, ImageNet, image folders.

    timm-minimal-train --model vit_minimal_sym_6x4 --dataset mnist --data-dir data --output runs/mnist_sym
    accelerate launch --num_processes 8 -m timm_minimal.training.train --model vit_minimal_sym_6x4 --dataset imagenet ...
    timm-minimal-train --resume runs/mnist_sym          # continue an interrupted run where it stopped

The same command runs on one CPU, one GPU, several GPUs or several nodes (launched by
``accelerate launch`` or ``torchrun``). ``--batch-size`` is the global batch: it is split between
the processes, so the data order, the augmentation, the updates and the schedule are the same whatever the
number of devices. The sums inside a step are taken in another order, though, so the numbers differ in their
last digits and drift apart over the epochs: a run is bit for bit reproducible on the same number of processes
(a resume keeps the count it was started with), and close, not equal, on another.

Options come from three places, later ones winning: built-in defaults, the dataset's recipe
(``timm_minimal/recipes/<dataset>.yaml`` or ``--recipe``), the command line. A resumed run takes
its options from its own ``args.yaml`` and the command line.

Two data paths (``--data-path``): a dataset that fits (MNIST, CIFAR-10, small image folders) lives
on the training device as uint8 and is augmented there in whole batches
(``timm_minimal.training.data.device_data``); the others go through a ``DataLoader`` with timm's per-image
transforms. On a CUDA GPU the model is compiled (``torch.compile``) and runs in bf16 autocast by
default, AdamW is torch's fused kernel (on the CPU too), and the step never waits for the host: losses, accuracies and
the non-finite check stay on the device until the loop synchronises anyway. On the CPU the models with
an MLP run in bf16 autocast where the CPU has native bf16 (fp32 otherwise) and are compiled in runs long enough
to repay it; the others run eager in fp32 (``cpu.policy`` decides, with the threads and processes of a CPU run;
``benchmarks/cpu_modes.md`` measures each mode).

The run folder (``--output``) holds ``run.json``, ``args.yaml``, ``metrics.jsonl`` (one line per
epoch), ``curves.png`` and ``checkpoints/{last,best}`` (see ``timm_minimal.training.run.folder``).

Randomness is a function of the seed: the model is initialised from ``--seed``, data order and
augmentation of a sample depend on (seed, epoch, index), and the RNGs used by the training step
(dropout, mixup) are reseeded at every step from (seed, epoch, step, rank); the device path's random-erasing
noise is drawn as a batch is built, from the state the step before left (``data.batch_augment``). A run resumed
from a checkpoint (its RNG states restored) therefore ends where the uninterrupted run would.

Exit status: 0 when training finished, 2 for a bad command line or dataset, 3 when the loss, the
gradients or the weights became NaN or infinite (the last good checkpoint is kept).
"""
import argparse
import contextlib
import logging
import os
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Any, Dict, Optional, Sequence, Tuple

import timm
import torch
import torch.nn as nn
from accelerate import Accelerator
from accelerate.state import AcceleratorState, GradientState
from accelerate.utils import broadcast_object_list
from timm.data import Mixup
from timm.loss import LabelSmoothingCrossEntropy, SoftTargetCrossEntropy
from timm.models import split_model_name_tag
from timm.optim import create_optimizer_v2
from timm.scheduler import create_scheduler_v2
from timm.utils import ModelEmaV3

from ..cli import EXIT_DIVERGED, EXIT_FAILURE, EXIT_USAGE, Failure, command, listed
from ..machine import is_disk_full, keep_freed_memory, torch_threads
from ..models.layers import set_head_padding
from ..models.paper import is_minimal
from ..models.pretrained import describe_pretrained_cfg
from .run import checkpoint as ckpt
from .data.loading import ImageData, dataset_len, load_run_data
from .engine import (
    CheckpointNotWritten, Diverged, FiniteGuard, LoopConfig, Run, TrainHooks, TrainState, check_finite,
    divergence_advice, epoch_row, evaluate, save_checkpoint, train_one_epoch,
)
from .log import say as _say
from .distill import build_distillation, build_teacher, teacher_bf16, teacher_info
from .run.files import FolderBusy, describe_write_error
from .run.folder import RunFolder
from .run.clock import launch_elapsed
from .recording import RunInputs, closing_lines, finish_run, launched_alone, rank_report, write_run_record
from .figures import run_figures
from .trackers import StepLog, log_epoch, log_figures, log_summary, project_name, start_trackers
from .cli import (  # noqa: F401  (also reachable here)
    TOKEN_DISTILL_TYPES, Provenance, UsageError, build_parser, check_numbers, load_recipe, parse_args,
)
from .options import FUSED_ADAM_DEVICES, AugmentationOptions, ModelOptions, OptimisationOptions, RunOptions
from .data.paths import build_data_path, count_batches, data_config
from .cpu.policy import SPLIT_STATUS_ENV, run_split
from .plan import RunPlan, resolve_model_name, resolve_plan
from .resume import restore
from .sizes import train_sizes
from .cpu.split import NEVER_FREED, lost_peer

_logger = logging.getLogger('timm_minimal.training.train')

__all__ = ['build_parser', 'parse_args', 'train', 'main', 'Diverged', 'UsageError', 'TrainHooks',
           'load_recipe']

EXIT_BAD_INPUT, EXIT_DIVERGED, EXIT_WRITE_FAILED = EXIT_USAGE, EXIT_DIVERGED, EXIT_FAILURE
MAX_WARMUP_FRACTION = 0.25  # the warm-up is capped at this part of the run
PLOT_INTERVAL = 30.0  # seconds between redraws of curves.png during a run (a plot costs more than a fast epoch)


class WriteFailed(Failure):
    """The run could not write its folder (a full disk); the message names the cause and the checkpoint kept."""



# -- set-up ----------------------------------------------------------------------------------------

def make_accelerator(plan: RunPlan):
    """accelerate's Accelerator on the plan's device, in its precision (several processes without a GPU, from
    torchrun, accelerate launch or the CPU split, train as CPU data parallelism: gloo)."""
    if launched_alone():
        _logger.warning('accelerate launch set up several processes (MASTER_ADDR is set) but started this one alone: '
                        'on the CPU, add --multi_cpu to accelerate launch (on GPUs, --multi_gpu); this run trains in '
                        'one process.')
    if 'WORLD_SIZE' not in os.environ:
        # one process: a run of its own. accelerate keeps one state per process and refuses a second Accelerator of
        # another precision (train.main called again in one Python process, after a bf16 run); its own tests reset
        # it this way
        AcceleratorState._reset_state(reset_partial_state=True)
        GradientState._reset_state()
    try:
        return Accelerator(mixed_precision=plan.precision,
                           gradient_accumulation_steps=plan.options.optimisation.grad_accum_steps,
                           cpu=plan.device == 'cpu', step_scheduler_with_optimizer=False)
    except ValueError as e:  # a launcher's environment that cannot start (WORLD_SIZE without MASTER_ADDR, ...)
        launch = ', '.join(f'{k}={os.environ[k]}' for k in ('WORLD_SIZE', 'RANK', 'LOCAL_RANK', 'MASTER_ADDR',
                                                             'MASTER_PORT') if k in os.environ)
        raise UsageError(f'accelerate cannot start this process ({launch or "no launcher variables"}): '
                         f'{" ".join(str(e).split())[:300]}; start several processes with accelerate launch or '
                         f'torchrun, or unset these variables for one.') from None


def prepare_folder(plan: RunPlan, accelerator: Any) -> Tuple[RunFolder, Optional[Path]]:
    """The run folder (named by the main process when --output is not given) and the checkpoint to resume."""
    opts = plan.options.run
    output = opts.output
    if output is None:
        stamp = datetime.now().strftime('%Y%m%d-%H%M%S')
        ds_short = Path(opts.dataset).name if plan.dataset_kind == 'folder' else opts.dataset.replace('/', '_')
        name = [str(Path('runs') / f'{ds_short}-{plan.given.model.replace(".", "_")}-{stamp}')]
        if accelerator.num_processes > 1:  # one folder for all processes: the main process's time stamp
            broadcast_object_list(name)
        output = name[0]
    folder = RunFolder(output)
    resuming = opts.resume is not None
    if folder.path.exists() and not folder.path.is_dir():
        raise UsageError(f'--output {folder} is a file; the run folder must be a new or empty folder.')
    if not resuming and not folder.is_empty():
        raise UsageError(f'Run folder {folder} already exists and is not empty; pass --resume to continue that run, '
                         f'or choose another --output.')
    accelerator.wait_for_everyone()
    if accelerator.is_main_process:
        try:
            folder.lock()  # released when this process ends, however it ends
        except FolderBusy as e:
            raise UsageError(f'{e}: one run folder takes one training run at a time; wait for it to end, or '
                             f'choose another --output.') from e
        folder.prepare()
    last_dir = folder.find_checkpoint() if resuming else None
    if resuming and last_dir is None:
        _refuse_to_start_over(folder)
    accelerator.wait_for_everyone()
    if resuming and last_dir is None:
        _say(f'No checkpoint in {folder} yet: starting the run from the beginning.')
    return folder, last_dir


def _refuse_to_start_over(folder: RunFolder) -> None:
    """A folder with trained epochs but no checkpoint to resume (one packed without its training state, as a
    published run is) is not started over: that would overwrite its metrics and record (``UsageError``). A run killed
    before its first checkpoint has neither, and starts from the beginning."""
    text = folder.metrics_file.read_text() if folder.metrics_file.is_file() else ''
    epochs = sum(1 for line in text.splitlines() if line.strip())
    if epochs or (folder.checkpoint('last') / ckpt.MODEL_FILE).is_file():
        raise UsageError(f'{folder} holds a run ({epochs} epoch(s) in {folder.metrics_file.name}) with no checkpoint to '
                         f'resume: checkpoints/last has no {ckpt.STATE_FILE}. Starting it over would overwrite it, so '
                         f'nothing was changed; train into another --output.')


def build_model(name: str, opts: ModelOptions, num_classes: int, seed: int, distill_token: bool = False,
                pad_heads: bool = True) -> Tuple[nn.Module, Dict[str, Any]]:
    """The timm model ``name`` (its full name with tag) of the model options, seeded, and the model arguments given.
    ``distill_token``: a distillation token for timm's TokenDistillationTask (a vit_minimal model's keyword)."""
    torch.manual_seed(seed)
    model_kwargs = dict(opts.model_kwargs or {})
    if opts.drop_path:
        model_kwargs.setdefault('drop_path_rate', opts.drop_path)
    if opts.drop:
        model_kwargs.setdefault('drop_rate', opts.drop)
    if opts.weight_init != 'default':  # a minimal transformer's starting point (cli: other models keep 'default')
        model_kwargs.setdefault('weight_init', opts.weight_init)
    if distill_token and is_minimal(split_model_name_tag(name)[0]):
        model_kwargs.setdefault('distill_token', True)  # DeiT's token, which timm's TokenDistillationTask trains
    create_kwargs = dict(num_classes=num_classes, **model_kwargs)
    if opts.pretrained_path:
        if not Path(opts.pretrained_path).is_file():
            raise UsageError(f'--pretrained-path {opts.pretrained_path} does not exist.')
        create_kwargs['pretrained_cfg_overlay'] = dict(file=str(opts.pretrained_path))
    pretrained = bool(opts.pretrained or opts.pretrained_path)
    try:
        model = timm.create_model(name, pretrained=pretrained, **create_kwargs)
    except Exception as e:  # noqa: BLE001 (wrong model arguments, unreadable or mismatched weights)
        raise UsageError(f'Cannot build {name} (model arguments {model_kwargs}'
                         f'{", pretrained" if pretrained else ""}): {e}') from e
    set_head_padding(model, pad_heads)
    return model, model_kwargs


def _pretrained_head(model: nn.Module, source: Any, classes: Sequence[str]) -> str:
    """What a run starting from pretrained weights took of them, in a line: the head too where it predicts the data's
    classes; a new head where its label names are other classes' (timm keeps a head of the same count, whose
    classes would then be misread) or their number differs (timm makes the new head itself)."""
    cfg = getattr(model, 'pretrained_cfg', None) or {}
    names, count = cfg.get('label_names'), cfg.get('num_classes')
    if names and len(names) == len(classes) and [str(n) for n in names] != [str(c) for c in classes]:
        model.reset_classifier(len(classes))
        return (f'Loaded the weights of {source}; its head predicts {listed(names, 5)}, not the data\'s {listed(classes, 5)}: '
                f'the run trains a new {len(classes)}-class head.')
    if count is not None and count != len(classes):
        return f'Loaded the weights of {source}; its {count}-class head is replaced by a new {len(classes)}-class one.'
    return f'Loaded the weights of {source}, its head included ({len(classes)} classes: {listed(classes, 5)}).'


def model_config(model: nn.Module, model_name: str, model_kwargs: Dict[str, Any], data: ImageData,
                 data_cfg: Dict[str, Any]) -> Dict[str, Any]:
    """A checkpoint's config.json: timm's Hub layout (architecture, num_classes, model_args, pretrained_cfg)."""
    cfg = describe_pretrained_cfg(getattr(model, 'pretrained_cfg', None) or {}, input_size=data_cfg['input_size'],
                                  mean=data_cfg['mean'], std=data_cfg['std'])
    cfg.update(num_classes=data.num_classes, label_names=data.classes)  # timm reads these from here too
    return dict(architecture=split_model_name_tag(model_name)[0], num_classes=data.num_classes,
                num_features=getattr(model, 'num_features', None), model_args=model_kwargs, pretrained_cfg=cfg)


# -- optimisation ----------------------------------------------------------------------------------

def build_optimization(opt: OptimisationOptions, epochs: int, model: nn.Module, updates_per_epoch: int,
                       device: torch.device):
    """timm's optimizer (for Adam/AdamW torch's fused kernel, on CUDA and on the CPU) and scheduler of the
    optimisation options, stepped per update over ``epochs``."""
    extra: Dict[str, Any] = {}
    if opt.opt_eps is not None:
        extra['eps'] = opt.opt_eps
    if opt.opt_betas:
        extra['betas'] = tuple(opt.opt_betas)
    if device.type in FUSED_ADAM_DEVICES and opt.opt.lower() in ('adam', 'adamw'):
        extra['fused'] = True
    try:
        optimizer = create_optimizer_v2(model, opt=opt.opt, lr=opt.lr, weight_decay=opt.weight_decay,
                                        momentum=opt.momentum, **extra)
    except (AssertionError, ValueError, TypeError) as e:
        raise UsageError(f"Cannot build the optimizer --opt {opt.opt}: {e}") from e
    scheduler = None
    if opt.sched and opt.sched != 'none':
        warmup = min(opt.warmup_epochs, MAX_WARMUP_FRACTION * epochs)
        if warmup < opt.warmup_epochs:
            _say(f'--warmup-epochs {opt.warmup_epochs:g} is more than {MAX_WARMUP_FRACTION:.0%} of the run\'s '
                 f'{epochs} epochs: warming up for {warmup:g} epochs.')
        scheduler, _ = create_scheduler_v2(
            optimizer, sched=opt.sched, num_epochs=epochs, warmup_epochs=warmup,
            warmup_lr=opt.warmup_lr, min_lr=opt.min_lr, step_on_epochs=False, updates_per_epoch=updates_per_epoch)
    return optimizer, scheduler


def build_loss(aug: AugmentationOptions, num_classes: int, per_process_batch: int):
    """The training loss and timm's batch mixup/cutmix (None when off), of the augmentation options."""
    if aug.mixup > 0 or aug.cutmix > 0 or aug.cutmix_minmax is not None:
        if per_process_batch % 2:
            raise UsageError(f'mixup/cutmix needs an even batch per process; got {per_process_batch}.')
        mixup = Mixup(mixup_alpha=aug.mixup, cutmix_alpha=aug.cutmix, cutmix_minmax=aug.cutmix_minmax,
                      prob=aug.mixup_prob, switch_prob=aug.mixup_switch_prob, mode=aug.mixup_mode,
                      label_smoothing=aug.smoothing, num_classes=num_classes)
        return SoftTargetCrossEntropy(), mixup
    if aug.smoothing > 0:
        return LabelSmoothingCrossEntropy(smoothing=aug.smoothing), None
    return nn.CrossEntropyLoss(), None


# -- the run ---------------------------------------------------------------------------------------

def setup(plan: RunPlan, argv: Sequence[str], hooks: TrainHooks) -> Tuple[Run, TrainState, RunInputs, Optional[Path]]:
    """Everything a run needs: accelerator, run folder, data, model, optimizer, data path, state."""
    opts = plan.options.run
    accelerator = make_accelerator(plan)
    world = accelerator.num_processes
    if opts.batch_size % world:
        raise UsageError(f'--batch-size {opts.batch_size} must be a multiple of the number of processes ({world}).')
    created = opts.output is None or not Path(opts.output).exists()
    folder, last_dir = prepare_folder(plan, accelerator)
    try:
        return _assemble(plan, accelerator, folder, last_dir, argv, hooks)
    except BaseException:
        folder.unlock()
        if created and accelerator.is_main_process:
            folder.discard_start()  # a start that failed before training leaves no folder behind
        raise


def _assemble(plan: RunPlan, accelerator: Any, folder: RunFolder, last_dir: Optional[Path], argv: Sequence[str],
              hooks: TrainHooks) -> Tuple[Run, TrainState, RunInputs, Optional[Path]]:
    """Data, model, optimizer, data path and state of a run whose folder is prepared (and locked); each stage takes
    the option groups it reads."""
    o, world = plan.options, accelerator.num_processes
    with accelerator.main_process_first():
        data = load_run_data(o.run, world)
    token = bool(o.distillation.teacher) and o.distillation.distill_type in TOKEN_DISTILL_TYPES
    model, model_kwargs = build_model(plan.model, o.model, data.num_classes, o.run.seed, token, plan.pad_heads)
    if o.model.pretrained or o.model.pretrained_path:
        _say(_pretrained_head(model, o.model.pretrained_path or plan.model, data.classes))
    data_cfg = data_config(model, o.model)
    n_train, updates_per_epoch, batches_per_epoch = count_batches(o.run, o.optimisation.grad_accum_steps, data)
    data_path = build_data_path(o.run, o.data_path, o.augmentation, data, data_cfg, accelerator, batches_per_epoch)
    optimizer, scheduler = build_optimization(o.optimisation, o.run.epochs, model, updates_per_epoch,
                                              accelerator.device)
    loss_fn, mixup_fn = build_loss(o.augmentation, data.num_classes, o.run.batch_size // world)
    teacher_name, teacher = _teacher(plan, data.num_classes, data_cfg['input_size'], accelerator, data.classes)
    sizes = train_sizes(o.augmentation.train_sizes, model, data_cfg['input_size'][1:], o.run.epochs, teacher_name)
    prepared, optimizer = accelerator.prepare(model, optimizer)
    unwrapped = accelerator.unwrap_model(prepared)
    train_model = torch.compile(prepared, mode=plan.compile_mode, dynamic=False) if plan.compile else prepared
    distill = None if teacher is None else build_distillation(
        train_model, teacher, loss_fn, o.distillation, data_cfg['mean'], data_cfg['std'], accelerator.device)
    opt = o.optimisation
    ema = ModelEmaV3(unwrapped, decay=opt.model_ema_decay, use_warmup=opt.model_ema_warmup) if opt.model_ema else None
    run = Run(plan=plan, loop=LoopConfig.from_options(o), accelerator=accelerator, model=train_model,
              unwrapped=unwrapped, optimizer=optimizer, scheduler=scheduler, ema=ema, data=data_path, loss_fn=loss_fn,
              mixup_fn=mixup_fn, folder=folder, model_name=plan.model,
              model_config=model_config(unwrapped, plan.model, model_kwargs, data, data_cfg),
              batches_per_epoch=batches_per_epoch, hooks=hooks, compiled=plan.compile, distill=distill,
              sizes=sizes)
    state = TrainState()
    if last_dir is not None:
        restore(run, state, last_dir)
    if scheduler is not None:
        scheduler.step_update(state.update)
    run.guard = FiniteGuard(accelerator.device, state.epoch * batches_per_epoch + state.batch)
    run.steps = StepLog(folder, accelerator, run.loop.log_interval, bool(o.run.log_with))
    inputs = RunInputs(argv=list(argv), model_kwargs=model_kwargs, data_cfg=data_cfg,
                       num_params=sum(p.numel() for p in unwrapped.parameters()),
                       dataset=_data_info(o.run, data, n_train),
                       teacher=None if distill is None else teacher_info(run, distill, teacher_name, teacher))
    _say(
        f'{plan.model}: {inputs.num_params:,} parameters; {data.name}: {n_train:,} train / '
        f'{inputs.dataset["eval_samples_used"]:,} {data.eval_split} images, {data.num_classes} classes; {world} '
        f'process(es) on {accelerator.device}, batch {o.run.batch_size} ({o.run.batch_size // world} per process) x '
        f'{opt.grad_accum_steps}, {updates_per_epoch} updates/epoch, {data_path.name} data path, mixed precision '
        f'{accelerator.mixed_precision}, {"compiled" if plan.compile else "eager"}'
        f'{"" if sizes is None else sizes.describe()}.')
    return run, state, inputs, last_dir


def _teacher(plan: RunPlan, num_classes: int, input_size: Sequence[int], accelerator: Any,
             classes: Sequence[str]) -> Tuple[Optional[str], Optional[nn.Module]]:
    """The name and the model of ``--teacher`` (None, None without one), built, and refused where it does not fit
    the data (its classes by name, unless ``--teacher-labels-by-order``), before the student trains a step."""
    d = plan.options.distillation
    if not d.teacher:
        return None, None
    name = d.teacher if ':' in d.teacher else resolve_model_name(d.teacher, plan.dataset_kind)
    return name, build_teacher(name, num_classes, input_size, accelerator.device, bf16=teacher_bf16(name, accelerator),
                               classes=None if d.teacher_labels_by_order else classes)


def _data_info(run: RunOptions, data: Any, n_train: int) -> Dict[str, Any]:
    """What run.json says of the data: the dataset's own description and the images the run uses of each split."""
    eval_used = (len(data.eval) if run.eval_subset is None
                 else min(run.eval_subset, dataset_len(data.eval) or run.eval_subset))
    return dict(data.describe(), train_samples_used=n_train, eval_samples_used=eval_used)


def train(args: argparse.Namespace, provenance: Optional[Provenance] = None,
          argv: Optional[Sequence[str]] = None, hooks: Optional[TrainHooks] = None,
          plan: Optional[RunPlan] = None) -> Dict[str, Any]:
    """Run (or resume) one training run in this process; returns the run summary written to run.json. ``args`` and
    ``provenance``: ``parse_args``'s; ``plan``: the run's plan where the caller resolved it (``resolve_plan``), else
    resolved here without a CPU split. The process's allocator keeps what a step frees for the next
    (``machine.keep_freed_memory``), for the rest of the process."""
    t_launch = time.perf_counter()
    keep_freed_memory()
    argv = list(sys.argv[1:] if argv is None else argv)
    plan = plan or resolve_plan(args, provenance, split=False)
    with torch_threads(plan.threads):
        run, state, inputs, last_dir = setup(plan, argv, hooks or TrainHooks())
        try:
            return _train(run, state, inputs, last_dir, t_launch)
        finally:
            run.folder.unlock()


def _train(run: Run, state: TrainState, inputs: RunInputs, last_dir: Optional[Path], t_launch: float) -> Dict[str, Any]:
    """The epochs of a set-up run, then its record; raises ``Diverged`` or ``WriteFailed`` when it stopped early."""
    acc, opts = run.accelerator, run.options.run
    if run.is_main:
        write_run_record(run, state, inputs, last_dir, run.plan.compile_mode if run.compiled else None)
    if opts.log_with:
        _start_trackers(run)
    status, message, local_samples, last_plot = 'finished', None, 0, time.perf_counter()
    try:
        for epoch in range(state.epoch, run.loop.epochs):
            local_samples += (run.batches_per_epoch - state.batch) * (run.loop.batch_size // run.world)
            last_plot = _epoch(run, state, epoch, inputs.dataset['name'], last_plot)
    except Diverged as e:
        status = 'diverged'
        kept = run.folder.find_checkpoint()
        message = (f'Training diverged: {e}. Stopped without saving; the last good checkpoint is '
                   f'{kept if kept else "none (the run diverged before its first checkpoint)"}. '
                   f'{divergence_advice(run.options.values(), run.plan.provenance, e.update, run.compiled)}')
    except CheckpointNotWritten:  # the main process failed to write and says why; this one stops with it
        status = 'failed'
    except Exception as e:  # noqa: BLE001 (safetensors and torch.save report a full disk in their own types)
        if not is_disk_full(e, run.folder.path):
            raise
        ckpt.clean_stale_temp(run.folder.checkpoints)
        kept = run.folder.find_checkpoint()
        status, message = 'failed', (f'{describe_write_error(e, run.folder.path)}; the last checkpoint is '
                                     f'{kept or "none"}, and --resume {run.folder} continues from it.')
    acc.wait_for_everyone()
    if opts.rank_report:
        rank_report(run, status, local_samples)
    summary = _finish(run, state, status, message, time.perf_counter() - t_launch) if run.is_main else {}
    if opts.log_with and status == 'finished':
        _close_trackers(run, state, summary, inputs.dataset['name'])
    if status == 'finished' and summary:
        _say('\n'.join(closing_lines(run, summary)))
    acc.wait_for_everyone()
    acc.end_training()
    if os.environ.get(SPLIT_STATUS_ENV):  # a split run's process: freeing its DDP model can hang (cpu.split.NEVER_FREED)
        NEVER_FREED.append(run)
    if status == 'diverged':
        raise Diverged(message)
    if status == 'failed' and run.is_main:  # one line, the main process's: the others have nothing to add
        raise WriteFailed(message)
    return summary


def _start_trackers(run: Run) -> None:
    """The trackers of ``--log-with``, going on in the tracker runs that run.json names (a resume); the main process
    records their project and run ids there."""
    opts = run.options.run
    record = run.folder.read_record() if run.is_main else None
    kept = dict(record.trackers) if record is not None else {}
    project = kept.get('project') or project_name(opts.tracker_project)
    ids = start_trackers(run.accelerator, opts.log_with, run.folder.path, dict(run.options.values(), model=run.model_name),
                         project, kept)
    if record is not None and dict(kept, project=project, **ids) != record.trackers:
        record.trackers = dict(kept, project=project, **ids)
        run.folder.write_record(record)


def _close_trackers(run: Run, state: TrainState, summary: Dict[str, Any], dataset_name: str) -> None:
    """The finished run's result and figures into its trackers, once run.json is closed (every process: the figures
    evaluate on all of them; the main process logs)."""
    figures = run_figures(run, state, dataset_name)
    if run.is_main:
        best, final = summary.get('best') or {}, summary.get('final') or {}
        log_summary(run.accelerator, best.get('test_acc'), final.get('test_acc'), state.update)
        log_figures(run.accelerator, figures, state.update)


def _epoch(run: Run, state: TrainState, epoch: int, dataset_name: str, last_plot: float) -> float:
    """One epoch: its training, the evaluations, the checkpoint, then its metrics line and log line (a logged epoch is
    a saved one); returns when the curves were last drawn."""
    part = train_one_epoch(run, state, epoch)
    check_finite(run, state)
    t_eval = time.perf_counter()
    ev = evaluate(run, run.unwrapped)
    ema_ev = evaluate(run, run.ema.module) if run.ema is not None else None
    row = epoch_row(run, state, epoch, part, ev, ema_ev, time.perf_counter() - t_eval, launch_elapsed())
    is_best = state.end_epoch(row)
    save_checkpoint(run, state, is_best=is_best)
    if run.is_main:
        run.folder.append_metrics(row)
        if time.perf_counter() - last_plot > PLOT_INTERVAL:  # and once more at the end
            run.folder.plot_curves(state.history, title=f'{run.model_name} on {dataset_name}')
            last_plot = time.perf_counter()
    _say(
        f"epoch {epoch + 1}/{run.loop.epochs}: train loss {row['train_loss']:.4f} acc {row['train_acc']:.2f}% | "
        f"test loss {row['test_loss']:.4f} acc {row['test_acc']:.2f}% | lr {row['lr']:.2e} | "
        f"{row['throughput']:.0f} img/s | {row['epoch_time']:.1f} s")
    if run.options.run.log_with:
        log_epoch(run.accelerator, row)
    run.hooks.after_epoch(row)
    return last_plot


def _finish(run: Run, state: TrainState, status: str, message: Optional[str], launch_time: float) -> Dict[str, Any]:
    """``finish_run``; on a full disk, as much of it as fits (the run's status above all)."""
    try:
        return finish_run(run, state, status, message, launch_time)
    except Exception as e:  # noqa: BLE001
        if status == 'finished' or not is_disk_full(e, run.folder.path):
            raise
        return {}


def _exit(status: int) -> None:
    """Exit with ``status``; the main process of a split run also leaves it where ``run_split`` reads it, and a split
    run's process exits without the interpreter's cleanup once its output is flushed (its files are closed)."""
    fd = os.environ.get(SPLIT_STATUS_ENV, '')
    if fd.isdigit() and os.environ.get('RANK', '0') == '0':  # the write end of the split launcher's pipe
        with contextlib.suppress(OSError):  # a launcher that is gone reads nothing: its process ends with it
            os.write(int(fd), f'{status}\n'.encode())
    if fd:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(status)
    sys.exit(status)


@command('timm-minimal-train')
def main(argv: Optional[Sequence[str]] = None, hooks: Optional[TrainHooks] = None) -> int:
    try:
        args, provenance = parse_args(argv)
        plan = resolve_plan(args, provenance)
        if plan.starts_split:
            return run_split(plan, list(sys.argv[1:] if argv is None else argv))
        train(args, provenance, argv, hooks, plan=plan)
    except Failure:
        raise
    except RuntimeError as e:
        world = os.environ.get('WORLD_SIZE', '1')
        lost = lost_peer(e)
        if not (world.isdigit() and int(world) > 1 and lost):
            raise
        raise Failure(f'process {os.environ.get("RANK", "?")} of {world} lost the connection to another process of the '
                      f'run (gloo: {lost}); the launcher names the one that ended first.') from None
    return 0


if __name__ == '__main__':
    _exit(main())
