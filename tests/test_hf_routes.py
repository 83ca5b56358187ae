"""Every route by which transformers builds the image processor of a saved folder gives the model's own preprocessing,
on whichever release is installed (CI runs the newest and the oldest admitted):

- a local folder whose ``config.json`` holds timm's ``pretrained_cfg`` counts as a timm checkpoint to transformers
  (5.19 on), whose processor dict is then ``config.json``'s; 5.25 builds the processor from that dict, 5.19-5.24 only
  pick the class there and read ``preprocessor_config.json``; a Hub repository's processor dict is
  ``preprocessor_config.json``, or ``config.json`` where it has none;
- the fast and the slow class, ``from_dict`` and ``from_pretrained``.

Each route must give the settings of the model's pretrained cfg, and the pipeline must answer as timm does: on the
bundled MNIST test digits at the shipped checkpoint's accuracy, and on generated images for a CIFAR-10 checkpoint."""
import json
import logging
import os
import shutil
import subprocess
import sys
import textwrap
from importlib import resources

import numpy as np
import pytest
import timm
import torch
from PIL import Image
from transformers import AutoImageProcessor, pipeline

from timm_minimal import VitMinimalForImageClassification, VitMinimalImageProcessorPil, VitMinimalImageProcessor

torch.set_num_threads(1)

NAMES = ('vit_minimal_sym_6x4.mnist', 'vit_minimal_sym_6x4.cifar10')
DIGITS = 500
PROCESSORS = (VitMinimalImageProcessorPil, VitMinimalImageProcessor)
SETTINGS = ('input_size', 'interpolation', 'mean', 'std', 'crop_pct', 'crop_mode')


@pytest.fixture(scope='module')
def folders(tmp_path_factory):
    """name -> (the folder saved as a user saves a timm checkpoint for transformers, the timm model, the same folder
    without preprocessor_config.json)."""
    out = {}
    for name in NAMES:
        model = timm.create_model(name, pretrained=True).eval()
        folder = tmp_path_factory.mktemp(name)
        VitMinimalForImageClassification.from_timm(model).save_pretrained(folder)
        bare = tmp_path_factory.mktemp(f'{name}-bare')
        shutil.copytree(folder, bare, dirs_exist_ok=True)
        (bare / 'preprocessor_config.json').unlink()
        out[name] = folder, model, bare
    return out


def _digits():
    with resources.files('timm_minimal').joinpath('data/mnist_sample.npz').open('rb') as f, np.load(f) as d:
        return [Image.fromarray(x) for x in d['test_images'][:DIGITS]], d['test_labels'][:DIGITS]


