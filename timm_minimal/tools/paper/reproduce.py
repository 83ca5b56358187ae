"""Train the grid of the paper's Tables 1 and 2 and put our numbers next to the paper's.

    timm-minimal-reproduce --tables 2 --epochs 5 --data-dir ../shared/data --runs-dir runs/reproduce_mnist
    timm-minimal-reproduce --tables 2 --datasets mnist --epochs 5 --jobs 4 --runs-dir runs/reproduce_mnist
    timm-minimal-reproduce --tables 1 --datasets cifar10 --epochs 100 --launcher "accelerate launch --num_processes 4 -m"
    timm-minimal-reproduce --tables 1 2 --report-only --runs-dir runs/reproduce_mnist   # rebuild the table only

Each (model, dataset) of the selected rows is trained once with ``timm_minimal.training.train`` into
``<runs-dir>/<model>.<dataset>/`` (a run that finished is reused, an interrupted one resumed); the
paper's numbers are data in this module (``TABLE1``, ``TABLE2``, from Bermeitinger et al., KDIR 2024).
Every run is a subprocess whose output is appended to ``<runs-dir>/logs/<model>.<dataset>.log``.
By default the runs go one after another with their output also on the console; ``--jobs N`` runs
up to N of them at the same time on the same device (the models are small enough to leave a GPU
mostly idle) and prints one line when each starts and one when it ends. ``run_commands`` is that
pool, usable by any grid script.
Outputs: a markdown report (``--output``), a PNG (``--plot``) and a JSON list of rows (``--json``)
with our and the paper's parameters, epochs, train/validation loss and accuracy. Like the paper, the
numbers are those of the last epoch and the validation set is the test split.
"""
import argparse
import json
import shlex
import sys
from pathlib import Path
from typing import List, Optional, Sequence, Tuple

from ...models.paper import PAPER_DATASETS, PAPER_EPOCHS, TABLE1, TABLE2, PaperRow
from ...cli import HelpFormatter, OneLineParser, UsageError, command, number, positive_int
from ...training.options import SEED
from .grid import collect, select_rows, train_command, train_rows
from .pool import Command, CommandResult, run_commands, say
from .report import precision_text, setup_text, write_markdown, write_plot
from .results_summary import write_summary

__all__ = ['PaperRow', 'TABLE1', 'TABLE2', 'Command', 'CommandResult', 'run_commands', 'select_rows',
           'train_command', 'train_rows', 'collect', 'write_markdown', 'write_plot', 'precision_text', 'main']


def build_parser() -> argparse.ArgumentParser:
    p = OneLineParser(
        prog='timm-minimal-reproduce', description=__doc__.split('\n\n')[0],
        formatter_class=HelpFormatter,
        epilog='Options after -- go to timm_minimal.training.train unchanged (e.g. -- --lr 5e-4).\n'
               'Several runs at once on one device, each in its own process with its output in <runs-dir>/logs/:\n'
               '  timm-minimal-reproduce --tables 2 --datasets mnist --jobs 4 --epochs 5 --data-dir data')
    p.add_argument('--tables', type=number(int, 1, 2), nargs='+', default=[1, 2], help='the paper\'s tables: 1 (MLP against none), 2 (the attention variants on MNIST)')
    p.add_argument('--datasets', nargs='+', choices=PAPER_DATASETS, default=list(PAPER_DATASETS), help='the datasets of the rows to train')
    p.add_argument('--rows', nargs='+', help='only these row ids (e.g. t2-mnist-sym-6x4) or model names')
    p.add_argument('--epochs', type=positive_int, default=PAPER_EPOCHS, help="epochs per model (the paper's)")
    p.add_argument('--runs-dir', default='runs/reproduce', help='one run folder per model: <runs-dir>/<model>.<dataset>')
    p.add_argument('--data-dir', default=None, help='dataset root passed to the trainer')
    p.add_argument('--recipe', default=None, help="trainer recipe (default: the dataset's)")
    p.add_argument('--seed', type=SEED, default=0, help='0 to 2**63 - 1')
    p.add_argument('--launcher', default=None,
                   help='command that runs a python module, e.g. "accelerate launch --num_processes 4 -m" '
                        '(default: this python -m)')
    p.add_argument('--jobs', type=positive_int, default=1, metavar='N',
                   help='train up to N runs at the same time, each in its own process on the same device '
                        '(default 1: one after another, output on the console and in <runs-dir>/logs/<model>.log). '
                        'With N > 1 the output goes to the log only, the console gets a line when each run starts '
                        'and ends, and the CPU cores are split among the runs unless OMP_NUM_THREADS is set. '
                        'A multi-process --launcher needs a rendezvous port of its own per concurrent run.')
    p.add_argument('--output', default=None, help='markdown report (default <runs-dir>/RESULTS.md; the committed one: '
                   '--output RESULTS.md)')
    p.add_argument('--json', default=None, help='machine-readable rows (default <runs-dir>/reproduce_paper.json)')
    p.add_renamed('--results', '--output')
    p.add_argument('--plot', default=None,
                   help='PNG: accuracy vs parameters, accuracy per epoch (default <runs-dir>/reproduce_paper.png; '
                        'with --combine: none unless given)')
    p.add_argument('--report-only', action='store_true', help='train nothing; rebuild the report from the run folders')
    p.add_argument('--dry-run', action='store_true', help='print the training commands only')
    p.add_argument('--combine', nargs='+', metavar='JSON',
                   help='train nothing; write --output over the --json files of earlier runs, each dataset and depth '
                        'at its own budget (tools/paper/results_summary.py)')
    p.add_argument('--beyond', nargs='+', default=(), metavar='JSON',
                   help="with --combine: also a section on the runs beyond the paper, from these --json files of "
                        "python -m timm_minimal.tools.paper.beyond")
    p.add_argument('--note', default='', help='a sentence for the report\'s setup (e.g. how the runs shared a device)')
    return p


