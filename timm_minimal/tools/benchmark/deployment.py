"""Deployment latency on the CPU: batch-1 inference of every shipped checkpoint in torch eager against
onnxruntime (fp32 and int8), measured in one run.

    timm-minimal-benchmark deployment --output benchmarks/deployment_cpu.md --json benchmarks/deployment_cpu.json
    timm-minimal-benchmark deployment --data-dir data ...                 # also fp32 / int8 top-1 on the test splits
    timm-minimal-benchmark deployment --quick                             # smoke test: one model, a few calls

Each checkpoint is exported with ``timm_minimal.tools.deploy.export`` (fp32 and int8, verified against torch)
into a temporary folder. All three runtimes get the same number of threads (``--threads``, default 1:
``torch.set_num_threads`` and onnxruntime's intra-op threads); after ``--warmup`` calls each, the
runtimes take turns for ``--rounds`` rounds of ``--calls`` timed calls on one image, so that background
load falls on all three alike. The table gives the median and the 90th percentile of the per-call time.
Needs the ``export`` extra (``pip install -e ".[export]"``).
"""
import argparse
import platform
import shlex
import statistics
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import timm
import torch

from ..common import cpu_environment, cpu_flags_lines, markdown_table, write_report
from ...cli import OneLineParser, UsageError, command, non_negative_int, positive_int
from ...machine import torch_threads
from ..deploy.export import (FP32_FILE, INPUT_NAME, INT8_FILE, export_model, ort_session, require_export_extra,
                              resolve_model)
from ...models.vit_minimal import ARCHITECTURES

__all__ = ['DeploymentConfig', 'shipped_checkpoints', 'measure_latency', 'benchmark_model', 'run', 'render_markdown',
           'main']

PROG = 'timm-minimal-benchmark deployment'  # the one spelling, in the help, the errors and the reports
RUNTIMES = ('torch', 'ort_fp32', 'ort_int8')
QUICK_MODELS = ('vit_minimal_qkonly_6x1.mnist',)


@dataclass
class DeploymentConfig:
    """Everything one run of the deployment benchmark depends on."""
    models: Tuple[str, ...] = ()  # empty: every shipped checkpoint
    threads: int = 1
    warmup: int = 100
    rounds: int = 20
    calls: int = 100
    data_dir: Optional[str] = None
    out_json: Optional[str] = 'reports/deployment_cpu.json'  # the committed ones: benchmarks/deployment_cpu.*
    out_md: Optional[str] = 'reports/deployment_cpu.md'
    quick: bool = False
    command: str = ''


def shipped_checkpoints() -> List[str]:
    """Every ``<architecture>.<tag>`` with weights in the package."""
    return [name for name in timm.list_pretrained('vit_minimal*') if name.partition('.')[0] in ARCHITECTURES]


def measure_latency(runners: Dict[str, Callable[[], Any]], warmup: int, rounds: int,
                    calls: int) -> Dict[str, Dict[str, float]]:
    """Median and 90th percentile (ms) of the wall time of one call of each runner; the runners take turns."""
    for fn in runners.values():
        for _ in range(warmup):
            fn()
    times: Dict[str, List[float]] = {key: [] for key in runners}
    for _ in range(rounds):
        for key, fn in runners.items():
            for _ in range(calls):
                start = time.perf_counter()
                fn()
                times[key].append(time.perf_counter() - start)
    return {key: dict(median_ms=1e3 * statistics.median(t), p90_ms=1e3 * _quantile(t, 0.9), calls=len(t))
            for key, t in times.items()}


def _quantile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _runners(model: torch.nn.Module, folder: Path, threads: int) -> Dict[str, Callable[[], Any]]:
    """One call of batch 1 in torch eager and in onnxruntime fp32 and int8, on the same image."""
    x = torch.randn(1, *model.pretrained_cfg['input_size'], generator=torch.Generator().manual_seed(0))
    feed = {INPUT_NAME: x.numpy()}
    fp32, int8 = ort_session(folder / FP32_FILE, threads), ort_session(folder / INT8_FILE, threads)
    return dict(torch=lambda: model(x), ort_fp32=lambda: fp32.run(None, feed), ort_int8=lambda: int8.run(None, feed))


