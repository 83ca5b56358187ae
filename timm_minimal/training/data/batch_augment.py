"""Batched image augmentation on the training device: one affine sampling grid per batch.

The device-resident data path (``timm_minimal.training.data.device_data``) keeps a dataset as a uint8 tensor on
the training device and augments whole batches there, instead of decoding and transforming every
image on the CPU. Per sample it draws

- a random resized crop (area fraction in ``scale``, aspect ratio log-uniform in ``ratio``, as
  timm's ``RandomResizedCrop``; an area above 1 zooms out, the border filled with black),
- a shift of up to ``translate`` times the image size and a rotation of up to ``rotate`` degrees,
- horizontal and vertical flips with probabilities ``hflip`` and ``vflip``,

folds them into one 2x3 affine matrix and samples the batch once with ``F.affine_grid`` and
``F.grid_sample`` (bilinear). Random erasing (``reprob``, timm's area and aspect ranges) then
blanks one rectangle per chosen sample, filled with per-pixel normal noise (``'pixel'``, timm's
default) or zeros (``'const'``) in normalised units.

Every random number of a sample comes from a table of uniforms drawn once per epoch from a CPU
generator seeded by (seed, epoch) and indexed by the sample: the augmentation of a sample is a pure
function of (seed, epoch, sample index), whatever the batch it lands in, the number of processes or
the device. The erasing noise of ``'pixel'`` mode is the exception: it is drawn as the batch is built, from torch's
generator on the batch's device, in the state the training step before it left (each step seeds it from (seed, epoch,
step, rank)); so it is a function of the seed too, but of the batch a sample lands in.
"""
import math
from dataclasses import asdict, dataclass
from typing import Any, Dict, Sequence, Tuple

import torch
import torch.nn.functional as F

from ...cli import UsageError
from ..seeding import mix_seed

__all__ = ['BatchAugmentConfig', 'BatchAugment', 'epoch_uniforms', 'NUM_DRAWS']

# columns of the per-sample table of uniforms
_AREA, _RATIO, _CX, _CY, _TX, _TY, _ROT, _HFLIP, _VFLIP, _ERASE, _EAREA, _EASPECT, _EX, _EY = range(14)
NUM_DRAWS = 14
ERASE_AREA = (0.02, 1 / 3)  # timm's RandomErasing defaults
ERASE_ASPECT = (0.3, 1 / 0.3)
ERASE_MODES = ('pixel', 'const')


@dataclass(frozen=True)
class BatchAugmentConfig:
    """The batched augmentation; every field is a trainer option of the same name."""
    scale: Tuple[float, float] = (1.0, 1.0)
    ratio: Tuple[float, float] = (1.0, 1.0)
    translate: float = 0.0
    rotate: float = 0.0
    hflip: float = 0.0
    vflip: float = 0.0
    reprob: float = 0.0
    remode: str = 'pixel'

    def __post_init__(self) -> None:
        for name in ('scale', 'ratio'):
            lo, hi = getattr(self, name)
            if not 0 < lo <= hi:
                raise UsageError(f'--{name} must be two numbers 0 < low <= high, got {getattr(self, name)}.')
        for name in ('hflip', 'vflip', 'reprob'):
            if not 0 <= getattr(self, name) <= 1:
                raise UsageError(f'--{name} is a probability in [0, 1], got {getattr(self, name)}.')
        if not 0 <= self.translate < 1:
            raise UsageError(f'--translate is a fraction of the image size in [0, 1), got {self.translate}.')
        if not 0 <= self.rotate <= 180:
            raise UsageError(f'--rotate is a maximum angle in degrees in [0, 180], got {self.rotate}.')
        if self.remode not in ERASE_MODES:
            raise UsageError(f"--remode must be one of {', '.join(ERASE_MODES)} on the device data path, got '{self.remode}'.")

    @property
    def geometric(self) -> bool:
        """Whether the affine resampling changes anything (else the images pass through untouched)."""
        return (self.scale != (1.0, 1.0) or self.ratio != (1.0, 1.0) or self.translate > 0 or self.rotate > 0
                or self.hflip > 0 or self.vflip > 0)

    def describe(self) -> Dict[str, Any]:
        return asdict(self)


def epoch_uniforms(seed: int, epoch: int, num_samples: int) -> torch.Tensor:
    """The (num_samples, NUM_DRAWS) uniforms in [0, 1) of one epoch: row i belongs to sample i."""
    g = torch.Generator().manual_seed(mix_seed(seed, 0xA06E, epoch))
    return torch.rand(num_samples, NUM_DRAWS, generator=g)


