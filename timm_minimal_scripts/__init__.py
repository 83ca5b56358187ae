"""The console scripts of timm-minimal, which answer ``--help`` before they import torch.

Importing ``timm_minimal`` imports torch and timm and registers the architectures (about 4 s on a quiet 2-core
CPU: ``scripts/help_time.py``), and a console script's module is imported only after its package. So the
scripts start here, outside the package: a command line that asks for help imports the package without its
models (``parsing`` below), builds the tool's parser and lets it print the help; any other command line imports
the tool and runs its ``main`` as ``python -m`` does. Each tool's parser module imports neither torch nor timm
(a test checks them all).
"""
import importlib
import sys
from typing import Callable, Dict, NamedTuple, Optional, Sequence


class Script(NamedTuple):
    """A console script: its tool's ``main``, the parser its ``--help`` prints (one module without torch), and
    ``first``, the name of a function of this module to run before anything is imported."""
    main: str
    parser: str
    builder: str = 'build_parser'
    first: str = ''


SCRIPTS: Dict[str, Script] = {
    'timm-minimal-demo': Script('timm_minimal.tools.demo', 'timm_minimal.tools.demo'),
    'timm-minimal-train': Script('timm_minimal.training.train', 'timm_minimal.training.cli'),
    'timm-minimal-reproduce': Script('timm_minimal.tools.paper.reproduce', 'timm_minimal.tools.paper.reproduce'),
    'timm-minimal-publish': Script('timm_minimal.tools.hub.publish', 'timm_minimal.tools.hub.cli'),
    'timm-minimal-benchmark': Script('timm_minimal.tools.benchmark.cli', 'timm_minimal.tools.benchmark.cli'),
    'timm-minimal-evaluate': Script('timm_minimal.tools.evaluate', 'timm_minimal.tools.cli'),
    'timm-minimal-export': Script('timm_minimal.tools.deploy.export', 'timm_minimal.tools.deploy.cli'),
    'timm-minimal-attention': Script('timm_minimal.tools.inside.attention', 'timm_minimal.tools.inside.cli'),
    'timm-minimal-app': Script('timm_minimal.tools.inside.app', 'timm_minimal.tools.inside.cli', 'app_parser'),
    'timm-minimal-timm-script': Script('timm_minimal.timm_script', 'timm_minimal.timm_script',
                                       first='installed_timm_first'),
}

# True while a script imports the package to print its help: ``timm_minimal`` then leaves its models unimported
parsing = False


def _options(argv: Sequence[str]) -> Sequence[str]:
    """The words before any ``--`` (after it, the words are another program's)."""
    return argv[:list(argv).index('--')] if '--' in argv else argv


def asks_for_help(argv: Sequence[str]) -> bool:
    """Whether argparse would print the help: -h or --help before any ``--``."""
    return any(arg in ('-h', '--help') for arg in _options(argv))


def print_help(script: Script, argv: Sequence[str]) -> None:
    """Builds the script's parser with the package's models unimported and parses: argparse prints the help
    and exits. It returns where ``-h`` was the value of an option, or where the parser module's ``hands_over``
    says that another module parses the command line (``timm-minimal-benchmark training --help``): the command
    then runs, and that module prints its help."""
    global parsing
    parsing = True
    try:
        module = importlib.import_module(script.parser)
    finally:
        parsing = False
    handed_over = getattr(module, 'hands_over', lambda words: False)(argv)
    if not handed_over:  # else the module the command line is handed to prints its own help
        # a parser module's help_parser(argv) shows the defaults this command line would run with (the trainer's:
        # the recipe of --dataset for this machine's device)
        help_parser = getattr(module, 'help_parser', None)
        (help_parser(argv) if help_parser else getattr(module, script.builder)()).parse_args(argv)
    importlib.import_module('timm_minimal').load_models()  # the command runs after all, with what it needs


def run(name: str, argv: Sequence[str]) -> int:
    script = SCRIPTS[name]
    if asks_for_help(argv):
        print_help(script, argv)
    return importlib.import_module(script.main).main(list(argv))


def installed_timm():
    """The folder of the installed ``timm`` package (a ``pathlib.Path``), found without importing it."""
    from importlib import metadata
    from pathlib import Path
    return Path(metadata.distribution('timm').locate_file('timm')).resolve()


def installed_timm_first() -> None:
    """Take off ``sys.path`` the folders that hold a ``timm`` package other than the installed one (a
    pytorch-image-models checkout's, on ``PYTHONPATH`` or as the working folder), before anything imports timm."""
    from pathlib import Path
    installed = installed_timm()
    sys.path[:] = [entry for entry in sys.path if not (Path(entry or '.') / 'timm' / '__init__.py').is_file()
                   or (Path(entry or '.') / 'timm').resolve() == installed]


def _entry(name: str) -> Callable[..., int]:
    def main(argv: Optional[Sequence[str]] = None) -> int:
        if SCRIPTS[name].first:
            globals()[SCRIPTS[name].first]()
        return run(name, sys.argv[1:] if argv is None else list(argv))
    main.__qualname__ = main.__name__ = name.replace('timm-minimal-', '')
    return main


# the functions pyproject.toml's [project.scripts] names: one for each of SCRIPTS, made when asked for (a tool is its
# module and one line of SCRIPTS, and its line in pyproject.toml)
_ENTRIES = {name.replace('timm-minimal-', '').replace('-', '_'): name for name in SCRIPTS}


def __getattr__(attr: str) -> Callable[..., int]:
    if attr in _ENTRIES:
        return _entry(_ENTRIES[attr])
    raise AttributeError(f'module {__name__!r} has no attribute {attr!r}')
