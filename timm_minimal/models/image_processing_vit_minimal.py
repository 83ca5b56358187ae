"""Hugging Face image processor of the minimal vision transformers.

It applies timm's evaluation transform for the model's pretrained cfg (resize, center crop for
``crop_pct < 1``, scaling to [0, 1], mean/std normalisation) and converts images to the model's
channel count first: grayscale for 1-channel models (MNIST), RGB for 3-channel ones. The transform
is the one ``timm.data.create_transform(**timm.data.resolve_data_config({}, model=model))`` builds,
so pixel values are the same in both libraries.

The settings have one home, the model's timm ``pretrained_cfg``: a saved processor holds it, and so does the model's
``config.json``, so the processor is the same whichever file transformers reads (``config.json`` for a local timm-style
folder on 5.25, ``preprocessor_config.json`` on earlier releases and for Hub repositories). A processor given no
settings refuses; it never falls back to another model's preprocessing.

This file travels with saved checkpoints (``trust_remote_code=True``).
"""
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np
import torch
from PIL import Image
from timm.data import create_transform, resolve_data_config
from torchvision.transforms.v2 import functional as tv_functional
from torchvision.transforms.v2 import InterpolationMode
from transformers.image_processing_backends import TorchvisionBackend
from transformers.image_processing_utils import BaseImageProcessor, BatchFeature
from transformers.processing_utils import ImagesKwargs

from .configuration_vit_minimal import AUTO_MAP
from .datasets import MIN_CROP_PCT, channel_stats
from .images import CHANNEL_MODES, array_to_image, check_image_size, check_layout, convert_image, image_mode, upright

__all__ = ['VitMinimalImageProcessor', 'VitMinimalImageProcessorPil', 'VitMinimalImageProcessorFast']

# what a processor's JSON holds: its timm pretrained cfg (the one home of its settings), its class, and where remote
# code finds both classes; the settings themselves are attributes, derived from the cfg
_SAVED = ('pretrained_cfg', 'image_processor_type', 'processor_class', 'auto_map')
INTERPOLATIONS = ('nearest', 'bilinear', 'bicubic', 'box', 'hamming', 'lanczos')  # Pillow's filters, timm's names
CROP_MODES = ('center', 'squash', 'border')
# the settings of timm's evaluation transform; each is needed, but crop_mode, which is timm's 'center' when unsaid
SETTINGS = ('size', 'num_channels', 'image_mean', 'image_std', 'interpolation', 'crop_pct', 'crop_mode')
_CFG_NEEDS = ('input_size', 'mean', 'std')  # what a pretrained cfg must say itself (timm's defaults are ImageNet's)
# the keys of a processor's JSON that transformers' base classes take; config.json's model keys are not set on it
_PASSED = ('image_processor_type', 'processor_class', 'auto_map', 'feature_extractor_type')
_PROCESSOR_FILE, _CONFIG_FILE = 'preprocessor_config.json', 'config.json'
# the filters whose antialiased uint8 kernels in torchvision are Pillow's (within two 8-bit levels)
TORCHVISION_FILTERS = {'bilinear': InterpolationMode.BILINEAR, 'bicubic': InterpolationMode.BICUBIC}


class VitMinimalImageProcessorKwargs(ImagesKwargs, total=False):
    """What the processors declare to transformers beyond ``ImagesKwargs``: their settings, the timm pretrained cfg
    that gives them, and ``dtype`` (the pipeline passes it; the pipeline casts the pixel values itself)."""
    crop_pct: Optional[float]
    crop_mode: Optional[str]
    interpolation: Optional[str]
    num_channels: Optional[int]
    pretrained_cfg: Optional[Dict[str, Any]]
    dtype: Any


def settings_of_pretrained_cfg(pretrained_cfg: Any) -> Dict[str, Any]:
    """The processor settings a timm pretrained cfg gives: those of the transform timm builds for it
    (``resolve_data_config``); a cfg without its input size, mean or std is refused."""
    if not isinstance(pretrained_cfg, Mapping):
        raise TypeError(f'pretrained_cfg must be a dict (a timm pretrained cfg), got {type(pretrained_cfg).__name__}.')
    missing = [k for k in _CFG_NEEDS if pretrained_cfg.get(k) is None]
    if missing:
        raise ValueError(f'The pretrained_cfg gives no {", ".join(missing)}; a processor needs the input size, mean '
                         f'and std of its model (timm would assume ImageNet\'s).')
    data_cfg = resolve_data_config({}, pretrained_cfg=dict(pretrained_cfg), verbose=False)
    channels, height, width = data_cfg['input_size']
    return dict(size={'height': height, 'width': width}, num_channels=channels, image_mean=data_cfg['mean'],
                image_std=data_cfg['std'], interpolation=data_cfg['interpolation'], crop_pct=data_cfg['crop_pct'],
                crop_mode=data_cfg.get('crop_mode') or 'center')


