"""Datasets, timm transforms and the seeded sampler of the trainer (timm_minimal.training.data.loading)."""
import io
import os
import re
import shutil
import tarfile
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from timm_minimal.training.data.loader_data import EpochSampler, TransformDataset
from timm_minimal.training.data.loading import (
    CIFAR10_CLASSES, DatasetError, build_transforms, dataset_kind, default_cache_dir,
    find_image_folder_splits, load_cifar10, load_dataset, load_mnist,
)

torch.set_num_threads(1)

DATA = Path(__file__).resolve().parents[1].parent / 'shared' / 'data'  # ../shared/data from the project root
needs_mnist = pytest.mark.skipif(not (DATA / 'MNIST' / 'raw').is_dir(), reason='MNIST not in ../shared/data')
MNIST_CFG = dict(mean=(0.1307,), std=(0.3081,))


@pytest.fixture(scope='module')
def mnist():
    if not (DATA / 'MNIST' / 'raw').is_dir():
        pytest.skip('MNIST not in ../shared/data')
    return load_mnist(DATA, download=False)


def test_mnist_from_raw_idx_files(mnist):
    assert (len(mnist.train), len(mnist.eval), mnist.num_classes) == (60000, 10000, 10)
    assert mnist.train.images.shape == (60000, 28, 28) and mnist.train.images.dtype == np.uint8
    assert sorted(np.unique(mnist.train.labels)) == list(range(10))
    img, label = mnist.train[0]
    assert img.mode == 'L' and img.size == (28, 28) and label == 5  # the first MNIST training digit is a 5


def test_mnist_missing_gives_clear_error(tmp_path):
    with pytest.raises(DatasetError, match='MNIST not found.*train-images-idx3-ubyte'):
        load_mnist(tmp_path, download=False)


