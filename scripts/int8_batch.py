"""How much an int8 ONNX file's predictions depend on the batch they are computed in.

    python scripts/int8_batch.py EXPORT_DIR --data-dir ../shared/data [--batch-size 1000]

``timm-minimal-export --int8`` quantises the activations dynamically: onnxruntime computes each activation's
scale from the values of the whole batch it is given, so an image can be predicted differently alone than among
others. This script runs the test split of the export's dataset through ``model.int8.onnx`` (and, for reference,
``model.onnx``) once at ``--batch-size`` and once image by image, and prints how many of the predictions differ.
"""
import json
import sys
from pathlib import Path

import numpy as np

from timm_minimal.cli import OneLineParser, UsageError, command, positive_int


def predictions(session, images: np.ndarray, batch_size: int) -> np.ndarray:
    name = session.get_inputs()[0].name
    out = [session.run(None, {name: images[i:i + batch_size]})[0].argmax(-1) for i in range(0, len(images), batch_size)]
    return np.concatenate(out)


def test_images(export_dir: Path, data_dir: str):
    """The export's test split as the normalised float32 batch its graph takes, and the labels in its class order:
    the split ``timm-minimal-evaluate`` and the export's check read (``load_eval_split``)."""
    import torch
    from timm_minimal.models.datasets import DATASETS
    from timm_minimal.models.pretrained import tag_dataset
    from timm_minimal.tools.evaluate import load_eval_split
    from timm_minimal.training.data.batch_augment import BatchAugment, BatchAugmentConfig
    pre = json.loads((export_dir / 'preprocessing.json').read_text())
    dataset = DATASETS[tag_dataset(pre['model'].rsplit('.', 1)[-1])].kind  # a recipe tag's images are its dataset's
    split = load_eval_split(pre, pre['output']['shape'][1], dataset, data_dir, label_names=pre.get('label_names'))
    normalize = BatchAugment(BatchAugmentConfig(), pre['mean'], pre['std'], torch.device('cpu')).normalize
    return normalize(torch.from_numpy(split.images)).numpy(), split.labels


@command('int8_batch.py')
def main(argv=None) -> int:
    p = OneLineParser(prog='int8_batch.py', description=__doc__.split('\n\n')[0])
    p.add_argument('export_dir', type=Path, help='a timm-minimal-export --int8 folder')
    p.add_argument('--data-dir', required=True, help='where the dataset is')
    p.add_argument('--batch-size', type=positive_int, default=1000, help='the larger batch')
    args = p.parse_args(argv)
    missing = [f for f in ('preprocessing.json', 'model.onnx', 'model.int8.onnx') if not (args.export_dir / f).is_file()]
    if missing:
        raise UsageError(f'{args.export_dir} lacks {", ".join(missing)}: name a folder of timm-minimal-export --int8')
    import onnxruntime as ort
    from timm_minimal.tools.common import cpu_environment
    from timm_minimal.training.data.loading import DatasetError
    try:
        x, labels = test_images(args.export_dir, args.data_dir)
    except DatasetError as e:
        raise UsageError(str(e)) from None
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    cpu = cpu_environment()
    print(f'{args.export_dir.name}: {len(x):,} test images; onnxruntime {ort.__version__}, one thread of {cpu["device"]} '
          f'(CPU flags: {cpu["flags"]})')
    print(f'| file | top-1 at batch {args.batch_size} | top-1 at batch 1 | predictions that differ |')
    print('|---|---:|---:|---:|')
    for name in ('model.onnx', 'model.int8.onnx'):
        session = ort.InferenceSession(str(args.export_dir / name), options, providers=['CPUExecutionProvider'])
        big, one = predictions(session, x, args.batch_size), predictions(session, x, 1)
        print(f'| {name} | {100 * (big == labels).mean():.2f}% | {100 * (one == labels).mean():.2f}% '
              f'| {int((big != one).sum()):,} of {len(x):,} |')
    return 0


if __name__ == '__main__':
    sys.exit(main())
