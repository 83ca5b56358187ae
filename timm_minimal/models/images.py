"""The images a minimal vision transformer reads: the bounds checked before an image is decoded or converted,
the conversion to the model's channels (grayscale for 1-channel models, RGB for 3-channel ones), and arrays and
tensors as PIL images. Nothing here imports transformers: the trainer and the tools use it without the image
processor, which builds on it.

This file travels with saved checkpoints (``trust_remote_code=True``).
"""
import warnings
from typing import Any, Optional, Tuple

import numpy as np
import torch
from PIL import Image, ImageOps

__all__ = ['CHANNEL_MODES', 'LAYOUTS', 'check_layout', 'image_mode', 'upright', 'convert_image', 'array_to_image',
           'check_image_size', 'ImageTooLarge', 'MAX_IMAGE_PIXELS', 'MAX_IMAGE_SIDE', 'MAX_ASPECT_RATIO']

CHANNEL_MODES = {1: 'L', 3: 'RGB'}  # a model's input channels -> the PIL mode its images are converted to
CHANNEL_COUNTS = (1, 3, 4)  # the channels an input image may have: grey, RGB, RGBA
LAYOUTS = ('channels_first', 'channels_last')  # transformers' ChannelDimension values for an image's own layout


# Every image is bounded before it is decoded or converted (a file by its header, an array by its shape): the
# models see 28x28 or 32x32 pixels, and the resize to the input takes the shorter side to that size, so a long thin
# strip would grow by its aspect ratio (a 1,000,000 x 1 image to 28,000,000 x 28).
MAX_IMAGE_PIXELS = 25_000_000
MAX_IMAGE_SIDE = 16_384
MAX_ASPECT_RATIO = 64


class ImageTooLarge(ValueError):
    """An image over the bounds above; the message names its size and the bound."""


def check_image_size(width: int, height: int, what: str = 'the image') -> None:
    """Refuse an image over ``MAX_IMAGE_PIXELS`` pixels, a side over ``MAX_IMAGE_SIDE`` or sides in a ratio over
    ``MAX_ASPECT_RATIO``, before it is decoded or resized."""
    width, height = int(width), int(height)
    if width < 1 or height < 1:
        raise ValueError(f'{what} is {width}x{height} pixels: it holds no pixels.')
    why = (f'over {MAX_IMAGE_PIXELS / 1e6:g} megapixels' if width * height > MAX_IMAGE_PIXELS else
           f'a side over {MAX_IMAGE_SIDE:,} pixels' if max(width, height) > MAX_IMAGE_SIDE else
           f'sides in a ratio over {MAX_ASPECT_RATIO}:1' if max(width, height) > MAX_ASPECT_RATIO * min(width, height)
           else None)
    if why:
        raise ImageTooLarge(f'{what} is {width}x{height} pixels, {why}; the models take at most '
                            f'{MAX_IMAGE_PIXELS / 1e6:g} megapixels, sides up to {MAX_IMAGE_SIDE:,} pixels in a ratio '
                            f'up to {MAX_ASPECT_RATIO}:1 (they see 28x28 or 32x32).')


def image_mode(channels: int) -> str:
    """The PIL mode of a model's input: 'L' for 1 channel, 'RGB' for 3."""
    if channels not in CHANNEL_MODES:
        raise ValueError(f'images are converted for 1 (grayscale) or 3 (RGB) channels, not {channels}.')
    return CHANNEL_MODES[channels]


def upright(image: Image.Image) -> Image.Image:
    """``image`` as it is shown: turned by its EXIF orientation (a phone's JPEG), as transformers' ``load_image`` and
    image viewers turn it; an image without one is returned as it is."""
    if image.getexif().get(0x0112, 1) == 1:  # 0x0112: the orientation tag; 1 is upright
        return image
    return ImageOps.exif_transpose(image)


def convert_image(image: Image.Image, mode: str) -> Image.Image:
    """``image`` in ``mode``. A 16-bit image (``I;16`` modes) is scaled to 8 bits by its mode, a 32-bit integer one
    (``I``) and a float one (``F``) by their range (PIL's own conversion clips them, which turns a 16-bit image white);
    an image with transparency is composed onto white first, as transformers' ``convert_to_rgb`` does."""
    if image.mode == mode:
        return image
    if image.mode == 'F':  # the float rule of arrays and tensors
        image = Image.fromarray(_float_to_uint8(np.asarray(image, dtype=np.float64)), 'L')
    elif image.mode.startswith('I;16'):
        image = Image.fromarray(_int_to_uint8(np.asarray(image), 65535), 'L')
    elif image.mode.startswith('I'):
        image = Image.fromarray(_int_to_uint8(np.asarray(image)), 'L')
    elif image.mode in ('RGBA', 'LA', 'PA', 'La', 'RGBa') or (image.mode == 'P' and 'transparency' in image.info):
        image = Image.alpha_composite(Image.new('RGBA', image.size, 'white'), image.convert('RGBA'))
    return image.convert(mode)


def _int_to_uint8(array: np.ndarray, top: Optional[int] = None) -> np.ndarray:
    """An integer image as uint8, scaled from ``top`` (16-bit: 65535), else from its range: 0..255 as 8-bit,
    0..65535 as 16-bit; negative values or values past 16 bits are refused rather than clipped."""
    low, high = int(array.min(initial=0)), int(array.max(initial=0))
    if low < 0 or high > (top or 65535):
        raise ValueError(f'An integer image must hold values in [0, 255] (8-bit) or [0, 65535] (16-bit); this '
                         f'{array.dtype} one runs from {low} to {high}.')
    top = top or (255 if high <= 255 else 65535)
    return np.rint(array.astype(np.float64) * (255.0 / top)).astype(np.uint8)


