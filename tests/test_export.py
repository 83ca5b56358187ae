"""ONNX export (timm_minimal.tools.deploy.export) and the deployment benchmark: round trips with equal logits for every
attention variant, the int8 copy, the preprocessing file, atomic writing and clear errors on bad input."""
import json
import sys
from pathlib import Path

import numpy as np
import pytest
import timm
import torch

from timm_minimal.tools.deploy import export as ex
from timm_minimal.machine import cpu_signature

ort = pytest.importorskip('onnxruntime', reason='the export extra is not installed: pip install -e ".[export]"')
pytest.importorskip('onnxscript', reason='the export extra is not installed: pip install -e ".[export]"')

DATA = Path(__file__).resolve().parents[1].parent / 'shared' / 'data'  # ../shared/data from the project root

# one model per attention variant, two blocks each (the MLP in one, RGB CIFAR-10 geometry in one)
VARIANTS = {'std': 'vit_minimal_std_mlp_6x4.mnist', 'qk': 'vit_minimal_qk_6x1.mnist',
            'qkonly': 'vit_minimal_qkonly_6x1.mnist', 'sym': 'vit_minimal_sym_6x4.cifar10',
            'chol': 'vit_minimal_chol_6x1.mnist'}


def _session(path):
    return ort.InferenceSession(str(path), providers=['CPUExecutionProvider'])


# one variant in the quick suite, every variant in the whole one (about 3 s an export)
@pytest.mark.parametrize('attn', [pytest.param(a, marks=() if a == 'std' else pytest.mark.slow) for a in VARIANTS])
def test_onnx_round_trip_gives_torch_logits(attn, tmp_path):
    torch.manual_seed(0)
    model = timm.create_model(VARIANTS[attn], depth=2).eval()
    result = ex.export_model(model, tmp_path / 'out')
    assert result.max_abs_diff <= 1e-4
    assert sorted(result.files) == ['model.onnx', 'preprocessing.json']
    session = _session(tmp_path / 'out' / 'model.onnx')
    (inp,), (out,) = session.get_inputs(), session.get_outputs()
    assert (inp.name, out.name) == ('pixel_values', 'logits')
    assert inp.shape == ['batch', *model.pretrained_cfg['input_size']] and out.shape == ['batch', 10]
    x = torch.randn(3, *model.pretrained_cfg['input_size'])  # not the exported batch size
    logits = session.run(None, {'pixel_values': x.numpy()})[0]
    with torch.no_grad():
        np.testing.assert_allclose(logits, model(x).numpy(), rtol=0, atol=1e-4)


@pytest.mark.slow
def test_preprocessing_file_is_timms_config_with_label_names(tmp_path):
    model = timm.create_model('vit_minimal_sym_6x4.cifar10', depth=1).eval()
    ex.export_model(model, tmp_path / 'out')
    pre = json.loads((tmp_path / 'out' / 'preprocessing.json').read_text())
    assert pre['input_size'] == [3, 32, 32] and pre['channels'] == 3 and pre['color_mode'] == 'RGB'
    assert pre['mean'] == list(model.pretrained_cfg['mean']) and pre['std'] == list(model.pretrained_cfg['std'])
    assert (pre['interpolation'], pre['crop_pct'], pre['center_crop']) == ('bilinear', 1.0, [32, 32])
    assert pre['label_names'][:2] == ['airplane', 'automobile'] and len(pre['label_names']) == 10
    assert pre['files'] == {'fp32': 'model.onnx'} and pre['verification']['max_abs_logit_diff']['fp32'] <= 1e-4
    # a model whose pretrained cfg does not describe its input is refused before anything is written
    with pytest.raises(ex.ExportError, match='takes 1x56x56 inputs but its pretrained cfg says 1x28x28'):
        ex.export_model(timm.create_model('vit_minimal_qk_6x1.mnist', img_size=56, depth=1), tmp_path / 'geo')
    assert not (tmp_path / 'geo').exists()


