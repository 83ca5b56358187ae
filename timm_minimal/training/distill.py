"""Knowledge distillation in the trainer, through timm's task API (``timm.task``).

``--teacher NAME`` names any model ``timm.create_model(NAME, pretrained=True)`` builds: a timm name, a zoo tag
(``vit_minimal_std_mlp_6x4.cifar10``), ``local-dir:PATH`` or ``hf-hub:ORG/NAME``. The teacher is wrapped in
timm's ``DistillationTeacher`` (eval mode, no gradients) and runs on the same augmented (and mixed) batch as the
student, inside timm's ``LogitDistillationTask``:

- ``--distill-type soft`` (default): timm's ``LogitDistillationTask`` as it is: task loss x ``--distill-task-weight``
  + KL(student || teacher) at ``--distill-temperature`` x T^2 x ``--distill-weight``;
- ``--distill-type hard``: DeiT's hard distillation, cross-entropy with the teacher's argmax in place of the KL
  term. timm has it only in ``TokenDistillationTask``, which needs a distillation token; ``HardLogitDistillation``
  below is timm's logit task with that one term changed;
- ``--distill-type token`` / ``hard-token``: timm's ``TokenDistillationTask`` as it is, soft or hard: the task loss
  on the student's head, the distillation loss on the head of its distillation token (DeiT's). A ``vit_minimal``
  student is built with ``distill_token=True`` for it (``train.build_model``) and predicts, in evaluation, the mean
  of its two heads; a student without such a token is refused in one line.

A teacher whose class count or input geometry differs from the student's is refused in one line before training.
"""
from dataclasses import dataclass
from typing import Any, Dict, Optional, Sequence

import timm
import torch
import torch.nn as nn
import torch.nn.functional as F
from timm.task import DistillationTeacher, LogitDistillationTask, TokenDistillationTask

from ..cli import UsageError, listed
from .cli import TOKEN_DISTILL_TYPES
from .cpu.policy import cpu_bf16_pays
from .engine import Run, evaluate
from .log import say
from .options import DistillationOptions
from ..models.model_size import param_limit

__all__ = ['TeacherInfo', 'HardLogitDistillation', 'build_teacher', 'build_distillation', 'check_teacher_labels']

@dataclass(frozen=True)
class TeacherInfo:
    """What a run records of its teacher (``run.json``, the card)."""
    name: str
    precision: str  # the teacher's forward: fp32, or bf16 autocast
    distill_type: str
    temperature: float
    distill_weight: float
    task_weight: float
    num_params: int
    test_acc: Optional[float] = None  # on the run's evaluation split, measured at the start of the run
    labels_by_order: bool = False  # --teacher-labels-by-order: its classes taken as the data's in order, not by name

    def to_dict(self) -> Dict[str, Any]:
        return dict(self.__dict__)


class HardLogitDistillation(nn.Module):
    """DeiT's hard distillation on the logits: ``task_weight`` x the task loss + ``distill_weight`` x
    cross-entropy with the teacher's top class. The rest (teacher wrapping, normalisation, weights) is timm's
    ``LogitDistillationTask``, which this wraps."""

    def __init__(self, task: nn.Module) -> None:
        super().__init__()
        self.task = task

    @property
    def trainable_module(self) -> nn.Module:
        return self.task.trainable_module

    @trainable_module.setter
    def trainable_module(self, module: nn.Module) -> None:
        self.task.trainable_module = module

    @property
    def teacher(self) -> nn.Module:
        return self.task.teacher

    def forward(self, input: torch.Tensor, target: torch.Tensor) -> Dict[str, torch.Tensor]:
        t = self.task
        student_logits = t.trainable_module(input)
        task_loss = t.criterion(student_logits, target)
        with torch.no_grad():
            teacher_logits = t.teacher(t.teacher.normalize_input(input, t.student_mean, t.student_std))
        kd_loss = F.cross_entropy(student_logits, teacher_logits.argmax(dim=-1))
        loss = t.task_loss_weight * task_loss + t.distill_loss_weight * kd_loss
        return dict(loss=loss, output=student_logits, task_loss=task_loss, kd_loss=kd_loss)


