"""A pool of commands, N at a time: each a subprocess with its output appended to its log, one console line
when it starts and one when it ends (or, one at a time, its output on the console as well). Usable by any grid."""
import shlex
import signal
import subprocess
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, TextIO

__all__ = ['Command', 'CommandResult', 'run_commands', 'say']


@dataclass(frozen=True)
class Command:
    """One command for ``run_commands``: a name for the console, its argv, its log file and environment
    (None: this process's)."""
    name: str
    argv: List[str]
    log: Path
    env: Optional[Dict[str, str]] = None


@dataclass(frozen=True)
class CommandResult:
    """How a command of ``run_commands`` ended: its exit status (negative: killed by that signal; 127: it
    could not be started), the seconds it ran and its wall-clock start and end (``time.time()``)."""
    name: str
    returncode: int
    seconds: float
    started: float
    ended: float
    log: Path


_console_lock = threading.Lock()


def say(text: str, end: str = '\n') -> None:
    with _console_lock:
        print(text, end=end, flush=True)


def _tee(proc: subprocess.Popen, log: TextIO) -> None:
    """Copy the output of ``proc`` line by line to ``log`` and, indented, to the console."""
    for line in proc.stdout:
        log.write(line)
        log.flush()
        say(f'  {line}', end='')


class _Processes:
    """The subprocesses a pool started; once stopped, it starts no more and terminates those still running."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._procs: List[subprocess.Popen] = []
        self._stopped = False

    def start(self, command: Command, stdout: Any) -> Optional[subprocess.Popen]:
        """Start ``command`` (None once stopped); raises OSError when it cannot be started."""
        with self._lock:
            if self._stopped:
                return None
            proc = subprocess.Popen(command.argv, stdout=stdout, stderr=subprocess.STDOUT, text=True,
                                    bufsize=1 if stdout is subprocess.PIPE else -1, env=command.env)
            self._procs.append(proc)
            return proc

    def stop(self) -> None:
        with self._lock:
            self._stopped = True
            for proc in self._procs:
                if proc.poll() is None:
                    proc.terminate()


def _execute(command: Command, stream: bool, log: TextIO, processes: _Processes) -> int:
    """Start ``command`` with its output to ``log`` (and the console, when streaming); its exit status."""
    try:
        proc = processes.start(command, subprocess.PIPE if stream else log)
    except OSError as e:
        log.write(f'cannot start {shlex.join(command.argv)}: {e}\n')
        return 127
    if proc is None:
        return -signal.SIGTERM  # the pool was stopped before this command started
    if stream:
        _tee(proc, log)
    return proc.wait()


def _run_command(command: Command, stream: bool, prefix: str, processes: _Processes) -> CommandResult:
    """Run one command to its end with its output appended to its log; its result."""
    command.log.parent.mkdir(parents=True, exist_ok=True)
    say(f'{prefix}{command.name}: {shlex.join(command.argv)}  (log: {command.log})')
    started, t0 = time.time(), time.perf_counter()
    with open(command.log, 'a') as log:
        returncode = _execute(command, stream, log, processes)
    seconds = time.perf_counter() - t0
    if not stream or returncode != 0:
        say(f'{prefix}{command.name}: exit status {returncode} after {seconds:.1f} s  (log: {command.log})')
    return CommandResult(command.name, returncode, seconds, started, started + seconds, command.log)


def run_commands(commands: Sequence[Command], jobs: int = 1, stream: Optional[bool] = None,
                 prefix: str = '') -> List[CommandResult]:
    """Run ``commands`` as subprocesses, at most ``jobs`` of them at the same time, in the order given.

    Each command's stdout and stderr are appended to its ``log`` file. With ``stream`` (default: when
    ``jobs`` is 1) every output line also goes to the console, indented; otherwise the console gets
    one line when a command starts (its argv and log) and one when it ends (exit status, seconds,
    log). A command that fails does not stop the others. If this function is interrupted (e.g.
    KeyboardInterrupt), commands not yet started are dropped and running ones are terminated.
    Returns one ``CommandResult`` per command, in the order of ``commands``.
    """
    if jobs < 1:
        raise ValueError(f'jobs must be >= 1, got {jobs}')
    stream = jobs == 1 if stream is None else stream
    processes = _Processes()
    pool = ThreadPoolExecutor(max_workers=jobs, thread_name_prefix='run_commands')
    futures = [pool.submit(_run_command, c, stream, prefix, processes) for c in commands]
    try:
        return [f.result() for f in futures]
    except BaseException:
        pool.shutdown(wait=False, cancel_futures=True)
        processes.stop()
        raise
    finally:
        pool.shutdown(wait=True)
