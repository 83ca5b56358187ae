#!/usr/bin/env python
"""The staged zoo as a visitor runs it: for each repository folder that ``timm-minimal-publish --zoo`` wrote, the
transformers pipeline through the folder's own remote code, in a process where ``timm_minimal`` cannot be imported,
on real test images (MNIST: 500, CIFAR-10: 200, spread over the test split); with the folder as written and again
without ``preprocessor_config.json``. Each is scored against the labels and against timm's predictions with the
package installed.

    timm-minimal-publish --zoo --output ../hub-zoo
    python scripts/check_zoo_pipelines.py ../hub-zoo --data-dir ../shared/data

Prints a markdown table and exits 1 where a pipeline agrees with timm on fewer than --min-agreement of the images.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

# Runs in a fresh process: the pipeline of each folder on the saved images, without the package.
_VISITOR = '''
import json, sys
sys.modules['timm_minimal'] = None  # as if the package were not installed
import numpy as np, transformers
from PIL import Image
from transformers import pipeline
folders, images_file, out = json.loads(sys.argv[1]), sys.argv[2], sys.argv[3]
arrays = np.load(images_file)
results = {'transformers': transformers.__version__}
for folder, key in folders:
    images = [Image.fromarray(x) for x in arrays[key]]
    pipe = pipeline('image-classification', model=folder, trust_remote_code=True)
    assert type(pipe.model).__module__.startswith('transformers_modules.'), type(pipe.model).__module__
    results[folder] = [r[0]['label'] for r in pipe(images, top_k=1, batch_size=100)]
json.dump(results, open(out, 'w'))
'''


def _test_images(dataset: str, data_dir: Path, n: int):
    """``n`` images spread evenly over the test split (its classes are stored in order), as uint8 arrays, and labels."""
    from timm_minimal.training.data.loading import load_cifar10, load_mnist
    data = (load_mnist if dataset == 'mnist' else load_cifar10)(data_dir, download=False)
    picks = np.linspace(0, len(data.eval) - 1, n).round().astype(int)
    pairs = [data.eval[int(i)] for i in picks]
    return np.stack([np.array(image) for image, _ in pairs]), np.array([label for _, label in pairs])


def _timm_predictions(name: str, images: np.ndarray) -> np.ndarray:
    import timm
    import torch
    from PIL import Image
    model = timm.create_model(name, pretrained=True).eval()
    transform = timm.data.create_transform(**timm.data.resolve_data_config({}, model=model))
    mode = 'L' if model.in_chans == 1 else 'RGB'
    with torch.no_grad():
        batch = torch.stack([transform(Image.fromarray(x).convert(mode)) for x in images])
        return model(batch).argmax(-1).numpy()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('zoo', type=Path, help='the folder publish --zoo wrote')
    parser.add_argument('--data-dir', type=Path, default=Path('../shared/data'))
    parser.add_argument('--digits', type=int, default=500)
    parser.add_argument('--cifar', type=int, default=200)
    parser.add_argument('--min-agreement', type=float, default=0.99)
    args = parser.parse_args()
    import timm_minimal  # noqa: F401  (the timm side: the package's own predictions)
    folders = sorted(p.resolve() for p in args.zoo.iterdir() if (p / 'config.json').is_file())
    if not folders:
        sys.exit(f'{args.zoo}: no repository folders; write them with timm-minimal-publish --zoo --output {args.zoo}')
    work = Path(tempfile.mkdtemp())
    sets = {d: _test_images(d, args.data_dir, n) for d, n in (('mnist', args.digits), ('cifar10', args.cifar))}
    np.savez(work / 'images.npz', **{d: images for d, (images, _) in sets.items()})
    bare = []
    for folder in folders:
        copy = work / 'bare' / folder.name
        shutil.copytree(folder, copy)
        (copy / 'preprocessor_config.json').unlink()
        bare.append(copy)
    dataset = {f.name: 'mnist' if f.name.endswith('.mnist') else 'cifar10' for f in folders}
    jobs = [[str(f), dataset[f.name]] for f in folders + bare]
    env = {k: v for k, v in os.environ.items() if k != 'PYTHONPATH'}
    env.update(HF_MODULES_CACHE=str(work / 'modules'), HF_HUB_OFFLINE='1')
    proc = subprocess.run([sys.executable, '-c', _VISITOR, json.dumps(jobs), str(work / 'images.npz'),
                           str(work / 'out.json')], cwd=work, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(proc.stderr[-3000:])
    got = json.loads((work / 'out.json').read_text())
    print(f'transformers {got["transformers"]}, the pipeline through each folder\'s remote code, timm_minimal not '
          f'importable\n')
    print('| repository | images | timm acc % | pipeline acc % | agrees with timm % | without preprocessor_config.json: '
          'acc % / agrees % |\n|---|---:|---:|---:|---:|---:|')
    worst = 1.0
    for folder, copy in zip(folders, bare):
        images, labels = sets[dataset[folder.name]]
        names = json.loads((folder / 'config.json').read_text())['label_names']
        ref = _timm_predictions(folder.name, images)
        cells = []
        for path in (folder, copy):
            pred = np.array([names.index(label) for label in got[str(path)]])
            agree = (pred == ref).mean()
            worst = min(worst, agree)
            cells.append((100 * (pred == labels).mean(), 100 * agree))
        print(f'| {folder.name} | {len(images)} | {100 * (ref == labels).mean():.1f} | {cells[0][0]:.1f} | '
              f'{cells[0][1]:.1f} | {cells[1][0]:.1f} / {cells[1][1]:.1f} |')
    shutil.rmtree(work, ignore_errors=True)
    print(f'\nthe lowest agreement with timm: {100 * worst:.1f}%')
    return 0 if worst >= args.min_agreement else 1


if __name__ == '__main__':
    sys.exit(main())
