"""The attention maps as one picture drawn with numpy and PIL, fast enough to answer a click: the app's view.

``timm-minimal-attention`` draws its figure with matplotlib (axes, colour bars, a caption), which takes most of a
second for a 6-layer, 4-head model. The app answers every click, so it draws the same maps as a mosaic of
panels instead:

- a top row with the model input and the attention rollout over it;
- one row per layer: each head's map over a grayscale copy of the input, then the scores S and the attention
  A = softmax(S) of one head, titled with their asymmetry.

A head's map is the attention each patch receives (the mean over the queries), or, once a patch is picked, where
that patch looks: its row of A, with the patch outlined in every panel. Every head's map shares one square-root
scale, as in the figure. ``Mosaic.patch_at`` turns a click on any image panel into the patch under it.
"""
import functools
from dataclasses import dataclass, field
from typing import List, Optional, Tuple

import numpy as np
import torch
from PIL import Image, ImageDraw, ImageFont

from .attention import AttentionMaps, asymmetry

__all__ = ['Mosaic', 'draw_mosaic']

PANEL = 96  # pixels per panel side
GAP = 6
LABEL_WIDTH = 58  # the row labels on the left
TITLE = 18  # a line of text
BACKGROUND = (255, 255, 255)
OUTLINE = (0, 255, 255)  # the picked patch


