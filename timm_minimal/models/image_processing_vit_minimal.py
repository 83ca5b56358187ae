"""Hugging Face image processor of the minimal vision transformers.

It applies timm's evaluation transform for the model's pretrained cfg (resize, center crop for
``crop_pct < 1``, scaling to [0, 1], mean/std normalisation) and converts images to the model's
channel count first: grayscale for 1-channel models (MNIST), RGB for 3-channel ones. The transform
is the one ``timm.data.create_transform(**timm.data.resolve_data_config({}, model=model))`` builds,
so pixel values are the same in both libraries.

This file travels with saved checkpoints (``trust_remote_code=True``).
"""
from typing import Any, Dict, Optional, Sequence

import numpy as np
import torch
from PIL import Image

from transformers.image_processing_utils import BaseImageProcessor, BatchFeature

from .datasets import channel_stats

__all__ = ['VitMinimalImageProcessor', 'CHANNEL_MODES', 'image_mode', 'convert_image', 'array_to_image',
           'check_image_size', 'ImageTooLarge', 'MAX_IMAGE_PIXELS', 'MAX_IMAGE_SIDE', 'MAX_ASPECT_RATIO']

INTERPOLATIONS = ('nearest', 'bilinear', 'bicubic', 'box', 'hamming', 'lanczos')
CROP_MODES = ('center', 'squash', 'border')
CHANNEL_MODES = {1: 'L', 3: 'RGB'}  # a model's input channels -> the PIL mode its images are converted to


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


def convert_image(image: Image.Image, mode: str) -> Image.Image:
    """``image`` in ``mode``; 16- and 32-bit integer and float images are scaled to 8 bits by their range
    (PIL's own conversion clips them, which turns a 16-bit image white)."""
    if image.mode == mode:
        return image
    if image.mode.startswith('I') or image.mode == 'F':
        values = np.asarray(image, dtype=np.float64)
        top = 1.0 if image.mode == 'F' and values.max(initial=0) <= 1.0 else (
            255.0 if values.max(initial=0) <= 255 else 65535.0 if values.max(initial=0) <= 65535 else values.max())
        image = Image.fromarray(np.clip(np.rint(values * (255.0 / top)), 0, 255).astype(np.uint8), 'L')
    return image.convert(mode)


def _float_to_uint8(array: np.ndarray) -> np.ndarray:
    """A float image as uint8. Its range is read from the bulk of its values: [0, 1] when 99.9% of them lie in it
    (values a little outside, from arithmetic, are clipped with a warning), else [0, 255]; values beyond 255, or a
    [0, 1] image with values far outside, are refused rather than guessed."""
    import warnings
    if not np.isfinite(array).all():
        raise ValueError('The image holds non-finite values.')
    low, high = float(array.min()), float(array.max())
    if float(np.quantile(array, 0.999)) <= 1.0 and low >= -0.5 and high <= 1.5:
        outside = int(((array < 0) | (array > 1)).sum())
        if outside:
            warnings.warn(f'A float image in [0, 1] holds {outside} value(s) outside it (from {low:g} to {high:g}); '
                          f'they are clipped to [0, 1].', stacklevel=3)
        return np.clip(np.rint(array * 255.0), 0, 255).astype(np.uint8)
    if low < -0.5 or high > 255.5:
        raise ValueError(f'A float image must hold values in [0, 1] or [0, 255]; this one runs from {low:g} to '
                         f'{high:g}.')
    return np.clip(np.rint(array), 0, 255).astype(np.uint8)


def array_to_image(array: Any) -> Image.Image:
    """A numpy array or torch tensor as a PIL image: (H, W), (H, W, C) or (C, H, W) with C in 1, 3, 4; uint8,
    16-bit integers, or floats in [0, 1]."""
    if isinstance(array, torch.Tensor):
        array = array.detach().cpu().numpy()
    if not isinstance(array, np.ndarray):
        raise TypeError(f'Expected a PIL image, numpy array or torch tensor (or a list of them), got '
                        f'{type(array).__name__}.')
    if array.ndim == 3 and array.shape[0] in (1, 3, 4) and array.shape[-1] not in (1, 3, 4):
        array = array.transpose(1, 2, 0)  # channels first
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
    elif array.dtype != np.uint8:
        top = 255 if array.max(initial=0) <= 255 else 65535
        array = np.clip(array.astype(np.float64) * (255.0 / top), 0, 255).round().astype(np.uint8)
    return Image.fromarray(np.ascontiguousarray(array))