def _between(u: torch.Tensor, lo: float, hi: float) -> torch.Tensor:
    return lo + (hi - lo) * u


class BatchAugment:
    """Turns a uint8 batch (B, C, H, W) and its rows of uniforms into a normalised float32 batch."""

    def __init__(self, cfg: BatchAugmentConfig, mean: Sequence[float], std: Sequence[float],
                 device: torch.device) -> None:
        self.cfg = cfg
        self.mean = torch.tensor(mean, dtype=torch.float32, device=device).view(1, -1, 1, 1) * 255
        self.std = torch.tensor(std, dtype=torch.float32, device=device).view(1, -1, 1, 1) * 255

    def normalize(self, x: torch.Tensor) -> torch.Tensor:
        """uint8 (or 0-255 float) pixels to the model's normalised input."""
        return (x.float() - self.mean) / self.std

    def affine(self, u: torch.Tensor, height: int, width: int) -> torch.Tensor:
        """(B, 2, 3) matrices mapping output to input coordinates (``F.affine_grid``'s convention)."""
        c = self.cfg
        area = _between(u[:, _AREA], *c.scale)
        log_r = _between(u[:, _RATIO], math.log(c.ratio[0]), math.log(c.ratio[1]))
        aspect = torch.exp(log_r)
        w = torch.sqrt(area * aspect)  # crop size as a fraction of the image
        h = torch.sqrt(area / aspect)
        w = torch.where(area <= 1, w.clamp(max=1.0), w)
        h = torch.where(area <= 1, h.clamp(max=1.0), h)
        # the crop's centre, so that the crop stays inside the image (or the image inside a zoomed-out frame)
        cx = _between(u[:, _CX], -1, 1) * (1 - w).abs() + _between(u[:, _TX], -2, 2) * c.translate
        cy = _between(u[:, _CY], -1, 1) * (1 - h).abs() + _between(u[:, _TY], -2, 2) * c.translate
        angle = torch.deg2rad(_between(u[:, _ROT], -c.rotate, c.rotate))
        cos, sin = torch.cos(angle), torch.sin(angle)
        fx = torch.where(u[:, _HFLIP] < c.hflip, -1.0, 1.0)
        fy = torch.where(u[:, _VFLIP] < c.vflip, -1.0, 1.0)
        # rotation in pixel units (normalised coordinates scale x by 2/W and y by 2/H)
        sx, sy = width / max(height, width), height / max(height, width)
        theta = torch.stack([
            torch.stack([w * cos * fx, -w * sin * sy / sx * fy, cx], -1),
            torch.stack([h * sin * sx / sy * fx, h * cos * fy, cy], -1),
        ], 1)
        return theta

    def erase(self, x: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
        """Random erasing of one rectangle per chosen sample, on the normalised batch."""
        c = self.cfg
        b, _, height, width = x.shape
        area = _between(u[:, _EAREA], *ERASE_AREA)
        aspect = torch.exp(_between(u[:, _EASPECT], math.log(ERASE_ASPECT[0]), math.log(ERASE_ASPECT[1])))
        eh = torch.sqrt(area * aspect)  # fractions of the image
        ew = torch.sqrt(area / aspect)
        chosen = (u[:, _ERASE] < c.reprob) & (eh < 1) & (ew < 1)
        top = u[:, _EY] * (1 - eh)
        left = u[:, _EX] * (1 - ew)
        ys = (torch.arange(height, device=x.device, dtype=torch.float32) + 0.5) / height
        xs = (torch.arange(width, device=x.device, dtype=torch.float32) + 0.5) / width
        in_y = (ys[None] >= top[:, None]) & (ys[None] < (top + eh)[:, None])
        in_x = (xs[None] >= left[:, None]) & (xs[None] < (left + ew)[:, None])
        mask = (in_y[:, :, None] & in_x[:, None, :] & chosen[:, None, None]).unsqueeze(1)
        fill = torch.randn_like(x) if c.remode == 'pixel' else torch.zeros_like(x)
        return torch.where(mask, fill, x)

    def __call__(self, x: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
        """Augment and normalise a uint8 batch; ``u`` holds the batch's rows of ``epoch_uniforms``."""
        if self.cfg.geometric:
            theta = self.affine(u, x.shape[-2], x.shape[-1])
            grid = F.affine_grid(theta, list(x.shape), align_corners=False)
            x = F.grid_sample(x.float(), grid, mode='bilinear', padding_mode='zeros', align_corners=False)
        x = self.normalize(x)
        if self.cfg.reprob > 0:
            x = self.erase(x, u)
        return x
