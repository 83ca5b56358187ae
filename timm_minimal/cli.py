"""The command-line layer every tool of the package stands on: one parser whose misuse errors are one line, one
help formatter that shows defaults, the number types that check a value at the door, and one ``main`` skeleton
that maps what went wrong to an exit status and a single line.

Exit status: 0 done, 1 a failure the user can cause on the machine (no space left, a read-only or missing
folder, a port in use, a network that does not answer), 2 a command line or input that cannot run, 3 a training
run whose numbers became non-finite.

This module imports nothing else of the package but ``machine`` (which imports none), so that every layer
(training, tools) can use it.
"""
import argparse
import contextlib
import errno
import functools
import importlib
import logging
import math
import os
import sys
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator, NoReturn, Optional, Sequence, Union

from .machine import is_disk_full

__all__ = ['UsageError', 'Failure', 'OneLineParser', 'HelpFormatter', 'number', 'INT_LIMIT', 'env_number',
           'positive_int', 'positive_float', 'non_negative_int', 'non_negative_float', 'probability',
           'describe_os_error', 'listed', 'command', 'console', 'progress', 'timed_progress', 'MissingExtra',
           'require_extra', 'EXIT_FAILURE', 'EXIT_USAGE', 'EXIT_DIVERGED']

EXIT_FAILURE, EXIT_USAGE, EXIT_DIVERGED = 1, 2, 3


class _Console(logging.StreamHandler):
    """The tools' console: a record's message alone, flushed, on the standard output of the moment (warnings and
    errors on the standard error)."""

    def emit(self, record: logging.LogRecord) -> None:
        self.stream = sys.stderr if record.levelno >= logging.WARNING else sys.stdout
        super().emit(record)


_CONSOLE = _Console()
_CONSOLE.setFormatter(logging.Formatter('%(message)s'))


def console(level: int = logging.INFO) -> None:
    """Show the package's log (the ``timm_minimal`` logger, which the library writes to instead of printing) on the
    standard output from ``level`` on, as the tools do: INFO by default, WARNING with ``-q``, DEBUG with ``-v``.
    Called from Python, the library leaves its logger to the caller's logging configuration."""
    logger = logging.getLogger('timm_minimal')
    if _CONSOLE not in logger.handlers:
        logger.addHandler(_CONSOLE)
    logger.setLevel(level)


class UsageError(ValueError):
    """A command line or input that cannot run; the message says what is wrong and what is allowed (exit 2)."""


class MissingExtra(UsageError):
    """An optional package that a command needs is not installed; the message names the extra that installs it."""


def require_extra(modules: Sequence[str], extra: str, what: str) -> None:
    """Import ``modules`` (an extra's packages), or raise ``MissingExtra`` naming those missing and the extra."""
    missing = []
    for name in modules:
        try:
            importlib.import_module(name)
        except ImportError:
            missing.append(name)
    if missing:
        raise MissingExtra(f'{what} needs {", ".join(missing)}, which {"is" if len(missing) == 1 else "are"} not '
                           f'installed: pip install -e ".[{extra}]" in the project\'s folder (or: pip install '
                           f'{" ".join(modules)})')


class Failure(RuntimeError):
    """A run that could not finish for a reason outside the command line; the message is one line, the exit status
    ``status`` (1; the trainer's 3 for a run that diverged)."""

    def __init__(self, message: str, status: int = EXIT_FAILURE) -> None:
        super().__init__(message)
        self.status = status