def _resolve_settings(cls_name: str, pretrained_cfg: Any, given: Dict[str, Any]) -> Dict[str, Any]:
    """The settings of a processor: those of ``pretrained_cfg``, overridden by those ``given``; one that neither says
    is refused, never assumed."""
    settings = {'crop_mode': 'center', **(settings_of_pretrained_cfg(pretrained_cfg) if pretrained_cfg is not None
                                          else {}), **{k: v for k, v in given.items() if v is not None}}
    missing = [k for k in SETTINGS if settings.get(k) is None]
    if missing:
        raise ValueError(
            f'{cls_name} was given no {", ".join(missing)}: they were looked for as keywords (the keys of '
            f'preprocessor_config.json) and in pretrained_cfg (the timm pretrained cfg of config.json or '
            f'preprocessor_config.json), and there is {"no pretrained_cfg" if pretrained_cfg is None else "none there"}; '
            f'make it with {cls_name}.from_pretrained(<checkpoint folder or repository>) or '
            f'{cls_name}.from_pretrained_cfg(model.pretrained_cfg).')
    return settings


class _TimmEvalSettings:
    r"""The settings of timm's evaluation transform that both processors apply, from a model's timm pretrained cfg.

    Args:
        pretrained_cfg (`dict`, *optional*): the model's timm pretrained cfg (``input_size``, ``mean``, ``std``,
            ``interpolation``, ``crop_pct``, ``crop_mode``): it gives every setting below. It is what a saved
            processor holds, and what ``config.json`` holds too, so that either file gives the same processor.
        size (`dict`, *optional*): ``{"height": H, "width": W}`` of the model input (28x28 for MNIST).
        crop_pct (`float`, *optional*): images are resized to ``size / crop_pct`` (shortest edge) and
            center-cropped to ``size``, as in timm's evaluation transform.
        crop_mode (`str`, *optional*, defaults to ``"center"``): timm's crop mode (``center``,
            ``squash`` or ``border``).
        interpolation (`str`, *optional*): resize interpolation.
        image_mean, image_std (`list[float]`, *optional*): normalisation per channel.
        num_channels (`int`, *optional*): 1 converts images to grayscale, 3 to RGB.
        dtype (*optional*): accepted from transformers' pipeline, which casts the pixel values to the model's dtype.

    A setting given by its keyword overrides the pretrained cfg's; one that neither gives is refused with the names of
    the missing settings: no processor falls back to another model's preprocessing.
    """

    model_input_names = ['pixel_values']
    valid_kwargs = VitMinimalImageProcessorKwargs
    _auto_class = 'AutoImageProcessor'  # save_pretrained copies this file and records it in auto_map

    def __init__(
            self,
            size: Optional[Dict[str, int]] = None,
            crop_pct: Optional[float] = None,
            crop_mode: Optional[str] = None,
            interpolation: Optional[str] = None,
            image_mean: Optional[Sequence[float]] = None,
            image_std: Optional[Sequence[float]] = None,
            num_channels: Optional[int] = None,
            pretrained_cfg: Optional[Dict[str, Any]] = None,
            dtype: Any = None,
            **kwargs,
    ) -> None:
        super().__init__(**{k: v for k, v in kwargs.items() if k in _PASSED})  # not config.json's model keys
        given = dict(size=size, crop_pct=crop_pct, crop_mode=crop_mode, interpolation=interpolation,
                     image_mean=image_mean, image_std=image_std, num_channels=num_channels)
        self._set_settings(**_resolve_settings(type(self).__name__, pretrained_cfg, given))

    def _set_settings(self, size: Dict[str, int], crop_pct: float, crop_mode: str, interpolation: str,
                      image_mean: Sequence[float], image_std: Sequence[float], num_channels: int) -> None:
        if num_channels not in CHANNEL_MODES:
            raise ValueError(f'num_channels must be 1 (grayscale) or 3 (RGB), got {num_channels}.')
        size = dict(size)
        if set(size) != {'height', 'width'} or min(size.values()) < 1:
            raise ValueError(f'size must be {{"height": H, "width": W}} with positive H, W, got {size}.')
        if isinstance(crop_pct, bool) or not isinstance(crop_pct, (int, float)) or not MIN_CROP_PCT <= crop_pct <= 1:
            raise ValueError(f'crop_pct must be a number from {MIN_CROP_PCT} to 1 (images are resized to size / '
                             f'crop_pct, then centre-cropped), got {crop_pct!r}.')
        if crop_mode not in CROP_MODES:
            raise ValueError(f"Unknown crop_mode '{crop_mode}'; choose one of {', '.join(CROP_MODES)}.")
        if interpolation not in INTERPOLATIONS:
            raise ValueError(f"Unknown interpolation '{interpolation}'; choose one of {', '.join(INTERPOLATIONS)}.")
        image_mean = channel_stats([float(v) for v in image_mean], num_channels, 'image_mean')
        image_std = channel_stats([float(v) for v in image_std], num_channels, 'image_std')
        if min(image_std) <= 0:
            raise ValueError(f'image_std must be positive, got {image_std}.')
        self.size = {'height': int(size['height']), 'width': int(size['width'])}
        self.crop_pct = float(crop_pct)
        self.crop_mode = crop_mode
        self.interpolation = interpolation
        self.image_mean = image_mean
        self.image_std = image_std
        self.num_channels = num_channels

    @property
    def pretrained_cfg(self) -> Dict[str, Any]:
        """The settings as the timm pretrained cfg a saved processor holds (``timm_data_config`` as JSON)."""
        cfg = self.timm_data_config()
        return dict(cfg, input_size=list(cfg['input_size']), mean=list(cfg['mean']), std=list(cfg['std']))

    @pretrained_cfg.setter
    def pretrained_cfg(self, value: Optional[Dict[str, Any]]) -> None:
        """A cfg replaces every setting; None (what transformers' torchvision backend sets each declared keyword to
        at construction, where it was not given) changes nothing."""
        if value is not None:
            self._set_settings(**_resolve_settings(type(self).__name__, value, {}))

    @classmethod
    def from_pretrained_cfg(cls, pretrained_cfg: Dict[str, Any], **kwargs) -> '_TimmEvalSettings':
        """The processor for a timm pretrained cfg (``model.pretrained_cfg`` or ``config.pretrained_cfg``)."""
        return cls(pretrained_cfg=dict(pretrained_cfg), **kwargs)

    @classmethod
    def get_image_processor_dict(cls, pretrained_model_name_or_path: Any, **kwargs) -> Tuple[Dict[str, Any], Dict[str, Any]]:
        """transformers' reading of ``preprocessor_config.json``; where a checkpoint has none, its ``config.json``,
        whose ``pretrained_cfg`` gives the same settings (what transformers itself reads for a timm checkpoint)."""
        try:
            return super().get_image_processor_dict(pretrained_model_name_or_path, **kwargs)
        except OSError as missing:
            if kwargs.get('image_processor_filename') not in (None, _PROCESSOR_FILE):
                raise
            try:
                found = super().get_image_processor_dict(
                    pretrained_model_name_or_path, **dict(kwargs, image_processor_filename=_CONFIG_FILE))
            except OSError:
                raise missing from None
            if 'pretrained_cfg' not in found[0]:
                raise missing
            return found

    @classmethod
    def from_config(cls, config: Any, **kwargs) -> '_TimmEvalSettings':
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
        return create_transform(**self.timm_data_config(), is_training=False)

    def _to_pil(self, image: Any, layout: Optional[str] = None) -> Image.Image:
        if isinstance(image, Image.Image):
            check_image_size(*image.size)
            image = upright(image)
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
        output['pretrained_cfg'] = self.pretrained_cfg  # a property: not in the instance's __dict__
        if 'auto_map' in output:  # both processors, by the backend transformers picks
            output['auto_map'] = dict(output['auto_map'], AutoImageProcessor=AUTO_MAP['AutoImageProcessor'])
        return output


