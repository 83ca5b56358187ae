"""Minimal vision transformers as timm architectures.

The model of "Reducing the Transformer Architecture to a Minimum" (Bermeitinger et al., KDIR 2024,
arXiv:2410.13732): a ViT whose attention can be collapsed (``qk``, ``qkonly``), made symmetric
(``sym``, ``chol``) or left unchanged (``std``), with or without the MLP. The attention variants
live in ``timm_minimal.models.layers``; this module holds the model, its pretrained configs and the
registered architectures ``vit_minimal_<attention>[_mlp]_<depth>x<heads>``.

Geometry follows the pretrained tag: ``.mnist`` (1x28x28, 7x7 patches, 16 tokens), ``.cifar10``
(3x32x32, 4x4 patches, 64 tokens), ``.in1k`` (3x224x224, 16x16 patches, 196 tokens). The
paper's width N = 60 and MLP width 256 are the defaults.
"""
import inspect
import logging
from typing import Any, Dict, List, Optional, Set, Tuple, Type, Union

import torch
import torch.nn as nn
from safetensors import SafetensorError
from torch.jit import Final

from timm.layers import Format, PatchEmbed, resample_abs_pos_embed
from timm.models import build_model_with_cfg, generate_default_cfgs, is_model
from timm.models import register_model as _timm_register_model
from timm.models._features import feature_take_indices
from timm.models._manipulate import checkpoint, checkpoint_seq
from timm.models._pretrained import PretrainedCfg
from timm.models._registry import get_arch_pretrained_cfgs, get_pretrained_cfg
from timm.models.vision_transformer import global_pool_nlc
try:  # timm 1.0.31 records a resize for its save_for_hf; remote code may run on an older timm, which has no record
    from timm.models._input import update_model_input_size
except ImportError:
    update_model_input_size = None

from .checkpoint_filter import checkpoint_filter_fn
from .config_checks import check_architecture, check_config_values
from .datasets import DATASETS
from .layers import Block, CholAttention, MimeticInit, MinimalAttention, get_attn_layer, sincos_2d_pos_embed
from .model_args import GlobalPoolType, PosEmbedType, WeightInitType, _check_choice, check_input, check_model_args
from .model_size import check_model_size, max_tokens
from .pretrained import (  # noqa: F401  (HUB_ORG, WEIGHTS_DIR: where the weights are, also reachable here)
    HUB_ORG, WEIGHTS_DIR, RECIPE_TAGS, _cfg, _weights, check_shipped_file, check_tag, tag_dataset, tag_geometry,
    tags_with_weights,
)
from .weights_check import check_recorded_keywords, check_weights_fit, head_classes, loaded_weights_file, weights_file

__all__ = ['VisionTransformerMinimal', 'checkpoint_filter_fn', 'check_model_args', 'DATASETS', 'ARCHITECTURES',
           'NoPretrainedWeights']

_logger = logging.getLogger(__name__)


torch.fx.wrap('check_input')  # a leaf for torch.fx.symbolic_trace itself (timm's tracer: see model_args)


def init_module(module: nn.Module, std: float = .02, init: Any = nn.init, reset_defaults: bool = False) -> None:
    """timm's ViT initialisation of one module's own parameters: the position table and the attention's
    Cholesky factor truncated normal (``std``), the class token normal (1e-6), linear weights truncated normal
    and biases zero; with ``reset_defaults`` convolutions and norms get torch's defaults back. ``init`` holds the
    init functions (``torch.nn.init``, or transformers' guarded ones, which leave loaded tensors alone). The
    timm model and the transformers classes both initialise through this function."""
    if isinstance(module, VisionTransformerMinimal):
        if module.pos_embed is not None:
            init.trunc_normal_(module.pos_embed, std=std)
        if module.cls_token is not None:
            init.normal_(module.cls_token, std=1e-6)
        if module.dist_token is not None:
            init.trunc_normal_(module.dist_token, std=std)
    elif isinstance(module, CholAttention):
        init.trunc_normal_(module.tril, std=std)
    elif isinstance(module, nn.Linear):
        init.trunc_normal_(module.weight, std=std)
        if module.bias is not None:
            init.zeros_(module.bias)
    elif reset_defaults and isinstance(module, (nn.Conv2d, nn.LayerNorm)):
        module.reset_parameters()


