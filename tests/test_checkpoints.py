"""Loading and adapting weights, dynamic image sizes and clear errors on bad input."""
import json
import logging

import pytest
import safetensors.torch
import timm
import torch
from timm.models import load_checkpoint, save_for_hf

import timm_minimal  # noqa: F401
from timm_minimal import checkpoint_filter_fn

torch.set_num_threads(1)


def _trained_like(name, **kwargs):
    """A model whose weights are not the initialisation, so that loading is visible."""
    torch.manual_seed(0)
    model = timm.create_model(name, **kwargs)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.1)
    return model.eval()


def test_local_dir_roundtrip(tmp_path):
    model = _trained_like('vit_minimal_sym_6x4.cifar10')
    save_for_hf(model, tmp_path, safe_serialization=True)
    config = json.loads((tmp_path / 'config.json').read_text())
    assert config['architecture'] == 'vit_minimal_sym_6x4'
    assert config['pretrained_cfg']['input_size'] == [3, 32, 32]
    loaded = timm.create_model(f'local-dir:{tmp_path}', pretrained=True).eval()
    assert loaded.patch_embed.patch_size == (4, 4)
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        torch.testing.assert_close(loaded(x), model(x), rtol=0, atol=0)


def test_pretrained_file_in_cfg_loads_and_adapts(tmp_path, caplog):
    model = _trained_like('vit_minimal_qk_6x1.mnist')
    path = tmp_path / 'weights.safetensors'
    safetensors.torch.save_file(model.state_dict(), path)
    overlay = dict(file=str(path))
    same = timm.create_model('vit_minimal_qk_6x1.mnist', pretrained=True, pretrained_cfg_overlay=overlay).eval()
    x = torch.randn(2, 1, 28, 28)
    with torch.no_grad():
        torch.testing.assert_close(same(x), model(x))

    # new number of classes: everything but the classifier is loaded
    five = timm.create_model('vit_minimal_qk_6x1.mnist', pretrained=True, num_classes=5,
                             pretrained_cfg_overlay=overlay).eval()
    assert five.head.out_features == 5
    torch.testing.assert_close(five.blocks[3].attn.w_qk.weight, model.blocks[3].attn.w_qk.weight)
    with torch.no_grad():
        torch.testing.assert_close(five.forward_head(five.forward_features(x), pre_logits=True),
                                   model.forward_head(model.forward_features(x), pre_logits=True))

    # three input channels from grey weights: a grey image repeated over RGB gives the same logits; timm's loader
    # adapts them, without its warning for weights that a filter had already adapted ("... Loading unchanged.")
    with caplog.at_level(logging.INFO, logger='timm'):
        rgb = timm.create_model('vit_minimal_qk_6x1.mnist', pretrained=True, in_chans=3,
                                pretrained_cfg_overlay=overlay).eval()
    assert not [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert 'from 1 to 3 channel(s)' in caplog.text
    assert rgb.patch_embed.proj.weight.shape[1] == 3
    with torch.no_grad():
        torch.testing.assert_close(rgb(x.repeat(1, 3, 1, 1)), model(x), rtol=1e-4, atol=1e-5)


def test_filter_resamples_learned_pos_embed_and_patch_size():
    src = _trained_like('vit_minimal_std_6x1.mnist', pos_embed='learn')
    dst = timm.create_model('vit_minimal_std_6x1.mnist', pos_embed='learn', img_size=56)
    sd = checkpoint_filter_fn(src.state_dict(), dst)
    assert sd['pos_embed'].shape == (1, 64, 60)
    dst.load_state_dict(sd)

    small_patch = timm.create_model('vit_minimal_std_6x1.mnist', patch_size=4)
    sd = checkpoint_filter_fn(src.state_dict(), small_patch)
    assert sd['patch_embed.proj.weight'].shape == (60, 1, 4, 4)


def test_filter_strips_wrapper_prefixes_and_reports_mismatch():
    src = _trained_like('vit_minimal_sym_6x4.mnist')
    wrapped = {'state_dict': {f'module.{k}': v for k, v in src.state_dict().items()}}
    dst = timm.create_model('vit_minimal_sym_6x4.mnist')
    dst.load_state_dict(checkpoint_filter_fn(wrapped, dst))
    torch.testing.assert_close(dst.blocks[0].attn.qv.weight, src.blocks[0].attn.qv.weight)

    other = timm.create_model('vit_minimal_std_6x4.mnist')
    with pytest.raises(RuntimeError, match=r'blocks\.0\.attn\.qkv\.weight'):
        other.load_state_dict(checkpoint_filter_fn(src.state_dict(), other))


def test_mismatched_checkpoint_file_fails_by_name(tmp_path):
    src = _trained_like('vit_minimal_sym_6x4.mnist')
    path = tmp_path / 'sym.safetensors'
    safetensors.torch.save_file(src.state_dict(), path)
    with pytest.raises(RuntimeError, match=r'Missing key\(s\).*blocks\.0\.attn\.qkv\.weight'):
        timm.create_model('vit_minimal_std_6x4.mnist', pretrained=True, pretrained_cfg_overlay=dict(file=str(path)))
    target = timm.create_model('vit_minimal_std_6x4.mnist')
    with pytest.raises(RuntimeError, match='Unexpected key'):
        load_checkpoint(target, str(path), filter_fn=checkpoint_filter_fn)


@pytest.mark.parametrize('pos_embed', ['sincos', 'learn', 'none'])
def test_dynamic_img_size(pos_embed):
    model = timm.create_model('vit_minimal_sym_6x4.mnist', dynamic_img_size=True, pos_embed=pos_embed).eval()
    with torch.no_grad():
        assert model(torch.randn(2, 1, 28, 28)).shape == (2, 10)
        assert model(torch.randn(2, 1, 56, 42)).shape == (2, 10)
        _, inter = model.forward_intermediates(torch.randn(1, 1, 56, 42))
    assert inter[-1].shape == (1, 60, 8, 6)
    with pytest.raises(ValueError, match='multiples of its patch size 7x7, got 30x28'):
        model(torch.randn(1, 1, 30, 28))
    scripted = torch.jit.script(model)
    x = torch.randn(1, 1, 42, 56)
    with torch.no_grad():
        torch.testing.assert_close(scripted(x), model(x))


def test_set_dynamic_img_size_switches_a_built_model():
    torch.manual_seed(0)
    model = timm.create_model('vit_minimal_sym_6x4.mnist', pos_embed='learn').eval()
    dynamic = timm.create_model('vit_minimal_sym_6x4.mnist', pos_embed='learn', dynamic_img_size=True).eval()
    dynamic.load_state_dict(model.state_dict())
    x = torch.randn(2, 1, 56, 42)
    model.set_dynamic_img_size()
    with torch.no_grad():
        torch.testing.assert_close(model(x), dynamic(x), rtol=0, atol=0)
    assert model.init_kwargs['dynamic_img_size'] is True
    model.set_dynamic_img_size(False)
    with pytest.raises(ValueError, match='expects images of size 28x28, got 56x42'):
        model(x)
    odd = timm.create_model('vit_minimal_sym_6x4.mnist', img_size=30, dynamic_img_size=True)
    with pytest.raises(ValueError, match='must be a multiple of patch_size'):
        odd.set_dynamic_img_size(False)
    assert odd.dynamic_img_size


def test_class_token_and_pools():
    model = timm.create_model('vit_minimal_sym_6x4', class_token=True, global_pool='token').eval()
    x = torch.randn(2, 1, 28, 28)
    assert model.forward_features(x).shape == (2, 17, 60)
    assert model(x).shape == (2, 10)
    _, inter = model.forward_intermediates(x)
    assert inter[-1].shape == (2, 60, 4, 4)
    assert timm.create_model('vit_minimal_sym_6x4', global_pool='max')(x).shape == (2, 10)
    with pytest.raises(ValueError, match='class_token'):
        timm.create_model('vit_minimal_sym_6x4', global_pool='token')


@pytest.mark.parametrize('class_token', [False, True])
def test_a_distillation_token_and_its_head(class_token):
    """DeiT's distillation token (``distill_token=True``): a prefix token after the class token with its own head;
    (logits, distillation logits) in distilled training, their mean otherwise, also scripted; the pooled features
    are the pre-logits; a checkpoint without the token loads, the token and its head keep their initialisation."""
    plain = timm.create_model('vit_minimal_sym_6x4.mnist', pretrained=True).eval()
    model = timm.create_model('vit_minimal_sym_6x4.mnist', pretrained=not class_token, distill_token=True,
                              class_token=class_token, global_pool='token' if class_token else 'avg').eval()
    extra = 60 + 10 * 60 + 10 + (60 if class_token else 0)
    assert sum(p.numel() for p in model.parameters()) == sum(p.numel() for p in plain.parameters()) + extra
    if not class_token:
        assert all(torch.equal(v, model.state_dict()[k]) for k, v in plain.state_dict().items())
    x = torch.randn(2, 1, 28, 28)
    tokens = model.forward_features(x)
    assert tokens.shape == (2, 16 + 1 + class_token, 60) and model.num_prefix_tokens == 1 + class_token
    mean = (model.head(model.pool(tokens)) + model.head_dist(tokens[:, int(class_token)])) / 2
    torch.testing.assert_close(model(x), mean)
    torch.testing.assert_close(torch.jit.script(model)(x), mean)
    assert torch.equal(model.forward_head(tokens, pre_logits=True), model.pool(tokens))
    _, inter = model.forward_intermediates(x)
    assert inter[-1].shape == (2, 60, 4, 4)
    model.train()
    assert model(x).shape == (2, 10)  # one output until distilled training is asked for
    model.set_distilled_training()
    main, dist = model(x)
    assert main.shape == dist.shape == (2, 10)
    model.reset_classifier(0)
    assert model.head_dist is None and model(x).shape == (2, 60)
    with pytest.raises(ValueError, match='set_distilled_training needs a model built with distill_token=True'):
        plain.set_distilled_training()
    with pytest.raises(ValueError, match="distill_token=True needs a pooled head"):
        timm.create_model('vit_minimal_sym_6x4', distill_token=True, global_pool='')


def test_wrong_channels_error_names_expectation():
    model = timm.create_model('vit_minimal_sym_6x4.mnist')
    with pytest.raises(ValueError, match=r'expects images of shape \(B, 1, H, W\).*got \[2, 3, 28, 28\]'):
        model(torch.randn(2, 3, 28, 28))


def test_wrong_size_error_names_expectation():
    model = timm.create_model('vit_minimal_sym_6x4.cifar10')
    with pytest.raises(ValueError, match='expects images of size 32x32, got 28x28'):
        model(torch.randn(2, 3, 28, 28))
    scripted = torch.jit.script(model)
    with pytest.raises(Exception, match='expects images of size 32x32'):
        scripted(torch.randn(2, 3, 28, 28))


@pytest.mark.parametrize('kwargs,match', [
    (dict(pos_embed='rope'), "choose one of 'sincos', 'learn', 'none'"),
    (dict(global_pool='attn'), "choose one of '', 'avg', 'max', 'token'"),
    (dict(attn_type='linear'), 'choose one of std, qk, qkonly, sym, chol'),
    (dict(embed_dim=62), 'divisible by 4'),
    (dict(num_classes=-3), 'num_classes must be an integer >= 0, got -3'),
    (dict(depth=0), 'depth must be an integer >= 1, got 0'),
])
def test_bad_model_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        timm.create_model('vit_minimal_sym_6x1', **kwargs)


@pytest.mark.parametrize('key, value, match', [
    ('num_classes', -3, 'num_classes=-3; it must be an integer >= 0'),
])
def test_invalid_config_file_is_rejected_not_half_loaded(tmp_path, key, value, match):
    """A config.json with an impossible value fails; it never loads with a silently re-initialised classifier."""
    save_for_hf(_trained_like('vit_minimal_sym_6x4.cifar10'), tmp_path, safe_serialization=True)
    config = json.loads((tmp_path / 'config.json').read_text())
    config[key] = value
    config['pretrained_cfg'][key] = value
    (tmp_path / 'config.json').write_text(json.dumps(config))
    with pytest.raises(ValueError, match=match):
        timm.create_model(f'local-dir:{tmp_path}', pretrained=True)


def test_truncated_weights_file_is_named(tmp_path):
    bad = tmp_path / 'truncated.safetensors'
    save_for_hf(_trained_like('vit_minimal_sym_6x1.mnist'), tmp_path / 'full', safe_serialization=True)
    bad.write_bytes((tmp_path / 'full' / 'model.safetensors').read_bytes()[:1000])
    with pytest.raises(RuntimeError, match=f'Cannot read the weights of vit_minimal_sym_6x1 from {bad}.*truncated'):
        timm.create_model('vit_minimal_sym_6x1.mnist', pretrained=True, pretrained_cfg_overlay=dict(file=str(bad)))
