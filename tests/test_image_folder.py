"""Image folders (timm_minimal.training.data.image_folder): the class is the top-level folder, loops are not
followed, empty classes and zero-byte files are refused, and every cache is keyed on the images' content."""
import os
import shutil

import numpy as np
import pytest
import torch
from PIL import Image

from timm_minimal.training.data.loading import DatasetError, load_cifar10, load_image_folder
from timm_minimal.training.data.image_folder import scan_split

from trainer_runs import metrics, run_inprocess

torch.set_num_threads(1)


def _grey(folder, n, value, size=(28, 28)):
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(n):
        Image.fromarray(np.full(size, value, np.uint8)).save(folder / f'{i}.png')


def _two_classes(root, a=0, b=255, n=16):
    for split in ('train', 'test'):
        _grey(root / split / 'a', n, a)
        _grey(root / split / 'b', n, b)
    return root


def test_the_top_level_folder_is_the_class(tmp_path):
    root = _two_classes(tmp_path / 'd', n=2)
    _grey(root / 'train' / 'a' / 'b', 3, 0)  # nested inside class a, named like class b
    data = load_image_folder(root)
    labels = [label for _, label in data.train.samples]
    assert data.classes == ['a', 'b'] and labels.count(0) == 5 and labels.count(1) == 2
    assert all(label == 0 for path, label in data.train.samples if '/a/' in path)


def test_a_folder_link_loop_is_skipped_and_reported(tmp_path, caplog):
    root = _two_classes(tmp_path / 'd', n=2)
    os.symlink('..', root / 'train' / 'a' / 'loop')
    os.symlink(root / 'train' / 'b', root / 'train' / 'a' / 'other')  # a link to another folder is read once
    with caplog.at_level('WARNING'):
        data = load_image_folder(root)
    assert len(data.train) == 6
    assert 'loop' in caplog.text and 'Skipped 1 folder link' in caplog.text


def test_empty_classes_and_zero_byte_images_are_refused(tmp_path):
    root = _two_classes(tmp_path / 'd', n=2)
    (root / 'train' / 'c').mkdir()
    with pytest.raises(DatasetError, match=r'class folder\(s\) without images.*train/c/'):
        load_image_folder(root)
    (root / 'train' / 'c').rmdir()
    (root / 'train' / 'a' / 'empty.png').write_bytes(b'')
    with pytest.raises(DatasetError, match=r'1 image file\(s\) of zero bytes.*empty.png'):
        load_image_folder(root)
    (root / 'train' / 'a' / 'empty.png').write_bytes(b'\x89PNG\r\n')  # truncated: named when read
    data = load_image_folder(root)
    bad = next(i for i, (p, _) in enumerate(data.train.samples) if p.endswith('empty.png'))
    with pytest.raises(DatasetError, match='cannot read image .*empty.png'):
        data.train[bad]


def test_a_16_bit_png_keeps_its_grey_levels(tmp_path):
    root = _two_classes(tmp_path / 'd', n=1)
    ramp = (np.arange(28 * 28).reshape(28, 28) * 80).astype(np.uint16)  # 0 .. 62,640
    Image.fromarray(ramp).save(root / 'train' / 'a' / 'deep.png')
    data = load_image_folder(root, img_mode='L')
    i = next(i for i, (p, _) in enumerate(data.train.samples) if p.endswith('deep.png'))
    grey = np.asarray(data.train[i][0])
    assert abs(int(grey.mean()) - int(ramp.mean() / 257)) <= 1 and (grey == 255).mean() < 0.01


def test_the_fingerprint_follows_the_content(tmp_path):
    root = _two_classes(tmp_path / 'd', n=2)
    first = scan_split(root / 'train', ['a', 'b']).fingerprint
    assert scan_split(root / 'train', ['a', 'b']).fingerprint == first
    _grey(root / 'train' / 'a', 1, 7)  # rewrite 0.png
    os.utime(root / 'train' / 'a' / '0.png', ns=(1, 1))
    assert scan_split(root / 'train', ['a', 'b']).fingerprint != first


def test_files_swapped_between_classes_keeping_sizes_and_times_change_the_fingerprint(tmp_path):
    """The key of the decoded-image caches is the content: two images swapped between class folders, their sizes
    and modification times kept, were read from the old decode (an evaluation then scored 0.00%)."""
    root = _two_classes(tmp_path / 'd', n=2)
    a, b = root / 'train' / 'a' / 'x.bmp', root / 'train' / 'b' / 'x.bmp'  # uncompressed: one size for both
    for path, value in ((a, 0), (b, 255)):
        Image.fromarray(np.full((28, 28), value, np.uint8)).save(path)
    assert a.stat().st_size == b.stat().st_size and a.read_bytes() != b.read_bytes()
    times = [(p.stat().st_atime_ns, p.stat().st_mtime_ns) for p in (a, b)]
    first = scan_split(root / 'train', ['a', 'b']).fingerprint
    data_a, data_b = a.read_bytes(), b.read_bytes()
    a.write_bytes(data_b)
    b.write_bytes(data_a)
    for p, ns in zip((a, b), times):
        os.utime(p, ns=ns)
    assert scan_split(root / 'train', ['a', 'b']).fingerprint != first


