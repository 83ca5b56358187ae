"""Hugging Face image processor of the minimal vision transformers.

It applies timm's evaluation transform for the model's pretrained cfg (resize, center crop for
``crop_pct < 1``, scaling to [0, 1], mean/std normalisation) and converts images to the model's
channel count first: grayscale for 1-channel models (MNIST), RGB for 3-channel ones. The transform
is the one ``timm.data.create_transform(**timm.data.resolve_data_config({}, model=model))`` builds,
so pixel values are the same in both libraries.

This file travels with saved checkpoints (``trust_remote_code=True``).
"""
from typing import Any, Dict, List, Optional, Sequence, Union

import numpy as np
import torch
from PIL import Image

from transformers.image_processing_backends import TorchvisionBackend
from transformers.image_processing_utils import BaseImageProcessor, BatchFeature

from .configuration_vit_minimal import AUTO_MAP
from .datasets import MIN_CROP_PCT, channel_stats
from .resample import PIL_FILTERS, pil_resize
from .images import CHANNEL_MODES, array_to_image, check_image_size, check_layout, convert_image, image_mode

__all__ = ['VitMinimalImageProcessor', 'VitMinimalImageProcessorFast']

# what a processor's JSON holds: the transform's settings, its class, and where remote code finds both classes
_SAVED = ('size', 'crop_pct', 'crop_mode', 'interpolation', 'image_mean', 'image_std', 'num_channels',
          'image_processor_type', 'processor_class', 'auto_map')
INTERPOLATIONS = ('nearest', *PIL_FILTERS)
CROP_MODES = ('center', 'squash', 'border')