@pytest.mark.slow
def test_int8_export_of_a_small_model_keeps_its_accuracy(mnist_dir, tmp_path, capsys):
    """The command line on a shipped checkpoint, verified on the bundled MNIST sample (1,000 test digits)."""
    out = tmp_path / 'qkonly'
    assert ex.main(['vit_minimal_qkonly_6x1.mnist', '--out', str(out), '--int8', '--verify-data-dir',
                    str(mnist_dir)]) == 0
    report = capsys.readouterr().out
    assert 'model.int8.onnx' in report and 'top-1 mnist test (1,000)' in report
    pre = json.loads((out / 'preprocessing.json').read_text())
    acc = pre['verification']['accuracy']
    assert acc['fp32']['samples'] == 1000 and acc['fp32']['acc'] == acc['torch']['acc'] > 80
    assert abs(acc['fp32']['acc'] - acc['int8']['acc']) <= 0.5
    assert pre['label_names'] == [str(i) for i in range(10)] and pre['files']['int8'] == 'model.int8.onnx'
    assert (out / 'model.int8.onnx').stat().st_size < 0.6 * (out / 'model.onnx').stat().st_size
    x = torch.randn(4, 1, 28, 28)
    int8, fp32 = (_session(out / f).run(None, {'pixel_values': x.numpy()})[0] for f in ('model.int8.onnx', 'model.onnx'))
    assert int8.shape == (4, 10) and np.abs(int8 - fp32).max() < 1.0


def test_the_int8_batch_script_reads_the_split_of_a_recipe_tag(tmp_path, monkeypatch):
    """scripts/int8_batch.py (docs/export.md's int8 batch table) reads an export's test split as the export's check
    does: the dataset of its tag, a recipe tag's (``.kd2_cifar10``) included, its classes by the export's label names."""
    import importlib.util
    from timm_minimal.tools import evaluate
    spec = importlib.util.spec_from_file_location('int8_batch', Path(__file__).resolve().parents[1] / 'scripts' /
                                                  'int8_batch.py')
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    model = timm.create_model('vit_minimal_sym_6x4.kd2_cifar10', depth=1).eval()
    (tmp_path / 'preprocessing.json').write_text(json.dumps(ex.preprocessing_config(model)))
    asked = {}

    def load_eval_split(cfg, num_classes, dataset, data_dir, label_names=None, **kwargs):
        asked.update(dataset=dataset, num_classes=num_classes, label_names=label_names, data_dir=data_dir)
        images = np.full((2, 3, 32, 32), 255, dtype=np.uint8)
        return evaluate.EvalSplit('CIFAR-10', 'test', images, np.array([3, 5]))
    monkeypatch.setattr(evaluate, 'load_eval_split', load_eval_split)
    x, labels = script.test_images(tmp_path, 'data')
    assert asked == dict(dataset='cifar10', num_classes=10, label_names=list(model.pretrained_cfg['label_names']),
                         data_dir='data')
    expected = (1 - torch.tensor(model.pretrained_cfg['mean'])) / torch.tensor(model.pretrained_cfg['std'])
    assert x.dtype == np.float32 and x.shape == (2, 3, 32, 32) and labels.tolist() == [3, 5]
    np.testing.assert_allclose(x[0, :, 0, 0], expected.numpy(), rtol=1e-6)


@pytest.mark.slow
@pytest.mark.parametrize('name', ['vit_minimal_sym_6x4.mnist'])
def test_int8_accuracy_on_the_full_test_split(name, tmp_path):
    if not (DATA / 'MNIST' / 'raw').is_dir():
        pytest.skip('MNIST is not in ../shared/data: the full test split is needed')
    result = ex.export_model(name, tmp_path / 'out', int8=True, verify_data_dir=str(DATA))
    acc = result.accuracy
    assert acc['fp32']['samples'] == 10000 and acc['fp32']['acc'] == acc['torch']['acc']
    assert abs(acc['fp32']['acc'] - acc['int8']['acc']) <= 0.5


def test_unknown_model_names_what_is_allowed(tmp_path, capsys):
    assert ex.main(['vit_minimal_nope_6x1', '--out', str(tmp_path / 'out')]) == 2
    err = capsys.readouterr().err
    assert err.count('\n') == 1 and 'Traceback' not in err
    assert "unknown model 'vit_minimal_nope_6x1'" in err and 'vit_minimal_sym_6x4.mnist' in err
    assert ex.main(['vit_minimal_sym_6x4.in1k', '--out', str(tmp_path / 'out')]) == 2  # a tag without weights
    err = capsys.readouterr().err
    assert 'No pretrained weights exist' in err and '--random-init' in err
    assert not (tmp_path / 'out').exists()


def test_bad_option_is_one_line(tmp_path, capsys):
    with pytest.raises(SystemExit) as exited:  # argparse's exit, as in every tool's main
        ex.main(['vit_minimal_sym_6x4.mnist', '--out', str(tmp_path / 'out'), '--int9'])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert err.count('\n') == 1 and '--int9' in err


