"""Output folders that appear whole or not at all, and replace only what a tool wrote itself.

A tool writes into a temporary folder beside its output and renames it into place when everything is
written; a failure removes the temporary folder and leaves the output as it was. A folder written with a
``marker`` holds a small JSON file of that name listing the files the tool wrote: ``overwrite`` replaces
such a folder (and an empty one) but never a folder with other files, the working folder or one of its
ancestors.
"""
import json
import os
import shutil
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, Optional, Type

from ..training.files import describe_write_error, is_disk_full

__all__ = ['staged_folder']


def _check_replaceable(out: Path, marker: Optional[str], error: Type[Exception]) -> None:
    """Raise ``error`` unless ``out`` is an empty folder or one this tool wrote (its marker lists every entry)."""
    if not out.is_dir():
        raise error(f'{out} exists and is not a folder; choose another --out')
    entries = {p.name for p in out.iterdir()}
    if not entries:
        return
    listed = None
    if marker and marker in entries:
        try:
            listed = set(json.loads((out / marker).read_text())['files'])
        except (OSError, ValueError, KeyError, TypeError):
            listed = None
    if listed is None:
        raise error(f'{out} holds files this tool did not write; --overwrite replaces only an earlier '
                    f'output of this tool: choose another --out')
    foreign = sorted(entries - listed - {marker})
    if foreign:
        raise error(f'{out} holds files this tool did not write ({", ".join(foreign[:5])}); --overwrite '
                    f'replaces only an earlier output of this tool: choose another --out')


def _check_target(out: Path, overwrite: bool, marker: Optional[str], error: Type[Exception]) -> None:
    cwd = Path.cwd().resolve()
    if out == cwd or out in cwd.parents:
        raise error(f'{out} is the working folder or one of its ancestors; choose a new folder for --out')
    if not out.exists() and not out.is_symlink():
        return
    if out.is_symlink():
        raise error(f'{out} is a symbolic link; choose a new folder for --out')
    if not overwrite:
        if out.is_dir() and not any(out.iterdir()):
            return
        remedy = 'pass --overwrite (overwrite=True) to replace an earlier output of this tool' if marker \
            else 'choose a new folder'
        raise error(f'{out} exists and is not empty: {remedy}')
    _check_replaceable(out, marker, error)


@contextmanager
def staged_folder(out: Path, overwrite: bool = False, marker: Optional[str] = None,
                  error: Type[Exception] = ValueError) -> Iterator[Path]:
    """A temporary folder beside ``out`` that becomes ``out`` when the block succeeds and is removed otherwise.

    ``marker`` names the file, written last, that lists what the block wrote, so that a later ``overwrite``
    recognises the folder. Refusals and write failures (a full disk included) raise ``error`` with one line.
    """
    out = Path(os.path.abspath(out))  # '.' and '..' resolved by name, a link in the last part kept
    out = out.parent.resolve() / out.name if out.name else out
    _check_target(out, overwrite, marker, error)
    stage = out.with_name(f'.{out.name}.tmp-{os.getpid()}')
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        stage.mkdir()
    except OSError as e:
        raise error(describe_write_error(e, out)) from e
    try:
        yield stage
        if marker:
            files = sorted(p.name for p in stage.iterdir())
            (stage / marker).write_text(json.dumps({'files': files}) + '\n')
        _swap_in(stage, out)
    except Exception as e:  # noqa: BLE001 (a failed write; safetensors and torch.save raise their own types)
        if isinstance(e, error) or not (isinstance(e, OSError) or is_disk_full(e, stage)):
            raise
        raise error(describe_write_error(e, out)) from e
    finally:
        shutil.rmtree(stage, ignore_errors=True)


def _swap_in(stage: Path, out: Path) -> None:
    """Rename ``stage`` to ``out``; an earlier ``out`` (already checked replaceable) is removed after, or put back
    when the rename fails."""
    old = out.with_name(f'.{out.name}.old-{os.getpid()}')
    if out.exists():
        out.rename(old)
    try:
        stage.rename(out)
    except OSError:
        if old.exists():
            old.rename(out)
        raise
    shutil.rmtree(old, ignore_errors=True)
