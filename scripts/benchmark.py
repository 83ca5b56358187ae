#!/usr/bin/env python
"""Benchmark the vit_minimal architectures and write BENCHMARKS.md plus PNG plots.

    python scripts/benchmark.py                     # the committed report's settings (a few minutes on 2 cores)
    python scripts/benchmark.py --quick             # smoke test, well under a minute
    python scripts/benchmark.py --models 'vit_minimal_*_12x*' --dataset cifar10 --device cuda

All the work is in ``timm_minimal.tools.benchmark``; ``--help`` lists the options.
"""
import sys

from timm_minimal.tools.benchmark import main

if __name__ == '__main__':
    sys.exit(main())
