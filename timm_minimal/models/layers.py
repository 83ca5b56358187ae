"""Building blocks of the minimal vision transformers.

Each modification of the paper ("Reducing the Transformer Architecture to a Minimum",
Bermeitinger et al., KDIR 2024) is one small attention class below, chosen by name through
``ATTENTION_LAYERS`` (the model's ``attn_type`` keyword):

=========  ===========================================================  ==================
name       what the layer computes (width N, per-head width d = N/H)    parameters
=========  ===========================================================  ==================
``std``    the paper's "unchanged": separate W_Q, W_K, W_V, W_O         4N^2 + 4N
``qk``     one N x N matrix W_QK = W_Q W_K^T, keys are the raw inputs   3N^2 + 2N
``qkonly`` W_QK only: no W_V, no W_O, the output of the layer is a      N^2
           convex combination of its inputs
``sym``    symmetric attention: W_K := W_Q (any head count)              3N^2 + 3N
``chol``   W_QK = T T^T with T lower triangular (symmetric, positive    N(N+1)/2 + 2N^2 + 2N
           semi-definite)
=========  ===========================================================  ==================

Each variant also knows its mimetic initialisation (``init_mimetic``, the model's ``weight_init='mimetic'``;
Trockman and Kolter, "Mimetic Initialization of Self-Attention Layers", ICML 2023): the product of its query and
key maps starts near ``alpha Z + beta I`` (Z a random matrix of unit spectral scale, so a token first attends
mostly to itself) and the product of its value and output maps, where it has them, near ``alpha Z - beta I``.
For ``qk`` and ``qkonly`` that product is the one matrix W_QK itself; ``sym`` and ``chol`` take the symmetric,
positive semi-definite part, the only kind their W W^T can be.

The block (``Block``) is attention + MLP, or attention alone ("no MLP", ``use_mlp=False``).
All variants run on ``F.scaled_dot_product_attention`` (bf16 on the CPU: the explicit softmax, ``sdpa_pays``):
``sym`` and ``chol`` pass q as k, ``qk`` and ``qkonly`` pass the raw inputs as k, ``qkonly`` also as v.
"""
from dataclasses import dataclass
from typing import Dict, Optional, Tuple, Type

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.jit import Final

from timm.layers import DropPath, Mlp, use_fused_attn

__all__ = [
    'MinimalAttention', 'StdAttention', 'QKAttention', 'QKOnlyAttention', 'SymAttention', 'CholAttention',
    'ATTENTION_LAYERS', 'get_attn_layer', 'Block', 'sincos_2d_pos_embed', 'MimeticInit', 'mimetic_factors',
    'set_head_padding', 'sdpa_pays',
]


def sincos_2d_pos_embed(grid_h: int, grid_w: int, dim: int, temperature: float = 10000.,
                        device: Optional[torch.device] = None) -> torch.Tensor:
    """Fixed 2-D sin-cos position embedding (1, grid_h * grid_w, dim), no parameters.

    The same values as ``timm.layers.build_sincos2d_pos_embed`` (sin of rows, sin of columns,
    cos of rows, cos of columns), written so that TorchScript can rebuild it for a new grid.
    """
    pos_dim = dim // 4
    bands = 1. / (temperature ** (torch.arange(pos_dim, device=device, dtype=torch.float32) / pos_dim))
    rows, cols = torch.meshgrid(
        torch.arange(grid_h, device=device, dtype=torch.float32),
        torch.arange(grid_w, device=device, dtype=torch.float32),
        indexing='ij',
    )
    grid = torch.stack([rows.flatten(), cols.flatten()], dim=1)  # (T, 2)
    angles = grid.unsqueeze(-1) * bands  # (T, 2, dim / 4)
    return torch.stack([angles.sin(), angles.cos()], dim=1).flatten(1).unsqueeze(0)


@dataclass(frozen=True)
class MimeticInit:
    """The targets of a mimetic initialisation: W_Q W_K^T ~ qk_alpha Z + qk_beta I and W_V W_O ~ vo_alpha Z -
    vo_beta I (Z: a random N x N matrix, entries of variance 1 / N)."""
    qk_alpha: float = 0.7
    qk_beta: float = 0.7
    vo_alpha: float = 0.4
    vo_beta: float = 0.4


