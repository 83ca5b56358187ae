"""Datasets, transforms and loaders for training the minimal transformers.

A dataset is named by ``--dataset``:

- ``mnist``: the four original idx files (``train-images-idx3-ubyte[.gz]`` ...) under ``<data-dir>``,
  ``<data-dir>/MNIST/raw`` or ``<data-dir>/raw`` (the ``torchvision.datasets.MNIST`` layout), else
  downloaded with torchvision. Held in memory.
- ``mnist-sample``: the first 20,000 training and 1,000 test digits of MNIST, shipped with the package:
  training without any download, with MNIST's tag and classes. Held in memory.
- ``cifar10``: a JPEG image-folder export (``cifar10-jpeg*.tar.gz`` under ``<data-dir>`` or
  ``<data-dir>/CIFAR10``, decoded once into the cache folder), an extracted image folder, the
  original ``cifar-10-batches-py``, else downloaded with torchvision. Held in memory.
- ``imagenet``: the standard ``train/`` and ``val/`` image folders under ``<data-dir>``.
- a path to any image folder with ``train/`` and ``val/`` (or ``validation/`` or ``test/``)
  subfolders, one subfolder per class, any number of classes.
- a name for timm's dataset factory (``timm.data.create_dataset``): ``hfds/<name>`` (Hugging Face
  datasets), ``hfids/<name>``, ``wds/<name>`` (webdataset shards), ``tfds/<name>``, ``torch/<name>``.

Every dataset yields PIL images; the image transforms are timm's (``create_transform``) and return
uint8 tensors: normalisation, random erasing and mixup run on whole batches on the training device
(as timm's own prefetching loader does). Random augmentation is a pure function of (seed, epoch,
sample index): the same images come out whatever the number of workers or processes, and a run
resumed in the middle of an epoch sees exactly the batches an uninterrupted run would.
"""
import gzip
import hashlib
import logging
import math
import zlib
from contextlib import contextmanager
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple, Union

import numpy as np
from PIL import Image
from timm.data import create_dataset, create_transform
from timm.data.auto_augment import AugmentOp, posterize
from torch.utils.data import Dataset, IterableDataset
from torchvision import transforms
from torchvision.datasets import CIFAR10, MNIST

from ...cli import listed
from ...models.datasets import CIFAR10_CLASSES, DATASETS, MIN_CROP_PCT, MNIST_CLASSES, SAMPLES, tag_for_kind
from ..options import RunOptions
from ..run.files import missing_folders, remove_empty, write_file_atomic
from ...machine import default_cache_dir
from .names import BUILTIN_DATASETS, TIMM_FACTORY_PREFIXES, DatasetError, damaged_file, dataset_kind
from .image_archive import read_decoded, read_image_archive
from .image_folder import EVAL_SPLIT_DIRS, FolderDataset, FolderScan, folder_classes, scan_split, stack_same_size
from ...models.images import check_image_size

_logger = logging.getLogger(__name__)

__all__ = [
    'BUILTIN_DATASETS', 'TIMM_FACTORY_PREFIXES', 'CIFAR10_CLASSES', 'DatasetError', 'ImageData', 'ArrayImageDataset',
    'load_dataset', 'load_run_data', 'load_mnist', 'load_cifar10', 'find_image_folder_splits', 'build_transforms',
    'subset_indices', 'augment_ops', 'posterize_to_black', 'posterize_on_any_pillow',
]


# -- datasets --------------------------------------------------------------------------------------

class ArrayImageDataset(Dataset):
    """Images held in memory as a uint8 array (N, H, W) or (N, H, W, C); yields (PIL image, label)."""

    def __init__(self, images: np.ndarray, labels: np.ndarray, classes: Sequence[str]) -> None:
        if images.dtype != np.uint8 or images.ndim not in (3, 4):
            raise ValueError(f'images must be uint8 (N, H, W) or (N, H, W, C), got {images.dtype} {images.shape}')
        if len(images) != len(labels):
            raise ValueError(f'{len(images)} images but {len(labels)} labels')
        self.images = images
        self.labels = np.asarray(labels, dtype=np.int64)
        outside = (self.labels < 0) | (self.labels >= len(classes))
        if outside.any():  # the loss would end in an IndexError (or a device-side assert on a GPU)
            raise DatasetError(f'{int(outside.sum()):,} label(s) lie outside the {len(classes)} classes 0..'
                               f'{len(classes) - 1} (e.g. {int(self.labels[outside][0])}): the labels do not belong '
                               f'to these images\' classes')
        self.classes = list(classes)

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, index: int) -> Tuple[Image.Image, int]:
        return Image.fromarray(self.images[index]), int(self.labels[index])

    def subset(self, indices: np.ndarray) -> 'ArrayImageDataset':
        return ArrayImageDataset(self.images[indices], self.labels[indices], self.classes)


