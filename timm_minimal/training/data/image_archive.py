"""An image-folder export in a ``.tar.gz`` (CIFAR-10's ``cifar10-jpeg*.tar.gz``), decoded into uint8 arrays straight
from the archive, without extracting a file: ``<split>/<class>/.../<image>``, or the same under one top folder.

- The rules are the image folder's (``image_folder``): classes are ``train/``'s class folders, sorted; the
  evaluation split is the first of ``val/``, ``validation/``, ``test/``; hidden entries are ignored; an image of
  zero bytes is refused; the samples come in the order a folder walk gives.
- The arrays are cached in one ``.npz`` under a digest of the archive's bytes: a copy of the archive (another path,
  a newer modification time) reads the same cache, another archive never does. The cache of the archive that a path
  held before is removed once the new one's is written, and so is a folder that an earlier version extracted it to.
  Writing 60,000 small files cost about a minute on a 2-core machine, where reading the archive's members takes
  about 5 s.
"""
import hashlib
import io
import logging
import os
import shutil
import tarfile
import zipfile
import zlib
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import numpy as np

from ...cli import progress
from .names import DatasetError, damaged_file
from ..run.files import read_derived_npz, write_file_atomic
from .image_folder import EVAL_SPLIT_DIRS, IMAGE_EXTENSIONS, open_image, stack_same_size

__all__ = ['archive_key', 'read_image_archive', 'read_decoded']

_logger = logging.getLogger(__name__)


def archive_key(archive: Path) -> str:
    """A digest of the archive's bytes (a few hundredths of a second for CIFAR-10's 19 MB)."""
    digest = hashlib.sha256()
    with open(archive, 'rb') as f:
        for chunk in iter(lambda: f.read(1 << 20), b''):
            digest.update(chunk)
    return digest.hexdigest()[:16]


def _image_members(archive: Path) -> Dict[Tuple[str, ...], bytes]:
    """The bytes of every image file in the archive by its path's parts, below the one top folder if the export
    has one; hidden entries and other files are left out."""
    files = {}
    try:
        with tarfile.open(archive) as tar:
            for member in progress(tar, desc=f'reading {archive.name} (once)', unit='file'):
                parts = tuple(p for p in member.name.split('/') if p not in ('', '.'))
                if member.isfile() and parts and os.path.splitext(parts[-1])[1].lower() in IMAGE_EXTENSIONS \
                        and not any(p.startswith('.') for p in parts):
                    files[parts] = tar.extractfile(member).read()
    except (tarfile.TarError, EOFError, zlib.error, OSError) as e:  # truncated, not a tar.gz, unreadable
        raise damaged_file(archive, e, ' as a .tar.gz archive') from e
    tops = {parts[0] for parts in files}
    if len(tops) == 1 and not any(parts[0] == 'train' for parts in files):
        files = {parts[1:]: data for parts, data in files.items()}
    return files


def _splits(archive: Path, files: Dict[Tuple[str, ...], bytes]) -> Tuple[List[str], str]:
    """The classes (``train/``'s) and the evaluation split's name, with the image folder's refusals."""
    by_split: Dict[str, set] = {}
    for parts in files:
        if len(parts) >= 3:
            by_split.setdefault(parts[0], set()).add(parts[1])
    evals = [d for d in EVAL_SPLIT_DIRS if d in by_split]
    if 'train' not in by_split or not evals:
        raise DatasetError(f'{archive} must hold train/ and one of {", ".join(d + "/" for d in EVAL_SPLIT_DIRS)} '
                           f'with one subfolder of images per class; found {sorted(d + "/" for d in by_split)}.')
    classes = sorted(by_split['train'])
    extra = sorted(by_split[evals[0]] - set(classes))
    if extra:
        raise DatasetError(f'{archive}: {evals[0]}/ has classes that train/ lacks: {extra}.')
    if len(classes) < 2:
        raise DatasetError(f'{archive}: train/ holds {len(classes)} class folder: a classifier needs at least two.')
    return classes, evals[0]


def _decode_split(archive: Path, files: Dict[Tuple[str, ...], bytes], split: str,
                  classes: List[str]) -> Tuple[np.ndarray, np.ndarray]:
    """The images of ``split`` as one uint8 array (N, H, W, 3) and their labels, in the order of a folder walk."""
    label = {c: i for i, c in enumerate(classes)}
    samples = sorted((label[p[1]], p) for p in files if len(p) >= 3 and p[0] == split and p[1] in label)
    zero = ['/'.join(p) for _, p in samples if not files[p]]
    if zero:
        raise DatasetError(f'{len(zero)} image file(s) of zero bytes in {archive}: {", ".join(zero[:5])}.')
    images = [np.asarray(open_image(io.BytesIO(files[p]), f'{archive}:{"/".join(p)}', 'RGB'))
              for _, p in progress(samples, desc=f'decoding {split}/ of {archive.name} (once)', unit='image')]
    return stack_same_size(images, str(archive)), np.asarray([lab for lab, _ in samples], dtype=np.int64)


