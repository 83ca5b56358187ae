#!/usr/bin/env python
"""Train a minimal transformer with accelerate; the same as the `timm-minimal-train` console script.

    python scripts/train.py --model vit_minimal_std_mlp_6x1 --dataset mnist --data-dir ../shared/data --output runs/mnist
    accelerate launch --num_processes 4 scripts/train.py --model vit_minimal_sym_6x4 --dataset imagenet --data-dir /data/imagenet

See `timm_minimal/training/train.py` (or --help) for every option.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from timm_minimal.training.train import main  # noqa: E402

if __name__ == '__main__':
    sys.exit(main())