class IndexSubset(Dataset):
    """A fixed subset of a map-style dataset (keeps ``classes``)."""

    def __init__(self, dataset: Dataset, indices: np.ndarray) -> None:
        self.dataset = dataset
        self.indices = [int(i) for i in indices]
        self.classes = getattr(dataset, 'classes', None)

    def __len__(self) -> int:
        return len(self.indices)

    def __getitem__(self, index: int):
        return self.dataset[self.indices[index]]


@dataclass
class ImageData:
    """A resolved dataset: train and evaluation splits yielding (PIL image, label), plus what describes it."""
    name: str
    kind: str  # 'mnist', 'mnist-sample', 'cifar10', 'imagenet', 'folder' or 'timm'
    train: Dataset
    eval: Dataset
    classes: Optional[List[str]]
    num_classes: int
    source: str  # where the data was read from
    eval_split: str = 'test'
    in_memory: bool = False
    info: Dict[str, Any] = field(default_factory=dict)
    # per split ('train', 'eval'), a digest of the images' content where known, or the FolderScan of an image folder
    # read from disk (its digest reads every file, so it is computed when a cache asks): the key of the decoded-image
    # caches, so that a cache is never read for other images
    fingerprints: Dict[str, Any] = field(default_factory=dict)

    def fingerprint(self, split: str) -> Optional[str]:
        """The content digest of ``split`` ('train' or 'eval'), None where it is not known."""
        value = self.fingerprints.get(split)
        return getattr(value, 'fingerprint', value) or None

    @property
    def default_tag(self) -> str:
        return tag_for_kind(self.kind)

    def describe(self) -> Dict[str, Any]:
        return dict(
            name=self.name, kind=self.kind, source=self.source, num_classes=self.num_classes,
            classes=self.classes, train_samples=dataset_len(self.train), eval_samples=dataset_len(self.eval),
            eval_split=self.eval_split, **self.info,
        )


def dataset_len(ds: Any) -> Optional[int]:
    """The number of samples of a dataset; None for a stream (an iterable without len)."""
    try:
        return len(ds)
    except TypeError:
        return None


# -- MNIST -----------------------------------------------------------------------------------------

_MNIST_FILES = {
    'train': ('train-images-idx3-ubyte', 'train-labels-idx1-ubyte'),
    'test': ('t10k-images-idx3-ubyte', 't10k-labels-idx1-ubyte'),
}


def _read_idx(path: Path) -> np.ndarray:
    """An idx file of unsigned bytes, gzipped or not, read in memory. Not torchvision's
    ``read_sn3_pascalvincent_tensor``: it opens only uncompressed files (its MNIST class decompresses a copy
    first) and checks the header with ``assert``, which ``python -O`` drops; a bad file here is one line."""
    opener = gzip.open if path.suffix == '.gz' else open
    try:
        with opener(path, 'rb') as f:
            data = f.read()
    except (EOFError, zlib.error, OSError) as e:  # a truncated download, not gzip, unreadable (gzip's errors are these)
        raise damaged_file(path, e) from e
    magic = int.from_bytes(data[0:4], 'big')
    if magic >> 8 != 0x08:  # unsigned byte data
        raise DatasetError(f'{path} is not an idx file of unsigned bytes (magic {magic:#x}).')
    ndim = magic & 0xFF
    shape = tuple(int.from_bytes(data[4 + 4 * i:8 + 4 * i], 'big') for i in range(ndim))
    arr = np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim)
    if arr.size != int(np.prod(shape)):
        raise DatasetError(f'{path}: expected {shape} values, found {arr.size}.')
    return arr.reshape(shape)


def _find_mnist_dir(root: Path) -> Optional[Path]:
    for cand in (root, root / 'MNIST' / 'raw', root / 'raw', root / 'mnist' / 'raw', root / 'MNIST'):
        if all(any((cand / (n + ext)).is_file() for ext in ('', '.gz')) for pair in _MNIST_FILES.values() for n in pair):
            return cand
    return None


