"""Peak working memory of an inference and a training step.

``measure_memory`` measures torch allocations in this process (``tensor_memory_peak`` on CPU,
``max_memory_allocated`` on CUDA) or, with ``method='rss'``, the peak RSS growth of each model in a
fresh process forked from ``_memory_server`` (started through ``MemoryServer``).
"""
import ctypes
import gc
import json
import os
import resource
import subprocess
import sys
from dataclasses import asdict
from typing import Any, Callable, Dict, Optional, Sequence

import torch
from torch.profiler import ProfilerActivity, profile

from .measure import ModelSpec, Runner

# the command line of the fork server's process
SERVER_CODE = 'from timm_minimal.tools.benchmark.memory import _memory_server; _memory_server()'


def _read_status_kb(field_name: str) -> Optional[int]:
    try:
        with open('/proc/self/status') as f:
            for line in f:
                if line.startswith(field_name + ':'):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def _reset_peak_rss() -> bool:
    """Reset the kernel's peak-RSS counter of this process (Linux >= 4.0)."""
    try:
        with open('/proc/self/clear_refs', 'w') as f:
            f.write('5')
        return True
    except OSError:
        return False


def _malloc_trim() -> None:
    try:
        ctypes.CDLL('libc.so.6').malloc_trim(0)
    except (OSError, AttributeError):
        pass


def _max_rss_kb() -> int:
    """The process's peak RSS from getrusage, in KiB (macOS reports bytes)."""
    maxrss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return maxrss // 1024 if sys.platform == 'darwin' else maxrss


def _rss_kb() -> int:
    rss = _read_status_kb('VmRSS')
    # not Linux: the peak so far is the best available baseline
    return rss if rss is not None else _max_rss_kb()


def _peak_rss_kb() -> int:
    peak = _read_status_kb('VmHWM')
    return peak if peak is not None else _max_rss_kb()


def _cpu_memory_worker(job: Dict[str, Any]) -> Dict[str, float]:
    """In a fresh process: peak RSS growth (MiB) of inference and of training steps of one model."""
    spec = ModelSpec(**job['spec'])
    if job['threads']:
        torch.set_num_threads(job['threads'])
    runner = Runner(spec, torch.device('cpu'), job['batch_size'], amp=job['amp'], amp_dtype=job['amp_dtype'])
    # one unmeasured step of each kind: lazy initialisation, and the AdamW state exists before measuring
    for mode in ('infer', 'train'):
        runner.step(mode)()
    result: Dict[str, float] = {}
    for mode in ('infer', 'train'):
        gc.collect()
        _malloc_trim()
        reset = _reset_peak_rss()
        base = _rss_kb()
        for _ in range(job['steps']):
            runner.step(mode)()
        result[mode] = max(_peak_rss_kb() - base, 0) / 1024.
        result[f'{mode}_peak_reset'] = float(reset)
    return result


def _memory_server() -> None:
    """A fork server: imports torch and timm once, then forks one fresh child per job read from stdin.

    Each line of stdin is a JSON job, answered by one JSON line on stdout. Without ``os.fork``
    (not POSIX) it serves a single job in this process.
    """
    out = sys.stdout
    sys.stdout = sys.stderr  # nothing but answers on the pipe
    # import what the first step imports lazily, once, single-threaded (no thread pool to fork)
    torch.set_num_threads(1)
    warm = ModelSpec('warm-up', 'vit_minimal_sym_6x1', depth=1)
    Runner(warm, torch.device('cpu'), 1).train_step()
    for line in sys.stdin:
        job = json.loads(line)
        if not hasattr(os, 'fork'):
            out.write(json.dumps(_safe_worker(job)) + '\n')
            out.flush()
            return
        pid = os.fork()
        if pid == 0:
            try:
                out.write(json.dumps(_safe_worker(job)) + '\n')
                out.flush()
            finally:
                os._exit(0)
        os.waitpid(pid, 0)


def _safe_worker(job: Dict[str, Any]) -> Dict[str, Any]:
    try:
        return _cpu_memory_worker(job)
    except Exception as e:  # reported by the parent
        return {'error': f'{type(e).__name__}: {e}'}


