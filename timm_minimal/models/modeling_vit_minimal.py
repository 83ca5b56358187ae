"""Hugging Face ``transformers`` models of the minimal vision transformers.

``VitMinimalModel`` (features) and ``VitMinimalForImageClassification`` hold one
``VisionTransformerMinimal`` under ``self.vit_minimal`` and call it; the math lives there only.

Checkpoint format: ``save_pretrained`` writes ``model.safetensors`` with the plain timm keys
(``blocks.0.attn.qkv.weight``, ``head.weight``...), so the same file loads with
``timm.create_model('local-dir:<folder>', pretrained=True)``. ``from_pretrained`` adds the
``vit_minimal.`` prefix back (transformers' base-model-prefix handling) and fails, naming the keys,
when the file does not fit the config (missing, unexpected or mis-shaped tensors).

This file travels with saved checkpoints (``trust_remote_code=True``): it imports only the
model's own modules, relatively.
"""
import contextlib
import inspect
import os
import re
from pathlib import Path
from typing import Any, Dict, Optional, Tuple, Union

import torch
import torch.nn as nn
from huggingface_hub import utils as hub_utils
from safetensors import safe_open
from safetensors.torch import load_file
from transformers import initialization as init
from transformers import PreTrainedModel
from transformers.modeling_outputs import BaseModelOutputWithPooling, ImageClassifierOutput
from transformers.utils import logging as hf_logging, cached_file

from .configuration_vit_minimal import VitMinimalConfig, timm_model
from .image_processing_vit_minimal import VitMinimalImageProcessor
from .layers import CholAttention, MinimalAttention
from .vit_minimal import VisionTransformerMinimal, init_module
from .weights_check import check_recorded_keywords, save_weights_file, weights_record

__all__ = ['VitMinimalPreTrainedModel', 'VitMinimalModel', 'VitMinimalForImageClassification']

_PREFIX = 'vit_minimal.'
_LOSS_KWARGS = ('num_items_in_batch', 'ignore_index')


_HEADS = ('head.', 'head_dist.')  # the classifiers: the head and, with a distillation token, its own


def _weights_file(name_or_path: Any, kwargs: Dict[str, Any]) -> Optional[str]:
    """The ``model.safetensors`` that ``from_pretrained(name_or_path, **kwargs)`` read (a local folder's, or the Hub
    cache's copy); None where the weights came from elsewhere (a state dict, a single file, another format)."""
    if kwargs.get('state_dict') is not None or name_or_path is None or os.path.isfile(str(name_or_path)):
        return None
    hub = {k: kwargs[k] for k in ('cache_dir', 'revision', 'subfolder', 'token') if kwargs.get(k) is not None}
    return cached_file(str(name_or_path), 'model.safetensors', local_files_only=True, **hub,
                       _raise_exceptions_for_missing_entries=False, _raise_exceptions_for_connection_errors=False)


def _record_keywords(folder: Union[str, os.PathLike], model_kwargs: Dict[str, Any]) -> None:
    """Add the function keywords (``weights_record``) to the metadata of the safetensors files transformers wrote."""
    for path in sorted(Path(folder).glob('model*.safetensors')):
        with safe_open(str(path), 'pt') as f:
            metadata = dict(f.metadata() or {})
        save_weights_file(load_file(str(path)), path, {**metadata, **weights_record(model_kwargs)})


def _strip_prefix(key: str) -> str:
    return key[len(_PREFIX):] if key.startswith(_PREFIX) else key


@contextlib.contextmanager
def _without_progress_bars():
    """transformers draws a bar over the tensors it loads and the shards it writes, and huggingface_hub one per
    download; these checkpoints hold a few dozen tensors and at most a few MB, so the bars would only flash by. They
    are off for the call, then as they were."""
    bars, hub_bars = hf_logging.is_progress_bar_enabled(), not hub_utils.are_progress_bars_disabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if bars:
            hf_logging.enable_progress_bar()
        (hub_utils.enable_progress_bars if hub_bars else hub_utils.disable_progress_bars)()


