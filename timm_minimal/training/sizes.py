"""Progressive resizing (``--train-sizes``): smaller training images in the early epochs, as fast.ai and FFCV train.

A vision transformer's step costs about its token count: at 24 x 24 pixels a 4 x 4-patch model sees 36 tokens
instead of 64. The schedule names the size each epoch trains at, ``SIZE@EPOCH`` (from that epoch on, epochs counted
from 1) or ``SIZE@P%`` (from the epoch P% of the way through the run: a recipe's schedule, which follows --epochs);
the epochs before its first entry, and every evaluation, take the model's own input size, which its last entry must
name: a run ends at the size it is evaluated at. An augmented batch
is resized as a whole (bilinear, antialiased) on its device, so both data paths take it; a vit_minimal model reads the
smaller grid through its ``dynamic_img_size`` mode (its position embedding resampled, timm's way) for those epochs
only, and its keywords stay its own.
"""
import contextlib
from typing import Iterable, Iterator, List, Optional, Sequence, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F

from ..cli import UsageError
from .options import train_size

__all__ = ['size_schedule', 'TrainSizes', 'train_sizes']

Batch = Tuple[torch.Tensor, torch.Tensor]


def _first_epoch(at: str, epochs: int) -> int:
    """The epoch (from 1) an entry's ``EPOCH`` or ``P%`` names in a run of ``epochs``."""
    return int(at) if not at.endswith('%') else min(int(float(at[:-1]) / 100 * epochs) + 1, epochs)


def _position(at: str, epochs: int) -> float:
    """Where an entry's ``EPOCH`` or ``P%`` starts, as a fraction of the run."""
    return float(at[:-1]) / 100 if at.endswith('%') else (int(at) - 1) / epochs


def _parsed(entries: Optional[Sequence[str]]) -> List[Tuple[str, str]]:
    """``(SIZE, EPOCH or P%)`` of each ``--train-sizes`` entry, as ``options.train_size`` checks and writes it."""
    return [(size, at) for size, at in (train_size(e).split('@') for e in entries or ())]


def size_schedule(entries: Optional[Sequence[str]], epochs: int) -> Tuple[Tuple[int, int], ...]:
    """``(first epoch, size)`` pairs of ``--train-sizes`` entries (each checked by ``options.train_size``) in a run of
    ``epochs``, by epoch. Where percentages put two entries on one epoch (a short run), the later in the run wins; an
    entry given twice, or an epoch past the run's end, is refused."""
    parsed = _parsed(entries)
    ats = [at for _, at in parsed]
    twice = sorted({at for at in ats if ats.count(at) > 1})
    if twice:
        raise UsageError(f'--train-sizes names {", ".join(f"@{at}" for at in twice)} twice; give one size for each.')
    late = [f'{size}@{at}' for size, at in parsed if _first_epoch(at, epochs) > epochs]
    if late:
        raise UsageError(f'--train-sizes {" ".join(late)}: the run has {epochs} epochs.')
    by_epoch = {}  # in order of where each entry starts: on a shared epoch the later one wins
    for size, at in sorted(parsed, key=lambda e: (_first_epoch(e[1], epochs), _position(e[1], epochs))):
        by_epoch[_first_epoch(at, epochs)] = int(size)
    return tuple(sorted(by_epoch.items()))


class TrainSizes:
    """The training size of each epoch, and what training at it takes of the model and the batches."""

    def __init__(self, entries: Optional[Sequence[str]], model: nn.Module, native: Tuple[int, int],
                 epochs: int) -> None:
        self.schedule, self.model, self.native = size_schedule(entries, epochs), model, tuple(native)
        if not self.schedule:
            return
        last = self.schedule[-1][1]
        if (last, last) != self.native:
            raise UsageError(f'--train-sizes must end at the size the model is evaluated at, '
                             f'{self.native[0]} x {self.native[1]}: its last entry trains at {last} x {last} (add '
                             f'{self.native[0]}@EPOCH for the last epochs).')
        patch_embed = getattr(model, 'patch_embed', None)
        if patch_embed is not None and not hasattr(model, 'set_dynamic_img_size'):
            raise UsageError(f'--train-sizes needs a model that trains at other input sizes: a vit_minimal model or '
                             f'a convolutional network, not {type(model).__name__}.')
        patch = tuple(getattr(patch_embed, 'patch_size', (1, 1)))
        odd = [entry for entry, (size, _) in zip(entries or (), _parsed(entries))
               if int(size) % patch[0] or int(size) % patch[1]]
        if odd:
            raise UsageError(f'--train-sizes {" ".join(odd)}: sizes must be multiples of the model\'s patch size '
                             f'{patch[0]} x {patch[1]}.')

    def size(self, epoch: int) -> Tuple[int, int]:
        """The training images' height and width in ``epoch`` (from 0)."""
        sizes = [size for first, size in self.schedule if first <= epoch + 1]
        return (sizes[-1], sizes[-1]) if sizes else self.native

    def describe(self) -> str:
        """The schedule for the run's start line: ', training at 24 x 24 in epochs 1-14, 32 x 32 from epoch 15'."""
        spans = ([(1, self.native)] if self.schedule[0][0] > 1 else []) + [(e, (s, s)) for e, s in self.schedule]
        parts = []
        for (first, (h, w)), (after, _) in zip(spans, spans[1:] + [(None, None)]):
            if after is None:
                parts.append(f'{h} x {w} from epoch {first}')
            else:
                parts.append(f'{h} x {w} in epoch {first}' if after == first + 1 else
                             f'{h} x {w} in epochs {first}-{after - 1}')
        return ', training at ' + ', '.join(parts)

    def batches(self, epoch: int, batches: Iterable[Batch]) -> Iterator[Batch]:
        """``batches`` of ``epoch`` at its size: each image batch resized (the identity at the model's own size),
        with the model in its any-size mode until the last one is taken (or the loop leaves)."""
        size = self.size(epoch)
        if size == self.native:
            yield from batches
            return
        with self._any_size():
            for x, y in batches:
                yield F.interpolate(x, size=size, mode='bilinear', align_corners=False, antialias=True), y

    @contextlib.contextmanager
    def _any_size(self) -> Iterator[None]:
        model = self.model
        if not hasattr(model, 'set_dynamic_img_size'):  # a convolutional network takes any size as it is
            yield
            return
        own = model.dynamic_img_size
        model.set_dynamic_img_size(True)
        model.init_kwargs['dynamic_img_size'] = own  # a training mode, not the model: its keywords stay its own
        try:
            yield
        finally:
            model.set_dynamic_img_size(own)


def train_sizes(entries: Optional[Sequence[str]], model: nn.Module, native: Sequence[int], epochs: int,
                teacher: Optional[str]) -> Optional[TrainSizes]:
    """The run's ``TrainSizes``, or None without ``--train-sizes``; a teacher takes its own input size only."""
    if not entries:
        return None
    if teacher:
        raise UsageError(f'--train-sizes cannot train with a teacher ({teacher}): the teacher sees the same batches, '
                         f'at its own input size only.')
    return TrainSizes(entries, model, (int(native[0]), int(native[1])), epochs)
