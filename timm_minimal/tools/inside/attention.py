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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, List, Optional, Sequence, Tuple, Union

import numpy as np
import torch
from PIL import Image, UnidentifiedImageError

from ...models.images import ImageTooLarge, check_image_size, convert_image, image_mode, upright
from ..common import allowed_models, create_named_model, model_label
from ...cli import UsageError, command
from .cli import DEFAULT_MODEL, build_parser

__all__ = ['AttentionMaps', 'AttentionInputError', 'attention_rollout', 'asymmetry', 'create_attention_model',
           'label_names', 'load_image', 'preprocess', 'compute_attention', 'plot_attention', 'render_attention',
           'save_figure', 'main']

CAPTION = (
    'Heads: the attention each patch receives, mean over all queries (one square-root scale for all heads). '
    'Rollout: heads averaged, + identity, rows renormalised, multiplied over the layers, mean row. '
    'S = q k\u1d40/\u221ad before the softmax (blue low, red high), A = softmax(S) by rows (square-root scale); '
    'asym = \u2016M \u2212 M\u1d40\u2016 / \u2016M\u2016.')


class AttentionInputError(UsageError):
    """A model name, image or option the attention maps cannot be made from; the message says why."""


def attention_rollout(maps: Sequence[torch.Tensor], residual: float = 0.5) -> torch.Tensor:
    """Attention rollout (Abnar & Zuidema 2020) of per-layer attentions (..., H, T, T), first layer first.

    Each layer's heads are averaged, mixed with the identity for the residual connection
    (``(1 - residual) A + residual I``) and its rows renormalised; the products R = A_L ... A_1 say how
    much each input token contributes to each output token. Returns the mean row of R (..., T): the
    contribution of each input token to the average-pooled output, non-negative and summing to one.
    """
    if len(maps) == 0:
        raise ValueError('attention_rollout needs the attention of at least one layer.')
    rollout: Optional[torch.Tensor] = None
    for attn in maps:
        a = attn.double().mean(dim=-3)
        a = (1. - residual) * a + residual * torch.eye(a.shape[-1], dtype=a.dtype, device=a.device)
        a = a / a.sum(dim=-1, keepdim=True)
        rollout = a if rollout is None else a @ rollout
    return rollout.mean(dim=-2).to(maps[0].dtype)


def asymmetry(matrix: torch.Tensor) -> float:
    """||M - M^T|| / ||M|| (Frobenius) of a square matrix: 0 when symmetric."""
    norm = matrix.norm().item()
    return (matrix - matrix.transpose(-2, -1)).norm().item() / norm if norm > 0 else 0.


@dataclass
class AttentionMaps:
    """What the figure shows for one image; T tokens, one per patch, first layer first."""
    model_name: str
    image: np.ndarray  # the model's input as displayed: (H, W) grayscale or (H, W, 3) RGB in [0, 1]
    grid: Tuple[int, int]  # patch rows and columns
    probabilities: torch.Tensor  # (classes,)
    labels: List[str]
    attentions: List[torch.Tensor]  # per layer (heads, T, T), rows sum to one
    scores: List[torch.Tensor]  # per layer (heads, T, T), the scaled scores before the softmax
    rollout: torch.Tensor  # (T,), a distribution over the patches
    random_weights: bool = False  # built without --pretrained: the title says so
    notes: List[str] = field(default_factory=list)  # what happened on the way (resizing, random weights)
    figure: Any = None  # the matplotlib Figure once plotted

    @property
    def class_index(self) -> int:
        return int(self.probabilities.argmax())

    @property
    def label(self) -> str:
        return self.labels[self.class_index]

    @property
    def probability(self) -> float:
        return float(self.probabilities[self.class_index])

    @property
    def received(self) -> List[torch.Tensor]:
        """Per layer (heads, T): the attention each patch receives, averaged over the queries."""
        return [a.mean(dim=-2) for a in self.attentions]


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
    from timm.data import create_transform, resolve_data_config
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
    from ...models.configuration_vit_minimal import VitMinimalConfig
    id2label = VitMinimalConfig.from_timm(model).id2label
    return [str(id2label[i]) for i in range(model.num_classes)]


@torch.no_grad()
def compute_attention(model: torch.nn.Module, image: Image.Image) -> AttentionMaps:
    """Prediction, per-layer attention and scores and their rollout for one image (no plotting).

    Prefix tokens (a class token, where a model has one) are left out of the maps and the rollout.
    """
    x, shown, notes = preprocess(image, model)
    model.eval()
    features, _, attentions = model.get_attention_maps(x)
    _, _, scores = model.get_attention_maps(x, pre_softmax=True)
    probabilities = model.forward_head(features).softmax(dim=-1)[0]
    skip = getattr(model, 'num_prefix_tokens', 0)
    attentions = [a[0, :, skip:, skip:] for a in attentions]
    scores = [s[0, :, skip:, skip:] for s in scores]
    return AttentionMaps(model_label(model), shown, tuple(model.patch_embed.grid_size), probabilities,
                         label_names(model), attentions, scores, attention_rollout(attentions), notes=notes)