class Bf16Teacher(nn.Module):
    """A teacher that runs in bf16 autocast and returns float32 logits: the teacher only infers, and on a GPU or a
    CPU with native bf16 that halves its share of the step (its ``pretrained_cfg`` and ``num_classes`` are the
    model's, so timm's ``DistillationTeacher`` normalises for it as for the model)."""

    def __init__(self, model: nn.Module, device_type: str) -> None:
        super().__init__()
        self.model = model
        self.device_type = device_type
        self.pretrained_cfg = getattr(model, 'pretrained_cfg', None) or {}
        self.num_classes = getattr(model, 'num_classes', None)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        with torch.autocast(self.device_type, dtype=torch.bfloat16):
            return self.model(x).float()


def check_teacher_labels(name: str, label_names: Optional[Sequence[Any]], classes: Optional[Sequence[Any]]) -> None:
    """A teacher predicts the data's classes in their order: its label names, where it has them, must be the data's
    class names (``UsageError`` in one line naming both, else the targets it gives would be another class's)."""
    if not label_names or not classes or [str(c) for c in label_names] == [str(c) for c in classes]:
        return
    raise UsageError(f'--teacher {name} predicts {listed(label_names, 10)} in that order, the data\'s classes are '
                     f'{listed(classes, 10)}: its targets would be other classes\'; name the data\'s class folders after '
                     f'the teacher\'s labels, or pass --teacher-labels-by-order to take them as the same classes in order')


def _check_teacher_size(name: str) -> None:
    """Refuse a teacher of more than ``models.model_size.param_limit()`` parameters before it is built: its
    architecture is built first on the meta device, which allocates nothing (a config.json naming a plain timm
    architecture of 8e9 parameters was built whole). A teacher that cannot be built there is left to the real build."""
    try:
        with torch.device('meta'):
            params = sum(p.numel() for p in timm.create_model(name).parameters())
    except Exception:  # noqa: BLE001 (the real build below names what is wrong)
        return
    if params > param_limit():
        raise UsageError(f'--teacher {name} has {params:,} parameters, over the limit of {param_limit():,}; check its '
                         f'config (set TIMM_MINIMAL_MAX_PARAMS to raise the limit).')


def build_teacher(name: str, num_classes: int, input_size: Sequence[int], device: torch.device,
                  bf16: bool = False, classes: Optional[Sequence[Any]] = None) -> nn.Module:
    """The teacher model (pretrained, eval mode, frozen, on ``device``, in bf16 autocast with ``bf16``);
    ``UsageError`` in one line where it cannot be built or does not fit the student's classes (their number and,
    given ``classes``, their names in order) and input geometry."""
    _check_teacher_size(name)
    try:
        model = timm.create_model(name, pretrained=True)
    except Exception as e:  # noqa: BLE001 (an unknown name, no weights, an unreadable file or Hub repository)
        raise UsageError(f'--teacher {name}: cannot build it with pretrained weights ({str(e).strip()[:300]}); '
                         f'name a timm model with weights, a zoo tag such as vit_minimal_std_mlp_6x4.cifar10, '
                         f'local-dir:PATH or hf-hub:ORG/NAME.') from None
    teacher_classes = getattr(model, 'num_classes', None)
    if teacher_classes != num_classes:
        raise UsageError(f'--teacher {name} predicts {teacher_classes} classes, the student {num_classes}: a teacher '
                         f'must have the student\'s classes.')
    cfg = getattr(model, 'pretrained_cfg', None) or {}
    teacher_size = tuple(cfg.get('input_size') or ())
    if teacher_size and teacher_size != tuple(input_size):
        raise UsageError(f'--teacher {name} takes inputs of {"x".join(map(str, teacher_size))}, the student '
                         f'{"x".join(map(str, input_size))}: a teacher must see the student\'s batch as it is.')
    check_teacher_labels(name, cfg.get('label_names'), classes)
    for p in model.parameters():
        p.requires_grad_(False)
    model = model.to(device).eval()
    return Bf16Teacher(model, device.type).eval() if bf16 else model


