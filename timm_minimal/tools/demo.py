"""A first run that needs no download: train a minimal transformer on the MNIST sample shipped
with the package (5,000 training and 1,000 test digits of the original MNIST files) and
report parameters and test accuracy next to the paper's unchanged baseline.

    timm-minimal-demo --model vit_minimal_sym_6x4 --epochs 10
"""
import time
from functools import lru_cache
from importlib import resources
from typing import Tuple

import numpy as np
import timm
import torch
import torch.nn.functional as F
from timm.optim import create_optimizer_v2

from ..models import vit_minimal  # noqa: F401  (registers the architectures)
from .common import HelpFormatter, OneLineParser, positive_float, positive_int
from ..cli import command


@lru_cache(maxsize=1)
def load_mnist_sample() -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """The bundled MNIST sample as uint8 images (N, 28, 28) and int64 labels: train, then test (read once)."""
    with resources.files('timm_minimal').joinpath('data/mnist_sample.npz').open('rb') as f:
        data = np.load(f)
        arrays = [torch.from_numpy(data[k].copy()) for k in ('train_images', 'train_labels', 'test_images', 'test_labels')]
    return arrays[0], arrays[1].long(), arrays[2], arrays[3].long()


def _normalize(images: torch.Tensor, model: torch.nn.Module) -> torch.Tensor:
    cfg = model.pretrained_cfg
    mean = torch.tensor(cfg['mean']).view(1, -1, 1, 1)
    std = torch.tensor(cfg['std']).view(1, -1, 1, 1)
    return (images.unsqueeze(1).float() / 255. - mean) / std


@torch.no_grad()
def evaluate(model: torch.nn.Module, images: torch.Tensor, labels: torch.Tensor, batch_size: int = 500) -> float:
    model.eval()
    correct = 0
    for i in range(0, len(images), batch_size):
        logits = model(_normalize(images[i:i + batch_size], model))
        correct += (logits.argmax(-1) == labels[i:i + batch_size]).sum().item()
    return correct / len(images)


def train(model_name: str, epochs: int, batch_size: int = 128, lr: float = 1e-3, seed: int = 0) -> dict:
    torch.manual_seed(seed)
    x_train, y_train, x_test, y_test = load_mnist_sample()
    model = timm.create_model(f'{model_name}.mnist')
    optimizer = create_optimizer_v2(model, opt='adamw', lr=lr, weight_decay=1e-4)
    start = time.perf_counter()
    for epoch in range(epochs):
        model.train()
        order = torch.randperm(len(x_train))
        total = 0.
        for i in range(0, len(order), batch_size):
            idx = order[i:i + batch_size]
            loss = F.cross_entropy(model(_normalize(x_train[idx], model)), y_train[idx])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            total += loss.item() * len(idx)
        print(f'  {model_name} epoch {epoch + 1}/{epochs}: train loss {total / len(order):.4f}', flush=True)
    return dict(
        model=model_name,
        params=sum(p.numel() for p in model.parameters()),
        test_acc=evaluate(model, x_test, y_test),
        seconds=time.perf_counter() - start,
    )


@command('timm-minimal-demo')
def main(argv=None) -> None:
    parser = OneLineParser(prog='timm-minimal-demo', description=__doc__,
                           formatter_class=HelpFormatter)
    parser.add_argument('--model', nargs='+', default=['vit_minimal_std_mlp_6x1', 'vit_minimal_sym_6x4'],
                        help='architectures to train (the paper baseline and symmetric attention)')
    parser.add_argument('--epochs', type=positive_int, default=10, help='epochs per model')
    parser.add_argument('--batch-size', type=positive_int, default=128, help='images per step')
    parser.add_argument('--lr', type=positive_float, default=1e-3, help='AdamW learning rate')
    args = parser.parse_args(argv)
    for name in args.model:
        if name not in timm.list_models('vit_minimal*'):
            parser.error(f"unknown model '{name}'; choose from: {', '.join(timm.list_models('vit_minimal*'))}")
    print(f'Training on the bundled MNIST sample (5,000 train / 1,000 test), {args.epochs} epochs each:')
    results = [train(name, args.epochs, args.batch_size, args.lr) for name in args.model]
    print()
    print('| model | parameters | test accuracy (1,000 digits) | train time |')
    print('|---|---:|---:|---:|')
    for r in results:
        print(f"| {r['model']} | {r['params']:,} | {100 * r['test_acc']:.1f}% | {r['seconds']:.0f} s |")

    shipped = [n for n in timm.list_pretrained('vit_minimal*.mnist')]
    if shipped:
        x_test, y_test = load_mnist_sample()[2:]
        print()
        print('The pretrained MNIST checkpoints that ship with the package, on the same 1,000 test digits:')
        print()
        print('| checkpoint | parameters | test accuracy (1,000 digits) |')
        print('|---|---:|---:|')
        for name in shipped:
            model = timm.create_model(name, pretrained=True)
            params = sum(p.numel() for p in model.parameters())
            print(f'| {name} | {params:,} | {100 * evaluate(model, x_test, y_test):.1f}% |')


if __name__ == '__main__':
    main()