class VisionTransformerMinimal(nn.Module):
    """A vision transformer reduced to the parts the paper keeps.

    Patch embedding (Linear over p x p x C patches, written as a strided conv), a fixed 2-D sin-cos
    position embedding (or a learned one, or none), ``depth`` blocks of the chosen attention with
    or without MLP, average pooling over the tokens and a linear classifier. No class token and no
    final norm by default, as the paper's parameter counts imply.
    """
    dynamic_img_size: Final[bool]
    in_chans: Final[int]
    num_prefix_tokens: Final[int]
    pos_embed_type: Final[str]

    def __init__(
            self,
            img_size: Union[int, Tuple[int, int]] = 28,
            patch_size: Union[int, Tuple[int, int]] = 7,
            in_chans: int = 1,
            num_classes: int = 10,
            global_pool: GlobalPoolType = 'avg',
            embed_dim: int = 60,
            depth: int = 6,
            num_heads: int = 1,
            attn_type: str = 'std',
            use_mlp: bool = False,
            mlp_hidden_dim: int = 256,
            qkv_bias: bool = True,
            class_token: bool = False,
            distill_token: bool = False,
            pos_embed: PosEmbedType = 'sincos',
            final_norm: bool = False,
            dynamic_img_size: bool = False,
            drop_rate: float = 0.,
            pos_drop_rate: float = 0.,
            proj_drop_rate: float = 0.,
            attn_drop_rate: float = 0.,
            drop_path_rate: float = 0.,
            weight_init: WeightInitType = '',
            norm_layer: Type[nn.Module] = nn.LayerNorm,
            act_layer: Type[nn.Module] = nn.GELU,
            device: Optional[Union[str, torch.device]] = None,
            dtype: Optional[torch.dtype] = None,
    ) -> None:
        """
        Args:
            img_size: Input image size.
            patch_size: Patch size (the patch embedding's kernel and stride).
            in_chans: Number of input image channels.
            num_classes: Number of classes of the classifier head (0 for none).
            global_pool: Token pooling: 'avg' (the paper's), 'max', 'token' (needs class_token) or '' (none).
            embed_dim: Transformer width N.
            depth: Number of blocks.
            num_heads: Number of attention heads ('qk', 'qkonly' and 'chol' take 1).
            attn_type: Attention variant, one of timm_minimal.models.layers.ATTENTION_LAYERS.
            use_mlp: Keep the position-wise MLP in each block.
            mlp_hidden_dim: Hidden width of the MLP.
            qkv_bias: Bias on the query/key/value maps.
            class_token: Prepend a learned class token.
            distill_token: A distillation token (DeiT's) after the class token, with its own classifier
                ``head_dist``: after ``set_distilled_training()`` the model in training returns (logits, distillation
                logits) for timm's ``TokenDistillationTask``, and otherwise the mean of the two.
            pos_embed: 'sincos' (fixed 2-D sin-cos, no parameters), 'learn' (learned table) or 'none'.
            final_norm: LayerNorm after the last block.
            dynamic_img_size: Accept any input size that is a multiple of the patch size.
            drop_rate: Dropout before the classifier.
            pos_drop_rate: Dropout after the position embedding.
            proj_drop_rate: Dropout after attention and MLP projections.
            attn_drop_rate: Dropout on the attention weights.
            drop_path_rate: Stochastic depth rate (linearly increasing over blocks).
            weight_init: '' for timm's ViT initialisation, 'mimetic' for that with each attention layer's maps
                set by ``init_mimetic`` (W_Q W_K^T near a multiple of the identity, W_V W_O near minus one),
                'skip' to leave parameters as constructed.
            norm_layer: Normalisation layer.
            act_layer: MLP activation.
            device: Where the parameters are made (timm's factory passes it).
            dtype: The parameters' floating-point type (timm's factory passes it).
        """
        super().__init__()
        # The construction arguments, so that a config file can describe this model exactly.
        args = locals()
        self.init_kwargs: Dict[str, Any] = {k: args[k] for k in (*MODEL_KEYWORDS, 'norm_layer', 'act_layer')}
        check_model_args(**self.init_kwargs)
        self.max_tokens = max_tokens(**self.init_kwargs)  # an input of another size is bounded by this (check_input)
        attn_layer = get_attn_layer(attn_type)

        self.num_classes = num_classes
        self.global_pool = global_pool
        self.num_features = self.head_hidden_size = self.embed_dim = embed_dim
        self.in_chans = in_chans
        self.attn_type = attn_type
        self.num_prefix_tokens = int(class_token) + int(distill_token)
        self.distilled_training = False
        self.input_hint = ''  # set where a tag's checkpoint has another channel count than the model was built for
        self.pos_embed_type = pos_embed
        self.grad_checkpointing = False

        self.patch_embed = PatchEmbed(
            img_size=img_size,
            patch_size=patch_size,
            in_chans=in_chans,
            embed_dim=embed_dim,
        )
        self.set_dynamic_img_size(dynamic_img_size)
        grid_size = self.patch_embed.grid_size
        self.cls_token = nn.Parameter(torch.zeros(1, 1, embed_dim)) if class_token else None
        self.dist_token = nn.Parameter(torch.zeros(1, 1, embed_dim)) if distill_token else None
        if pos_embed == 'learn':
            self.pos_embed = nn.Parameter(torch.randn(1, grid_size[0] * grid_size[1], embed_dim) * .02)
        else:
            self.pos_embed = None
        self.register_buffer('pos_embed_sincos', torch.zeros(1, 0, embed_dim), persistent=False)
        self.init_non_persistent_buffers()
        self.pos_drop = nn.Dropout(p=pos_drop_rate)

        dpr = [x.item() for x in torch.linspace(0, drop_path_rate, depth)]
        self.blocks = nn.Sequential(*[
            Block(
                dim=embed_dim,
                num_heads=num_heads,
                attn_layer=attn_layer,
                use_mlp=use_mlp,
                mlp_hidden_dim=mlp_hidden_dim,
                qkv_bias=qkv_bias,
                proj_drop=proj_drop_rate,
                attn_drop=attn_drop_rate,
                drop_path=dpr[i],
                act_layer=act_layer,
                norm_layer=norm_layer,
            )
            for i in range(depth)])
        reduction = self.patch_embed.feat_ratio()
        self.feature_info = [dict(module=f'blocks.{i}', num_chs=embed_dim, reduction=reduction) for i in range(depth)]
        self.norm = norm_layer(embed_dim) if final_norm else nn.Identity()
        self.head_drop = nn.Dropout(drop_rate)
        self.head = nn.Linear(embed_dim, num_classes) if num_classes > 0 else nn.Identity()
        self.head_dist = nn.Linear(embed_dim, num_classes) if distill_token and num_classes > 0 else None

        if weight_init != 'skip':
            self.init_weights(weight_init)
        if device is not None or dtype is not None:
            self.to(device=device, dtype=dtype)

    def init_weights(self, mode: WeightInitType = '') -> None:
        """timm's ViT initialisation: truncated normal (std .02) weights, zero biases (``init_module``); with
        ``mode='mimetic'`` each attention layer then sets its maps by ``init_mimetic``."""
        _check_choice('weight_init', mode, WeightInitType)
        for module in self.modules():
            init_module(module)
        if mode == 'mimetic':
            for module in self.modules():
                if isinstance(module, MinimalAttention):
                    module.init_mimetic(MimeticInit())

    @torch.jit.ignore
    def init_non_persistent_buffers(self) -> None:
        """Recompute ``pos_embed_sincos``, which is not saved in checkpoints (e.g. after meta-device loading)."""
        buf = self.pos_embed_sincos
        if self.pos_embed_type == 'sincos':
            grid = self.patch_embed.grid_size
            value = sincos_2d_pos_embed(grid[0], grid[1], self.embed_dim, device=buf.device)
        else:
            value = torch.zeros(1, 0, self.embed_dim, device=buf.device)
        self.pos_embed_sincos = value.to(buf.dtype)

    @torch.jit.ignore
    def set_input_size(self, img_size: Optional[Union[int, Tuple[int, int]]] = None,
                       patch_size: Optional[Union[int, Tuple[int, int]]] = None) -> None:
        """A new input resolution and/or patch size, as timm's ViT takes it: the patch embedding is resampled by timm's
        ``PatchEmbed``, a learned position embedding to the new patch grid, and the sin-cos one is recomputed."""
        geometry = dict(img_size=self.init_kwargs['img_size'] if img_size is None else img_size,
                        patch_size=self.init_kwargs['patch_size'] if patch_size is None else patch_size)
        check_model_args(**{**self.init_kwargs, **geometry})
        prev_grid = self.patch_embed.grid_size
        self.patch_embed.set_input_size(img_size=img_size, patch_size=patch_size)
        if self.pos_embed is not None and self.patch_embed.grid_size != prev_grid:
            self.pos_embed = nn.Parameter(resample_abs_pos_embed(
                self.pos_embed, new_size=self.patch_embed.grid_size, old_size=prev_grid, num_prefix_tokens=0,
                verbose=True), requires_grad=self.pos_embed.requires_grad)
        self.init_non_persistent_buffers()
        self.init_kwargs.update(geometry)
        self.feature_info = [dict(info, reduction=self.patch_embed.feat_ratio()) for info in self.feature_info]
        if update_model_input_size is not None:
            update_model_input_size(self, self.patch_embed.img_size, patch_size=patch_size)

    @torch.jit.ignore
    def set_dynamic_img_size(self, enable: bool = True) -> None:
        """Take any input whose sides are multiples of the patch size, the position embedding resampled to its patch
        grid (``enable``), or only ``img_size``: what the ``dynamic_img_size`` keyword sets at construction."""
        check_model_args(**{**self.init_kwargs, 'dynamic_img_size': enable})
        self.dynamic_img_size = self.init_kwargs['dynamic_img_size'] = enable
        self.patch_embed.strict_img_size = self.patch_embed.flatten = not enable  # tokens (B, H, W, C) when dynamic
        self.patch_embed.output_fmt = Format.NHWC if enable else Format.NCHW

    @torch.jit.ignore
    def no_weight_decay(self) -> Set[str]:
        return {'pos_embed', 'cls_token', 'dist_token'}

    @torch.jit.ignore
    def group_matcher(self, coarse: bool = False) -> Dict[str, Union[str, List]]:
        return dict(
            stem=r'^cls_token|dist_token|pos_embed|patch_embed',
            blocks=[(r'^blocks\.(\d+)', None), (r'^norm', (99999,))],
        )

    @torch.jit.ignore
    def set_grad_checkpointing(self, enable: bool = True) -> None:
        self.grad_checkpointing = enable

    @torch.jit.ignore
    def get_classifier(self) -> nn.Module:
        return self.head

    def reset_classifier(self, num_classes: int, global_pool: Optional[str] = None) -> None:
        if not isinstance(num_classes, int) or isinstance(num_classes, bool) or num_classes < 0:
            raise ValueError(f'num_classes must be an integer >= 0 (0: no classifier), got {num_classes!r}.')
        self.num_classes = num_classes
        if global_pool is not None:
            _check_choice('global_pool', global_pool, GlobalPoolType)
            if global_pool == 'token' and self.cls_token is None:
                raise ValueError("global_pool='token' needs a model built with class_token=True.")
            if global_pool == '' and self.dist_token is not None and num_classes:
                raise ValueError("A model with a distillation token needs a pooled head: global_pool 'avg', 'max' or "
                                 "'token' (or num_classes=0).")
            self.global_pool = global_pool
        self.head = nn.Linear(self.embed_dim, num_classes) if num_classes > 0 else nn.Identity()
        self.head_dist = nn.Linear(self.embed_dim, num_classes) if self.dist_token is not None and num_classes else None

    @torch.jit.ignore
    def set_distilled_training(self, enable: bool = True) -> None:
        """With a distillation token: return (logits, distillation logits) in training, as timm's
        ``TokenDistillationTask`` (which calls this) takes them; the mean of the two otherwise."""
        if self.dist_token is None:
            raise ValueError('set_distilled_training needs a model built with distill_token=True.')
        self.distilled_training = enable

    def _check_input(self, x: torch.Tensor) -> None:
        check_input(x, self.in_chans, self.patch_embed.img_size, self.patch_embed.patch_size, self.dynamic_img_size,
                    self.input_hint, self.max_tokens)

    def _pos_embed(self, x: torch.Tensor) -> torch.Tensor:
        if self.dynamic_img_size:
            B, H, W, C = x.shape
            x = x.view(B, H * W, C)
            grid_size = [H, W]
        else:
            grid_size = [self.patch_embed.grid_size[0], self.patch_embed.grid_size[1]]
        pos_embed = self.pos_embed
        if pos_embed is not None:
            if self.dynamic_img_size:
                pos_embed = resample_abs_pos_embed(
                    pos_embed, new_size=grid_size, old_size=self.patch_embed.grid_size, num_prefix_tokens=0)
            x = x + pos_embed
        elif self.pos_embed_type == 'sincos':
            sincos = self.pos_embed_sincos
            if sincos.shape[1] != grid_size[0] * grid_size[1]:
                sincos = sincos_2d_pos_embed(grid_size[0], grid_size[1], self.embed_dim, device=x.device)
            x = x + sincos.to(x.dtype)
        if self.dist_token is not None:
            x = torch.cat([self.dist_token.expand(x.shape[0], -1, -1), x], dim=1)
        if self.cls_token is not None:
            x = torch.cat([self.cls_token.expand(x.shape[0], -1, -1), x], dim=1)
        return self.pos_drop(x)

    def forward_intermediates(
            self,
            x: torch.Tensor,
            indices: Optional[Union[int, List[int]]] = None,
            return_prefix_tokens: bool = False,
            norm: bool = False,
            stop_early: bool = False,
            output_fmt: str = 'NCHW',
            intermediates_only: bool = False,
    ) -> Union[List[torch.Tensor], Tuple[torch.Tensor, List[torch.Tensor]]]:
        """Forward features that returns intermediates.

        Args:
            x: Input image tensor.
            indices: Take last n blocks if int, all if None, select matching indices if sequence.
            return_prefix_tokens: Return both prefix and spatial intermediate tokens.
            norm: Apply the final norm layer to all intermediates.
            stop_early: Stop iterating over blocks when the last desired intermediate is hit.
            output_fmt: Shape of intermediate feature outputs, 'NCHW' or 'NLC'.
            intermediates_only: Only return intermediate features.
        """
        if output_fmt not in ('NCHW', 'NLC'):
            raise ValueError(f"output_fmt must be 'NCHW' or 'NLC', got '{output_fmt}'.")
        reshape = output_fmt == 'NCHW'
        intermediates = []
        take_indices, max_index = feature_take_indices(len(self.blocks), indices)

        self._check_input(x)
        B, _, height, width = x.shape
        x = self.patch_embed(x)
        x = self._pos_embed(x)
        if torch.jit.is_scripting() or not stop_early:  # can't slice blocks in torchscript
            blocks = self.blocks
        else:
            blocks = self.blocks[:max_index + 1]
        for i, blk in enumerate(blocks):
            if self.grad_checkpointing and not torch.jit.is_scripting():
                x = checkpoint(blk, x)
            else:
                x = blk(x)
            if i in take_indices:
                intermediates.append(self.norm(x) if norm else x)

        if self.num_prefix_tokens:
            prefix_tokens = [y[:, 0:self.num_prefix_tokens] for y in intermediates]
            intermediates = [y[:, self.num_prefix_tokens:] for y in intermediates]
        else:
            prefix_tokens = None
        if reshape:
            H, W = self.patch_embed.dynamic_feat_size((height, width))
            intermediates = [y.reshape(B, H, W, -1).permute(0, 3, 1, 2).contiguous() for y in intermediates]
        if not torch.jit.is_scripting() and return_prefix_tokens and prefix_tokens is not None:
            intermediates = list(zip(intermediates, prefix_tokens))
        if intermediates_only:
            return intermediates
        x = self.norm(x)
        return x, intermediates

    def get_intermediate_layers(self, x: torch.Tensor, n: Union[int, List[int], Tuple[int]] = 1, reshape: bool = False,
                                return_prefix_tokens: bool = False, norm: bool = False) -> List[torch.Tensor]:
        """timm's ViT interface for DINO-style callers: ``forward_intermediates`` with ``intermediates_only``."""
        return self.forward_intermediates(x, n, return_prefix_tokens=return_prefix_tokens, norm=norm,
                                          output_fmt='NCHW' if reshape else 'NLC', intermediates_only=True)

    def prune_intermediate_layers(
            self,
            indices: Union[int, List[int]] = 1,
            prune_norm: bool = False,
            prune_head: bool = True,
    ) -> List[int]:
        """Prune layers not required for the specified intermediates."""
        take_indices, max_index = feature_take_indices(len(self.blocks), indices)
        self.blocks = self.blocks[:max_index + 1]
        if prune_norm:
            self.norm = nn.Identity()
        if prune_head:
            self.reset_classifier(0, '')
        return take_indices

    @torch.jit.ignore
    def get_attention_maps(
            self, x: torch.Tensor, pre_softmax: bool = False, attentions: bool = True,
    ) -> Tuple[torch.Tensor, List[torch.Tensor], List[torch.Tensor]]:
        """Features plus, per block, its input hidden state and its attention weights (B, H, T, T).

        Returns ``(features, hidden_states, attentions)`` where ``hidden_states`` holds the
        embedding output and every block's output (depth + 1 tensors, (B, T, C)). Each block's attention
        is computed once, in the pass that also gives its output; ``attentions=False`` returns none (the
        hidden states alone, through the fused kernels). With ``pre_softmax=True`` the attentions are the raw
        scaled scores q k^T / sqrt(head_dim) instead (the weights are their row-wise softmax; for ``sym``
        and ``chol`` they are symmetric).
        """
        self._check_input(x)
        x = self._pos_embed(self.patch_embed(x))
        hidden_states, maps = [x], []
        for blk in self.blocks:
            if attentions and pre_softmax:
                maps.append(blk.attn.attention_scores(blk.norm1(x)))
                x = blk(x)
            elif attentions:
                x, weights = blk.forward_with_attention(x)
                maps.append(weights)
            else:
                x = blk(x)
            hidden_states.append(x)
        return self.norm(x), hidden_states, maps

    def forward_features(self, x: torch.Tensor) -> torch.Tensor:
        self._check_input(x)
        x = self.patch_embed(x)
        x = self._pos_embed(x)
        if self.grad_checkpointing and not torch.jit.is_scripting():
            x = checkpoint_seq(self.blocks, x)
        else:
            x = self.blocks(x)
        return self.norm(x)

    def pool(self, x: torch.Tensor, pool_type: Optional[str] = None) -> torch.Tensor:
        pool_type = self.global_pool if pool_type is None else pool_type
        return global_pool_nlc(x, pool_type=pool_type, num_prefix_tokens=self.num_prefix_tokens)

    def forward_head(self, x: torch.Tensor, pre_logits: bool = False) -> torch.Tensor:
        head_dist = self.head_dist
        if head_dist is None or pre_logits:  # pre-logits: the pooled features, the main head's input
            x = self.head_drop(self.pool(x))
            return x if pre_logits else self.head(x)
        x_dist = x[:, self.num_prefix_tokens - 1]  # the distillation token: the last prefix token
        x, x_dist = self.head(self.head_drop(self.pool(x))), head_dist(self.head_drop(x_dist))
        if self.distilled_training and self.training and not torch.jit.is_scripting():
            return x, x_dist  # timm's TokenDistillationTask: the task loss on the first, the teacher's on the second
        return (x + x_dist) / 2

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.forward_features(x)
        return self.forward_head(x)


