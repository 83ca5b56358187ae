"""Measurement: the models (ours at any geometry and depth, timm's reference), FLOPs, and timing.

``ModelSpec`` names a model to measure (picklable, so that a fresh process can rebuild it), ``Runner``
holds it built with its optimizer, input batch and the two timed steps; ``calibrate``,
``measure_rounds`` and ``measure_throughput`` time runners interleaved. Memory is in ``memory``.
"""
import math
import statistics
import time
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import timm
import torch
import torch.nn as nn
import torch.nn.functional as F
from timm.models.vision_transformer import VisionTransformer
from torch.profiler import profile
from torch.utils import flop_counter as fc
from torch.utils.flop_counter import FlopCounterMode

from ...models.layers import set_head_padding, sincos_2d_pos_embed
from ...models.paper import parse_arch
from ...models.datasets import DATASETS

TIMM_REF = 'timm_vit_reference'
parse_name = parse_arch  # attn, mlp, depth and heads of a registered name


# -- models ----------------------------------------------------------------------------------------

def set_fused_attn(model: nn.Module, fused: bool) -> nn.Module:
    """Switch every attention module of ``model`` (ours or timm's) between SDPA and explicit softmax."""
    for module in model.modules():
        if hasattr(module, 'fused_attn'):
            module.fused_attn = fused
    return model


