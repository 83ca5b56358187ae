"""The command line: ``timm-minimal-benchmark`` and ``python scripts/benchmark.py``.

One parser with a subcommand per benchmark (``SUBCOMMANDS``); without one it runs the model suite:

    timm-minimal-benchmark [suite] [options]      # the models: FLOPs, throughput, memory, ratios (BENCHMARKS.md)
    timm-minimal-benchmark training [options]     # the trainer against the bare training step (.training)
    timm-minimal-benchmark deployment [options]   # batch-1 CPU latency, torch against onnxruntime (.deployment)
    timm-minimal-benchmark cpu-modes [options]    # the CPU training step in each mode (.cpu_modes)

The suite measures (``suite.run_benchmark``) or reads a saved results JSON (``--from-json``), writes the report
and plots (``report.render_report``) and prints them with the headline ratios. Each other subcommand is its
module's ``main`` (a ``@command`` of the name it is spelled with everywhere), which parses its own options: this
parser imports none of them, so ``--help`` answers without torch.
"""
import argparse
import importlib
import json
import os
import sys
from typing import Any, Dict, List, Optional, Sequence, Tuple

from ...models.datasets import DATASETS
from ...cli import OneLineParser, command, non_negative_int, positive_float, positive_int
from .config import BenchmarkConfig


def _csv_ints(text: str) -> Tuple[int, ...]:
    """Comma-separated positive integers, each checked as ``--batch-size`` is."""
    return tuple(positive_int(v.strip()) for v in text.split(',') if v.strip())


PROG = 'timm-minimal-benchmark'
# subcommand -> (the module that runs it, what it measures); the suite is the default
SUBCOMMANDS = {
    'suite': ('.cli', 'the models: parameters, FLOPs, throughput, memory, ratios (the default)'),
    'training': ('.training', 'the trainer against the bare training step, and the time to a test accuracy'),
    'deployment': ('.deployment', 'batch-1 CPU latency of every shipped checkpoint, torch against onnxruntime '
                                  '(needs the export extra)'),
    'cpu-modes': ('.cpu_modes', 'the training step on the CPU in each mode (eager, compiled, bf16, both) and as '
                                'concurrent processes'),
}
RENAMED = {'--training': 'training', '--deployment': 'deployment', '--cpu-modes': 'cpu-modes'}  # for one release