class VitMinimalImageProcessor(BaseImageProcessor):
    r"""Preprocessing of a minimal vision transformer, from its timm pretrained cfg.

    Args:
        size (`dict`, *optional*): ``{"height": H, "width": W}`` of the model input (28x28 for MNIST).
        crop_pct (`float`, *optional*, defaults to 1.0): images are resized to ``size / crop_pct``
            (shortest edge) and center-cropped to ``size``, as in timm's evaluation transform.
        crop_mode (`str`, *optional*, defaults to ``"center"``): timm's crop mode (``center``,
            ``squash`` or ``border``).
        interpolation (`str`, *optional*, defaults to ``"bilinear"``): resize interpolation.
        image_mean, image_std (`list[float]`, *optional*): normalisation per channel.
        num_channels (`int`, *optional*, defaults to 1): 1 converts images to grayscale, 3 to RGB.
    """

    model_input_names = ['pixel_values']
    _auto_class = 'AutoImageProcessor'  # save_pretrained copies this file and records it in auto_map

    def __init__(
            self,
            size: Optional[Dict[str, int]] = None,
            crop_pct: float = 1.0,
            crop_mode: str = 'center',
            interpolation: str = 'bilinear',
            image_mean: Optional[Sequence[float]] = None,
            image_std: Optional[Sequence[float]] = None,
            num_channels: int = 1,
            **kwargs,
    ) -> None:
        super().__init__(**kwargs)
        if num_channels not in CHANNEL_MODES:
            raise ValueError(f'num_channels must be 1 (grayscale) or 3 (RGB), got {num_channels}.')
        size = {'height': 28, 'width': 28} if size is None else dict(size)
        if set(size) != {'height', 'width'} or min(size.values()) < 1:
            raise ValueError(f'size must be {{"height": H, "width": W}} with positive H, W, got {size}.')
        if not 0 < crop_pct <= 1:
            raise ValueError(f'crop_pct must be in (0, 1], got {crop_pct}.')
        if crop_mode not in CROP_MODES:
            raise ValueError(f"Unknown crop_mode '{crop_mode}'; choose one of {', '.join(CROP_MODES)}.")
        if interpolation not in INTERPOLATIONS:
            raise ValueError(f"Unknown interpolation '{interpolation}'; choose one of {', '.join(INTERPOLATIONS)}.")
        image_mean = [0.5] * num_channels if image_mean is None else [float(v) for v in image_mean]
        image_std = [0.5] * num_channels if image_std is None else [float(v) for v in image_std]
        image_mean = channel_stats(image_mean, num_channels, 'image_mean')
        image_std = channel_stats(image_std, num_channels, 'image_std')
        if min(image_std) <= 0:
            raise ValueError(f'image_std must be positive, got {image_std}.')
        self.size = {'height': int(size['height']), 'width': int(size['width'])}
        self.crop_pct = float(crop_pct)
        self.crop_mode = crop_mode
        self.interpolation = interpolation
        self.image_mean = image_mean
        self.image_std = image_std
        self.num_channels = num_channels

    @classmethod
    def from_pretrained_cfg(cls, pretrained_cfg: Dict[str, Any], **kwargs) -> 'VitMinimalImageProcessor':
        """The processor for a timm pretrained cfg (``model.pretrained_cfg`` or ``config.pretrained_cfg``)."""
        from timm.data import resolve_data_config
        data_cfg = resolve_data_config({}, pretrained_cfg=dict(pretrained_cfg), verbose=False)
        channels, height, width = data_cfg['input_size']
        return cls(
            size={'height': height, 'width': width},
            crop_pct=data_cfg['crop_pct'],
            crop_mode=data_cfg.get('crop_mode') or 'center',
            interpolation=data_cfg['interpolation'],
            image_mean=data_cfg['mean'],
            image_std=data_cfg['std'],
            num_channels=channels,
            **kwargs,
        )

    @classmethod
    def from_config(cls, config: Any, **kwargs) -> 'VitMinimalImageProcessor':
        """The processor for a ``VitMinimalConfig``."""
        return cls.from_pretrained_cfg(config.timm_pretrained_cfg(), **kwargs)

    def timm_data_config(self) -> Dict[str, Any]:
        """The arguments of ``timm.data.create_transform`` this processor applies."""
        return dict(
            input_size=(self.num_channels, self.size['height'], self.size['width']),
            interpolation=self.interpolation,
            mean=tuple(self.image_mean),
            std=tuple(self.image_std),
            crop_pct=self.crop_pct,
            crop_mode=self.crop_mode,
        )

    def _transform(self):
        from timm.data import create_transform
        return create_transform(**self.timm_data_config(), is_training=False)

    def _to_pil(self, image: Any) -> Image.Image:
        if isinstance(image, Image.Image):
            check_image_size(*image.size)
        else:
            image = array_to_image(image)
        return convert_image(image, image_mode(self.num_channels))

    def preprocess(
            self,
            images: Any,
            return_tensors: Optional[str] = 'pt',
            **kwargs,
    ) -> BatchFeature:
        """Preprocess an image or a list of images into ``pixel_values`` (B, C, H, W).

        Args:
            images: PIL image(s), numpy array(s) or torch tensor(s) (HWC or CHW, uint8 or float in [0, 1]);
                color images are converted to grayscale for 1-channel models.
            return_tensors: ``"pt"`` (default), ``"np"`` or ``None`` (a torch tensor).
        """
        if kwargs:
            raise TypeError(f'Unexpected arguments {sorted(kwargs)}; VitMinimalImageProcessor.preprocess takes '
                            f'images and return_tensors.')
        if return_tensors not in ('pt', 'np', None):
            raise ValueError(f"return_tensors must be 'pt', 'np' or None, got {return_tensors!r}.")
        if isinstance(images, (list, tuple)):
            images = list(images)
        elif isinstance(images, (np.ndarray, torch.Tensor)) and images.ndim == 4:
            images = list(images)
        else:
            images = [images]
        if not images:
            raise ValueError('No images given.')
        transform = self._transform()
        pixel_values = torch.stack([transform(self._to_pil(image)) for image in images])
        if return_tensors == 'np':
            pixel_values = pixel_values.numpy()
        return BatchFeature(data={'pixel_values': pixel_values}, tensor_type=return_tensors)

    def __call__(self, images: Any = None, *args, **kwargs) -> BatchFeature:
        return self.preprocess(images, *args, **kwargs)

    def to_dict(self) -> Dict[str, Any]:
        output = super().to_dict()
        return {k: v for k, v in output.items() if not k.startswith('_')}
