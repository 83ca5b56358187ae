"""The Hugging Face transformers integration: Auto classes, outputs, one checkpoint folder for
transformers and timm, remote code, pipeline, image processor, hf_configs/ and loading errors.

Everything runs on local folders; nothing reaches the Hugging Face Hub."""
import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import timm
import torch
import torch.nn.functional as F
from PIL import Image
from safetensors.torch import load_file, save_file
from timm.data import create_transform, resolve_data_config
from transformers import (
    AutoConfig, AutoModel, AutoModelForImageClassification, pipeline,
)

import timm_minimal
from timm_minimal import (
    ARCHITECTURES, VisionTransformerMinimal, VitMinimalConfig, VitMinimalForImageClassification,
    VitMinimalImageProcessor, VitMinimalModel,
)
from timm_minimal.tools.hub.hf_export import check_hf_configs, write_hf_configs
from timm_minimal.models.layers import sincos_2d_pos_embed
from transformers.modeling_outputs import ImageClassifierOutput

torch.set_num_threads(1)

ROOT = Path(__file__).resolve().parents[1]
REPRESENTATIVE = ['vit_minimal_std_mlp_6x1', 'vit_minimal_sym_6x4.cifar10', 'vit_minimal_qkonly_6x1',
                  'vit_minimal_chol_6x1']
ATOL = 1e-5


def _timm_and_hf(name, seed=0):
    """A timm model with random weights and the HF classification model converted from it (eval mode)."""
    torch.manual_seed(seed)
    model = timm.create_model(name).eval()
    return model, VitMinimalForImageClassification.from_timm(model).eval()


def _input(model, batch=2, seed=1):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(batch, *model.pretrained_cfg['input_size'], generator=g)


def _image(width=40, height=30, seed=0):
    rng = np.random.default_rng(seed)
    return Image.fromarray(rng.integers(0, 256, (height, width, 3), dtype=np.uint8))


@pytest.fixture(scope='module')
def checkpoints(tmp_path_factory):
    """save_pretrained folders of two models: chol (MNIST, both non-persistent buffers) and sym 6x4 (CIFAR-10)."""
    out = {}
    for name in ('vit_minimal_chol_6x1', 'vit_minimal_sym_6x4.cifar10'):
        model, hf = _timm_and_hf(name)
        folder = tmp_path_factory.mktemp(name.replace('.', '_'))
        hf.save_pretrained(folder)
        out[name] = (folder, model)
    return out


# -- registration and config -----------------------------------------------------------------------

def test_auto_classes_registered_on_import():
    config = AutoConfig.for_model('vit_minimal')
    assert type(config) is VitMinimalConfig and config.model_type == 'vit_minimal'
    assert type(AutoModel.from_config(config)) is VitMinimalModel
    assert type(AutoModelForImageClassification.from_config(config)) is VitMinimalForImageClassification
    model = AutoModelForImageClassification.from_config(AutoConfig.for_model('vit_minimal', attn_type='sym',
                                                                            num_heads=4))
    assert model.vit_minimal.blocks[0].attn.num_heads == 4
    assert timm_minimal.VitMinimalForImageClassification is VitMinimalForImageClassification


@pytest.mark.slow
@pytest.mark.parametrize('transformers_first', [False, True])
def test_registration_waits_for_transformers_and_still_finds_vit_minimal(checkpoints, transformers_first):
    """In a fresh process, import timm_minimal does not import transformers; the Auto classes imported before
    or after it find the vit_minimal type, the image processor and no video processor, without a class of
    ours imported by hand."""
    folder, _ = checkpoints['vit_minimal_chol_6x1']
    script = textwrap.dedent(f"""
        import sys
        {'import transformers.models.auto.configuration_auto' if transformers_first else ''}
        import timm_minimal
        assert ('transformers' in sys.modules) == {transformers_first}, 'transformers imported by timm_minimal'
        from transformers import AutoConfig, AutoImageProcessor, AutoModelForImageClassification
        model = AutoModelForImageClassification.from_pretrained(sys.argv[1])
        processor = AutoImageProcessor.from_pretrained(sys.argv[1])
        print(type(AutoConfig.for_model('vit_minimal')).__module__, type(model).__module__,
              type(processor).__module__)
    """)
    result = subprocess.run([sys.executable, '-c', script, str(folder)], capture_output=True, text=True,
                            timeout=300, env={**os.environ, 'HF_HUB_OFFLINE': '1'})
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ['timm_minimal.models.configuration_vit_minimal',
                                     'timm_minimal.models.modeling_vit_minimal',
                                     'timm_minimal.models.image_processing_vit_minimal']