class VitMinimalPreTrainedModel(PreTrainedModel):
    """Shared loading, saving and initialisation of the minimal vision transformers."""

    config: VitMinimalConfig
    config_class = VitMinimalConfig
    base_model_prefix = 'vit_minimal'
    main_input_name = 'pixel_values'
    input_modalities = ('image',)
    supports_gradient_checkpointing = True
    _supports_sdpa = True  # every attention variant runs on F.scaled_dot_product_attention ('eager' is also fine)
    _no_split_modules = ['Block']
    # keys a checkpoint may hold that this class does not use (e.g. the classifier, for the base model)
    _unused_checkpoint_keys: Tuple[str, ...] = ()

    vit_minimal: VisionTransformerMinimal

    def _build_vit_minimal(self, config: VitMinimalConfig, num_classes: int) -> VisionTransformerMinimal:
        return VisionTransformerMinimal(**config.model_kwargs(), num_classes=num_classes)

    # -- initialisation ------------------------------------------------------------------------------

    @torch.no_grad()
    def _init_weights(self, module: nn.Module) -> None:
        """timm's ViT initialisation (truncated normal weights, zero biases), for parameters that were not
        loaded, and recomputation of the buffers checkpoints do not hold (they are left uninitialised when
        transformers builds the model on the meta device)."""
        if isinstance(module, (VisionTransformerMinimal, CholAttention)):
            module.init_non_persistent_buffers()
        init_module(module, self.config.initializer_range, init, reset_defaults=True)  # guarded: loaded ones stay

    # -- attention implementation and gradient checkpointing -------------------------------------------

    def _sync_attn_implementation(self) -> None:
        """'eager' runs the explicit softmax path of every attention layer, anything else SDPA; the layers are
        set when the implementation changes, not on every forward."""
        implementation = self.config._attn_implementation
        if getattr(self, '_synced_attn_implementation', None) == implementation:
            return
        fused = implementation != 'eager'
        for module in self.vit_minimal.modules():
            if isinstance(module, MinimalAttention):
                module.fused_attn = fused
        self._synced_attn_implementation = implementation

    def _set_gradient_checkpointing(self, enable: bool = True, gradient_checkpointing_func=None, every_n_layers=1):
        self.vit_minimal.set_grad_checkpointing(enable)

    @property
    def gradient_checkpointing(self) -> bool:
        return bool(self.vit_minimal.grad_checkpointing)

    def get_input_embeddings(self) -> nn.Module:
        return self.vit_minimal.patch_embed

    # -- checkpoint format: plain timm keys on disk ----------------------------------------------------

    def save_pretrained(
            self,
            save_directory: Union[str, os.PathLike],
            is_main_process: bool = True,
            state_dict: Optional[Dict[str, torch.Tensor]] = None,
            push_to_hub: bool = False,
            save_image_processor: bool = True,
            **kwargs,
    ):
        """Save ``config.json``, ``model.safetensors`` (plain timm keys), ``preprocessor_config.json``
        (unless ``save_image_processor=False``) and the modeling code, so that the folder loads with
        transformers (with or without ``timm_minimal`` installed) and with timm (``local-dir:``)."""
        if state_dict is None:
            state_dict = self.state_dict()
        state_dict = {_strip_prefix(k): v for k, v in state_dict.items()}
        hub_kwargs = {k: kwargs.pop(k) for k in ('repo_id', 'commit_message', 'create_pr', 'private', 'token',
                                                  'revision', 'commit_description') if k in kwargs}
        if 'token' in hub_kwargs:
            kwargs['token'] = hub_kwargs['token']
        with _without_progress_bars():
            result = super().save_pretrained(
                save_directory, is_main_process=is_main_process, state_dict=state_dict, push_to_hub=False, **kwargs)
        if is_main_process:
            _record_keywords(save_directory, self.vit_minimal.init_kwargs)
        if save_image_processor and is_main_process:
            VitMinimalImageProcessor.from_config(self.config).save_pretrained(save_directory)
        if push_to_hub:  # upload the whole folder (push_to_hub saves into a temporary folder with this method)
            repo_id = hub_kwargs.pop('repo_id', os.path.basename(os.path.normpath(str(save_directory))))
            self.push_to_hub(repo_id, **hub_kwargs)
        return result

    def load_state_dict(self, state_dict: Dict[str, torch.Tensor], strict: bool = True, assign: bool = False):
        """Load a state dict with plain timm keys (as in ``model.safetensors``) or prefixed ones.

        With ``strict=True`` every key and shape is checked first, so a failing load changes nothing.
        """
        state_dict = {k if k.startswith(_PREFIX) else _PREFIX + k: v for k, v in state_dict.items()}
        if strict:
            own = self.state_dict()
            missing = sorted(_strip_prefix(k) for k in own.keys() - state_dict.keys())
            unexpected = sorted(_strip_prefix(k) for k in state_dict.keys() - own.keys()
                                if not _strip_prefix(k).startswith(self._unused_checkpoint_keys))
            mismatched = [(_strip_prefix(k), tuple(v.shape), tuple(own[k].shape))
                          for k, v in sorted(state_dict.items()) if k in own and v.shape != own[k].shape]
            if missing or unexpected or mismatched:
                raise RuntimeError(_mismatch_message(type(self).__name__, self.config, missing, unexpected, mismatched))
            state_dict = {k: v for k, v in state_dict.items() if k in own}
        return super().load_state_dict(state_dict, strict=strict, assign=assign)

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path, *model_args, **kwargs):
        """transformers' ``from_pretrained``, strict: missing, unexpected or mis-shaped tensors raise an
        error naming them (transformers would only warn and initialise them randomly). With
        ``ignore_mismatched_sizes=True`` a classifier of another size (or none) is re-initialised,
        e.g. to fine-tune on a new number of classes (``num_labels=...``)."""
        output_loading_info = kwargs.pop('output_loading_info', False)
        ignore_mismatched_sizes = kwargs.pop('ignore_mismatched_sizes', False)
        with _without_progress_bars():
            model, info = super().from_pretrained(
                pretrained_model_name_or_path, *model_args, output_loading_info=True, ignore_mismatched_sizes=True,
                **kwargs)
        new_head = _HEADS if ignore_mismatched_sizes else ()
        missing = sorted(k for k in map(_strip_prefix, info['missing_keys']) if not k.startswith(new_head))
        unexpected = sorted(k for k in map(_strip_prefix, info['unexpected_keys'])
                            if not k.startswith(model._unused_checkpoint_keys))
        mismatched = [(_strip_prefix(k), tuple(a), tuple(b)) for k, a, b in sorted(info['mismatched_keys'])
                      if not (ignore_mismatched_sizes and _strip_prefix(k).startswith(new_head))]
        if missing or unexpected or mismatched:
            raise RuntimeError(_mismatch_message(
                cls.__name__, model.config, missing, unexpected, mismatched, source=str(pretrained_model_name_or_path)))
        weights = _weights_file(pretrained_model_name_or_path, kwargs)
        if weights is not None:
            inner = model.vit_minimal
            check_recorded_keywords(weights, inner.init_kwargs, inner.num_classes)
        return (model, info) if output_loading_info else model

    # -- conversion from timm ------------------------------------------------------------------------

    @classmethod
    def from_timm(cls, model_or_name: Any, **kwargs) -> 'VitMinimalPreTrainedModel':
        """This class with the weights of a timm model: a ``VisionTransformerMinimal`` instance (e.g. a
        trained run) or a registered name (``kwargs`` go to ``timm.create_model``, e.g. ``pretrained=True``)."""
        model_or_name = timm_model(model_or_name, **kwargs)
        config = VitMinimalConfig.from_timm(model_or_name)
        model = cls(config)
        model.load_state_dict(model_or_name.state_dict())
        return model.train(model_or_name.training)

    def to_timm(self) -> VisionTransformerMinimal:
        """The wrapped timm model (shared, not a copy), with a timm ``pretrained_cfg`` attached."""
        self.vit_minimal.pretrained_cfg = dict(
            self.config.timm_pretrained_cfg(), architecture=self.config.architecture,
            num_classes=self.vit_minimal.num_classes)
        return self.vit_minimal

    # -- forward -------------------------------------------------------------------------------------

    def _check_kwargs(self, kwargs: Dict[str, Any], allowed: Tuple[str, ...] = ()) -> None:
        unexpected = sorted(set(kwargs) - set(allowed))
        if unexpected:
            params = [p for p in inspect.signature(self.forward).parameters if p != 'kwargs']
            raise TypeError(f'{type(self).__name__}.forward got unexpected arguments {unexpected}; it takes '
                            f'{", ".join(params + list(allowed))}.')

    @contextlib.contextmanager
    def _input_size(self, pixel_values: torch.Tensor, interpolate_pos_encoding: Optional[bool]):
        """transformers' ``interpolate_pos_encoding=True``, as ``ViTModel`` takes it: another input size for this
        call, the position embedding resampled to its patch grid (what ``dynamic_img_size=True`` in the config does
        for every call). Without it, another size is refused by name, as ``ViTModel`` refuses it. The wrapped model is
        switched for the call and back after it, so one model must not serve such a call and another at once."""
        vit = self.vit_minimal
        size, own = tuple(pixel_values.shape[-2:]), tuple(vit.patch_embed.img_size)
        if vit.dynamic_img_size or size == own or pixel_values.dim() != 4 or pixel_values.shape[1] != vit.in_chans:
            yield  # the model's own check names what is wrong with the channels
            return
        if not interpolate_pos_encoding:
            raise ValueError(f"Input image size ({size[0]}*{size[1]}) doesn't match model ({own[0]}*{own[1]}): resize "
                             f'it (the image processor does), or pass interpolate_pos_encoding=True.')
        vit.set_dynamic_img_size(True)
        try:
            yield
        finally:
            vit.set_dynamic_img_size(False)

    def _run(self, pixel_values: Optional[torch.Tensor], output_attentions: Optional[bool],
             output_hidden_states: Optional[bool], interpolate_pos_encoding: Optional[bool]):
        if pixel_values is None:
            raise ValueError('pixel_values is required: images of shape (batch, channels, height, width).')
        if not isinstance(pixel_values, torch.Tensor):
            raise TypeError(f'pixel_values must be a torch.Tensor, got {type(pixel_values).__name__}; '
                            f'use the image processor to convert images.')
        self._sync_attn_implementation()
        output_attentions = self.config.output_attentions if output_attentions is None else output_attentions
        output_hidden_states = (self.config.output_hidden_states if output_hidden_states is None
                                else output_hidden_states)
        pixel_values = pixel_values.to(device=self.device, dtype=self.dtype)
        with self._input_size(pixel_values, interpolate_pos_encoding):
            if output_attentions or output_hidden_states:
                features, hidden_states, attentions = self.vit_minimal.get_attention_maps(
                    pixel_values, attentions=bool(output_attentions))
                hidden_states = tuple(hidden_states) if output_hidden_states else None
                attentions = tuple(attentions) if output_attentions else None
            else:
                features, hidden_states, attentions = self.vit_minimal.forward_features(pixel_values), None, None
        return features, hidden_states, attentions