def benchmark_model(name: str, config: DeploymentConfig, workdir: Path) -> Dict[str, Any]:
    """Export one checkpoint (fp32 and int8, verified; with ``data_dir`` also its test-split accuracy) and
    measure the batch-1 latency of the three runtimes."""
    folder = workdir / name
    result = export_model(name, folder, int8=True, verify_data_dir=config.data_dir)
    model = resolve_model(name)
    with torch.inference_mode():
        latency = measure_latency(_runners(model, folder, config.threads), config.warmup, config.rounds,
                                  config.calls)
    accuracy = {k: v['acc'] for k, v in result.accuracy.items()} if result.accuracy else None
    return dict(model=name, params=sum(p.numel() for p in model.parameters()),
                fp32_bytes=result.files[FP32_FILE], int8_bytes=result.files[INT8_FILE],
                max_abs_diff=result.max_abs_diff, int8_max_abs_diff=result.int8_max_abs_diff,
                accuracy=accuracy, latency=latency)


# -- report ----------------------------------------------------------------------------------------

def environment() -> Dict[str, str]:
    """Device (the CPU and its SIMD flags), library versions and the date, for the report's header."""
    import onnx  # lazy: the export extra
    import onnxruntime  # lazy: the export extra
    return dict(cpu_environment(), torch=torch.__version__, onnxruntime=onnxruntime.__version__,
                onnx=onnx.__version__, timm=timm.__version__, python=platform.python_version(),
                date=datetime.now(timezone.utc).isoformat(timespec='seconds'))


def _ms(stats: Dict[str, float]) -> str:
    return f"{stats['median_ms']:.3f} ({stats['p90_ms']:.3f})"


def latency_table(rows: Sequence[Dict[str, Any]]) -> str:
    """Markdown table: file sizes, median (p90) ms per image of each runtime, speed-ups against torch,
    and the test-split top-1 where it was measured."""
    with_acc = any(r['accuracy'] for r in rows)
    header = ['checkpoint', 'params', 'fp32 file', 'int8 file', 'torch eager ms', 'ORT fp32 ms', 'ORT int8 ms',
              'fp32 speed-up', 'int8 speed-up'] + (['torch top-1', 'ORT fp32 top-1', 'ORT int8 top-1'] if with_acc else [])
    cells = []
    for r in rows:
        lat = r['latency']
        cell = [f"`{r['model']}`", f"{r['params']:,}", f"{r['fp32_bytes'] / 1e3:,.0f} kB", f"{r['int8_bytes'] / 1e3:,.0f} kB",
                *(_ms(lat[k]) for k in RUNTIMES),
                *(f"{lat['torch']['median_ms'] / lat[k]['median_ms']:.2f}x" for k in RUNTIMES[1:])]
        if with_acc:
            acc = r['accuracy'] or {}
            cell += [f'{acc[k]:.2f}%' if k in acc else '-' for k in ('torch', 'fp32', 'int8')]
        cells.append(cell)
    return markdown_table(header, cells)


def render_markdown(results: Dict[str, Any]) -> str:
    """Header (device, versions, date, method) and the table of a results dict from ``run``."""
    env, s = results['environment'], results['settings']
    lines = [f"## Deployment: batch-1 CPU latency, torch eager against onnxruntime: {env['device']}", '',
             f"- device: {env['device']}; {s['threads']} thread(s) for every runtime (torch.set_num_threads, "
             f"onnxruntime intra-op threads)",
             *cpu_flags_lines(env),
             f"- torch {env['torch']}, onnxruntime {env['onnxruntime']}, onnx {env['onnx']}, timm {env['timm']}, "
             f"python {env['python']}",
             f"- date: {env['date']}",
             f"- command: `{results['command']}`",
             f"- method: each checkpoint exported by `timm-minimal-export --int8` (fp32 logits within 1e-4 of torch; "
             f"int8: onnxruntime's dynamic quantisation of the MatMul and Gemm weights); {s['warmup']} warm-up calls "
             f"per runtime, then {s['rounds']} rounds of {s['calls']} timed calls of one image per runtime, the "
             f"runtimes taking turns; ms per image: median (90th percentile); speed-up: torch median / ORT median"]
    if s['data_dir']:
        lines.append('- top-1: the whole test split (10,000 images), evaluated in each runtime')
    if s.get('quick'):
        lines.append('- --quick: smoke-test settings, the numbers say nothing about the speed')
    return '\n'.join(lines + ['', latency_table(results['rows'])]) + '\n'


