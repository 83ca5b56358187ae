"""The trainer's CPU split against the CPU decision's probe of the same split, measured in turn in the same minutes.

    python scripts/trainer_vs_probe.py --data-dir ../shared/data --rounds 3

A CPU's speed drifts by up to 2x within an hour on a shared machine, so a probe measured at a run's start and the run's
median over half an hour are not comparable. Here each round measures the decision's probe of the split
(``cpu_split.measure``: the processes as one DDP group on random resident inputs) and a short run of
``timm-minimal-train`` with the same split, compilation and head padding forced (img/s: the median of its epochs
2..n, as ``run.json``'s throughput), one after the other, the order reversed every other round. The table gives
each side's median, its range, and the trainer's median over the probe's.
"""
import argparse
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

from timm_minimal.training.cpu.split import measure
from timm_minimal.machine import cpu_signature
from timm_minimal.training.run.folder import RunFolder


def trainer_rate(args: argparse.Namespace, run: Path) -> float:
    """The median img/s of epochs 2..n of one short split run forced to the probed mode."""
    cmd = [sys.executable, '-m', 'timm_minimal.training.train', '--model', args.model, '--dataset', args.dataset,
           '--data-dir', args.data_dir, '--cpu', '--cpu-processes', str(args.processes),
           '--compile' if args.compiled else '--no-compile', '--pad-heads' if args.padded else '--no-pad-heads',
           '--batch-size', str(args.batch), '--train-subset', str(args.train_subset), '--eval-subset', '500',
           '--epochs', str(args.epochs), '--no-progress', '--log-interval', '0', '--output', str(run)]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    rates = [row['throughput'] for row in RunFolder(run).read_metrics()][1:]
    return statistics.median(rates)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    p.add_argument('--model', default='vit_minimal_sym_6x4.cifar10')
    p.add_argument('--dataset', default='cifar10')
    p.add_argument('--data-dir', required=True)
    p.add_argument('--batch', type=int, default=256, help='the global batch (each process steps its share)')
    p.add_argument('--processes', type=int, default=2, help='processes of the split, one thread each')
    p.add_argument('--compiled', action='store_true', help='both sides compiled')
    p.add_argument('--padded', action='store_true', help='both sides with the heads padded (default: unpadded)')
    p.add_argument('--train-subset', type=int, default=12800, help='training images per epoch of the trainer')
    p.add_argument('--epochs', type=int, default=4, help='epochs of the trainer (the first one is not counted)')
    p.add_argument('--probe-seconds', type=float, default=12.0, help='the probe\'s timed seconds')
    p.add_argument('--rounds', type=int, default=3)
    args = p.parse_args(argv)
    rates = {'probe': [], 'trainer': []}
    with tempfile.TemporaryDirectory() as work:
        for r in range(args.rounds):
            for side in (('probe', 'trainer') if r % 2 == 0 else ('trainer', 'probe')):
                rate = (measure(args.model, args.batch, args.processes, 1, args.probe_seconds,
                                compiled=args.compiled, padded=args.padded) if side == 'probe'
                        else trainer_rate(args, Path(work) / f'round{r}'))
                rates[side].append(rate)
                print(f'round {r + 1}: {side} {rate:,.0f} img/s', flush=True)
    sig = cpu_signature()  # its flags name the kernel caps where any is set
    mode = (f'{args.processes} x 1{" compiled" if args.compiled else ""}, heads '
            f'{"padded" if args.padded else "unpadded"}')
    print(f'\n{args.model}, global batch {args.batch}, {mode}; torch {torch.__version__}; {sig["cpu"]}, CPU flags: '
          f'{sig["flags"]}')
    base = statistics.median(rates['probe'])
    print('| side | img/s (median) | range | / probe |\n|---|---:|---:|---:|')
    for side, values in rates.items():
        med = statistics.median(values)
        print(f'| {side} | {med:,.0f} | {min(values):,.0f}-{max(values):,.0f} | {med / base:.2f} |')
    return 0


if __name__ == '__main__':
    sys.exit(main())