# The keywords of VisionTransformerMinimal that describe a model (what a config file records): every
# argument of its constructor but the initialisation switch, the layer classes and where the parameters live.
MODEL_KEYWORDS: Tuple[str, ...] = tuple(
    name for name in inspect.signature(VisionTransformerMinimal.__init__).parameters
    if name not in ('self', 'weight_init', 'norm_layer', 'act_layer', 'device', 'dtype'))

# Filled by @register_model below, one entry per architecture, in the order of the functions.
ARCHITECTURES: List[str] = []
default_cfgs: Dict[str, Any] = {}


def _resolve_tag(variant: str, pretrained_cfg: Any) -> Optional[str]:
    """The dataset tag a model is being built for (None for a custom or hub config)."""
    if isinstance(pretrained_cfg, PretrainedCfg):
        return pretrained_cfg.tag
    if isinstance(pretrained_cfg, dict):
        return pretrained_cfg.get('tag')
    if isinstance(pretrained_cfg, str):
        check_tag(variant, pretrained_cfg, list(get_arch_pretrained_cfgs(variant)))
        return pretrained_cfg
    default = get_pretrained_cfg(variant, allow_unregistered=True)
    return default.tag if default is not None else None


def _check_cfg_input_size(model: 'VisionTransformerMinimal') -> None:
    """The input size of the model's pretrained cfg (what tools resize every image to, and what a model built with
    ``dynamic_img_size`` then runs at) within the model's size limits: a config.json that asks for 4004 x 4004
    images is refused here, not at the first forward pass of a terabyte attention matrix."""
    size = (getattr(model, 'pretrained_cfg', None) or {}).get('input_size')
    inner = model if isinstance(model, VisionTransformerMinimal) else getattr(model, 'model', None)  # features_only
    if not size or len(size) != 3 or not isinstance(inner, VisionTransformerMinimal):
        return
    try:
        check_model_size(**dict(inner.init_kwargs, img_size=(int(size[1]), int(size[2])), in_chans=int(size[0])))
    except ValueError as e:
        raise ValueError(f'the model\'s config gives the input size {"x".join(map(str, size))}: {e}') from None


