"""The image processors (``VitMinimalImageProcessor``, torchvision, and its PIL twin ``VitMinimalImageProcessorPil``): timm's eval transform, every input
layout ``ViTImageProcessor`` takes, and clear refusals."""
import json

import numpy as np
import pytest
import timm
import torch
from PIL import Image
from timm.data import create_transform, resolve_data_config
from transformers import AutoImageProcessor

from timm_minimal import (
    VitMinimalConfig, VitMinimalForImageClassification, VitMinimalImageProcessorPil, VitMinimalImageProcessor,
)

torch.set_num_threads(1)

ATOL = 1e-5


def _image(width=40, height=30, seed=0):
    rng = np.random.default_rng(seed)
    return Image.fromarray(rng.integers(0, 256, (height, width, 3), dtype=np.uint8))


@pytest.fixture(scope='module')
def saved(tmp_path_factory):
    """The save_pretrained folder of a CIFAR-10 model (random weights) and the timm model it was made from."""
    torch.manual_seed(0)
    model = timm.create_model('vit_minimal_sym_6x4.cifar10').eval()
    folder = tmp_path_factory.mktemp('sym_6x4_cifar10')
    VitMinimalForImageClassification.from_timm(model).save_pretrained(folder)
    return folder, model


PROCESSORS = [VitMinimalImageProcessorPil, VitMinimalImageProcessor]


def _level(processor):
    """Two 8-bit levels after normalisation: how far the torchvision processor's resize may differ from PIL's."""
    return 2 / 255 / min(processor.image_std) + 1e-6 if isinstance(processor, VitMinimalImageProcessor) else ATOL


@pytest.mark.parametrize('cls', PROCESSORS)
@pytest.mark.parametrize('name, size', [('vit_minimal_std_6x1', (40, 30)),
                                        ('vit_minimal_sym_6x4.cifar10', (50, 64)),
                                        ('vit_minimal_sym_6x4.in1k', (300, 260))])
def test_processor_matches_timm_transform(name, size, cls):
    model = timm.create_model(name)
    transform = create_transform(**resolve_data_config({}, model=model))
    processor = cls.from_pretrained_cfg(model.pretrained_cfg)
    assert processor.size == {'height': model.pretrained_cfg['input_size'][1],
                              'width': model.pretrained_cfg['input_size'][2]}
    assert processor.crop_pct == model.pretrained_cfg['crop_pct']
    assert processor.interpolation == model.pretrained_cfg['interpolation']
    images = [_image(*size, seed=0), _image(*size, seed=1)]
    mode = 'L' if model.in_chans == 1 else 'RGB'
    expected = torch.stack([transform(image.convert(mode)) for image in images])
    pixels = processor(images, return_tensors='pt')['pixel_values']
    assert pixels.shape == (2, *model.pretrained_cfg['input_size'])
    torch.testing.assert_close(pixels, expected, rtol=0, atol=_level(processor))
    # numpy (HWC) and torch (CHW) uint8 inputs give the same result as PIL images
    array = np.array(images[0])
    torch.testing.assert_close(processor(array)['pixel_values'][0], pixels[0], rtol=0, atol=ATOL)
    torch.testing.assert_close(processor(torch.from_numpy(array).permute(2, 0, 1))['pixel_values'][0], pixels[0],
                               rtol=0, atol=ATOL)
    assert isinstance(processor(images[0], return_tensors='np')['pixel_values'], np.ndarray)
    # the config (what save_pretrained writes) gives the same processor
    config = VitMinimalConfig.from_timm(model)
    assert cls.from_config(config).to_dict() == processor.to_dict()


@pytest.mark.parametrize('cls', PROCESSORS)
@pytest.mark.parametrize('kwargs, message', [
    (dict(num_channels=2), 'num_channels must be 1 .grayscale. or 3 .RGB., got 2'),
    (dict(interpolation='cubic'), "Unknown interpolation 'cubic'; choose one of nearest, bilinear, bicubic"),
    (dict(crop_pct=1.5), r'crop_pct must be a number from 0.1 to 1'), (dict(crop_pct=1e-6), 'from 0.1 to 1'),
    (dict(num_channels=3, image_mean=[0.5, 0.5]), 'image_mean needs 1 or num_channels=3 values'),
])
def test_processor_errors(kwargs, message, cls):
    with pytest.raises(ValueError, match=message):
        cls(pretrained_cfg=timm.create_model('vit_minimal_sym_6x4.mnist').pretrained_cfg, **kwargs)


