"""timm-minimal-attention: the rollout math, the figure of every attention variant, and bad input."""
from collections import Counter

import numpy as np
import pytest
import timm
import torch
from PIL import Image

from timm_minimal.tools.inside.attention import AttentionInputError, asymmetry, attention_rollout, main, render_attention

VARIANTS = ['std', 'qk', 'qkonly', 'sym', 'chol']


def _image(size=(28, 28), mode='L', seed=0) -> Image.Image:
    rng = np.random.default_rng(seed)
    shape = (size[1], size[0]) + ((3,) if mode == 'RGB' else ())
    return Image.fromarray(rng.integers(0, 256, shape, dtype=np.uint8), mode)


def _run(argv, capsys):
    """main(argv) as the console script runs it: (exit code, stdout, stderr)."""
    try:
        rc = main(argv)
    except SystemExit as e:
        rc = e.code
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_rollout_is_a_distribution():
    torch.manual_seed(0)
    maps = [torch.rand(2, 4, 16, 16).softmax(dim=-1) for _ in range(6)]
    rollout = attention_rollout(maps)
    assert rollout.shape == (2, 16)
    assert (rollout >= 0).all()
    torch.testing.assert_close(rollout.sum(-1), torch.ones(2))


def test_rollout_by_hand():
    """Identity attention leaves every token its own: uniform. All attention on token 0 in one layer:
    (A + I) / 2 has mean row 1/2 on token 0 plus 1/(2T) everywhere."""
    T = 8
    torch.testing.assert_close(attention_rollout([torch.eye(T)[None]] * 3), torch.full((T,), 1 / T))
    to_first = torch.zeros(1, T, T)
    to_first[..., 0] = 1
    expected = torch.full((T,), 1 / (2 * T))
    expected[0] += .5
    torch.testing.assert_close(attention_rollout([to_first]), expected)
    with pytest.raises(ValueError):
        attention_rollout([])


def test_scores_are_the_logits_of_the_attention():
    model = timm.create_model('vit_minimal_sym_6x4', depth=2).eval()
    x = torch.randn(2, 1, 28, 28)
    _, _, attn = model.get_attention_maps(x)
    _, _, scores = model.get_attention_maps(x, pre_softmax=True)
    for a, s in zip(attn, scores):
        torch.testing.assert_close(s.softmax(-1), a)


@pytest.mark.parametrize('variant', VARIANTS)
def test_figure_of_every_variant(variant):
    heads = 4 if variant in ('std', 'sym') else 1
    model = timm.create_model(f'vit_minimal_{variant}_6x{heads}', depth=2)
    maps = render_attention(_image(), model)
    kinds = Counter(ax.get_label().split(' ')[0] for ax in maps.figure.axes)
    assert kinds['head'] == 2 * heads  # layers x heads heat maps
    assert kinds['scores'] == kinds['attention'] == 2  # one S and one A per layer
    assert kinds['input'] == kinds['rollout'] == kinds['classes'] == 1
    assert len(maps.rollout) == 16 and (maps.rollout >= 0).all()
    assert maps.rollout.sum().item() == pytest.approx(1, abs=1e-5)
    for s, a in zip(maps.scores, maps.attentions):
        assert s.shape == a.shape == (heads, 16, 16)
        symmetric = torch.allclose(s, s.transpose(-2, -1), atol=1e-5)
        assert symmetric == (variant in ('sym', 'chol'))
        torch.testing.assert_close(a.sum(-1), torch.ones(heads, 16))
    assert f"predicted '{maps.label}'" in maps.figure.get_suptitle()
    assert 0 < maps.probability <= 1


def test_symmetry_measure():
    m = torch.randn(5, 5)
    assert asymmetry(m + m.T) == 0
    assert asymmetry(m - m.T) == pytest.approx(2)


@pytest.mark.slow
def test_cli_resizes_and_writes_png(tmp_path, capsys):
    image = tmp_path / 'wide.png'
    _image((50, 40), 'RGB').save(image)
    out = tmp_path / 'maps' / 'sym.png'
    argv = [str(image), '--model', 'vit_minimal_sym_6x4.mnist', '--pretrained', '--out', str(out)]
    rc, stdout, _ = _run(argv, capsys)
    assert rc == 0
    assert 'the image is 50x40, the model takes 28x28: resized' in stdout
    assert 'converted to L' in stdout
    assert "predicts '" in stdout and '6 layers x 4 heads' in stdout
    with Image.open(out) as im:
        assert im.format == 'PNG' and im.mode == 'RGB'
    assert sorted(p.name for p in out.parent.iterdir()) == ['sym.png']  # no temporary file left


@pytest.mark.parametrize('argv, message', [
    (['img.png', '--model', 'vit_minimal_nope_6x1'], "unknown model 'vit_minimal_nope_6x1': expected a vit_minimal architecture"),
    (['img.png', '--model', 'vit_minimal_sym_6x4.imagenet'], "unknown model 'vit_minimal_sym_6x4.imagenet'"),
    (['img.png', '--model', 'vit_minimal_chol_6x1.in1k', '--pretrained'], 'No pretrained weights exist'),
    (['missing.png'], 'no image file missing.png'),
    (['NOT_AN_IMAGE'], 'cannot read'),
    (['img.png', '--head', '5', '--model', 'vit_minimal_sym_6x4'], 'has heads 1 to 4'),
    (['img.png', '--out', 'maps.jpg'], 'name a .png file'),
    (['img.png', '--bogus'], 'unrecognized arguments: --bogus'),
    (['nan.tiff'], "cannot read the image's pixels: The image holds non-finite values."),
])
def test_cli_misuse_exits_2_with_one_line(tmp_path, capsys, monkeypatch, argv, message):
    monkeypatch.chdir(tmp_path)
    _image().save(tmp_path / 'img.png')
    nan = np.random.default_rng(0).random((28, 28)).astype(np.float32)
    nan[3, 3] = np.nan
    Image.fromarray(nan, 'F').save(tmp_path / 'nan.tiff')  # a float TIFF: the one image file that can hold a NaN
    (tmp_path / 'NOT_AN_IMAGE').write_text('hello')
    rc, stdout, stderr = _run([*argv, '--out', 'x.png'] if '--out' not in argv else argv, capsys)
    assert rc == 2
    assert message in stderr and stderr.startswith('timm-minimal-attention: error: ')
    assert stderr.count('\n') == 1 and 'Traceback' not in stderr
    assert not (tmp_path / 'x.png').exists()


def test_function_refuses_a_model_without_attention_maps():
    with pytest.raises(AttentionInputError, match='has no get_attention_maps'):
        render_attention(_image(), torch.nn.Linear(2, 2))


def test_a_checkpoints_figure_is_titled_with_the_checkpoint_not_the_architecture_it_was_trained_as(tmp_path):
    """A fine-tuned local-dir: checkpoint's config names vit_minimal_sym_6x4.mnist; its weights are another model's."""
    import timm_minimal
    from timm.models import save_for_hf
    save_for_hf(timm.create_model('vit_minimal_sym_6x4.mnist', pretrained=True), tmp_path / 'mine')
    maps = render_attention(timm_minimal.example_image('mnist_test0_digit7.png'), f'local-dir:{tmp_path / "mine"}')
    assert maps.model_name == f'local-dir:{tmp_path / "mine"}'
    assert maps.figure._suptitle.get_text().startswith(f'local-dir:{tmp_path / "mine"}: predicted')