@pytest.mark.parametrize('spoil', ['truncated', 'not_gzip'])
def test_a_damaged_mnist_file_is_named_in_one_error(tmp_path, mnist_dir, spoil):
    """A gzipped idx file cut short, or one that is no gzip, is a DatasetError naming it, not gzip's traceback."""
    import gzip
    for f in mnist_dir.iterdir():
        (tmp_path / (f.name + '.gz')).write_bytes(gzip.compress(f.read_bytes()))
    bad = tmp_path / 't10k-images-idx3-ubyte.gz'
    bad.write_bytes(bad.read_bytes()[:len(bad.read_bytes()) // 2] if spoil == 'truncated' else b'not gzip')
    with pytest.raises(DatasetError, match=rf'cannot read {re.escape(str(bad))} \((EOFError|BadGzipFile): .+\); '
                                           r'replace it with a complete copy\.$'):
        load_mnist(tmp_path, download=False)


def test_mnist_labels_outside_the_ten_classes_are_named_in_one_error(tmp_path, mnist_dir):
    """A label file with an 11 ended in an IndexError in the loss (a device-side assert on a GPU)."""
    for f in mnist_dir.iterdir():
        shutil.copy(f, tmp_path / f.name)
    labels = tmp_path / 't10k-labels-idx1-ubyte'
    data = bytearray(labels.read_bytes())
    data[8 + 3] = 11  # the fourth test digit's label
    labels.write_bytes(bytes(data))
    with pytest.raises(DatasetError, match=rf'^{re.escape(str(labels))}: 1 label\(s\) lie outside the 10 classes 0..9 '
                                           r'\(e.g. 11\)'):
        load_mnist(tmp_path, download=False)


def test_timm_transforms_one_channel(mnist):
    """timm's create_transform on 'L' images gives 1x28x28 uint8; normalised with the MNIST stats on the batch."""
    train_tf, eval_tf = build_transforms((1, 28, 28), **MNIST_CFG, scale=(0.85, 1.0), ratio=(0.9, 1.1), hflip=0.,
                                         auto_augment='rand-m9-mstd0.5-inc1')
    img, _ = mnist.train[0]
    for tf in (train_tf, eval_tf):
        x = tf(img)
        assert x.shape == (1, 28, 28) and x.dtype == torch.uint8
    # evaluation transform keeps the pixels of a 28x28 image
    assert torch.equal(eval_tf(img)[0], torch.from_numpy(mnist.train.images[0].copy()))
    from timm_minimal.training.data.batch_augment import BatchAugment, BatchAugmentConfig
    x = BatchAugment(BatchAugmentConfig(), (0.1307,), (0.3081,), torch.device('cpu')).normalize(eval_tf(img)[None])
    pixels = torch.from_numpy(mnist.train.images[0].copy()).float()
    torch.testing.assert_close(x[0, 0], (pixels / 255 - 0.1307) / 0.3081)  # the trainer's normalisation


@pytest.mark.parametrize('policy', ['rand-m10-mstd0-inc1', 'rand-m0-mstd0', 'augmix-m10', 'v0'])
def test_posterize_that_keeps_no_bit_gives_a_black_image_on_every_pillow(policy):
    """timm's RandAugment, AugMix and AutoAugment posterize ops at the magnitude that keeps no bit: a black image, as
    Pillow gave before 13 (which refuses 0 bits and stopped a run with --aa rand-m9-mstd0.5-inc1), not an error."""
    from PIL import Image
    from timm_minimal.training.data.loading import augment_ops
    train_tf, _ = build_transforms((3, 32, 32), mean=(0.5,) * 3, std=(0.5,) * 3, hflip=0., auto_augment=policy)
    ops = [op for op in augment_ops(train_tf) if op.name.startswith('Posterize')]
    assert ops, [type(t).__name__ for t in train_tf.transforms]
    img = Image.new('RGB', (32, 32), (200, 100, 50))
    for op in ops:
        bits = op.level_fn(op.magnitude, op.hparams)[0]
        out = op.aug_fn(img, bits, **op.kwargs)
        expected = (0, 0, 0) if bits <= 0 else tuple(c & ~(2 ** (8 - min(bits, 8)) - 1) & 255 for c in (200, 100, 50))
        assert out.size == img.size and out.getpixel((5, 5)) == expected, (op.name, bits)
    assert any(op.level_fn(op.magnitude, op.hparams)[0] <= 0 for op in ops)  # v0: ('Posterize', 0.8, 2) keeps none


def test_augmentation_is_a_function_of_seed_epoch_index(mnist):
    train_tf, _ = build_transforms((1, 28, 28), **MNIST_CFG, scale=(0.5, 1.0), hflip=0.)
    ds = TransformDataset(mnist.train, train_tf, 'L', seed=3)
    a = ds[(0, 7)][0]
    torch.manual_seed(123)  # the global RNG state does not matter
    np.random.seed(5)
    assert torch.equal(ds[(0, 7)][0], a)
    assert not torch.equal(ds[(1, 7)][0], a)  # another epoch, another crop
    assert not torch.equal(TransformDataset(mnist.train, train_tf, 'L', seed=4)[(0, 7)][0], a)
    # a 3-channel model gets RGB images
    rgb_tf, _ = build_transforms((3, 32, 32), (0.5,) * 3, (0.5,) * 3)
    x, _ = TransformDataset(mnist.train, rgb_tf, 'RGB', seed=0)[(0, 0)]
    assert x.shape == (3, 32, 32)


def test_epoch_sampler_positions():
    s = EpochSampler(100, seed=1, num_samples=96)
    s.set_position(0)
    e0 = list(s)
    assert len(e0) == len(s) == 96 and all(e == 0 for e, _ in e0) and len({i for _, i in e0}) == 96
    s.set_position(1)
    e1 = [i for _, i in s]
    assert e1 != [i for _, i in e0]
    s.set_position(1, 32)  # resumed after two batches of 16
    assert len(s) == 64 and [i for _, i in s] == e1[32:]
    assert [i for _, i in EpochSampler(100, seed=1, num_samples=96)] == [i for _, i in e0]


def _jpeg_bytes(color):
    buf = io.BytesIO()
    Image.new('RGB', (32, 32), color).save(buf, format='JPEG', quality=90)
    return buf.getvalue()


def _make_cifar_archive(root: Path, per_class=(2, 1), top: str = ''):
    """A miniature of the JPEG export: train/<class>/NNNN.jpg and test/<class>/NNNN.jpg in a .tar.gz (under the
    folder ``top`` where given), each image of its own colour, written in no particular order."""
    (root / 'CIFAR10').mkdir(parents=True)
    members = [(split, c, i) for split, n in zip(('train', 'test'), per_class) for c in range(10) for i in range(n)]
    with tarfile.open(root / 'CIFAR10' / 'cifar10-jpeg-q75.tar.gz', 'w:gz') as tar:
        for split, c, i in reversed(members):
            data = _jpeg_bytes((25 * c, 40 * i, 200 if split == 'train' else 50))
            info = tarfile.TarInfo(f'{top}{split}/{CIFAR10_CLASSES[c]}/{i:04d}.jpg')
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))


