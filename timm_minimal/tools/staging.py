"""Output folders that appear whole or not at all, and replace only what a tool recorded writing.

A tool writes into a temporary folder beside its output, ``.<name>.tmp-<random>`` (``tempfile.mkdtemp``), and renames
it into place when everything is written; a failure removes the temporary folder and leaves the output as it was.

With ``record``, the output is recorded in the user's cache folder, where only the tools write
(``<cache>/outputs/<digest of the output's path>.json``: the path and the SHA-256 digest of each file written).
``overwrite`` replaces a folder only while it holds exactly the recorded files: a folder the tool did not write, a copy
of its output elsewhere, or its output with a file added or changed is refused in one line and left as it was. Nothing
inside the output says who wrote it.

The swap runs under a lock that every writer through this module takes (filelock, in the cache folder): the earlier
output is moved aside to ``.<name>.old-<random>``, a name this invocation chose, checked again there, and removed once
the new output is in place. Before the first rename a swap log in the cache (``<digest>.swap.json``) names the exact
temporary folder and aside path of this invocation. A crash between the renames leaves that log; the next write to the
same output (``recover``) reads it and puts the earlier output back where the new one is missing, or removes it where
the new one made it in. Only the paths in the log are touched: a folder of the user's, whatever its name, is never
moved or deleted.
"""
import contextlib
import hashlib
import json
import logging
import os
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Type

from filelock import FileLock

from ..cli import Failure, listed
from ..models.pretrained import file_sha256
from ..training.run.files import describe_write_error, read_regular_file
from ..machine import default_cache_dir, is_disk_full

__all__ = ['staged_folder', 'refusal', 'recorded_files', 'unrecorded_entries', 'recover', 'RECORD_FORMAT']

_logger = logging.getLogger(__name__)

RECORD_FORMAT = 'timm-minimal-output/1'




def _entries(folder: Path) -> List[Path]:
    """Every file, link and folder below ``folder`` (links are not followed)."""
    return sorted(folder.rglob('*'))


def _files(folder: Path) -> Dict[str, str]:
    """The relative name and digest of every regular file below ``folder``."""
    return {p.relative_to(folder).as_posix(): file_sha256(p) for p in _entries(folder) if p.is_file() and not p.is_symlink()}


def _records() -> Path:
    return default_cache_dir() / 'outputs'


def _record_file(out: Path, suffix: str = '.json') -> Path:
    return _records() / f'{hashlib.sha256(str(out).encode()).hexdigest()[:24]}{suffix}'


def _write_json(path: Path, data: dict) -> None:
    """``path`` with ``data``, whole or not at all."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f'{path.name}.{os.getpid()}.tmp')
    tmp.write_text(json.dumps(data, indent=1) + '\n')
    os.replace(tmp, path)


# A record lists an output's files with their digests: a few kB for the largest output the tools write
MAX_RECORD_BYTES = 1 << 20


def _read_json(path: Path, out: Path) -> Optional[dict]:
    """A record or swap log of ``out`` (None: none, or not one of this module's: not a regular file, over
    ``MAX_RECORD_BYTES``, or not its JSON)."""
    try:
        data = json.loads(read_regular_file(path, MAX_RECORD_BYTES))
    except (OSError, ValueError, RecursionError):
        return None
    ok = isinstance(data, dict) and data.get('format') == RECORD_FORMAT and data.get('out') == str(out)
    return data if ok else None


def recorded_files(out: Path) -> Optional[Dict[str, str]]:
    """The files the record of ``out`` lists with their digests (None where the tools recorded no output there)."""
    data = _read_json(_record_file(out), out)
    files = data.get('files') if data else None
    ok = isinstance(files, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in files.items())
    return files if ok else None


def unrecorded_entries(folder: Path, out: Optional[Path] = None) -> List[str]:
    """The entries of ``folder`` that the record of ``out`` (default: the folder itself) does not list with their
    digest (empty: the folder holds only what a tool recorded writing there, or nothing)."""
    listed = recorded_files(out or folder) or {}
    unrecorded = []
    for p in _entries(folder):
        name = p.relative_to(folder).as_posix()
        if p.is_dir() and not p.is_symlink():
            if not any(p.iterdir()):
                unrecorded.append(name + '/')
            continue
        if p.is_symlink() or not p.is_file() or listed.get(name) != file_sha256(p):
            unrecorded.append(name)
    return unrecorded


@contextmanager
def _swap_lock(out: Path) -> Iterator[None]:
    """An exclusive lock on ``out`` for a check and a swap (filelock, so it holds on every OS), kept in the cache
    folder under a digest of the output's path: nothing is created beside the output."""
    locks = default_cache_dir() / 'locks'
    locks.mkdir(parents=True, exist_ok=True)
    with FileLock(str(locks / f'{hashlib.sha256(str(out).encode()).hexdigest()[:24]}.lock')):
        yield


def recover(out: Path) -> Optional[str]:
    """Finish a swap into ``out`` that a crash interrupted, from its swap log, under the swap lock: the earlier output
    goes back where ``out`` is missing, and is removed where the new output is in place; the log's temporary folder is
    removed. Nothing the log does not name is touched. What was done, in a line (None: nothing to do)."""
    log_file = _record_file(out, '.swap.json')
    log = _read_json(log_file, out)
    if log is None or not all(isinstance(log.get(k), str) for k in ('old', 'stage')):
        return None
    done = []
    old, stage = Path(log['old']), Path(log['stage'])
    new_in_place = out.is_dir() and not out.is_symlink() and _files(out) == log.get('files')
    if old.is_dir() and not old.is_symlink():
        if not out.exists() and not out.is_symlink():
            old.rename(out)
            done.append(f'put back the earlier {out.name} that an interrupted run had moved aside')
        elif new_in_place:
            shutil.rmtree(old, ignore_errors=True)
            done.append(f'removed the earlier {out.name} that an interrupted run had already replaced')
        else:
            done.append(f'left the earlier {out.name} that an interrupted run had moved aside as {old}: {out} has '
                        f'changed since')
    if new_in_place and log.get('record'):
        _write_json(_record_file(out), dict(format=RECORD_FORMAT, out=str(out), files=log['files']))
    if stage.is_dir() and not stage.is_symlink():
        shutil.rmtree(stage, ignore_errors=True)
    log_file.unlink(missing_ok=True)
    return '; '.join(done) or None