@pytest.mark.slow
def test_swapped_class_folders_are_decoded_again(tmp_path):
    """Train on a (black) / b (white), swap the two folders' contents, train again with the same --cache-dir:
    the second run must see the new images, not the first run's cache."""
    root = _two_classes(tmp_path / 'd', n=32)
    cache = tmp_path / 'cache'
    argv = ['--dataset', root, '--model', 'vit_minimal_std_6x1.mnist', '--model-kwargs', 'depth=1', '--batch-size', '16',
            '--epochs', '3', '--lr', '3e-3', '--warmup-epochs', '0', '--no-progress', '--cpu', '--data-path', 'device',
            '--cache-dir', cache, '--scale', '1', '1', '--ratio', '1', '1', '--hflip', '0', '--seed', '0']
    assert run_inprocess(argv + ['--output', tmp_path / 'r1']) == 0
    assert metrics(tmp_path / 'r1')[-1]['test_acc'] == 100.0
    for split in ('train', 'test'):
        os.rename(root / split / 'a', root / split / 'tmp')
        os.rename(root / split / 'b', root / split / 'a')
        os.rename(root / split / 'tmp', root / split / 'b')
    import timm
    from timm_minimal.tools.evaluate import evaluate_model
    assert run_inprocess(argv + ['--output', tmp_path / 'r2']) == 0
    assert metrics(tmp_path / 'r2')[-1]['test_acc'] == 100.0
    assert len(list((cache / 'device-arrays').glob('*.npz'))) == 4  # two contents x two splits
    model = timm.create_model(f'local-dir:{tmp_path / "r2" / "checkpoints" / "last"}', pretrained=True)
    assert evaluate_model(model, str(root), batch_size=8)['acc'] == 100.0  # on the files as they are now


def test_the_cifar10_folder_cache_is_reused(tmp_path):
    root = tmp_path / 'CIFAR10'
    from timm_minimal.training.data.loading import CIFAR10_CLASSES
    for split in ('train', 'test'):
        for c, cls in enumerate(CIFAR10_CLASSES):
            _grey(root / split / cls, 1, 20 * c, size=(32, 32))
    for _ in range(3):
        load_cifar10(tmp_path, cache_dir=tmp_path / 'cache', download=False)
    assert len(list((tmp_path / 'cache').glob('cifar10-folder-*.npz'))) == 1
    shutil.rmtree(root / 'test' / 'cat')
    _grey(root / 'test' / 'cat', 2, 200, size=(32, 32))
    assert len(load_cifar10(tmp_path, cache_dir=tmp_path / 'cache', download=False).eval) == 11


def test_evaluation_on_a_folder_maps_classes_by_name(tmp_path, capsys):
    """A folder with val/cat, val/dog, val/ship is scored against the CIFAR-10 model's classes 3, 5 and 8, not
    0, 1, 2 by order; folders whose names are not the model's label names are refused and named."""
    import timm
    from timm_minimal.models.datasets import CIFAR10_CLASSES
    from timm_minimal.tools import evaluate
    torch.manual_seed(0)
    model = timm.create_model('vit_minimal_sym_6x1.cifar10').eval()
    root = tmp_path / 'pets'
    images = {}
    for i, name in enumerate(('cat', 'dog', 'ship')):
        for split in ('train', 'val'):
            (root / split / name).mkdir(parents=True)
        rng = np.random.default_rng(i)
        images[name] = [rng.integers(0, 255, (32, 32, 3), dtype=np.uint8) for _ in range(4)]
        for j, im in enumerate(images[name]):
            Image.fromarray(im).save(root / 'train' / name / f'{j}.png')
            Image.fromarray(im).save(root / 'val' / name / f'{j}.png')
    with torch.no_grad():  # the model's own predictions, in CIFAR-10 class indices
        from timm.data import create_transform, resolve_data_config
        tf = create_transform(**resolve_data_config({}, model=model))
        pred = {n: [int(model(tf(Image.fromarray(im))[None]).argmax()) for im in ims] for n, ims in images.items()}
    by_name = sum(p == CIFAR10_CLASSES.index(n) for n, ps in pred.items() for p in ps) / 12 * 100
    by_order = sum(p == ['cat', 'dog', 'ship'].index(n) for n, ps in pred.items() for p in ps) / 12 * 100
    assert evaluate.evaluate_model(model, str(root), batch_size=8)['acc'] == pytest.approx(by_name)
    assert evaluate.evaluate_model(model, str(root), batch_size=8, labels_by_order=True)['acc'] == \
        pytest.approx(by_order)
    os.rename(root / 'val' / 'dog', root / 'val' / 'doggo')
    os.rename(root / 'train' / 'dog', root / 'train' / 'doggo')
    with pytest.raises(DatasetError, match=r"classes of .* \(doggo\) are not among the model's label names"):
        evaluate.evaluate_model(model, str(root), batch_size=8)
