"""Benchmarks of the minimal vision transformers: what the minimal variants buy, measured.

For every selected architecture (a glob over ``ARCHITECTURES``) this module measures parameters,
forward FLOPs (``torch.utils.flop_counter``), inference and training throughput (images/s, the
median of several timed repeats after warm-up, all models interleaved within each repeat) and the
peak memory of an inference and a training step, then reports, side by side and from the same run:

- our ``std`` model against timm's own ``VisionTransformer`` built to compute the same function
  (implementation overhead; target: at most 5% slower);
- every minimal variant against the paper's baseline ``std_mlp`` of the same depth and geometry;
- fused ``F.scaled_dot_product_attention`` on against off;
- how throughput and memory scale with the token count and the depth, for the baseline and ``sym``;
- accuracy against parameters, from the paper's Table 2 and the reproduce-paper results if present.

Everything is written to a markdown report (``BENCHMARKS.md``), PNG plots and a JSON file with the
raw measurements (``render_report`` rebuilds the report and plots from it without measuring).
``scripts/benchmark.py`` / ``timm-minimal-benchmark`` is the command line front; with ``--training`` it runs
``timm_minimal.tools.training_benchmark`` instead (the trainer against the bare training step) with the other
arguments.

Method notes (also written into the report):

- Timing: back-to-back steps, their number calibrated per model after warm-up so that one timed repeat
  lasts about ``target_time`` seconds. On a CPU with one torch thread the clock is the process CPU time
  (``time.process_time``), which leaves out the time the scheduler gives other jobs on a shared machine;
  otherwise wall time (CUDA: synchronised).
- Interleaving: models are measured in blocks (the baseline plus a few others), in turn, for several
  rounds with the order rotated; a ratio is taken between two models *within* a round and the median over
  rounds is reported with a bootstrap interval, so a background load that slows one round slows both
  sides of its ratios.
- Training step: ``zero_grad``, forward, cross-entropy, backward, AdamW step.
- Memory: the peak of torch allocations during a step above what was live before it (CPU: profiler memory
  events; CUDA: ``max_memory_allocated``); ``memory_method='rss'`` measures peak RSS growth instead, one
  fresh process per model (forked from a server that has imported torch and timm once).
"""
import argparse
import fnmatch
import gc
import glob
import json
import math
import os
import platform
import statistics
import sys
import time
from dataclasses import asdict, dataclass
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import timm
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.flop_counter import FlopCounterMode

from ...models.layers import sincos_2d_pos_embed
from ...models.paper import TABLE2, VARIANTS, parse_arch
from ...models.vit_minimal import ARCHITECTURES, DATASETS

__all__ = [
    'BenchmarkConfig', 'PAPER_TABLE2', 'build_model', 'build_timm_reference', 'count_flops', 'count_params',
    'run_benchmark', 'render_report', 'load_reproduce_results', 'main',
]

TIMM_REF = 'timm_vit_reference'

# The paper's Table 2 (MNIST, 6 layers, 500 epochs, numbers of the last epoch), as the accuracy plot reads it.
PAPER_TABLE2: List[Dict[str, Any]] = [
    dict(model=r.arch, heads=r.heads, mlp=r.mlp, modification=r.modification, params=r.params,
         train_acc=r.train_acc, val_acc=r.val_acc) for r in TABLE2]
ATTN_DESCRIPTION = {attn: v['short'] for attn, v in VARIANTS.items()}
parse_name = parse_arch  # attn, mlp, depth and heads of a registered name


def baseline_of(name: str) -> str:
    """The paper's baseline (unchanged attention with MLP, 1 head) at the depth of ``name``."""
    return f'vit_minimal_std_mlp_{parse_name(name)["depth"]}x1'


# -- configuration ---------------------------------------------------------------------------------

@dataclass
class BenchmarkConfig:
    """Everything a benchmark run depends on; the defaults are the committed report's settings."""
    models: Tuple[str, ...] = ('vit_minimal_*_6x*',)
    dataset: str = 'mnist'
    batch_size: int = 256
    repeats: int = 7
    warmup: int = 1
    target_time: float = 0.25
    device: str = 'auto'
    threads: Optional[int] = 1
    # 'cpu': images per second of process CPU time (needs one thread), 'wall', or 'auto': 'cpu' on a CPU
    # with one thread, else 'wall'
    clock: str = 'auto'
    amp: bool = False
    amp_dtype: str = 'bfloat16'
    # SDPA on against off for the selected models matching these globs
    sdpa_models: Tuple[str, ...] = ('vit_minimal_std_mlp_*x1', 'vit_minimal_sym_[0-9]*')
    timm_compare: bool = True
    timm_pairs: int = 20
    timm_latency: bool = True
    block_size: int = 3
    memory: bool = True
    memory_method: str = 'tensors'
    memory_steps: int = 1
    scaling: bool = True
    scaling_models: Tuple[str, ...] = ('vit_minimal_std_mlp_6x1', 'vit_minimal_sym_6x1')
    scaling_tokens: Tuple[int, ...] = (16, 64, 256, 1024)
    scaling_depths: Tuple[int, ...] = (3, 6, 12, 24)
    scaling_tokens_per_batch: int = 2048
    scaling_repeats: int = 4
    output: str = 'BENCHMARKS.md'
    plots_dir: str = 'benchmarks'
    json_path: Optional[str] = None
    results_path: str = 'results/reproduce_paper.json'
    plots: bool = True
    quick: bool = False
    seed: int = 0
    command: str = ''

    @classmethod
    def quick_config(cls, **overrides: Any) -> 'BenchmarkConfig':
        """A smoke test: two minimal models and the timm reference, tiny batches, 1-2 repeats."""
        quick = dict(
            models=('vit_minimal_std_mlp_6x1', 'vit_minimal_sym_6x1'), sdpa_models=('*',),
            batch_size=8, repeats=2, warmup=1, target_time=0.02, timm_pairs=2, timm_latency=False,
            memory_steps=1, scaling_models=('vit_minimal_sym_6x1',),
            scaling_tokens=(16, 64), scaling_depths=(2, 4), scaling_tokens_per_batch=64, scaling_repeats=1,
            quick=True,
        )
        quick.update(overrides)
        return cls(**quick)

    def resolved_clock(self, device: torch.device) -> str:
        if self.clock not in ('auto', 'cpu', 'wall'):
            raise ValueError(f"Unknown clock '{self.clock}'; choose 'auto', 'cpu' or 'wall'.")
        if self.clock == 'cpu' and (device.type != 'cpu' or torch.get_num_threads() != 1):
            raise ValueError("clock='cpu' needs device cpu and one thread (--threads 1).")
        if self.clock == 'auto':
            return 'cpu' if device.type == 'cpu' and torch.get_num_threads() == 1 else 'wall'
        return self.clock

    def resolved_device(self) -> torch.device:
        if self.device == 'auto':
            return torch.device('cuda' if torch.cuda.is_available() else 'cpu')
        return torch.device(self.device)


def select_models(patterns: Sequence[str]) -> List[str]:
    """Registered architectures matching any glob in ``patterns`` (registry order)."""
    selected = [n for n in ARCHITECTURES if any(fnmatch.fnmatchcase(n, p) for p in patterns)]
    if not selected:
        raise ValueError(f'No registered architecture matches {list(patterns)}; see timm.list_models("vit_minimal*").')
    return selected


# -- models ----------------------------------------------------------------------------------------

def set_fused_attn(model: nn.Module, fused: bool) -> nn.Module:
    """Switch every attention module of ``model`` (ours or timm's) between SDPA and explicit softmax."""
    for module in model.modules():
        if hasattr(module, 'fused_attn'):
            module.fused_attn = fused
    return model


