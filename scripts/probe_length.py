"""The CPU decision's compiled probes timed for a shorter and a longer span, taking turns in one probe pool.

    python scripts/probe_length.py --model vit_minimal_sym_6x4.mnist --rounds 3
    python scripts/probe_length.py --model vit_minimal_sym_6x4.cifar10 --bf16 --rounds 3

Each round measures, at each process count of the decision (one process of all the cores, one per core), the
compiled candidate as the decision does (``cpu.split.measure``: the probe processes of ``cpu.probes``, a split's
processes as one DDP group, the heads padded), once for each span, the order reversed every other round. The table
gives every round's img/s, each span's median and range, and the medians' ratio: a shorter probe may replace the
longer only where it measures what the longer does, within the spread of the rounds.
"""
import statistics
import sys

from timm_minimal.cli import Failure, OneLineParser, command, number, positive_int
from timm_minimal.machine import cpu_signature
from timm_minimal.training.cpu import split
from timm_minimal.training.cpu.probes import probe_pool
from timm_minimal.training.plan import known_architecture


@command('probe_length.py')
def main(argv=None) -> int:
    p = OneLineParser(prog='probe_length.py', description=__doc__.split('\n\n')[0])
    p.add_argument('--model', default='vit_minimal_sym_6x4.mnist')
    p.add_argument('--batch', type=positive_int, default=256)
    p.add_argument('--bf16', action='store_true', help='the step in bf16 autocast')
    p.add_argument('--short', type=number(float, 0, above=True), default=3.0, help='the shorter timed span, s')
    p.add_argument('--long', type=number(float, 0, above=True), default=6.0, help='the longer timed span, s')
    p.add_argument('--rounds', type=positive_int, default=3)
    args = p.parse_args(argv)
    known_architecture(args.model)
    budget = split.core_budget()
    counts = [n for n in split._candidates(budget) if args.batch % n == 0]  # the decision's counts
    rates = {(n, s): [] for n in counts for s in (args.short, args.long)}
    with probe_pool(budget):
        for r in range(args.rounds):
            for n in counts:
                for s in ((args.short, args.long) if r % 2 == 0 else (args.long, args.short)):
                    try:
                        rate = split.measure(args.model, args.batch, n, budget // n, seconds=s, compiled=True,
                                             padded=True, model_kwargs={}, bf16=args.bf16)
                    except RuntimeError as e:  # a probe's failure, named in one line by ``cpu.probes``
                        raise Failure(str(e)) from None
                    rates[(n, s)].append(rate)
                    print(f'round {r + 1}, {n} x {budget // n} compiled, {s:g} s: {rate:,.0f} img/s', flush=True)
    sig = cpu_signature()
    print(f'\n{args.model}, batch {args.batch}, {"bf16" if args.bf16 else "fp32"}, compiled; {sig["cpu"]} '
          f'({sig["flags"]}), torch {sig["torch"]}\n')
    print('| candidate | timed | img/s of each round | median | range |\n| :--- | ---: | :--- | ---: | ---: |')
    for (n, s), values in rates.items():
        print(f'| {n} x {budget // n} compiled | {s:g} s | {", ".join(f"{v:,.0f}" for v in values)} | '
              f'{statistics.median(values):,.0f} | {min(values):,.0f}-{max(values):,.0f} |')
    for n in counts:
        ratio = statistics.median(rates[(n, args.short)]) / statistics.median(rates[(n, args.long)])
        print(f'\n{n} x {budget // n} compiled, {args.short:g} s / {args.long:g} s (medians): {ratio:.2f}x')
    return 0


if __name__ == '__main__':
    sys.exit(main())
