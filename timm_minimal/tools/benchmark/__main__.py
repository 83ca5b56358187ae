"""``python -m timm_minimal.tools.benchmark``: the same as ``timm-minimal-benchmark``."""
import sys

from . import main

sys.exit(main())