def _one_line(e: BaseException, limit: int = 300) -> str:
    text = ' '.join(str(e).split())
    return text if len(text) <= limit else text[:limit] + ' ...'


def _hint(download_hint: str) -> str:
    return f', or allow the download ({download_hint})' if download_hint else ''


@contextmanager
def removed_on_failure(folder: Path) -> Iterator[None]:
    """On an exception in the block, remove the folders up to ``folder`` that did not exist before it and are
    still empty (a failed download leaves no empty ``data/MNIST/raw``); nothing else is touched."""
    new = missing_folders(folder)
    try:
        yield
    except BaseException:
        remove_empty(new)
        raise


def load_mnist(root: Union[str, Path], download: bool = True, download_hint: str = '',
               data_option: str = '--data-dir') -> ImageData:
    """MNIST from the idx files under ``root`` (torchvision's layout), else downloaded by torchvision; a failed
    download removes the folders it created. ``download_hint`` and ``data_option`` name the calling tool's
    options that allow a download and that point at the data, for the message of a missing dataset."""
    root = Path(root)
    raw = _find_mnist_dir(root)
    if raw is None:
        searched = ', '.join(str(p) for p in (root, root / 'MNIST' / 'raw', root / 'raw'))
        if not download:
            raise DatasetError(
                f'MNIST not found: looked for train-images-idx3-ubyte[.gz] and the three other idx files in '
                f'{searched}; pass {data_option} pointing at them' + _hint(download_hint) + '.')
        try:
            with removed_on_failure(root / 'MNIST' / 'raw'):
                MNIST(str(root), train=True, download=True)
                MNIST(str(root), train=False, download=True)
        except Exception as e:  # noqa: BLE001 (re-raised with context)
            raise DatasetError(f'MNIST not found in {searched} and the download into {root} failed: '
                               f'{_one_line(e)}') from e
        raw = _find_mnist_dir(root)
        assert raw is not None

    def read(split: str) -> ArrayImageDataset:
        paths = []
        for n in _MNIST_FILES[split]:
            p = raw / n
            paths.append(p if p.is_file() else raw / (n + '.gz'))
        try:
            return ArrayImageDataset(_read_idx(paths[0]), _read_idx(paths[1]), list(MNIST_CLASSES))
        except DatasetError as e:
            raise DatasetError(f'{paths[1]}: {e}') from None

    train, test = read('train'), read('test')
    return ImageData(
        name='mnist', kind='mnist', train=train, eval=test, classes=train.classes,
        num_classes=DATASETS['mnist'].num_classes,
        source=str(raw), eval_split='test', in_memory=True)


def load_sample(kind: str) -> ImageData:
    """A dataset sample shipped with the package (``mnist-sample``): its arrays, read from ``timm_minimal/data``."""
    info = SAMPLES[kind]
    with resources.files('timm_minimal').joinpath(f'data/{info.bundled}').open('rb') as f:
        arrays = dict(np.load(f))
    classes = list(info.label_names)
    train = ArrayImageDataset(arrays['train_images'], arrays['train_labels'], classes)
    test = ArrayImageDataset(arrays['test_images'], arrays['test_labels'], classes)
    return ImageData(name=kind, kind=kind, train=train, eval=test, classes=classes, num_classes=info.num_classes,
                     source=f'timm_minimal/data/{info.bundled} (shipped with the package)', eval_split='test',
                     in_memory=True)


# -- image folders ---------------------------------------------------------------------------------

def find_image_folder_splits(root: Union[str, Path]) -> Tuple[Path, Path]:
    """The ``train/`` and ``val/`` (or ``validation/`` or ``test/``) folders of an image-folder dataset."""
    root = Path(root)
    if not root.is_dir():
        raise DatasetError(f'Image folder {root} does not exist.')
    train = root / 'train'
    evals = [root / d for d in EVAL_SPLIT_DIRS if (root / d).is_dir()]
    if not train.is_dir() or not evals:
        found = sorted(p.name + '/' for p in root.iterdir() if p.is_dir())
        raise DatasetError(
            f'Image folder {root} must contain train/ and one of {", ".join(d + "/" for d in EVAL_SPLIT_DIRS)} '
            f'(each with one subfolder per class); found {found or "no subfolders"}.')
    return train, evals[0]