def _mimetic_target(dim: int, alpha: float, beta: float, symmetric: bool = False) -> torch.Tensor:
    """``alpha Z + beta I`` (N x N); with ``symmetric`` its symmetric part with the negative eigenvalues cut to 0
    (plus 1e-6 I), so that it is W W^T of some W."""
    z = torch.randn(dim, dim) / dim ** 0.5
    eye = torch.eye(dim)
    if not symmetric:
        return alpha * z + beta * eye
    evals, evecs = torch.linalg.eigh(alpha * (z + z.t()) / 2 ** 0.5 + beta * eye)
    return (evecs * evals.clamp(min=0)) @ evecs.t() + 1e-6 * eye


def mimetic_factors(dim: int, alpha: float, beta: float, symmetric: bool = False
                    ) -> Tuple[torch.Tensor, torch.Tensor]:
    """Two N x N matrices L, R with L @ R = ``alpha Z + beta I`` (``_mimetic_target``; R = L^T where
    ``symmetric``), by SVD (or eigendecomposition) as Trockman and Kolter do; a head of width d takes d columns
    of L and the same d rows of R."""
    target = _mimetic_target(dim, alpha, beta, symmetric)
    if symmetric:
        evals, evecs = torch.linalg.eigh(target)
        left = evecs * evals.clamp(min=0).sqrt()
        return left, left.t()
    u, sv, vh = torch.linalg.svd(target)
    return u * sv.sqrt(), sv.sqrt()[:, None] * vh


def sdpa_pays(q: torch.Tensor) -> bool:
    """Whether SDPA is the faster attention for queries ``q``: everywhere but bf16 on the CPU, where torch's
    flash-attention kernel is slow at these head widths (its backward most of all) and the explicit
    ``softmax(q k^T) v`` runs the layer's training step in 0.25x and its inference in 0.84x SDPA's time
    (``scripts/attention_kernels.py --dtype bfloat16``, benchmarks/attention_kernels_avx512bf16.md); bf16 autocast
    gives the attention bf16 queries. Traced by torch.fx (``q`` a Proxy): SDPA, as the model runs in fp32."""
    if not torch.jit.is_scripting() and _fx_traced(q):
        return True
    return not (q.device.type == 'cpu' and q.dtype == torch.bfloat16)


@torch.jit.unused
def _fx_traced(q: torch.Tensor) -> bool:
    return isinstance(q, torch.fx.Proxy)


