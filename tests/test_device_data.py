"""The device-resident data path: batched augmentation (determinism, ranges) and agreement with the loader path."""
import numpy as np
import pytest
import torch

from timm_minimal.training import train as train_mod
from timm_minimal.training.data.batch_augment import BatchAugment, BatchAugmentConfig, epoch_uniforms
from timm_minimal.training.data.loading import build_transforms, load_mnist
from timm_minimal.training.data.loader_data import LoaderDataPath, TransformDataset
from timm_minimal.training.data.device_data import DeviceDataPath, images_to_array

torch.set_num_threads(1)
MEAN, STD = (0.5,), (0.25,)


def augment(cfg, x, seed=0, epoch=0):
    u = epoch_uniforms(seed, epoch, len(x))
    return BatchAugment(cfg, MEAN, STD, torch.device('cpu'))(x, u)


def pixels(x):
    """Back from normalised values to 0-255 pixels."""
    return x * STD[0] * 255 + MEAN[0] * 255


def ramp(n=8, size=32):
    """Images whose pixel value grows with the column: 8 * column."""
    cols = torch.arange(size, dtype=torch.float32) * 8
    return cols.expand(n, 1, size, size).to(torch.uint8)


def test_uniforms_are_a_function_of_seed_epoch_and_sample():
    a = epoch_uniforms(3, 1, 100)
    assert torch.equal(a, epoch_uniforms(3, 1, 100))
    assert torch.equal(a[:50], epoch_uniforms(3, 1, 50))  # a sample's row does not depend on the dataset size
    assert not torch.equal(a, epoch_uniforms(3, 2, 100)) and not torch.equal(a, epoch_uniforms(4, 1, 100))
    assert 0 <= a.min() and a.max() < 1


def test_a_sample_is_augmented_the_same_in_any_batch():
    cfg = BatchAugmentConfig(scale=(0.5, 1.2), ratio=(0.8, 1.25), translate=0.1, rotate=15, hflip=0.5, reprob=0.5,
                             remode='const')
    x = torch.randint(0, 256, (10, 3, 12, 12), dtype=torch.uint8)
    u = epoch_uniforms(7, 0, 10)
    aug = BatchAugment(cfg, (0.5,) * 3, (0.25,) * 3, torch.device('cpu'))
    full = aug(x, u)
    perm = torch.tensor([9, 2, 5])
    torch.testing.assert_close(aug(x[perm], u[perm]), full[perm], rtol=0, atol=1e-5)


def test_no_augmentation_only_normalises():
    x = torch.randint(0, 256, (4, 1, 8, 8), dtype=torch.uint8)
    out = augment(BatchAugmentConfig(), x)
    torch.testing.assert_close(out, (x.float() - 0.5 * 255) / (0.25 * 255))


def test_flips_mirror_the_image_exactly():
    x = torch.randint(0, 256, (6, 1, 9, 7), dtype=torch.uint8)
    torch.testing.assert_close(pixels(augment(BatchAugmentConfig(hflip=1.0), x)), x.flip(-1).float(), rtol=0, atol=1e-3)
    torch.testing.assert_close(pixels(augment(BatchAugmentConfig(vflip=1.0), x)), x.flip(-2).float(), rtol=0, atol=1e-3)


def test_shift_stays_within_its_range():
    """A one-pixel dot moves by at most translate x size in each direction, and does move."""
    size, t = 20, 0.1
    x = torch.zeros(64, 1, size, size, dtype=torch.uint8)
    x[:, :, 10, 10] = 255
    out = pixels(augment(BatchAugmentConfig(translate=t), x, seed=1))
    ys = torch.arange(size, dtype=torch.float32)
    mass = out.clamp(min=0).sum((1, 2, 3))
    cy = (out.clamp(min=0).sum(3)[:, 0] * ys).sum(1) / mass
    cx = (out.clamp(min=0).sum(2)[:, 0] * ys).sum(1) / mass
    shift = torch.stack([cx - 10, cy - 10])
    assert shift.abs().max() <= t * size + 1e-3
    assert shift.abs().max() > 0.5 * t * size  # 64 draws: some go far


@pytest.mark.parametrize('area', [0.25, 0.5])
def test_crop_scale_zooms_into_a_part_of_the_image(area):
    """A square crop of a fraction ``area`` of the image spans sqrt(area) of the columns of a ramp."""
    x = ramp(n=16, size=32)
    out = pixels(augment(BatchAugmentConfig(scale=(area, area), ratio=(1.0, 1.0)), x, seed=2))
    span = out[:, 0, 16, -1] - out[:, 0, 16, 0]  # value range across one row
    full = float(x[0, 0, 0, -1] - x[0, 0, 0, 0])
    torch.testing.assert_close(span / full, torch.full_like(span, area ** 0.5), rtol=0, atol=0.05)
    # the crop stays inside the image: no black border
    assert out.min() >= -1e-3 and out.max() <= float(x.max()) + 1e-3


