"""How fast the two image processors prepare a batch: the PIL one (timm's transform, image by image) against the
torchvision one (``use_fast=True``: one batched resize, crop and normalisation), and how far their pixels differ.

    python scripts/processor_speed.py [--batch 64] [--repeats 7] [--threads 2] [--device cpu]

For each shipped geometry (MNIST digits, CIFAR-10 images, an ImageNet-size input of the .in1k cfg), random RGB
images of a size that needs a resize go through both processors, alternating within each repeat; the table gives
the median milliseconds a batch, the speed of the torchvision processor against the PIL one, and the largest pixel
difference in 8-bit levels. transformers' own ``ViTImageProcessor`` (its torchvision backend, set to the same size, mean,
std and filter; it resizes straight to the input size, without timm's crop) takes its turn too, as the reference the
torchvision processor should keep up with. Prints the CPU, its flags and the versions above the table.
"""
import statistics
import sys
import time

from timm_minimal.cli import OneLineParser, command, positive_int

CASES = (('vit_minimal_sym_6x4.mnist', (40, 30)), ('vit_minimal_sym_6x4.cifar10', (48, 40)),
         ('vit_minimal_sym_6x4.in1k', (300, 260)))


@command('processor_speed.py')
def main(argv=None) -> int:
    p = OneLineParser(prog='processor_speed.py', description=__doc__.split('\n\n')[0])
    p.add_argument('--batch', type=positive_int, default=64, help='images a call')
    p.add_argument('--repeats', type=positive_int, default=7)
    p.add_argument('--threads', type=positive_int, default=2)
    p.add_argument('--device', default='cpu', help="where the torchvision processor works (the PIL one: the CPU)")
    args = p.parse_args(argv)
    import numpy as np
    import timm
    import torch
    import transformers
    from PIL import Image
    from timm_minimal import VitMinimalImageProcessorPil, VitMinimalImageProcessor
    from timm_minimal.tools.common import cpu_environment
    torch.set_num_threads(args.threads)
    cpu = cpu_environment()
    print(f'{cpu["device"]} (CPU flags: {cpu["flags"]}); {args.threads} thread(s); python {sys.version.split()[0]}, '
          f'torch {torch.__version__}, transformers {transformers.__version__}; batch {args.batch}, median of '
          f'{args.repeats}; torchvision processor on {args.device}\n')
    print('| checkpoint geometry | input | PIL ms | torchvision ms | speed | ViTImageProcessor ms | torchvision / ViT '
          '| max diff (levels) |')
    print('|---|---|---:|---:|---:|---:|---:|---:|')
    rng = np.random.default_rng(0)
    for name, (h, w) in CASES:
        cfg = timm.create_model(name).pretrained_cfg
        images = [Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)) for _ in range(args.batch)]
        slow = VitMinimalImageProcessorPil.from_pretrained_cfg(cfg)
        fast = VitMinimalImageProcessor.from_pretrained_cfg(cfg)
        vit = transformers.ViTImageProcessor(
            size=dict(height=cfg['input_size'][1], width=cfg['input_size'][2]), image_mean=list(slow.image_mean),
            image_std=list(slow.image_std), resample=getattr(Image.Resampling, cfg['interpolation'].upper()))
        calls = {'slow': lambda: slow(images)['pixel_values'],
                 'fast': lambda: fast(images, device=args.device)['pixel_values'].cpu(),
                 'vit': lambda: vit(images, return_tensors='pt')['pixel_values']}
        out = {k: f() for k, f in calls.items()}  # warm-up
        times = {k: [] for k in calls}
        for _ in range(args.repeats):
            for k, f in calls.items():
                start = time.perf_counter()
                f()
                times[k].append(time.perf_counter() - start)
        ms = {k: 1e3 * statistics.median(v) for k, v in times.items()}
        level = 1 / 255 / min(slow.image_std)
        diff = float((out['fast'] - out['slow']).abs().max()) / level
        print(f'| {name} ({cfg["input_size"][1]}x{cfg["input_size"][2]}, {cfg["interpolation"]}) | {h}x{w} | '
              f'{ms["slow"]:.1f} | {ms["fast"]:.1f} | {ms["slow"] / ms["fast"]:.2f}x | {ms["vit"]:.1f} | '
              f'{ms["vit"] / ms["fast"]:.2f}x | {diff:.2f} |')
    return 0


if __name__ == '__main__':
    sys.exit(main())
