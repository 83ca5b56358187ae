"""What timm's own model tests check, for every registered vit_minimal architecture, plus the
paper's parameter counts and the geometry of each pretrained tag."""
from pathlib import Path

import pytest
import timm
import torch

import timm_minimal
from timm_minimal import ARCHITECTURES, DATASETS

torch.set_num_threads(1)
ROOT = Path(__file__).resolve().parents[1]

BATCH = 2
CFG_KEYS = ('url', 'num_classes', 'input_size', 'pool_size', 'crop_pct', 'interpolation', 'mean', 'std',
            'first_conv', 'classifier', 'fixed_input_size', 'license', 'paper_ids')


def _one_of_each_pattern():
    """Every architecture, the 12-layer ones marked slow: a 12-layer model repeats the blocks of its 6-layer one, so
    the quick suite traces and scripts each attention variant, with and without the MLP, with one head and with
    several, once; the full suite (CI's) every architecture."""
    from timm_minimal.models.paper import parse_arch
    return [pytest.param(n, marks=pytest.mark.slow) if parse_arch(n)['depth'] > 6 else n for n in ARCHITECTURES]


def _input(model, batch=BATCH):
    return torch.randn(batch, *model.pretrained_cfg['input_size'])


def test_registry_lists_every_architecture():
    """The registry covers the paper's grid: every attention variant, with and without the MLP, 6 and 12 layers,
    1 head and, where the variant allows several, 4; and nothing else."""
    from timm_minimal.models.layers import get_attn_layer
    from timm_minimal.models.paper import VARIANTS, arch_name
    expected = {arch_name(attn, mlp, depth, heads) for attn in VARIANTS for mlp in (False, True) for depth in (6, 12)
                for heads in ((1,) if get_attn_layer(attn).single_head_only else (1, 4))}
    assert set(timm.list_models('vit_minimal*')) == expected
    for name in expected:
        assert timm.is_model(name) and name in ARCHITECTURES


def test_unknown_model_name_fails_with_timm_error():
    with pytest.raises(RuntimeError, match='Unknown model'):
        timm.create_model('vit_minimal_foo_6x1')


def test_unknown_tag_fails():
    with pytest.raises(RuntimeError, match='tag'):
        timm.create_model('vit_minimal_sym_6x4.svhn')


@pytest.mark.parametrize('name', ARCHITECTURES)
def test_forward_backward_cfg(name):
    """Forward, backward with num_classes=42 (every parameter gets a gradient), default cfg keys."""
    model = timm.create_model(name, num_classes=42)
    cfg = model.pretrained_cfg
    for key in CFG_KEYS:
        assert key in cfg, f'{name}: pretrained cfg lacks {key}'
    assert cfg['architecture'] == name and cfg['tag'] == 'mnist'
    sd = model.state_dict()
    assert cfg['first_conv'] + '.weight' in sd
    assert cfg['classifier'] + '.weight' in sd

    x = _input(model)
    out = model(x)
    assert out.shape == (BATCH, 42)
    assert torch.isfinite(out).all()
    out.mean().backward()
    for n, p in model.named_parameters():
        assert p.grad is not None, f'{name}: no gradient for {n}'
        assert torch.isfinite(p.grad).all(), n

    # the timm API around the head
    feats = model.forward_features(x)
    grid = model.patch_embed.grid_size
    assert feats.shape == (BATCH, grid[0] * grid[1], model.num_features)
    assert model.forward_head(feats, pre_logits=True).shape == (BATCH, model.num_features)
    assert model.get_classifier() is model.head
    model.reset_classifier(0)
    assert model(x).shape == (BATCH, model.num_features)
    model.reset_classifier(5, global_pool='')
    assert model(x).shape == (BATCH, grid[0] * grid[1], 5)
    assert model.no_weight_decay() == {'pos_embed', 'cls_token', 'dist_token'}  # timm's ViT's set
    groups = model.group_matcher()
    assert set(groups) == {'stem', 'blocks'}


@pytest.mark.parametrize('name', ARCHITECTURES)
def test_num_classes_zero(name):
    model = timm.create_model(name, num_classes=0)
    assert model(_input(model)).shape == (BATCH, model.num_features)
    assert model.num_features == 60


@pytest.mark.parametrize('name', _one_of_each_pattern())
def test_torchscript(name):
    model = timm.create_model(name).eval()
    scripted = torch.jit.script(model)
    x = _input(model)
    with torch.no_grad():
        torch.testing.assert_close(scripted(x), model(x))