class _TimmEvalSettings:
    r"""The settings of timm's evaluation transform that both processors apply, from a model's timm pretrained cfg.

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
        if isinstance(crop_pct, bool) or not isinstance(crop_pct, (int, float)) or not MIN_CROP_PCT <= crop_pct <= 1:
            raise ValueError(f'crop_pct must be a number from {MIN_CROP_PCT} to 1 (images are resized to size / '
                             f'crop_pct, then centre-cropped), got {crop_pct!r}.')
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

    def _to_pil(self, image: Any, layout: Optional[str] = None) -> Image.Image:
        if isinstance(image, Image.Image):
            check_image_size(*image.size)
        else:
            image = array_to_image(image, layout)
        return convert_image(image, image_mode(self.num_channels))

    def _images(self, images: Any, kwargs: Dict[str, Any], return_tensors: Optional[str], input_data_format: Optional[str],
                data_format: Optional[str]) -> List[Any]:
        """The images of a call as a list, its arguments checked."""
        if kwargs:
            raise TypeError(f'Unexpected arguments {sorted(kwargs)}; {type(self).__name__}.preprocess takes '
                            f'images, return_tensors, input_data_format and data_format; the transform (size, '
                            f'crop_pct, interpolation, image_mean, image_std) is set when the processor is made.')
        if return_tensors not in ('pt', 'np', None):
            raise ValueError(f"return_tensors must be 'pt', 'np' or None, got {return_tensors!r}.")
        check_layout(input_data_format)  # here too for PIL images, whose layout their mode gives
        check_layout(data_format, 'data_format')
        if isinstance(images, (list, tuple)):
            images = list(images)
        elif isinstance(images, (np.ndarray, torch.Tensor)) and images.ndim == 4:
            images = list(images)
        else:
            images = [images]
        if not images:
            raise ValueError('No images given.')
        return images

    @staticmethod
    def _output(pixel_values: torch.Tensor, return_tensors: Optional[str], data_format: Optional[str]) -> BatchFeature:
        if data_format == 'channels_last':
            pixel_values = pixel_values.permute(0, 2, 3, 1)
        if return_tensors == 'np':
            pixel_values = pixel_values.cpu().numpy()
        return BatchFeature(data={'pixel_values': pixel_values}, tensor_type=return_tensors)

    def __call__(self, images: Any = None, *args, **kwargs) -> BatchFeature:
        return self.preprocess(images, *args, **kwargs)

    def to_dict(self) -> Dict[str, Any]:
        output = {k: v for k, v in super().to_dict().items() if k in _SAVED}
        if 'auto_map' in output:  # both processors, as transformers picks them: (PIL, torchvision)
            output['auto_map'] = dict(output['auto_map'], AutoImageProcessor=AUTO_MAP['AutoImageProcessor'])
        return output


class VitMinimalImageProcessor(_TimmEvalSettings, BaseImageProcessor):
    """Preprocessing of a minimal vision transformer, timm's evaluation transform on PIL images (its PIL backend).
    The settings are those of ``_TimmEvalSettings``."""

    def preprocess(
            self,
            images: Any,
            return_tensors: Optional[str] = 'pt',
            input_data_format: Optional[str] = None,
            data_format: Optional[str] = 'channels_first',
            **kwargs,
    ) -> BatchFeature:
        """Preprocess an image or a list of images into ``pixel_values`` (B, C, H, W).

        Args:
            images: PIL image(s), numpy array(s) or torch tensor(s) (HWC or CHW, uint8 or float in [0, 1]);
                color images are converted to grayscale for 1-channel models.
            return_tensors: ``"pt"`` (default), ``"np"`` or ``None`` (a torch tensor).
            input_data_format: where the arrays have their channels, as in ``ViTImageProcessor``:
                ``"channels_first"``, ``"channels_last"`` or ``None`` (inferred from the shape).
            data_format: ``"channels_first"`` (default: (B, C, H, W), what the model takes) or ``"channels_last"``.
        """
        images = self._images(images, kwargs, return_tensors, input_data_format, data_format)
        transform = self._transform()
        pixel_values = torch.stack([transform(self._to_pil(image, input_data_format)) for image in images])
        return self._output(pixel_values, return_tensors, data_format)


class VitMinimalImageProcessorFast(_TimmEvalSettings, TorchvisionBackend):
    """The same preprocessing with torch and torchvision (transformers' torchvision backend, ``use_fast=True``):
    each image is converted to the model's channels as the PIL processor converts it, then the images of one size
    are resized, cropped and normalised together, on ``device`` where given. Its pixel values are the PIL
    processor's within one 8-bit level: the resize is Pillow's, done in torch (``resample.pil_resize``); equal where
    no resize is needed."""

    def preprocess(
            self,
            images: Any,
            return_tensors: Optional[str] = 'pt',
            input_data_format: Optional[str] = None,
            data_format: Optional[str] = 'channels_first',
            device: Optional[Union[str, torch.device]] = None,
            **kwargs,
    ) -> BatchFeature:
        """As ``VitMinimalImageProcessor.preprocess``; ``device``: where the images are resized and normalised."""
        images = self._images(images, kwargs, return_tensors, input_data_format, data_format)
        pixels = [torch.from_numpy(np.array(self._to_pil(image, input_data_format))) for image in images]
        steps = self._transform().transforms
        mean = torch.tensor(self.image_mean, device=device).view(-1, 1, 1)
        std = torch.tensor(self.image_std, device=device).view(-1, 1, 1)
        out: List[Optional[torch.Tensor]] = [None] * len(pixels)
        by_size: Dict[Any, List[int]] = {}
        for i, p in enumerate(pixels):
            by_size.setdefault(tuple(p.shape), []).append(i)
        for indices in by_size.values():
            batch = torch.stack([pixels[i] for i in indices]).to(device)
            batch = batch.unsqueeze(1) if batch.dim() == 3 else batch.permute(0, 3, 1, 2)  # (B, C, H, W) uint8
            batch = (self._geometry(steps, batch).float() / 255 - mean) / std
            for i, x in zip(indices, batch):
                out[i] = x
        return self._output(torch.stack(out), return_tensors, data_format)

    def _geometry(self, steps: Sequence[Any], batch: torch.Tensor) -> torch.Tensor:
        """timm's resize and crop steps on a uint8 batch: a resize to the size it gives a PIL image of the batch's size,
        done as Pillow does it (``pil_resize``); the crops and pads are torchvision's, on tensors."""
        for step in steps:
            name = type(step).__name__
            if name in ('MaybeToTensor', 'ToTensor', 'Normalize'):
                continue
            if name.startswith('Resize'):
                width, height = step(Image.new('L', (batch.shape[-1], batch.shape[-2]))).size
                batch = pil_resize(batch, (height, width), self.interpolation)
            else:
                batch = step(batch)
        return batch