def _layouts(digit):
    """One grey digit (uint8 H x W) in every input layout the processor takes, ViTImageProcessor's among them."""
    rgb = np.repeat(digit[..., None], 3, axis=-1)
    f = digit.astype(np.float32) / 255
    return {
        'PIL L': Image.fromarray(digit), 'PIL RGB': Image.fromarray(rgb),
        'PIL I;16': Image.fromarray(digit.astype(np.uint16) * 257),
        'numpy (H, W) uint8': digit, 'numpy (H, W, 1)': digit[..., None], 'numpy (1, H, W)': digit[None],
        'numpy (H, W, 3)': rgb, 'numpy (3, H, W)': rgb.transpose(2, 0, 1), 'numpy (H, W) float': f,
        'numpy (H, W) uint16': digit.astype(np.uint16) * 257,
        'torch (1, H, W) float': torch.from_numpy(f)[None], 'torch (H, W) uint8': torch.from_numpy(digit),
        'torch (3, H, W) uint8': torch.from_numpy(rgb).permute(2, 0, 1),
    }


@pytest.mark.parametrize('cls', PROCESSORS)
def test_processor_takes_every_input_layout(cls):
    """Greyscale 2-D arrays, channel-first and channel-last, uint8, uint16 and float, PIL, numpy and torch: the
    same pixel values for the same digit, in lists and in batches, from either processor."""
    processor = cls.from_pretrained_cfg(timm.create_model('vit_minimal_sym_6x4.mnist').pretrained_cfg)
    digit = (np.arange(28 * 28).reshape(28, 28) % 251).astype(np.uint8)
    want = processor(Image.fromarray(digit))['pixel_values']
    assert want.shape == (1, 1, 28, 28)
    for name, image in _layouts(digit).items():
        got = processor(image)['pixel_values']
        assert torch.allclose(got, want, atol=0.02), name  # RGB -> L rounds by one grey level at most
    batch = processor([digit, digit[None]])['pixel_values']
    stacked = processor(np.stack([digit[..., None]] * 2))['pixel_values']
    assert batch.shape == stacked.shape == (2, 1, 28, 28) and torch.allclose(batch, stacked)
    for bad, message in ((np.zeros((2, 2, 2, 2, 2)), 'Expected an image of shape'), (np.zeros((28, 28, 2)), 'C = 1, 3'),
                         (np.full((28, 28), np.nan), 'non-finite')):
        with pytest.raises(ValueError, match=message):
            processor(bad)


