"""An attention figure of a minimal transformer for one input: every head of every layer as a heat map over the
image, the attention rollout across the layers, and each layer's raw score matrix beside its attention. The
attention tool (``timm-minimal-attention``) draws it for an image file, the trainer for a test image of its run;
what the panels mean is in ``timm_minimal.tools.inside.attention``.
"""
from dataclasses import dataclass, field
from typing import Any, List, Optional, Sequence, Tuple

import numpy as np
import torch

__all__ = ['CAPTION', 'AttentionMaps', 'attention_rollout', 'asymmetry', 'attention_maps', 'plot_attention']

CAPTION = (
    'Heads: the attention each patch receives, mean over all queries (one square-root scale for all heads). '
    'Rollout: heads averaged, + identity, rows renormalised, multiplied over the layers, mean row. '
    'S = q k\u1d40/\u221ad before the softmax (blue low, red high), A = softmax(S) by rows (square-root scale); '
    'asym = \u2016M \u2212 M\u1d40\u2016 / \u2016M\u2016.')



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


@torch.no_grad()
def attention_maps(model: torch.nn.Module, x: torch.Tensor, shown: np.ndarray, name: str, labels: List[str],
                   notes: Optional[List[str]] = None) -> AttentionMaps:
    """Prediction, per-layer attention and scores and their rollout for one model input ``x`` (1, C, H, W), shown as
    ``shown`` (no plotting). Prefix tokens (a class token, where a model has one) are left out of the maps and the
    rollout."""
    model.eval()
    features, _, attentions = model.get_attention_maps(x)
    _, _, scores = model.get_attention_maps(x, pre_softmax=True)
    probabilities = model.forward_head(features).softmax(dim=-1)[0].float().cpu()
    skip = getattr(model, 'num_prefix_tokens', 0)
    attentions = [a[0, :, skip:, skip:].float().cpu() for a in attentions]
    scores = [s[0, :, skip:, skip:].float().cpu() for s in scores]
    return AttentionMaps(name, shown, tuple(model.patch_embed.grid_size), probabilities, labels, attentions, scores,
                         attention_rollout(attentions), notes=list(notes or []))


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
    from matplotlib.colors import PowerNorm  # lazy: matplotlib where a figure is drawn
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
    from matplotlib.colors import Normalize  # lazy: matplotlib where a figure is drawn
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
    from matplotlib.colors import PowerNorm  # lazy: matplotlib where a figure is drawn
    from matplotlib.figure import Figure  # lazy: matplotlib where a figure is drawn
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