class VitMinimalModel(VitMinimalPreTrainedModel):
    """The minimal vision transformer without classifier: token features and pooled features.

    ``last_hidden_state`` (B, T, N) is the output of the last block (after the final norm, if any);
    ``pooler_output`` (B, N) is the pooled representation the classifier would see. ``hidden_states``
    holds the embedding output and every block's output (depth + 1 tensors), ``attentions`` the
    softmax attention of every block, (B, heads, T, T). ``interpolate_pos_encoding=True`` takes images of another
    size (sides that are multiples of the patch size), and ``add_pooling_layer=False`` (at construction, or through
    ``from_pretrained``) leaves ``pooler_output`` out, as in ``ViTModel``; the pooling has no weights of its own.
    """

    _auto_class = 'AutoModel'
    _unused_checkpoint_keys = _HEADS  # a classification checkpoint loads into the base model
    _keys_to_ignore_on_load_unexpected = [f'^{re.escape(head)}' for head in _HEADS]

    def __init__(self, config: VitMinimalConfig, add_pooling_layer: bool = True) -> None:
        super().__init__(config)
        self.add_pooling_layer = add_pooling_layer  # ViTModel's switch: False leaves pooler_output None
        self.vit_minimal = self._build_vit_minimal(config, num_classes=0)
        self.post_init()

    def forward(
            self,
            pixel_values: Optional[torch.Tensor] = None,
            output_attentions: Optional[bool] = None,
            output_hidden_states: Optional[bool] = None,
            interpolate_pos_encoding: Optional[bool] = None,
            return_dict: Optional[bool] = None,
            **kwargs,
    ) -> Union[BaseModelOutputWithPooling, Tuple[torch.Tensor, ...]]:
        self._check_kwargs(kwargs)
        features, hidden_states, attentions = self._run(
            pixel_values, output_attentions, output_hidden_states, interpolate_pos_encoding)
        pooled = self.vit_minimal.forward_head(features, pre_logits=True) if self.add_pooling_layer else None
        output = BaseModelOutputWithPooling(
            last_hidden_state=features,
            pooler_output=pooled,
            hidden_states=hidden_states,
            attentions=attentions,
        )
        return_dict = self.config.return_dict if return_dict is None else return_dict
        return output if return_dict else output.to_tuple()


