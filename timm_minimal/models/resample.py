"""Pillow's resize in torch: the torchvision image processor resizes batches of images on any device and gives the
pixels the PIL processor (timm's transform on PIL images) gives, within one 8-bit level, for every interpolation
timm uses. torchvision's own resize differs from Pillow's by up to 21 levels with bicubic (another kernel
coefficient); this follows Pillow's Resample.c: the same filters and supports, the two separable passes in its
order, each rounded to 8 bits.

This file travels with saved checkpoints (``trust_remote_code=True``).
"""
import math
from functools import lru_cache
from typing import Callable, Dict, Tuple

import PIL
import torch

__all__ = ['pil_resize', 'PIL_FILTERS']


def _bilinear(x: float) -> float:
    x = abs(x)
    return 1.0 - x if x < 1.0 else 0.0


def _bicubic(x: float, a: float = -0.5) -> float:
    x = abs(x)
    if x < 1.0:
        return ((a + 2.0) * x - (a + 3.0)) * x * x + 1
    return (((x - 5) * x + 8) * x - 4) * a if x < 2.0 else 0.0


def _sinc(x: float) -> float:
    return 1.0 if x == 0.0 else math.sin(math.pi * x) / (math.pi * x)


def _hamming(x: float) -> float:
    x = abs(x)
    return 1.0 if x == 0.0 else 0.0 if x >= 1.0 else _sinc(x) * (0.54 + 0.46 * math.cos(math.pi * x))


_VERTICAL_FIRST = int(PIL.__version__.split('.')[0]) >= 13

# Pillow's filters and their supports (Resample.c)
PIL_FILTERS: Dict[str, Tuple[Callable[[float], float], float]] = {
    'bilinear': (_bilinear, 1.0),
    'bicubic': (_bicubic, 2.0),
    'box': (lambda x: 1.0 if -0.5 < x <= 0.5 else 0.0, 0.5),
    'hamming': (_hamming, 1.0),
    'lanczos': (lambda x: _sinc(x) * _sinc(x / 3) if -3.0 <= x < 3.0 else 0.0, 3.0),
}


@lru_cache(maxsize=64)
def _weights(in_size: int, out_size: int, interpolation: str) -> torch.Tensor:
    """The (out_size, in_size) matrix of one pass: Pillow's ``precompute_coeffs`` (nearest: Pillow's pick of the
    source pixel under each output pixel's centre)."""
    scale = in_size / out_size
    matrix = torch.zeros(out_size, in_size, dtype=torch.float32)
    if interpolation == 'nearest':  # Pillow's ImagingScaleAffine: the position summed step by step, in doubles
        source, position = [], scale * 0.5
        for _ in range(out_size):
            source.append(min(int(position), in_size - 1))
            position += scale
        matrix[range(out_size), source] = 1.0
        return matrix
    kernel, support = PIL_FILTERS[interpolation]
    filterscale = max(scale, 1.0)
    support *= filterscale
    for i in range(out_size):
        centre = (i + 0.5) * scale
        low, high = max(int(centre - support + 0.5), 0), min(int(centre + support + 0.5), in_size)
        w = [kernel((x - centre + 0.5) / filterscale) for x in range(low, high)]
        total = sum(w)
        matrix[i, low:high] = torch.tensor([v / total for v in w] if total else w, dtype=torch.float32)
    return matrix


def _to_8_bits(x: torch.Tensor) -> torch.Tensor:
    return x.add_(0.5).floor_().clamp_(0, 255)  # Pillow's rounding of its fixed point sums, and its clip


def pil_resize(images: torch.Tensor, size: Tuple[int, int], interpolation: str = 'bilinear') -> torch.Tensor:
    """``images`` (uint8, (..., H, W)) resized to ``size`` (height, width) as Pillow's ``Image.resize`` does."""
    if interpolation not in PIL_FILTERS and interpolation != 'nearest':
        raise ValueError(f"Unknown interpolation {interpolation!r}; choose one of nearest, {', '.join(PIL_FILTERS)}.")
    (in_h, in_w), (out_h, out_w) = images.shape[-2:], size
    x = images.to(torch.float32)
    rows = lambda t: _to_8_bits(_weights(in_h, out_h, interpolation).to(t.device) @ t)  # noqa: E731
    cols = lambda t: _to_8_bits(t @ _weights(in_w, out_w, interpolation).to(t.device).T)  # noqa: E731
    # Pillow's order: from Pillow 13, the vertical pass first where the height shrinks more than twice as much as the
    # width; before, always the horizontal one first
    horizontal_first = not (_VERTICAL_FIRST and in_h - out_h > 0 and in_h - out_h > (in_w - out_w) * 2)
    passes = ([cols] if out_w != in_w else []) + ([rows] if out_h != in_h else [])
    for step in (passes if horizontal_first else passes[::-1]):
        x = step(x)
    return x.to(torch.uint8)