def _folder_classes(split_dir: Path) -> List[str]:
    classes = folder_classes(split_dir)
    if not classes:
        raise DatasetError(f'{split_dir} holds no class subfolders (expected {split_dir}/<class>/<image>).')
    return classes


def scan_image_folder(root: Union[str, Path]) -> Tuple[List[str], str, FolderScan, FolderScan]:
    """Classes (``train/``'s top-level folders), the evaluation split's name and the scans of both splits."""
    train_dir, eval_dir = find_image_folder_splits(root)
    classes = _folder_classes(train_dir)
    extra = sorted(set(folder_classes(eval_dir)) - set(classes))
    if extra:
        raise DatasetError(f'{eval_dir} has classes that {train_dir} lacks: {extra}.')
    if len(classes) < 2:
        raise DatasetError(f'{train_dir} holds {len(classes)} class folder ({classes[0]}/): a classifier needs at '
                           f'least two classes, one subfolder each.')
    scans = scan_split(train_dir, classes), scan_split(eval_dir, classes)
    skipped = scans[0].skipped_links + scans[1].skipped_links
    if skipped:
        _logger.warning(f'Skipped {len(skipped)} folder link(s) that lead back into a folder being read (a loop): '
                        + listed(skipped, 5))
    if not scans[1].samples:
        raise DatasetError(f'{eval_dir} holds no images.')
    return classes, eval_dir.name, scans[0], scans[1]


def load_image_folder(root: Union[str, Path], kind: str = 'folder', name: Optional[str] = None,
                      img_mode: str = 'RGB') -> ImageData:
    """An image-folder dataset read from disk (``timm_minimal.training.data.image_folder``: the top-level folder of an
    image is its class); classes come from ``train/``."""
    classes, eval_split, train, evald = scan_image_folder(root)
    return ImageData(
        name=name or Path(root).name, kind=kind, train=FolderDataset(train.samples, classes, img_mode),
        eval=FolderDataset(evald.samples, classes, img_mode), classes=classes, num_classes=len(classes),
        source=str(Path(root)), eval_split=eval_split, fingerprints=dict(train=train, eval=evald))


def _decode(samples: Sequence[Tuple[str, int]], classes: Sequence[str]) -> Tuple[np.ndarray, np.ndarray]:
    ds = FolderDataset(samples, classes, 'RGB')
    images = stack_same_size([np.asarray(ds[i][0]) for i in range(len(ds))], f"{ds.samples[0][0]}'s folder")
    return images, np.asarray([label for _, label in samples], dtype=np.int64)


def load_image_folder_in_memory(root: Path, cache_dir: Path, name: str, kind: str) -> ImageData:
    """A small image folder decoded once into uint8 arrays, cached in ``cache_dir`` under a digest of its content."""
    classes, eval_split, train, evald = scan_image_folder(root)
    key = hashlib.sha256(f'{train.fingerprint}|{evald.fingerprint}'.encode()).hexdigest()[:16]
    npz = Path(cache_dir) / f'{name}-folder-{key}.npz'
    arrays = read_decoded(npz) if npz.is_file() else None
    if arrays is None:
        tx, ty = _decode(train.samples, classes)
        ex, ey = _decode(evald.samples, classes)
        arrays = dict(train_images=tx, train_labels=ty, eval_images=ex, eval_labels=ey)
        npz.parent.mkdir(parents=True, exist_ok=True)
        write_file_atomic(npz, lambda tmp: np.savez(tmp, **arrays), suffix='.tmp.npz')
    return _arrays_data(name, kind, arrays, list(classes), str(root), eval_split,
                        dict(train=train.fingerprint, eval=evald.fingerprint))


def _arrays_data(name: str, kind: str, arrays: Dict[str, np.ndarray], classes: List[str], source: str,
                 eval_split: str, fingerprints: Dict[str, str]) -> ImageData:
    """An in-memory dataset of decoded arrays (``train_images``, ``train_labels``, ``eval_images``, ``eval_labels``)."""
    return ImageData(name=name, kind=kind, train=ArrayImageDataset(arrays['train_images'], arrays['train_labels'], classes),
                     eval=ArrayImageDataset(arrays['eval_images'], arrays['eval_labels'], classes),
                     classes=classes, num_classes=len(classes), source=source, eval_split=eval_split,
                     in_memory=True, fingerprints=fingerprints)