@dataclass
class Mosaic:
    """The picture, and where its image panels lie (left, top) with the patch grid they show."""
    image: Image.Image
    grid: Tuple[int, int]
    panels: List[Tuple[int, int]] = field(default_factory=list)

    def patch_at(self, x: float, y: float) -> Optional[Tuple[int, int]]:
        """The (row, column) of the patch under pixel (x, y) of an image panel; None outside every one."""
        for left, top in self.panels:
            if left <= x < left + PANEL and top <= y < top + PANEL:
                return int((y - top) * self.grid[0] // PANEL), int((x - left) * self.grid[1] // PANEL)
        return None


@functools.lru_cache(maxsize=None)
def _font(size: int = 12) -> ImageFont.ImageFont:
    return ImageFont.load_default(size=size)


@functools.lru_cache(maxsize=None)
def _colormap(name: str) -> np.ndarray:
    """The 256 RGB colours of a matplotlib colour map (uint8)."""
    from matplotlib import colormaps  # lazy: matplotlib where a figure is drawn
    return (colormaps[name](np.linspace(0, 1, 256))[:, :3] * 255).astype(np.uint8)


def _colour(values: np.ndarray, cmap: str) -> np.ndarray:
    """``values`` in [0, 1] as RGB through ``cmap``."""
    return _colormap(cmap)[np.clip(np.nan_to_num(values) * 255, 0, 255).astype(np.uint8)]


def _resize(rgb: np.ndarray) -> Image.Image:
    return Image.fromarray(rgb).resize((PANEL, PANEL), Image.NEAREST)


def _input_panel(maps: AttentionMaps) -> Image.Image:
    image = np.clip(maps.image, 0, 1)
    rgb = np.repeat(image[..., None], 3, axis=-1) if image.ndim == 2 else image
    return _resize((rgb * 255).astype(np.uint8))


def _gray_base(maps: AttentionMaps) -> np.ndarray:
    """A grayscale copy of the input at the panel size (PANEL, PANEL, 1), under every map."""
    gray = maps.image if maps.image.ndim == 2 else maps.image.mean(axis=-1)
    return np.asarray(Image.fromarray((gray * 255).astype(np.uint8)).resize((PANEL, PANEL), Image.NEAREST),
                      np.float32)[..., None]


def _overlay(base: np.ndarray, values: np.ndarray, grid: Tuple[int, int], alpha: float = .7) -> Image.Image:
    """``values`` (T,) in [0, 1] on the patch grid, inferno, over ``base`` (``_gray_base``)."""
    heat = np.asarray(_resize(_colour(values.reshape(grid), 'inferno')), np.float32)
    return Image.fromarray((alpha * heat + (1 - alpha) * base).astype(np.uint8))


def _matrix_panel(matrix: torch.Tensor, kind: str, query: Optional[int]) -> Image.Image:
    """S from its minimum (blue) to its maximum (red), or A from 0 on a square-root scale; the query's row marked."""
    m = matrix.numpy().astype(np.float64)
    if kind == 'scores':
        values = (m - m.min()) / max(m.max() - m.min(), 1e-12)
    else:
        values = np.sqrt(m / max(m.max(), 1e-12))
    panel = _resize(_colour(values, 'RdBu_r' if kind == 'scores' else 'viridis'))
    if query is not None:
        rows = m.shape[0]
        top, bottom = query * PANEL // rows, (query + 1) * PANEL // rows
        ImageDraw.Draw(panel).rectangle([0, top - 1, PANEL - 1, bottom], outline=OUTLINE)
    return panel


def _outline(panel: Image.Image, patch: Tuple[int, int], grid: Tuple[int, int]) -> None:
    (r, c), (rows, cols) = patch, grid
    ImageDraw.Draw(panel).rectangle([c * PANEL // cols, r * PANEL // rows, (c + 1) * PANEL // cols - 1,
                                     (r + 1) * PANEL // rows - 1], outline=OUTLINE, width=2)


def _token(maps: AttentionMaps, patch: Tuple[int, int]) -> int:
    """The token of the patch in row ``patch[0]``, column ``patch[1]`` (row-major, no prefix tokens)."""
    return patch[0] * maps.grid[1] + patch[1]


def head_maps(maps: AttentionMaps, patch: Optional[Tuple[int, int]]) -> List[torch.Tensor]:
    """Per layer (heads, T): what each head's panel shows (received attention, or the picked patch's row of A),
    on one square-root scale for all heads and layers, in [0, 1]."""
    if patch is None:
        values = maps.received
    else:
        values = [a[:, _token(maps, patch), :] for a in maps.attentions]
    top = max(float(v.max()) for v in values) or 1.0
    return [(v / top).clamp(min=0).sqrt() for v in values]


def draw_mosaic(maps: AttentionMaps, head: int = 0, patch: Optional[Tuple[int, int]] = None) -> Mosaic:
    """The mosaic of ``maps``; with ``patch`` (row, column), where that patch looks instead of what each patch
    receives. ``head`` picks the head whose S and A are shown."""
    layers, heads = len(maps.attentions), maps.attentions[0].shape[0]
    if patch is not None and not (0 <= patch[0] < maps.grid[0] and 0 <= patch[1] < maps.grid[1]):
        raise ValueError(f'patch {patch} is outside the {maps.grid[0]} x {maps.grid[1]} patch grid')
    query = None if patch is None else _token(maps, patch)
    step = PANEL + GAP
    columns = heads + 2
    width = LABEL_WIDTH + columns * step + GAP
    height = 2 * TITLE + step + TITLE + layers * (step + TITLE) + GAP
    canvas = Image.new('RGB', (width, height), BACKGROUND)
    draw, font = ImageDraw.Draw(canvas), _font()
    mosaic = Mosaic(canvas, tuple(maps.grid))
    weights = ' (random weights)' if maps.random_weights else ''
    looking = f'; where patch ({patch[0] + 1}, {patch[1] + 1}) looks' if patch is not None else \
        '; click a patch of an image to see where it looks'
    draw.text((GAP, 3), f"{maps.model_name}{weights}: '{maps.label}' ({maps.probability:.1%}){looking}", fill=0,
              font=font)
    base = _gray_base(maps)
    top = 2 * TITLE
    rollout = (maps.rollout / max(float(maps.rollout.max()), 1e-12)).numpy()
    for i, (title, panel) in enumerate((('model input', _input_panel(maps)),
                                        ('attention rollout', _overlay(base, rollout, maps.grid)))):
        left = LABEL_WIDTH + i * step
        draw.text((left, top - TITLE + 3), title, fill=0, font=font)
        if patch is not None:
            _outline(panel, patch, maps.grid)
        canvas.paste(panel, (left, top))
        mosaic.panels.append((left, top))
    top += step + TITLE
    shown = head_maps(maps, patch)
    titles = [f'head {h + 1}' for h in range(heads)] + [f'S, head {head + 1}', 'A = softmax(S)']
    for c, title in enumerate(titles):
        draw.text((LABEL_WIDTH + c * step, top - TITLE + 3), title, fill=0, font=font)
    for layer in range(layers):
        draw.text((GAP, top + PANEL // 2 - 6), f'layer {layer + 1}', fill=0, font=font)
        for h in range(heads):
            panel = _overlay(base, shown[layer][h].numpy(), maps.grid)
            if patch is not None:
                _outline(panel, patch, maps.grid)
            left = LABEL_WIDTH + h * step
            canvas.paste(panel, (left, top))
            mosaic.panels.append((left, top))
        for c, (kind, matrix) in enumerate((('scores', maps.scores[layer][head]),
                                            ('attention', maps.attentions[layer][head]))):
            left = LABEL_WIDTH + (heads + c) * step
            canvas.paste(_matrix_panel(matrix, kind, query), (left, top))
            draw.text((left, top + PANEL + 2), f'asym {asymmetry(matrix):.2f}', fill=0, font=font)
        top += step + TITLE
    return mosaic