# -- the run ---------------------------------------------------------------------------------------

def run(config: DeploymentConfig, log: Callable[[str], None] = print) -> Dict[str, Any]:
    """Measure every model of ``config``; the results dict that ``render_markdown`` and the JSON file hold."""
    require_export_extra()
    models = list(config.models) or shipped_checkpoints()
    with torch_threads(config.threads), tempfile.TemporaryDirectory() as workdir:
        rows = []
        for name in models:
            rows.append(benchmark_model(name, config, Path(workdir)))
            lat = rows[-1]['latency']
            log(f"{name}: " + ', '.join(f"{k} {lat[k]['median_ms']:.3f} ms" for k in RUNTIMES))
    return dict(command=config.command, settings=asdict(config), environment=environment(), rows=rows)


def build_parser() -> argparse.ArgumentParser:
    d = DeploymentConfig()
    p = OneLineParser(prog=PROG, description=__doc__.split('\n\n')[0])
    p.add_argument('--models', nargs='+', default=None, help='checkpoints (default: every shipped one)')
    p.add_argument('--threads', type=positive_int, default=d.threads, help='threads of every runtime (default: %(default)s)')
    p.add_argument('--warmup', type=non_negative_int, default=d.warmup, help='untimed calls per runtime and model (default: %(default)s)')
    p.add_argument('--rounds', type=positive_int, default=d.rounds, help='rounds in which the runtimes take turns (default: %(default)s)')
    p.add_argument('--calls', type=positive_int, default=d.calls, help='timed calls per runtime and round (default: %(default)s)')
    p.add_argument('--data-dir', default=None, help='also measure top-1 on the full test split of the data here')
    p.add_argument('--output', default=d.out_md, help="the markdown report ('' for none; default: %(default)s)")
    p.add_argument('--json', default=d.out_json, help="the results as JSON ('' for none; default: %(default)s)")
    p.add_renamed('--out-md', '--output')
    p.add_renamed('--out-json', '--json')
    p.add_argument('--quick', action='store_true',
                   help=f'smoke test: {", ".join(QUICK_MODELS)}, 2 warm-up calls, 2 rounds of 5 calls')
    return p


def config_from_args(args: argparse.Namespace, command: str) -> DeploymentConfig:
    """The run's configuration; --quick replaces the models and counts that are not given."""
    models = tuple(args.models or (QUICK_MODELS if args.quick else ()))
    counts = dict(warmup=2, rounds=2, calls=5) if args.quick else dict(warmup=args.warmup, rounds=args.rounds,
                                                                       calls=args.calls)
    for key, value in dict(threads=args.threads, **counts).items():
        if value < 1:
            raise UsageError(f'--{key} must be at least 1, got {value}')
    return DeploymentConfig(models=models, threads=args.threads, data_dir=args.data_dir, out_json=args.json,
                            out_md=args.output, quick=args.quick, command=command, **counts)


@command(PROG)
def main(argv: Optional[Sequence[str]] = None) -> int:
    """The command line; returns the exit status (0 done, 1 an export failed verification, 2 bad input);
    argparse exits with 2 for a bad command line."""
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)  # --help and a bad command line exit here, as in every tool
    config = config_from_args(args, command=f'{PROG} {shlex.join(argv)}'.rstrip())
    results = run(config, log=lambda text: print(text, flush=True))
    write_report(results, render_markdown(results), config.out_json, config.out_md)
    return 0


if __name__ == '__main__':
    sys.exit(main())