def geometry(dataset: str, tokens: Optional[int] = None) -> Dict[str, Any]:
    """in_chans, img_size, patch_size and token count of a dataset tag, optionally resized to ``tokens``."""
    cfg = DATASETS[dataset]
    in_chans, height, width = cfg['input_size']
    patch = cfg['patch_size']
    if tokens is not None:
        side = math.isqrt(tokens)
        if side * side != tokens:
            raise ValueError(f'Scaling token counts must be squares, got {tokens}.')
        height = width = side * patch
    return dict(in_chans=in_chans, img_size=height, patch_size=patch, tokens=(height // patch) * (width // patch),
                num_classes=cfg['num_classes'])


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
    from timm.models.vision_transformer import VisionTransformer
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


def count_params(model: nn.Module, trainable_only: bool = True) -> int:
    return sum(p.numel() for p in model.parameters() if p.requires_grad or not trainable_only)


def count_flops(model: nn.Module, input_shape: Sequence[int], backward: bool = False) -> int:
    """FLOPs of one forward (and backward) pass of a single image, counted by ``FlopCounterMode``.

    It counts matrix products (linear layers, the patch-embedding convolution, batched matmuls and
    the fused SDPA kernels, CPU ones included) as 2 x multiply-accumulates; element-wise work
    (softmax, LayerNorm, GELU, additions) is not counted.
    """
    param = next(model.parameters())
    x = torch.randn(1, *input_shape, device=param.device, dtype=param.dtype)
    was_training = model.training
    model.train(backward)
    try:
        with FlopCounterMode(display=False) as counter:
            if backward:
                model(x).sum().backward()
            else:
                with torch.no_grad():
                    model(x)
    finally:
        model.train(was_training)
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


# -- memory ----------------------------------------------------------------------------------------

def _read_status_kb(field_name: str) -> Optional[int]:
    try:
        with open('/proc/self/status') as f:
            for line in f:
                if line.startswith(field_name + ':'):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def _reset_peak_rss() -> bool:
    """Reset the kernel's peak-RSS counter of this process (Linux >= 4.0)."""
    try:
        with open('/proc/self/clear_refs', 'w') as f:
            f.write('5')
        return True
    except OSError:
        return False


def _malloc_trim() -> None:
    try:
        import ctypes
        ctypes.CDLL('libc.so.6').malloc_trim(0)
    except (OSError, AttributeError):
        pass


def _max_rss_kb() -> int:
    """The process's peak RSS from getrusage, in KiB (macOS reports bytes)."""
    import resource
    maxrss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return maxrss // 1024 if sys.platform == 'darwin' else maxrss


def _rss_kb() -> int:
    rss = _read_status_kb('VmRSS')
    # not Linux: the peak so far is the best available baseline
    return rss if rss is not None else _max_rss_kb()


def _peak_rss_kb() -> int:
    peak = _read_status_kb('VmHWM')
    return peak if peak is not None else _max_rss_kb()


def _cpu_memory_worker(job: Dict[str, Any]) -> Dict[str, float]:
    """In a fresh process: peak RSS growth (MiB) of inference and of training steps of one model."""
    spec = ModelSpec(**job['spec'])
    if job['threads']:
        torch.set_num_threads(job['threads'])
    runner = Runner(spec, torch.device('cpu'), job['batch_size'], amp=job['amp'], amp_dtype=job['amp_dtype'])
    # one unmeasured step of each kind: lazy initialisation, and the AdamW state exists before measuring
    for mode in ('infer', 'train'):
        runner.step(mode)()
    result: Dict[str, float] = {}
    for mode in ('infer', 'train'):
        gc.collect()
        _malloc_trim()
        reset = _reset_peak_rss()
        base = _rss_kb()
        for _ in range(job['steps']):
            runner.step(mode)()
        result[mode] = max(_peak_rss_kb() - base, 0) / 1024.
        result[f'{mode}_peak_reset'] = float(reset)
    return result


def _memory_server() -> None:
    """A fork server: imports torch and timm once, then forks one fresh child per job read from stdin.

    Each line of stdin is a JSON job, answered by one JSON line on stdout. Without ``os.fork``
    (not POSIX) it serves a single job in this process.
    """
    out = sys.stdout
    sys.stdout = sys.stderr  # nothing but answers on the pipe
    # import what the first step imports lazily, once, single-threaded (no thread pool to fork)
    torch.set_num_threads(1)
    warm = ModelSpec('warm-up', 'vit_minimal_sym_6x1', depth=1)
    Runner(warm, torch.device('cpu'), 1).train_step()
    for line in sys.stdin:
        job = json.loads(line)
        if not hasattr(os, 'fork'):
            out.write(json.dumps(_safe_worker(job)) + '\n')
            out.flush()
            return
        pid = os.fork()
        if pid == 0:
            try:
                out.write(json.dumps(_safe_worker(job)) + '\n')
                out.flush()
            finally:
                os._exit(0)
        os.waitpid(pid, 0)


def _safe_worker(job: Dict[str, Any]) -> Dict[str, Any]:
    try:
        return _cpu_memory_worker(job)
    except Exception as e:  # reported by the parent
        return {'error': f'{type(e).__name__}: {e}'}


class _MemoryServer:
    """The parent's end of ``_memory_server``, started on first use and reused for the whole run."""

    def __init__(self) -> None:
        self.proc: Optional[Any] = None

    def _start(self) -> None:
        import subprocess
        env = dict(os.environ)
        env['PYTHONPATH'] = os.pathsep.join([p for p in sys.path if p] + [env.get('PYTHONPATH', '')])
        # CPU memory only: with a GPU visible, the warm-up's backward starts autograd's device threads, and
        # a process cannot fork after that (the children's backward fails)
        env['CUDA_VISIBLE_DEVICES'] = ''
        self.proc = subprocess.Popen(
            [sys.executable, '-c', 'from timm_minimal.tools.benchmark import _memory_server; _memory_server()'],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)

    def run(self, job: Dict[str, Any]) -> Dict[str, Any]:
        if self.proc is None or self.proc.poll() is not None:
            self._start()
        self.proc.stdin.write(json.dumps(job) + '\n')
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError('memory measurement process ended without an answer')
        res = json.loads(line)
        if 'error' in res:
            raise RuntimeError(f'memory measurement of {job["spec"]["key"]} failed: {res["error"]}')
        return res

    def close(self) -> None:
        if self.proc is not None:
            if self.proc.poll() is None:
                self.proc.stdin.close()
                self.proc.wait(timeout=60)
            self.proc = None


class _QuietStderr:
    """Silence the C++ profiler's log lines on file descriptor 2 while it runs."""

    def __enter__(self) -> None:
        sys.stderr.flush()
        self.saved = os.dup(2)
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 2)
        os.close(devnull)

    def __exit__(self, *exc: Any) -> None:
        os.dup2(self.saved, 2)
        os.close(self.saved)


def tensor_memory_peak(fn: Callable[[], None]) -> float:
    """Peak (MiB) of CPU memory allocated through torch's allocator while ``fn`` runs, above what was live before.

    The profiler's memory events (every allocation and free, with its size and time) are summed in
    time order; the running sum's maximum is the peak. The CPU analogue of
    ``torch.cuda.max_memory_allocated``: tensors (activations, saved tensors, gradients,
    temporaries inside ops), not memory that libraries allocate outside torch.
    """
    from torch.profiler import ProfilerActivity, profile
    with _QuietStderr(), profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    events = sorted((e.start_ns(), e.nbytes()) for e in prof.profiler.kineto_results.events()
                    if e.name() == '[memory]' and e.device_type() == torch.autograd.DeviceType.CPU)
    current = peak = 0
    for _, nbytes in events:
        current += nbytes
        peak = max(peak, current)
    return peak / 2 ** 20


def measure_memory(specs: Sequence[ModelSpec], device: torch.device, batch_size: int, threads: Optional[int],
                   steps: int, amp: bool = False, amp_dtype: str = 'bfloat16',
                   runners: Optional[Dict[str, Runner]] = None, method: str = 'tensors',
                   server: Optional[_MemoryServer] = None) -> Dict[str, Dict[str, float]]:
    """Peak working memory (MiB) of an inference and a training step per spec.

    ``method='tensors'`` (default): torch allocations, CPU through the profiler, CUDA through
    ``max_memory_allocated``, in this process after one unmeasured step. ``method='rss'`` (CPU):
    peak RSS growth of each model in a fresh process forked from ``_memory_server``.
    """
    out: Dict[str, Dict[str, float]] = {}
    if device.type == 'cpu' and method == 'rss':
        own = server is None
        server = server or _MemoryServer()
        try:
            for spec in specs:
                out[spec.key] = server.run(dict(spec=asdict(spec), batch_size=batch_size, threads=threads,
                                                steps=steps, amp=amp, amp_dtype=amp_dtype))
        finally:
            if own:
                server.close()
        return out
    if method not in ('tensors', 'rss'):
        raise ValueError(f"Unknown memory method '{method}'; choose 'tensors' or 'rss'.")
    if device.type == 'cpu':  # the profiler's and autograd's one-time allocations, not charged to a model
        warm = Runner(ModelSpec('warm-up', 'vit_minimal_sym_6x1', depth=1), device, 2)
        for mode in ('infer', 'train', 'train'):
            tensor_memory_peak(warm.step(mode))
        del warm
    for spec in specs:
        runner = (runners or {}).get(spec.key) or Runner(spec, device, batch_size, amp, amp_dtype)
        res = {}
        for mode in ('infer', 'train'):
            step = runner.step(mode)
            step()  # unmeasured: lazy initialisation, the AdamW state exists afterwards
            gc.collect()

            def steps_fn() -> None:
                for _ in range(steps):
                    step()

            if device.type == 'cuda':
                torch.cuda.synchronize(device)
                torch.cuda.reset_peak_memory_stats(device)
                base = torch.cuda.memory_allocated(device)
                steps_fn()
                torch.cuda.synchronize(device)
                res[mode] = (torch.cuda.max_memory_allocated(device) - base) / 2 ** 20
            else:
                res[mode] = tensor_memory_peak(steps_fn)
        out[spec.key] = res
    return out