def test_a_default_config_builds_the_default_model():
    """The config's defaults give the model that VisionTransformerMinimal() builds: same tensors, same shapes."""
    hf = VitMinimalForImageClassification(VitMinimalConfig())
    plain = VisionTransformerMinimal()
    assert {k: v.shape for k, v in hf.vit_minimal.state_dict().items()} == \
        {k: v.shape for k, v in plain.state_dict().items()}
    same_size = {'img_size': plain.patch_embed.img_size, 'patch_size': plain.patch_embed.patch_size}
    assert {**hf.vit_minimal.init_kwargs, **same_size} == {**plain.init_kwargs, **same_size}
    assert hf.vit_minimal.patch_embed.img_size == plain.patch_embed.img_size
    assert (hf.config.hidden_size, hf.config.num_hidden_layers, hf.config.num_attention_heads) == (60, 6, 1)


def test_config_roundtrip_and_timm_format(tmp_path):
    config = VitMinimalConfig.from_timm('vit_minimal_sym_6x4.cifar10')
    assert config.architecture == 'vit_minimal_sym_6x4'
    assert (config.in_chans, config.img_size, config.patch_size, config.num_heads) == (3, 32, 4, 4)
    assert config.id2label[0] == 'airplane' and config.label2id['truck'] == 9
    assert VitMinimalConfig.from_dict(config.to_dict()).to_dict() == config.to_dict()

    config.save_pretrained(tmp_path)
    loaded = AutoConfig.from_pretrained(tmp_path)
    assert type(loaded) is VitMinimalConfig and loaded.to_json_string() == config.to_json_string()
    content = json.loads((tmp_path / 'config.json').read_text())
    assert content['model_type'] == 'vit_minimal'
    assert content['architecture'] == 'vit_minimal_sym_6x4' and content['num_classes'] == 10
    assert content['num_features'] == 60 and 'num_classes' not in content['model_args']
    assert content['label_names'][0] == 'airplane'
    assert set(content['auto_map']) == {'AutoConfig', 'AutoModel', 'AutoModelForImageClassification',
                                        'AutoImageProcessor'}
    # what timm reads from the same file
    from timm.models._hub import load_model_config_from_path
    pretrained_cfg, arch, model_args = load_model_config_from_path(tmp_path)
    assert arch == 'vit_minimal_sym_6x4' and pretrained_cfg['num_classes'] == 10
    assert tuple(pretrained_cfg['input_size']) == (3, 32, 32) and model_args['patch_size'] == 4

    # a timm-style export with partial model_args (geometry from the tag, variant from the name)
    partial = VitMinimalConfig(architecture='vit_minimal_qk_mlp_12x1', num_classes=10,
                               model_args={'global_pool': 'avg'}, pretrained_cfg={'tag': 'cifar10',
                                                                                  'input_size': [3, 32, 32]})
    assert (partial.attn_type, partial.use_mlp, partial.depth, partial.patch_size, partial.in_chans) == \
        ('qk', True, 12, 4, 3)


@pytest.mark.parametrize('kwargs, message', [
    (dict(attn_type='foo'), "Unknown attn_type 'foo'; choose one of std, qk, qkonly, sym, chol"),
    (dict(attn_type='qk', num_heads=4), 'num_heads=1 only'),
    (dict(global_pool='mean'), "Unknown global_pool 'mean'"),
    (dict(img_size=30), 'multiple of patch_size'),
    (dict(patch_size=0), r'patch_size must be a positive integer or a pair of them, got \(0, 0\)'),
    (dict(model_args={'depht': 3}), r"Unknown model_args \['depht'\].*allowed: img_size"),
    (dict(architecture='vit_minimal_foo_6x1'), "Unknown architecture 'vit_minimal_foo_6x1'.*vit_minimal_std_6x1"),
    (dict(architecture='vit_minimal_sym_6x4', depth=12), 'implies depth=6, but depth=12'),
    (dict(num_classes=5, id2label={0: 'a', 1: 'b'}), 'num_classes=5 .* id2label has 2'),
])
def test_config_errors_say_what_is_allowed(kwargs, message):
    with pytest.raises(Exception, match=message):
        VitMinimalConfig(**kwargs)