def _decode(archive: Path) -> Dict[str, np.ndarray]:
    files = _image_members(archive)
    classes, eval_split = _splits(archive, files)
    tx, ty = _decode_split(archive, files, 'train', classes)
    ex, ey = _decode_split(archive, files, eval_split, classes)
    return dict(train_images=tx, train_labels=ty, eval_images=ex, eval_labels=ey, classes=np.asarray(classes),
                eval_split=np.asarray(eval_split), archive=np.asarray(str(archive.resolve())))


def read_image_archive(archive: Path, cache_dir: Path) -> Tuple[Dict[str, np.ndarray], Path]:
    """The arrays of ``archive`` (``_decode``'s) and the cache file they are kept in, decoded on the first read."""
    stem = archive.name[:-len('.tar.gz')] if archive.name.endswith('.tar.gz') else archive.stem
    try:
        key = archive_key(archive)
    except OSError as e:  # unreadable: permissions, a folder of that name
        raise DatasetError(f'cannot read {archive}: {e.strerror or e}.') from e
    npz = Path(cache_dir) / f'{stem}-{key}.npz'
    arrays = read_decoded(npz, ('classes', 'eval_split')) if npz.is_file() else None
    if arrays is None:
        _logger.debug(f'Decoding {archive} into {npz} (once)')
        arrays = _decode(archive)
        npz.parent.mkdir(parents=True, exist_ok=True)
        write_file_atomic(npz, lambda tmp: np.savez(tmp, **arrays), suffix='.tmp.npz')
        _drop_replaced(npz, archive.resolve(), stem)
    return arrays, npz


def read_decoded(npz: Path, extra: Tuple[str, ...] = ()) -> Optional[Dict[str, np.ndarray]]:
    """The decoded splits kept in ``npz`` (``train_images``, ``train_labels``, ``eval_images``, ``eval_labels`` and
    the ``extra`` keys) where they are what the loaders write: uint8 images (N, H, W, C), one integer label each
    (``files.read_derived_npz``: else None, with a one-line warning, and the caller decodes the images anew)."""
    def problem(arrays: Dict[str, np.ndarray]) -> Optional[str]:
        missing = [k for k in ('train_images', 'train_labels', 'eval_images', 'eval_labels', *extra) if k not in arrays]
        bad = [s for s in ('train', 'eval') if not missing and (
            arrays[f'{s}_images'].dtype != np.uint8 or arrays[f'{s}_images'].ndim != 4
            or arrays[f'{s}_labels'].dtype.kind not in 'iu'
            or arrays[f'{s}_labels'].shape != arrays[f'{s}_images'].shape[:1])]
        return f'no {", ".join(missing)}' if missing else f'the {" and ".join(bad)} arrays do not match' if bad \
            else None
    return read_derived_npz(npz, problem)


def _names_archive(entry: Path, archive: Path) -> bool:
    """Whether ``entry``, a cache file of this module or a folder an earlier version extracted to, was made from
    the archive at the path ``archive`` (its ``archive`` array, or the folder's ``.complete``, names it)."""
    try:
        if entry.is_file() and entry.suffix == '.npz':
            with np.load(entry) as d:
                return 'archive' in d.files and str(d['archive']) == str(archive)
        marker = entry / '.complete'
        return entry.is_dir() and marker.is_file() and Path(marker.read_text().strip()).resolve() == archive
    except (OSError, ValueError, EOFError, zipfile.BadZipFile):  # not a file of ours: leave it
        return False


def _drop_replaced(kept: Path, archive: Path, stem: str) -> None:
    """Remove what the archive that the path ``archive`` held before left in the cache: its arrays, and the folder
    an earlier version extracted it to (hundreds of MB for CIFAR-10); nothing will read them again. Only entries
    that name this path are touched, each renamed aside first, so that a reader never sees half of one."""
    for entry in kept.parent.glob(f'{stem}-*'):
        if entry == kept or entry.is_symlink() or not _names_archive(entry, archive):
            continue
        aside = entry.with_name(f'.{entry.name}.{os.getpid()}.replaced')
        try:
            os.replace(entry, aside)
        except OSError:  # another process removed it first
            continue
        if aside.is_dir():
            shutil.rmtree(aside, ignore_errors=True)
        else:
            aside.unlink(missing_ok=True)
