"""The training step with AdamW looping over the parameters and as torch's fused kernel, taking turns in one process.

    python scripts/fused_adamw.py --model vit_minimal_sym_6x4.mnist
    python scripts/fused_adamw.py --model vit_minimal_sym_6x4.cifar10 --bf16

One model (the heads padded, through ``torch.compile`` unless ``--eager``) on all the cores as threads, one batch of
random images, and two AdamW optimizers over its parameters as the trainer builds them (``create_optimizer_v2``,
weight decay 0.05): torch's default on the CPU, which loops over the parameters, and ``fused=True``. Each round times a
block of steps with each, the order reversed every other round; the table gives each side's img/s by round and their
medians, and the median of the rounds' ratios.
"""
import statistics
import sys
import time

import timm
import torch
from timm.optim import create_optimizer_v2

from timm_minimal.cli import OneLineParser, command, number, positive_int
from timm_minimal.machine import cpu_signature, keep_freed_memory, usable_cores
from timm_minimal.models.layers import set_head_padding
from timm_minimal.training.plan import known_architecture

SIDES = ('loop', 'fused')


def build(args):
    """One step of the model (compiled unless ``--eager``) on one batch, with the optimizer of the side it is given."""
    torch.set_num_threads(usable_cores())
    torch.manual_seed(0)
    net = timm.create_model(args.model).train()
    set_head_padding(net, True)
    x = torch.randn(args.batch, *net.pretrained_cfg['input_size'])
    y = torch.randint(0, max(1, net.num_classes), (args.batch,))
    forward = net if args.eager else torch.compile(net, dynamic=False)
    optimizers = {side: create_optimizer_v2(net, 'adamw', lr=1e-4, weight_decay=0.05, fused=side == 'fused')
                  for side in SIDES}

    def step(side: str) -> None:
        opt = optimizers[side]
        opt.zero_grad(set_to_none=True)
        with torch.autocast('cpu', dtype=torch.bfloat16, enabled=args.bf16):
            loss = torch.nn.functional.cross_entropy(forward(x), y)
        loss.backward()
        opt.step()
    return step


def block(step, side: str, seconds: float, batch: int) -> float:
    steps, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        step(side)
        steps += 1
    return steps * batch / (time.perf_counter() - t0)


@command('fused_adamw.py')
def main(argv=None) -> int:
    p = OneLineParser(prog='fused_adamw.py', description=__doc__.split('\n\n')[0])
    p.add_argument('--model', default='vit_minimal_sym_6x4.mnist')
    p.add_argument('--batch', type=positive_int, default=256)
    p.add_argument('--bf16', action='store_true', help='the step in bf16 autocast')
    p.add_argument('--eager', action='store_true', help='the step without torch.compile')
    p.add_argument('--block', type=number(float, 0, above=True), default=1.0, help="each block's seconds")
    p.add_argument('--rounds', type=positive_int, default=12)
    args = p.parse_args(argv)
    known_architecture(args.model)
    keep_freed_memory()
    step = build(args)
    for side in SIDES:  # compiles, then each optimizer's state exists
        for _ in range(5):
            step(side)
    rates = {side: [] for side in SIDES}
    for r in range(args.rounds):
        for side in (SIDES if r % 2 == 0 else SIDES[::-1]):
            rates[side].append(block(step, side, args.block, args.batch))
    ratios = [f / loop for f, loop in zip(rates['fused'], rates['loop'])]
    sig = cpu_signature()
    print(f'{args.model}, batch {args.batch}, {usable_cores()} threads, {"bf16" if args.bf16 else "fp32"}, '
          f'{"eager" if args.eager else "compiled"}; {sig["cpu"]} ({sig["flags"]}), torch {sig["torch"]}\n')
    print('| AdamW | img/s of each round | median |\n| :--- | :--- | ---: |')
    for side in SIDES:
        print(f'| {side} | {", ".join(f"{v:,.0f}" for v in rates[side])} | {statistics.median(rates[side]):,.0f} |')
    print(f'\nfused / loop: {statistics.median(ratios):.3f}x (median of the rounds; {min(ratios):.3f}-'
          f'{max(ratios):.3f})')
    return 0


if __name__ == '__main__':
    sys.exit(main())