@pytest.mark.parametrize('kwargs', [
    dict(pos_embed='x'), dict(embed_dim=62), dict(img_size=30), dict(attn_type='chol', num_heads=2),
    dict(global_pool='token'), dict(depth=0),
])
def test_config_refuses_what_the_model_refuses_with_the_same_message(kwargs):
    """One set of rules: the config runs the model's own checks, without building a model."""
    with pytest.raises(ValueError) as model_error:
        VisionTransformerMinimal(**kwargs)
    with pytest.raises(Exception, match=re.escape(str(model_error.value))):
        VitMinimalConfig(**kwargs)


# -- forward: timm parity, loss, hidden states, attentions, checkpointing, attention implementation -------------

@pytest.mark.parametrize('name', REPRESENTATIVE)
def test_logits_equal_timm(name):
    model, hf = _timm_and_hf(name)
    x = _input(model)
    with torch.no_grad():
        ref = model(x)
        out = hf(pixel_values=x)
    assert isinstance(out, ImageClassifierOutput) and out.loss is None
    torch.testing.assert_close(out.logits, ref, rtol=0, atol=ATOL)
    assert hf.config._attn_implementation == 'sdpa'
    hf.set_attn_implementation('eager')
    with torch.no_grad():
        torch.testing.assert_close(hf(x).logits, ref, rtol=0, atol=ATOL)
    assert not any(blk.attn.fused_attn for blk in hf.vit_minimal.blocks)


def test_loss_with_labels():
    model, hf = _timm_and_hf('vit_minimal_sym_6x4')
    hf.train()
    x, labels = _input(model, batch=4), torch.tensor([0, 3, 9, 3])
    out = hf(pixel_values=x, labels=labels)
    torch.testing.assert_close(out.loss, F.cross_entropy(out.logits, labels))
    out.loss.backward()
    assert all(p.grad is not None for p in hf.parameters())
    loss, logits = hf(x, labels=labels, return_dict=False)
    assert logits.shape == (4, 10) and loss.ndim == 0


def test_hidden_states_and_attentions():
    model, hf = _timm_and_hf('vit_minimal_sym_6x4')
    x = _input(model)
    with torch.no_grad():
        out = hf(pixel_values=x, output_hidden_states=True, output_attentions=True)
        _, intermediates = model.forward_intermediates(x, output_fmt='NLC')
    depth, tokens, heads = 6, 16, 4
    assert len(out.hidden_states) == depth + 1
    assert all(h.shape == (2, tokens, 60) for h in out.hidden_states)
    torch.testing.assert_close(out.hidden_states[0], model._pos_embed(model.patch_embed(x)))
    for h, ref in zip(out.hidden_states[1:], intermediates):
        torch.testing.assert_close(h, ref)
    torch.testing.assert_close(out.logits, model(x), rtol=0, atol=ATOL)
    assert len(out.attentions) == depth
    for i, (attn, blk) in enumerate(zip(out.attentions, hf.vit_minimal.blocks)):
        assert attn.shape == (2, heads, tokens, tokens)
        torch.testing.assert_close(attn.sum(-1), torch.ones(2, heads, tokens))
        with torch.no_grad():
            torch.testing.assert_close(attn, blk.attn.attention_weights(blk.norm1(out.hidden_states[i])))
    assert hf(x).hidden_states is None and hf(x).attentions is None

    base = VitMinimalModel(hf.config)
    base.load_state_dict(hf.state_dict(), strict=False)
    base.eval()
    with torch.no_grad():
        features = base(x, output_attentions=True)
    torch.testing.assert_close(features.last_hidden_state, model.forward_features(x))
    torch.testing.assert_close(features.pooler_output, model.forward_head(model.forward_features(x), pre_logits=True))
    assert len(features.attentions) == depth and features.hidden_states is None