def build_parser() -> argparse.ArgumentParser:
    """The one parser: the suite's options, and a subcommand per other benchmark whose words go to its module."""
    d = BenchmarkConfig()
    p = OneLineParser(
        prog=PROG,
        description='Benchmark the vit_minimal architectures: parameters, FLOPs, throughput, memory, ratios '
                    'against the paper\'s baseline and timm\'s VisionTransformer, scaling; writes a markdown report '
                    'and PNG plots. Other benchmarks are subcommands, each with its own --help.')
    subcommands = p.add_subparsers(dest='subcommand', metavar='{' + ','.join(SUBCOMMANDS) + '}', required=False,
                                   parser_class=OneLineParser)
    for name, (_, what) in SUBCOMMANDS.items():
        if name != 'suite':  # the suite's options are this parser's own
            sub = subcommands.add_parser(name, help=what, add_help=False, prog=f'{PROG} {name}')
            sub.add_argument('words', nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    _add_run_options(p, d)
    _add_comparison_options(p, d)
    _add_output_options(p, d)
    return p


def _add_run_options(p: argparse.ArgumentParser, d: BenchmarkConfig) -> None:
    """What is measured, where and how."""
    p.add_argument('--models', nargs='+', default=None,
                   help=f'glob(s) over the registered names (default {" ".join(d.models)}); the std_mlp baseline '
                        'of each depth is always added')
    p.add_argument('--dataset', default=d.dataset, choices=sorted(DATASETS), help='geometry tag (default mnist)')
    p.add_argument('--batch-size', type=positive_int, default=None, help=f'batch size (default {d.batch_size})')
    p.add_argument('--repeats', type=positive_int, default=None, help=f'timed repeats (default {d.repeats})')
    p.add_argument('--warmup', type=non_negative_int, default=None, help=f'warm-up steps per model (default {d.warmup})')
    p.add_argument('--target-time', type=positive_float, default=None,
                   help=f'seconds per timed repeat and model (default {d.target_time})')
    p.add_argument('--device', default='auto', help='cpu, cuda or auto (default: cuda when available)')
    p.add_argument('--threads', type=non_negative_int, default=d.threads, help=f'torch.set_num_threads (default {d.threads}; 0: leave)')
    p.add_argument('--clock', default=d.clock, choices=('auto', 'cpu', 'wall'),
                   help='cpu: images per second of process CPU time, immune to other jobs on a shared machine '
                        '(needs --threads 1); wall: wall time; auto (default): cpu on a CPU with one thread, else wall')
    p.add_argument('--mixed-precision', default='no', choices=tuple(AUTOCAST_DTYPES) + ('no',),
                   help="autocast as the trainer's option of that name: bf16 or fp16 (CUDA, or CPU bf16), no for fp32")
    # the earlier spellings, for one release (CHANGELOG.md): --amp [--amp-dtype bfloat16|float16]
    p.add_argument('--amp', action='store_true', dest='_amp', help=argparse.SUPPRESS)
    p.add_argument('--amp-dtype', default=None, dest='_amp_dtype', choices=tuple(AUTOCAST_DTYPES.values()),
                   help=argparse.SUPPRESS)


AUTOCAST_DTYPES = {'bf16': 'bfloat16', 'fp16': 'float16'}  # --mixed-precision -> torch dtype name


def _mixed_precision(args: argparse.Namespace) -> str:
    """--mixed-precision, or what the earlier --amp / --amp-dtype said."""
    if args._amp or args._amp_dtype:
        old = {v: k for k, v in AUTOCAST_DTYPES.items()}[args._amp_dtype or 'bfloat16']
        return old if args._amp else args.mixed_precision
    return args.mixed_precision


def _add_comparison_options(p: argparse.ArgumentParser, d: BenchmarkConfig) -> None:
    """The comparisons: SDPA off, timm's reference, memory, blocks and the scaling sweeps."""
    p.add_argument('--sdpa-models', nargs='+', default=None,
                   help='globs of the selected models also measured with SDPA off '
                        f'(default {" ".join(d.sdpa_models)}; \'*\' for all)')
    p.add_argument('--no-sdpa', action='store_true', help='skip the SDPA-off comparison (also in the token sweep)')
    p.add_argument('--no-timm', action='store_true', help='skip the comparison with timm VisionTransformer')
    p.add_argument('--timm-pairs', type=positive_int, default=None, help=f'alternated repeats ours vs timm (default {d.timm_pairs})')
    p.add_argument('--timm-ops', action='store_true',
                   help='also profile the ops of both forwards (torch.profiler: calls and self time of each op), '
                        'to find which op makes a difference to timm')
    p.add_argument('--no-memory', action='store_true', help='skip the peak-memory measurement')
    p.add_argument('--memory-method', default=d.memory_method, choices=('tensors', 'rss'),
                   help='tensors: peak of torch allocations (profiler on CPU, allocator on CUDA), in process; '
                        'rss: CPU peak RSS growth, one fresh process per model (default tensors)')
    p.add_argument('--block-size', type=positive_int, default=None,
                   help=f'models measured together with the baseline in one block (default {d.block_size})')
    p.add_argument('--no-scaling', action='store_true', help='skip the token/depth scaling sweep')
    p.add_argument('--scaling-tokens', type=_csv_ints, default=None,
                   help=f'token counts of the sweep, squares (default {",".join(map(str, d.scaling_tokens))})')
    p.add_argument('--scaling-depths', type=_csv_ints, default=None,
                   help=f'depths of the sweep (default {",".join(map(str, d.scaling_depths))})')
    p.add_argument('--scaling-tokens-per-batch', type=positive_int, default=None,
                   help=f'tokens per batch in the sweeps, batch = this / tokens (default {d.scaling_tokens_per_batch})')
    p.add_argument('--scaling-models', nargs='+', default=None,
                   help=f'models of the sweeps (default {" ".join(d.scaling_models)})')


def _add_output_options(p: argparse.ArgumentParser, d: BenchmarkConfig) -> None:
    """Where the report, plots and results go, and the other modes (from JSON, quick, training)."""
    p.add_argument('--output', default=d.output, help='markdown report path (the committed one: --output BENCHMARKS.md)')
    p.add_argument('--plots-dir', default=None, help='folder of the PNG plots (default: benchmarks/ beside the report)')
    p.add_argument('--json', default=None, help='raw results JSON (default: results.json in the plots folder)')
    p.add_argument('--no-plots', action='store_true', help='write no PNG plots')
    p.add_argument('--results', default=d.results_path,
                   help='reproduce-paper results for the accuracy plot (default results/reproduce_paper.json)')
    p.add_argument('--from-json', default=None, metavar='PATH',
                   help='measure nothing: rebuild the report and plots from a saved results JSON')
    p.add_argument('--quick', action='store_true', help='smoke test: 2 models, tiny batches, 1-2 repeats')


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
        from .suite import select_models  # lazy: --help answers without it
        overrides['scaling_models'] = tuple(select_models(args.scaling_models))
    if args.sdpa_models:
        overrides['sdpa_models'] = tuple(args.sdpa_models)
    if args.no_sdpa:
        overrides['sdpa_models'] = ()
    precision = _mixed_precision(args)
    overrides.update(
        dataset=args.dataset, device=args.device, threads=args.threads or None, clock=args.clock,
        amp=precision != 'no', amp_dtype=AUTOCAST_DTYPES.get(precision, BenchmarkConfig.amp_dtype),
        timm_compare=not args.no_timm, timm_ops=args.timm_ops, memory=not args.no_memory,
        memory_method=args.memory_method,
        scaling=not args.no_scaling, output=args.output, results_path=args.results, plots=not args.no_plots,
    )
    plots_dir = os.path.normpath(args.plots_dir or os.path.join(os.path.dirname(args.output) or '.', 'benchmarks'))
    overrides['plots_dir'] = plots_dir
    overrides['json_path'] = args.json or os.path.join(plots_dir, 'results.json')
    return BenchmarkConfig.quick_config(**overrides) if args.quick else BenchmarkConfig(**overrides)


def subcommand(argv: Sequence[str]) -> Tuple[str, List[str], Optional[str]]:
    """The subcommand of ``argv``, its words, and the earlier flag that named it, if one did: the first word where it
    names a subcommand, else the suite with all of them. The flags that named a benchmark before (``--training``,
    ...) still do for one release (CHANGELOG.md)."""
    argv = list(argv)
    if argv and argv[0] in SUBCOMMANDS:
        return argv[0], argv[1:], None
    head = argv[:argv.index('--')] if '--' in argv else argv
    for flag, name in RENAMED.items():
        if flag in head:
            rest = list(argv)
            rest.remove(flag)
            return name, rest, flag
    return 'suite', argv, None


def hands_over(argv: Sequence[str]) -> bool:
    """Whether ``main`` parses ``argv`` otherwise than this parser would: a subcommand named (its module parses its
    words and prints its own --help), ``suite`` among them, or an earlier flag."""
    return subcommand(argv)[1] != list(argv)


@command(PROG)
def main(argv: Optional[Sequence[str]] = None) -> int:
    """The command line; returns the exit status (a subcommand's own)."""
    name, words, renamed = subcommand(sys.argv[1:] if argv is None else argv)
    if renamed:
        print(f'{PROG}: {renamed} is now the subcommand "{PROG} {name}"', file=sys.stderr)
    if name != 'suite':
        return importlib.import_module(SUBCOMMANDS[name][0], __package__).main(words)
    run(words)
    return 0


def run(argv: Optional[Sequence[str]] = None) -> Dict[str, Any]:
    """Measure (or read ``--from-json``), write the report and return the results."""
    from .report import render_report, summary_lines  # lazy: --help answers without it
    from .suite import run_benchmark, select_models  # lazy: --help answers without it
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        for patterns in (args.models, args.scaling_models, args.sdpa_models):
            if patterns:
                select_models(patterns)
        config = config_from_args(args)
    except ValueError as e:
        parser.error(str(e))
    if args.from_json:
        with open(args.from_json) as f:
            results = json.load(f)
    else:
        argv_list = list(sys.argv[1:] if argv is None else argv)
        config.command = ' '.join([PROG] + argv_list)
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