@pytest.mark.parametrize('cls', PROCESSORS)
def test_processor_takes_transformers_layout_arguments(cls):
    """``input_data_format`` says where an array has its channels (it decides a shape that reads both ways) and must
    fit the shape; ``data_format`` lays out the output, as ViTImageProcessor's do; other arguments are named."""
    from transformers.image_utils import ChannelDimension
    cfg = timm.create_model('vit_minimal_sym_6x4.cifar10').pretrained_cfg
    processor = cls.from_pretrained_cfg(cfg)
    rng = np.random.default_rng(0)
    hwc = rng.integers(0, 256, (40, 50, 3), dtype=np.uint8)
    want = processor(hwc)['pixel_values']
    assert torch.equal(processor(hwc, input_data_format='channels_last')['pixel_values'], want)
    assert torch.equal(processor(torch.from_numpy(hwc).permute(2, 0, 1)[None],
                                 input_data_format=ChannelDimension.FIRST)['pixel_values'], want)
    strip = rng.integers(0, 256, (3, 40, 3), dtype=np.uint8)  # 3 x 40 RGB, or 40 x 3 RGB channels first
    first = processor(strip, input_data_format='channels_first')['pixel_values']
    assert torch.equal(first, processor(strip.transpose(1, 2, 0))['pixel_values'])
    assert not torch.equal(first, processor(strip, input_data_format='channels_last')['pixel_values'])
    last = processor([hwc, hwc], data_format='channels_last', return_tensors='np')['pixel_values']
    assert last.shape == (2, 32, 32, 3) and np.array_equal(last[0], want[0].permute(1, 2, 0).numpy())
    with pytest.raises(ValueError, match=r"input_data_format='channels_first', but the array of shape \(40, 50, 3\) "
                                         r"has 40 there, not a channel count"):
        processor(hwc, input_data_format='channels_first')
    for image in (hwc, Image.fromarray(hwc)):  # a PIL image too, though its mode gives its layout
        with pytest.raises(ValueError, match="input_data_format must be one of channels_first, channels_last or None, "
                                             "got 'nchw'"):
            processor(image, input_data_format='nchw')
    with pytest.raises(ValueError, match="data_format must be one of channels_first, channels_last or None, got 'x'"):
        processor(hwc, data_format='x')
    with pytest.raises(TypeError, match=r"Unexpected arguments \['do_resize'\]; .* takes images, return_tensors, "
                                        r"input_data_format and data_format; the transform \(size, crop_pct"):
        processor(hwc, do_resize=False)


def test_bad_inputs_fail_clearly():
    processor = VitMinimalImageProcessorPil.from_config(VitMinimalConfig())
    with pytest.raises(TypeError, match='Expected a PIL image, numpy array or torch tensor'):
        processor('not an image')
    hf = VitMinimalForImageClassification(VitMinimalConfig())
    with pytest.raises(ValueError, match='pixel_values is required'):
        hf()
    with pytest.raises(ValueError, match=r'expects images of shape \(B, 1, H, W\)'):
        hf(torch.randn(1, 3, 28, 28))
    with pytest.raises(ValueError, match=r"Input image size \(32\*32\) doesn't match model \(28\*28\).*"
                                         r'interpolate_pos_encoding=True'):
        hf(torch.randn(1, 1, 32, 32))
    with pytest.raises(TypeError, match=r"unexpected arguments \['output_hidden_state'\]; it takes pixel_values, "
                                        r"labels, output_attentions, output_hidden_states"):
        hf(torch.randn(1, 1, 28, 28), output_hidden_state=True)


def test_a_float_image_a_little_over_1_is_a_0_1_image():
    """A [0, 1] image with values a little over 1 (a pixel at 1.001, strokes at 1.0000001, a bicubic resize's
    overshoot) stays a [0, 1] image, clipped, with a warning only where a value lies further out than rounding; it was
    read as 0..255, near black. A 0-255 float image is read as such; a float image beyond 255 is refused."""
    import warnings
    from PIL import Image
    processor = VitMinimalImageProcessorPil.from_pretrained_cfg(
        timm.create_model('vit_minimal_sym_6x4.mnist').pretrained_cfg)
    rng = np.random.default_rng(0)
    image = rng.random((28, 28)).astype(np.float32)
    reference = processor(image)['pixel_values']
    strokes = np.zeros((28, 28), np.float32)
    strokes[10:14] = 1.0000001
    white = processor(np.where(strokes > 0, 1.0, 0.0).astype(np.float32))['pixel_values']
    with warnings.catch_warnings():
        warnings.simplefilter('error')  # within rounding: no warning
        torch.testing.assert_close(processor(strokes)['pixel_values'], white)
        torch.testing.assert_close(processor(Image.fromarray(strokes, 'F'))['pixel_values'], white)
        one = image.copy()
        one[0, 0] = 1.001
        torch.testing.assert_close(processor(one)['pixel_values'].flatten()[1:], reference.flatten()[1:])
    overshoot = image.copy()
    overshoot[5:7] = 1.2  # as a bicubic resize overshoots an edge
    with pytest.warns(UserWarning, match='56 value.*outside it.*clipped'):
        got = processor(overshoot)['pixel_values']
    assert got.max() == white.max() and torch.allclose(got[..., :5, :], reference[..., :5, :])
    assert torch.allclose(processor(image * 255)['pixel_values'], reference, atol=1e-6)
    with pytest.raises(ValueError, match=r'values in \[0, 1\] or \[0, 255\]'):
        processor(image * 1000)


