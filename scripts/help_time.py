"""How long each console script takes to print its ``--help``: as installed (``timm_minimal_scripts``, which parses
before it imports torch) against importing the tool's module first (what ``python -m`` does, and what every
console script did before), each in a fresh interpreter, the two alternating, medians and their ratio.

    python scripts/help_time.py [--repeats 5]

Prints a table with the CPU flags and versions. The target: every script's help within 1.5 s.
"""
import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time

from import_time import cpu_flags
from timm_minimal_scripts import SCRIPTS


def _seconds(command) -> float:
    start = time.perf_counter()
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def commands(name: str):
    """(the installed script, the tool's module imported first) for ``--help``."""
    script = shutil.which(name) or sys.exit(f'{name} is not installed: pip install -e .')
    main = SCRIPTS[name].main
    return [script, '--help'], [sys.executable, '-c', f'from {main} import main; main(["--help"])']


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    p.add_argument('--repeats', type=int, default=5)
    args = p.parse_args()
    times = {}
    for name in SCRIPTS:
        light, heavy = commands(name)
        _seconds(light), _seconds(heavy)  # warm the file cache
        pairs = [(_seconds(light), _seconds(heavy)) for _ in range(args.repeats)]
        times[name] = [statistics.median(side) for side in zip(*pairs)]
    import timm
    import torch
    print(f'CPU flags: {cpu_flags()}, {os.cpu_count()} cores; python {sys.version.split()[0]}, '
          f'torch {torch.__version__}, timm {timm.__version__}; median of {args.repeats} alternating runs, each a '
          f'fresh interpreter')
    print('| script | --help (s) | tool imported first (s) | ratio |')
    print('|---|---:|---:|---:|')
    for name, (light, heavy) in times.items():
        print(f'| {name} | {light:.2f} | {heavy:.2f} | {heavy / light:.1f}x |')
    slow = [name for name, (light, _) in times.items() if light > 1.5]
    print(f'slower than 1.5 s: {", ".join(slow) or "none"}')
    return 0


if __name__ == '__main__':
    sys.exit(main())
