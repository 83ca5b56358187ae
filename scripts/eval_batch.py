"""How fast ``timm-minimal-evaluate`` goes through a whole test split at each batch size and thread count.

    python scripts/eval_batch.py --data-dir ../shared/data [--models vit_minimal_std_mlp_6x4.cifar10 ...]
        [--batch-sizes 1000 256 64] [--threads 1 2] [--repeats 3]

Each pass is ``evaluate_model`` over the model's whole test split with the prepared images cached (what a second
``timm-minimal-evaluate`` of the same dataset does). The passes alternate over every batch size and thread count
within a repeat, so that a change in the machine's load reaches all of them; the table gives the median seconds,
images per second, the ratio of speed against the first batch size at the same thread count, and the top-1
accuracy, which must not depend on the batch. Prints the CPU, its flags and the versions above the table.
"""
import os
import statistics
import sys
import tempfile
import time
from unittest import mock

from timm_minimal.cli import OneLineParser, UsageError, command, positive_int


def _pass(model, dataset: str, data_dir: str, batch_size: int, threads: int):
    import torch
    from timm_minimal.tools.evaluate import evaluate_model
    torch.set_num_threads(threads)
    start = time.perf_counter()
    res = evaluate_model(model, dataset, data_dir, batch_size=batch_size)
    return time.perf_counter() - start, res


def _measure(name: str, args) -> None:
    import timm
    from timm_minimal.tools.common import describe_load_error
    from timm_minimal.tools.evaluate import tag_dataset
    try:
        model = timm.create_model(name, pretrained=True)
    except (RuntimeError, ValueError, OSError) as e:
        raise UsageError(describe_load_error(name, e)) from None
    dataset = tag_dataset(model)
    if dataset is None:
        raise UsageError(f'{name}: its tag names no dataset to evaluate on; name a checkpoint of a dataset tag, '
                         f'e.g. vit_minimal_sym_6x4.cifar10')
    _pass(model, dataset, args.data_dir, args.batch_sizes[0], 1)  # fills the cache of prepared images
    configs = [(t, b) for t in args.threads for b in args.batch_sizes]
    times = {c: [] for c in configs}
    accs = {c: set() for c in configs}
    for _ in range(args.repeats):
        for t, b in configs:
            seconds, res = _pass(model, dataset, args.data_dir, b, t)
            times[(t, b)].append(seconds)
            accs[(t, b)].add(res['acc'])
    samples = res['samples']
    print(f'\n{name} ({samples:,} test images)\n')
    print(f'| threads | batch | median s | img/s | speed against batch {args.batch_sizes[0]} | top-1 % |')
    print('|---:|---:|---:|---:|---:|---:|')
    for t, b in configs:
        median = statistics.median(times[(t, b)])
        ratio = statistics.median(times[(t, args.batch_sizes[0])]) / median
        print(f'| {t} | {b} | {median:.2f} | {samples / median:,.0f} | {ratio:.2f}x | '
              f'{" / ".join(f"{a:.2f}" for a in sorted(accs[(t, b)]))} |')


@command('eval_batch.py')
def main(argv=None) -> int:
    p = OneLineParser(prog='eval_batch.py', description=__doc__.split('\n\n')[0])
    p.add_argument('--data-dir', required=True, help='where the datasets are')
    p.add_argument('--models', nargs='+', default=['vit_minimal_std_mlp_6x4.cifar10', 'vit_minimal_sym_6x4.cifar10'],
                   help='shipped checkpoints (name.tag)')
    p.add_argument('--batch-sizes', nargs='+', type=positive_int, default=[1000, 256, 64],
                   help='the first is the one the others are measured against')
    p.add_argument('--threads', nargs='+', type=positive_int, default=[1, 2])
    p.add_argument('--repeats', type=positive_int, default=3)
    args = p.parse_args(argv)
    bad = [n for n in args.models if '.' not in n]
    if bad:
        raise UsageError(f'{", ".join(bad)}: name a shipped checkpoint with its tag, e.g. vit_minimal_sym_6x4.cifar10')
    import timm
    import torch
    import timm_minimal  # noqa: F401  (registers the models)
    from timm_minimal.tools.common import cpu_environment
    cpu = cpu_environment()
    print(f'{cpu["device"]} (CPU flags: {cpu["flags"]}); python {sys.version.split()[0]}, torch {torch.__version__}, '
          f'timm {timm.__version__}; fp32; median of {args.repeats} alternating passes')
    with tempfile.TemporaryDirectory() as cache, mock.patch.dict(os.environ, TIMM_MINIMAL_CACHE=cache):
        for name in args.models:
            _measure(name, args)
    return 0


if __name__ == '__main__':
    sys.exit(main())
