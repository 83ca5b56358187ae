"""A checkpoint is checked before a model is built for it (config against the weights file's header) and
when it loads (dtypes, finite values); bad model arguments are refused by name."""
import json
import time

import pytest
import timm
import torch
from safetensors.torch import load_file, save_file

import timm_minimal  # noqa: F401
from timm_minimal import VitMinimalForImageClassification
from timm_minimal.models.config_checks import NAME_KEYWORDS, registered_architecture
from timm_minimal.models.paper import FLAGSHIP
from timm_minimal.models.pretrained import WEIGHTS_DIR
from timm_minimal.models.vit_minimal import ARCHITECTURES
from timm_minimal.models.weights_check import FUNCTION_KEYWORDS, RECORD_KEY, recorded_keywords
from timm_minimal.tools.common import create_named_model
from transformers import AutoModelForImageClassification

torch.set_num_threads(1)


@pytest.fixture
def folder(tmp_path):
    model = timm.create_model('vit_minimal_qkonly_6x1.mnist', pretrained=True)
    out = tmp_path / 'ckpt'
    out.mkdir()
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(out / 'model.safetensors'))
    (out / 'config.json').write_text(json.dumps(dict(
        architecture='vit_minimal_qkonly_6x1', num_classes=10, pretrained_cfg=dict(model.pretrained_cfg, tag='mnist'))))
    return out


def _edit_config(folder, **model_args):
    cfg = json.loads((folder / 'config.json').read_text())
    cfg['model_args'] = model_args
    (folder / 'config.json').write_text(json.dumps(cfg))


def test_the_folder_loads(folder):
    model = timm.create_model(f'local-dir:{folder}', pretrained=True)
    assert len(model.blocks) == 6 and model.num_classes == 10


@pytest.mark.parametrize('model_args, message', [
    (dict(depth=100000), 'depth=100000 but the weights file .* holds 6 blocks'),
    (dict(embed_dim=4000000), 'embed_dim=4000000 but the weights file .* has width 60'),
    (dict(embed_dim=4e6), 'embed_dim=4000000.0 but the weights file'),
])
def test_a_config_that_misstates_the_weights_fails_before_building(folder, model_args, message):
    _edit_config(folder, **model_args)
    t0 = time.perf_counter()
    with pytest.raises(ValueError, match=message):
        timm.create_model(f'local-dir:{folder}', pretrained=True)
    assert time.perf_counter() - t0 < 60  # refused, not built (a build of that size takes minutes), even under load


def test_weights_of_another_dtype_or_non_finite_are_refused(folder):
    path = folder / 'model.safetensors'
    w = load_file(str(path))
    save_file({k: v.to(torch.int8) for k, v in w.items()}, str(path))
    with pytest.raises(ValueError, match='not floating point .*I8'):
        timm.create_model(f'local-dir:{folder}', pretrained=True)
    w['head.weight'][0, 0] = float('nan')
    save_file(w, str(path))
    with pytest.raises(ValueError, match='non-finite values .* head.weight'):
        timm.create_model(f'local-dir:{folder}', pretrained=True)