class OneLineParser(argparse.ArgumentParser):
    """argparse that reports misuse in one line (no usage block, no traceback) with exit status 2, and keeps the
    earlier spellings of renamed options working without showing them (``add_renamed``)."""

    def __init__(self, *args, verbosity: bool = True, **kwargs) -> None:
        kwargs.setdefault('formatter_class', HelpFormatter)  # every tool's --help shows its defaults
        super().__init__(*args, **kwargs)
        self._renamed: list = []  # (hidden dest, dest, how it is spelled now)
        self._required: list = []  # (dest, how it is spelled): required, but an earlier spelling may give it
        if verbosity:  # the package's log on the console (``console``), from the level these give
            group = self.add_mutually_exclusive_group()
            group.add_argument('-q', '--quiet', action='store_true', help='say warnings and errors only')
            group.add_argument('-v', '--verbose', action='store_true', help='say more (the log\'s debug lines too)')

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f'{self.prog}: error: {message} (--help lists the options)\n')

    def add_required(self, *flags: str, **kwargs) -> argparse.Action:
        """A required option that ``add_renamed`` may also give (argparse's ``required`` would refuse the old
        spelling alone)."""
        action = self.add_argument(*flags, default=None, **kwargs)
        self._required.append((action.dest, flags[0]))
        return action

    def format_usage(self) -> str:
        with self._required_shown():
            return super().format_usage()

    def format_help(self) -> str:
        with self._required_shown():
            return super().format_help()

    @contextmanager
    def _required_shown(self) -> Iterator[None]:
        """The options of ``add_required`` shown as required (no brackets in the usage line) while help is formatted;
        the parse itself checks them (``parse_known_args``)."""
        actions = [a for a in self._actions if any(a.dest == dest for dest, _ in self._required)]
        for action in actions:
            action.required = True
        try:
            yield
        finally:
            for action in actions:
                action.required = False

    def add_renamed(self, old: str, new: str) -> None:
        """``old`` (an option such as ``--out``, or a word such as ``model`` for what was positional) still sets the
        option ``new``, for one release; ``--help`` shows only ``new``. CHANGELOG.md lists the renames."""
        dest = new.lstrip('-').replace('-', '_')
        hidden = f'_renamed_{old.lstrip("-").replace("-", "_")}'
        if old.startswith('-'):
            self.add_argument(old, dest=hidden, default=None, help=argparse.SUPPRESS)
        else:
            self.add_argument(hidden, nargs='?', default=None, help=argparse.SUPPRESS)
        self._renamed.append((hidden, dest, new))

    def parse_known_args(self, args=None, namespace=None):
        ns, rest = super().parse_known_args(args, namespace)
        for hidden, dest, new in self._renamed:
            value = getattr(ns, hidden, None)
            if hasattr(ns, hidden):
                delattr(ns, hidden)
            if value is None:
                continue
            default = next((a.default for a in self._actions if a.dest == dest), None)
            if getattr(ns, dest, None) not in (None, default, value):
                self.error(f'{new} is given twice, once in its earlier spelling')
            setattr(ns, dest, value)
        missing = [flag for dest, flag in self._required if getattr(ns, dest, None) is None]
        if missing:
            self.error(f'the following arguments are required: {", ".join(missing)}')
        return ns, rest


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """--help with the description as written and every option's default (unless its help already states it)."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ''
        # a help that speaks of its default already, and an option without one (None: required, or computed), show
        # none: no "(default mnist) (default: mnist)", no "(default: None)"
        states_default = 'default' in text.lower() or action.default is None or action.required
        if action.option_strings and action.default is not argparse.SUPPRESS and not states_default \
                and not isinstance(action, (argparse._HelpAction, argparse._VersionAction)):
            text += (' ' if text else '') + '(default: %(default)s)'
        return text


INT_LIMIT = 2 ** 63 - 1  # the largest integer any option takes (torch's int64): far beyond every real count


def listed(values: Sequence[object], limit: int) -> str:
    """The first ``limit`` of ``values`` for a message, joined by commas, with ', ...' where there are more."""
    return ', '.join(map(str, values[:limit])) + (', ...' if len(values) > limit else '')


def _shown(text: object) -> str:
    """A value as an error message shows it: a very long one cut, with its length."""
    s = repr(text)
    return s if len(s) <= 40 else f'{s[:16]}...{s[-6:]} ({len(s)} characters)'


def number(kind: type = int, low: Optional[float] = None, high: Optional[float] = None, above: bool = False,
           below: bool = False):
    """An argparse type for a finite ``kind`` (int or float) of at least ``low`` (above it with ``above``) and at
    most ``high`` (below it with ``below``); an integer also at most ``INT_LIMIT``. Integers are compared as
    integers (never through ``float``, which overflows past 1e308), and inf and NaN are refused by name. The same
    function checks recipes, ``args.yaml``, the environment and JSON records, so a value is refused alike wherever
    it comes from; the error names the range."""
    noun = 'an integer' if kind is int else 'a finite number'
    show = lambda v: f'{v:,}' if isinstance(v, int) else f'{v:g}'  # noqa: E731
    bounds = [f'{"above" if above else "of at least"} {show(low)}' if low is not None else '',
              f'{"below" if below else "at most"} {show(high)}' if high is not None else '']
    wanted = (f'{noun} ' + ' and '.join(b for b in bounds if b)).strip()
    limit = (high if high is not None and high < INT_LIMIT else INT_LIMIT) if kind is int else high

    def parse(text: Union[str, int, float]):
        value = _convert(kind, text)
        if isinstance(value, float) and not math.isfinite(value):
            raise argparse.ArgumentTypeError(f'must be {wanted}, got {_shown(text)} ({"NaN" if value != value else "infinite"})')
        ok = value is not None and (low is None or (value > low if above else value >= low)) \
            and (limit is None or (value < limit if below and limit == high else value <= limit))
        if not ok:
            too_big = kind is int and value is not None and high is None and value > INT_LIMIT
            raise argparse.ArgumentTypeError(f'must be {wanted}' + (f' (at most {INT_LIMIT:,})' if too_big else '')
                                             + f', got {_shown(text)}')
        return value
    parse.__name__ = kind.__name__  # argparse names the type in its own messages
    parse.wanted, parse.kind = wanted, kind
    return parse


def _convert(kind: type, text: Union[str, int, float]) -> Union[int, float, None]:
    """``text`` as ``kind``, or None where it is not one: a float for an int only where it is whole, and a string
    for an int only in decimal digits (so '1e3' and 'nan' are not integers)."""
    if isinstance(text, bool):
        return None
    try:
        if kind is int:
            if isinstance(text, float):
                return int(text) if math.isfinite(text) and text.is_integer() else None
            return int(text)
        return float(text)
    except (ValueError, OverflowError, TypeError):
        return None


def env_number(name: str, kind: type, default: Union[int, float, None], low: Optional[float] = None,
               high: Optional[float] = None) -> Union[int, float, None]:
    """An environment variable read as a number of ``kind`` within [low, high], as an option's value is; unset or
    empty: ``default``; anything else: ``UsageError`` naming the variable and what it may be."""
    text = os.environ.get(name, '').strip()
    if not text:
        return default
    try:
        return number(kind, low, high)(text)
    except argparse.ArgumentTypeError as e:
        raise UsageError(f'the environment variable {name} {e}; unset it or give it such a value.') from None


positive_int = number(int, 1)
non_negative_int = number(int, 0)
positive_float = number(float, 0, above=True)
non_negative_float = number(float, 0)
probability = number(float, 0, 1)


_OS_CAUSES = {
    errno.ENOSPC: 'no space left on the device', errno.EROFS: 'the file system is read-only',
    errno.EACCES: 'permission denied', errno.EPERM: 'permission denied', errno.ENOTDIR: 'a part of it is a file, '
    'not a folder', errno.EISDIR: 'it is a folder, not a file', errno.ENOENT: 'no such file or folder',
    errno.EEXIST: 'it exists already', errno.EADDRINUSE: 'the address is in use by another program',
    errno.ENOTEMPTY: 'the folder is not empty', errno.EDQUOT: 'the disk quota is exceeded',
}


def describe_os_error(e: BaseException, what: Union[str, Path, None] = None) -> str:
    """One line for an OS error: the path it names (or ``what``) and the cause in words."""
    if is_disk_full(e, what):
        cause = _OS_CAUSES[errno.ENOSPC]
    elif isinstance(e, OSError):
        cause = _OS_CAUSES.get(e.errno) or (e.strerror or str(e) or type(e).__name__)
    else:
        cause = f'{type(e).__name__}: {" ".join(str(e).split())[:200]}'
    path = getattr(e, 'filename', None) or what
    return f'{path}: {cause}' if path else cause


def command(prog: str) -> Callable[[Callable[..., Optional[int]]], Callable[..., int]]:
    """The ``main`` skeleton of a tool: the decorated function parses and runs; this maps what it raises to one
    line on stderr and an exit status (``UsageError`` 2, an OS error 1, ``Failure`` its own, Ctrl-C 130), and a
    function that returns nothing to 0. The package's log goes to the console, at the level ``-q``/``-v`` ask for. ``argparse``'s own exits (--help, misuse: ``SystemExit``) pass through."""
    def wrap(main: Callable[..., Optional[int]]) -> Callable[..., int]:
        @functools.wraps(main)
        def run(argv: Optional[Sequence[str]] = None, *args, **kwargs) -> int:
            words = list(sys.argv[1:] if argv is None else argv)
            console(_verbosity(words))
            words = words[:words.index('--')] if '--' in words else words
            _PROGRESS['shown'] = not {'-q', '--quiet', '--no-progress'} & set(words)
            try:
                status = main(argv, *args, **kwargs)
            except UsageError as e:
                return _say(prog, 'error', e, EXIT_USAGE)
            except Failure as e:
                return _say(prog, 'error', e, e.status)
            except KeyboardInterrupt:
                return _say(prog, 'interrupted', 'stopped by Ctrl-C', 130)
            except OSError as e:
                return _say(prog, 'error', describe_os_error(e), EXIT_FAILURE)
            return 0 if status is None else int(status)
        return run
    return wrap


_PROGRESS = {'shown': True}  # a command's -q or --no-progress turns the bars off (``command``)


def progress(iterable: Any = None, **kwargs: Any) -> Any:
    """tqdm's bar for a wait of more than a few seconds (a decode, an evaluation, a measurement): on a terminal,
    unless the command line said ``-q`` or ``--no-progress``; ``kwargs`` go to tqdm (``disable=True`` turns it off)."""
    from tqdm.auto import tqdm  # lazy: a command that never waits starts without it
    kwargs.setdefault('leave', False)
    kwargs.setdefault('dynamic_ncols', True)
    kwargs.setdefault('mininterval', 1.0)
    if not _PROGRESS['shown']:
        kwargs['disable'] = True
    return tqdm(iterable, **{'disable': None, **kwargs})


@contextlib.contextmanager
def timed_progress(seconds: float, desc: str, **kwargs: Any) -> Iterator[Any]:
    """``progress`` for a wait of about ``seconds`` that reports nothing as it goes (a measurement): the bar moves
    with the clock, stops short of its end while the wait lasts, and fills when it is over."""
    bar = progress(total=max(int(seconds), 1), desc=desc, unit='s',
                   bar_format='{desc}: {percentage:3.0f}%|{bar}| {elapsed} of about {total} s', **kwargs)
    stop = threading.Event()

    def tick() -> None:
        while not stop.wait(1.0):
            if bar.n < bar.total - 1:
                bar.update(1)
    thread = threading.Thread(target=tick, daemon=True)
    if not bar.disable:
        thread.start()
    try:
        yield bar
    finally:
        stop.set()
        if thread.is_alive():
            thread.join()
        bar.update(bar.total - bar.n)
        bar.close()


def _verbosity(argv: Sequence[str]) -> int:
    """The console's level that a command line's ``-q`` or ``-v`` (before any ``--``) asks for."""
    words = argv[:list(argv).index('--')] if '--' in argv else argv
    if '-q' in words or '--quiet' in words:
        return logging.WARNING
    return logging.DEBUG if '-v' in words or '--verbose' in words else logging.INFO


def _say(prog: str, kind: str, message: object, status: int) -> int:
    print(f'{prog}: {kind}: {message}', file=sys.stderr, flush=True)
    return status
