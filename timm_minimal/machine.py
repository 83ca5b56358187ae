"""The machine's facts, read in one place: the package's cache folder, the CPU cores this process may use, torch's
threads, a full disk, the CPU's signature (model, SIMD flags, cores) and the kernel caps set in the environment,
whether the CPU multiplies bf16 natively, and the C library's allocator kept from handing memory back between steps.

The trainer (``training/``) and the tools (``tools/``) read them here, so a tool that needs one of them (the zoo's
cache folder, a benchmark's CPU flags) imports nothing of the trainer. This module imports nothing else of the
package, and torch only in the functions that ask it.
"""
import ctypes
import errno
import os
import platform
import shutil
from contextlib import contextmanager
from pathlib import Path
from typing import Dict, Iterator, Optional, Union

__all__ = ['default_cache_dir', 'usable_cores', 'torch_threads', 'is_disk_full', 'cpu_signature', 'KERNEL_CAP_ENV',
           'kernel_caps', 'kernels_capped_below_bf16', 'cpu_has_bf16', 'keep_freed_memory']

# torch.save reports a short write without the OS error ("unexpected pos ..."): below this much free space a
# failed write is put down to a full disk
_NEARLY_FULL = 1 << 20
# glibc's mallopt parameters, and the values keep_freed_memory gives them: blocks below glibc's highest mmap threshold
# (32 MiB on 64-bit systems) come from the heap, and up to 1 GiB free at the heap's top stays there
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
_HEAP_BLOCKS_BELOW, _KEPT_AT_TOP = 32 << 20, 1 << 30
KERNEL_CAP_ENV = ('ATEN_CPU_CAPABILITY', 'MKL_ENABLE_INSTRUCTIONS', 'ONEDNN_MAX_CPU_ISA')


def default_cache_dir() -> Path:
    """Where decoded archives, arrays, the CPU decisions and the shipped checkpoints' folders are kept:
    $TIMM_MINIMAL_CACHE, or ~/.cache/timm_minimal where it is unset or empty (an empty one would be the working
    folder)."""
    return Path(os.environ.get('TIMM_MINIMAL_CACHE') or Path.home() / '.cache' / 'timm_minimal')


def usable_cores() -> int:
    """The CPU cores this process may use: its affinity where the system has one, else the machine's count (the one
    reading of it: the trainer's core budget, the grid's thread split, the benchmarks' headers)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, 'sched_getaffinity') else (os.cpu_count() or 1)


@contextmanager
def torch_threads(threads: Optional[int]) -> Iterator[None]:
    """torch's intra-op thread count set to ``threads`` for the block (None: left as it is), and the count the
    process had before set back after it: a run or a measurement in a Python process leaves its threads as it found
    them."""
    import torch  # lazy: this module is read by tools that start without torch
    before = torch.get_num_threads()
    if threads is not None:
        torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def is_disk_full(e: BaseException, where: Union[str, Path, None] = None) -> bool:
    """Whether a failed write at ``where`` (a file or folder) met a full disk. An OS error that names its cause is
    taken at its word: a read-only mount or a pseudo file system reports (nearly) no free space too."""
    if isinstance(e, OSError) and e.errno is not None:
        return e.errno == errno.ENOSPC
    text = str(e)
    if 'No space left on device' in text or 'os error 28' in text:
        return True
    if where is None:
        return False
    path = Path(where)
    while not path.exists() and path != path.parent:
        path = path.parent
    try:
        return shutil.disk_usage(path).free < _NEARLY_FULL
    except OSError:
        return False


def cpu_signature() -> Dict[str, str]:
    """What identifies this CPU for a measurement: its model name, its SIMD flags (with the kernel caps set, if
    any), its usable cores and torch's version."""
    import torch  # lazy: see torch_threads
    name, flags = platform.processor() or platform.machine(), ''
    try:
        for line in Path('/proc/cpuinfo').read_text().splitlines():
            key, _, value = line.partition(':')
            if key.strip() == 'model name':
                name = value.strip()
            elif key.strip() == 'flags':
                flags = ' '.join(sorted(f for f in value.split() if f.startswith(('avx', 'amx', 'fma', 'sse4'))))
                break
    except OSError:
        pass
    caps = kernel_caps()
    flags += f'; kernels capped by {caps}' if caps else ''
    return dict(cpu=name, flags=flags, cores=str(usable_cores()), torch=torch.__version__.split('+')[0])


def kernel_caps() -> str:
    """The environment variables set to cap the instruction sets of torch's CPU kernels (ATen and inductor, MKL,
    oneDNN), as ``NAME=value`` words; '' where none is. A capped process runs as a CPU without the instructions
    above the cap, so the flags of every measurement and record name the cap beside the CPU's own flags."""
    return ' '.join(f'{k}={os.environ[k]}' for k in KERNEL_CAP_ENV if os.environ.get(k, '').strip())


def kernels_capped_below_bf16() -> bool:
    """Whether a kernel cap (``kernel_caps``) leaves out the bf16 instructions (AVX512-BF16, AMX): ATen at AVX2 or
    below, or oneDNN capped at an instruction set without BF16 or AMX."""
    onednn = os.environ.get('ONEDNN_MAX_CPU_ISA', '').strip().upper()
    return (os.environ.get('ATEN_CPU_CAPABILITY', '').strip().lower() in ('default', 'avx2')
            or onednn not in ('', 'ALL', 'DEFAULT') and not any(w in onednn for w in ('BF16', 'AMX', 'AVX10')))


def cpu_has_bf16() -> bool:
    """Whether this CPU multiplies bf16 natively (AVX512-BF16 or AMX); elsewhere bf16 autocast is emulated and slow.
    Kernels capped below those instructions (``kernels_capped_below_bf16``) emulate it too."""
    import torch  # lazy: see torch_threads
    probes = ('_is_avx512_bf16_supported', '_is_amx_tile_supported')
    return not kernels_capped_below_bf16() and any(getattr(torch.cpu, name, lambda: False)() for name in probes)


def keep_freed_memory() -> bool:
    """Tell glibc's malloc to keep what this process frees for its next allocations: blocks under 32 MiB from the
    heap, not fresh pages from the kernel (``mmap``), and up to 1 GiB free at the top of the heap kept there. True
    where it took both settings; False elsewhere (another C library), where nothing changes.

    A training step on the CPU allocates and frees the same activations, up to tens of MiB, at every step. glibc's
    defaults (blocks of 128 KiB and more mapped afresh, 128 KiB free at the top given back; both raised by what the
    process happens to free first) left some processes faulting those pages in at every step: on a 2-core AMX Xeon the
    same compiled bf16 step of ``vit_minimal_sym_6x4.cifar10`` ran at 1,923-2,199 img/s in five processes, and at
    2,240-2,428 in five with these settings (``scripts/allocator.py``, BENCHMARKS.md). The process keeps the peak of
    its heap until it ends."""
    if platform.system() != 'Linux' or platform.libc_ver()[0] != 'glibc':
        return False
    mallopt = ctypes.CDLL(None).mallopt
    heap_blocks = mallopt(_M_MMAP_THRESHOLD, _HEAP_BLOCKS_BELOW)
    kept_at_top = mallopt(_M_TRIM_THRESHOLD, _KEPT_AT_TOP)
    return bool(heap_blocks and kept_at_top)