@pytest.mark.parametrize('interpolation', ['nearest', 'bilinear', 'bicubic', 'box', 'hamming', 'lanczos'])
def test_the_torchvision_processors_resize_is_pillows_within_two_levels(interpolation):
    """The torchvision processor's resize against Pillow's, shrinking and growing, each dimension alone and both,
    grey and RGB: torchvision's uint8 kernels for bilinear and bicubic, Pillow itself for the other filters."""
    processor = VitMinimalImageProcessor(pretrained_cfg=dict(input_size=(3, 32, 32), mean=(0.5,) * 3,
                                                                 std=(0.5,) * 3, interpolation=interpolation))
    rng = np.random.default_rng(0)
    for (h, w), (oh, ow) in (((260, 300), (256, 295)), ((30, 40), (28, 37)), ((28, 28), (56, 56)),
                             ((100, 20), (30, 25)), ((7, 300), (20, 28)), ((50, 64), (50, 32)), ((50, 64), (36, 64))):
        for channels in (1, 3):
            x = rng.integers(0, 256, (h, w, channels), dtype=np.uint8)
            want = np.asarray(Image.fromarray(x.squeeze(-1) if channels == 1 else x).resize(
                (ow, oh), getattr(Image.Resampling, interpolation.upper()))).astype(int)
            got = processor._resize(torch.from_numpy(x).permute(2, 0, 1)[None], (oh, ow))[0].permute(1, 2, 0).numpy()
            assert got.dtype == np.uint8 and got.shape[:2] == want.shape[:2]
            exact = interpolation not in ('bilinear', 'bicubic')
            assert np.abs(got.astype(int) - want.reshape(got.shape)).max() <= (0 if exact else 2), ((h, w), (oh, ow))


def test_processor_saved_with_the_model(saved):
    """transformers' torchvision backend by default and with use_fast=True, the PIL one with use_fast=False (or
    backend='pil'); their pixel values agree within two 8-bit levels."""
    folder, model = saved
    fast, slow = AutoImageProcessor.from_pretrained(folder, use_fast=True), AutoImageProcessor.from_pretrained(folder, use_fast=False)
    assert type(fast) is type(AutoImageProcessor.from_pretrained(folder)) is VitMinimalImageProcessor
    assert type(slow) is type(AutoImageProcessor.from_pretrained(folder, backend='pil')) is VitMinimalImageProcessorPil
    assert fast.to_dict() == dict(slow.to_dict(), image_processor_type='VitMinimalImageProcessor')
    assert slow.num_channels == 3 and slow.image_mean == list(model.pretrained_cfg['mean'])
    images = [_image(50, 64, seed=2), _image(32, 32, seed=3), _image(40, 30, seed=4)]
    torch.testing.assert_close(fast(images)['pixel_values'], slow(images)['pixel_values'], rtol=0, atol=_level(fast))
    content = json.loads((folder / 'preprocessor_config.json').read_text())
    assert content['image_processor_type'] == 'VitMinimalImageProcessor'  # transformers 5's names: plain and ...Pil
    assert content['auto_map']['AutoImageProcessor'] == {
        'torchvision': 'image_processing_vit_minimal.VitMinimalImageProcessor',
        'pil': 'image_processing_vit_minimal.VitMinimalImageProcessorPil'}


