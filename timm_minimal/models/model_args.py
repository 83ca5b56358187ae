"""The rules a set of ``VisionTransformerMinimal`` keywords must follow, apart from the model.

The model checks its arguments here, and so does the transformers config, which can thus refuse a config without
building a model. This module imports only its siblings: it travels with a checkpoint's remote code.
"""
from typing import Any, Literal, Optional, Tuple, Union, get_args

import torch
from timm.layers import register_notrace_function, to_2tuple

from .layers import get_attn_layer
from .model_size import check_model_size

__all__ = ['PosEmbedType', 'WeightInitType', 'GlobalPoolType', 'check_model_args', 'check_input']

PosEmbedType = Literal['sincos', 'learn', 'none']
WeightInitType = Literal['', 'mimetic', 'skip']
GlobalPoolType = Literal['', 'avg', 'max', 'token']


def _check_choice(name: str, value: Any, choices: Any) -> None:
    allowed = get_args(choices)
    if value not in allowed:
        raise ValueError(f"Unknown {name} {value!r}; choose one of {', '.join(map(repr, allowed))}.")


def check_model_args(
        *, img_size: Union[int, Tuple[int, int]], patch_size: Union[int, Tuple[int, int]], in_chans: int,
        num_classes: int, global_pool: str, embed_dim: int, depth: int, num_heads: int, attn_type: str,
        use_mlp: bool, mlp_hidden_dim: int, class_token: bool, distill_token: bool, pos_embed: str,
        dynamic_img_size: bool, drop_rate: float, pos_drop_rate: float, proj_drop_rate: float, attn_drop_rate: float,
        drop_path_rate: float, **_: Any) -> None:
    """The rules a set of ``VisionTransformerMinimal`` keywords must follow (ValueError naming the keyword and
    what is allowed). The model checks its arguments here, and so does the transformers config, which can thus
    refuse a config without building a model. The attention layer's own rules live with the layer. Every keyword
    is given: the defaults are the model's signature's alone."""
    for name, value, low in (('num_classes', num_classes, 0), ('in_chans', in_chans, 1), ('depth', depth, 1),
                             ('num_heads', num_heads, 1), ('embed_dim', embed_dim, 1),
                             ('mlp_hidden_dim', mlp_hidden_dim, 1)):
        if not isinstance(value, int) or isinstance(value, bool) or value < low:
            raise ValueError(f'{name} must be an integer >= {low}, got {value!r}.')
    for name, value in (('img_size', img_size), ('patch_size', patch_size)):
        items = list(value) if isinstance(value, (tuple, list)) else [value]
        if len(items) not in (1, 2) or any(not isinstance(v, int) or isinstance(v, bool) or v < 1 for v in items):
            raise ValueError(f'{name} must be a positive integer or a pair of them, got {value!r}.')
    for name, value in (('drop_rate', drop_rate), ('pos_drop_rate', pos_drop_rate), ('proj_drop_rate', proj_drop_rate),
                        ('attn_drop_rate', attn_drop_rate), ('drop_path_rate', drop_path_rate)):
        if not isinstance(value, (int, float)) or isinstance(value, bool) or not 0 <= value < 1:
            raise ValueError(f'{name} is a probability: it must be >= 0 and < 1, got {value!r}.')
    get_attn_layer(attn_type).check_args(embed_dim, num_heads)
    _check_choice('global_pool', global_pool, GlobalPoolType)
    if global_pool == 'token' and not class_token:
        raise ValueError("global_pool='token' needs class_token=True.")
    if distill_token and global_pool == '' and num_classes:
        raise ValueError("distill_token=True needs a pooled head: global_pool 'avg', 'max' or 'token' "
                         "(or num_classes=0).")
    _check_choice('pos_embed', pos_embed, PosEmbedType)
    if pos_embed == 'sincos' and embed_dim % 4 != 0:
        raise ValueError(f"pos_embed='sincos' needs embed_dim divisible by 4, got {embed_dim}.")
    img, patch = to_2tuple(img_size), to_2tuple(patch_size)
    if not dynamic_img_size and (img[0] % patch[0] or img[1] % patch[1]):
        raise ValueError(f'img_size {tuple(img)} must be a multiple of patch_size {tuple(patch)} '
                         f'(or build the model with dynamic_img_size=True).')
    check_model_size(img_size=img_size, patch_size=patch_size, in_chans=in_chans, num_classes=num_classes,
                     embed_dim=embed_dim, depth=depth, num_heads=num_heads, use_mlp=use_mlp,
                     mlp_hidden_dim=mlp_hidden_dim, class_token=class_token, distill_token=distill_token,
                     pos_embed=pos_embed)


@register_notrace_function  # a leaf for torch.fx: its checks read shapes, which tracing cannot branch on
def check_input(x: torch.Tensor, in_chans: int, img_size: Optional[Tuple[int, int]], patch_size: Tuple[int, int],
                dynamic_img_size: bool, hint: str = '', max_tokens: int = 0) -> None:
    """The input a model takes, checked before it is read: a shape error deep inside would not say what fits
    (``hint``: how to build the model for the geometry of its checkpoint, where it was built for another), nor would
    an input of another size that makes more than ``max_tokens`` patches (the activation limit; 0: no bound)."""
    if x.dim() != 4 or x.shape[1] != in_chans:
        raise ValueError(
            f'VisionTransformerMinimal expects images of shape (B, {in_chans}, H, W) '
            f'(in_chans={in_chans}), got {list(x.shape)}.{hint}')
    H, W = x.shape[-2], x.shape[-1]
    if dynamic_img_size:
        if H < patch_size[0] or W < patch_size[1] or H % patch_size[0] or W % patch_size[1]:
            raise ValueError(f'VisionTransformerMinimal takes images whose height and width are positive multiples of '
                             f'its patch size {patch_size[0]}x{patch_size[1]}, got {H}x{W}.')
        patches = (H // patch_size[0]) * (W // patch_size[1])
        if max_tokens and patches > max_tokens:
            raise ValueError(f'VisionTransformerMinimal takes at most {max_tokens} patches an image within its activation '
                             f'limit (TIMM_MINIMAL_MAX_ACTIVATIONS), got {H}x{W}: {patches} patches; resize the image.')
    elif img_size is not None and (H != img_size[0] or W != img_size[1]):
        raise ValueError(
            f'VisionTransformerMinimal expects images of size {img_size[0]}x{img_size[1]}, '
            f'got {H}x{W}; build it with img_size=({H}, {W}) or dynamic_img_size=True.')