# -- the run ---------------------------------------------------------------------------------------

def _environment(config: BenchmarkConfig, device: torch.device) -> Dict[str, Any]:
    cpu = platform.processor() or platform.machine()
    try:
        with open('/proc/cpuinfo') as f:
            for line in f:
                if line.startswith('model name'):
                    cpu = line.split(':', 1)[1].strip()
                    break
    except OSError:
        pass
    env = dict(
        device=str(device), cpu=cpu, cpu_count=os.cpu_count(), threads=torch.get_num_threads(),
        torch=torch.__version__, timm=timm.__version__, python=platform.python_version(),
        platform=platform.platform(terse=True), date=time.strftime('%Y-%m-%d'),
        dtype=f'autocast {config.amp_dtype}' if config.amp else 'float32',
        sdpa_backend='CPU flash-attention kernel' if device.type == 'cpu' else 'CUDA SDPA (auto-selected kernel)',
    )
    if device.type == 'cuda':
        env['gpu'] = torch.cuda.get_device_name(device)
    return env


def _log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def run_benchmark(config: BenchmarkConfig) -> Dict[str, Any]:
    """Measure everything ``config`` asks for; returns the JSON-serialisable results."""
    server = _MemoryServer()
    try:
        return _run(config, server)
    finally:
        server.close()


