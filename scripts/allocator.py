"""The bare training step with glibc's allocator as it starts and with what a step frees kept (``keep_freed_memory``).

    python scripts/allocator.py --model vit_minimal_sym_6x4.cifar10 --bf16 --compiled --processes 5

Each side runs in fresh processes, one after the other in turn (the order reversed every other round): where glibc
maps or gives back a step's memory depends on what the process happened to free first, so the step's speed differs
from one process to the next and one process says little. Each process measures the decision's bare step
(``cpu.split.bare_step_rate``, all the cores as threads, the heads padded); the table gives every process's img/s,
each side's median and range, and the median of the kept side over the other's.
"""
import argparse
import json
import statistics
import subprocess
import sys

from timm_minimal.cli import Failure, OneLineParser, command, number, positive_int
from timm_minimal.machine import cpu_signature, usable_cores

CHILD = ('import json, sys; from timm_minimal.machine import keep_freed_memory; '
         'from timm_minimal.training.cpu.split import bare_step_rate; a = json.loads(sys.argv[1]); '
         'kept = keep_freed_memory() if a.pop("kept") else False; '
         'print(json.dumps([kept, bare_step_rate(**a)]))')


def one_process(args: argparse.Namespace, kept: bool) -> float:
    """One fresh process's img/s of the bare step, its allocator kept or as it starts."""
    call = dict(model=args.model, batch=args.batch, threads=usable_cores(), seconds=args.seconds,
                bf16=args.bf16, compiled=args.compiled, kept=kept)
    out = subprocess.run([sys.executable, '-c', CHILD, json.dumps(call)], capture_output=True, text=True)
    if out.returncode:
        why = (out.stderr.strip().splitlines() or [f'exit status {out.returncode}'])[-1]
        raise Failure(f'a measuring process failed: {why}')
    took, rate = json.loads(out.stdout.strip().splitlines()[-1])
    if took != kept:
        raise Failure(f'the allocator was {"not " if kept else ""}kept in a process that asked otherwise '
                      '(this C library is not glibc?)')
    return rate


@command('allocator.py')
def main(argv=None) -> int:
    p = OneLineParser(prog='allocator.py', description=__doc__.split('\n\n')[0])
    p.add_argument('--model', default='vit_minimal_sym_6x4.cifar10')
    p.add_argument('--batch', type=positive_int, default=256)
    p.add_argument('--bf16', action='store_true', help='the step in bf16 autocast')
    p.add_argument('--compiled', action='store_true', help='the step through torch.compile')
    p.add_argument('--seconds', type=number(float, 0, above=True), default=8.0, help="each process's timed seconds")
    p.add_argument('--processes', type=positive_int, default=5, help='processes of each side')
    args = p.parse_args(argv)
    rates = {'as it starts': [], 'kept': []}
    for r in range(args.processes):
        for kept in ((False, True) if r % 2 == 0 else (True, False)):
            rate = one_process(args, kept)
            rates['kept' if kept else 'as it starts'].append(rate)
            print(f'process {r + 1}, allocator {"kept" if kept else "as it starts"}: {rate:,.0f} img/s', flush=True)
    sig = cpu_signature()
    print(f'\n{args.model}, batch {args.batch}, {usable_cores()} threads, {"bf16" if args.bf16 else "fp32"}, '
          f'{"compiled" if args.compiled else "eager"}; {sig["cpu"]} ({sig["flags"]}), torch {sig["torch"]}\n')
    print('| allocator | img/s of each process | median | range |\n| :--- | :--- | ---: | ---: |')
    for side, values in rates.items():
        print(f'| {side} | {", ".join(f"{v:,.0f}" for v in values)} | {statistics.median(values):,.0f} | '
              f'{min(values):,.0f}-{max(values):,.0f} |')
    ratio = statistics.median(rates['kept']) / statistics.median(rates['as it starts'])
    print(f'\nkept / as it starts (medians): {ratio:.2f}x')
    return 0


if __name__ == '__main__':
    sys.exit(main())