# -- CIFAR-10 --------------------------------------------------------------------------------------

def load_cifar10(root: Union[str, Path], cache_dir: Optional[Union[str, Path]] = None, download: bool = True,
                 download_hint: str = '', data_option: str = '--data-dir') -> ImageData:
    """CIFAR-10 held in memory, from the first of these found under ``root`` (or ``root/CIFAR10``):

    a JPEG image-folder export archive ``cifar10-jpeg*.tar.gz`` (decoded once into ``cache_dir``),
    an extracted image folder with ``train/`` and ``test/``, torchvision's ``cifar-10-batches-py``;
    else the original is downloaded by torchvision into ``root``.
    """
    root = Path(root)
    cache_dir = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    bases = [root, root / 'CIFAR10', root / 'cifar10', root / 'cifar-10']
    for base in bases:
        if not base.is_dir():
            continue
        archives = sorted(base.glob('cifar10*.tar.gz')) + sorted(base.glob('cifar-10*.tar.gz'))
        archives = [a for a in archives if 'python' not in a.name]
        if archives:
            data = _load_image_archive(archives[0], cache_dir, 'cifar10', 'cifar10')
            _check_cifar_classes(data)
            return data
        if (base / 'train').is_dir() and any((base / d).is_dir() for d in EVAL_SPLIT_DIRS):
            data = load_image_folder_in_memory(base, cache_dir, 'cifar10', 'cifar10')
            _check_cifar_classes(data)
            return data
        if (base / 'cifar-10-batches-py').is_dir():
            return _cifar_torchvision(base, download=False)
    if not download:
        raise DatasetError(
            f'CIFAR-10 not found under {root} or {root}/CIFAR10: expected cifar10-jpeg*.tar.gz, an image folder '
            f'with train/ and test/, or cifar-10-batches-py; fix {data_option}' + _hint(download_hint) + '.')
    return _cifar_torchvision(root, download=True)


def _load_image_archive(archive: Path, cache_dir: Path, name: str, kind: str) -> ImageData:
    """An image-folder export archive held in memory (``image_archive``: decoded once, without extracting it)."""
    arrays, npz = read_image_archive(archive, cache_dir)
    classes = [str(c) for c in arrays['classes']]
    key, eval_split = npz.stem.rsplit('-', 1)[-1], str(arrays['eval_split'])  # key: the digest of the archive
    return _arrays_data(name, kind, arrays, classes, f'{archive} (decoded into {npz})', eval_split,
                        dict(train=f'{key}/train', eval=f'{key}/{eval_split}'))


def _check_cifar_classes(data: ImageData) -> None:
    if data.classes != list(CIFAR10_CLASSES):
        raise DatasetError(f'{data.source}: expected the CIFAR-10 classes {list(CIFAR10_CLASSES)}, found {data.classes}.')


def _cifar_torchvision(root: Path, download: bool) -> ImageData:
    try:
        with removed_on_failure(root):
            train = CIFAR10(str(root), train=True, download=download)
            test = CIFAR10(str(root), train=False, download=download)
    except Exception as e:  # noqa: BLE001
        raise DatasetError(f'CIFAR-10 not found under {root} and the download failed: {_one_line(e)}') from e
    classes = list(train.classes)
    return ImageData(
        name='cifar10', kind='cifar10',
        train=ArrayImageDataset(train.data, np.asarray(train.targets), classes),
        eval=ArrayImageDataset(test.data, np.asarray(test.targets), classes),
        classes=classes, num_classes=DATASETS['cifar10'].num_classes, source=str(root / 'cifar-10-batches-py'),
        eval_split='test', in_memory=True)


# -- timm's dataset factory ------------------------------------------------------------------------