@pytest.mark.parametrize('name', ARCHITECTURES)
def test_features_and_intermediates(name):
    torch.manual_seed(0)
    model = timm.create_model(name).eval()
    x = _input(model)
    depth = len(model.blocks)
    with torch.no_grad():
        final, intermediates = model.forward_intermediates(x)
        torch.testing.assert_close(final, model.forward_features(x))
        assert len(intermediates) == depth
        assert intermediates[-1].shape == (BATCH, 60, 4, 4)
        torch.testing.assert_close(intermediates[-1].flatten(2).transpose(1, 2), final)
        nlc = model.forward_intermediates(x, indices=[0, 2], output_fmt='NLC', intermediates_only=True)
        assert [t.shape for t in nlc] == [(BATCH, 16, 60)] * 2
        # timm's ViT interface for DINO-style callers: the last n blocks, tokens or maps
        torch.testing.assert_close(model.get_intermediate_layers(x, n=[0, 2]), nlc)
        torch.testing.assert_close(model.get_intermediate_layers(x, n=2, reshape=True), intermediates[-2:])

    torch.manual_seed(0)  # the same initial weights as `model`
    features = timm.create_model(name, features_only=True, out_indices=(1, depth - 1)).eval()
    assert features.feature_info.channels() == [60, 60]
    assert features.feature_info.reduction() == [7, 7]
    with torch.no_grad():
        outs = features(x)
    assert [o.shape for o in outs] == [(BATCH, 60, 4, 4)] * 2
    torch.testing.assert_close(outs[-1], intermediates[-1])

    pruned = timm.create_model(name).eval()
    kept = pruned.prune_intermediate_layers(indices=[1])
    assert kept == [1] and len(pruned.blocks) == 2


@pytest.mark.parametrize('name', _one_of_each_pattern())
def test_fx_tracing_and_feature_extraction(name):
    """torch.fx and timm's FX feature extraction trace every model; eager keeps the clear input errors."""
    from timm.models import create_feature_extractor, get_graph_node_names
    model = timm.create_model(name).eval()
    x = _input(model)
    traced = torch.fx.symbolic_trace(model)
    _, eval_nodes = get_graph_node_names(model)
    extractor = create_feature_extractor(model, return_nodes={'blocks.1': 'block1', eval_nodes[-1]: 'logits'})
    with torch.no_grad():
        ref = model(x)
        torch.testing.assert_close(traced(x), ref)
        out = extractor(x)
    torch.testing.assert_close(out['logits'], ref)
    assert out['block1'].shape == (BATCH, 16, 60)
    with pytest.raises(ValueError, match='expects images of shape'):
        model(x.expand(-1, 3, -1, -1))


@pytest.mark.parametrize('name', ARCHITECTURES)
def test_grad_checkpointing_equal(name):
    torch.manual_seed(0)
    model = timm.create_model(name)
    x = _input(model)
    ref = model(x)
    model.set_grad_checkpointing(True)
    out = model(x)
    torch.testing.assert_close(out, ref)
    out.sum().backward()
    assert all(p.grad is not None for p in model.parameters())
    _, inter = model.forward_intermediates(x)
    torch.testing.assert_close(inter[-1].flatten(2).transpose(1, 2), model.forward_features(x))


def test_set_input_size_gives_the_model_built_for_that_size(tmp_path):
    """timm's ViT ``set_input_size``: a new resolution or patch size after construction gives the model that
    ``create_model`` builds for it from the same checkpoint (a learned position embedding resampled to the new grid),
    and timm's ``save_for_hf`` saves it at that size; a size the model cannot take is refused and leaves it as it
    was."""
    from timm.models import save_for_hf
    name = 'vit_minimal_sym_6x4.cifar10'
    model = timm.create_model(name, pretrained=True).eval()
    model.set_input_size(img_size=64)
    x, built = torch.randn(BATCH, 3, 64, 64), timm.create_model(name, pretrained=True, img_size=64).eval()
    with torch.no_grad():
        torch.testing.assert_close(model(x), built(x), rtol=0, atol=0)
    assert model.init_kwargs == built.init_kwargs and model.patch_embed.grid_size == (16, 16)
    with pytest.raises(ValueError, match=r'img_size \(30, 30\) must be a multiple of patch_size \(4, 4\)'):
        model.set_input_size(img_size=30)
    assert model.patch_embed.img_size == (64, 64) and model(x).shape == (BATCH, 10)
    save_for_hf(model, tmp_path, safe_serialization=True)
    with torch.no_grad():
        torch.testing.assert_close(timm.create_model(f'local-dir:{tmp_path}', pretrained=True).eval()(x), model(x),
                                   rtol=0, atol=0)

    model.set_input_size(img_size=32, patch_size=8)
    x, built = torch.randn(BATCH, 3, 32, 32), timm.create_model(name, pretrained=True, patch_size=8).eval()
    with torch.no_grad():
        torch.testing.assert_close(model(x), built(x))
    assert model.feature_info == built.feature_info and model.feature_info[-1]['reduction'] == 8
    assert {k: model.init_kwargs[k] for k in ('img_size', 'patch_size')} == dict(img_size=32, patch_size=8)

    torch.manual_seed(0)
    learned = timm.create_model('vit_minimal_std_6x1.mnist', pos_embed='learn').eval()
    state = learned.state_dict()
    learned.set_input_size(img_size=56)
    big = timm.create_model('vit_minimal_std_6x1.mnist', pos_embed='learn', img_size=56).eval()
    big.load_state_dict(timm_minimal.checkpoint_filter_fn(state, big))
    x = torch.randn(BATCH, 1, 56, 56)
    with torch.no_grad():
        torch.testing.assert_close(learned(x), big(x))
    assert learned.pos_embed.shape == (1, 64, 60) and learned.pos_embed.requires_grad


