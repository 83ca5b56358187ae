"""Attention maps of a minimal transformer for one image: every head of every layer as a heat map over
the image, the attention rollout across the layers, and each layer's raw score matrix beside its attention.

    timm-minimal-attention digit.png --model vit_minimal_sym_6x4.mnist --output runs/maps.png
    timm-minimal-attention photo.jpg --model vit_minimal_sym_6x4.cifar10 --output runs/maps.png

The image goes through the model's own evaluation preprocessing (its pretrained config: grayscale or RGB,
the shorter side resized to the input size and centre-cropped, mean and std); an image of another size is
resized, and a line says so. The maps come from ``VisionTransformerMinimal.get_attention_maps`` and mean
the same for every attention variant. With T tokens (one per patch; the models average-pool the tokens):

- head panels: the attention each patch receives, averaged over the T queries (the column means of the
  softmax attention A, a distribution over the patches), drawn on the patch grid over the image;
- rollout (Abnar & Zuidema 2020): per layer the heads averaged, the identity added for the residual and
  the rows renormalised, multiplied across the layers; its mean row (the pooling averages the tokens) is
  the share of each input patch in the pooled representation;
- the raw scores S = q k^T / sqrt(d) before the softmax and A = softmax(S) of one head per layer as T x T
  matrices, each titled with its asymmetry ||M - M^T|| / ||M||: S is symmetric (0) for ``sym`` and
  ``chol``; A is not, as the softmax normalises each row on its own.
"""
import io
import os
import sys
import tempfile
from pathlib import Path
from typing import Any, List, Optional, Sequence, Tuple, Union

import numpy as np
import torch
from PIL import Image, UnidentifiedImageError
from timm.data import create_transform, resolve_data_config

from ...models.images import ImageTooLarge, check_image_size, convert_image, image_mode, upright
from ..common import allowed_models, create_named_model, model_label
from ...cli import UsageError, command
from ...plots.attention import AttentionMaps, asymmetry, attention_maps, attention_rollout, plot_attention
from .cli import DEFAULT_MODEL, build_parser
from ...models.configuration_vit_minimal import VitMinimalConfig

__all__ = ['AttentionMaps', 'AttentionInputError', 'attention_rollout', 'asymmetry', 'create_attention_model',
           'label_names', 'load_image', 'preprocess', 'compute_attention', 'plot_attention', 'render_attention',
           'save_figure', 'main']


class AttentionInputError(UsageError):
    """A model name, image or option the attention maps cannot be made from; the message says why."""


def create_attention_model(name: str, pretrained: bool = False) -> torch.nn.Module:
    """Build ``name`` for attention maps, or raise ``AttentionInputError`` naming the models allowed."""
    return create_named_model(name, pretrained, AttentionInputError, ' (--random-init draws an untrained model)')


def load_image(path: Union[str, Path]) -> Image.Image:
    """Open an image file with PIL (fully decoded), or raise ``AttentionInputError``."""
    path = Path(path)
    if not path.is_file():
        raise AttentionInputError(f'no image file {path}')
    try:
        with Image.open(path) as im:
            check_image_size(*im.size, what=str(path))  # from the header, before the pixels are decoded
            im.load()
            return upright(im).copy()  # as it is shown: turned by its EXIF orientation
    except ImageTooLarge as e:
        raise AttentionInputError(str(e)) from e
    except Image.DecompressionBombError as e:
        raise AttentionInputError(f'{path} is too large to read safely ({e})') from e
    except (UnidentifiedImageError, OSError, ValueError) as e:
        raise AttentionInputError(f'cannot read {path} as an image ({type(e).__name__}: {e})') from e


def preprocess(image: Image.Image, model: torch.nn.Module) -> Tuple[torch.Tensor, np.ndarray, List[str]]:
    """The model's evaluation transform applied to ``image``: input (1, C, H, W), displayable image, notes."""
    try:
        check_image_size(*image.size)
    except ValueError as e:
        raise AttentionInputError(str(e)) from e
    cfg = resolve_data_config({}, model=model)
    chans, height, width = cfg['input_size']
    notes = []
    if image.size != (width, height):
        notes.append(f'the image is {image.size[0]}x{image.size[1]}, the model takes {width}x{height}: resized by '
                     f'its eval transform (shorter side to {min(height, width)}, centre crop {width}x{height})')
    mode = image_mode(chans)
    if image.mode != mode:
        notes.append(f'the {image.mode} image is converted to {mode} for a model with {chans} input channel(s)')
    try:
        image = convert_image(image, mode)
    except ValueError as e:  # pixel values no image has (NaN, a float range that is neither [0, 1] nor [0, 255])
        raise AttentionInputError(f'cannot read the image\'s pixels: {e}') from None
    x = create_transform(**cfg)(image).unsqueeze(0)
    mean = torch.tensor(cfg['mean']).view(-1, 1, 1)
    std = torch.tensor(cfg['std']).view(-1, 1, 1)
    shown = (x[0] * std + mean).clamp(0, 1).permute(1, 2, 0).numpy()
    return x, (shown[..., 0] if chans == 1 else shown), notes