@pytest.mark.parametrize('pos_embed', ['learn', 'sincos'])
def test_interpolate_pos_encoding_takes_another_size_for_one_call(pos_embed):
    """transformers' ViT argument: the logits of the timm model built with dynamic_img_size=True from the same
    weights, for this call only; the model is left static, after an error too."""
    torch.manual_seed(0)
    model = timm.create_model('vit_minimal_sym_6x4', pos_embed=pos_embed).eval()
    dynamic = timm.create_model('vit_minimal_sym_6x4', pos_embed=pos_embed, dynamic_img_size=True).eval()
    dynamic.load_state_dict(model.state_dict())
    hf = VitMinimalForImageClassification.from_timm(model).eval()
    base = VitMinimalModel(hf.config).eval()
    base.load_state_dict(hf.state_dict(), strict=False)
    x, same = torch.randn(2, 1, 56, 35), _input(model)
    with torch.no_grad():
        out = hf(x, interpolate_pos_encoding=True, output_hidden_states=True)
        torch.testing.assert_close(out.logits, dynamic(x), rtol=0, atol=0)
        assert out.hidden_states[-1].shape == (2, 8 * 5, 60)
        torch.testing.assert_close(base(x, interpolate_pos_encoding=True).last_hidden_state,
                                   dynamic.forward_features(x), rtol=0, atol=0)
        torch.testing.assert_close(hf(same, interpolate_pos_encoding=True).logits, model(same), rtol=0, atol=0)
        with pytest.raises(ValueError, match='multiples of its patch size 7x7, got 30x30'):
            hf(torch.randn(1, 1, 30, 30), interpolate_pos_encoding=True)
        with pytest.raises(ValueError, match='positive multiples of its patch size 7x7, got 0x0'):
            hf(torch.randn(1, 1, 0, 0), interpolate_pos_encoding=True)
        for call in (hf, base, model):
            with pytest.raises(ValueError, match='28'):
                call(x)
    assert not model.dynamic_img_size and model.patch_embed.strict_img_size and hf.config.dynamic_img_size is False


def test_the_base_model_takes_add_pooling_layer_as_vit_model_does(checkpoints):
    """AutoModel.from_pretrained(..., add_pooling_layer=False), as feature extractors load ViTModel: the same tokens,
    no pooler_output."""
    folder, _ = checkpoints['vit_minimal_sym_6x4.cifar10']
    pooled, tokens_only = (AutoModel.from_pretrained(folder, **kw).eval() for kw in ({}, {'add_pooling_layer': False}))
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        a, b = pooled(x), tokens_only(x)
        torch.testing.assert_close(b.last_hidden_state, a.last_hidden_state, rtol=0, atol=0)
        assert a.pooler_output.shape == (2, 60) and b.pooler_output is None
        assert len(tokens_only(x, return_dict=False)) == 1


def test_attention_is_computed_once_and_only_when_asked_for(monkeypatch):
    """output_attentions: one q/k/v computation per block, not two; output_hidden_states alone: no attention
    weights at all (the fused kernel); the logits are those of the plain forward every time."""
    hf = VitMinimalForImageClassification(VitMinimalConfig.from_timm('vit_minimal_sym_6x4')).eval()
    layer = type(hf.vit_minimal.blocks[0].attn)
    x = torch.randn(2, 1, 28, 28)
    calls = {'qkv': 0, 'weights': 0}
    compute_qkv, attend = layer.compute_qkv, layer.attend

    def counting_qkv(self, *args):
        calls['qkv'] += 1
        return compute_qkv(self, *args)

    def counting_attend(self, x, need_weights=False):
        out, weights = attend(self, x, need_weights)
        calls['weights'] += weights is not None
        return out, weights
    monkeypatch.setattr(layer, 'compute_qkv', counting_qkv)
    monkeypatch.setattr(layer, 'attend', counting_attend)
    with torch.no_grad():
        plain = hf(x).logits
        assert calls == {'qkv': 6, 'weights': 0}
        out = hf(x, output_attentions=True)
        assert calls == {'qkv': 12, 'weights': 6} and len(out.attentions) == 6
        torch.testing.assert_close(out.logits, plain)
        out = hf(x, output_hidden_states=True)
        assert calls == {'qkv': 18, 'weights': 6} and len(out.hidden_states) == 7 and out.attentions is None
        torch.testing.assert_close(out.logits, plain)


def test_gradient_checkpointing_same_output_and_gradients():
    model, hf = _timm_and_hf('vit_minimal_std_mlp_6x1')
    x, labels = _input(model), torch.tensor([1, 2])
    hf.train()
    ref = hf(x, labels=labels)
    ref.loss.backward()
    ref_grads = {n: p.grad.clone() for n, p in hf.named_parameters()}
    hf.zero_grad()
    # transformers 5.23 renamed gradient checkpointing to activation checkpointing; the oldest admitted has the old names
    renamed = hasattr(hf, 'activation_checkpointing_enable')
    enable, disable, enabled = (('activation_checkpointing_enable', 'activation_checkpointing_disable',
                                 'is_activation_checkpointing') if renamed else
                                ('gradient_checkpointing_enable', 'gradient_checkpointing_disable',
                                 'is_gradient_checkpointing'))
    getattr(hf, enable)()
    assert getattr(hf, enabled) and hf.vit_minimal.grad_checkpointing
    out = hf(x, labels=labels)
    torch.testing.assert_close(out.logits, ref.logits)
    out.loss.backward()
    for n, p in hf.named_parameters():
        torch.testing.assert_close(p.grad, ref_grads[n], msg=n)
    getattr(hf, disable)()
    assert not getattr(hf, enabled) and not hf.vit_minimal.grad_checkpointing