def split_argv(argv: Sequence[str]) -> Tuple[List[str], List[str]]:
    """Our options and the trainer's (those after ``--``)."""
    argv = list(argv)
    if '--' in argv:
        i = argv.index('--')
        return argv[:i], argv[i + 1:]
    return argv, []


def _combine(args: argparse.Namespace, argv: Sequence[str], parser: argparse.ArgumentParser) -> int:
    missing = [p for p in args.combine if not Path(p).is_file()]
    if missing:
        parser.error(f"--combine: no such file: {', '.join(missing)}")
    missing = [p for p in args.beyond if not Path(p).is_file()]
    if missing:
        parser.error(f'--beyond: no such file: {", ".join(missing)}')
    try:
        write_summary([Path(p) for p in args.combine], Path(args.output), 'timm-minimal-reproduce ' + shlex.join(argv),
                      Path(args.plot) if args.plot else None, [Path(p) for p in args.beyond])
    except ValueError as e:
        parser.error(str(e))
    say(f'[reproduce] wrote {args.output}' + (f', {args.plot}' if args.plot else ''))
    return 0


@command('timm-minimal-reproduce')
def main(argv: Optional[Sequence[str]] = None) -> int:
    """The command line: 0 when every run it launched finished, 1 when one failed (named, with its log), 2 for
    misuse or a run folder it may not use."""
    argv, extra = split_argv(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    args = parser.parse_args(argv)
    # the reports go beside the runs unless named: a committed report is regenerated only by naming it
    args.output = args.output or str(Path(args.runs_dir) / 'RESULTS.md')
    args.json = args.json or str(Path(args.runs_dir) / 'reproduce_paper.json')
    if args.beyond and not args.combine:
        parser.error('--beyond adds a section to the report of --combine: give --combine too')
    if args.combine:
        return _combine(args, argv, parser)
    args.plot = str(Path(args.runs_dir) / 'reproduce_paper.png') if args.plot is None else args.plot
    if Path(args.runs_dir).exists() and not Path(args.runs_dir).is_dir():
        parser.error(f'--runs-dir {args.runs_dir} is a file; it names the folder that holds one run folder per model')
    try:
        rows = select_rows(args.tables, args.datasets, args.rows)
    except ValueError as e:
        parser.error(str(e))
    if not rows:
        parser.error('no rows selected (check --tables/--datasets/--rows)')
    failed = []
    if not args.report_only:
        failed = [r for r in train_rows(rows, args, extra) if r.returncode != 0]
        if args.dry_run:
            return 0
    try:
        results = collect(rows, Path(args.runs_dir))
    except ValueError as e:
        raise UsageError(str(e)) from None
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(results, indent=2) + '\n')
    plot = Path(args.plot) if args.plot else None
    if plot is not None:
        write_plot(results, plot)
    cmd_argv = [a for a in argv if a not in ('--report-only', '--dry-run')]
    command_line = 'timm-minimal-reproduce ' + shlex.join(cmd_argv) + (' -- ' + shlex.join(extra) if extra else '')
    setup = dict(command=command_line, text=setup_text(results, args.seed) + (' ' + args.note if args.note else ''),
                 json=args.json)
    write_markdown(results, Path(args.output), setup, plot)
    say(f'[reproduce] wrote {args.output}, {args.json}' + (f', {plot}' if plot else ''))
    if failed:
        say('[reproduce] error: ' + ', '.join(f'{r.name} failed (exit status {r.returncode}, log {r.log})'
                                              for r in failed))
        return 1
    return 0


if __name__ == '__main__':
    sys.exit(main())
