#!/usr/bin/env python
"""A user's transformers route against timm, on the release installed: a shipped checkpoint saved as a user saves it
(``VitMinimalForImageClassification.from_timm(timm.create_model(name, pretrained=True)).save_pretrained(folder)``),
then ``pipeline('image-classification', model=folder)`` on 500 bundled MNIST test digits (and 200 CIFAR-10 test
images from --data-dir), with the folder as saved and without its ``preprocessor_config.json``; each scored against the
labels and against timm's own predictions.

    python scripts/pipeline_vs_timm.py --data-dir ../shared/data
"""
import argparse
import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np
import timm
import torch
import transformers
from PIL import Image
from transformers import pipeline

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the package of this checkout
sys.path.insert(0, str(ROOT / 'scripts'))

from check_zoo_pipelines import _test_images, _timm_predictions  # noqa: E402
from timm_minimal import VitMinimalForImageClassification  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('--data-dir', type=Path, default=Path('../shared/data'))
    args = parser.parse_args()
    torch.set_num_threads(1)
    print(f'transformers {transformers.__version__}, timm {timm.__version__}, torch {torch.__version__}\n')
    print('| checkpoint | images | preprocessor_config.json | processor | pipeline acc % | agrees with timm % |\n'
          '|---|---:|---|---|---:|---:|')
    work = Path(tempfile.mkdtemp())
    for name, dataset, n in (('vit_minimal_sym_6x4.mnist', 'mnist', 500), ('vit_minimal_sym_6x4.cifar10', 'cifar10', 200)):
        images, labels = _test_images(dataset, args.data_dir, n)
        want = _timm_predictions(name, images)
        model = timm.create_model(name, pretrained=True).eval()
        folder = work / name
        VitMinimalForImageClassification.from_timm(model).save_pretrained(folder)
        for kept in (True, False):
            if not kept:
                (folder / 'preprocessor_config.json').unlink()
            names = model.pretrained_cfg['label_names']
            try:
                pipe = pipeline('image-classification', model=str(folder))
                got = np.array([names.index(r[0]['label']) for r in
                                pipe([Image.fromarray(x) for x in images], top_k=1, batch_size=100)])
                cells = (type(pipe.image_processor).__name__, f'{100 * (got == labels).mean():.1f}',
                         f'{100 * (got == want).mean():.1f}')
            except Exception as e:  # noqa: BLE001 (what a user would see is the measurement)
                cells = (f'{type(e).__name__}: {" ".join(str(e).split())[:80]}', '-', '-')
            print(f'| {name} | {n} | {"kept" if kept else "removed"} | ' + ' | '.join(cells) + ' |')
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == '__main__':
    sys.exit(main())
