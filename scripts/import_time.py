"""What ``import timm_minimal`` costs over ``import timm``: each import in a fresh interpreter, the two
alternating so that a change in the machine's load reaches both, then the medians and their difference.

    python scripts/import_time.py [--repeats 7]

Also times the trainer's module (the start of every ``timm-minimal-train``) and, for reference,
``import timm, transformers`` with transformers' configuration class (what the package imported before
its transformers registration waited for transformers). Prints a table with the CPU flags and versions.
"""
import argparse
import statistics
import subprocess
import sys
import time

STATEMENTS = {
    'import timm': 'import timm',
    'import timm_minimal': 'import timm_minimal',
    'import timm_minimal.training.train': 'import timm_minimal.training.train',
    'import timm, transformers (+ PreTrainedConfig)': 'import timm; from transformers import PreTrainedConfig',
}


def _seconds(statement: str) -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, '-c', statement], check=True)
    return time.perf_counter() - start


def cpu_flags() -> str:
    try:
        with open('/proc/cpuinfo') as f:
            flags = next(line for line in f if line.startswith('flags')).split(':')[1].split()
    except (OSError, StopIteration):
        return 'unknown'
    shown = [f for f in flags if f in ('avx2', 'avx512f', 'avx512_bf16', 'amx_bf16', 'amx_tile')]
    return ' '.join(shown) or 'no AVX2'


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    p.add_argument('--repeats', type=int, default=7)
    args = p.parse_args()
    for statement in STATEMENTS.values():  # warm the file cache once
        _seconds(statement)
    times = {name: [] for name in STATEMENTS}
    for _ in range(args.repeats):
        for name, statement in STATEMENTS.items():
            times[name].append(_seconds(statement))
    import os
    import timm
    import torch
    import transformers
    print(f'CPU flags: {cpu_flags()}, {os.cpu_count()} cores; python {sys.version.split()[0]}, torch {torch.__version__}, '
          f'timm {timm.__version__}, transformers {transformers.__version__}; median of {args.repeats} alternating '
          f'runs, each a fresh interpreter')
    base = statistics.median(times['import timm'])
    print('| statement | median (s) | over import timm (s) |')
    print('|---|---:|---:|')
    for name, values in times.items():
        median = statistics.median(values)
        print(f'| `{name}` | {median:.2f} | {median - base:+.2f} |')
    return 0


if __name__ == '__main__':
    sys.exit(main())