class NoPretrainedWeights(RuntimeError):
    """``pretrained=True`` for a tag without weights; the message names the tags that have them."""


_TIMM_NO_WEIGHTS = 'No pretrained weights exist'  # how timm's build_model_with_cfg words it (a RuntimeError)


def _create_vit_minimal(variant: str, pretrained: bool = False, **kwargs) -> VisionTransformerMinimal:
    out_indices = kwargs.pop('out_indices', 3)
    check_config_values(kwargs.get('pretrained_cfg'))
    if kwargs.get('pretrained_model_args'):  # timm read a config.json (local-dir:, hf-hub:): its two names must agree
        check_architecture(variant, kwargs['pretrained_model_args'], ARCHITECTURES)
    tag = _resolve_tag(variant, kwargs.get('pretrained_cfg'))
    if tag_dataset(tag):
        for key, value in tag_geometry(tag).items():
            kwargs.setdefault(key, value)
    path = weights_file(kwargs.get('pretrained_cfg')) if pretrained else None
    if path is not None:  # a checkpoint's config must fit its weights before a model of its size is built
        check_weights_fit(path, kwargs.get('depth', 6), kwargs.get('embed_dim', 60), head_classes(kwargs))
    try:
        model = build_model_with_cfg(
            VisionTransformerMinimal,
            variant,
            pretrained,
            pretrained_filter_fn=checkpoint_filter_fn,
            feature_cfg=dict(out_indices=out_indices, feature_cls='getter'),
            **kwargs,
        )
    except Exception as e:  # noqa: BLE001 (two of timm's errors get the names a user needs)
        if isinstance(e, SafetensorError):
            cfg = kwargs.get('pretrained_cfg_overlay') or kwargs.get('pretrained_cfg')
            source = cfg.get('file') if isinstance(cfg, dict) else None
            raise RuntimeError(f'Cannot read the weights of {variant} from {source or "its pretrained file"}: {e} '
                               f'(a truncated or corrupted safetensors file).') from e
        if not (isinstance(e, RuntimeError) and str(e).startswith(_TIMM_NO_WEIGHTS)):
            raise
        with_weights = [f'{variant}.{t}' for t in tags_with_weights(variant)]
        raise NoPretrainedWeights(
            f'No pretrained weights exist for {variant}.{tag}; '
            + (f'this architecture has weights for {", ".join(with_weights)}. ' if with_weights else '')
            + 'timm.list_pretrained("vit_minimal*") lists every tag with weights; without pretrained=True '
              'the model is built with a random initialisation.') from e
    _check_cfg_input_size(model)
    loaded = loaded_weights_file(model.pretrained_cfg) if pretrained else None
    if loaded is not None:
        check_shipped_file(loaded)  # a file of the package: the one its model card measured
        check_recorded_keywords(loaded, model.init_kwargs, model.num_classes)
    if tag_dataset(tag) and model.in_chans != DATASETS[tag_dataset(tag)].input_size[0]:
        c, h, w = DATASETS[tag_dataset(tag)].input_size
        model.input_hint = (f' The .{tag} checkpoint takes {c}x{h}x{w} images: build the model with in_chans={c} '
                            f'(timm\'s validate.py and train.py: --input-size {c} {h} {w}).')
    return model


