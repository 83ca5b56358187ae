"""Training checkpoints, written as whole folders (the atomic file writes are in ``run.files``).

A checkpoint is a folder (``checkpoints/last``, ``checkpoints/best``) holding

- ``model.safetensors``: the model's weights (``ema.safetensors``: the EMA weights, when kept),
- ``training_state.pt``: optimizer, scheduler, gradient scaler and RNG states, the position in
  the run (epoch, batch, optimizer update) and the metrics so far (``torch.load(weights_only=True)``),
- ``state.json``: the same position in readable form,
- ``config.json``: the model's architecture, number of classes and pretrained config (timm's Hub layout).

A folder is written in full under a temporary name and then renamed into place, so a run killed at
any moment leaves either the previous checkpoint or the new one, never a mix. While the new folder
is renamed in, the old one is briefly ``<name>.prev``; ``find_checkpoint`` falls back to it.

Not accelerate's ``save_state`` / ``load_state``: a checkpoint here is first a timm ``local-dir:`` checkpoint
(``config.json`` + ``model.safetensors`` with timm's keys), which ``timm.create_model``, ``timm-minimal-publish``
and timm's ``validate.py`` read as they are; ``save_state`` writes no ``config.json`` and names its files its own
way (``optimizer.bin``, ``scheduler.bin``, ``random_states_<rank>.pkl``), so the folder would hold the weights
twice. The random states it saves are needed: each training step reseeds from (seed, epoch, step) (``seeding``),
but random erasing draws its noise when a batch is made, before that step, from the generators as the last step
left them. Restoring them (``resume.restore``) is what makes a resumed run end bit for bit where an uninterrupted
one does (``test_a_resume_restores_the_random_states_the_batches_draw_from`` fails without it).
"""
import os
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Dict, Optional

from .files import PathLike, fsync_dir, fsync_file

if TYPE_CHECKING:  # torch is imported where weights are read or written: the run folder's readers need no torch
    import torch


__all__ = [
    'atomic_write_dir', 'find_checkpoint', 'save_weights', 'load_weights', 'clean_stale_temp', 'MODEL_FILE', 'EMA_FILE',
    'STATE_FILE', 'STATE_JSON', 'CONFIG_FILE',
]

MODEL_FILE = 'model.safetensors'
EMA_FILE = 'ema.safetensors'
STATE_FILE = 'training_state.pt'
STATE_JSON = 'state.json'
CONFIG_FILE = 'config.json'

def atomic_write_dir(target: PathLike, write: Callable[[Path], None],
                     between: Optional[Callable[[], None]] = None) -> Path:
    """Fill a temporary folder with ``write(tmp)``, then swap it in as ``target``.

    ``between`` (tests only) runs after the files are written and before the swap.
    """
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f'.{target.name}.tmp')
    prev = target.with_name(f'{target.name}.prev')
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    write(tmp)
    for p in tmp.iterdir():
        fsync_file(p)
    fsync_dir(tmp)
    if between is not None:
        between()
    if target.exists():
        shutil.rmtree(prev, ignore_errors=True)
        os.replace(target, prev)
    os.replace(tmp, target)
    fsync_dir(target.parent)
    shutil.rmtree(prev, ignore_errors=True)
    return target


def clean_stale_temp(folder: PathLike) -> None:
    """Remove temporary checkpoint folders a killed run left behind."""
    folder = Path(folder)
    if folder.is_dir():
        for p in folder.glob('.*.tmp'):
            shutil.rmtree(p, ignore_errors=True) if p.is_dir() else p.unlink(missing_ok=True)


def find_checkpoint(path: PathLike, name: str = 'last') -> Optional[Path]:
    """The complete checkpoint folder for a run folder, a ``checkpoints/`` folder or a checkpoint folder.

    Returns None when there is none yet.
    """
    path = Path(path)
    candidates = []
    if (path / STATE_FILE).is_file():
        return path
    for base in (path / 'checkpoints', path):
        candidates += [base / name, base / f'{name}.prev']
    for c in candidates:
        if (c / STATE_FILE).is_file() and (c / MODEL_FILE).is_file():
            return c
    return None


def save_weights(state_dict: Dict[str, 'torch.Tensor'], path: PathLike, metadata: Optional[Dict[str, str]] = None) -> None:
    """A state dict as safetensors (CPU, contiguous, shared storage copied apart)."""
    from ...models.weights_check import save_weights_file  # lazy: --help answers without it
    tensors = {k: v.detach().to('cpu').contiguous().clone() for k, v in state_dict.items()}
    save_weights_file(tensors, Path(path), {'format': 'pt', **(metadata or {})})


def load_weights(path: PathLike) -> Dict[str, 'torch.Tensor']:
    from safetensors.torch import load_file  # lazy: --help answers without it
    return load_file(str(path))
