"""Image folders: ``<split>/<class>/.../<image>``, read the way torchvision's ImageFolder defines them.

- The class of an image is the top-level folder under the split it lies in, however deep it lies
  (``train/a/b/x.png`` is class ``a``); hidden folders and files are ignored.
- Folder links are followed, except a link to a folder being walked or to one of its ancestors (a loop):
  that link is skipped, and the skipped links are reported.
- A class folder without images, and an image file of zero bytes, are refused with their names.
- ``fingerprint`` digests every image's relative path, label and bytes, so a cache keyed on it is never read for
  other content, whatever the files' sizes and times (files swapped between classes keep both).
"""
import functools
import hashlib
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, List, Sequence, Tuple

import numpy as np
from PIL import Image
from torch.utils.data import Dataset

from ...cli import listed
from ...models.images import check_image_size, convert_image, upright
from ...models.pretrained import file_sha256
from .names import DatasetError

__all__ = ['DatasetError', 'EVAL_SPLIT_DIRS', 'IMAGE_EXTENSIONS', 'FolderScan', 'scan_split', 'folder_classes',
           'FolderDataset', 'open_image', 'stack_same_size']

EVAL_SPLIT_DIRS = ('val', 'validation', 'test')  # the evaluation split: the first of these that a dataset has
IMAGE_EXTENSIONS = frozenset(('.png', '.jpg', '.jpeg', '.bmp', '.gif', '.tif', '.tiff', '.webp', '.ppm', '.pgm'))


@dataclass
class FolderScan:
    """The images of one split (``root``): (path, label) in a stable order, the loops skipped, and the digest of their
    content, computed when first asked (it reads every file, as a first decode does)."""
    samples: List[Tuple[str, int]]
    skipped_links: List[str] = field(default_factory=list)
    root: str = ''

    @functools.cached_property
    def fingerprint(self) -> str:
        """SHA-256 of every image's path under ``root``, label and SHA-256."""
        digest = hashlib.sha256()
        for path, label in self.samples:
            digest.update(f'{os.path.relpath(path, self.root)}|{label}|{file_sha256(path)}\n'.encode())
        return digest.hexdigest()


def folder_classes(split_dir: Path) -> List[str]:
    """The class names of a split: its top-level, non-hidden folders (links to folders included), sorted."""
    return sorted(p.name for p in Path(split_dir).iterdir() if p.is_dir() and not p.name.startswith('.'))


def _walk(folder: Path, active: Tuple[str, ...], files: List[Tuple[str, os.stat_result]], skipped: List[str]) -> None:
    """The image files under ``folder`` (depth first, sorted); ``active`` holds the real paths being walked."""
    for entry in sorted(os.scandir(folder), key=lambda e: e.name):
        if entry.name.startswith('.'):
            continue
        if entry.is_dir(follow_symlinks=True):
            real = os.path.realpath(entry.path)
            if any(a == real or a.startswith(real + os.sep) for a in active):  # back into a folder being walked
                skipped.append(entry.path)
                continue
            _walk(Path(entry.path), active + (real,), files, skipped)
        elif os.path.splitext(entry.name)[1].lower() in IMAGE_EXTENSIONS and entry.is_file(follow_symlinks=True):
            files.append((entry.path, entry.stat(follow_symlinks=True)))


def scan_split(split_dir: Path, classes: Sequence[str]) -> FolderScan:
    """The images of ``split_dir`` labelled by their top-level folder among ``classes`` (others are not read)."""
    split_dir = Path(split_dir)
    samples, skipped, empty, zero = [], [], [], []
    for label, cls in enumerate(classes):
        root = split_dir / cls
        if not root.is_dir():
            continue
        files: List[Tuple[str, os.stat_result]] = []
        _walk(root, (os.path.realpath(root),), files, skipped)
        if not files:
            empty.append(f'{root}/')
        for path, st in files:
            if st.st_size == 0:
                zero.append(path)
            samples.append((path, label))
    if zero:
        raise DatasetError(f'{len(zero)} image file(s) of zero bytes in {split_dir}: {listed(zero, 5)}; remove or replace them.')
    if empty:
        raise DatasetError(f'class folder(s) without images in {split_dir}: {", ".join(empty[:5])}; every class needs '
                          f'images (extensions {", ".join(sorted(IMAGE_EXTENSIONS))}), or remove the folder.')
    return FolderScan(samples, skipped, str(split_dir))


class FolderDataset(Dataset):
    """(PIL image in ``img_mode``, label) of scanned samples; an unreadable image raises ``DatasetError`` naming it."""

    def __init__(self, samples: Sequence[Tuple[str, int]], classes: Sequence[str], img_mode: str = 'RGB') -> None:
        self.samples = list(samples)
        self.classes = list(classes)
        self.img_mode = img_mode

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, index: int) -> Tuple[Any, int]:
        path, label = self.samples[index]
        return open_image(path, path, self.img_mode), label


def open_image(source: Any, name: str, img_mode: str) -> Image.Image:
    """The image in ``source`` (a path or a binary file) in ``img_mode``; one that cannot be read, or is too large,
    raises ``DatasetError`` naming it (``name``)."""
    try:
        with Image.open(source) as im:
            check_image_size(*im.size, what=f'image {name}')  # from the header, before anything is decoded
            im.load()
            return convert_image(upright(im), img_mode)  # as it is shown: turned by its EXIF orientation
    except (OSError, ValueError, Image.DecompressionBombError) as e:
        raise DatasetError(f'cannot read image {name}: {e}') from e


def stack_same_size(images: Sequence[np.ndarray], what: str) -> np.ndarray:
    """The decoded images of a split as one array; images of different sizes (``what`` holds them) are refused."""
    shapes = sorted({im.shape for im in images})
    if len(shapes) > 1:
        raise DatasetError(f'the images of {what} differ in size ({shapes[:3]}); an in-memory dataset needs one size.')
    return np.stack(images)