def test_missing_extra_says_what_to_install(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, 'onnxruntime', None)  # as if it were not installed
    assert ex.main(['vit_minimal_sym_6x4.mnist', '--out', str(tmp_path / 'out')]) == 2
    err = capsys.readouterr().err
    assert err.count('\n') == 1 and 'Traceback' not in err
    assert 'onnxruntime' in err and 'pip install -e ".[export]"' in err
    from timm_minimal.cli import MissingExtra
    with pytest.raises(MissingExtra, match='ONNX export needs onnxruntime'):
        ex.export_model('vit_minimal_sym_6x4.mnist', tmp_path / 'out')
    assert not (tmp_path / 'out').exists()


@pytest.mark.slow
def test_failed_verification_leaves_nothing_and_an_earlier_export_is_kept(tmp_path, monkeypatch):
    model = timm.create_model('vit_minimal_qk_6x1.mnist', depth=1).eval()
    out = tmp_path / 'out'
    ex.export_model(model, out)
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    with pytest.raises(ex.ExportError, match='--overwrite'):
        ex.export_model(model, out)
    monkeypatch.setattr(ex, 'max_abs_diff', lambda *a: 1.0)
    with pytest.raises(ex.VerificationError, match='differ'):
        ex.export_model(model, out, overwrite=True)
    assert [p.name for p in tmp_path.iterdir()] == ['out']
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    monkeypatch.undo()
    ex.export_model(model, out, overwrite=True)
    assert sorted(p.name for p in out.iterdir()) == ['model.onnx', 'preprocessing.json']
    assert [p.name for p in tmp_path.iterdir()] == ['out']


@pytest.mark.slow
def test_overwrite_never_replaces_a_users_folder(tmp_path, monkeypatch, capsys):
    """--overwrite replaces an earlier export only: not '.', not '..', not a folder with other files."""
    work = tmp_path / 'thesis'
    (work / 'src').mkdir(parents=True)
    (work / 'thesis.tex').write_text('mine')
    monkeypatch.chdir(work)
    for out in ('.', '..', str(work)):
        rc = ex.main(['vit_minimal_sym_6x4.mnist', '--out', out, '--overwrite'])
        err = capsys.readouterr().err
        assert rc == 2 and 'working folder' in err and err.count('\n') == 1, err
    rc = ex.main(['vit_minimal_sym_6x4.mnist', '--out', 'src', '--overwrite'])
    assert rc == 0
    (work / 'src' / 'notes.txt').write_text('mine too')
    rc = ex.main(['vit_minimal_sym_6x4.mnist', '--out', 'src', '--overwrite'])
    err = capsys.readouterr().err
    assert rc == 2 and 'did not write (notes.txt)' in err
    assert sorted(p.name for p in work.iterdir()) == ['src', 'thesis.tex']
    assert (work / 'thesis.tex').read_text() == 'mine' and (work / 'src' / 'notes.txt').is_file()
    assert not list(tmp_path.glob('.*tmp*')) and not list(work.glob('.*tmp*'))


@pytest.mark.slow
def test_deployment_benchmark_quick(tmp_path, capsys):
    from timm_minimal.tools.benchmark import deployment as deployment_benchmark
    md, js = tmp_path / 'deployment.md', tmp_path / 'deployment.json'
    assert deployment_benchmark.main(['--quick', '--output', str(md), '--json', str(js)]) == 0
    results = json.loads(js.read_text())
    (row,) = results['rows']
    assert row['model'] == 'vit_minimal_qkonly_6x1.mnist' and row['max_abs_diff'] <= 1e-4
    assert set(row['latency']) == {'torch', 'ort_fp32', 'ort_int8'}
    assert all(v['median_ms'] > 0 and v['calls'] == 10 for v in row['latency'].values())
    assert results['environment']['onnxruntime'] == ort.__version__ and results['settings']['threads'] == 1
    text = md.read_text()
    assert '| `vit_minimal_qkonly_6x1.mnist` |' in text and 'smoke-test' in text
    flags = cpu_signature()['flags']
    assert results['environment']['flags'] == flags  # a CPU figure comes with the CPU's SIMD flags
    assert f"- CPU flags: {flags or 'none of avx, amx, fma, sse4'}" in text
    with pytest.raises(SystemExit) as exited:  # argparse's exit, as in every tool's main
        deployment_benchmark.main(['--quick', '--threads', '0', '--out-md', '', '--out-json', ''])
    assert exited.value.code == 2