def _run(config: BenchmarkConfig, server: '_MemoryServer') -> Dict[str, Any]:
    start = time.perf_counter()
    device = config.resolved_device()
    if config.threads:
        torch.set_num_threads(config.threads)
    if config.dataset not in DATASETS:
        raise ValueError(f"Unknown dataset '{config.dataset}'; choose one of {', '.join(DATASETS)}.")
    names = select_models(config.models)
    for name in list(names):
        base = baseline_of(name)
        if base not in names:
            names.insert(0, base)
    clock = config.resolved_clock(device)
    env = _environment(config, device)
    env['clock'] = clock
    results: Dict[str, Any] = dict(config=_config_dict(config), env=env)

    # 1. every model, and SDPA off for some. Measured in blocks:
    #    each block holds the baseline of its depth and up to `block_size` other models, measured in turn
    #    for `repeats` rounds, so every ratio compares measurements taken seconds apart.
    def spec_of(name: str, fused: bool = True) -> ModelSpec:
        return ModelSpec(name + ('' if fused else '[sdpa off]'), name, config.dataset, fused, seed=config.seed)

    ref_depths = sorted({parse_name(n)['depth'] for n in names if n.startswith('vit_minimal_std_mlp_')})
    ref_keys = {depth: f'{TIMM_REF}_{depth}x1' for depth in ref_depths}
    baselines = {baseline_of(n) for n in names}
    groups: Dict[str, List[List[ModelSpec]]] = {}  # baseline -> groups of specs that share a block
    for name in names:
        base = baseline_of(name)
        group = [] if name in baselines else [spec_of(name)]
        if any(fnmatch.fnmatchcase(name, p) for p in config.sdpa_models):
            group.append(spec_of(name, fused=False))
        if group:
            groups.setdefault(base, []).append(group)
    blocks: List[Tuple[str, List[ModelSpec]]] = []
    for base, base_groups in groups.items():
        current: List[ModelSpec] = []
        for group in base_groups:
            if current and len(current) + len(group) > config.block_size:
                blocks.append((base, current))
                current = []
            current = current + group
        if current:
            blocks.append((base, current))
    all_specs = [spec_of(b) for b in sorted(baselines)] + [s for _, block in blocks for s in block]
    _log(f'[benchmark] {len(all_specs)} models in {len(blocks)} blocks on {device}, batch {config.batch_size}, '
         f'threads {torch.get_num_threads()}')
    runners = {s.key: Runner(s, device, config.batch_size, config.amp, config.amp_dtype) for s in all_specs}
    rows: Dict[str, Dict[str, Any]] = {}
    for key, r in runners.items():
        s = r.spec
        info = dict(parse_name(s.name)) if s.name != TIMM_REF else dict(attn='std', mlp=True, depth=s.depth, heads=s.heads)
        rows[key] = dict(
            key=key, name=s.name, fused=s.fused, **info, batch_size=config.batch_size,
            params=count_params(r.model), params_total=count_params(r.model, trainable_only=False),
            flops=count_flops(r.model, s.input_shape()),
            flops_train=count_flops(r.model, s.input_shape(), backward=True),
            baseline=baseline_of(s.name) if s.name != TIMM_REF else f'vit_minimal_std_mlp_{s.depth}x1',
        )
    for mode in ('infer', 'train'):
        _log(f'[benchmark] {mode} throughput, {config.repeats} repeats per block')
        iters = calibrate(list(runners.values()), mode, config.warmup, config.target_time)
        wall: Dict[str, List[float]] = {}
        for b, (base, block) in enumerate(blocks):
            tp = measure_rounds([runners[base]] + [runners[s.key] for s in block], mode, config.repeats, iters,
                                clock, wall)
            rows[base].setdefault(f'{mode}_blocks', []).append(tp[base])
            rows[base].setdefault(mode, []).extend(tp[base])
            for s in block:
                rows[s.key][mode] = tp[s.key]
                rows[s.key]['block'] = len(rows[base][f'{mode}_blocks']) - 1
        for key, vals in wall.items():
            rows[key][f'{mode}_wall'] = vals
    if config.memory:
        _log(f'[benchmark] peak memory ({config.memory_method})')
        mem = measure_memory([r.spec for r in runners.values()], device, config.batch_size, config.threads,
                             config.memory_steps, config.amp, config.amp_dtype, runners, config.memory_method, server)
        for key, res in mem.items():
            rows[key]['mem_infer'] = res['infer']
            rows[key]['mem_train'] = res['train']
    results['models'] = list(rows.values())
    del runners
    gc.collect()

    # 2. our std_mlp against timm's VisionTransformer, with a second copy of ours as a noise control
    if config.timm_compare:
        results['timm'] = []
        for depth in ref_depths:
            ours = f'vit_minimal_std_mlp_{depth}x1'
            settings = [(config.batch_size, ('infer', 'train'))] + ([(1, ('infer',))] if config.timm_latency else [])
            for batch, modes in settings:
                specs = [ModelSpec(ours, ours, config.dataset, True, seed=config.seed),
                         ModelSpec(ref_keys[depth], TIMM_REF, config.dataset, True, depth=depth, heads=1, seed=config.seed),
                         ModelSpec(ours + '[copy]', ours, config.dataset, True, seed=config.seed)]
                trio = [Runner(s, device, batch, config.amp, config.amp_dtype) for s in specs]
                missing, unexpected = trio[1].model.load_state_dict(trio[0].model.state_dict(), strict=False)
                if unexpected or missing != ['pos_embed']:
                    raise RuntimeError(f'timm reference does not match {ours}: missing {missing}, unexpected {unexpected}')
                for r in trio:
                    r.model.eval()
                with torch.no_grad():
                    max_diff = (trio[0].model(trio[0].x) - trio[1].model(trio[0].x)).abs().max().item()
                _log(f'[benchmark] ours vs timm, depth {depth}, batch {batch}, {config.timm_pairs} alternated repeats')
                entry = dict(ours=ours, ref=ref_keys[depth], depth=depth, fused=True, batch_size=batch,
                             params_ours=count_params(trio[0].model), params_ref=count_params(trio[1].model),
                             params_ref_total=count_params(trio[1].model, trainable_only=False), max_abs_diff=max_diff)
                for mode in modes:
                    tp = measure_throughput(trio, mode, config.timm_pairs, config.warmup, config.target_time / 2, clock)
                    entry[mode] = dict(ours=tp[specs[0].key], ref=tp[specs[1].key], copy=tp[specs[2].key])
                results['timm'].append(entry)
                del trio

    # 3. scaling with the token count and the depth, at a fixed number of tokens per batch. All points of
    #    a sweep are measured in turn in every round, so a burst of background load spoils one round of
    #    many points rather than every round of one point.
    if config.scaling:
        results['scaling'] = dict(tokens_per_batch=config.scaling_tokens_per_batch, tokens=[], depth=[])
        geo = geometry(config.dataset)
        sweeps = {
            'tokens': [(t, dict(img_size=geometry(config.dataset, t)['img_size'])) for t in config.scaling_tokens],
            'depth': [(d, dict(depth=d)) for d in config.scaling_depths],
        }
        for axis, points in sweeps.items():
            if not points:
                continue
            runners, out = [], {}
            for value, override in points:
                tokens = value if axis == 'tokens' else geo['tokens']
                batch = max(1, config.scaling_tokens_per_batch // tokens)
                for name in config.scaling_models:
                    for fused in ((True, False) if axis == 'tokens' and config.sdpa_models else (True,)):
                        key = f'{name}[{axis}={value}{"" if fused else ",sdpa off"}]'
                        r = Runner(ModelSpec(key, name, config.dataset, fused, seed=config.seed, **override), device,
                                   batch, config.amp, config.amp_dtype)
                        runners.append(r)
                        out[key] = dict(key=key, name=name, fused=fused, axis=axis, value=value, tokens=tokens,
                                        depth=value if axis == 'depth' else parse_name(name)['depth'],
                                        batch_size=batch, params=count_params(r.model),
                                        flops=count_flops(r.model, r.spec.input_shape()))
            _log(f'[benchmark] scaling with {axis}: {", ".join(str(v) for v, _ in points)}; '
                 f'{len(runners)} models, {config.scaling_repeats} rounds')
            for mode in ('infer', 'train'):
                tp = measure_throughput(runners, mode, config.scaling_repeats, config.warmup, config.target_time,
                                        clock)
                for key, vals in tp.items():
                    out[key][mode] = vals
            if config.memory:
                for value, _ in points:
                    group = [r for r in runners if out[r.spec.key]['value'] == value]
                    mem = measure_memory([r.spec for r in group], device, group[0].batch_size, config.threads,
                                         config.memory_steps, config.amp, config.amp_dtype,
                                         {r.spec.key: r for r in group}, config.memory_method, server)
                    for key, res in mem.items():
                        out[key]['mem_infer'] = res['infer']
                        out[key]['mem_train'] = res['train']
            results['scaling'][axis].extend(out.values())
            del runners
            gc.collect()

    results['env']['wall_time_s'] = time.perf_counter() - start
    return results


def _config_dict(config: BenchmarkConfig) -> Dict[str, Any]:
    d = asdict(config)
    return {k: list(v) if isinstance(v, tuple) else v for k, v in d.items()}


# -- accuracy results ------------------------------------------------------------------------------

def load_reproduce_results(path: str) -> Optional[List[Dict[str, Any]]]:
    """Rows of the reproduce-paper results (a list of dicts, or ``{'rows': [...]}``), None if absent."""
    if not path or not os.path.exists(path):
        return None
    with open(path) as f:
        data = json.load(f)
    if isinstance(data, dict):
        data = data.get('rows', data.get('results', []))
    rows = [r for r in data if isinstance(r, dict) and r.get('params') is not None and r.get('val_acc') is not None]
    return list({r.get('model', i): r for i, r in enumerate(rows)}.values())  # a model in both tables counts once


def _as_percent(values: Sequence[float]) -> List[float]:
    """Accuracies as percentages (a column whose values are all <= 1 is read as fractions)."""
    values = [float(v) for v in values]
    return [v * 100. for v in values] if values and max(values) <= 1.0 else values


# -- report ----------------------------------------------------------------------------------------

def _fmt_int(v: float) -> str:
    return f'{int(round(v)):,}'


def _fmt(v: Optional[float], digits: int = 2) -> str:
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return 'n/a'
    return f'{v:.{digits}f}'


def _fmt_tp(v: float) -> str:
    return f'{v:,.0f}' if v >= 100 else f'{v:,.1f}'


def _table(header: Sequence[str], rows: Sequence[Sequence[str]], align: Optional[str] = None) -> str:
    align = align or ('l' + 'r' * (len(header) - 1))
    sep = ['---:' if a == 'r' else ':---' for a in align]
    lines = ['| ' + ' | '.join(header) + ' |', '| ' + ' | '.join(sep) + ' |']
    lines += ['| ' + ' | '.join(r) + ' |' for r in rows]
    return '\n'.join(lines)


def median_ci(values: Sequence[float], level: float = 0.95, resamples: int = 2000, seed: int = 0
              ) -> Tuple[float, float, float]:
    """The median and a bootstrap confidence interval of the median (percentile method, seeded)."""
    import random
    values = list(values)
    if len(values) < 2:
        m = median(values)
        return m, m, m
    rng = random.Random(seed)
    meds = sorted(statistics.median(rng.choices(values, k=len(values))) for _ in range(resamples))
    lo = meds[int((1 - level) / 2 * resamples)]
    hi = meds[min(resamples - 1, int((1 + level) / 2 * resamples))]
    return median(values), lo, hi


def _ratio_cell(vals: Sequence[float]) -> str:
    m, lo, hi = median_ci(vals)
    return f'{m:.2f} ({lo:.2f}-{hi:.2f})'


def _label(row: Dict[str, Any]) -> str:
    if row['name'] == TIMM_REF:
        return f'timm VisionTransformer ({row["depth"]}x{row["heads"]}, ref.)'
    return row['name'].replace('vit_minimal_', '')


def _paired(row: Dict[str, Any], ref: Dict[str, Any], mode: str) -> List[float]:
    """The measurements of ``ref`` taken in the same block and rounds as those of ``row``."""
    blocks = ref.get(f'{mode}_blocks')
    if blocks is not None and row.get('block') is not None:
        return blocks[row['block']]
    return ref[mode]


def _order(row: Dict[str, Any]) -> Tuple[int, int]:
    return (ARCHITECTURES.index(row['name']) if row['name'] in ARCHITECTURES else len(ARCHITECTURES), row['depth'])


def _name_cell(row: Dict[str, Any]) -> str:
    return _label(row) if row['name'] == TIMM_REF else f'`{_label(row)}`'


def _drift_note(results: Dict[str, Any]) -> str:
    """How far the baseline's absolute throughput moved between two sections of the same run."""
    by_key = {r['key']: r for r in results.get('models', [])}
    for e in results.get('timm', []):
        base = by_key.get(e['ours'])
        if base is not None and 'infer' in e and e['batch_size'] == base.get('batch_size'):
            return (f' (in this run the baseline\'s inference measured {_fmt_tp(median(base["infer"]))} img/s here '
                    f'and {_fmt_tp(median(e["infer"]["ours"]))} img/s in the comparison with timm below)')
    return ''


def _clock_text(env: Dict[str, Any], results: Dict[str, Any]) -> str:
    if env.get('clock') != 'cpu':
        return 'wall time (`time.perf_counter`)'
    shares = [median(r['infer_wall']) / median(r['infer']) for r in results.get('models', []) if r.get('infer_wall')]
    shares += [median(r['train_wall']) / median(r['train']) for r in results.get('models', []) if r.get('train_wall')]
    text = ('process CPU time (`time.process_time`): throughput per second of CPU time the benchmark got, which '
            'leaves out the time the scheduler gave to other jobs on the shared cores (see *Method*)')
    if shares:
        text += (f'; wall-clock throughput was {median(shares):.0%} of it (median over models), so the machine '
                 f'gave this run about {median(shares):.0%} of a core')
    return text


def render_report(results: Dict[str, Any], output: str, plots_dir: Optional[str] = None,
                  results_path: Optional[str] = None) -> str:
    """Write the markdown report (and the PNG plots into ``plots_dir``); returns the markdown."""
    env, cfg = results['env'], results['config']
    md: List[str] = []
    plots_rel = None
    if plots_dir:
        os.makedirs(plots_dir, exist_ok=True)
        out_dir = os.path.dirname(os.path.abspath(output))
        plots_rel = os.path.relpath(os.path.abspath(plots_dir), out_dir).replace(os.sep, '/')
    geo = geometry(cfg['dataset'])

    md.append('# Benchmarks\n')
    md.append('What the minimal variants of *Reducing the Transformer Architecture to a Minimum* buy in compute, '
              'measured by `timm_minimal.tools.benchmark` (`python scripts/benchmark.py` or `timm-minimal-benchmark`). '
              'Every number below comes from the one run described in *Setup*; *Method* says how each is measured.'
              + (' **Quick smoke-test run: the numbers are not meaningful.**' if cfg.get('quick') else '') + '\n')
    md.append('Ratios are medians over repeats of a ratio taken *within* each repeat, followed by a 95% bootstrap '
              'confidence interval of that median in parentheses: on a loaded machine single timings scatter '
              'widely, and the interval says how far a median can be trusted.\n')
    md.append('## Setup\n')
    shared = ' (shared with other jobs while measuring)' if (env.get('cpu_count') or 99) <= 4 else ''
    setup = [
        ('device', env['device'] + (f' ({env["gpu"]})' if env.get('gpu') else '')),
        ('CPU', f'{env["cpu"]}, {env["cpu_count"]} cores{shared}'),
        ('torch threads', f'{env["threads"]} (`torch.set_num_threads`)'),
        ('clock', _clock_text(env, results)),
        ('torch / timm / Python', f'{env["torch"]} / {env["timm"]} / {env["python"]}'),
        ('dtype', env['dtype']),
        ('geometry', f'`.{cfg["dataset"]}`: {geo["in_chans"]}x{geo["img_size"]}x{geo["img_size"]} images, '
                     f'{geo["patch_size"]}x{geo["patch_size"]} patches, {geo["tokens"]} tokens; width 60, MLP 256'),
        ('batch size', f'{cfg["batch_size"]} (ours against timm also 1; scaling: '
                       f'{cfg["scaling_tokens_per_batch"]} tokens per batch)'),
        ('repeats', f'{cfg["repeats"]} timed repeats of about {cfg["target_time"]} s per model after '
                    f'{cfg["warmup"]} warm-up step(s) and a calibration step; ours against timm: '
                    f'{cfg["timm_pairs"]} repeats; scaling: {cfg["scaling_repeats"]}'),
        ('date', env['date']),
        ('wall time of the run', f'{env.get("wall_time_s", float("nan")):.0f} s'),
    ]
    if cfg.get('command'):
        setup.append(('command', f'`{cfg["command"]}`'))
    md.append(_table(['', ''], [[a, b] for a, b in setup], 'll') + '\n')

    models = results.get('models', [])
    by_key = {r['key']: r for r in models}
    has_mem = any('mem_train' in r for r in models)
    minimal = sorted([r for r in models if r['fused'] and r['name'] != TIMM_REF], key=_order)
    refs = [r for r in models if r['fused'] and r['name'] == TIMM_REF]

    # per-model table
    md.append('## Per model\n')
    md.append(f'Batch {cfg["batch_size"]}, SDPA on. Throughput: images/s, median over repeats. FLOPs: one forward '
              'of one image, matrix products only. "infer GFLOP/s" is FLOPs x inference throughput: how busy the '
              'model keeps the CPU. Memory: peak working memory of one step in MiB, above the weights '
              '(see *Method*). Absolute throughputs come from different blocks and drift with the load on the '
              'machine' + _drift_note(results) + '; compare models through the ratios of the next table, which '
              'pair measurements taken together.\n')
    header = ['model', 'attention', 'MLP', 'params', 'fwd MFLOPs/img', 'infer img/s', 'train img/s', 'infer GFLOP/s']
    if has_mem:
        header += ['infer mem MiB', 'train mem MiB']
    rows = []
    for r in minimal + refs:
        fl = r['flops'] / 1e6
        row = [_name_cell(r), ATTN_DESCRIPTION[r['attn']] if r['name'] != TIMM_REF else 'timm `Attention`',
               'yes' if r['mlp'] else 'no', _fmt_int(r['params']), _fmt(fl, 2),
               _fmt_tp(median(r['infer'])), _fmt_tp(median(r['train'])), _fmt(fl * median(r['infer']) / 1e3, 2)]
        if has_mem:
            row += [_fmt(r.get('mem_infer'), 1), _fmt(r.get('mem_train'), 1)]
        rows.append(row)
    md.append(_table(header, rows, 'lll' + 'r' * (len(header) - 3)) + '\n')

    # against the baseline
    speedups = []
    rows = []
    for r in minimal:
        b = by_key.get(r['baseline'])
        if b is None or r['key'] == b['key']:
            continue
        inf = ratios(r['infer'], _paired(r, b, 'infer'))
        tr = ratios(r['train'], _paired(r, b, 'train'))
        speedups.append(dict(label=_label(r), flops=r['flops'] / b['flops'], params=r['params'] / b['params'],
                             infer=median(inf), train=median(tr)))
        row = [f'`{_label(r)}`', _fmt(r['params'] / b['params'], 3), _fmt(r['flops'] / b['flops'], 3),
               _fmt(b['flops'] / r['flops'], 2), _ratio_cell(inf), _ratio_cell(tr)]
        if has_mem:
            row.append(_fmt(r['mem_train'] / b['mem_train'], 2) if b.get('mem_train') else 'n/a')
        rows.append(row)
    if rows:
        md.append('## Minimal variants against the paper\'s baseline\n')
        md.append('Each variant against `std_mlp` (unchanged attention with MLP, 1 head) of the same depth and '
                  'geometry, from the same repeats. Parameters and FLOPs: variant / baseline. "FLOP-predicted" is '
                  'baseline FLOPs / variant FLOPs, the speed-up if time followed FLOPs; the measured speed-ups are '
                  'throughput ratios (> 1: faster than the baseline).\n')
        header = ['model', 'params ×', 'FLOPs ×', 'FLOP-predicted speed-up', 'infer speed-up', 'train speed-up']
        if has_mem:
            header.append('train mem ×')
        md.append(_table(header, rows) + '\n')
        if plots_dir:
            _plot_speedups(speedups, os.path.join(plots_dir, 'speedup_vs_flops.png'))
            md.append(f'![speed-up against FLOP reduction]({plots_rel}/speedup_vs_flops.png)\n')

    # ours vs timm
    if results.get('timm'):
        md.append('## Implementation overhead: ours against timm\'s VisionTransformer\n')
        t0 = results['timm'][0]
        md.append(
            f'`vit_minimal_std_mlp_{t0["depth"]}x1` against `timm.models.vision_transformer.VisionTransformer(img_size='
            f'{geo["img_size"]}, patch_size={geo["patch_size"]}, in_chans={geo["in_chans"]}, num_classes={geo["num_classes"]}, '
            f'embed_dim=60, depth={t0["depth"]}, num_heads=1, mlp_ratio=256/60, class_token=False, '
            'global_pool=\'avg\', final_norm=False, fc_norm=False)`: the same patch embedding, pre-norm blocks with '
            'a fused `qkv` and `proj`, MLP 60-256-60 with GELU, average pooling, no final norm, linear head. '
            'What differs: timm has no fixed sin-cos position embedding, so its learned `pos_embed` is filled with '
            f'our sin-cos table and frozen. Both then add the same constant and train the same '
            f'{_fmt_int(t0["params_ours"])} parameters (timm holds {_fmt_int(t0["params_ref_total"])} including the '
            f'frozen {_fmt_int(t0["params_ref_total"] - t0["params_ref"])}-entry table), and with our weights loaded '
            f'into timm\'s model the logits agree to {t0["max_abs_diff"]:.1e}: the same function. The code paths '
            'differ: timm splits heads with `reshape(B, N, 3, H, D).permute(2, 0, 3, 1, 4).unbind(0)` and calls '
            'identity `q_norm`/`k_norm`/`LayerScale`/`DropPath`/patch-drop/pre-norm modules; ours splits with '
            '`chunk` and checks the input shape.\n')
        md.append('The three models (ours, timm, a second copy of ours) are measured in turn within each repeat. '
                  '"ours / timm" is the overhead measurement (target: ≥ 0.95, at most 5% slower); "ours / ours" '
                  'compares two identical models and shows how large a ratio the noise alone produces.\n')
        rows = []
        for e in results['timm']:
            for mode in ('infer', 'train'):
                if mode not in e:
                    continue
                depths = {x['depth'] for x in results['timm']}
                rows.append([(f'depth {e["depth"]}, ' if len(depths) > 1 else '')
                             + f'{"inference" if mode == "infer" else "training"}, batch {e["batch_size"]}',
                             _fmt_tp(median(e[mode]['ours'])), _fmt_tp(median(e[mode]['ref'])),
                             _ratio_cell(ratios(e[mode]['ours'], e[mode]['ref'])),
                             _ratio_cell(ratios(e[mode]['ours'], e[mode]['copy'])) if 'copy' in e[mode] else 'n/a'])
        md.append(_table(['measurement (SDPA on)', 'ours img/s', 'timm img/s', 'ours / timm', 'ours / ours (noise)'],
                         rows) + '\n')

    # SDPA on/off
    off = sorted([r for r in models if not r['fused']], key=_order)
    if off:
        md.append('## Fused SDPA on against off\n')
        md.append(f'`F.scaled_dot_product_attention` (on) against the explicit `softmax(q k^T) v` (off) in the same '
                  f'model, from the same repeats, at {geo["tokens"]} tokens; > 1: SDPA is faster or, for memory, '
                  'needs more. The token sweep below shows the same comparison as sequences grow.\n')
        header = ['model', 'infer on / off', 'train on / off']
        if has_mem:
            header.append('train mem on / off')
        rows = []
        for r in off:
            on = by_key[r['key'].replace('[sdpa off]', '')]
            row = [_name_cell(on), _ratio_cell(ratios(_paired(r, on, 'infer'), r['infer'])),
                   _ratio_cell(ratios(_paired(r, on, 'train'), r['train']))]
            if has_mem:
                row.append(_fmt(on['mem_train'] / r['mem_train'], 2) if r.get('mem_train') else 'n/a')
            rows.append(row)
        md.append(_table(header, rows) + '\n')

    # scaling
    sc = results.get('scaling')
    if sc and (sc.get('tokens') or sc.get('depth')):
        md.append('## Scaling with tokens and depth\n')
        scaling_depth = parse_name(cfg['scaling_models'][0])['depth']
        md.append(f'Both sweeps keep {sc["tokens_per_batch"]:,} tokens per batch (batch = '
                  f'{sc["tokens_per_batch"]:,} / tokens), so the linear layers do the same work per step at every '
                  'point and what grows is attention (tokens) or the number of blocks (depth). Tokens: the image side '
                  f'grows at fixed {geo["patch_size"]}x{geo["patch_size"]} patches, depth {scaling_depth}. Depth: at '
                  f'{geo["tokens"]} tokens. "attn share" is the fraction of forward FLOPs in the two attention '
                  'products q k^T and a v (4 T^2 N per block). Memory per image is the step\'s peak working memory '
                  'divided by the batch.\n')
        for axis in ('tokens', 'depth'):
            pts = sc.get(axis) or []
            if not pts:
                continue
            header = ['model', 'SDPA', axis, 'batch', 'params', 'fwd MFLOPs/img', 'attn share', 'infer img/s',
                      'train img/s']
            with_mem = any('mem_train' in p for p in pts)
            if with_mem:
                header += ['infer mem MiB', 'train mem MiB', 'train MiB/img']
            rows = []
            for p in sorted(pts, key=lambda p: (p['name'], not p['fused'], p['value'])):
                attn = 4 * p['tokens'] ** 2 * 60 * p['depth'] / p['flops']
                row = [f'`{_label(p)}`', 'on' if p['fused'] else 'off', str(p['value']), str(p['batch_size']),
                       _fmt_int(p['params']), _fmt(p['flops'] / 1e6, 1), f'{attn:.0%}', _fmt_tp(median(p['infer'])),
                       _fmt_tp(median(p['train']))]
                if with_mem:
                    row += [_fmt(p.get('mem_infer'), 1), _fmt(p.get('mem_train'), 1),
                            _fmt(p['mem_train'] / p['batch_size'], 2) if 'mem_train' in p else 'n/a']
                rows.append(row)
            md.append(f'### {"Token count" if axis == "tokens" else "Depth"}\n')
            md.append(_table(header, rows, 'll' + 'r' * (len(header) - 2)) + '\n')
            if plots_dir:
                fname = f'scaling_{axis}.png'
                _plot_scaling(pts, axis, os.path.join(plots_dir, fname))
                md.append(f'![scaling with {axis}]({plots_rel}/{fname})\n')

    # accuracy against parameters
    md.append('## Accuracy against parameters\n')
    repro = load_reproduce_results(results_path) if results_path else None
    if repro:
        md.append(f'The paper\'s Table 2 (MNIST, 6 layers, 500 epochs) and this project\'s reproduction '
                  f'(`{results_path}`, {len(repro)} runs).\n')
        acc = _as_percent([r['val_acc'] for r in repro])
        paper_acc = [r.get('paper_val_acc') for r in repro]
        rows = [[f'`{str(r.get("model", "?")).replace("vit_minimal_", "")}`', str(r.get('dataset', '')),
                 str(r.get('epochs', '')), _fmt_int(r['params']),
                 _fmt_int(r['paper_params']) if r.get('paper_params') else '', _fmt(a, 2),
                 _fmt(float(pa), 2) if pa is not None else '']
                for r, a, pa in zip(repro, acc, paper_acc)]
        md.append(_table(['model', 'dataset', 'epochs', 'params', 'paper params', 'val acc %', 'paper val acc %'],
                         rows, 'lll' + 'r' * 4) + '\n')
    else:
        md.append(f'No reproduction results (`{results_path}`) existed when this report was written: the plot '
                  'shows the paper\'s Table 2 points only (MNIST, 6 layers, 500 epochs). Rebuild the report and '
                  'plots without measuring again with `timm-minimal-benchmark --from-json '
                  f'{cfg.get("json_path") or "benchmarks/results.json"}` once they exist.\n')
    if plots_dir:
        _plot_accuracy(repro, os.path.join(plots_dir, 'accuracy_vs_params.png'))
        md.append(f'![accuracy against parameters]({plots_rel}/accuracy_vs_params.png)\n')

    md += _training_sections(output)
    md.append(_method_text(cfg, env))
    text = '\n'.join(md)
    os.makedirs(os.path.dirname(os.path.abspath(output)), exist_ok=True)
    with open(output, 'w') as f:
        f.write(text)
    return text


def _training_sections(output: str) -> List[str]:
    """The training benchmark's reports (``benchmarks/training*.md``, written by ``timm-minimal-benchmark
    --training``), one subsection each, under a section of their own."""
    folder = os.path.join(os.path.dirname(os.path.abspath(output)), 'benchmarks')
    files = sorted(glob.glob(os.path.join(folder, 'training*.md')))
    if not files:
        return []
    md = ['## Training speed: the trainer against the bare step\n',
          'Written by `timm-minimal-benchmark --training` (`timm_minimal/tools/training_benchmark.py`), one report per '
          'device; the raw numbers are in the JSON file of the same name.\n']
    for path in files:
        with open(path) as f:
            lines = f.read().strip().splitlines()
        md.append('\n'.join('#' + line if line.startswith('#') else line for line in lines) + '\n')
    return md


def _method_text(cfg: Dict[str, Any], env: Dict[str, Any]) -> str:
    rss = cfg.get('memory_method') == 'rss'
    memory = (
        """- **Memory** (`--memory-method rss`, CPU): peak RSS is a per-process high-water mark, so every model is
  measured in a fresh process, forked from a server that has imported torch and timm once. The child builds the
  model, its optimizer and the input batch and runs one unmeasured step of each kind (lazy initialisation; the
  AdamW state exists afterwards). Then, for inference and for training, it frees what it can (`gc.collect`,
  `malloc_trim`), resets the kernel's peak-RSS counter (`/proc/self/clear_refs`), notes the RSS, runs the measured
  step(s) and reads the peak (`VmHWM`). Peak minus RSS before is the step's working memory, library workspaces
  and allocator slack included; weights, gradients (freed by `zero_grad` and reused) and the AdamW state are
  outside it. Allocator behaviour makes it coarse (a few MiB).""" if rss else
        """- **Memory** (default `--memory-method tensors`): the peak of memory allocated through torch's allocator during
  the measured step, above what was live before it. The step runs after the throughput measurement and one more
  unmeasured step, so gradients and the AdamW state already exist. On CPU the profiler records every allocation
  and free with its size (`torch.profiler.profile(profile_memory=True)`) and the running sum's maximum is the
  peak; on CUDA it is `torch.cuda.max_memory_allocated` minus `torch.cuda.memory_allocated` before the step.
  `zero_grad(set_to_none=True)` frees the old gradients before the backward pass makes new ones, so gradients
  cancel out: what is counted is activations, saved tensors and temporaries inside ops. Not counted: the
  weights, gradients and AdamW state (4 x parameters x 4 bytes: 4.3 MiB for the MNIST baseline) and memory that BLAS
  or oneDNN allocate outside torch. It reproduces to about 1% and does not depend on the allocator, so models
  compare fairly; the process RSS is higher (`--memory-method rss` measures that, one fresh process per
  model).""")
    if env.get('clock') == 'cpu':
        clock = """- **Clock**: the throughputs divide images by the CPU time of the benchmark process (`time.process_time`,
  which counts every thread of the process; torch runs one thread here), not by wall time. On a machine shared
  with other jobs the wall time of a step also holds the time the scheduler gave to those jobs, which comes
  and goes with their load; CPU time leaves it out and is close to what the wall time would be on an idle
  core. It does not remove every effect of a loaded machine (shared caches, memory bandwidth, a busy
  hyper-thread sibling), hence the interleaving, the repeats and the intervals. The wall-clock throughputs are
  kept in the JSON (`*_wall`); `--clock wall` reports them instead; runs with more than one thread or on CUDA
  use wall time.
"""
    else:
        clock = """- **Clock**: wall time (`time.perf_counter`); on CUDA synchronised before and after the timed steps.
"""
    return f"""## Method

- **Throughput**: images per second over back-to-back steps, their number calibrated per model after warm-up so
  that one timed repeat lasts about the target time (at least one step). Inference: `model.eval()` under
  `torch.inference_mode()`. Training: `zero_grad(set_to_none=True)`, forward, cross-entropy, backward and an
  AdamW step (lr 1e-3, weight decay 1e-4). Random inputs and labels.
{clock}- **Interleaving**: the models are measured in blocks: the baseline of the block's depth plus up to
  {cfg.get('block_size', 3)} other models (a model with SDPA on and off always in the same block). A block's
  models are measured in turn, {cfg['repeats']} rounds, the order rotated each round. Each ratio divides two
  measurements of the same round, a few seconds apart at most, so a background load that slows a round slows
  both sides; the median over rounds is reported. The baseline's own throughput is the median over all its
  rounds. The comparison with timm alternates its three models the same way; the scaling sweeps measure all
  points of a sweep in turn in every round.
- **Intervals**: 95% percentile-bootstrap intervals of the median ratio (2,000 resamples of the rounds, seeded).
- **FLOPs**: `torch.utils.flop_counter.FlopCounterMode` over one forward of one image. It counts matrix products
  (linear layers, the patch-embedding convolution, the `bmm` of the explicit attention and the fused SDPA kernels,
  the CPU kernel `_scaled_dot_product_flash_attention_for_cpu` included) as 2 x multiply-accumulates; softmax,
  LayerNorm, GELU and additions are not counted. SDPA on and off count the same.
{memory}
"""


# -- plots -----------------------------------------------------------------------------------------

def matplotlib_ticker():
    import matplotlib.ticker
    return matplotlib.ticker


def _pyplot():
    import matplotlib
    matplotlib.use('Agg', force=True)
    import matplotlib.pyplot as plt
    return plt


def _plot_speedups(points: List[Dict[str, Any]], path: str) -> str:
    """Per variant: the speed-up FLOPs predict, and the measured inference and training speed-ups."""
    plt = _pyplot()
    import numpy as np
    points = sorted(points, key=lambda p: p['flops'], reverse=True)
    y = np.arange(len(points))
    h = 0.27
    fig, ax = plt.subplots(figsize=(8, 0.42 * len(points) + 1.6))
    ax.barh(y - h, [1 / p['flops'] for p in points], h, color='lightgray', edgecolor='gray',
            label='FLOP-predicted (baseline FLOPs / variant FLOPs)')
    ax.barh(y, [p['infer'] for p in points], h, color='tab:blue', label='inference, measured')
    ax.barh(y + h, [p['train'] for p in points], h, color='tab:orange', label='training, measured')
    ax.axvline(1, color='black', lw=0.8)
    ax.set_yticks(y)
    ax.set_yticklabels([p['label'] for p in points])
    ax.invert_yaxis()
    ax.set_xlabel('speed-up over the baseline std_mlp (throughput ratio, median)')
    ax.set_title('Minimal variants against the baseline: do they get faster as FLOPs predict?', fontsize=10)
    ax.grid(True, axis='x', alpha=0.3)
    ax.legend(fontsize=8, loc='upper right')
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _plot_scaling(points: List[Dict[str, Any]], axis: str, path: str) -> str:
    plt = _pyplot()
    has_mem = any('mem_train' in p for p in points)
    ncols = 3 if has_mem else 2
    fig, axes = plt.subplots(1, ncols, figsize=(4.2 * ncols, 4))
    series: Dict[Tuple[str, bool], List[Dict[str, Any]]] = {}
    for p in points:
        series.setdefault((p['name'], p['fused']), []).append(p)
    metrics = [('infer', 'inference images/s'), ('train', 'training images/s')]
    if has_mem:
        metrics.append(('mem_train', 'training working memory per image (MiB)'))
    for ax, (metric, label) in zip(axes, metrics):
        for (name, fused), pts in sorted(series.items()):
            pts = sorted(pts, key=lambda p: p['value'])
            if metric == 'mem_train':
                ys = [p['mem_train'] / p['batch_size'] for p in pts]
            else:
                ys = [median(p[metric]) for p in pts]
            ax.plot([p['value'] for p in pts], ys, marker='o', ls='-' if fused else ':',
                    label=f'{name.replace("vit_minimal_", "")}{"" if fused else " (SDPA off)"}')
        ax.set_xscale('log', base=2)
        ax.set_yscale('log')
        ax.set_xticks(sorted({p['value'] for p in points}))
        ax.get_xaxis().set_major_formatter(matplotlib_ticker().ScalarFormatter())
        ax.get_xaxis().set_minor_locator(matplotlib_ticker().NullLocator())
        ax.set_xlabel('tokens' if axis == 'tokens' else 'depth (blocks)')
        ax.set_ylabel(label)
        ax.grid(True, which='both', alpha=0.3)
    axes[0].legend(fontsize=7)
    fig.suptitle(f'Scaling with {"the token count" if axis == "tokens" else "depth"}')
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _plot_accuracy(repro: Optional[List[Dict[str, Any]]], path: str) -> str:
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7.5, 5))
    paper = PAPER_TABLE2
    ax.scatter([p['params'] for p in paper], [p['val_acc'] for p in paper], marker='x', color='black',
               label='paper, Table 2 (MNIST, 6 layers)', zorder=3)
    right = {'vit_minimal_std_mlp_6x1': 5, 'vit_minimal_std_mlp_6x4': -10}  # label beside the point, dy
    for i, p in enumerate(sorted(paper, key=lambda p: p['params'])):
        dx, dy, ha = (5, right[p['model']], 'left') if p['model'] in right else (-4, 6 if i % 2 else -11, 'right')
        ax.annotate(p['model'].replace('vit_minimal_', ''), (p['params'], p['val_acc']), textcoords='offset points',
                    xytext=(dx, dy), ha=ha, fontsize=7, color='dimgray')
    if repro:
        datasets = sorted({str(r.get('dataset', '')) for r in repro})
        for ds in datasets:
            sel = [r for r in repro if str(r.get('dataset', '')) == ds]
            acc = _as_percent([r['val_acc'] for r in sel])
            ax.scatter([r['params'] for r in sel], acc, marker='o', label=f'this project ({ds or "?"})', zorder=4)
            for r, a in zip(sel, acc):
                ax.annotate(str(r.get('model', '')).replace('vit_minimal_', ''), (r['params'], a),
                            textcoords='offset points', xytext=(4, 3), fontsize=7)
        title = 'Validation accuracy against parameters'
    else:
        title = 'Validation accuracy against parameters (paper only: no reproduction results yet)'
    ax.set_xscale('log')
    xs = [p['params'] for p in paper] + [float(r['params']) for r in (repro or [])]
    ax.set_xlim(min(xs) / 1.5, max(xs) * 1.6)
    ticks = [t for t in (1e4, 2e4, 5e4, 1e5, 2e5, 5e5, 1e6, 2e6, 5e6) if min(xs) / 1.5 <= t <= max(xs) * 1.6]
    ax.set_xticks(ticks)
    ax.set_xticklabels([f'{t / 1000:g}k' for t in ticks])
    ax.get_xaxis().set_minor_formatter(matplotlib_ticker().NullFormatter())
    ax.set_xlabel('parameters')
    ax.set_ylabel('validation accuracy (%)')
    ax.set_title(title, fontsize=10)
    ax.grid(True, which='both', alpha=0.3)
    ax.legend(fontsize=8, loc='lower right')
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