def test_a_truncated_config_names_the_file(folder):
    text = (folder / 'config.json').read_text()
    (folder / 'config.json').write_text(text[:len(text) // 2])
    with pytest.raises(ValueError, match=r'config.json is not valid JSON'):
        create_named_model(f'local-dir:{folder}', pretrained=True)


@pytest.mark.parametrize('kwargs, message', [
    (dict(img_size=-28), 'img_size must be a positive integer'),
    (dict(patch_size=0), 'patch_size must be a positive integer'),
    (dict(img_size=28.0), 'img_size must be a positive integer'),
    (dict(drop_path_rate=2), 'drop_path_rate is a probability'),
    (dict(drop_rate=-0.1), 'drop_rate is a probability'),
])
def test_bad_model_arguments_are_named(kwargs, message):
    with pytest.raises(ValueError, match=message):
        timm.create_model('vit_minimal_sym_6x4', **kwargs)


def test_reset_classifier_refuses_a_negative_count():
    model = timm.create_model('vit_minimal_sym_6x4')
    with pytest.raises(ValueError, match='num_classes must be an integer >= 0'):
        model.reset_classifier(-5)
    model.reset_classifier(0)
    assert model(torch.randn(1, 1, 28, 28)).shape == (1, 60)


def test_a_tagged_model_built_for_other_channels_names_the_input_size():
    """timm's validate.py builds a .mnist model with its 3-channel default: the error says what to pass."""
    model = timm.create_model('vit_minimal_sym_6x4.mnist', pretrained=True, in_chans=3)
    with pytest.raises(ValueError, match=r'\(B, 3, H, W\).*--input-size 1 28 28'):
        model(torch.randn(2, 1, 28, 28))
    assert timm.create_model('vit_minimal_sym_6x4.mnist').input_hint == ''


# -- the keywords that change the function without changing a shape: recorded with the weights, checked at load --

@pytest.mark.parametrize('file', sorted(WEIGHTS_DIR.glob('*.safetensors')), ids=lambda p: p.stem)
def test_every_shipped_weights_file_records_its_function_keywords(file):
    model = timm.create_model(file.stem)
    assert recorded_keywords(file) == {k: model.init_kwargs[k] for k in FUNCTION_KEYWORDS}


@pytest.fixture
def saved(tmp_path):
    """A transformers folder of the 4-head flagship, as save_pretrained writes it."""
    model = VitMinimalForImageClassification.from_timm(f'{FLAGSHIP}.mnist', pretrained=True)
    model.save_pretrained(tmp_path / 'saved')
    return tmp_path / 'saved'


def _edit_model_args(folder, **changes):
    """Change model_args, and the architecture the config names with them, as a consistent config would."""
    cfg = json.loads((folder / 'config.json').read_text())
    cfg['model_args'].update(changes)
    cfg['architecture'] = registered_architecture(*(cfg['model_args'][k] for k in NAME_KEYWORDS), ARCHITECTURES)
    (folder / 'config.json').write_text(json.dumps(cfg))


@pytest.mark.parametrize('change, message', [
    (dict(num_heads=2), 'asks for num_heads=2 but the weights file .* was trained with num_heads=4'),
    (dict(num_heads=1), 'num_heads=1 .* trained with num_heads=4'),
    (dict(pos_embed='none'), "pos_embed='none' .* trained with pos_embed='sincos'"),
    (dict(global_pool='max'), "global_pool='max' .* trained with global_pool='avg'"),
])
def test_a_config_that_changes_the_function_of_its_weights_is_refused_by_timm_and_transformers(saved, change, message):
    x = torch.randn(2, 1, 28, 28)
    with torch.no_grad():
        before = timm.create_model(f'local-dir:{saved}', pretrained=True).eval()(x)
    _edit_model_args(saved, **change)
    for load in (lambda: timm.create_model(f'local-dir:{saved}', pretrained=True),
                 lambda: VitMinimalForImageClassification.from_pretrained(saved),
                 lambda: AutoModelForImageClassification.from_pretrained(saved, trust_remote_code=True)):
        with pytest.raises(ValueError, match=message):
            load()
    record = recorded_keywords(saved / 'model.safetensors')
    _edit_model_args(saved, **{k: record[k] for k in change})  # the recorded values: the same function again
    with torch.no_grad():
        assert torch.equal(timm.create_model(f'local-dir:{saved}', pretrained=True).eval()(x), before)


def test_a_new_head_may_pool_otherwise_and_a_file_without_the_record_loads_with_a_warning(saved, folder):
    _edit_model_args(saved, global_pool='max')
    assert timm.create_model(f'local-dir:{saved}', pretrained=True, num_classes=5).global_pool == 'max'
    assert recorded_keywords(folder / 'model.safetensors') == {}  # timm's own writer: no record to check against
    _edit_config(folder, num_heads=1)
    with pytest.warns(UserWarning, match='does not record the keywords it was trained with .* so num_heads=1 cannot be '
                                         'checked'):
        assert timm.create_model(f'local-dir:{folder}', pretrained=True).num_classes == 10


def test_weights_whose_record_a_copy_dropped_warn_that_the_heads_cannot_be_checked(saved):
    """``save_file(load_file(f))`` drops the metadata: a 3-head config on 4-head weights then loads, and says so."""
    path = saved / 'model.safetensors'
    save_file(load_file(str(path)), str(path))
    _edit_model_args(saved, num_heads=3)
    for load in (lambda: timm.create_model(f'local-dir:{saved}', pretrained=True),
                 lambda: VitMinimalForImageClassification.from_pretrained(saved),
                 lambda: AutoModelForImageClassification.from_pretrained(saved, trust_remote_code=True)):
        with pytest.warns(UserWarning, match='num_heads=3 cannot be checked'):
            load()


@pytest.mark.parametrize('edit', [dict(architecture='vit_minimal_std_mlp_12x4'), dict(model_args=dict(num_heads=3)),
                                  dict(model_args=dict(attn_type='qk'))])
def test_a_config_whose_architecture_contradicts_its_model_args_is_refused(saved, edit):
    """The config names its model twice (architecture, model_args): where they disagree, neither is trusted."""
    cfg = json.loads((saved / 'config.json').read_text())
    cfg['architecture'] = edit.get('architecture', cfg['architecture'])
    cfg['model_args'].update(edit.get('model_args', {}))
    (saved / 'config.json').write_text(json.dumps(cfg))
    for load in (lambda: timm.create_model(f'local-dir:{saved}', pretrained=True),
                 lambda: VitMinimalForImageClassification.from_pretrained(saved),
                 lambda: AutoModelForImageClassification.from_pretrained(saved, trust_remote_code=True)):
        with pytest.raises(ValueError, match=r"The config names the architecture 'vit_minimal_.*', but its model_args "
                                             r"\(attn_type=.*\) describe 'vit_minimal_.*': one of the two is not"):
            load()


def test_an_unreadable_record_is_named(saved):
    path = saved / 'model.safetensors'
    save_file(load_file(str(path)), str(path), metadata={'format': 'pt', RECORD_KEY: '[1, 2'})
    with pytest.raises(ValueError, match=f'unreadable {RECORD_KEY} record'):
        timm.create_model(f'local-dir:{saved}', pretrained=True)


def test_a_hub_repository_whose_config_changes_the_function_is_refused(hub_server, saved):
    from huggingface_hub import HfApi
    _edit_model_args(saved, num_heads=2)
    repo = HfApi().create_repo('testuser/heads-changed').repo_id
    HfApi().upload_folder(folder_path=str(saved), repo_id=repo)
    for load in (lambda: timm.create_model(f'hf-hub:{repo}', pretrained=True),
                 lambda: VitMinimalForImageClassification.from_pretrained(repo)):
        with pytest.raises(ValueError, match='num_heads=2 but the weights file .* was trained with num_heads=4'):
            load()
