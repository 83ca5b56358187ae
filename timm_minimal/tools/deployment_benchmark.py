"""The deployment benchmark, now ``timm_minimal.tools.benchmark.deployment``; ``python -m timm_minimal.tools.deployment_benchmark``
(the command the committed reports were made with) still runs it."""
import sys

from .benchmark.deployment import main

if __name__ == '__main__':
    sys.exit(main())
