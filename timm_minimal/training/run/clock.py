"""When a launch started: the one clock of its record's elapsed times, shared by a CPU split's processes."""
import time

import timm_minimal
from ...cli import env_number

__all__ = ['LAUNCHED_AT_ENV', 'launched_at', 'launch_elapsed']

LAUNCHED_AT_ENV = 'TIMM_MINIMAL_LAUNCHED_AT'  # set by a CPU split for its processes: when its launcher started


def launched_at() -> float:
    """The wall-clock time (``time.time``) at which this launch's first interpreter imported the package: this
    one's, or for a process of a CPU split its launcher's (which measured the split and loaded the data first)."""
    own = time.time() - (time.perf_counter() - timm_minimal.STARTED_AT)
    given = env_number(LAUNCHED_AT_ENV, float, None, low=0, high=time.time())
    return own if given is None else given


def launch_elapsed() -> float:
    """Seconds since this launch's first interpreter imported the package (``launched_at``: imports, a CPU split's
    measurement, data loading and compilation included; a process's creation time would count what a shell ran
    before it ``exec``-ed Python)."""
    return time.time() - launched_at()