def _overlay(ax: Any, maps: AttentionMaps, values: torch.Tensor, norm: Any) -> Any:
    """``values`` (T,) on the patch grid, drawn over a grayscale copy of the image."""
    image = maps.image if maps.image.ndim == 2 else maps.image.mean(axis=-1)
    h, w = image.shape
    ax.imshow(image, cmap='gray', vmin=0, vmax=1, interpolation='nearest')
    return ax.imshow(values.reshape(maps.grid).numpy(), cmap='inferno', norm=norm, alpha=.7,
                     interpolation='nearest', extent=(-.5, w - .5, h - .5, -.5))


def _matrix(ax: Any, matrix: torch.Tensor, kind: str, title: str) -> None:
    """A T x T matrix titled with its asymmetry: scores from their minimum (blue) to their maximum (red),
    attention from 0 on a square-root scale."""
    from matplotlib.colors import PowerNorm
    m = matrix.numpy()
    if kind == 'scores':
        ax.imshow(m, cmap='RdBu_r', interpolation='nearest')
    else:
        ax.imshow(m, cmap='viridis', norm=PowerNorm(.5, 0, float(m.max())), interpolation='nearest')
    ax.set_title(f'{title}asym {asymmetry(matrix):.2f}', fontsize=7, pad=2)


def _panel(fig: Any, spec: Any, label: str) -> Any:
    ax = fig.add_subplot(spec, label=label)
    ax.set_xticks([])
    ax.set_yticks([])
    return ax


def _colorbar(fig: Any, spec: Any, mappable: Any, label: str = '') -> None:
    cbar = fig.colorbar(mappable, cax=fig.add_subplot(spec, label='<colorbar>'))
    cbar.ax.tick_params(labelsize=6)
    cbar.set_label(label, fontsize=7)


def _top_row(fig: Any, spec: Any, maps: AttentionMaps, classes_width: float, k: int = 5) -> None:
    """Input, rollout (with its scale) and the top-``k`` class probabilities (``classes_width`` panels wide)."""
    from matplotlib.colors import Normalize
    row = spec.subgridspec(1, 5, width_ratios=[1, .1, 1, .07, classes_width])
    ax = _panel(fig, row[0], 'input')
    ax.imshow(maps.image, cmap='gray' if maps.image.ndim == 2 else None, vmin=0, vmax=1, interpolation='nearest')
    ax.set_title('model input', fontsize=8)
    ax = _panel(fig, row[2], 'rollout')
    im = _overlay(ax, maps, maps.rollout, Normalize(0, float(maps.rollout.max())))
    ax.set_title('attention rollout', fontsize=8)
    _colorbar(fig, row[3], im)
    ax = fig.add_subplot(row[4], label='classes')
    probs, idx = maps.probabilities.topk(min(k, len(maps.probabilities)))
    ax.barh(range(len(idx)), probs.tolist()[::-1], color='tab:blue')
    ax.set_yticks(range(len(idx)), [maps.labels[i] for i in idx.tolist()][::-1], fontsize=7)
    ax.set_xlim(0, 1)
    ax.tick_params(axis='x', labelsize=7)
    ax.set_title('class probabilities', fontsize=8)


def plot_attention(maps: AttentionMaps, head: int = 0, panel_inches: float = 1.25) -> Any:
    """The figure: a top row with the input, the rollout and the class probabilities; then one row per
    layer with its heads' heat maps (one scale), the scores S and the attention A = softmax(S) of
    ``head``. Axes are labelled ``input``, ``rollout``, ``classes``, ``head L.H``, ``scores L`` and
    ``attention L`` (1-based), colorbars ``<colorbar>``."""
    from matplotlib.colors import PowerNorm
    from matplotlib.figure import Figure
    layers, heads = len(maps.attentions), maps.attentions[0].shape[0]
    ratios = [1] * heads + [.07, .25, 1.1, 1.1]  # heads, their colorbar, a gap, S, A
    width = max(sum(ratios), 3.6)
    fig = Figure(figsize=(width * panel_inches + 1., (layers + 1.2) * panel_inches + 1.), layout='constrained')
    outer = fig.add_gridspec(2, 1, height_ratios=[1.2, layers])
    _top_row(fig, outer[0], maps, classes_width=width - 2.17)
    grid = outer[1].subgridspec(layers, heads + 4, width_ratios=ratios)
    received = maps.received
    norm = PowerNorm(.5, 0, max(float(r.max()) for r in received))
    for layer in range(layers):
        for h in range(heads):
            ax = _panel(fig, grid[layer, h], f'head {layer + 1}.{h + 1}')
            im = _overlay(ax, maps, received[layer][h], norm)
            if layer == 0:
                ax.set_title(f'head {h + 1}', fontsize=8)
            if h == 0:
                ax.set_ylabel(f'layer {layer + 1}', fontsize=8)
        first = layer == 0
        _matrix(_panel(fig, grid[layer, heads + 2], f'scores {layer + 1}'), maps.scores[layer][head], 'scores',
                f'scores S, head {head + 1}\n' if first else '')
        _matrix(_panel(fig, grid[layer, heads + 3], f'attention {layer + 1}'), maps.attentions[layer][head],
                'attention', 'A = softmax(S)\n' if first else '')
    _colorbar(fig, grid[:, heads], im, 'attention received')
    weights = ' (random weights)' if maps.random_weights else ''
    fig.suptitle(f"{maps.model_name}{weights}: predicted '{maps.label}' ({maps.probability:.1%})", fontsize=10)
    fig.supxlabel(CAPTION, fontsize=7, wrap=True)
    maps.figure = fig
    return fig


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