def load_timm_dataset(name: str, root: Optional[str], train_split: str, eval_split: str, download: bool,
                      img_mode: str, seed: int, batch_size: int, num_classes: Optional[int]) -> ImageData:
    """Any dataset ``timm.data.create_dataset`` reads (hfds/, hfids/, wds/, tfds/, torch/)."""
    common = dict(root=root, download=download, input_img_mode=img_mode, seed=seed, batch_size=batch_size)
    try:
        train = create_dataset(name, split=train_split, is_training=True, **common)
        evald = create_dataset(name, split=eval_split, is_training=False, **common)
    except Exception as e:  # noqa: BLE001
        raise DatasetError(f"timm's create_dataset could not open '{name}' (root={root}, splits "
                           f"{train_split}/{eval_split}): {type(e).__name__}: {e}") from e
    classes = _classes_of(train)
    n = num_classes or (len(classes) if classes else None)
    if n is None:
        raise DatasetError(f"Cannot tell the number of classes of '{name}'; pass --num-classes.")
    return ImageData(name=name, kind='timm', train=train, eval=evald, classes=classes, num_classes=n,
                     source=f'timm.data.create_dataset({name!r}, root={root!r})', eval_split=eval_split)


def _classes_of(ds: Any) -> Optional[List[str]]:
    for obj in (ds, getattr(ds, 'reader', None)):
        if obj is None:
            continue
        classes = getattr(obj, 'classes', None)
        if classes:
            return [str(c) for c in classes]
        class_to_idx = getattr(obj, 'class_to_idx', None)
        if class_to_idx:
            return [c for c, _ in sorted(class_to_idx.items(), key=lambda kv: kv[1])]
    return None


# -- entry point -----------------------------------------------------------------------------------

