"""Benchmarks of the minimal vision transformers: what the minimal variants buy, measured.

For every selected architecture (a glob over ``ARCHITECTURES``) this package measures parameters,
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
``scripts/benchmark.py`` / ``timm-minimal-benchmark`` is the command line front; its subcommand ``training`` runs
``timm_minimal.tools.benchmark.training`` instead (the trainer against the bare training step) with the other
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

The modules, by job:

- ``measure``: the models (ours, timm's reference), parameters and FLOPs (``count_flops``), timing;
- ``memory``: peak working memory, in process or in fresh processes forked from ``_memory_server``;
- ``suite``: which runs make up the benchmark (``BenchmarkConfig``) and running them (``run_benchmark``);
- ``accuracy``: the paper's Table 2 and the reproduce-paper results;
- ``report``: the markdown report, one function per section; ``plots``: its PNG plots;
- ``cli``: the command line (``main``); ``python -m timm_minimal.tools.benchmark`` runs it too.
"""
from ...lazy import LazyNames

# The names of the package, by the module that defines them, imported on first use: the command line (``cli``)
# answers --help without torch, which ``measure`` and ``suite`` import.
_NAMES = LazyNames(__name__, {
    'accuracy': ('PAPER_TABLE2', 'load_reproduce_results'),
    'cli': ('build_parser', 'config_from_args', 'main', 'run'),
    'config': ('BenchmarkConfig',),
    'measure': ('TIMM_REF', 'ModelSpec', 'Runner', 'build_model', 'build_timm_reference', 'count_flops', 'count_params',
                'geometry', 'measure_throughput', 'median', 'parse_name', 'ratios', 'set_fused_attn'),
    'memory': ('measure_memory', 'tensor_memory_peak'),
    'report': ('render_report', 'summary_lines'),
    'suite': ('baseline_of', 'run_benchmark', 'select_models'),
}, globals())
__getattr__, __dir__ = _NAMES.getattr, _NAMES.dir

__all__ = [
    'BenchmarkConfig', 'PAPER_TABLE2', 'build_model', 'build_timm_reference', 'count_flops', 'count_params',
    'run_benchmark', 'render_report', 'load_reproduce_results', 'main', 'run',
    # also used by the tests and the other tools
    'TIMM_REF', 'ModelSpec', 'Runner', 'baseline_of', 'build_parser', 'config_from_args', 'geometry',
    'measure_memory', 'measure_throughput', 'median', 'parse_name', 'ratios', 'select_models', 'set_fused_attn',
    'summary_lines', 'tensor_memory_peak',
]
