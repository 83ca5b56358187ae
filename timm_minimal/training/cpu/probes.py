"""The processes the CPU decision measures in (``split.decide``): one per core, each importing torch and timm once for
every measurement of a decision. A process of its own per measurement spent about 3.9 s importing them on a 2-core
Xeon (``python -X importtime``), five or more times a decision, of the 62 s that the MNIST model's decision took.

A measurement is a call of one of ``split``'s functions, sent as a line to each process it needs; each answers a line
of JSON on a descriptor of its own (what a library prints goes to its stderr). A call that raises answers why; one
that kills its process, or does not answer in time, ends the processes of that measurement, and the next one starts
them afresh. None outlives the decision, nor the process that started it (``die_with_parent``)."""
import contextlib
import ctypes
import functools
import json
import os
import re
import select
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from typing import Any, Dict, IO, Iterator, List, Optional, Sequence

from ...machine import keep_freed_memory

__all__ = ['ProbePool', 'probe_pool', 'run_calls', 'serve', 'die_with_parent']

# a process's first line: the module whose functions the calls name, then the loop that answers them
SERVE = ('from timm_minimal.training.cpu import split; from timm_minimal.training.cpu.probes import serve; '
         'serve(vars(split))')
_current: Optional['ProbePool'] = None  # the decision's, while it measures (``probe_pool``)


def serve(namespace: Dict[str, Any]) -> None:
    """A probe process: each line of stdin a call evaluated in ``namespace``, answered with one line of JSON,
    ``{"value": ...}`` or ``{"error": "<exception>: <message>"}``, on the descriptor stdout was; stdout itself goes to
    stderr. Its allocator keeps what a step frees, as the trainer's does (``machine.keep_freed_memory``). At the end
    of stdin it ends without its interpreter's cleanup (``split.NEVER_FREED``)."""
    keep_freed_memory()
    answers = os.fdopen(os.dup(1), 'w')
    os.dup2(2, 1)
    for line in sys.stdin:
        try:
            answer = {'value': eval(line, namespace)}  # noqa: S307 (a call this package wrote, from its parent)
        except Exception as e:  # noqa: BLE001 (said to the parent, which leaves that measurement out)
            traceback.print_exc()
            answer = {'error': f'{type(e).__name__}: {e}'.splitlines()[0]}
        sys.stderr.flush()
        answers.write(json.dumps(answer) + '\n')
        answers.flush()
    os._exit(0)


