"""The suite of runs: which models and comparisons make up the benchmark, and in which order they are measured.

``BenchmarkConfig`` holds everything a run depends on. ``run_benchmark`` measures it in three parts and
returns the JSON-serialisable results: every selected model in blocks with its baseline
(``measure_models``), our baseline against timm's ``VisionTransformer`` (``compare_with_timm``) and the
token and depth sweeps (``measure_scaling``).
"""
import fnmatch
import gc
import platform
import sys
import time
from dataclasses import asdict
from typing import Any, Dict, List, Sequence, Tuple

import timm
import torch

from ...machine import cpu_signature, torch_threads
from ...models.paper import arch_name
from ...models.datasets import DATASETS
from ...models.vit_minimal import ARCHITECTURES
from .config import BenchmarkConfig
from .measure import (TIMM_REF, ModelSpec, Runner, calibrate, count_flops, count_params, geometry, measure_rounds,
                      measure_throughput, op_profile, parse_name)
from .memory import MemoryServer, measure_memory
from ...training.cpu.split import core_budget, free_cores


def baseline_at(depth: int) -> str:
    """The paper's baseline (unchanged attention with MLP, 1 head) with ``depth`` layers."""
    return arch_name('std', True, depth, 1)


def baseline_of(name: str) -> str:
    """The paper's baseline at the depth of ``name``."""
    return baseline_at(parse_name(name)['depth'])


def select_models(patterns: Sequence[str]) -> List[str]:
    """Registered architectures matching any glob in ``patterns`` (registry order)."""
    selected = [n for n in ARCHITECTURES if any(fnmatch.fnmatchcase(n, p) for p in patterns)]
    if not selected:
        raise ValueError(f'No registered architecture matches {list(patterns)}; see timm.list_models("vit_minimal*").')
    return selected

# -- the run ---------------------------------------------------------------------------------------

def _environment(config: BenchmarkConfig, device: torch.device) -> Dict[str, Any]:
    cpu = cpu_signature()
    env = dict(
        device=str(device), cpu=cpu['cpu'], cpu_flags=cpu['flags'], cpu_count=int(cpu['cores']),
        threads=torch.get_num_threads(),
        torch=torch.__version__, timm=timm.__version__, python=platform.python_version(),
        platform=platform.platform(terse=True), date=time.strftime('%Y-%m-%d'),
        dtype=f'autocast {config.amp_dtype}' if config.amp else 'float32',
        sdpa_backend='CPU flash-attention kernel' if device.type == 'cpu' else 'CUDA SDPA (auto-selected kernel)',
    )
    if device.type == 'cuda':
        env['gpu'] = torch.cuda.get_device_name(device)
    else:  # how much of the CPU other work took as the run began (a busy machine scatters the timings)
        budget = core_budget()
        env['busy_cores_at_start'] = budget - free_cores(budget)
    return env


def _log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)



def run_benchmark(config: BenchmarkConfig) -> Dict[str, Any]:
    """Measure everything ``config`` asks for; returns the JSON-serialisable results."""
    server = MemoryServer()
    try:
        with torch_threads(config.threads or None):  # the process's thread count as it was, after the run
            return _run(config, server)
    finally:
        server.close()


def _run(config: BenchmarkConfig, server: MemoryServer) -> Dict[str, Any]:
    start = time.perf_counter()
    device = config.resolved_device()
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
    results['models'] = measure_models(config, names, device, clock, server)
    gc.collect()
    if config.timm_compare:
        depths = sorted({parse_name(n)['depth'] for n in names if n.startswith('vit_minimal_std_mlp_')})
        results['timm'] = compare_with_timm(config, depths, device, clock)
    if config.scaling:
        results['scaling'] = measure_scaling(config, device, clock, server)
    results['env']['wall_time_s'] = time.perf_counter() - start
    return results