# -- stdout ----------------------------------------------------------------------------------------

def summary_lines(results: Dict[str, Any]) -> List[str]:
    """The headline ratios in a few lines."""
    lines = []
    by_key = {r['key']: r for r in results.get('models', [])}
    for e in results.get('timm', []):
        for mode in ('infer', 'train'):
            if mode in e:
                rr = ratios(e[mode]['ours'], e[mode]['ref'])
                lines.append(f'ours/timm {mode} (batch {e["batch_size"]}): {_ratio_cell(rr)}'
                             + (f', ours/ours (noise) {_ratio_cell(ratios(e[mode]["ours"], e[mode]["copy"]))}'
                                if 'copy' in e[mode] else ''))
    for r in results.get('models', []):
        b = by_key.get(r.get('baseline') or '')
        if r['fused'] and r['name'] != TIMM_REF and b is not None and b['key'] != r['key']:
            lines.append(f'{_label(r)}: params x{r["params"] / b["params"]:.3f}, FLOPs x{r["flops"] / b["flops"]:.3f}, '
                         f'infer speed-up {_ratio_cell(ratios(r["infer"], _paired(r, b, "infer")))}, '
                         f'train speed-up {_ratio_cell(ratios(r["train"], _paired(r, b, "train")))}')
    return lines