class MemoryServer:
    """The parent's end of ``_memory_server``, started on first use and reused for the whole run."""

    def __init__(self) -> None:
        self.proc: Optional[Any] = None

    def _start(self) -> None:
        env = dict(os.environ)
        env['PYTHONPATH'] = os.pathsep.join([p for p in sys.path if p] + [env.get('PYTHONPATH', '')])
        # CPU memory only: with a GPU visible, the warm-up's backward starts autograd's device threads, and
        # a process cannot fork after that (the children's backward fails)
        env['CUDA_VISIBLE_DEVICES'] = ''
        self.proc = subprocess.Popen(
            [sys.executable, '-c', SERVER_CODE],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)

    def run(self, job: Dict[str, Any]) -> Dict[str, Any]:
        if self.proc is None or self.proc.poll() is not None:
            self._start()
        self.proc.stdin.write(json.dumps(job) + '\n')
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError('memory measurement process ended without an answer')
        res = json.loads(line)
        if 'error' in res:
            raise RuntimeError(f'memory measurement of {job["spec"]["key"]} failed: {res["error"]}')
        return res

    def close(self) -> None:
        if self.proc is not None:
            if self.proc.poll() is None:
                self.proc.stdin.close()
                self.proc.wait(timeout=60)
            self.proc = None


class _QuietStderr:
    """Silence the C++ profiler's log lines on file descriptor 2 while it runs."""

    def __enter__(self) -> None:
        sys.stderr.flush()
        self.saved = os.dup(2)
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 2)
        os.close(devnull)

    def __exit__(self, *exc: Any) -> None:
        os.dup2(self.saved, 2)
        os.close(self.saved)


def tensor_memory_peak(fn: Callable[[], None]) -> float:
    """Peak (MiB) of CPU memory allocated through torch's allocator while ``fn`` runs, above what was live before.

    The profiler's memory events (every allocation and free, with its size and time) are summed in
    time order; the running sum's maximum is the peak. The CPU analogue of
    ``torch.cuda.max_memory_allocated``: tensors (activations, saved tensors, gradients,
    temporaries inside ops), not memory that libraries allocate outside torch.
    """
    with _QuietStderr(), profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    events = sorted((e.start_ns(), e.nbytes()) for e in prof.profiler.kineto_results.events()
                    if e.name() == '[memory]' and e.device_type() == torch.autograd.DeviceType.CPU)
    current = peak = 0
    for _, nbytes in events:
        current += nbytes
        peak = max(peak, current)
    return peak / 2 ** 20


def measure_memory(specs: Sequence[ModelSpec], device: torch.device, batch_size: int, threads: Optional[int],
                   steps: int, amp: bool = False, amp_dtype: str = 'bfloat16',
                   runners: Optional[Dict[str, Runner]] = None, method: str = 'tensors',
                   server: Optional[MemoryServer] = None) -> Dict[str, Dict[str, float]]:
    """Peak working memory (MiB) of an inference and a training step per spec.

    ``method='tensors'`` (default): torch allocations, CPU through the profiler, CUDA through
    ``max_memory_allocated``, in this process after one unmeasured step. ``method='rss'`` (CPU):
    peak RSS growth of each model in a fresh process forked from ``_memory_server``.
    """
    out: Dict[str, Dict[str, float]] = {}
    if device.type == 'cpu' and method == 'rss':
        own = server is None
        server = server or MemoryServer()
        try:
            for spec in specs:
                out[spec.key] = server.run(dict(spec=asdict(spec), batch_size=batch_size, threads=threads,
                                                steps=steps, amp=amp, amp_dtype=amp_dtype))
        finally:
            if own:
                server.close()
        return out
    if method not in ('tensors', 'rss'):
        raise ValueError(f"Unknown memory method '{method}'; choose 'tensors' or 'rss'.")
    if device.type == 'cpu':  # the profiler's and autograd's one-time allocations, not charged to a model
        warm = Runner(ModelSpec('warm-up', 'vit_minimal_sym_6x1', depth=1), device, 2)
        for mode in ('infer', 'train', 'train'):
            tensor_memory_peak(warm.step(mode))
        del warm
    for spec in specs:
        runner = (runners or {}).get(spec.key) or Runner(spec, device, batch_size, amp, amp_dtype)
        res = {}
        for mode in ('infer', 'train'):
            step = runner.step(mode)
            step()  # unmeasured: lazy initialisation, the AdamW state exists afterwards
            gc.collect()

            def steps_fn() -> None:
                for _ in range(steps):
                    step()

            if device.type == 'cuda':
                torch.cuda.synchronize(device)
                torch.cuda.reset_peak_memory_stats(device)
                base = torch.cuda.memory_allocated(device)
                steps_fn()
                torch.cuda.synchronize(device)
                res[mode] = (torch.cuda.max_memory_allocated(device) - base) / 2 ** 20
            else:
                res[mode] = tensor_memory_peak(steps_fn)
        out[spec.key] = res
    return out

