"""The size of a ``VisionTransformerMinimal`` from its keywords alone, checked before anything is allocated.

A config (a timm ``config.json``, a transformers ``config.json``, remote code, ``--model-kwargs``) can ask for a
model no machine holds: ``img_size`` 700000, ``depth`` 100000, ``num_classes`` 2e8, ``embed_dim`` 4e6. Every path
that builds the model checks its keywords first (``check_model_args``), and that check asks this module for an
upper bound of the parameters and of the activations of one image, and for the depth, refusing above the limits
with the field that dominates the count. ``TIMM_MINIMAL_MAX_PARAMS``, ``TIMM_MINIMAL_MAX_ACTIVATIONS`` and
``TIMM_MINIMAL_MAX_DEPTH`` raise the limits.

This module imports nothing: it travels with a checkpoint's remote code.
"""
import math
import os
from typing import Any, Dict, Tuple, Union

__all__ = ['MAX_PARAMS', 'MAX_ACTIVATIONS', 'MAX_DEPTH', 'size_terms', 'max_tokens', 'param_limit', 'check_model_size']

MAX_PARAMS = 1_000_000_000  # 4 GB of float32 weights; ViT-H has 632 million
MAX_DEPTH = 1024  # blocks: ViT-g has 40, the deepest ViTs trained a few hundred
MAX_ACTIVATIONS = 1 << 28  # values for one image in one layer (1 GiB of float32): tokens x width, heads x tokens^2


def _pair(v: Union[int, Tuple[int, int]]) -> Tuple[int, int]:
    return (v, v) if isinstance(v, int) else (int(v[0]), int(v[-1]))


def size_terms(*, img_size: Union[int, Tuple[int, int]], patch_size: Union[int, Tuple[int, int]], in_chans: int,
               num_classes: int, embed_dim: int, depth: int, num_heads: int, use_mlp: bool, mlp_hidden_dim: int,
               class_token: bool, pos_embed: str, distill_token: bool = False,
               **_: Any) -> Tuple[Dict[str, int], Dict[str, int]]:
    """Upper bounds of the parameters and of the activations per image, each by the field that makes it (the
    attention counted as the unchanged transformer's 4N^2 + 4N, the largest variant)."""
    (h, w), (ph, pw) = _pair(img_size), _pair(patch_size)
    tokens = max(1, h // ph) * max(1, w // pw) + int(bool(class_token)) + int(bool(distill_token))
    heads = 1 + int(bool(distill_token))
    n = embed_dim
    params = {
        'depth x embed_dim (the blocks)': depth * (4 * n * n + 8 * n),
        'mlp_hidden_dim': depth * (2 * n * mlp_hidden_dim + mlp_hidden_dim + n) if use_mlp else 0,
        'patch_size x in_chans x embed_dim (the patch embedding)': in_chans * ph * pw * n + n,
        'num_classes x embed_dim (the classifier)': heads * (num_classes * n + num_classes),
        'img_size / patch_size x embed_dim (the learned position table)': tokens * n if pos_embed == 'learn' else 0,
    }
    activations = {
        'img_size / patch_size x embed_dim (the tokens)': tokens * max(n, mlp_hidden_dim if use_mlp else n, 3 * n),
        'img_size / patch_size x num_heads (the attention matrix)': num_heads * tokens * tokens,
        'in_chans x img_size (the input)': in_chans * h * w,
    }
    return params, activations


def _limit(name: str, default: int) -> int:
    """A limit from the environment: a positive whole number, read as an integer where it is written as one (so a
    400-digit value is compared exactly) and otherwise as a finite float such as 2e9; ValueError naming the
    variable for anything else (inf, nan, 1.5, 0, words)."""
    text = (os.environ.get(name) or '').strip()
    if not text:
        return default
    try:
        value = int(text)
    except ValueError:
        try:
            f = float(text)
        except ValueError:
            f = math.nan
        value = int(f) if math.isfinite(f) and f.is_integer() else None
    if value is None or value < 1:
        raise ValueError(f'the environment variable {name}={text[:40]!r} must be a positive whole number of values '
                         f'(e.g. 2e9); unset it for the default {default:,}.')
    return value


def max_tokens(embed_dim: int, num_heads: int, use_mlp: bool, mlp_hidden_dim: int, distill_token: bool = False,
               **_: Any) -> int:
    """The most tokens an input may make within ``MAX_ACTIVATIONS`` (or ``TIMM_MINIMAL_MAX_ACTIVATIONS``) values per
    image in one layer, as ``size_terms`` counts them: the bound of an input of another size (``dynamic_img_size``)."""
    limit = _limit('TIMM_MINIMAL_MAX_ACTIVATIONS', MAX_ACTIVATIONS)
    width = max(embed_dim, mlp_hidden_dim if use_mlp else embed_dim, 3 * embed_dim)
    heads = num_heads + int(bool(distill_token))
    return int(min(limit // width, math.isqrt(limit // max(1, heads))))


def param_limit() -> int:
    """The most parameters a model may have: ``MAX_PARAMS``, or ``TIMM_MINIMAL_MAX_PARAMS``."""
    return _limit('TIMM_MINIMAL_MAX_PARAMS', MAX_PARAMS)


def check_model_size(**kwargs: Any) -> None:
    """Refuse keywords whose model would exceed ``MAX_PARAMS`` parameters, ``MAX_ACTIVATIONS`` values per image
    in one layer or ``MAX_DEPTH`` blocks (``ValueError`` naming the count, the field that dominates it and how to raise
    the limit). Depth is bounded apart: each block is a dozen modules whatever its width, so 200,000 blocks of width
    4 are 2% of the parameter limit and yet take minutes and gigabytes to build."""
    depth, depth_limit = kwargs['depth'], _limit('TIMM_MINIMAL_MAX_DEPTH', MAX_DEPTH)
    if depth > depth_limit:
        raise ValueError(f'depth {depth:,} is over the limit of {depth_limit:,} blocks; check the config (set '
                         f'TIMM_MINIMAL_MAX_DEPTH to raise the limit).')
    params, activations = size_terms(**kwargs)
    for what, terms, env, default in (('parameters', params, 'TIMM_MINIMAL_MAX_PARAMS', MAX_PARAMS),
                                      ('values per image in one layer', activations, 'TIMM_MINIMAL_MAX_ACTIVATIONS',
                                       MAX_ACTIVATIONS)):
        total, limit = sum(terms.values()), _limit(env, default)
        if total > limit:
            field = max(terms, key=terms.get)
            raise ValueError(f'the model would have about {total:.3g} {what}, mostly from {field}, over the limit of '
                             f'{limit:.3g}; check the config (set {env} to raise the limit).')