@pytest.mark.parametrize('top', ['', 'cifar10-jpeg/'])
def test_cifar10_jpeg_archive_is_decoded_once_as_its_image_folder_would_be(tmp_path, monkeypatch, top):
    """The archive is decoded straight from its members into one cache file (no file extracted), with the classes,
    labels and sample order that the same images give read as an image folder."""
    _make_cifar_archive(tmp_path / 'data', top=top)
    cache = tmp_path / 'cache'
    data = load_cifar10(tmp_path / 'data', cache_dir=cache, download=False)
    assert data.classes == list(CIFAR10_CLASSES) and data.num_classes == 10 and data.eval_split == 'test'
    assert (len(data.train), len(data.eval)) == (20, 10)
    assert data.train.images.shape == (20, 32, 32, 3)
    assert [p.name for p in cache.iterdir()] == [f'cifar10-jpeg-q75-{data.fingerprints["train"][:16]}.npz']
    with tarfile.open(tmp_path / 'data' / 'CIFAR10' / 'cifar10-jpeg-q75.tar.gz') as tar:
        tar.extractall(tmp_path / 'folder', filter='data')
    folder = load_cifar10(tmp_path / 'folder' / top, cache_dir=tmp_path / 'other-cache', download=False)
    for ours, theirs in ((data.train, folder.train), (data.eval, folder.eval)):
        assert np.array_equal(ours.images, theirs.images) and np.array_equal(ours.labels, theirs.labels)
    monkeypatch.setattr(tarfile, 'open', lambda *a, **k: pytest.fail('the archive was decoded again'))
    again = load_cifar10(tmp_path / 'data', cache_dir=cache, download=False)
    assert np.array_equal(again.train.images, data.train.images) and again.fingerprints == data.fingerprints


def test_an_archive_without_the_export_layout_is_refused_with_what_it_holds(tmp_path):
    (tmp_path / 'CIFAR10').mkdir()
    with tarfile.open(tmp_path / 'CIFAR10' / 'cifar10-jpeg-q75.tar.gz', 'w:gz') as tar:
        for name, data in (('train/cat/0.jpg', _jpeg_bytes((1, 2, 3))), ('train/dog/0.jpg', b''),
                           ('.hidden/x/0.jpg', b'')):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    with pytest.raises(DatasetError, match=r"must hold train/ and one of val/, validation/, test/.*found \['train/'\]"):
        load_cifar10(tmp_path, cache_dir=tmp_path / 'cache', download=False)
    assert not (tmp_path / 'cache').exists() or not list((tmp_path / 'cache').iterdir())


@pytest.mark.skipif(not (DATA / 'CIFAR10' / 'cifar10-jpeg-q75.tar.gz').is_file(), reason=f'no CIFAR-10 archive at {DATA / "CIFAR10" / "cifar10-jpeg-q75.tar.gz"}')
def test_real_cifar10_archive_has_the_layout_the_loader_reads():
    with tarfile.open(DATA / 'CIFAR10' / 'cifar10-jpeg-q75.tar.gz') as tar:
        names = [m.name for _, m in zip(range(40), tar)]
    files = [n for n in names if n.endswith('.jpg')]
    assert files and all(n.split('/')[0] in ('train', 'test') and n.split('/')[1] in CIFAR10_CLASSES for n in files)