class MinimalAttention(nn.Module):
    """Multi-head scaled dot-product attention, shared by every variant.

    A subclass says how queries, keys and values come from the input (``compute_qkv``) and how
    the heads are mixed back (``project_out``); the softmax attention itself lives here only.
    Scores are scaled by ``head_dim ** -0.5`` in every variant, so a collapsed W_QK behaves like
    the W_Q W_K^T it replaces.
    """
    fused_attn: Final[bool]
    head_pad: Final[int]
    single_head_only: bool = False

    def __init__(self, dim: int, num_heads: int = 1, attn_drop: float = 0., proj_drop: float = 0.) -> None:
        super().__init__()
        self.check_args(dim, num_heads)
        self.dim = dim
        self.num_heads = num_heads
        self.head_dim = dim // num_heads
        self.scale = self.head_dim ** -0.5
        self.fused_attn = use_fused_attn()
        # SDPA's backward ran a head width of 15 (60 / 4 heads) about 1.6x slower than a width of 16 on one CPU
        # (benchmarks/cpu_modes.md): where gradients are recorded, the fused path pads each head with zeros to a
        # multiple of 8 (``sdpa``); inference, where the padding costs more than it saves
        # (benchmarks/inference_vs_timm_amx.md), takes the true width, as timm's attention does. Where the padded
        # step trains slower (AVX2 kernels, benchmarks/cpu_modes_avx2cap.md) the CPU decision turns it off
        # (``set_head_padding``)
        self.head_pad = (-self.head_dim) % 8
        self.attn_drop = nn.Dropout(attn_drop)
        self.proj_drop = nn.Dropout(proj_drop)

    @classmethod
    def check_args(cls, dim: int, num_heads: int) -> None:
        """ValueError unless this variant is defined for ``dim`` and ``num_heads``."""
        if num_heads < 1 or dim % num_heads != 0:
            raise ValueError(f'{cls.__name__}: dim ({dim}) must be divisible by num_heads ({num_heads}).')
        if cls.single_head_only and num_heads != 1:
            raise ValueError(
                f'{cls.__name__} collapses the key and query maps into one {dim} x {dim} matrix, '
                f'which is defined for num_heads=1 only (got num_heads={num_heads}); '
                f"use attn_type='sym' or 'std' for multi-head attention."
            )

    def _heads(self, x: torch.Tensor) -> torch.Tensor:
        """(B, T, C) -> (B, H, T, C / H)."""
        B, T, C = x.shape
        return x.reshape(B, T, self.num_heads, C // self.num_heads).transpose(1, 2)

    def compute_qkv(self, x: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Queries, keys and values, each (B, H, T, head_dim)."""
        raise NotImplementedError

    def project_out(self, x: torch.Tensor) -> torch.Tensor:
        """Mix the concatenated heads (B, T, C) back into the residual stream with W_O (``proj``; the identity
        where a variant has none)."""
        return self.proj_drop(self.proj(x))

    def attention_scores(self, x: torch.Tensor) -> torch.Tensor:
        """The scaled scores q k^T / sqrt(head_dim) (B, H, T, T) before the softmax; symmetric for ``sym``, ``chol``."""
        q, k, _ = self.compute_qkv(x)
        return (q * self.scale) @ k.transpose(-2, -1)

    def attention_weights(self, x: torch.Tensor) -> torch.Tensor:
        """The softmax attention matrix (B, H, T, T) for input ``x``, rows sum to one."""
        return self.attention_scores(x).softmax(dim=-1)

    def attend(self, x: torch.Tensor, need_weights: bool = False) -> Tuple[torch.Tensor, Optional[torch.Tensor]]:
        """The layer's output and, with ``need_weights``, its softmax attention (B, H, T, T), both from the same
        queries, keys and values (SDPA where the weights are not needed and ``sdpa_pays``)."""
        B, T, C = x.shape
        q, k, v = self.compute_qkv(x)
        weights: Optional[torch.Tensor] = None
        if self.fused_attn and not need_weights and sdpa_pays(q):
            x = self.sdpa(q, k, v)
        else:
            weights = ((q * self.scale) @ k.transpose(-2, -1)).softmax(dim=-1)
            x = self.attn_drop(weights) @ v
        x = x.transpose(1, 2).reshape(B, T, C)
        return self.project_out(x), weights

    def sdpa(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """``F.scaled_dot_product_attention``; where gradients are recorded, with each head padded by ``head_pad``
        zero columns: zeros add nothing to q k^T, the scale stays that of the true head width, and the padded output
        columns are cut off."""
        dropout_p = self.attn_drop.p if self.training else 0.
        if self.head_pad == 0 or not torch.is_grad_enabled():
            return F.scaled_dot_product_attention(q, k, v, dropout_p=dropout_p, scale=self.scale)
        pad = [0, self.head_pad]
        x = F.scaled_dot_product_attention(
            F.pad(q, pad), F.pad(k, pad), F.pad(v, pad), dropout_p=dropout_p, scale=self.scale)
        return x[..., :self.head_dim]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.attend(x)[0]

    @torch.no_grad()
    def init_mimetic(self, cfg: MimeticInit) -> None:
        """Set the maps so that their products start at ``cfg``'s targets (the biases stay as they are)."""
        raise NotImplementedError

    @torch.no_grad()
    def _init_value_output(self, v_weight: torch.Tensor, cfg: MimeticInit) -> None:
        """W_V W_O ~ vo_alpha Z - vo_beta I: x W_V^T W_O^T for torch's (out, in) weights."""
        left, right = mimetic_factors(self.dim, cfg.vo_alpha, -cfg.vo_beta)
        v_weight.copy_(left.t())
        self.proj.weight.copy_(right.t())


def set_head_padding(model: nn.Module, enabled: bool) -> int:
    """Let every minimal attention of ``model`` pad its heads to a multiple of 8 where gradients are recorded
    (``enabled``: as built) or run SDPA on the true head width. The outputs are the same; which one trains faster
    depends on the CPU's kernels (``benchmarks/cpu_modes*.md``), so the CPU decision measures both. Returns the
    number of layers whose heads have a width to pad (0: the choice changes nothing)."""
    widths = [m for m in model.modules() if isinstance(m, MinimalAttention) and m.head_dim % 8]
    for m in widths:
        m.head_pad = (-m.head_dim) % 8 if enabled else 0
    return len(widths)


class StdAttention(MinimalAttention):
    """The paper's "unchanged" attention: W_Q, W_K, W_V (one fused ``qkv``) and W_O (``proj``).

    Parameter names match timm's ``VisionTransformer`` attention.
    """

    def __init__(self, dim: int, num_heads: int = 1, qkv_bias: bool = True,
                 attn_drop: float = 0., proj_drop: float = 0.) -> None:
        super().__init__(dim, num_heads, attn_drop, proj_drop)
        self.qkv = nn.Linear(dim, dim * 3, bias=qkv_bias)
        self.proj = nn.Linear(dim, dim)

    def compute_qkv(self, x: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        return self._heads(q), self._heads(k), self._heads(v)

    @torch.no_grad()
    def init_mimetic(self, cfg: MimeticInit) -> None:
        w_q, w_k, w_v = self.qkv.weight.chunk(3, dim=0)
        left, right = mimetic_factors(self.dim, cfg.qk_alpha, cfg.qk_beta)
        w_q.copy_(left.t())  # scores x W_Q^T W_K x^T = x L R x^T
        w_k.copy_(right)
        self._init_value_output(w_v, cfg)


class QKAttention(MinimalAttention):
    """Collapsed attention: one bias-free N x N matrix ``w_qk`` stands for W_Q W_K^T.

    Scores are x_i W_QK x_j^T: queries are x W_QK, keys are the raw inputs (W_K = identity).
    Values and output keep their own maps. Single head only.
    """
    single_head_only = True

    def __init__(self, dim: int, num_heads: int = 1, qkv_bias: bool = True,
                 attn_drop: float = 0., proj_drop: float = 0.) -> None:
        super().__init__(dim, num_heads, attn_drop, proj_drop)
        self.w_qk = nn.Linear(dim, dim, bias=False)
        self.v = nn.Linear(dim, dim, bias=qkv_bias)
        self.proj = nn.Linear(dim, dim)

    def compute_qkv(self, x: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        return self._heads(self.w_qk(x)), self._heads(x), self._heads(self.v(x))

    @torch.no_grad()
    def init_mimetic(self, cfg: MimeticInit) -> None:
        self.w_qk.weight.copy_(_mimetic_target(self.dim, cfg.qk_alpha, cfg.qk_beta).t())  # scores x W^T x^T
        self._init_value_output(self.v.weight, cfg)


class QKOnlyAttention(MinimalAttention):
    """W_QK only, W_V = W_O = identity: every output is a convex combination of the layer's inputs.

    N^2 parameters per layer. Single head only.
    """
    single_head_only = True

    def __init__(self, dim: int, num_heads: int = 1, qkv_bias: bool = True,
                 attn_drop: float = 0., proj_drop: float = 0.) -> None:
        super().__init__(dim, num_heads, attn_drop, proj_drop)
        self.w_qk = nn.Linear(dim, dim, bias=False)
        self.proj = nn.Identity()  # no W_O

    def compute_qkv(self, x: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        x_heads = self._heads(x)
        return self._heads(self.w_qk(x)), x_heads, x_heads

    @torch.no_grad()
    def init_mimetic(self, cfg: MimeticInit) -> None:
        self.w_qk.weight.copy_(_mimetic_target(self.dim, cfg.qk_alpha, cfg.qk_beta).t())  # no W_V, W_O to set


class SymAttention(MinimalAttention):
    """Symmetric attention: the key map is the query map (W_K := W_Q), for any number of heads.

    Scores (x_i W + b)(x_j W + b)^T are symmetric in i and j. ``qv`` holds W_Q and W_V.
    """

    def __init__(self, dim: int, num_heads: int = 1, qkv_bias: bool = True,
                 attn_drop: float = 0., proj_drop: float = 0.) -> None:
        super().__init__(dim, num_heads, attn_drop, proj_drop)
        self.qv = nn.Linear(dim, dim * 2, bias=qkv_bias)
        self.proj = nn.Linear(dim, dim)

    def compute_qkv(self, x: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        q, v = self.qv(x).chunk(2, dim=-1)
        q = self._heads(q)
        return q, q, self._heads(v)

    @torch.no_grad()
    def init_mimetic(self, cfg: MimeticInit) -> None:
        w_q, w_v = self.qv.weight.chunk(2, dim=0)
        left, _ = mimetic_factors(self.dim, cfg.qk_alpha, cfg.qk_beta, symmetric=True)
        w_q.copy_(left.t())  # scores x W_Q^T W_Q x^T = x L L^T x^T
        self._init_value_output(w_v, cfg)


class CholAttention(MinimalAttention):
    """Cholesky-parameterised attention: W_QK = T T^T with T lower triangular.

    Only the N(N+1)/2 entries on and below the diagonal of T are parameters (``tril``), so W_QK
    is symmetric positive semi-definite by construction. Queries and keys are both x T.
    Values and output keep their own maps. Single head only.
    """
    single_head_only = True

    def __init__(self, dim: int, num_heads: int = 1, qkv_bias: bool = True,
                 attn_drop: float = 0., proj_drop: float = 0.) -> None:
        super().__init__(dim, num_heads, attn_drop, proj_drop)
        self.register_buffer('tril_indices', torch.tril_indices(dim, dim), persistent=False)
        self.tril = nn.Parameter(torch.zeros(dim * (dim + 1) // 2))
        self.v = nn.Linear(dim, dim, bias=qkv_bias)
        self.proj = nn.Linear(dim, dim)

    @torch.jit.ignore
    def init_non_persistent_buffers(self) -> None:
        """Recompute ``tril_indices``, which is not saved in checkpoints (e.g. after meta-device loading)."""
        self.tril_indices = torch.tril_indices(self.dim, self.dim, device=self.tril_indices.device)

    def factor(self) -> torch.Tensor:
        """The lower-triangular N x N factor T."""
        t = self.tril.new_zeros(self.dim, self.dim)
        return t.index_put((self.tril_indices[0], self.tril_indices[1]), self.tril)

    def w_qk(self) -> torch.Tensor:
        """The implied N x N matrix W_QK = T T^T."""
        t = self.factor()
        return t @ t.t()

    def compute_qkv(self, x: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        q = self._heads(x @ self.factor())
        return q, q, self._heads(self.v(x))

    @torch.no_grad()
    def init_mimetic(self, cfg: MimeticInit) -> None:
        target = _mimetic_target(self.dim, cfg.qk_alpha, cfg.qk_beta, symmetric=True)
        factor = torch.linalg.cholesky(target)  # T T^T = target, T lower triangular
        self.tril.copy_(factor[self.tril_indices[0].cpu(), self.tril_indices[1].cpu()])
        self._init_value_output(self.v.weight, cfg)


ATTENTION_LAYERS: Dict[str, Type[MinimalAttention]] = {
    'std': StdAttention,
    'qk': QKAttention,
    'qkonly': QKOnlyAttention,
    'sym': SymAttention,
    'chol': CholAttention,
}


def get_attn_layer(attn_type: str) -> Type[MinimalAttention]:
    """The attention class for a variant name, with an error listing the names allowed."""
    if attn_type not in ATTENTION_LAYERS:
        raise ValueError(f"Unknown attn_type '{attn_type}'; choose one of {', '.join(ATTENTION_LAYERS)}.")
    return ATTENTION_LAYERS[attn_type]


class Block(nn.Module):
    """A pre-norm transformer encoder layer, with or without its MLP.

    With the MLP: ``x = x + attn(norm1(x)); x = x + mlp(norm2(x))``.
    Without it (the paper's "no MLP"): ``x = norm2(x + attn(norm1(x)))``: the second LayerNorm
    the paper keeps (its parameter counts include two per layer) normalises the block output.
    """
    use_mlp: Final[bool]

    def __init__(
            self,
            dim: int,
            num_heads: int,
            attn_layer: Type[MinimalAttention] = StdAttention,
            use_mlp: bool = True,
            mlp_hidden_dim: int = 256,
            qkv_bias: bool = True,
            proj_drop: float = 0.,
            attn_drop: float = 0.,
            drop_path: float = 0.,
            act_layer: Type[nn.Module] = nn.GELU,
            norm_layer: Type[nn.Module] = nn.LayerNorm,
    ) -> None:
        super().__init__()
        self.use_mlp = use_mlp
        self.norm1 = norm_layer(dim)
        self.attn = attn_layer(dim, num_heads=num_heads, qkv_bias=qkv_bias, attn_drop=attn_drop, proj_drop=proj_drop)
        self.drop_path1 = DropPath(drop_path) if drop_path > 0. else nn.Identity()
        self.norm2 = norm_layer(dim)
        if use_mlp:
            self.mlp = Mlp(in_features=dim, hidden_features=mlp_hidden_dim, act_layer=act_layer, drop=proj_drop)
        else:
            self.mlp = nn.Identity()
        self.drop_path2 = DropPath(drop_path) if drop_path > 0. and use_mlp else nn.Identity()

    def _finish(self, x: torch.Tensor, attn_out: torch.Tensor) -> torch.Tensor:
        """The rest of the block after its attention: the residual, then the MLP or the second norm."""
        x = x + self.drop_path1(attn_out)
        if self.use_mlp:
            return x + self.drop_path2(self.mlp(self.norm2(x)))
        return self.norm2(x)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self._finish(x, self.attn(self.norm1(x)))

    @torch.jit.unused
    def forward_with_attention(self, x: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        """The block's output and its softmax attention (B, H, T, T), the attention computed once."""
        out, weights = self.attn.attend(self.norm1(x), need_weights=True)
        return self._finish(x, out), weights