def refusal(out: Path, overwrite: bool, folder: Optional[Path] = None) -> Optional[str]:
    """Why ``out`` may not be replaced now (None: it may); ``folder``: where its content lies now, if not there."""
    out = _resolve(Path(out))  # the record is kept under the resolved path
    folder = folder or out
    if not folder.exists() and not folder.is_symlink():
        return None
    if folder.is_symlink():
        return f'{out} is a symbolic link; choose a new folder for --output'
    if not folder.is_dir():
        return f'{out} exists and is not a folder; choose another --output'
    if not any(folder.iterdir()):
        return None
    if not overwrite:
        remedy = ('pass --overwrite (overwrite=True) to replace an earlier output of this tool'
                  if recorded_files(out) is not None else 'choose a new folder')
        return f'{out} exists and is not empty: {remedy}'
    foreign = unrecorded_entries(folder, out)
    if foreign:
        return (f'{out} holds files this tool did not write ({listed(foreign, 5)}); --overwrite replaces only an earlier output of this tool, '
                f'as recorded when it was written: choose another --output')
    return None


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _usual_permissions(folder: Path) -> None:
    """The modes a plain mkdir and open would have given (mkdtemp and some writers make owner-only files)."""
    umask = _umask()
    for p in [folder, *_entries(folder)]:
        if p.is_symlink():
            continue
        os.chmod(p, (0o777 if p.is_dir() else 0o666) & ~umask)


def _resolve(out: Path) -> Path:
    out = Path(os.path.abspath(out))  # '.' and '..' resolved by name, a link in the last part kept
    return out.parent.resolve() / out.name if out.name else out


@contextmanager
def staged_folder(out: Path, overwrite: bool = False, record: bool = False,
                  error: Type[Exception] = ValueError) -> Iterator[Path]:
    """A temporary folder beside ``out`` that becomes ``out`` when the block succeeds and is removed otherwise.

    ``record``: record what the block wrote, so that a later ``overwrite`` may replace it (and nothing else). Refusals
    (checked before the block and again at the swap) raise ``error`` with one line; write failures (a full disk, a
    read-only folder) raise ``Failure`` with one line, which a command line exits with status 1, as the trainer does.
    """
    out = _resolve(Path(out))
    cwd = Path.cwd().resolve()
    if out == cwd or out in cwd.parents:
        raise error(f'{out} is the working folder or one of its ancestors; choose a new folder for --output')
    with _swap_lock(out):
        done = recover(out)
    if done:
        _logger.info(f'note: {done}.')
    why = refusal(out, overwrite)
    if why:
        raise error(why)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        stage = Path(tempfile.mkdtemp(prefix=f'.{out.name}.tmp-', dir=out.parent))
        os.chmod(stage, 0o777 & ~_umask())  # mkdtemp makes it 0700: the output gets the usual permissions
    except OSError as e:
        raise Failure(describe_write_error(e, out)) from e
    try:
        yield stage
        _usual_permissions(stage)
        with _swap_lock(out):
            _swap_in(stage, out, overwrite, record, error)
    except Exception as e:  # noqa: BLE001 (a failed write; safetensors and torch.save raise their own types)
        if isinstance(e, (error, Failure)) or not (isinstance(e, OSError) or is_disk_full(e, stage)):
            raise
        raise Failure(describe_write_error(e, out)) from e
    finally:
        shutil.rmtree(stage, ignore_errors=True)


def _swap_in(stage: Path, out: Path, overwrite: bool, record: bool, error: Type[Exception]) -> None:
    """Rename ``stage`` to ``out``, logged first. An earlier ``out`` is moved aside and checked where it lies (nobody can
    add to it there): if it is not replaceable it goes back untouched and ``error`` is raised; else it is removed after
    the rename, or put back when the rename fails."""
    why = refusal(out, overwrite)
    if why:
        raise error(why)
    old = stage.with_name(stage.name.replace('.tmp-', '.old-', 1))
    files = _files(stage)
    log_file = _record_file(out, '.swap.json')
    _write_json(log_file, dict(format=RECORD_FORMAT, out=str(out), stage=str(stage), old=str(old), files=files,
                               record=record))
    # From here on a crash leaves the log, and the next write to ``out`` finishes the swap from it (``recover``); each
    # path that ends here removes it.
    if out.exists():
        out.rename(old)
        why = refusal(out, overwrite, folder=old)
        if why:
            old.rename(out)
            log_file.unlink(missing_ok=True)
            raise error(why)
    try:
        stage.rename(out)
    except OSError as e:
        if old.exists():
            old.rename(out)
        log_file.unlink(missing_ok=True)
        if out.exists():  # made by someone else between the check and the rename
            raise error(f'{out} appeared while this tool was writing it: nothing was replaced') from e
        raise
    if record:
        _write_json(_record_file(out), dict(format=RECORD_FORMAT, out=str(out), files=files))
    else:
        _record_file(out).unlink(missing_ok=True)
    with contextlib.suppress(OSError):
        shutil.rmtree(old)
    if not old.exists():
        log_file.unlink(missing_ok=True)