def test_cifar10_missing_gives_clear_error(tmp_path):
    with pytest.raises(DatasetError, match='CIFAR-10 not found'):
        load_cifar10(tmp_path, cache_dir=tmp_path / 'cache', download=False)


def test_image_folder_errors(tmp_path):
    (tmp_path / 'train' / 'a').mkdir(parents=True)
    with pytest.raises(DatasetError, match=r'must contain train/ and one of val/, validation/, test/.*found \[.train/.\]'):
        find_image_folder_splits(tmp_path)
    with pytest.raises(DatasetError, match='does not exist'):
        find_image_folder_splits(tmp_path / 'nope')
    (tmp_path / 'test' / 'a').mkdir(parents=True)
    assert find_image_folder_splits(tmp_path) == (tmp_path / 'train', tmp_path / 'test')


def test_dataset_names():
    assert dataset_kind('MNIST') == 'mnist' and dataset_kind('cifar10') == 'cifar10'
    assert dataset_kind('imagenet') == 'imagenet'
    assert dataset_kind('hfds/timm/mini-imagenet') == 'timm' and dataset_kind('wds/imagenet') == 'timm'
    assert dataset_kind('./my_images') == 'folder'
    with pytest.raises(DatasetError, match="Unknown dataset 'svhn'.*mnist, cifar10, imagenet"):
        dataset_kind('svhn')
    with pytest.raises(DatasetError, match='imagenet needs --data-dir'):
        load_dataset('imagenet', None)


def test_a_second_archive_of_the_same_name_is_read_not_the_first_ones_cache(tmp_path):
    """The extraction cache is keyed on the archive's bytes, never on its name."""
    cache = tmp_path / 'cache'
    _make_cifar_archive(tmp_path / 'a', per_class=(2, 1))
    _make_cifar_archive(tmp_path / 'b', per_class=(3, 2))
    first = load_cifar10(tmp_path / 'a', cache_dir=cache, download=False)
    second = load_cifar10(tmp_path / 'b', cache_dir=cache, download=False)
    assert (len(first.train), len(first.eval)) == (20, 10) and (len(second.train), len(second.eval)) == (30, 20)
    assert len([p for p in cache.iterdir() if p.name.startswith('cifar10-jpeg-q75-')]) == 2
    assert not [p for p in cache.iterdir() if p.name.startswith('.')]


def test_the_suite_caches_apart_from_the_user():
    """tests/conftest.py gives the suite a cache folder of its own: what the tests extract, measure and lock never
    lands in the user's ~/.cache/timm_minimal."""
    cache = default_cache_dir()
    assert cache != Path.home() / '.cache' / 'timm_minimal' and cache.name.startswith('timm-minimal-cache-')