# -- registered architectures: vit_minimal_<attention>[_mlp]_<depth>x<heads> ----------------------

def register_model(fn):
    """timm's ``register_model`` with this module's pretrained cfgs, one per tag of ``DATASETS`` (MNIST, the
    first, is the default) and one per recipe tag the architecture has weights for, made for the function's name,
    which also joins ``ARCHITECTURES``. timm registers a name once: a copy of this file travels with every Hugging
    Face checkpoint (``trust_remote_code``) and may be imported more than once; the first registration stays."""
    name = fn.__name__
    ARCHITECTURES.append(name)
    cfgs = {f'{name}.{d}': _cfg(d, **_weights(name, d)) for d in DATASETS}
    cfgs.update({f'{name}.{t}': _cfg(d, **w) for t, d in RECIPE_TAGS.items() if (w := _weights(name, t))})
    default_cfgs.update(generate_default_cfgs(cfgs))
    return fn if is_model(name) else _timm_register_model(fn)


# std: the paper's unchanged attention

@register_model
def vit_minimal_std_6x1(pretrained: bool = False, **kwargs) -> VisionTransformerMinimal:
    """Unchanged attention, no MLP, 6 layers, 1 head."""
    model_args = dict(attn_type='std', use_mlp=False, depth=6, num_heads=1)
    return _create_vit_minimal('vit_minimal_std_6x1', pretrained=pretrained, **dict(model_args, **kwargs))