def test_random_erasing_blanks_one_rectangle_in_the_chosen_samples():
    x = torch.full((200, 1, 16, 16), 200, dtype=torch.uint8)
    out = augment(BatchAugmentConfig(reprob=0.5, remode='const'), x, seed=3)
    erased = (out == 0).flatten(1).sum(1)  # 'const' fills with 0 in normalised units
    frac = (erased > 0).float().mean()
    assert 0.3 < frac < 0.7
    sizes = erased[erased > 0].float() / 256
    assert sizes.min() >= 0.01 and sizes.max() <= 0.4


def test_bad_augmentation_values_are_named():
    with pytest.raises(ValueError, match='hflip is a probability'):
        BatchAugmentConfig(hflip=2)
    with pytest.raises(ValueError, match='scale must be two numbers'):
        BatchAugmentConfig(scale=(0.9, 0.1))
    with pytest.raises(ValueError, match='remode must be one of pixel, const'):
        BatchAugmentConfig(remode='rand')


@pytest.fixture(scope='module')
def mnist(mnist_dir):
    return load_mnist(mnist_dir, download=False)


def test_device_and_loader_paths_feed_the_same_batches_without_augmentation(mnist):
    """Same order (seed, epoch), same pixels, same shards: the two paths differ only in where they run."""
    cpu = torch.device('cpu')
    _, eval_tf = build_transforms((1, 28, 28), MEAN, STD)
    train_tf, _ = build_transforms((1, 28, 28), MEAN, STD, no_aug=True)
    arrays = images_to_array(mnist.train, eval_tf, (1, 28, 28), 'L')
    evals = images_to_array(mnist.eval, eval_tf, (1, 28, 28), 'L')
    assert arrays[0].shape == (5000, 1, 28, 28) and arrays[0].dtype == np.uint8
    for rank in (0, 1):
        common = dict(device=cpu, seed=5, batch_size=64, batches_per_epoch=3, eval_batch_size=500, world=2, rank=rank)
        dev = DeviceDataPath(arrays, evals, BatchAugmentConfig(), MEAN, STD, **common)
        mean, std = MEAN[0] * 255, STD[0] * 255
        loader = LoaderDataPath(TransformDataset(mnist.train, train_tf, 'L'), TransformDataset(mnist.eval, eval_tf, 'L'),
                                lambda x: (x.float() - mean) / std, None, num_workers=0, **common)
        for epoch in (0, 1):
            a, b = list(dev.train_batches(epoch, start=1)), list(loader.train_batches(epoch, start=1))
            assert len(a) == len(b) == 2
            for (xa, ya), (xb, yb) in zip(a, b):
                assert xa.shape == (32, 1, 28, 28)
                torch.testing.assert_close(xa, xb, rtol=0, atol=1e-6)
                assert torch.equal(ya, yb)
        ea, eb = list(dev.eval_batches()), list(loader.eval_batches())
        assert sum(len(y) for _, y in ea) == 500
        torch.testing.assert_close(torch.cat([x for x, _ in ea]), torch.cat([x for x, _ in eb]), rtol=0, atol=1e-6)


def test_forced_device_path_refuses_what_it_cannot_do(mnist_dir, tmp_path, capsys):
    base = ['--dataset', 'mnist', '--data-dir', str(mnist_dir), '--model', 'vit_minimal_sym_6x1', '--cpu',
            '--epochs', '1', '--train-subset', '64', '--batch-size', '32', '--no-progress']
    rc = train_mod.main(base + ['--data-path', 'device', '--device-data-limit', '0.001', '--output', str(tmp_path / 'a')])
    assert rc == train_mod.EXIT_BAD_INPUT
    err = capsys.readouterr().err
    assert '--data-path device cannot take this run' in err and 'GiB' in err and '--data-path loader' in err
    rc = train_mod.main(base + ['--data-path', 'device', '--aa', 'rand-m9', '--output', str(tmp_path / 'b')])
    assert rc == train_mod.EXIT_BAD_INPUT and '--aa rand-m9 is a per-image transform' in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:
        train_mod.main(base + ['--data-path', 'gpu', '--output', str(tmp_path / 'c')])
    assert e.value.code == 2 and "invalid choice: 'gpu'" in capsys.readouterr().err


def test_auto_path_falls_back_to_the_loader_and_says_why(mnist_dir, tmp_path, capsys):
    out = tmp_path / 'run'
    rc = train_mod.main(['--dataset', 'mnist', '--data-dir', str(mnist_dir), '--model', 'vit_minimal_sym_6x1',
                         '--model-kwargs', 'depth=1', '--cpu', '--epochs', '1', '--train-subset', '64',
                         '--eval-subset', '64', '--batch-size', '32', '--no-progress', '--aa', 'rand-m5',
                         '--output', str(out)])
    assert rc == 0
    assert 'Data path: loader (--aa rand-m5 is a per-image transform)' in capsys.readouterr().out
