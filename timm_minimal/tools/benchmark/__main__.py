"""``python -m timm_minimal.tools.benchmark``: the same as ``timm-minimal-benchmark``."""
from . import main

main()
