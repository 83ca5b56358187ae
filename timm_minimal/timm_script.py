"""Run one of timm's scripts from a pytorch-image-models checkout (``train.py``, ``validate.py``, ``inference.py``,
``benchmark.py``) with this package's models registered and the installed timm imported:

    timm-minimal-timm-script path/to/pytorch-image-models/validate.py --model vit_minimal_sym_6x4.mnist \\
        --pretrained --input-size 1 28 28 --dataset torch/mnist --split test --data-dir data --device cpu

Why: the scripts build models by name, so ``timm_minimal`` must be imported before they run (``validate.py`` has no
``--device-modules`` to do it); and ``python validate.py`` puts the script's folder first on ``sys.path``, where the
checkout's own ``timm/`` package is imported instead of the installed timm, whatever its version. This command
imports the installed timm and the package, keeps the checkout's folders off the path, and runs the script as
``__main__`` with the arguments after it (its own ``--help`` included).
"""
import argparse
import runpy
import sys
from pathlib import Path
from typing import Optional, Sequence

from timm_minimal_scripts import installed_timm, installed_timm_first

from .cli import OneLineParser, UsageError, command

__all__ = ['main', 'build_parser', 'hands_over']

PROG = 'timm-minimal-timm-script'


def build_parser() -> OneLineParser:
    p = OneLineParser(prog=PROG, description=__doc__.split('\n\n')[0], formatter_class=argparse.RawDescriptionHelpFormatter,
                      epilog=__doc__.split('\n\n', 1)[1], verbosity=False)  # the script's own -q, -v
    p.add_argument('script', help="timm's script, e.g. path/to/pytorch-image-models/validate.py")
    p.add_argument('args', nargs=argparse.REMAINDER, help='its arguments (its --help prints its own help)')
    return p


def hands_over(words: Sequence[str]) -> bool:
    """A ``--help`` after the script's name is the script's (``timm_minimal_scripts`` then runs the command)."""
    return bool(words) and not words[0].startswith('-')


@command(PROG)
def main(argv: Optional[Sequence[str]] = None) -> int:
    args = build_parser().parse_args(list(sys.argv[1:] if argv is None else argv))
    script = Path(args.script)
    if script.suffix != '.py' or not script.is_file():
        raise UsageError(f'{script}: no such Python script; name one of timm\'s scripts, e.g. '
                         f'path/to/pytorch-image-models/validate.py, then its arguments.')
    installed_timm_first()  # the console script did so before the package imported timm; python -m did not
    import timm  # lazy: after the checkout's timm is first on the path
    import timm_minimal  # noqa: F401  # lazy: registers the architectures, with the checkout's timm first
    if Path(timm.__file__).resolve().parent != installed_timm():
        raise UsageError(f'timm was imported from {Path(timm.__file__).parent}, not the installed timm: run the '
                         f'console script {PROG}, which keeps that folder off the path before anything imports timm.')
    sys.argv = [str(script), *args.args]
    runpy.run_path(str(script), run_name='__main__')
    return 0


if __name__ == '__main__':
    sys.exit(main())