# -- one checkpoint folder: transformers, timm, remote code, pipeline ------------------------------------

@pytest.mark.parametrize('name', ['vit_minimal_chol_6x1', 'vit_minimal_sym_6x4.cifar10'])
def test_save_pretrained_loads_in_transformers_and_timm(checkpoints, name):
    folder, model = checkpoints[name]
    assert {'config.json', 'model.safetensors', 'preprocessor_config.json', 'modeling_vit_minimal.py',
            'configuration_vit_minimal.py', 'image_processing_vit_minimal.py', 'images.py', 'vit_minimal.py',
            'layers.py'} <= {p.name for p in folder.iterdir()}
    # the weight file holds timm's own keys
    assert set(load_file(folder / 'model.safetensors')) == set(model.state_dict())

    x = _input(model)
    with torch.no_grad():
        ref = model(x)
        hf = AutoModelForImageClassification.from_pretrained(folder)
        assert type(hf) is VitMinimalForImageClassification
        torch.testing.assert_close(hf(x).logits, ref, rtol=0, atol=ATOL)
        from_timm = timm.create_model(f'local-dir:{folder}', pretrained=True).eval()
        torch.testing.assert_close(from_timm(x), ref, rtol=0, atol=ATOL)
        torch.testing.assert_close(hf(x).logits, from_timm(x), rtol=0, atol=ATOL)
    # the buffers checkpoints do not hold were recomputed after meta-device loading
    grid = hf.vit_minimal.patch_embed.grid_size
    torch.testing.assert_close(hf.vit_minimal.pos_embed_sincos, sincos_2d_pos_embed(grid[0], grid[1], 60))
    for blk in hf.vit_minimal.blocks:
        if hasattr(blk.attn, 'tril_indices'):
            assert torch.equal(blk.attn.tril_indices, torch.tril_indices(60, 60))
    assert from_timm.pretrained_cfg['input_size'] == model.pretrained_cfg['input_size']
    assert from_timm.pretrained_cfg['label_names'] == list(hf.config.id2label.values())

    # the base model reads the classification checkpoint (without its classifier)
    base = AutoModel.from_pretrained(folder)
    with torch.no_grad():
        torch.testing.assert_close(base(x).last_hidden_state, model.forward_features(x), rtol=0, atol=ATOL)

    # saving a loaded model again writes the same keys and values
    resaved = folder.parent / (folder.name + '_resaved')
    hf.save_pretrained(resaved)
    a, b = load_file(folder / 'model.safetensors'), load_file(resaved / 'model.safetensors')
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_transformers_timm_wrapper_reads_the_folder_too(checkpoints):
    """transformers' generic TimmWrapper builds the model through timm from the same config.json
    (it fails on a num_classes inside model_args, which is why the config keeps it at the top level)."""
    from transformers import TimmWrapperForImageClassification
    folder, model = checkpoints['vit_minimal_chol_6x1']
    wrapper = TimmWrapperForImageClassification.from_pretrained(folder).eval()
    x = _input(model)
    with torch.no_grad():
        torch.testing.assert_close(wrapper(x).logits, model(x), rtol=0, atol=ATOL)


def test_from_timm_keeps_weights_and_to_timm_shares_them():
    model, hf = _timm_and_hf('vit_minimal_qk_mlp_12x1')
    own = {k.removeprefix('vit_minimal.'): v for k, v in hf.state_dict().items()}
    assert own.keys() == model.state_dict().keys()
    assert all(torch.equal(own[k], v) for k, v in model.state_dict().items())
    back = hf.to_timm()
    assert back is hf.vit_minimal and back.pretrained_cfg['architecture'] == 'vit_minimal_qk_mlp_12x1'
    base = VitMinimalModel.from_timm(model)
    assert base.vit_minimal.num_classes == 0