def geometry(dataset: str, tokens: Optional[int] = None) -> Dict[str, Any]:
    """in_chans, img_size, patch_size and token count of a dataset tag, optionally resized to ``tokens``."""
    info = DATASETS[dataset]
    in_chans, height, width = info.input_size
    patch = info.patch_size
    if tokens is not None:
        side = math.isqrt(tokens)
        if side * side != tokens:
            raise ValueError(f'Scaling token counts must be squares, got {tokens}.')
        height = width = side * patch
    return dict(in_chans=in_chans, img_size=height, patch_size=patch, tokens=(height // patch) * (width // patch),
                num_classes=info.num_classes)


def build_model(name: str, dataset: str = 'mnist', fused: bool = True, img_size: Optional[int] = None,
                depth: Optional[int] = None) -> nn.Module:
    """A registered architecture at a dataset tag's geometry, optionally resized / deepened."""
    kwargs: Dict[str, Any] = {}
    if img_size is not None:
        kwargs['img_size'] = img_size
    if depth is not None:
        kwargs['depth'] = depth
    return set_fused_attn(timm.create_model(f'{name}.{dataset}', **kwargs), fused)


def build_timm_reference(dataset: str = 'mnist', depth: int = 6, num_heads: int = 1, fused: bool = True,
                         img_size: Optional[int] = None, embed_dim: int = 60, mlp_hidden_dim: int = 256) -> nn.Module:
    """timm's own ``VisionTransformer`` configured to compute what ``vit_minimal_std_mlp`` computes.

    Same patch embedding, width, depth, heads, MLP (60 -> 256 -> 60, GELU), pre-norm blocks with
    fused ``qkv`` and ``proj``, no class token, average pooling, no final norm (``final_norm=False``,
    ``fc_norm=False``), linear head. The one difference: timm has no fixed sin-cos position
    embedding, so its learned ``pos_embed`` table (tokens x width entries) is filled with our
    sin-cos values and frozen: both models then add the same constant and train the same
    parameters (``load_state_dict`` of a ``vit_minimal_std_mlp`` state dict gives identical outputs).
    """
    geo = geometry(dataset)
    img = img_size if img_size is not None else geo['img_size']
    model = VisionTransformer(
        img_size=img, patch_size=geo['patch_size'], in_chans=geo['in_chans'], num_classes=geo['num_classes'],
        embed_dim=embed_dim, depth=depth, num_heads=num_heads, mlp_ratio=mlp_hidden_dim / embed_dim,
        qkv_bias=True, class_token=False, global_pool='avg', pos_embed='learn', final_norm=False, fc_norm=False,
    )
    if model.blocks[0].mlp.fc1.out_features != mlp_hidden_dim:
        raise RuntimeError('timm reference: MLP hidden width does not match')
    grid = model.patch_embed.grid_size
    with torch.no_grad():
        model.pos_embed.copy_(sincos_2d_pos_embed(grid[0], grid[1], embed_dim))
    model.pos_embed.requires_grad_(False)
    return set_fused_attn(model, fused)


def op_profile(model: nn.Module, x: torch.Tensor, steps: int = 10) -> Dict[str, Dict[str, float]]:
    """The ops of ``steps`` inference forwards of ``model`` on ``x`` (after one unprofiled forward), as
    ``torch.profiler`` counts them: ``{op: {'calls': n, 'self_ms': self CPU time}}``."""
    with torch.inference_mode():
        model(x)
        with profile() as prof:
            for _ in range(steps):
                model(x)
    return {e.key: dict(calls=e.count, self_ms=e.self_cpu_time_total / 1000) for e in prof.key_averages()}


def count_params(model: nn.Module, trainable_only: bool = True) -> int:
    return sum(p.numel() for p in model.parameters() if p.requires_grad or not trainable_only)


def _cpu_sdpa_formulas() -> Dict[Any, Any]:
    """FLOP formulas for the CPU SDPA kernels where this torch's ``FlopCounterMode`` has none (torch 2.14 counts
    the CUDA kernels only): the same counts as the fused CUDA kernels, so every torch counts the architecture."""
    aten = torch.ops.aten
    formulas: Dict[Any, Any] = {}
    forward = getattr(aten, '_scaled_dot_product_flash_attention_for_cpu', None)
    if forward is not None and forward not in fc.flop_registry:
        def sdpa_cpu(query_shape, key_shape, value_shape, *args, out_shape=None, **kwargs) -> int:
            return fc.sdpa_flop_count(query_shape, key_shape, value_shape)
        formulas[forward] = sdpa_cpu
    backward = getattr(aten, '_scaled_dot_product_flash_attention_for_cpu_backward', None)
    if backward is not None and backward not in fc.flop_registry:
        def sdpa_cpu_backward(grad_out_shape, query_shape, key_shape, value_shape, *args, out_shape=None,
                              **kwargs) -> int:
            return fc.sdpa_backward_flop_count(grad_out_shape, query_shape, key_shape, value_shape)
        formulas[backward] = sdpa_cpu_backward
    return formulas


def count_flops(model: nn.Module, input_shape: Sequence[int], backward: bool = False) -> int:
    """FLOPs of one forward (and backward) pass of a single image, counted by ``FlopCounterMode``.

    It counts matrix products (linear layers, the patch-embedding convolution, batched matmuls and
    the fused SDPA kernels, CPU ones included) as 2 x multiply-accumulates; element-wise work
    (softmax, LayerNorm, GELU, additions) is not counted. SDPA counts on the true head width: the zero
    columns the attention pads its heads with for speed (``MinimalAttention.head_pad``) are left out.
    """
    param = next(model.parameters())
    x = torch.randn(1, *input_shape, device=param.device, dtype=param.dtype)
    was_training = model.training
    model.train(backward)
    padded = any(getattr(m, 'head_pad', 0) for m in model.modules())
    set_head_padding(model, False)
    try:
        with FlopCounterMode(display=False, custom_mapping=_cpu_sdpa_formulas()) as counter:
            if backward:
                model(x).sum().backward()
            else:
                with torch.no_grad():
                    model(x)
    finally:
        model.train(was_training)
        set_head_padding(model, padded)
        if backward:
            model.zero_grad(set_to_none=True)
    return int(counter.get_total_flops())


@dataclass
class ModelSpec:
    """A model to measure, picklable so that a fresh process can rebuild it."""
    key: str
    name: str
    dataset: str = 'mnist'
    fused: bool = True
    img_size: Optional[int] = None
    depth: Optional[int] = None
    heads: Optional[int] = None
    seed: int = 0

    def build(self) -> nn.Module:
        torch.manual_seed(self.seed)
        if self.name == TIMM_REF:
            return build_timm_reference(self.dataset, depth=self.depth or 6, num_heads=self.heads or 1,
                                        fused=self.fused, img_size=self.img_size)
        return build_model(self.name, self.dataset, fused=self.fused, img_size=self.img_size, depth=self.depth)

    def input_shape(self) -> Tuple[int, int, int]:
        geo = geometry(self.dataset)
        img = self.img_size if self.img_size is not None else geo['img_size']
        return geo['in_chans'], img, img


# -- timing ----------------------------------------------------------------------------------------

class Runner:
    """A built model with its optimizer and the steps that are timed."""

    def __init__(self, spec: ModelSpec, device: torch.device, batch_size: int, amp: bool = False,
                 amp_dtype: str = 'bfloat16') -> None:
        self.spec = spec
        self.device = device
        self.batch_size = batch_size
        self.model = spec.build().to(device)
        self.optimizer = torch.optim.AdamW([p for p in self.model.parameters() if p.requires_grad],
                                           lr=1e-3, weight_decay=1e-4)
        self.amp = amp
        self.amp_dtype = getattr(torch, amp_dtype)
        self.scaler = torch.amp.GradScaler(device.type) if amp and self.amp_dtype == torch.float16 else None
        g = torch.Generator().manual_seed(spec.seed)
        num_classes = self.model.num_classes
        self.x = torch.randn(batch_size, *spec.input_shape(), generator=g).to(device)
        self.y = torch.randint(0, num_classes, (batch_size,), generator=g).to(device)

    def _autocast(self):
        return torch.autocast(self.device.type, dtype=self.amp_dtype, enabled=self.amp)

    def infer_step(self) -> None:
        self.model.eval()
        with torch.inference_mode(), self._autocast():
            self.model(self.x)

    def train_step(self) -> None:
        self.model.train()
        self.optimizer.zero_grad(set_to_none=True)
        with self._autocast():
            loss = F.cross_entropy(self.model(self.x), self.y)
        if self.scaler is not None:
            self.scaler.scale(loss).backward()
            self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            loss.backward()
            self.optimizer.step()

    def step(self, mode: str) -> Callable[[], None]:
        return self.infer_step if mode == 'infer' else self.train_step


def _sync(device: torch.device) -> None:
    if device.type == 'cuda':
        torch.cuda.synchronize(device)


def _time(fn: Callable[[], None], iters: int, device: torch.device) -> Tuple[float, float]:
    """Process CPU time and wall time of ``iters`` calls of ``fn``."""
    _sync(device)
    wall, cpu = time.perf_counter(), time.process_time()
    for _ in range(iters):
        fn()
    _sync(device)
    return time.process_time() - cpu, time.perf_counter() - wall


def calibrate(runners: Sequence[Runner], mode: str, warmup: int, target_time: float) -> Dict[str, int]:
    """Warm every runner up, then choose its steps per timed repeat so that one repeat lasts ~``target_time``."""
    iters: Dict[str, int] = {}
    for r in runners:
        fn = r.step(mode)
        for _ in range(max(warmup, 1)):
            fn()
        one = _time(fn, 1, r.device)[1]
        iters[r.spec.key] = max(1, min(1000, round(target_time / max(one, 1e-6))))
    return iters


def measure_rounds(runners: Sequence[Runner], mode: str, repeats: int, iters: Dict[str, int], clock: str = 'wall',
                   wall: Optional[Dict[str, List[float]]] = None) -> Dict[str, List[float]]:
    """Images/s of every runner per repeat; each repeat visits every runner once, the order rotated.

    ``clock='cpu'`` divides by the process CPU time instead of the wall time; the wall-time
    throughputs are added to ``wall`` if given.
    """
    out: Dict[str, List[float]] = {r.spec.key: [] for r in runners}
    n = len(runners)
    for rep in range(repeats):
        for r in [runners[(i + rep) % n] for i in range(n)]:
            k = iters[r.spec.key]
            cpu_s, wall_s = _time(r.step(mode), k, r.device)
            out[r.spec.key].append(k * r.batch_size / max(cpu_s if clock == 'cpu' else wall_s, 1e-9))
            if wall is not None:
                wall.setdefault(r.spec.key, []).append(k * r.batch_size / wall_s)
    return out


def measure_throughput(runners: Sequence[Runner], mode: str, repeats: int, warmup: int, target_time: float,
                       clock: str = 'wall', wall: Optional[Dict[str, List[float]]] = None) -> Dict[str, List[float]]:
    """Calibrate, then images/s of every runner per repeat (see ``measure_rounds``)."""
    return measure_rounds(runners, mode, repeats, calibrate(runners, mode, warmup, target_time), clock, wall)


def ratios(num: Sequence[float], den: Sequence[float]) -> List[float]:
    """Per-repeat ratios num[i] / den[i]."""
    return [a / b for a, b in zip(num, den)]


def median(values: Sequence[float]) -> float:
    return float(statistics.median(values)) if values else float('nan')