def label_names(model: torch.nn.Module) -> List[str]:
    """Class names, those the transformers config of the model records (``id2label``)."""
    id2label = VitMinimalConfig.from_timm(model).id2label
    return [str(id2label[i]) for i in range(model.num_classes)]


@torch.no_grad()
def compute_attention(model: torch.nn.Module, image: Image.Image) -> AttentionMaps:
    """Prediction, per-layer attention and scores and their rollout for one image (no plotting)."""
    x, shown, notes = preprocess(image, model)
    return attention_maps(model, x, shown, model_label(model), label_names(model), notes)


def save_figure(fig: Any, path: Union[str, Path], dpi: int = 100) -> Path:
    """Write ``fig`` as an RGB PNG atomically: a temporary file next to ``path``, then a rename."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f'.{path.name}.', suffix='.png', dir=path.parent)
    umask = os.umask(0)
    os.umask(umask)
    try:
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp creates 0600; the PNG gets the usual permissions
        buffer = io.BytesIO()
        fig.savefig(buffer, format='png', dpi=dpi)
        buffer.seek(0)
        with os.fdopen(fd, 'wb') as f:  # RGB without the unused alpha channel: a smaller file
            Image.open(buffer).convert('RGB').save(f, format='png', optimize=True)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def render_attention(image: Union[str, Path, Image.Image], model: Union[str, torch.nn.Module] = DEFAULT_MODEL,
                     pretrained: bool = False, out: Optional[Union[str, Path]] = None, head: int = 0,
                     dpi: int = 100) -> AttentionMaps:
    """Attention maps of ``model`` (a name or a built model) for ``image`` (a file or a PIL image).

    Returns the ``AttentionMaps`` with the matplotlib figure in ``.figure``; with ``out`` the figure is
    also written there as a PNG. ``head`` picks the head whose score and attention matrices are shown.
    Raises ``AttentionInputError`` for an unknown model, an unreadable image or a head the model lacks.
    """
    # a local-dir: or hf-hub: checkpoint always loads its weights (create_named_model)
    random_weights = isinstance(model, str) and not pretrained and not model.startswith(('local-dir:', 'hf-hub:'))
    if isinstance(model, str):
        model = create_attention_model(model, pretrained)
    elif not hasattr(model, 'get_attention_maps'):
        raise AttentionInputError(f'{type(model).__name__} has no get_attention_maps; choose {allowed_models()}.')
    if not isinstance(image, Image.Image):
        image = load_image(image)
    maps = compute_attention(model, image)
    if random_weights:
        maps.random_weights = True
        maps.notes.append('random weights (--random-init): the maps show an untrained model')
    heads = maps.attentions[0].shape[0]
    if not 0 <= head < heads:
        raise AttentionInputError(f'--head {head + 1}: {maps.model_name} has heads 1 to {heads}.')
    plot_attention(maps, head)
    if out is not None:
        save_figure(maps.figure, out, dpi)
    return maps


@command('timm-minimal-attention')
def main(argv: Optional[Sequence[str]] = None) -> int:
    p = build_parser()
    args = p.parse_args(argv)
    if Path(args.output).suffix.lower() != '.png':
        p.error(f'--output {args.output}: the figure is written as a PNG; name a .png file')
    maps = render_attention(args.image, args.model, not args.random_init, None, args.head - 1)
    for note in maps.notes:
        print(f'note: {note}')
    save_figure(maps.figure, args.output, args.dpi)
    heads = maps.attentions[0].shape[0]
    print(f"{args.output}: {maps.model_name} predicts '{maps.label}' ({maps.probability:.1%}); "
          f"{len(maps.attentions)} layers x {heads} head{'s' if heads > 1 else ''}")
    return 0


if __name__ == '__main__':
    sys.exit(main())