# -- command line ----------------------------------------------------------------------------------

def _csv_ints(text: str) -> Tuple[int, ...]:
    return tuple(int(v) for v in text.split(',') if v.strip())


def build_parser() -> argparse.ArgumentParser:
    d = BenchmarkConfig()
    p = argparse.ArgumentParser(
        prog='timm-minimal-benchmark',
        description='Benchmark the vit_minimal architectures: parameters, FLOPs, throughput, memory, ratios '
                    'against the paper\'s baseline and timm\'s VisionTransformer, scaling; writes BENCHMARKS.md '
                    'and PNG plots.')
    p.add_argument('--models', nargs='+', default=None,
                   help=f'glob(s) over the registered names (default {" ".join(d.models)}); the std_mlp baseline '
                        'of each depth is always added')
    p.add_argument('--dataset', default=d.dataset, choices=sorted(DATASETS), help='geometry tag (default mnist)')
    p.add_argument('--batch-size', type=int, default=None, help=f'batch size (default {d.batch_size})')
    p.add_argument('--repeats', type=int, default=None, help=f'timed repeats (default {d.repeats})')
    p.add_argument('--warmup', type=int, default=None, help=f'warm-up steps per model (default {d.warmup})')
    p.add_argument('--target-time', type=float, default=None,
                   help=f'seconds per timed repeat and model (default {d.target_time})')
    p.add_argument('--device', default='auto', help='cpu, cuda or auto (default: cuda when available)')
    p.add_argument('--threads', type=int, default=d.threads, help=f'torch.set_num_threads (default {d.threads}; 0: leave)')
    p.add_argument('--clock', default=d.clock, choices=('auto', 'cpu', 'wall'),
                   help='cpu: images per second of process CPU time, immune to other jobs on a shared machine '
                        '(needs --threads 1); wall: wall time; auto (default): cpu on a CPU with one thread, else wall')
    p.add_argument('--amp', action='store_true', help='autocast (CUDA, or CPU bfloat16)')
    p.add_argument('--amp-dtype', default=d.amp_dtype, choices=('bfloat16', 'float16'))
    p.add_argument('--sdpa-models', nargs='+', default=None,
                   help='globs of the selected models also measured with SDPA off '
                        f'(default {" ".join(d.sdpa_models)}; \'*\' for all)')
    p.add_argument('--no-sdpa', action='store_true', help='skip the SDPA-off comparison (also in the token sweep)')
    p.add_argument('--no-timm', action='store_true', help='skip the comparison with timm VisionTransformer')
    p.add_argument('--timm-pairs', type=int, default=None, help=f'alternated repeats ours vs timm (default {d.timm_pairs})')
    p.add_argument('--no-memory', action='store_true', help='skip the peak-memory measurement')
    p.add_argument('--memory-method', default=d.memory_method, choices=('tensors', 'rss'),
                   help='tensors: peak of torch allocations (profiler on CPU, allocator on CUDA), in process; '
                        'rss: CPU peak RSS growth, one fresh process per model (default tensors)')
    p.add_argument('--block-size', type=int, default=None,
                   help=f'models measured together with the baseline in one block (default {d.block_size})')
    p.add_argument('--no-scaling', action='store_true', help='skip the token/depth scaling sweep')
    p.add_argument('--scaling-tokens', type=_csv_ints, default=None,
                   help=f'token counts of the sweep, squares (default {",".join(map(str, d.scaling_tokens))})')
    p.add_argument('--scaling-depths', type=_csv_ints, default=None,
                   help=f'depths of the sweep (default {",".join(map(str, d.scaling_depths))})')
    p.add_argument('--scaling-tokens-per-batch', type=int, default=None,
                   help=f'tokens per batch in the sweeps, batch = this / tokens (default {d.scaling_tokens_per_batch})')
    p.add_argument('--scaling-models', nargs='+', default=None,
                   help=f'models of the sweeps (default {" ".join(d.scaling_models)})')
    p.add_argument('--output', default=d.output, help='markdown report path (default BENCHMARKS.md)')
    p.add_argument('--plots-dir', default=None, help='folder of the PNG plots (default: benchmarks/ beside the report)')
    p.add_argument('--json', default=None, help='raw results JSON (default: results.json in the plots folder)')
    p.add_argument('--no-plots', action='store_true', help='write no PNG plots')
    p.add_argument('--results', default=d.results_path,
                   help='reproduce-paper results for the accuracy plot (default results/reproduce_paper.json)')
    p.add_argument('--from-json', default=None, metavar='PATH',
                   help='measure nothing: rebuild the report and plots from a saved results JSON')
    p.add_argument('--quick', action='store_true', help='smoke test: 2 models, tiny batches, 1-2 repeats')
    p.add_argument('--training', action='store_true',
                   help='instead: the trainer against the bare training step (timm_minimal.tools.training_benchmark); '
                        'every other argument goes to it, see --training --help')
    return p


