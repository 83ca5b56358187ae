"""The paper's point in a few minutes on a 2-core CPU, with nothing to download.

1. The zoo: every shipped MNIST checkpoint on the 1,000 test digits that ship with the package, parameters
   against accuracy (the minimal variants keep most of the baseline's accuracy with a fraction of its weights).
2. Training: one minimal model from scratch on the bundled training digits, through timm-minimal-train
   (--dataset mnist-sample and its recipe), with a progress bar.
3. Attention: that model's attention on one test digit, written as a PNG in its run folder.

It first measures this machine (the training step with all cores and with one, taking the faster, so a busy
machine trains on what is free) and prints the time it expects.
"""
import argparse
import contextlib
import io
import math
import time
from datetime import datetime
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

from ..cli import Failure, HelpFormatter, OneLineParser, command, number
from ..models.datasets import SAMPLES
from ..training.options import Options

SAMPLE = 'mnist-sample'
DEMO_MODEL = 'vit_minimal_sym_6x4'
BASELINE = 'vit_minimal_std_mlp_6x1'
PROBE_SECONDS = 0.6  # per thread count: the probe is part of the minute


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog='timm-minimal-demo', description=__doc__, formatter_class=HelpFormatter)
    parser.add_argument('--model', default=DEMO_MODEL, metavar='ARCH',
                        help='the architecture trained from scratch (a vit_minimal_* name without a tag)')
    parser.add_argument('--output', default=None, metavar='DIR',
                        help='the run folder of the training (default: runs/demo-<model>-<time>)')
    parser.add_argument('--epochs', type=number(int, 1), default=None, metavar='N',
                        help="epochs (default: the mnist_sample recipe's)")
    return parser


def choose_threads(model: str, batch: int) -> Dict[str, float]:
    """The faster of all cores and one core for ``model``'s training step here: its threads and images/s."""
    import torch  # lazy: --help answers without it
    from ..training.cpu.split import bare_step_rate, core_budget  # lazy: --help answers without it
    budget = core_budget()
    rates = {threads: bare_step_rate(f'{model}.mnist', batch, threads, PROBE_SECONDS, warmup=2)
             for threads in sorted({1, budget})}
    threads = max(rates, key=rates.get)
    torch.set_num_threads(threads)
    return dict(threads=threads, rate=rates[threads])


def zoo_rows() -> List[Dict[str, Any]]:
    """Every shipped MNIST checkpoint on the bundled test digits, through the package's one evaluation."""
    import timm  # lazy: --help answers without it
    from timm.data import resolve_data_config  # lazy: --help answers without it
    from .evaluate import evaluate_forwards  # lazy: --help answers without it
    names = timm.list_pretrained('vit_minimal*.mnist')
    models = {name: timm.create_model(name, pretrained=True).eval() for name in names}
    first = models[names[0]]
    results = evaluate_forwards(models, resolve_data_config({}, model=first), first.num_classes, SAMPLE)
    base = sum(p.numel() for p in models[f'{BASELINE}.mnist'].parameters())
    rows = [dict(name=name, params=sum(p.numel() for p in m.parameters()), acc=results[name]['acc'],
                 samples=results[name]['samples']) for name, m in models.items()]
    for row in rows:
        row['share'] = row['params'] / base
    return sorted(rows, key=lambda r: (int(r['name'].split('_')[-1].split('x')[0]), r['params']))


def wilson_interval(acc: float, n: int, z: float = 1.96) -> Tuple[float, float]:
    """The 95% (Wilson) interval in % of an accuracy ``acc`` (%) measured on ``n`` images: how far a count on
    these images may lie from the model's accuracy on the digits at large."""
    p, z2 = acc / 100, z * z
    centre = (p + z2 / (2 * n)) / (1 + z2 / n)
    half = z * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n)) / (1 + z2 / n)
    return 100 * (centre - half), 100 * (centre + half)


def print_zoo(rows: Sequence[Dict[str, Any]]) -> None:
    """The table, each accuracy with its 95% interval, and what it says of the paper's claim: the parameters a
    model without MLP saves against the accuracy it loses, told apart from the noise of 1,000 digits."""
    n = rows[0]['samples']
    print(f'| checkpoint | parameters | of {BASELINE} | accuracy on the {n:,} bundled test digits (95% interval) |')
    print('|---|---:|---:|---:|')
    for r in rows:
        lo, hi = wilson_interval(r['acc'], r['samples'])
        print(f"| {r['name']} | {r['params']:,} | {100 * r['share']:.0f}% | {r['acc']:.1f}% ({lo:.1f}-{hi:.1f}) |")
    base = next(r for r in rows if r['name'] == f'{BASELINE}.mnist')
    base_lo, base_hi = wilson_interval(base['acc'], base['samples'])
    minimal = [r for r in rows if '_mlp_' not in r['name']]
    within = [r for r in minimal if wilson_interval(r['acc'], r['samples'])[1] >= base_lo]
    print(f"\nThe paper's point, on these digits: {len(within)} of the {len(minimal)} models without an MLP "
          f"({min(100 * r['share'] for r in minimal):.0f}-{max(100 * r['share'] for r in minimal):.0f}% of the "
          f"baseline's parameters) have intervals that reach the baseline's ({base_lo:.1f}-{base_hi:.1f}%): "
          f"{n:,} digits cannot tell them from it. Their cards give the full 10,000-digit test split.")