@register_model
def vit_minimal_std_6x4(pretrained: bool = False, **kwargs) -> VisionTransformerMinimal:
    """Unchanged attention, no MLP, 6 layers, 4 heads."""
    model_args = dict(attn_type='std', use_mlp=False, depth=6, num_heads=4)
    return _create_vit_minimal('vit_minimal_std_6x4', pretrained=pretrained, **dict(model_args, **kwargs))


@register_model
def vit_minimal_std_12x1(pretrained: bool = False, **kwargs) -> VisionTransformerMinimal:
    """Unchanged attention, no MLP, 12 layers, 1 head."""
    model_args = dict(attn_type='std', use_mlp=False, depth=12, num_heads=1)
    return _create_vit_minimal('vit_minimal_std_12x1', pretrained=pretrained, **dict(model_args, **kwargs))


@register_model
def vit_minimal_std_12x4(pretrained: bool = False, **kwargs) -> VisionTransformerMinimal:
    """Unchanged attention, no MLP, 12 layers, 4 heads."""
    model_args = dict(attn_type='std', use_mlp=False, depth=12, num_heads=4)
    return _create_vit_minimal('vit_minimal_std_12x4', pretrained=pretrained, **dict(model_args, **kwargs))


@register_model
def vit_minimal_std_mlp_6x1(pretrained: bool = False, **kwargs) -> VisionTransformerMinimal:
    """The paper's baseline: unchanged attention with MLP, 6 layers, 1 head."""
    model_args = dict(attn_type='std', use_mlp=True, depth=6, num_heads=1)
    return _create_vit_minimal('vit_minimal_std_mlp_6x1', pretrained=pretrained, **dict(model_args, **kwargs))