def _config_dict(config: BenchmarkConfig) -> Dict[str, Any]:
    d = asdict(config)
    return {k: list(v) if isinstance(v, tuple) else v for k, v in d.items()}


# -- 1. every model, and SDPA off for some, in blocks with their baseline -----------------------------

def _spec(config: BenchmarkConfig, name: str, fused: bool = True) -> ModelSpec:
    return ModelSpec(name + ('' if fused else '[sdpa off]'), name, config.dataset, fused, seed=config.seed)


def plan_blocks(config: BenchmarkConfig, names: Sequence[str]) -> Tuple[List[str], List[Tuple[str, List[ModelSpec]]]]:
    """The baselines of ``names`` and the blocks, as (baseline, specs) pairs.

    Each block holds the baseline of its depth and up to ``block_size`` other models (a model with SDPA
    on and off always in the same block), measured in turn for ``repeats`` rounds, so every ratio
    compares measurements taken seconds apart.
    """
    baselines = {baseline_of(n) for n in names}
    groups: Dict[str, List[List[ModelSpec]]] = {}  # baseline -> groups of specs that share a block
    for name in names:
        base = baseline_of(name)
        group = [] if name in baselines else [_spec(config, name)]
        if any(fnmatch.fnmatchcase(name, p) for p in config.sdpa_models):
            group.append(_spec(config, name, fused=False))
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
    return sorted(baselines), blocks


def measure_models(config: BenchmarkConfig, names: Sequence[str], device: torch.device, clock: str,
                   server: MemoryServer) -> List[Dict[str, Any]]:
    """One row per measured model: its size, FLOPs, throughputs (see ``plan_blocks``) and memory."""
    baselines, blocks = plan_blocks(config, names)
    all_specs = [_spec(config, b) for b in baselines] + [s for _, block in blocks for s in block]
    _log(f'[benchmark] {len(all_specs)} models in {len(blocks)} blocks on {device}, batch {config.batch_size}, '
         f'threads {torch.get_num_threads()}')
    runners = {s.key: Runner(s, device, config.batch_size, config.amp, config.amp_dtype) for s in all_specs}
    rows = {key: _model_row(config, r) for key, r in runners.items()}
    for mode in ('infer', 'train'):
        _measure_blocks(config, runners, blocks, rows, mode, clock)
    if config.memory:
        _log(f'[benchmark] peak memory ({config.memory_method})')
        mem = measure_memory([r.spec for r in runners.values()], device, config.batch_size, config.threads,
                             config.memory_steps, config.amp, config.amp_dtype, runners, config.memory_method, server)
        for key, res in mem.items():
            rows[key]['mem_infer'] = res['infer']
            rows[key]['mem_train'] = res['train']
    return list(rows.values())


def _model_row(config: BenchmarkConfig, runner: Runner) -> Dict[str, Any]:
    s = runner.spec
    info = dict(parse_name(s.name)) if s.name != TIMM_REF else dict(attn='std', mlp=True, depth=s.depth, heads=s.heads)
    return dict(
        key=s.key, name=s.name, fused=s.fused, **info, batch_size=config.batch_size,
        params=count_params(runner.model), params_total=count_params(runner.model, trainable_only=False),
        flops=count_flops(runner.model, s.input_shape()),
        flops_train=count_flops(runner.model, s.input_shape(), backward=True),
        baseline=baseline_of(s.name) if s.name != TIMM_REF else baseline_at(s.depth),
    )


