"""The command line of ``timm-minimal-evaluate``, which imports neither torch nor timm (``--help`` answers at once;
``timm_minimal_scripts``). The other tools of this folder keep theirs in their own module, or in their room's
``cli.py``."""
import argparse
from pathlib import Path

from ..cli import OneLineParser, positive_int

__all__ = ['DESCRIPTION', 'EVAL_BATCH_SIZE', 'build_parser']

DESCRIPTION = ('Evaluate models on the whole test split of a dataset (or its training split): top-1 (with its '
               '95% interval) and top-5 accuracy, the loss, and per class where asked.')
# images per forward pass, timm's validate.py default: on a CPU, 1.24-1.35x as fast as 1,000 for these models,
# whose activations at 1,000 images outgrow the caches (benchmarks/eval_batch_avx2.md, scripts/eval_batch.py)
EVAL_BATCH_SIZE = 256


def build_parser() -> OneLineParser:
    p = OneLineParser(prog='timm-minimal-evaluate', description=DESCRIPTION)
    p.add_required('--model', nargs='+', metavar='MODEL',
                   help='timm model names with pretrained weights (a tag, local-dir:..., hf-hub:...); several give one '
                        'table, scored on the same images')
    p.add_renamed('model', '--model')  # the model was the first word until --model
    p.add_argument('--dataset', default=None,
                   help="mnist, cifar10, imagenet or an image folder (default: the dataset of the model's tag)")
    p.add_argument('--data-dir', default=None, help='where the dataset lies; default ./data, as the trainer\'s')
    p.add_argument('--split', metavar='NAME', default=None,
                   help="the split to evaluate, as timm's validate.py takes it: the dataset's evaluation split (test, "
                        "or an image folder's val/validation/test) or train (how well the model fits the training "
                        "images, without their augmentation) (default: the evaluation split)")
    p.add_argument('--batch-size', type=positive_int, default=EVAL_BATCH_SIZE,
                   help='images per forward pass (default: %(default)s, as timm\'s validate.py)')
    p.add_argument('--device', default='cpu', help='torch device')
    p.add_argument('--no-download', dest='download', action='store_false',
                   help='never download a missing dataset (by default it is downloaded, as the trainer does)')
    p.add_argument('--download', action='store_true', help=argparse.SUPPRESS)  # the default now; kept for a release
    p.add_argument('--labels-by-order', action='store_true',
                   help="take an image folder's class folders in alphabetical order as class 0, 1, ... instead of "
                        "matching their names to the model's label names")
    p.add_argument('--per-class', action='store_true', help='also a row per class: its images and each model\'s '
                   'top-1 on them')
    p.add_argument('--confusion', type=Path, default=None, metavar='PNG',
                   help='write the confusion matrix of each model, side by side, as a PNG')
    p.add_argument('--json', type=Path, default=None, metavar='PATH',
                   help='write every number (per model: accuracy and its 95%% interval, loss, parameters, per-class '
                        'accuracy, confusion matrix) as JSON')
    p.add_argument('--overwrite', action='store_true',
                   help='replace an existing --confusion or --json file (by default an existing file is refused)')
    p.add_argument('--log-with', nargs='+', default=None, metavar='TRACKER',
                   help="experiment trackers through accelerate (tensorboard, wandb, mlflow, ...): each model's loss "
                        "and accuracy and its confusion matrix as an image, into <log-dir>/evaluate-<time>/trackers")
    p.add_argument('--log-dir', type=Path, default=Path('runs'), help='where --log-with writes (the trainer\'s '
                   'default runs/: tensorboard --logdir runs shows both)')
    p.add_argument('--no-progress', action='store_true', help='no progress bar (the first decode of the data, the '
                   'evaluation; -q says no bar either)')
    return p