@register_model
def vit_minimal_std_mlp_6x4(pretrained: bool = False, **kwargs) -> VisionTransformerMinimal:
    """Unchanged attention with MLP, 6 layers, 4 heads."""
    model_args = dict(attn_type='std', use_mlp=True, depth=6, num_heads=4)
    return _create_vit_minimal('vit_minimal_std_mlp_6x4', pretrained=pretrained, **dict(model_args, **kwargs))


@register_model
def vit_minimal_std_mlp_12x1(pretrained: bool = False, **kwargs) -> VisionTransformerMinimal:
    """Unchanged attention with MLP, 12 layers, 1 head."""
    model_args = dict(attn_type='std', use_mlp=True, depth=12, num_heads=1)
    return _create_vit_minimal('vit_minimal_std_mlp_12x1', pretrained=pretrained, **dict(model_args, **kwargs))


@register_model
def vit_minimal_std_mlp_12x4(pretrained: bool = False, **kwargs) -> VisionTransformerMinimal:
    """Unchanged attention with MLP, 12 layers, 4 heads."""
    model_args = dict(attn_type='std', use_mlp=True, depth=12, num_heads=4)
    return _create_vit_minimal('vit_minimal_std_mlp_12x4', pretrained=pretrained, **dict(model_args, **kwargs))


# qk: one collapsed W_QK, keys are the raw inputs

@register_model
def vit_minimal_qk_6x1(pretrained: bool = False, **kwargs) -> VisionTransformerMinimal:
    """Collapsed W_QK, no MLP, 6 layers."""
    model_args = dict(attn_type='qk', use_mlp=False, depth=6, num_heads=1)
    return _create_vit_minimal('vit_minimal_qk_6x1', pretrained=pretrained, **dict(model_args, **kwargs))


@register_model
def vit_minimal_qk_12x1(pretrained: bool = False, **kwargs) -> VisionTransformerMinimal:
    """Collapsed W_QK, no MLP, 12 layers."""
    model_args = dict(attn_type='qk', use_mlp=False, depth=12, num_heads=1)
    return _create_vit_minimal('vit_minimal_qk_12x1', pretrained=pretrained, **dict(model_args, **kwargs))


@register_model
def vit_minimal_qk_mlp_6x1(pretrained: bool = False, **kwargs) -> VisionTransformerMinimal:
    """Collapsed W_QK with MLP, 6 layers."""
    model_args = dict(attn_type='qk', use_mlp=True, depth=6, num_heads=1)
    return _create_vit_minimal('vit_minimal_qk_mlp_6x1', pretrained=pretrained, **dict(model_args, **kwargs))


@register_model
def vit_minimal_qk_mlp_12x1(pretrained: bool = False, **kwargs) -> VisionTransformerMinimal:
    """Collapsed W_QK with MLP, 12 layers."""
    model_args = dict(attn_type='qk', use_mlp=True, depth=12, num_heads=1)
    return _create_vit_minimal('vit_minimal_qk_mlp_12x1', pretrained=pretrained, **dict(model_args, **kwargs))


# qkonly: W_QK only, no W_V and W_O

@register_model
def vit_minimal_qkonly_6x1(pretrained: bool = False, **kwargs) -> VisionTransformerMinimal:
    """W_QK only (no W_V, W_O), no MLP, 6 layers."""
    model_args = dict(attn_type='qkonly', use_mlp=False, depth=6, num_heads=1)
    return _create_vit_minimal('vit_minimal_qkonly_6x1', pretrained=pretrained, **dict(model_args, **kwargs))


@register_model
def vit_minimal_qkonly_12x1(pretrained: bool = False, **kwargs) -> VisionTransformerMinimal:
    """W_QK only (no W_V, W_O), no MLP, 12 layers."""
    model_args = dict(attn_type='qkonly', use_mlp=False, depth=12, num_heads=1)
    return _create_vit_minimal('vit_minimal_qkonly_12x1', pretrained=pretrained, **dict(model_args, **kwargs))


@register_model
def vit_minimal_qkonly_mlp_6x1(pretrained: bool = False, **kwargs) -> VisionTransformerMinimal:
    """W_QK only (no W_V, W_O) with MLP, 6 layers."""
    model_args = dict(attn_type='qkonly', use_mlp=True, depth=6, num_heads=1)
    return _create_vit_minimal('vit_minimal_qkonly_mlp_6x1', pretrained=pretrained, **dict(model_args, **kwargs))


@register_model
def vit_minimal_qkonly_mlp_12x1(pretrained: bool = False, **kwargs) -> VisionTransformerMinimal:
    """W_QK only (no W_V, W_O) with MLP, 12 layers."""
    model_args = dict(attn_type='qkonly', use_mlp=True, depth=12, num_heads=1)
    return _create_vit_minimal('vit_minimal_qkonly_mlp_12x1', pretrained=pretrained, **dict(model_args, **kwargs))


# sym: symmetric attention, W_K := W_Q

