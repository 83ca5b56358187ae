#!/usr/bin/env python
"""Write hf_configs/<architecture>/config.json for every registered vit_minimal architecture.

    python scripts/generate_hf_configs.py            # (re)generate
    python scripts/generate_hf_configs.py --check    # exit 1 if the committed files are out of date
"""
import argparse
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the package of this checkout

from timm_minimal.tools.hub.hf_export import check_hf_configs, write_hf_configs  # noqa: E402
from timm_minimal.models.vit_minimal import ARCHITECTURES  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('--out', type=Path, default=ROOT / 'hf_configs', help='output folder (default: hf_configs/)')
    parser.add_argument('--check', action='store_true', help='only compare, write nothing')
    args = parser.parse_args()
    if args.check:
        problems = check_hf_configs(args.out)
        for problem in problems:
            print(problem)
        return 1 if problems else 0
    if args.out.is_dir():  # drop folders of architectures that are no longer registered
        for entry in args.out.iterdir():
            if entry.is_dir() and entry.name not in ARCHITECTURES:
                shutil.rmtree(entry)
    written = write_hf_configs(args.out)
    print(f'wrote {len(written)} configs to {args.out}')
    return 0


if __name__ == '__main__':
    sys.exit(main())