def build_distillation(student: nn.Module, teacher: nn.Module, criterion: nn.Module, opts: DistillationOptions,
                       mean: Sequence[float], std: Sequence[float], device: torch.device) -> nn.Module:
    """timm's ``LogitDistillationTask`` (or ``HardLogitDistillation``, or ``TokenDistillationTask``) over
    ``student``, as the distillation options ask; called with (input, target) it returns ``loss`` and ``output``.
    ``mean`` and ``std``: how the student's batch is normalised."""
    distill_type, distill_weight, task_weight = opts.distill_type, opts.distill_weight, opts.distill_task_weight
    # the teacher's normalisation buffers go where the run trains (timm's wrapper makes them on the CPU otherwise)
    teacher = DistillationTeacher(teacher, device=device)
    weights = dict(criterion=criterion, distill_loss_weight=distill_weight, task_loss_weight=task_weight,
                   temperature=opts.distill_temperature, device=device, verbose=False)
    if distill_type in TOKEN_DISTILL_TYPES:
        try:
            task = TokenDistillationTask(student, teacher, distill_type='hard' if distill_type == 'hard-token'
                                         else 'soft', **weights)
        except ValueError as e:  # the student has no distillation token (timm's check, or the minimal model's)
            raise UsageError(f'--distill-type {distill_type} needs a student with a distillation token: {e} '
                             f'(a vit_minimal student: --model-kwargs distill_token=True).') from None
    else:
        task = LogitDistillationTask(student, teacher, **weights)
    if not task.distill_loss_weight:  # timm's rule: 1 - --distill-task-weight where only that is given
        how = (f' (timm takes 1 - --distill-task-weight {task_weight:g} where --distill-weight is not given)'
               if distill_weight is None else '')
        raise UsageError(f'the distillation loss weight is 0{how}: the teacher would not enter the loss; leave --teacher '
                         f'out to train without one, or give the distillation a weight above 0.')
    # the student's batch is normalised by the run's data config (which --mean/--std can change), not by the
    # student's pretrained cfg, which timm's task reads
    task.student_mean = torch.tensor(mean, device=device).view(1, -1, 1, 1)
    task.student_std = torch.tensor(std, device=device).view(1, -1, 1, 1)
    return HardLogitDistillation(task) if distill_type == 'hard' else task


def teacher_info(run: Run, distill: nn.Module, name: str, teacher: nn.Module) -> Dict[str, Any]:
    """What the run records of its teacher, with the teacher's accuracy on the run's evaluation split."""
    task = getattr(distill, 'task', distill)
    acc = evaluate(run, teacher)['acc']
    opts = run.options.distillation
    say(f'Teacher {name}: {acc:.2f}% on the evaluation split; {opts.distill_type} distillation, weights task '
        f'{task.task_loss_weight:g} / distillation {task.distill_loss_weight:g}, temperature {task.temperature:g}.')
    return TeacherInfo(name=name, precision='bf16' if isinstance(teacher, Bf16Teacher) else 'fp32',
                       distill_type=opts.distill_type, temperature=task.temperature,
                       distill_weight=task.distill_loss_weight, task_weight=task.task_loss_weight,
                       num_params=sum(p.numel() for p in teacher.parameters()), test_acc=acc,
                       labels_by_order=opts.teacher_labels_by_order).to_dict()


def teacher_bf16(name: str, accelerator: Any) -> bool:
    """Whether the teacher infers in bf16: where the run itself does, and on the CPU where the run's own rule says
    bf16 pays for that model (``cpu_bf16_pays``: a minimal transformer, a CPU with native bf16)."""
    if accelerator.mixed_precision == 'bf16':
        return True
    return accelerator.device.type == 'cpu' and cpu_bf16_pays(name.split(':')[-1].split('/')[-1])