@pytest.mark.parametrize('dataset', list(DATASETS))
def test_pretrained_tags_build_their_geometry(dataset):
    info = DATASETS[dataset]
    model = timm.create_model(f'vit_minimal_sym_6x4.{dataset}')
    assert model.pretrained_cfg['tag'] == dataset
    assert model.pretrained_cfg['input_size'] == info.input_size
    assert model.patch_embed.patch_size == (info.patch_size,) * 2
    assert model.in_chans == info.input_size[0]
    assert model.num_classes == info.num_classes
    tokens = (info.input_size[1] // info.patch_size) ** 2
    assert model.patch_embed.num_patches == tokens
    x = torch.randn(1, *info.input_size)
    assert model(x).shape == (1, info.num_classes)
    cfg = timm.data.resolve_data_config({}, model=model)
    assert cfg['mean'] == info.mean and cfg['input_size'] == info.input_size


def test_default_tag_is_mnist():
    model = timm.create_model('vit_minimal_sym_6x4')
    assert model.pretrained_cfg['tag'] == 'mnist'
    assert model.pretrained_cfg['input_size'] == (1, 28, 28)


def test_pretrained_without_weights_fails_clearly():
    with pytest.raises(RuntimeError, match=r'No pretrained weights exist for vit_minimal_chol_12x1\.in1k; timm'):
        timm.create_model('vit_minimal_chol_12x1.in1k', pretrained=True)
    with pytest.raises(RuntimeError, match=r'sym_6x4\.in1k; this architecture has weights for .*sym_6x4\.mnist'):
        timm.create_model('vit_minimal_sym_6x4.in1k', pretrained=True)


@pytest.mark.slow
def test_torch_compile_matches_eager():
    model = timm.create_model('vit_minimal_sym_6x4').eval()
    x = _input(model)
    compiled = torch.compile(model)
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), model(x), rtol=1e-4, atol=1e-5)


def test_every_attention_variant_is_registered_and_described():
    from timm_minimal.models.paper import VARIANTS, parse_arch
    registered = {parse_arch(name)['attn'] for name in timm.list_models('vit_minimal*')}
    assert set(timm_minimal.ATTENTION_LAYERS) == registered == set(VARIANTS)


@pytest.mark.slow
def test_an_oversized_config_is_refused_in_seconds_on_every_path(tmp_path):
    """Each size a config can ask for is refused from the keywords alone, before anything is allocated: through
    timm (a local-dir: checkpoint with no weights of that shape) and through transformers (from_pretrained), in a
    fresh process whose peak memory stays that of the imports."""
    import json
    import subprocess
    import sys
    import textwrap
    from timm_minimal.models.config_checks import NAME_KEYWORDS, registered_architecture
    cases = {'img_size': dict(img_size=700000), 'depth': dict(depth=100000), 'num_classes': dict(num_classes=200000000),
             'mlp_hidden_dim': dict(use_mlp=True, mlp_hidden_dim=40000000), 'embed_dim': dict(embed_dim=4000000)}
    for name, kwargs in cases.items():
        folder = tmp_path / name
        folder.mkdir()
        config = json.loads((ROOT / 'hf_configs' / 'vit_minimal_sym_6x4' / 'config.json').read_text())
        config['model_args'].update({k: v for k, v in kwargs.items() if k != 'num_classes'})
        config.update({k: v for k, v in kwargs.items() if k == 'num_classes'})
        # the name a consistent config gives these keywords (a depth of 100000 is the family's _6x1)
        config['architecture'] = registered_architecture(*(config['model_args'][k] for k in NAME_KEYWORDS),
                                                         ARCHITECTURES)
        for key in ('id2label', 'label2id', 'label_names'):
            config.pop(key)
        (folder / 'config.json').write_text(json.dumps(config))
    script = textwrap.dedent(f'''
        import resource, time, timm, timm_minimal
        from transformers import AutoModelForImageClassification
        for name in {sorted(cases)!r}:
            for load in (lambda p: timm.create_model('local-dir:' + p, pretrained=True),
                         AutoModelForImageClassification.from_pretrained):
                t0 = time.perf_counter()
                try:
                    load({str(tmp_path)!r} + '/' + name)
                    raise SystemExit(f'{{name}}: built')
                except SystemExit:
                    raise
                except Exception as e:
                    assert 'over the limit' in str(e), (name, str(e)[:300])
                assert time.perf_counter() - t0 < 60, name  # refused, not built: a build takes minutes
        print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024)
    ''')
    import resource

    def limit_memory():  # 8 GiB of address space: the imports fit, a model of any of these sizes does not
        resource.setrlimit(resource.RLIMIT_AS, (8 << 30, 8 << 30))
    r = subprocess.run([sys.executable, '-c', script], capture_output=True, text=True, timeout=300,
                       preexec_fn=limit_memory)
    assert r.returncode == 0, r.stderr[-2000:]
    assert int(r.stdout.split()[-1]) < 2000  # MiB: the imports, no model of the asked size
