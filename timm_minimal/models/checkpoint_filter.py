"""``checkpoint_filter_fn``: fit a checkpoint to a ``VisionTransformerMinimal`` where the change is well defined.

This module imports only its siblings and timm: it travels with a checkpoint's remote code.
"""
import logging
import warnings
from typing import Dict

import torch
import torch.nn as nn

from timm.layers import resample_abs_pos_embed, resample_patch_embed

from .weights_check import check_finite_weights

__all__ = ['checkpoint_filter_fn', 'DISTILL_KEYS']

_logger = logging.getLogger(__name__)

_WRAPPER_PREFIXES = ('module.', '_orig_mod.', 'timm_model.', 'vit_minimal.')
# what a model built with distill_token=True has beyond the same model without (a training device of DeiT's)
DISTILL_KEYS = ('dist_token', 'head_dist.weight', 'head_dist.bias')


def checkpoint_filter_fn(state_dict: Dict[str, torch.Tensor], model: nn.Module) -> Dict[str, torch.Tensor]:
    """Fit a checkpoint to ``model`` where the change is well defined.

    - unwraps ``{'model': ...}`` / ``{'state_dict': ...}`` and strips DDP, ``torch.compile`` and
      Hugging Face wrapper prefixes;
    - resamples a learned position embedding to the model's patch grid;
    - resamples the patch embedding to the model's patch size (the channel count is left to timm's
      ``load_pretrained``, which adapts ``pretrained_cfg['first_conv']`` from the tag's ``input_size``, as for
      timm's own ViT);
    - drops a classifier whose shape does not fit the model's ``num_classes`` (the head is then
      newly initialised);
    - gives a model with a distillation token (``distill_token=True``) the token and head of its own
      initialisation where the checkpoint has none (a student fine-tuned from a model trained without).
    Anything else that does not fit is left for ``load_state_dict`` to report by name.
    """
    state_dict = state_dict.get('model', state_dict)
    state_dict = state_dict.get('state_dict', state_dict)
    check_finite_weights(state_dict)
    model_sd = model.state_dict()
    out_dict = {}
    for k, v in state_dict.items():
        for prefix in _WRAPPER_PREFIXES:
            if k.startswith(prefix):
                k = k[len(prefix):]
        target = model_sd.get(k)
        if target is not None and v.shape != target.shape:
            if k == 'pos_embed':
                v = resample_abs_pos_embed(v, new_size=model.patch_embed.grid_size, num_prefix_tokens=0, verbose=True)
            elif k == 'patch_embed.proj.weight' and v.shape[-2:] != target.shape[-2:]:
                v = resample_patch_embed(v, list(target.shape[-2:]), verbose=True)
            elif k in ('head.weight', 'head.bias', 'head_dist.weight', 'head_dist.bias'):
                _logger.debug(f'Dropping {k} {tuple(v.shape)}: the model has {model.num_classes} classes.')
                continue
        out_dict[k] = v
    missing = [k for k in DISTILL_KEYS if k in model_sd and k not in out_dict]
    if missing:
        if 'head.weight' in out_dict and any(k.startswith('head_dist.') for k in missing):
            warnings.warn(f'The checkpoint has no distillation token or head ({", ".join(missing)}): they keep their '
                          f'initialisation, and until they are trained the model predicts the mean of the '
                          f'checkpoint\'s head and an untrained one, below the checkpoint\'s accuracy; train them '
                          f'(timm\'s distillation task), or build the model without distill_token=True.', UserWarning,
                          stacklevel=2)
        out_dict.update({k: model_sd[k] for k in missing})
    return out_dict