# A float image whose values stay below this is a [0, 1] image: an interpolation's overshoot (a bicubic resize) or
# arithmetic can take a value a little past 1, while a [0, 255] image reaching no further is black to the eye. One
# that reaches above it but not above ``BYTE_RANGE_FLOOR`` is neither, and is refused rather than guessed.
UNIT_RANGE_LIMIT = 1.5
BYTE_RANGE_FLOOR = 16.0
_HALF_STEP = 0.5 / 255  # within this of [0, 1], a value rounds to the same 8-bit level as the clipped one


def _float_to_uint8(array: np.ndarray) -> np.ndarray:
    """A float image as uint8: a [0, 1] image where every value lies in [-0.5, ``UNIT_RANGE_LIMIT``] (clipped to
    [0, 1], with a warning where a value lies further outside than rounding), a [0, 255] image where a value lies
    beyond that and none beyond [-0.5, 255.5]; anything else is refused rather than guessed."""
    if not np.isfinite(array).all():
        raise ValueError('The image holds non-finite values.')
    low, high = float(array.min(initial=0)), float(array.max(initial=0))
    if low >= -0.5 and high <= UNIT_RANGE_LIMIT:
        outside = int(((array < -_HALF_STEP) | (array > 1 + _HALF_STEP)).sum())
        if outside:
            warnings.warn(f'A float image in [0, 1] holds {outside} value(s) outside it (from {low:g} to {high:g}); '
                          f'they are clipped to [0, 1].', stacklevel=3)
        return np.clip(np.rint(array * 255.0), 0, 255).astype(np.uint8)
    if low < -0.5 or high > 255.5:
        raise ValueError(f'A float image must hold values in [0, 1] or [0, 255]; this one runs from {low:g} to '
                         f'{high:g}.')
    if high <= BYTE_RANGE_FLOOR:
        raise ValueError(f'A float image running from {low:g} to {high:g} is neither a [0, 1] image (values up to '
                         f'{UNIT_RANGE_LIMIT:g}, clipped to 1) nor a [0, 255] one (values reaching above '
                         f'{BYTE_RANGE_FLOOR:g}); clip it to [0, 1], or pass it as uint8.')
    return np.clip(np.rint(array), 0, 255).astype(np.uint8)


def check_layout(layout: Optional[str], name: str = 'input_data_format') -> None:
    """``layout`` is one of ``LAYOUTS`` (a string or transformers' ``ChannelDimension``) or None."""
    if layout is not None and layout not in LAYOUTS:
        raise ValueError(f"{name} must be one of {', '.join(LAYOUTS)} or None, got {layout!r}.")


def _channels_first(shape: Tuple[int, ...], layout: Optional[str]) -> bool:
    """Whether a 3-D array of ``shape`` has its channels first: as ``layout`` says ('channels_first' or
    'channels_last', transformers' ``input_data_format``), else inferred (first where only the first dimension can
    be a channel count)."""
    check_layout(layout)
    if layout is None:
        return shape[0] in CHANNEL_COUNTS and shape[-1] not in CHANNEL_COUNTS
    axis = 0 if layout == 'channels_first' else -1
    if shape[axis] not in CHANNEL_COUNTS:
        raise ValueError(f"input_data_format={layout!r}, but the array of shape {tuple(shape)} has "
                         f"{shape[axis]} there, not a channel count (1, 3 or 4).")
    return axis == 0


def array_to_image(array: Any, layout: Optional[str] = None) -> Image.Image:
    """A numpy array or torch tensor as a PIL image: (H, W), (H, W, C) or (C, H, W) with C in 1, 3, 4; uint8,
    16-bit integers, or floats in [0, 1]. ``layout`` ('channels_first', 'channels_last' or None to infer it) says
    where a 3-D array has its channels, as transformers' ``input_data_format`` does."""
    if isinstance(array, torch.Tensor):
        tensor = array.detach().cpu()
        array = (tensor.float() if tensor.dtype in (torch.bfloat16, torch.float16) else tensor).numpy()
    if not isinstance(array, np.ndarray):
        raise TypeError(f'Expected a PIL image, numpy array or torch tensor (or a list of them), got '
                        f'{type(array).__name__}.')
    if array.ndim == 3 and _channels_first(array.shape, layout):
        array = array.transpose(1, 2, 0)
    if array.ndim == 3 and array.shape[-1] == 1:
        array = array[..., 0]
    if array.ndim not in (2, 3) or (array.ndim == 3 and array.shape[-1] not in (3, 4)) or 0 in array.shape:
        raise ValueError(f'Expected an image of shape (H, W), (H, W, C) or (C, H, W) with C = 1, 3 or 4, '
                         f'got {tuple(array.shape)}.')
    check_image_size(array.shape[1], array.shape[0])
    if array.dtype.kind == 'f':
        array = _float_to_uint8(array)
    elif array.dtype == np.bool_:
        array = array.astype(np.uint8) * 255
    elif array.dtype.kind not in 'ui':
        raise TypeError(f'Expected an image of integers, floats or booleans, got dtype {array.dtype}.')
    elif array.dtype != np.uint8:  # 16 bits by its dtype; a wider integer by its range
        array = _int_to_uint8(array, 65535 if array.dtype == np.uint16 else None)
    return Image.fromarray(np.ascontiguousarray(array))