def _generated(n=200):
    """Colour images of blocks, most at the model's 32 x 32, some larger (resized by the processor)."""
    rng = np.random.default_rng(0)
    sizes = [(8, 4)] * (n - n // 4) + [(10, 4)] * (n // 4)
    return [Image.fromarray(np.kron(rng.integers(0, 256, (s, s, 3), dtype=np.uint8), np.ones((k, k, 1), np.uint8)))
            for s, k in sizes]


def _timm_settings(model):
    cfg = timm.data.resolve_data_config({}, model=model)
    return {k: list(v) if isinstance(v, tuple) else v for k, v in cfg.items() if k in SETTINGS}


def _timm_predictions(model, images):
    transform = timm.data.create_transform(**timm.data.resolve_data_config({}, model=model))
    mode = 'L' if model.in_chans == 1 else 'RGB'
    with torch.no_grad():
        return np.array([model(transform(im.convert(mode))[None]).argmax(-1).item() for im in images])


@pytest.mark.parametrize('name', NAMES)
def test_every_route_gives_the_models_preprocessing(folders, name):
    folder, model, bare = folders[name]
    want = _timm_settings(model)
    config_dict = json.loads((folder / 'config.json').read_text())
    saved_dict = json.loads((folder / 'preprocessor_config.json').read_text())
    legacy = {k: v for k, v in saved_dict.items() if k != 'pretrained_cfg'}  # what the earlier release saved
    p = VitMinimalImageProcessorPil.from_dict(saved_dict)
    legacy.update(size=p.size, crop_pct=p.crop_pct, crop_mode=p.crop_mode, interpolation=p.interpolation,
                  image_mean=p.image_mean, image_std=p.image_std, num_channels=p.num_channels)
    routes = {}
    for cls in PROCESSORS:
        routes.update({
            f'{cls.__name__}.from_dict(config.json)': cls.from_dict(config_dict),
            f'{cls.__name__}.from_dict(preprocessor_config.json)': cls.from_dict(saved_dict),
            f'{cls.__name__}.from_dict(an earlier release\'s preprocessor_config.json)': cls.from_dict(legacy),
            f'{cls.__name__}.from_pretrained(folder)': cls.from_pretrained(folder),
            f'{cls.__name__}.from_pretrained(folder without preprocessor_config.json)': cls.from_pretrained(bare),
        })
    for where, path in (('folder', folder), ('folder without preprocessor_config.json', bare)):
        for backend, cls in (('pil', VitMinimalImageProcessorPil), ('torchvision', VitMinimalImageProcessor)):
            processor = AutoImageProcessor.from_pretrained(path, backend=backend)
            assert type(processor) is cls, (where, backend, type(processor))
            routes[f'AutoImageProcessor({where}, backend={backend})'] = processor
    for route, processor in routes.items():
        assert _timm_settings_of(processor) == want, route
    assert saved_dict['pretrained_cfg'] == want  # the saved processor's one home of its settings


def test_a_hub_repository_gives_the_same_processor_with_or_without_preprocessor_config(hub_server, folders):
    """A repository id is no local timm checkpoint to transformers: it reads preprocessor_config.json, and where the
    repository has none, config.json (5.25's fallback; the class's own reading on earlier releases)."""
    from huggingface_hub import HfApi
    _, model, bare = folders[NAMES[1]]
    for path in folders[NAMES[1]][::2]:
        repo = HfApi().create_repo(f'testuser/{path.name}').repo_id
        HfApi().upload_folder(folder_path=str(path), repo_id=repo)
        for backend in ('pil', 'torchvision'):
            assert _timm_settings_of(AutoImageProcessor.from_pretrained(repo, backend=backend)) == \
                _timm_settings(model), (repo, backend)


def _timm_settings_of(processor):
    return {k: list(v) if isinstance(v, tuple) else v for k, v in processor.timm_data_config().items()}


@pytest.mark.parametrize('cls', PROCESSORS)
def test_a_processor_without_its_models_settings_refuses(cls, folders):
    """No MNIST-shaped defaults: a processor that got neither its settings nor a pretrained cfg says what is missing
    and where it looked."""
    folder, _, _ = folders[NAMES[1]]
    config_dict = json.loads((folder / 'config.json').read_text())
    config_dict.pop('pretrained_cfg')
    for made in (lambda: cls(), lambda: cls.from_dict(config_dict),
                 lambda: cls.from_dict({'image_processor_type': cls.__name__, 'size': {'height': 32, 'width': 32}})):
        with pytest.raises(ValueError, match=r'was given no (size, )?num_channels, image_mean, image_std, '
                                             r'interpolation, crop_pct: they were looked for as keywords .*'
                                             r'preprocessor_config.json.* and in pretrained_cfg'):
            made()
    with pytest.raises(ValueError, match='The pretrained_cfg gives no mean, std'):
        cls(pretrained_cfg={'input_size': [3, 32, 32]})


def test_a_keyword_overrides_the_pretrained_cfg(folders):
    folder, _, _ = folders[NAMES[1]]
    processor = AutoImageProcessor.from_pretrained(folder, size={'height': 40, 'width': 40})
    assert processor.size == {'height': 40, 'width': 40} and processor.num_channels == 3
    assert processor(_generated(1))['pixel_values'].shape == (1, 3, 40, 40)


def test_the_pipeline_declares_what_it_passes(folders):
    """The pipeline hands the processor ``dtype``; transformers warns of keywords a processor does not declare."""
    from transformers.testing_utils import CaptureLogger
    from transformers.utils import logging as hf_logging
    folder, _, _ = folders[NAMES[0]]
    logger = hf_logging.get_logger('transformers.image_processing_base')
    with CaptureLogger(logger) as captured:
        pipe = pipeline('image-classification', model=str(folder), dtype=torch.float32)
        pipe(_digits()[0][0])
    assert 'backward compatibility' not in captured.out, captured.out


@pytest.mark.parametrize('without_processor_file', [False, True])
def test_the_pipeline_answers_as_timm_on_mnist(folders, without_processor_file):
    folder, model, bare = folders[NAMES[0]]
    images, labels = _digits()
    pipe = pipeline('image-classification', model=str(bare if without_processor_file else folder))
    names = model.pretrained_cfg['label_names']
    got = np.array([names.index(r[0]['label']) for r in pipe(images, top_k=1, batch_size=100)])
    agreement, accuracy = (got == _timm_predictions(model, images)).mean(), (got == labels).mean()
    assert accuracy >= 0.97 and agreement >= 0.99, (accuracy, agreement)


@pytest.mark.parametrize('without_processor_file', [False, True])
def test_the_pipeline_answers_as_timm_on_cifar10_images(folders, without_processor_file):
    folder, model, bare = folders[NAMES[1]]
    images = _generated()
    pipe = pipeline('image-classification', model=str(bare if without_processor_file else folder))
    names = model.pretrained_cfg['label_names']
    got = np.array([names.index(r[0]['label']) for r in pipe(images, top_k=1, batch_size=100)])
    assert (got == _timm_predictions(model, images)).mean() >= 0.98


_REMOTE = textwrap.dedent('''
    import sys
    sys.modules['timm_minimal'] = None  # as if the package were not installed
    import numpy as np
    from PIL import Image
    from transformers import pipeline
    folder, arrays = sys.argv[1], np.load(sys.argv[2])
    images = [arrays[f'arr_{i}'] for i in range(len(arrays.files))]
    pipe = pipeline('image-classification', model=folder, trust_remote_code=True)
    assert type(pipe.model).__module__.startswith('transformers_modules.'), type(pipe.model).__module__
    labels = [r[0]['label'] for r in pipe([Image.fromarray(x) for x in images], top_k=1, batch_size=100)]
    print('LABELS', ','.join(labels))
''')


@pytest.mark.slow
@pytest.mark.parametrize('name', NAMES)
def test_the_pipeline_through_remote_code_answers_as_timm(folders, name, tmp_path):
    """Where ``timm_minimal`` cannot be imported, the code saved in the folder gives the same answers."""
    folder, model, bare = folders[name]
    images = _digits()[0] if model.in_chans == 1 else _generated()
    np.savez(tmp_path / 'images.npz', *[np.array(im) for im in images])
    want = _timm_predictions(model, images)
    env = {k: v for k, v in os.environ.items() if k != 'PYTHONPATH'}
    env.update(HF_MODULES_CACHE=str(tmp_path / 'modules'), HF_HUB_OFFLINE='1')
    names = model.pretrained_cfg['label_names']
    for path in (folder, bare):
        result = subprocess.run([sys.executable, '-c', _REMOTE, str(path), str(tmp_path / 'images.npz')], cwd=tmp_path,
                                env=env, capture_output=True, text=True, timeout=600)
        assert result.returncode == 0, result.stderr[-3000:]
        line = next(x for x in result.stdout.splitlines() if x.startswith('LABELS '))
        got = np.array([names.index(label) for label in line[len('LABELS '):].split(',')])
        assert (got == want).mean() >= 0.99, (path, (got == want).mean())
        if model.in_chans == 1:
            assert (got == _digits()[1]).mean() >= 0.97