@pytest.mark.slow
def test_remote_code_without_the_package(checkpoints, tmp_path):
    """The folder loads with trust_remote_code=True where `import timm_minimal` fails."""
    folder, model = checkpoints['vit_minimal_chol_6x1']
    x = _input(model)
    with torch.no_grad():
        torch.save({'x': x, 'logits': model(x)}, tmp_path / 'expected.pt')
    script = textwrap.dedent('''
        import sys
        sys.modules['timm_minimal'] = None  # as if the package were not installed
        try:
            import timm_minimal
        except ImportError:
            pass
        else:
            raise SystemExit('timm_minimal is importable')
        import torch
        from PIL import Image
        from transformers import AutoImageProcessor, AutoModelForImageClassification, pipeline
        folder, expected = sys.argv[1], torch.load(sys.argv[2])
        model = AutoModelForImageClassification.from_pretrained(folder, trust_remote_code=True)
        assert type(model).__module__.startswith('transformers_modules.'), type(model).__module__
        with torch.no_grad():
            diff = (model(expected['x']).logits - expected['logits']).abs().max().item()
        processor = AutoImageProcessor.from_pretrained(folder, trust_remote_code=True)
        slow = AutoImageProcessor.from_pretrained(folder, trust_remote_code=True, use_fast=False)
        assert type(processor).__name__ == 'VitMinimalImageProcessor', type(processor)
        assert type(slow).__name__ == 'VitMinimalImageProcessorPil', type(slow)
        image = Image.linear_gradient('L').resize((40, 30)).convert('RGB')
        pixels = processor(image)['pixel_values']
        assert pixels.shape == (1, 1, 28, 28), pixels.shape
        assert (pixels - slow(image)['pixel_values']).abs().max() <= 2 / 255 + 1e-6
        labels = [r['label'] for r in pipeline('image-classification', model=folder, trust_remote_code=True)(
            Image.new('RGB', (40, 30), 'white'))]
        print('MAXDIFF', diff, 'LABELS', ','.join(labels))
    ''')
    (tmp_path / 'load_remote.py').write_text(script)
    env = {k: v for k, v in os.environ.items() if k != 'PYTHONPATH'}
    env.update(HF_MODULES_CACHE=str(tmp_path / 'modules'), HF_HUB_OFFLINE='1', TRANSFORMERS_OFFLINE='1')
    result = subprocess.run(
        [sys.executable, str(tmp_path / 'load_remote.py'), str(folder), str(tmp_path / 'expected.pt')],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    line = next(line for line in result.stdout.splitlines() if line.startswith('MAXDIFF'))
    assert float(line.split()[1]) <= ATOL, line
    assert set(line.split()[3].split(',')) <= {str(i) for i in range(10)}


def test_pipeline_returns_class_names(checkpoints, monkeypatch):
    asked = []  # with timm_minimal installed, nothing asks whether to run the folder's remote code
    monkeypatch.setattr('builtins.input', lambda message='': asked.append(message) or 'n')
    for name, names in (('vit_minimal_chol_6x1', [str(i) for i in range(10)]),
                        ('vit_minimal_sym_6x4.cifar10', ['airplane', 'automobile', 'bird', 'cat', 'deer', 'dog',
                                                         'frog', 'horse', 'ship', 'truck'])):
        folder, model = checkpoints[name]
        classifier = pipeline('image-classification', model=str(folder))
        assert isinstance(classifier.image_processor, VitMinimalImageProcessor)  # transformers' default backend
        result = classifier(_image(), top_k=3)
        assert len(result) == 3 and all(r['label'] in names and 0 <= r['score'] <= 1 for r in result)
        assert not asked, asked
        # the top label is the model's own prediction on the timm-preprocessed image
        transform = create_transform(**resolve_data_config({}, model=model))
        image = _image().convert('L' if model.in_chans == 1 else 'RGB')
        with torch.no_grad():
            top = model(transform(image).unsqueeze(0)).argmax(-1).item()
        assert result[0]['label'] == names[top]


# -- image processor --------------------------------------------------------------------------------


# -- hf_configs/ ------------------------------------------------------------------------------------

def test_hf_configs_are_up_to_date(tmp_path):
    write_hf_configs(tmp_path)
    committed = ROOT / 'hf_configs'
    generated = {p.relative_to(tmp_path) for p in tmp_path.rglob('*.json')}
    assert len(generated) == len(ARCHITECTURES) == 28
    problems = check_hf_configs(committed)
    assert not problems, ('hf_configs/ is out of date with the registry:\n  ' + '\n  '.join(problems)
                          + '\nRegenerate it with: python scripts/generate_hf_configs.py')
    for relative in generated:
        assert (committed / relative).read_text() == (tmp_path / relative).read_text(), relative


def test_hf_configs_describe_the_registered_models():
    for name in ('vit_minimal_sym_6x4', 'vit_minimal_qkonly_mlp_12x1'):
        config = AutoConfig.from_pretrained(ROOT / 'hf_configs' / name)
        assert config.architecture == name
        hf = VitMinimalForImageClassification(config)
        reference = timm.create_model(name)
        assert {k.removeprefix('vit_minimal.'): tuple(v.shape) for k, v in hf.state_dict().items()} == \
            {k: tuple(v.shape) for k, v in reference.state_dict().items()}


# -- loading errors ---------------------------------------------------------------------------------

def _copy(folder, tmp_path, name):
    target = tmp_path / name
    shutil.copytree(folder, target)
    return target


def test_wrong_architecture_fails_naming_the_keys(checkpoints, tmp_path):
    folder, _ = checkpoints['vit_minimal_sym_6x4.cifar10']
    wrong = _copy(folder, tmp_path, 'wrong')
    VitMinimalConfig.from_timm('vit_minimal_std_6x4.cifar10').save_pretrained(wrong)  # a std config, sym weights
    with pytest.raises(RuntimeError, match=r'missing keys \(12\): blocks.0.attn.qkv.bias, blocks.0.attn.qkv.weight') \
            as error:
        AutoModelForImageClassification.from_pretrained(wrong)
    assert 'unexpected keys (12): blocks.0.attn.qv.bias' in str(error.value)
    # an MLP checkpoint into the same variant without MLP: nothing missing, the MLP is unexpected
    mlp = _copy(folder, tmp_path, 'mlp')
    model, hf = _timm_and_hf('vit_minimal_sym_mlp_6x4.cifar10')
    hf.save_pretrained(mlp)
    VitMinimalConfig.from_timm('vit_minimal_sym_6x4.cifar10').save_pretrained(mlp)
    with pytest.raises(RuntimeError, match=r'unexpected keys \(24\): blocks.0.mlp.fc1.bias'):
        AutoModelForImageClassification.from_pretrained(mlp)


def test_missing_or_misshaped_tensors_fail_naming_the_keys(checkpoints, tmp_path):
    folder, _ = checkpoints['vit_minimal_chol_6x1']
    tensors = load_file(folder / 'model.safetensors')

    missing = _copy(folder, tmp_path, 'missing')
    save_file({k: v for k, v in tensors.items() if k != 'blocks.3.attn.tril'}, missing / 'model.safetensors',
              metadata={'format': 'pt'})
    with pytest.raises(RuntimeError, match=r'missing keys \(1\): blocks.3.attn.tril\n'):
        AutoModelForImageClassification.from_pretrained(missing)

    misshaped = _copy(folder, tmp_path, 'misshaped')
    save_file(dict(tensors, **{'blocks.0.attn.v.weight': torch.zeros(60, 30)}), misshaped / 'model.safetensors',
              metadata={'format': 'pt'})
    with pytest.raises(RuntimeError, match=r'blocks.0.attn.v.weight is \[60, 30\] in the checkpoint, \[60, 60\] in '
                                           r'the model'):
        AutoModelForImageClassification.from_pretrained(misshaped)
    with pytest.raises(RuntimeError, match='blocks.0.attn.v.weight'):  # timm reads the same file and fails too
        timm.create_model(f'local-dir:{misshaped}', pretrained=True)


def test_failed_load_state_dict_changes_nothing():
    _, hf = _timm_and_hf('vit_minimal_chol_6x1')
    before = {k: v.clone() for k, v in hf.state_dict().items()}
    bad = {k.removeprefix('vit_minimal.'): torch.zeros_like(v) for k, v in before.items()}
    bad['head.weight'] = torch.zeros(3, 60)
    with pytest.raises(RuntimeError, match=r'head.weight is \[3, 60\] in the checkpoint, \[10, 60\] in the model'):
        hf.load_state_dict(bad)
    assert all(torch.equal(v, before[k]) for k, v in hf.state_dict().items())


def test_new_classifier_with_ignore_mismatched_sizes(checkpoints):
    folder, model = checkpoints['vit_minimal_chol_6x1']
    with pytest.raises(RuntimeError, match=r'head.weight is \[10, 60\] in the checkpoint, \[5, 60\]'):
        AutoModelForImageClassification.from_pretrained(folder, num_labels=5)
    hf = AutoModelForImageClassification.from_pretrained(folder, num_labels=5, ignore_mismatched_sizes=True)
    x = _input(model)
    with torch.no_grad():
        out = hf(x)
        torch.testing.assert_close(hf.vit_minimal.forward_features(x), model.forward_features(x), rtol=0, atol=ATOL)
    assert out.logits.shape == (2, 5) and torch.isfinite(out.logits).all()
    assert hf.vit_minimal.head.weight.std() < 0.1  # re-initialised (truncated normal, std 0.02), not garbage


def test_a_model_with_a_distillation_token_loads_as_both_classes(tmp_path):
    """A checkpoint with DeiT's distillation token: the classification model predicts the mean of its two heads as
    timm's does, the base model loads it without the classifiers, and a new class count re-initialises both."""
    torch.manual_seed(0)
    model = timm.create_model('vit_minimal_sym_6x4.cifar10', distill_token=True).eval()
    hf = VitMinimalForImageClassification.from_timm(model).eval()
    hf.save_pretrained(tmp_path)
    x = _input(model)
    loaded = AutoModelForImageClassification.from_pretrained(tmp_path).eval()
    base = AutoModel.from_pretrained(tmp_path).eval()
    five = AutoModelForImageClassification.from_pretrained(tmp_path, num_labels=5, ignore_mismatched_sizes=True)
    with torch.no_grad():
        torch.testing.assert_close(loaded(x).logits, model(x), rtol=0, atol=ATOL)
        torch.testing.assert_close(base(x).last_hidden_state, model.forward_features(x), rtol=0, atol=ATOL)
        assert five.eval()(x).logits.shape == (2, 5) and five.vit_minimal.head_dist.weight.shape == (5, 60)


@pytest.mark.slow
def test_remote_code_names_what_it_needs_without_timm(checkpoints, tmp_path):
    """Remote code builds the model with timm's layers: without timm, loading stops and says to install it."""
    folder, _ = checkpoints['vit_minimal_chol_6x1']
    script = textwrap.dedent('''
        import sys

        class NotInstalled:  # timm and timm_minimal look as if they were not installed
            def find_spec(self, name, path=None, target=None):
                if name.split('.')[0] in ('timm', 'timm_minimal'):
                    raise ModuleNotFoundError(f"No module named '{name}'", name=name)

        sys.meta_path.insert(0, NotInstalled())
        from transformers import AutoModelForImageClassification
        try:
            AutoModelForImageClassification.from_pretrained(sys.argv[1], trust_remote_code=True)
        except ImportError as e:
            print('IMPORTERROR', str(e).replace(chr(10), ' '))
        else:
            raise SystemExit('loaded without timm')
    ''')
    (tmp_path / 'no_timm.py').write_text(script)
    env = {k: v for k, v in os.environ.items() if k != 'PYTHONPATH'}
    env.update(HF_MODULES_CACHE=str(tmp_path / 'modules'), HF_HUB_OFFLINE='1', TRANSFORMERS_OFFLINE='1')
    result = subprocess.run([sys.executable, str(tmp_path / 'no_timm.py'), str(folder)], cwd=tmp_path, env=env,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    line = next(line for line in result.stdout.splitlines() if line.startswith('IMPORTERROR'))
    assert 'timm' in line and 'pip install' in line, line


def test_an_input_of_another_size_is_bounded_by_the_activation_limit(monkeypatch):
    """``interpolate_pos_encoding=True`` (and ``dynamic_img_size``) took any size: 1400 x 1400 ran for 124 s. An
    input that makes more patches than the activation limit allows the model is refused before it is read."""
    import time
    hf = VitMinimalForImageClassification.from_timm('vit_minimal_sym_6x4.mnist').eval()
    start = time.perf_counter()
    with pytest.raises(ValueError, match=r'at most 8192 patches .* got 1400x1400: 40000 patches'):
        hf(torch.zeros(1, 1, 1400, 1400), interpolate_pos_encoding=True)
    assert time.perf_counter() - start < 5
    dynamic = timm.create_model('vit_minimal_sym_6x4.mnist', dynamic_img_size=True).eval()
    with pytest.raises(ValueError, match='TIMM_MINIMAL_MAX_ACTIVATIONS'):
        dynamic(torch.zeros(1, 1, 1400, 1400))
    assert hf(torch.zeros(1, 1, 280, 280), interpolate_pos_encoding=True).logits.shape == (1, 10)  # 1,600 patches
    monkeypatch.setenv('TIMM_MINIMAL_MAX_ACTIVATIONS', str(4 * 1000 ** 2))  # the limit is the environment's, at build
    assert timm.create_model('vit_minimal_sym_6x4.mnist').max_tokens == 1000


