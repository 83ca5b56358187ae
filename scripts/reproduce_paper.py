#!/usr/bin/env python
"""Train the grid of the paper's Tables 1 and 2 and write our numbers next to the paper's; the same as
the `timm-minimal-reproduce` console script.

    python scripts/reproduce_paper.py --tables 2 --epochs 5 --data-dir ../shared/data --runs-dir ../runs/reproduce_mnist

See `timm_minimal/tools/paper/reproduce.py` (or --help) for every option.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from timm_minimal.tools.paper.reproduce import main  # noqa: E402

if __name__ == '__main__':
    sys.exit(main())
