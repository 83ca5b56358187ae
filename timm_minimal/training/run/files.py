"""Files written whole (on a temporary file beside the target, then renamed in); what writing files can meet: a full
disk, named as such, and another process on the same run folder; and what reading back a derived cache can meet: a
file that is not what was written."""
import json
import logging
import os
import stat
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Union

from filelock import FileLock, Timeout

from ...cli import describe_os_error
from ...machine import is_disk_full

__all__ = ['LOCK_FILE', 'is_disk_full', 'describe_write_error', 'missing_folders', 'remove_empty', 'FolderLock',
           'FolderBusy', 'read_derived_npz', 'read_regular_file', 'write_file_atomic', 'write_text_atomic',
           'write_json_atomic', 'fsync_file', 'fsync_dir']

_logger = logging.getLogger(__name__)
PathLike = Union[str, Path]
LOCK_FILE = '.lock'  # a run folder's: held by the training process that writes the folder


def fsync_file(path: Path) -> None:
    """A written file's content on the disk before it is renamed in."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_dir(path: Path) -> None:
    """A folder's entries (a rename into it) on the disk, where the system lets a folder be synced."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def write_file_atomic(path: PathLike, write: Callable[[Path], None], suffix: str = '.tmp') -> Path:
    """Write ``path`` through ``write(tmp)`` on a temporary file beside it, then ``os.replace``: readers see the
    old file or the new one, and a failed write (a full disk) leaves neither a half file nor the temporary one."""
    path = Path(path)
    tmp = path.with_name(f'.{path.name}.{os.getpid()}{suffix}')
    try:
        write(tmp)
        fsync_file(tmp)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path


def write_text_atomic(path: PathLike, text: str) -> None:
    """Write a text file via a temporary file and ``os.replace``."""
    write_file_atomic(path, lambda tmp: tmp.write_text(text, encoding='utf-8'))


def write_json_atomic(path: PathLike, obj: Any) -> None:
    write_text_atomic(path, json.dumps(obj, indent=2, default=str) + '\n')


def describe_write_error(e: BaseException, what: Union[str, Path]) -> str:
    """One line for a failed write of ``what``; a full disk is named as such."""
    if is_disk_full(e, what):
        return f'no space left on the device while writing {what}: free some space and run again'
    if isinstance(e, OSError):
        return f'cannot write {what}: {describe_os_error(e, what)}'
    return f'cannot write {what}: {type(e).__name__}: {str(e).strip()[:200]}'


def read_regular_file(path: Union[str, Path], limit: int) -> bytes:
    """The bytes of a regular file of at most ``limit`` bytes, opened without blocking (a FIFO put in its place would
    hang a plain read, a link to ``/dev/zero`` would never end); OSError where it is missing, not a regular file, or
    larger."""
    fd = os.open(path, os.O_RDONLY | getattr(os, 'O_NONBLOCK', 0))
    with os.fdopen(fd, 'rb') as f:
        info = os.fstat(f.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise OSError(f'{path} is not a regular file')
        data = f.read(limit + 1)
    if len(data) > limit:
        raise OSError(f'{path} is over {limit:,} bytes')
    return data


def missing_folders(folder: Union[str, Path]) -> List[Path]:
    """``folder`` and its parents that do not exist yet, deepest first: what creating it would make."""
    folder = Path(folder)
    return [p for p in (folder, *folder.parents) if not p.exists()]


def remove_empty(folders: Sequence[Path]) -> None:
    """Remove ``folders`` (deepest first) while they are empty: a tool takes back the folders it made and nothing
    else; the first one that holds anything stops it."""
    for p in folders:
        try:
            p.rmdir()
        except OSError:
            break


class FolderBusy(RuntimeError):
    """Another process holds the folder's lock."""


class FolderLock:
    """An exclusive OS lock on ``<folder>/<name>`` (filelock's: ``flock`` on POSIX, ``msvcrt`` on Windows), held
    until ``release`` or the process ends.

    The OS drops the lock of a killed process, so a stale lock file never blocks a later run; the file
    records the holder's pid for the message of the process that is refused (read before its attempt: a
    contender never writes the file, and filelock opens it without truncating).
    """

    def __init__(self, folder: Union[str, Path], name: str = LOCK_FILE) -> None:
        self.path = Path(folder) / name
        self._lock: Optional[FileLock] = None

    def acquire(self) -> 'FolderLock':
        self.path.parent.mkdir(parents=True, exist_ok=True)
        lock = FileLock(self.path, timeout=0, thread_local=False)
        try:
            holder = self.path.read_text().strip() if self.path.is_file() else ''
        except OSError:
            holder = ''
        try:
            lock.acquire()
        except Timeout as e:
            raise FolderBusy(f'another process (pid {holder or "unknown"}) is using {self.path.parent}') from e
        try:
            with open(self.path, 'r+') as f:  # the holder alone writes it; r+ keeps the locked inode
                f.truncate()
                f.write(f'{os.getpid()}\n')
        except OSError:
            pass  # the pid is for the message of a refused process only
        self._lock = lock
        return self

    def release(self) -> None:
        if self._lock is not None:
            self._lock.release()
            self._lock = None


def read_derived_npz(path: Path, problem: Callable[[Dict[str, Any]], Optional[str]]) -> Optional[Dict[str, Any]]:
    """The arrays of a decoded-image cache (``np.savez``), read without unpickling, where ``problem`` finds none in
    them. Else None, with a one-line warning: the file is derived, and the caller decodes the images anew."""
    import numpy as np  # lazy: --help answers without it
    try:
        with np.load(path, allow_pickle=False) as d:
            arrays = {k: d[k] for k in d.files}
        why = problem(arrays)
    except Exception as e:  # noqa: BLE001 (a truncated zip, a pickled array, a missing key: any bad file)
        why = f'{type(e).__name__}: {str(e)[:100]}'
    if why is None:
        return arrays
    _logger.warning(f'WARNING: the decoded-image cache {path} is not usable ({why}); decoding the images anew.')
    return None
