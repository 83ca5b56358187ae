"""Output folders that appear whole or not at all, and replace only what a tool can prove it wrote.

A tool writes into a temporary folder beside its output and renames it into place when everything is written;
a failure removes the temporary folder and leaves the output as it was. A folder written with a ``marker`` holds
a small JSON file of that name with the name and SHA-256 digest of every file the tool wrote, signed with a key
that never leaves this user's cache folder (``<cache>/staging.key``, made on first use, readable by its owner
alone; an HMAC-SHA256 of the listing). ``overwrite`` replaces a folder only when its marker's signature is this
key's and every file in it is listed there with its digest: digests prove the content, the signature proves who
wrote the listing, so a marker written by hand, by another user or on another machine, even with the right
digests, proves nothing. Anything else in the folder means: refuse in one line and leave the folder as it was.

The check runs at the moment of the swap, under a lock that every writer through this module takes (filelock, in
the cache folder, held only for the check and the renames): the output is moved aside, checked again, and put back
untouched if anything appeared in it meanwhile. Two writers to one new output therefore never both succeed without
``overwrite``: the second finds the first's output and refuses. A crash between the renames leaves the earlier
output aside as ``.<name>.old-*``; the next write to the same output puts it back (or, where the new output made
it in, removes it) before anything else (``recover``).
"""
import contextlib
import hashlib
import hmac
import json
import os
import secrets
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Type

from ..cli import Failure
from ..training.files import describe_write_error, is_disk_full

__all__ = ['staged_folder', 'write_manifest', 'unproven_entries', 'signing_key', 'recover', 'MANIFEST_FORMAT']

MANIFEST_FORMAT = 'timm-minimal-files/1'


def _digest(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, 'rb') as f:
        for block in iter(lambda: f.read(1 << 20), b''):
            h.update(block)
    return h.hexdigest()


def _entries(folder: Path) -> List[Path]:
    """Every file, link and folder below ``folder`` (links are not followed)."""
    return sorted(folder.rglob('*'))


def signing_key(create: bool = True) -> Optional[bytes]:
    """This user's key for the markers (``<cache>/staging.key``, 32 random bytes, mode 0600), made on first use;
    None where it cannot be read (or, without ``create``, does not exist yet)."""
    from ..training.data import default_cache_dir
    path = default_cache_dir() / 'staging.key'
    try:
        if not path.is_file() and create:
            path.parent.mkdir(parents=True, exist_ok=True)
            with contextlib.suppress(FileExistsError):
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                with os.fdopen(fd, 'wb') as f:
                    f.write(secrets.token_bytes(32))
        key = path.read_bytes()
    except OSError:
        return None
    return key if len(key) == 32 else None


def _signature(key: bytes, files: Dict[str, str]) -> str:
    return hmac.new(key, json.dumps(files, sort_keys=True).encode(), hashlib.sha256).hexdigest()


def write_manifest(folder: Path, marker: str) -> Dict[str, str]:
    """List every file below ``folder`` with its SHA-256 digest in ``folder/marker``, signed with this user's key
    (unsigned where there is none: such a folder is never overwritten); the listing."""
    files = {p.relative_to(folder).as_posix(): _digest(p) for p in _entries(folder) if p.is_file() and not p.is_symlink()}
    key = signing_key()
    data = dict(format=MANIFEST_FORMAT, files=files, signature=_signature(key, files) if key else None)
    (folder / marker).write_text(json.dumps(data, indent=1) + '\n')
    return files


def _read_manifest(path: Path) -> Optional[Dict[str, str]]:
    """The listing of a marker file: a mapping of relative names to hex digests, signed with this user's key;
    None when it is not one."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    files = data.get('files') if isinstance(data, dict) else None
    if data.get('format') != MANIFEST_FORMAT or not isinstance(files, dict):
        return None
    ok = all(isinstance(k, str) and isinstance(v, str) and len(v) == 64 for k, v in files.items())
    key, signature = signing_key(create=False), data.get('signature')
    signed = key is not None and isinstance(signature, str) and hmac.compare_digest(signature, _signature(key, files))
    return files if ok and signed else None


def unproven_entries(folder: Path, marker: Optional[str]) -> List[str]:
    """The entries of ``folder`` that its marker does not prove the tool wrote (empty: the folder holds only what
    the tool wrote, or nothing). Without a readable marker every entry is unproven."""
    entries = [p for p in _entries(folder) if not (marker and p == folder / marker)]
    listed = _read_manifest(folder / marker) if marker and (folder / marker).is_file() else None
    unproven = []
    for p in entries:
        name = p.relative_to(folder).as_posix()
        if p.is_dir() and not p.is_symlink():
            if not any(p.iterdir()):
                unproven.append(name + '/')
            continue
        if listed is None or p.is_symlink() or not p.is_file() or listed.get(name) != _digest(p):
            unproven.append(name)
    return unproven


@contextmanager
def _swap_lock(out: Path) -> Iterator[None]:
    """An exclusive lock on ``out`` for a check and a swap (filelock, so it holds on every OS), kept in the cache
    folder under a digest of the output's path: nothing is created beside the output."""
    from filelock import FileLock
    from ..training.data import default_cache_dir
    locks = default_cache_dir() / 'locks'
    locks.mkdir(parents=True, exist_ok=True)
    with FileLock(str(locks / f'{hashlib.sha256(str(out).encode()).hexdigest()[:24]}.lock')):
        yield