class VitMinimalImageProcessorPil(_TimmEvalSettings, BaseImageProcessor):
    """Preprocessing of a minimal vision transformer, timm's evaluation transform on PIL images (transformers' PIL
    backend: ``use_fast=False`` or ``backend="pil"``; named as transformers 5 names its PIL processors, ``...Pil``).
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


class VitMinimalImageProcessor(_TimmEvalSettings, TorchvisionBackend):
    """The same preprocessing with torch and torchvision (transformers' torchvision backend, its default):
    each image is converted to the model's channels as the PIL processor converts it, then the images of one size
    are resized, cropped and normalised together, on ``device`` where given. Its pixel values are the PIL
    processor's within two 8-bit levels: bilinear and bicubic resizes are torchvision's antialiased uint8 kernels,
    the other filters Pillow's own; equal where no resize is needed."""

    def preprocess(
            self,
            images: Any,
            return_tensors: Optional[str] = 'pt',
            input_data_format: Optional[str] = None,
            data_format: Optional[str] = 'channels_first',
            device: Optional[Union[str, torch.device]] = None,
            **kwargs,
    ) -> BatchFeature:
        """As ``VitMinimalImageProcessorPil.preprocess``; ``device``: where the images are resized and normalised."""
        images = self._images(images, kwargs, return_tensors, input_data_format, data_format)
        pixels = [torch.from_numpy(np.array(self._to_pil(image, input_data_format))) for image in images]
        steps = self._transform().transforms
        std = torch.tensor(self.image_std, device=device).view(-1, 1, 1)
        scale, shift = 1 / (255 * std), -torch.tensor(self.image_mean, device=device).view(-1, 1, 1) / std
        by_size: Dict[Any, List[int]] = {}
        for i, p in enumerate(pixels):
            by_size.setdefault(tuple(p.shape), []).append(i)
        out: Optional[torch.Tensor] = None
        for indices in by_size.values():
            batch = torch.stack([pixels[i] for i in indices]).to(device)
            batch = batch.unsqueeze(1) if batch.dim() == 3 else batch.permute(0, 3, 1, 2)  # (B, C, H, W) uint8
            batch = self._geometry(steps, batch).float().mul_(scale).add_(shift)  # (x / 255 - mean) / std in place
            if len(by_size) == 1:
                out = batch
            else:
                out = batch.new_empty((len(pixels), *batch.shape[1:])) if out is None else out
                out[indices] = batch
        return self._output(out, return_tensors, data_format)

    def _geometry(self, steps: Sequence[Any], batch: torch.Tensor) -> torch.Tensor:
        """timm's resize and crop steps on a uint8 batch: a resize to the size it gives a PIL image of the batch's size
        (``_resize``); the crops and pads are torchvision's, on tensors."""
        for step in steps:
            name = type(step).__name__
            if name in ('MaybeToTensor', 'ToTensor', 'Normalize'):
                continue
            if name.startswith('Resize'):
                width, height = step(Image.new('L', (batch.shape[-1], batch.shape[-2]))).size
                batch = self._resize(batch, (height, width))
            else:
                batch = step(batch)
        return batch

    def _resize(self, batch: torch.Tensor, size: Tuple[int, int]) -> torch.Tensor:
        """A uint8 batch (B, C, H, W) resized to ``size`` (height, width): bilinear and bicubic by torchvision's
        antialiased uint8 kernels (Pillow's filters: within two 8-bit levels of Pillow), the other filters by Pillow
        itself, image by image."""
        if tuple(batch.shape[-2:]) == tuple(size):
            return batch
        if self.interpolation in TORCHVISION_FILTERS:
            return tv_functional.resize(batch, list(size), interpolation=TORCHVISION_FILTERS[self.interpolation],
                                        antialias=True)
        resample = getattr(Image.Resampling, self.interpolation.upper())
        images = [Image.fromarray(x.squeeze(0).cpu().numpy() if x.shape[0] == 1 else x.permute(1, 2, 0).cpu().numpy())
                  for x in batch]
        out = [torch.from_numpy(np.array(im.resize((size[1], size[0]), resample))) for im in images]
        out = torch.stack(out).to(batch.device)
        return out.unsqueeze(1) if out.dim() == 3 else out.permute(0, 3, 1, 2)


class VitMinimalImageProcessorFast(VitMinimalImageProcessor):
    """``VitMinimalImageProcessor`` by its earlier name (transformers 4 named a torchvision processor ``...Fast``;
    transformers 5 names it plainly and the PIL one ``...Pil``): a folder saved with it loads as it did."""