class VitMinimalForImageClassification(VitMinimalPreTrainedModel):
    """The minimal vision transformer with its linear classifier (``config.num_labels`` classes).

    Returns ``ImageClassifierOutput``: ``logits``, the loss when ``labels`` are given
    (cross-entropy for integer labels; see transformers' ``problem_type``), and on request
    ``hidden_states`` (embedding output + every block output) and ``attentions`` (B, heads, T, T);
    ``interpolate_pos_encoding=True`` takes images of another size, as ``ViTForImageClassification`` does.
    """

    _auto_class = 'AutoModelForImageClassification'

    def __init__(self, config: VitMinimalConfig) -> None:
        super().__init__(config)
        self.num_labels = config.num_labels
        self.vit_minimal = self._build_vit_minimal(config, num_classes=config.num_labels)
        self.post_init()

    def forward(
            self,
            pixel_values: Optional[torch.Tensor] = None,
            labels: Optional[torch.Tensor] = None,
            output_attentions: Optional[bool] = None,
            output_hidden_states: Optional[bool] = None,
            interpolate_pos_encoding: Optional[bool] = None,
            return_dict: Optional[bool] = None,
            **kwargs,
    ) -> Union[ImageClassifierOutput, Tuple[torch.Tensor, ...]]:
        self._check_kwargs(kwargs, _LOSS_KWARGS)  # what transformers' Trainer passes on to the loss
        features, hidden_states, attentions = self._run(
            pixel_values, output_attentions, output_hidden_states, interpolate_pos_encoding)
        logits = self.vit_minimal.forward_head(features)
        loss = None
        if labels is not None:
            loss = self.loss_function(labels, logits, self.config, **kwargs)
        output = ImageClassifierOutput(loss=loss, logits=logits, hidden_states=hidden_states, attentions=attentions)
        return_dict = self.config.return_dict if return_dict is None else return_dict
        return output if return_dict else output.to_tuple()


def _mismatch_message(cls_name: str, config: VitMinimalConfig, missing, unexpected, mismatched,
                      source: Optional[str] = None) -> str:
    lines = [f"Cannot load {'the checkpoint ' + repr(source) if source else 'this state dict'} into {cls_name} "
             f"({config.architecture}, model_args as in config.json): the tensors do not fit the architecture."]
    if missing:
        lines.append(f'  missing keys ({len(missing)}): {", ".join(missing)}')
    if unexpected:
        lines.append(f'  unexpected keys ({len(unexpected)}): {", ".join(unexpected)}')
    if mismatched:
        lines.append(f'  mis-shaped ({len(mismatched)}): ' + ', '.join(
            f'{k} is {list(a)} in the checkpoint, {list(b)} in the model' for k, a, b in mismatched))
    lines.append('  Check that the weights belong to this config (attention variant, MLP, depth, heads, width). '
                 'To train a new classifier, pass ignore_mismatched_sizes=True (with num_labels=...).')
    return '\n'.join(lines)