class ProbePool:
    """``size`` probe processes (``serve``), started at the first call and kept for the next ones."""

    def __init__(self, size: int):
        self._procs: List[Optional[subprocess.Popen]] = [None] * size
        self._errors: List[Optional[IO[str]]] = [None] * size
        self._first = True

    def __len__(self) -> int:
        return len(self._procs)

    def _process(self, i: int) -> subprocess.Popen:
        if self._procs[i] is None or self._procs[i].poll() is not None:
            self._end(i)
            self._errors[i] = tempfile.TemporaryFile('w+')  # a file: a full pipe would stall the process
            self._procs[i] = subprocess.Popen(
                [sys.executable, '-c', SERVE], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                stderr=self._errors[i], text=True,
                preexec_fn=functools.partial(die_with_parent, os.getpid()))
        return self._procs[i]

    def run(self, calls: Sequence[str], timeout: float, what: str) -> List[Any]:
        """What each call returns, the i-th in process i, all at once; a RuntimeError naming ``what`` and why where
        one raises, ends its process or gives no answer within ``timeout`` seconds: then every process of the call
        is ended (the others may wait for it in a collective), to start afresh at its next call. The first call
        starts every process, so that they import torch at once rather than one at each first call (and a decision
        that measures nothing starts none)."""
        if self._first:  # every process at once, so that they import torch together
            self._first = False
            for i in range(len(self)):
                self._process(i)
        procs = [self._process(i) for i in range(len(calls))]
        offsets = [self._errors[i].seek(0, os.SEEK_END) for i in range(len(calls))]
        deadline = time.monotonic() + timeout
        try:
            for p, call in zip(procs, calls):
                p.stdin.write(call + '\n')
                p.stdin.flush()
            return [self._answer(i, offsets[i], deadline) for i in range(len(calls))]
        except (RuntimeError, OSError, ValueError) as e:
            for i in range(len(calls)):
                self._end(i)
            raise RuntimeError(f'{what} failed: {str(e)[:200]}') from None

    def _answer(self, i: int, offset: int, deadline: float) -> Any:
        p = self._procs[i]
        if not select.select([p.stdout], [], [], max(0.0, deadline - time.monotonic()))[0]:
            raise RuntimeError('no answer in time')
        line = p.stdout.readline()
        if not line:  # the process ended
            p.wait()
            self._errors[i].seek(offset)
            raise RuntimeError(_why(p.returncode, self._errors[i].read()))
        answer = json.loads(line)
        if 'error' in answer:
            raise RuntimeError(answer['error'])
        return answer['value']

    def _end(self, i: int) -> None:
        p, self._procs[i] = self._procs[i], None
        if p is not None:
            if p.poll() is None:
                p.kill()
            p.wait()
            for pipe in (p.stdin, p.stdout):
                with contextlib.suppress(OSError):
                    pipe.close()
        if self._errors[i] is not None:
            self._errors[i].close()
            self._errors[i] = None

    def close(self, grace: float = 5.0) -> None:
        """Each process told that no call follows, and ended where it has not within ``grace`` seconds."""
        for p in self._procs:
            if p is not None and p.poll() is None:
                with contextlib.suppress(OSError):
                    p.stdin.close()
        deadline = time.monotonic() + grace
        for i, p in enumerate(self._procs):
            if p is not None:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    p.wait(timeout=max(0.0, deadline - time.monotonic()))
            self._end(i)


@contextlib.contextmanager
def probe_pool(size: int) -> Iterator[ProbePool]:
    """``size`` probe processes that ``run_calls`` uses while the block runs; ended after it."""
    global _current
    pool, before = ProbePool(size), _current
    try:
        _current = pool
        yield pool
    finally:
        _current = before
        pool.close()


def run_calls(calls: Sequence[str], timeout: float, what: str) -> List[Any]:
    """``ProbePool.run`` in the processes of the block ``probe_pool`` runs, else in processes of their own."""
    if _current is not None and len(_current) >= len(calls):
        return _current.run(calls, timeout, what)
    with probe_pool(len(calls)) as pool:
        return pool.run(calls, timeout, what)


RAISED = re.compile(r'[A-Za-z_][\w.]*(Error|Exception|Interrupt|Exit|Failed|Expired)(:|$)')  # a traceback's last line


def _why(returncode: int, stderr: str) -> str:
    """What ended a probe process: the exception its traceback ends with, else the signal that ended it, else its
    last line (a compiled probe's stderr goes on with inductor's warnings after the cause)."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    raised = [line for line in lines if RAISED.match(line)]
    if raised:
        return raised[-1]
    if returncode < 0:
        return f'ended by signal {-returncode} ({signal.Signals(-returncode).name})'
    return lines[-1] if lines else f'exit status {returncode}, no message'


def die_with_parent(parent: int) -> None:
    """In a child between fork and exec: the kernel ends it (SIGTERM) when its parent ends, by any signal, SIGKILL
    included (Linux's ``PR_SET_PDEATHSIG``, kept across exec); a parent already gone ends it at once. The probes and
    the processes of a split run never outlive the process that started them. Elsewhere than on Linux, nothing."""
    if not sys.platform.startswith('linux'):
        return
    ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGTERM))  # 1: PR_SET_PDEATHSIG
    if os.getppid() != parent:
        os.kill(os.getpid(), signal.SIGTERM)