def recover(out: Path, marker: Optional[str]) -> Optional[str]:
    """Finish a swap that a crash interrupted, under the swap lock: the earlier output moved aside as
    ``.<name>.old-*`` is put back where ``out`` is missing (the crash came between the two renames), and removed
    where ``out`` is there and ``marker`` proves it this tool's (the crash came after the new output was in place);
    anything else stays as it is. What was done, in a line (None: nothing to do)."""
    done = []
    for old in sorted(out.parent.glob(f'.{out.name}.old-*')):
        if not old.is_dir() or old.is_symlink():
            continue
        if not out.exists() and not out.is_symlink():
            old.rename(out)
            done.append(f'put back the earlier {out.name} that an interrupted run had moved aside')
        elif marker and not unproven_entries(old, marker):
            shutil.rmtree(old, ignore_errors=True)
            done.append(f'removed the earlier {out.name} that an interrupted run had already replaced')
    return '; '.join(done) or None


def _refusal(out: Path, overwrite: bool, marker: Optional[str]) -> Optional[str]:
    """Why ``out`` may not be replaced now (None: it may)."""
    if not out.exists() and not out.is_symlink():
        return None
    if out.is_symlink():
        return f'{out} is a symbolic link; choose a new folder for --output'
    if not out.is_dir():
        return f'{out} exists and is not a folder; choose another --output'
    if not any(out.iterdir()):
        return None
    if not overwrite:
        remedy = 'pass --overwrite (overwrite=True) to replace an earlier output of this tool' if marker \
            else 'choose a new folder'
        return f'{out} exists and is not empty: {remedy}'
    foreign = unproven_entries(out, marker)
    if foreign:
        return (f'{out} holds files this tool did not write ({", ".join(foreign[:5])}'
                f'{", ..." if len(foreign) > 5 else ""}); --overwrite replaces only an earlier output of this tool '
                f'(its files listed in a marker signed with this user\'s key): choose another --output')
    return None


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _usual_permissions(folder: Path) -> None:
    """Files and folders as a plain write makes them (0666 / 0777 less the umask): a library that writes through a
    private temporary file (0600) does not leave one file of the output unreadable to the others."""
    mask = _umask()
    for p in _entries(folder):
        if not p.is_symlink():
            os.chmod(p, (0o777 if p.is_dir() else 0o666) & ~mask)


def _resolve(out: Path) -> Path:
    out = Path(os.path.abspath(out))  # '.' and '..' resolved by name, a link in the last part kept
    return out.parent.resolve() / out.name if out.name else out


@contextmanager
def staged_folder(out: Path, overwrite: bool = False, marker: Optional[str] = None,
                  error: Type[Exception] = ValueError) -> Iterator[Path]:
    """A temporary folder beside ``out`` that becomes ``out`` when the block succeeds and is removed otherwise.

    ``marker`` names the manifest, written last, that lists what the block wrote with digests, so that a later
    ``overwrite`` can prove the folder is this tool's. Refusals (checked before the block and again at the swap)
    raise ``error`` with one line; write failures (a full disk, a read-only folder) raise ``Failure`` with one
    line, which a command line exits with status 1, as the trainer does for the same causes.
    """
    out = _resolve(Path(out))
    cwd = Path.cwd().resolve()
    if out == cwd or out in cwd.parents:
        raise error(f'{out} is the working folder or one of its ancestors; choose a new folder for --output')
    if out.parent.is_dir():
        with _swap_lock(out):
            done = recover(out, marker)
        if done:
            print(f'note: {done}.', flush=True)
    why = _refusal(out, overwrite, marker)
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
        if marker:
            write_manifest(stage, marker)
        with _swap_lock(out):
            _swap_in(stage, out, overwrite, marker, error)
    except Exception as e:  # noqa: BLE001 (a failed write; safetensors and torch.save raise their own types)
        if isinstance(e, (error, Failure)) or not (isinstance(e, OSError) or is_disk_full(e, stage)):
            raise
        raise Failure(describe_write_error(e, out)) from e
    finally:
        shutil.rmtree(stage, ignore_errors=True)


def _swap_in(stage: Path, out: Path, overwrite: bool, marker: Optional[str], error: Type[Exception]) -> None:
    """Rename ``stage`` to ``out``. An earlier ``out`` is moved aside first and checked where it lies (nobody can
    add to it there): if it is not replaceable it goes back untouched and ``error`` is raised; else it is removed
    after the rename, or put back when the rename fails."""
    why = _refusal(out, overwrite, marker)
    if why:
        raise error(why)
    old = stage.with_name(stage.name.replace('.tmp-', '.old-', 1))
    if out.exists():
        out.rename(old)
        why = _refusal(old, overwrite, marker)
        if why:
            old.rename(out)
            raise error(why.replace(str(old), str(out)))
    try:
        stage.rename(out)
    except OSError as e:
        if old.exists():
            old.rename(out)
        if out.exists():  # made by someone else between the check and the rename
            raise error(f'{out} appeared while this tool was writing it: nothing was replaced') from e
        raise
    with contextlib.suppress(OSError):
        shutil.rmtree(old)