def config_from_args(args: argparse.Namespace) -> BenchmarkConfig:
    overrides: Dict[str, Any] = {}
    for arg, key in (('batch_size', 'batch_size'), ('repeats', 'repeats'), ('warmup', 'warmup'),
                     ('target_time', 'target_time'), ('timm_pairs', 'timm_pairs'), ('scaling_tokens', 'scaling_tokens'),
                     ('scaling_depths', 'scaling_depths'), ('scaling_tokens_per_batch', 'scaling_tokens_per_batch'),
                     ('block_size', 'block_size')):
        if getattr(args, arg) is not None:
            overrides[key] = getattr(args, arg)
    if args.models:
        overrides['models'] = tuple(args.models)
    if args.scaling_models:
        overrides['scaling_models'] = tuple(select_models(args.scaling_models))
    if args.sdpa_models:
        overrides['sdpa_models'] = tuple(args.sdpa_models)
    if args.no_sdpa:
        overrides['sdpa_models'] = ()
    overrides.update(
        dataset=args.dataset, device=args.device, threads=args.threads or None, clock=args.clock, amp=args.amp,
        amp_dtype=args.amp_dtype, timm_compare=not args.no_timm, memory=not args.no_memory,
        memory_method=args.memory_method,
        scaling=not args.no_scaling, output=args.output, results_path=args.results, plots=not args.no_plots,
    )
    plots_dir = os.path.normpath(args.plots_dir or os.path.join(os.path.dirname(args.output) or '.', 'benchmarks'))
    overrides['plots_dir'] = plots_dir
    overrides['json_path'] = args.json or os.path.join(plots_dir, 'results.json')
    return BenchmarkConfig.quick_config(**overrides) if args.quick else BenchmarkConfig(**overrides)