def load_run_data(run: RunOptions, processes: int = 1) -> 'ImageData':
    """The dataset of a run's options (``options.RunOptions``: --dataset, --data-dir, the splits, the cache, the
    seed), its batch split over ``processes``."""
    return load_dataset(run.dataset, run.data_dir, download=not run.no_download, cache_dir=run.cache_dir,
                        train_split=run.train_split, eval_split=run.val_split, num_classes=run.num_classes,
                        seed=run.seed, batch_size=run.batch_size // processes, download_hint='drop --no-download')


def load_dataset(
        name: str,
        data_dir: Optional[Union[str, Path]] = None,
        download: bool = True,
        cache_dir: Optional[Union[str, Path]] = None,
        img_mode: str = 'RGB',
        train_split: str = 'train',
        eval_split: Optional[str] = None,
        num_classes: Optional[int] = None,
        seed: int = 0,
        batch_size: int = 256,
        download_hint: str = '',
        data_option: str = '--data-dir',
) -> ImageData:
    """Resolve ``--dataset`` / ``--data-dir`` into train and evaluation splits (see the module doc).
    ``download_hint`` and ``data_option`` name the calling tool's options that allow a download (empty: the tool
    has none) and that point at the data, for the message of a missing dataset."""
    kind = dataset_kind(name)
    if kind in SAMPLES:
        return load_sample(kind)
    if kind == 'mnist':
        return load_mnist(data_dir or 'data', download=download, download_hint=download_hint, data_option=data_option)
    if kind == 'cifar10':
        return load_cifar10(data_dir or 'data', cache_dir=cache_dir, download=download, download_hint=download_hint,
                            data_option=data_option)
    if kind == 'imagenet':
        if data_dir is None:
            raise DatasetError('--dataset imagenet needs --data-dir pointing at a folder with train/ and val/.')
        return load_image_folder(data_dir, kind='imagenet', name='imagenet', img_mode=img_mode)
    if kind == 'folder':
        return load_image_folder(name, kind='folder', img_mode=img_mode)
    return load_timm_dataset(name, str(data_dir) if data_dir else None, train_split, eval_split or 'validation',
                             download, img_mode, seed, batch_size, num_classes)


def subset_indices(size: int, n: Optional[int], seed: int) -> np.ndarray:
    """The sorted indices of a seeded random subset of ``n`` of ``size`` samples (all when ``n`` is None or not smaller)."""
    if n is None or n >= size:
        return np.arange(size)
    return np.sort(np.random.default_rng(seed).permutation(size)[:n])


def subset(ds: Dataset, n: Optional[int], seed: int) -> Dataset:
    """A seeded random subset of ``n`` samples (all when ``n`` is None or not smaller)."""
    if n is None or isinstance(ds, IterableDataset) or n >= len(ds):
        return ds
    idx = subset_indices(len(ds), n, seed)
    if isinstance(ds, ArrayImageDataset):
        return ds.subset(idx)
    return IndexSubset(ds, idx)


# -- transforms ------------------------------------------------------------------------------------

def check_decode_size(input_size: Sequence[int], crop_pct: float) -> None:
    """``DatasetError`` unless ``crop_pct`` is within [MIN_CROP_PCT, 1] and the size images are resized to before the
    centre crop (input size / crop_pct) is within the image limits (``check_image_size``): bounds on what every image
    of a split is decoded at, checked before the first one is."""
    if isinstance(crop_pct, bool) or not isinstance(crop_pct, (int, float)) or not MIN_CROP_PCT <= crop_pct <= 1:
        raise DatasetError(f'crop_pct must be a number from {MIN_CROP_PCT} to 1, got {crop_pct!r}.')
    h, w = (math.ceil(int(v) / crop_pct) for v in input_size[1:])
    try:
        check_image_size(w, h, what=f'the size images are resized to (input size {input_size[1]}x{input_size[2]} / '
                                    f'crop_pct {crop_pct:g})')
    except ValueError as e:
        raise DatasetError(str(e)) from None


def build_transforms(
        input_size: Tuple[int, int, int],
        mean: Sequence[float],
        std: Sequence[float],
        interpolation: str = 'bilinear',
        crop_pct: float = 1.0,
        no_aug: bool = False,
        scale: Optional[Sequence[float]] = None,
        ratio: Optional[Sequence[float]] = None,
        hflip: float = 0.5,
        vflip: float = 0.,
        color_jitter: Optional[float] = None,
        auto_augment: Optional[str] = None,
        train_interpolation: Optional[str] = None,
        translate: float = 0.,
        rotate: float = 0.,
) -> Tuple[Any, Any]:
    """timm's training and evaluation transforms, ending in uint8 tensors (C, H, W).

    Normalisation and random erasing are left to the batch (``use_prefetcher=True`` in timm's terms).
    ``translate`` (a fraction of the image size) and ``rotate`` (degrees) put torchvision's
    ``RandomAffine`` in front of timm's transform, as the device data path's batched affine does.
    """
    check_decode_size(input_size, crop_pct)
    train_tf = create_transform(
        input_size, is_training=True, no_aug=no_aug, scale=tuple(scale) if scale else None,
        ratio=tuple(ratio) if ratio else None, hflip=hflip, vflip=vflip,
        color_jitter=color_jitter if color_jitter else None, auto_augment=auto_augment or None,
        interpolation=train_interpolation or interpolation, mean=tuple(mean), std=tuple(std), use_prefetcher=True)
    if (translate or rotate) and not no_aug:
        affine = transforms.RandomAffine(degrees=rotate, translate=(translate, translate) if translate else None)
        train_tf = transforms.Compose([affine, *train_tf.transforms])
    eval_tf = create_transform(
        input_size, is_training=False, interpolation=interpolation, mean=tuple(mean), std=tuple(std),
        crop_pct=crop_pct, use_prefetcher=True)
    return posterize_on_any_pillow(train_tf), eval_tf


def posterize_to_black(img: Any, bits_to_keep: int, **kwargs: Any) -> Any:
    """timm's ``posterize``, with no bit kept giving the black image Pillow gave before 13: Pillow 13 refuses 0 bits
    (``ValueError``), which timm's RandAugment asks for at the top of its magnitudes (``PosterizeIncreasing`` at 10,
    which ``rand-m9-mstd0.5-inc1`` reaches) and ``Posterize`` at the bottom."""
    return Image.new(img.mode, img.size) if bits_to_keep <= 0 else posterize(img, bits_to_keep, **kwargs)


def augment_ops(transform: Any) -> List[Any]:
    """The ops (timm's ``AugmentOp``) of the RandAugment, AugMix or AutoAugment in ``transform`` (one, or a
    ``Compose`` of transforms)."""
    ops = []
    for t in getattr(transform, 'transforms', [transform]):
        ops += list(getattr(t, 'ops', None) or []) + [op for sub in getattr(t, 'policy', None) or [] for op in sub]
    return [op for op in ops if isinstance(op, AugmentOp)]


def posterize_on_any_pillow(transform: Any) -> Any:
    """``transform`` with the posterize ops of its RandAugment, AugMix or AutoAugment through ``posterize_to_black``:
    the same images on every Pillow, where Pillow 13 stopped the run."""
    for op in augment_ops(transform):
        if op.aug_fn is posterize:
            op.aug_fn = posterize_to_black
    return transform