class _Progress:
    """One progress bar over the run's updates, with the latest test accuracy (the trainer's TrainHooks)."""

    def __init__(self, total: int, desc: str):
        from tqdm.auto import tqdm  # lazy: --help answers without it
        self.bar = tqdm(total=total, desc=desc, unit='step', dynamic_ncols=True)

    def after_update(self, update: int) -> None:
        self.bar.update(update - self.bar.n)

    def after_epoch(self, row: Dict[str, Any]) -> None:
        self.bar.set_postfix_str(f"epoch {row['epoch']}, test acc {row['test_acc']:.1f}%")

    def writing_checkpoint(self, count: int) -> None:
        pass


def train_model(model: str, output: str, epochs: Optional[int]) -> Dict[str, Any]:
    """Trains ``model`` on the bundled digits with timm-minimal-train's own code, at the torch threads set by
    ``choose_threads``; its log stays in a buffer that is printed only if the run fails."""
    from ..training.cli import parse_args  # lazy: --help answers without it
    from ..training.train import count_batches, train  # lazy: --help answers without it
    argv = ['--model', model, '--dataset', SAMPLE, '--output', output, '--no-progress', '--log-interval', '1000000',
            '--cpu-processes', '1'] + (['--epochs', str(epochs)] if epochs else [])
    args, provenance = parse_args(argv)
    log = io.StringIO()
    options = Options.from_values(vars(args))
    updates = count_batches(options.run, options.optimisation.grad_accum_steps, _sample_data())[1]
    progress = _Progress(options.run.epochs * updates, f'training {model}')
    try:
        with contextlib.redirect_stdout(log):
            return train(args, provenance, argv, progress)
    except BaseException:
        print(log.getvalue())
        raise
    finally:
        progress.bar.close()


def _sample_data():
    from ..training.data.loading import load_dataset  # lazy: --help answers without it
    return load_dataset(SAMPLE)


def expected_seconds(rate: float, epochs: int, zoo_models: int) -> Dict[str, float]:
    """The parts' times from the measured training step: the trainer adds augmentation, an evaluation per epoch
    and its start; the zoo evaluates each checkpoint once."""
    info = SAMPLES[SAMPLE]
    images = epochs * info.train_samples
    evaluation = info.test_samples / (3 * rate)  # a forward pass costs about a third of a training step
    return dict(zoo=zoo_models * (0.15 + evaluation), train=6 + 1.25 * images / rate + epochs * evaluation,
                picture=2.0)


def attention_picture(run_dir: Path) -> Path:
    """The trained model's attention on the first bundled test digit, as ``attention.png`` in the run folder."""
    from .inside.attention import create_attention_model, render_attention  # lazy: --help answers without it
    model = create_attention_model(f'local-dir:{run_dir / "checkpoints" / "last"}', pretrained=True)
    image, _ = _sample_data().eval[0]
    out = run_dir / 'attention.png'
    render_attention(image, model, out=out)
    return out


@command('timm-minimal-demo')
def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    start = time.perf_counter()
    import timm  # lazy: --help answers without it
    from ..models.vit_minimal import ARCHITECTURES  # lazy: --help answers without it
    from ..training.cli import load_recipe  # lazy: --help answers without it
    if args.model not in ARCHITECTURES:
        parser.error(f"--model: unknown architecture '{args.model}'; choose one of {', '.join(ARCHITECTURES)}")
    recipe = load_recipe(SAMPLES[SAMPLE].recipe)
    epochs = args.epochs or recipe['epochs']
    output = args.output or str(Path('runs') / f"demo-{args.model}-{datetime.now().strftime('%Y%m%d-%H%M%S')}")
    speed = choose_threads(args.model, recipe['batch_size'])
    parts = expected_seconds(speed['rate'], epochs, len(timm.list_pretrained('vit_minimal*.mnist')))
    print(f"timm-minimal-demo: about {sum(parts.values()) + time.perf_counter() - start:.0f} s on this machine "
          f"({int(speed['threads'])} thread(s), {speed['rate']:,.0f} training images/s measured): the zoo "
          f"~{parts['zoo']:.0f} s, training ~{parts['train']:.0f} s, the picture ~{parts['picture']:.0f} s.\n")

    print('1. The shipped MNIST checkpoints on the test digits that ship with the package:\n')
    print_zoo(zoo_rows())
    print(f"\n2. {args.model} from scratch on the {SAMPLES[SAMPLE].train_samples:,} bundled training digits "
          f"(timm-minimal-train --dataset {SAMPLE}, {epochs} epochs):")
    summary = train_model(args.model, output, args.epochs)
    if summary.get('status') != 'finished':
        raise Failure(f"the training stopped ({summary.get('status')}): {summary.get('message', '')}")
    final = summary['final']
    print(f"   test accuracy {final['test_acc']:.1f}% on the {SAMPLES[SAMPLE].test_samples:,} bundled test digits "
          f"after {final['epoch']} epochs; run folder {output}")
    picture = attention_picture(Path(output))
    print(f'\n3. Its attention on a test digit: {picture}')
    print(f'\nDone in {time.perf_counter() - start:.0f} s.')
    return 0


if __name__ == '__main__':
    raise SystemExit(main())