def _dispatch_training(argv: Sequence[str]) -> Optional[List[str]]:
    """The arguments for ``training_benchmark`` when ``--training`` comes before any ``--``, else None."""
    head = list(argv[:argv.index('--')]) if '--' in argv else list(argv)
    if '--training' not in head:
        return None
    rest = list(argv)
    rest.remove('--training')
    return rest


def main(argv: Optional[Sequence[str]] = None) -> Dict[str, Any]:
    training_argv = _dispatch_training(list(sys.argv[1:] if argv is None else argv))
    if training_argv is not None:
        from .. import training_benchmark
        sys.exit(training_benchmark.main(training_argv))
    args = build_parser().parse_args(argv)
    config = config_from_args(args)
    if args.from_json:
        with open(args.from_json) as f:
            results = json.load(f)
    else:
        argv_list = list(sys.argv[1:] if argv is None else argv)
        config.command = ' '.join(['timm-minimal-benchmark'] + argv_list)
        results = run_benchmark(config)
        if config.json_path:
            os.makedirs(os.path.dirname(os.path.abspath(config.json_path)), exist_ok=True)
            with open(config.json_path, 'w') as f:
                json.dump(results, f, indent=1)
    text = render_report(results, config.output, config.plots_dir if config.plots else None, config.results_path)
    print(text)
    print('\n'.join(['', '## Headline'] + summary_lines(results)))
    print(f'\nwrote {config.output}' + (f', plots in {config.plots_dir}' if config.plots else '')
          + (f', raw results {config.json_path}' if config.json_path and not args.from_json else ''))
    return results