def _measure_blocks(config: BenchmarkConfig, runners: Dict[str, Runner], blocks: Sequence[Tuple[str, List[ModelSpec]]],
                    rows: Dict[str, Dict[str, Any]], mode: str, clock: str) -> None:
    """The ``mode`` throughputs of every block into ``rows``; a baseline keeps its rounds per block too."""
    _log(f'[benchmark] {mode} throughput, {config.repeats} repeats per block')
    iters = calibrate(list(runners.values()), mode, config.warmup, config.target_time)
    wall: Dict[str, List[float]] = {}
    for base, block in blocks:
        tp = measure_rounds([runners[base]] + [runners[s.key] for s in block], mode, config.repeats, iters,
                            clock, wall)
        rows[base].setdefault(f'{mode}_blocks', []).append(tp[base])
        rows[base].setdefault(mode, []).extend(tp[base])
        for s in block:
            rows[s.key][mode] = tp[s.key]
            rows[s.key]['block'] = len(rows[base][f'{mode}_blocks']) - 1
    for key, vals in wall.items():
        rows[key][f'{mode}_wall'] = vals


# -- 2. our std_mlp against timm's VisionTransformer ---------------------------------------------------

def compare_with_timm(config: BenchmarkConfig, depths: Sequence[int], device: torch.device,
                      clock: str) -> List[Dict[str, Any]]:
    """Our baseline against timm's reference of each depth, with a second copy of ours as a noise control."""
    entries = []
    for depth in depths:
        settings = [(config.batch_size, ('infer', 'train'))] + ([(1, ('infer',))] if config.timm_latency else [])
        for batch, modes in settings:
            entries.append(_timm_entry(config, depth, batch, modes, device, clock))
    return entries


def _timm_entry(config: BenchmarkConfig, depth: int, batch: int, modes: Sequence[str], device: torch.device,
                clock: str) -> Dict[str, Any]:
    ours, ref = baseline_at(depth), f'{TIMM_REF}_{depth}x1'
    specs = [ModelSpec(ours, ours, config.dataset, True, seed=config.seed),
             ModelSpec(ref, TIMM_REF, config.dataset, True, depth=depth, heads=1, seed=config.seed),
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
    entry = dict(ours=ours, ref=ref, depth=depth, fused=True, batch_size=batch,
                 params_ours=count_params(trio[0].model), params_ref=count_params(trio[1].model),
                 params_ref_total=count_params(trio[1].model, trainable_only=False), max_abs_diff=max_diff)
    for mode in modes:
        tp = measure_throughput(trio, mode, config.timm_pairs, config.warmup, config.target_time / 2, clock)
        entry[mode] = dict(ours=tp[specs[0].key], ref=tp[specs[1].key], copy=tp[specs[2].key])
    if config.timm_ops and 'infer' in modes:
        entry['ops'] = dict(ours=op_profile(trio[0].model, trio[0].x), ref=op_profile(trio[1].model, trio[0].x))
    return entry


# -- 3. scaling with the token count and the depth ----------------------------------------------------

def measure_scaling(config: BenchmarkConfig, device: torch.device, clock: str, server: MemoryServer) -> Dict[str, Any]:
    """The token and depth sweeps, at a fixed number of tokens per batch.

    All points of a sweep are measured in turn in every round, so a burst of background load spoils
    one round of many points rather than every round of one point.
    """
    scaling: Dict[str, Any] = dict(tokens_per_batch=config.scaling_tokens_per_batch, tokens=[], depth=[])
    sweeps = {
        'tokens': [(t, dict(img_size=geometry(config.dataset, t)['img_size'])) for t in config.scaling_tokens],
        'depth': [(d, dict(depth=d)) for d in config.scaling_depths],
    }
    for axis, points in sweeps.items():
        if not points:
            continue
        scaling[axis].extend(_scaling_sweep(config, axis, points, device, clock, server))
        gc.collect()
    return scaling


def _scaling_sweep(config: BenchmarkConfig, axis: str, points: Sequence[Tuple[int, Dict[str, Any]]],
                   device: torch.device, clock: str, server: MemoryServer) -> List[Dict[str, Any]]:
    """One row per model and point of the sweep over ``axis`` ('tokens' or 'depth')."""
    geo = geometry(config.dataset)
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
        tp = measure_throughput(runners, mode, config.scaling_repeats, config.warmup, config.target_time, clock)
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
    return list(out.values())
