"""The training benchmark, now ``timm_minimal.tools.benchmark.training``; ``python -m timm_minimal.tools.training_benchmark``
(the command the committed reports were made with) still runs it."""
import sys

from .benchmark.training import main

if __name__ == '__main__':
    sys.exit(main())