@register_model
def vit_minimal_sym_6x1(pretrained: bool = False, **kwargs) -> VisionTransformerMinimal:
    """Symmetric attention (W_K := W_Q), no MLP, 6 layers, 1 head."""
    model_args = dict(attn_type='sym', use_mlp=False, depth=6, num_heads=1)
    return _create_vit_minimal('vit_minimal_sym_6x1', pretrained=pretrained, **dict(model_args, **kwargs))


@register_model
def vit_minimal_sym_6x4(pretrained: bool = False, **kwargs) -> VisionTransformerMinimal:
    """Symmetric attention (W_K := W_Q), no MLP, 6 layers, 4 heads."""
    model_args = dict(attn_type='sym', use_mlp=False, depth=6, num_heads=4)
    return _create_vit_minimal('vit_minimal_sym_6x4', pretrained=pretrained, **dict(model_args, **kwargs))


@register_model
def vit_minimal_sym_12x1(pretrained: bool = False, **kwargs) -> VisionTransformerMinimal:
    """Symmetric attention (W_K := W_Q), no MLP, 12 layers, 1 head."""
    model_args = dict(attn_type='sym', use_mlp=False, depth=12, num_heads=1)
    return _create_vit_minimal('vit_minimal_sym_12x1', pretrained=pretrained, **dict(model_args, **kwargs))


@register_model
def vit_minimal_sym_12x4(pretrained: bool = False, **kwargs) -> VisionTransformerMinimal:
    """Symmetric attention (W_K := W_Q), no MLP, 12 layers, 4 heads."""
    model_args = dict(attn_type='sym', use_mlp=False, depth=12, num_heads=4)
    return _create_vit_minimal('vit_minimal_sym_12x4', pretrained=pretrained, **dict(model_args, **kwargs))


@register_model
def vit_minimal_sym_mlp_6x1(pretrained: bool = False, **kwargs) -> VisionTransformerMinimal:
    """Symmetric attention (W_K := W_Q) with MLP, 6 layers, 1 head."""
    model_args = dict(attn_type='sym', use_mlp=True, depth=6, num_heads=1)
    return _create_vit_minimal('vit_minimal_sym_mlp_6x1', pretrained=pretrained, **dict(model_args, **kwargs))


@register_model
def vit_minimal_sym_mlp_6x4(pretrained: bool = False, **kwargs) -> VisionTransformerMinimal:
    """Symmetric attention (W_K := W_Q) with MLP, 6 layers, 4 heads."""
    model_args = dict(attn_type='sym', use_mlp=True, depth=6, num_heads=4)
    return _create_vit_minimal('vit_minimal_sym_mlp_6x4', pretrained=pretrained, **dict(model_args, **kwargs))


@register_model
def vit_minimal_sym_mlp_12x1(pretrained: bool = False, **kwargs) -> VisionTransformerMinimal:
    """Symmetric attention (W_K := W_Q) with MLP, 12 layers, 1 head."""
    model_args = dict(attn_type='sym', use_mlp=True, depth=12, num_heads=1)
    return _create_vit_minimal('vit_minimal_sym_mlp_12x1', pretrained=pretrained, **dict(model_args, **kwargs))


@register_model
def vit_minimal_sym_mlp_12x4(pretrained: bool = False, **kwargs) -> VisionTransformerMinimal:
    """Symmetric attention (W_K := W_Q) with MLP, 12 layers, 4 heads."""
    model_args = dict(attn_type='sym', use_mlp=True, depth=12, num_heads=4)
    return _create_vit_minimal('vit_minimal_sym_mlp_12x4', pretrained=pretrained, **dict(model_args, **kwargs))


# chol: W_QK = T T^T, T lower triangular

@register_model
def vit_minimal_chol_6x1(pretrained: bool = False, **kwargs) -> VisionTransformerMinimal:
    """Cholesky W_QK = T T^T, no MLP, 6 layers."""
    model_args = dict(attn_type='chol', use_mlp=False, depth=6, num_heads=1)
    return _create_vit_minimal('vit_minimal_chol_6x1', pretrained=pretrained, **dict(model_args, **kwargs))


@register_model
def vit_minimal_chol_12x1(pretrained: bool = False, **kwargs) -> VisionTransformerMinimal:
    """Cholesky W_QK = T T^T, no MLP, 12 layers."""
    model_args = dict(attn_type='chol', use_mlp=False, depth=12, num_heads=1)
    return _create_vit_minimal('vit_minimal_chol_12x1', pretrained=pretrained, **dict(model_args, **kwargs))


@register_model
def vit_minimal_chol_mlp_6x1(pretrained: bool = False, **kwargs) -> VisionTransformerMinimal:
    """Cholesky W_QK = T T^T with MLP, 6 layers."""
    model_args = dict(attn_type='chol', use_mlp=True, depth=6, num_heads=1)
    return _create_vit_minimal('vit_minimal_chol_mlp_6x1', pretrained=pretrained, **dict(model_args, **kwargs))


@register_model
def vit_minimal_chol_mlp_12x1(pretrained: bool = False, **kwargs) -> VisionTransformerMinimal:
    """Cholesky W_QK = T T^T with MLP, 12 layers."""
    model_args = dict(attn_type='chol', use_mlp=True, depth=12, num_heads=1)
    return _create_vit_minimal('vit_minimal_chol_mlp_12x1', pretrained=pretrained, **dict(model_args, **kwargs))