@pytest.mark.parametrize('spoil', ['truncated', 'not_a_gzip', 'a_folder'])
def test_a_damaged_archive_is_named_in_one_error(tmp_path, spoil):
    """A truncated download, a file that is no .tar.gz or a folder of the archive's name is a DatasetError naming
    the archive (the command line's exit 2 with one line), not a traceback, and nothing is cached."""
    _make_cifar_archive(tmp_path / 'data', per_class=(20, 10))
    archive = tmp_path / 'data' / 'CIFAR10' / 'cifar10-jpeg-q75.tar.gz'
    if spoil == 'a_folder':
        archive.unlink()
        archive.mkdir()
        expected = rf'cannot read {re.escape(str(archive))}: [^;]+\.$'  # the system's words: a directory
    else:
        archive.write_bytes(archive.read_bytes()[:len(archive.read_bytes()) // 2] if spoil == 'truncated' else b'x')
        expected = (rf'cannot read {re.escape(str(archive))} as a \.tar\.gz archive \((EOFError|ReadError): [^)]+\); '
                    r'replace it with a complete copy')
    with pytest.raises(DatasetError, match=expected):
        load_cifar10(tmp_path / 'data', cache_dir=tmp_path / 'cache', download=False)
    assert not (tmp_path / 'cache').exists() or not list((tmp_path / 'cache').iterdir())


@pytest.mark.parametrize('spoil', ['truncated', 'no_labels', 'labels_short'])
def test_a_bad_cache_of_an_archive_is_decoded_anew_with_a_warning(tmp_path, caplog, spoil):
    """The archive's cache file is derived: one that cannot be read, or lacks or mismatches an array, is rebuilt
    with a one-line warning, not a traceback."""
    _make_cifar_archive(tmp_path / 'data')
    first = load_cifar10(tmp_path / 'data', cache_dir=tmp_path / 'cache', download=False)
    npz, = (tmp_path / 'cache').iterdir()
    if spoil == 'truncated':
        npz.write_bytes(npz.read_bytes()[:1000])
    else:
        arrays = dict(np.load(npz))
        if spoil == 'no_labels':
            del arrays['train_labels']
        else:
            arrays['eval_labels'] = arrays['eval_labels'][:-1]
        np.savez(npz.with_suffix(''), **arrays)
    again = load_cifar10(tmp_path / 'data', cache_dir=tmp_path / 'cache', download=False)
    assert np.array_equal(again.eval.labels, first.eval.labels) and np.array_equal(again.train.images, first.train.images)
    warning, = [r.getMessage() for r in caplog.records if 'not usable' in r.getMessage()]
    assert str(npz) in warning and 'decoding the images anew' in warning
    assert load_cifar10(tmp_path / 'data', cache_dir=tmp_path / 'cache', download=False).eval.labels.shape == (10,)


def test_a_bad_cache_of_an_image_folder_is_decoded_anew_with_a_warning(tmp_path, caplog):
    _make_cifar_archive(tmp_path / 'data')
    with tarfile.open(tmp_path / 'data' / 'CIFAR10' / 'cifar10-jpeg-q75.tar.gz') as tar:
        tar.extractall(tmp_path / 'folder', filter='data')
    first = load_cifar10(tmp_path / 'folder', cache_dir=tmp_path / 'cache', download=False)
    npz, = (tmp_path / 'cache').glob('cifar10-folder-*.npz')
    npz.write_bytes(b'PK\x03\x04')
    again = load_cifar10(tmp_path / 'folder', cache_dir=tmp_path / 'cache', download=False)
    assert np.array_equal(again.train.images, first.train.images)
    assert [r for r in caplog.records if 'not usable' in r.getMessage() and str(npz) in r.getMessage()]


def test_images_of_different_sizes_are_refused_in_an_archive_and_a_folder(tmp_path):
    _make_cifar_archive(tmp_path / 'data')
    archive = tmp_path / 'data' / 'CIFAR10' / 'cifar10-jpeg-q75.tar.gz'
    with tarfile.open(archive) as tar:
        tar.extractall(tmp_path / 'folder', filter='data')
    small = io.BytesIO()
    Image.new('RGB', (16, 16)).save(small, format='JPEG')
    (tmp_path / 'folder' / 'train' / 'cat' / '0000.jpg').write_bytes(small.getvalue())
    with tarfile.open(archive, 'w:gz') as tar:
        tar.add(tmp_path / 'folder' / 'train', arcname='train')
        tar.add(tmp_path / 'folder' / 'test', arcname='test')
    for root in (tmp_path / 'data', tmp_path / 'folder'):
        with pytest.raises(DatasetError, match=r'differ in size \(\[\(16, 16, 3\), \(32, 32, 3\)\]\); an in-memory '
                                               r'dataset needs one size\.'):
            load_cifar10(root, cache_dir=tmp_path / 'cache', download=False)


def test_a_copy_of_an_archive_reuses_its_extraction(tmp_path, monkeypatch):
    """Another path and a newer modification time with the same bytes (the data folder copied anew) read the
    extraction already made: no second extraction, no second folder in the cache."""
    cache = tmp_path / 'cache'
    _make_cifar_archive(tmp_path / 'a')
    first = load_cifar10(tmp_path / 'a', cache_dir=cache, download=False)
    (tmp_path / 'b' / 'CIFAR10').mkdir(parents=True)
    copy = shutil.copyfile(tmp_path / 'a' / 'CIFAR10' / 'cifar10-jpeg-q75.tar.gz',
                           tmp_path / 'b' / 'CIFAR10' / 'cifar10-jpeg-q75.tar.gz')
    os.utime(copy, ns=(time.time_ns() + 10**9, time.time_ns() + 10**9))
    monkeypatch.setattr(tarfile, 'open', lambda *a, **k: pytest.fail('the copy was extracted again'))
    second = load_cifar10(tmp_path / 'b', cache_dir=cache, download=False)
    assert np.array_equal(second.train.images, first.train.images)
    assert len(list(cache.glob('cifar10-jpeg-q75-*'))) == 1


def test_an_archive_replaced_in_place_drops_what_the_earlier_one_left(tmp_path):
    """Once the archive at a path is replaced and read, the cache of the archive it held before is removed, and so
    is a folder an earlier version extracted that archive to; another archive's cache, a folder extracted from
    another archive and files this loader did not write stay."""
    cache = tmp_path / 'cache'
    _make_cifar_archive(tmp_path / 'a', per_class=(2, 1))
    _make_cifar_archive(tmp_path / 'other', per_class=(1, 1))
    archive, other = (tmp_path / d / 'CIFAR10' / 'cifar10-jpeg-q75.tar.gz' for d in ('a', 'other'))
    load_cifar10(tmp_path / 'a', cache_dir=cache, download=False)
    load_cifar10(tmp_path / 'other', cache_dir=cache, download=False)
    before = set(cache.iterdir())
    for name, source in (('cifar10-jpeg-q75-0123456789abcdef', archive), ('cifar10-jpeg-q75-fedcba9876543210', other)):
        (cache / name / 'train').mkdir(parents=True)  # an extraction by an earlier version
        (cache / name / '.complete').write_text(f'{source}\n')
    foreign = [cache / 'cifar10-jpeg-q75-mine.npz', cache / 'cifar10-jpeg-q75-mine']
    foreign[0].write_bytes(b'PK\x03\x04 not ours')  # a zip's magic, then nothing of one
    foreign[1].mkdir()
    archive.unlink()
    _make_cifar_archive(tmp_path / 'a2', per_class=(3, 2))
    shutil.move(tmp_path / 'a2' / 'CIFAR10' / 'cifar10-jpeg-q75.tar.gz', archive)
    data = load_cifar10(tmp_path / 'a', cache_dir=cache, download=False)
    assert (len(data.train), len(data.eval)) == (30, 20)
    after = {p.name for p in cache.iterdir()}
    assert len(before) == 2 and len(after) == 5 and {p.name for p in foreign} < after
    assert 'cifar10-jpeg-q75-fedcba9876543210' in after and 'cifar10-jpeg-q75-0123456789abcdef' not in after
    kept, = before & {cache / n for n in after}
    assert str(np.load(kept)['archive']) == str(other.resolve())
    assert load_cifar10(tmp_path / 'other', cache_dir=cache, download=False).train.images.shape[0] == 10


def test_a_cache_write_on_a_full_disk_leaves_no_temporary_file(tmp_path, small_disk):
    from timm_minimal.training.data.device_data import images_to_array
    disk = small_disk(64)
    from timm_minimal.training.data.loading import build_transforms
    _, tf = build_transforms((1, 28, 28), (0.5,), (0.5,), interpolation='bilinear', crop_pct=1.0)
    big = [(Image.fromarray(np.random.default_rng(0).integers(0, 255, (28, 28), dtype=np.uint8)), 0)] * 400
    with pytest.raises(OSError):
        images_to_array(big, tf, (1, 28, 28), 'L', cache=disk / 'c.npz')
    assert list(disk.iterdir()) == []