@pytest.mark.parametrize('kind', ['VitMinimalImageProcessorFast', 'VitMinimalImageProcessor'])
def test_a_folder_saved_with_the_earlier_names_loads_both_processors(saved, tmp_path, kind):
    """A folder from before transformers 5's names: its processor is ``...Fast`` (torchvision) or the plain name
    (then PIL), its auto_map the (PIL, torchvision) list."""
    import shutil
    folder = tmp_path / 'earlier'
    shutil.copytree(saved[0], folder)
    for name in ('preprocessor_config.json', 'config.json'):
        content = json.loads((folder / name).read_text())
        if name == 'preprocessor_config.json':
            content['image_processor_type'] = kind
        content['auto_map']['AutoImageProcessor'] = ['image_processing_vit_minimal.VitMinimalImageProcessor',
                                                     'image_processing_vit_minimal.VitMinimalImageProcessorFast']
        (folder / name).write_text(json.dumps(content))
    fast = AutoImageProcessor.from_pretrained(folder, use_fast=True)
    slow = AutoImageProcessor.from_pretrained(folder, use_fast=False)
    assert isinstance(fast, VitMinimalImageProcessor) and isinstance(slow, VitMinimalImageProcessorPil)
    images = [_image(50, 64, seed=2), _image(32, 32, seed=3)]
    torch.testing.assert_close(fast(images)['pixel_values'], slow(images)['pixel_values'], rtol=0, atol=_level(fast))


def test_images_are_read_as_pil_and_transformers_read_them():
    """A 16-bit PNG by its mode (not by whether its values stay under 256), EXIF orientation applied, transparency
    composed onto white; bfloat16 tensors taken; a float image that is neither [0, 1] nor [0, 255], and an integer
    image with negative values, refused by name rather than read as black."""
    import io
    processor = VitMinimalImageProcessorPil.from_pretrained_cfg(
        timm.create_model('vit_minimal_sym_6x4.mnist').pretrained_cfg)
    digit = (np.arange(28 * 28).reshape(28, 28) % 200).astype(np.uint8)

    def png(image, **kwargs):
        buffer = io.BytesIO()
        image.save(buffer, **kwargs)
        buffer.seek(0)
        return Image.open(buffer)

    sixteen = png(Image.fromarray(digit.astype(np.uint16)), format='PNG')  # 16-bit values all below 256: near black
    assert sixteen.mode == 'I;16'
    torch.testing.assert_close(processor(sixteen)['pixel_values'], processor(np.zeros_like(digit))['pixel_values'],
                               rtol=0, atol=1 / 255 / 0.3081 + 1e-6)
    torch.testing.assert_close(processor(digit.astype(np.uint16))['pixel_values'],
                               processor(sixteen)['pixel_values'])
    tall = np.zeros((40, 20), np.uint8)
    tall[:5] = 255  # a bright band at the top, stored turned (orientation 6: shown rotated 90 degrees clockwise)
    exif = Image.new('L', (1, 1)).getexif()
    exif[0x0112] = 6
    turned = png(Image.fromarray(tall), format='JPEG', exif=exif.tobytes(), quality=100)
    shown = np.asarray(Image.fromarray(tall).transpose(Image.Transpose.ROTATE_270))
    torch.testing.assert_close(processor(turned)['pixel_values'], processor(shown)['pixel_values'], rtol=0, atol=0.1)
    ink = np.zeros((28, 28, 4), np.uint8)
    ink[..., 3] = digit  # black ink drawn in the alpha channel only
    over_white = Image.alpha_composite(Image.new('RGBA', (28, 28), 'white'), Image.fromarray(ink, 'RGBA'))
    for image in (Image.fromarray(ink, 'RGBA'), ink):
        torch.testing.assert_close(processor(image)['pixel_values'], processor(over_white.convert('L'))['pixel_values'])
    as_float = torch.from_numpy(digit / 255.0)[None]
    torch.testing.assert_close(processor(as_float.to(torch.bfloat16))['pixel_values'],
                               processor(as_float.float())['pixel_values'], rtol=0, atol=4 / 255 / 0.3081)
    overshoot = (digit / 255.0).astype(np.float32)
    overshoot[0, 0] = 1.6
    with pytest.raises(ValueError, match=r'running from 0 to 1.6 is neither a \[0, 1\] image .* nor a \[0, 255\] one'):
        processor(overshoot)
    with pytest.raises(ValueError, match=r'must hold values in \[0, 255\] .* this int64 one runs from -199 to 0'):
        processor(-digit.astype(np.int64))
