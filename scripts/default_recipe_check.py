"""The default recipe as a new user meets it: MNIST written out as an image folder, trained at 1 and 5 epochs.

    python scripts/default_recipe_check.py --data-dir ../shared/data --work-dir ../runs/default-recipe
    python scripts/default_recipe_check.py --data-dir ../shared/data --work-dir ../runs/default-recipe \\
        --name lr3e-3 -- --lr 3e-3                     # a candidate: options after -- go to the trainer
    python scripts/default_recipe_check.py --folder path/to/cifar10-folder --model vit_minimal_sym_6x4.cifar10 \\
        --work-dir ../runs/default-recipe-cifar10 --epochs 1  # the same on natural images

The folder (``<work-dir>/mnist-folder/{train,test}/<digit>/<n>.png``, 60,000 / 10,000 grey PNGs) is written
once. Each epoch count is one ``timm-minimal-train --model vit_minimal_sym_6x4.mnist --dataset <folder>`` run
in ``<work-dir>/<name>-e<epochs>`` with the recipe the trainer picks for a folder (``default.yaml``); a
finished run is reused. Prints a markdown table: the test accuracy of the last epoch and the wall time.
"""
import argparse
import subprocess
import sys
from pathlib import Path

import numpy as np
from PIL import Image

from timm_minimal.training.data.loading import load_mnist
from timm_minimal.training.run.folder import RunFolder


def write_folder(data_dir: Path, out: Path) -> Path:
    """MNIST's two splits as ``train/`` and ``test/`` with one folder per digit; kept if already complete."""
    done = out / '.complete'
    if done.is_file():
        return out
    data = load_mnist(data_dir, download=False)
    for split, ds in (('train', data.train), ('test', data.eval)):
        images, labels = np.asarray(ds.images), np.asarray(ds.labels)
        for digit in range(10):
            (out / split / str(digit)).mkdir(parents=True, exist_ok=True)
        for i, (image, label) in enumerate(zip(images, labels)):
            Image.fromarray(image.reshape(28, 28)).save(out / split / str(int(label)) / f'{i:05d}.png')
    done.write_text('')
    return out


def train(folder: Path, run: Path, model: str, epochs: int, extra: list) -> dict:
    """One trainer run (reused when it finished) and its last epoch's metrics and wall time."""
    record = RunFolder(run)
    if record.read_run().get('status') != 'finished':
        resume = ['--resume', str(run)] if record.is_run() else ['--output', str(run)]
        cmd = [sys.executable, '-m', 'timm_minimal.training.train', '--model', model, '--dataset', str(folder),
               '--epochs', str(epochs), *resume, *extra]
        print('$', ' '.join(cmd), flush=True)
        subprocess.run(cmd, check=True)
    metrics = record.read_metrics()
    return dict(metrics[-1], wall_time=record.read_run().get('wall_time'))


def main() -> int:
    argv = sys.argv[1:]
    extra = argv[argv.index('--') + 1:] if '--' in argv else []
    argv = argv[:argv.index('--')] if '--' in argv else argv
    p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    p.add_argument('--data-dir', help='the MNIST idx files (torchvision layout), written out as an image folder')
    p.add_argument('--folder', type=Path, help='an image folder to train on instead (train/ and test/ or val/)')
    p.add_argument('--work-dir', required=True, type=Path, help='the image folder and the run folders')
    p.add_argument('--model', default='vit_minimal_sym_6x4.mnist')
    p.add_argument('--epochs', type=int, nargs='+', default=[1, 5])
    p.add_argument('--name', default='default', help='the candidate\'s name in the run folders')
    args = p.parse_args(argv)
    if (args.data_dir is None) == (args.folder is None):
        p.error('give one of --data-dir (MNIST, written out as a folder) and --folder')
    folder = args.folder or write_folder(Path(args.data_dir), args.work_dir / 'mnist-folder')
    rows = [(e, train(folder, args.work_dir / f'{args.name}-e{e}', args.model, e, extra)) for e in args.epochs]
    print(f'\n{args.model} on {"MNIST as an image folder" if args.folder is None else folder}, recipe default.yaml'
          + (f' with {" ".join(extra)}' if extra else ''))
    print('| epochs | test acc % | wall time (s) |\n|---:|---:|---:|')
    for e, m in rows:
        print(f"| {e} | {m['test_acc']:.2f} | {m['wall_time'] or float('nan'):.0f} |")
    return 0


if __name__ == '__main__':
    sys.exit(main())
