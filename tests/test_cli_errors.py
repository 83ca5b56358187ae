"""Misuse of every command line ends with one line that names the problem and exit status 2, never a traceback,
and a check that would run on nothing refuses to pass."""
import json

import numpy as np
import pytest
import timm
import torch
from PIL import Image
from safetensors.torch import save_file

import timm_minimal  # noqa: F401
from timm_minimal.tools import attention, demo, evaluate
from timm_minimal.tools.benchmark import cli as benchmark_cli

torch.set_num_threads(1)


def _one_line(capsys, rc, *needles):
    err = capsys.readouterr().err
    assert rc == 2, err
    assert err.count('\n') == 1 and 'Traceback' not in err, err
    for needle in needles:
        assert needle in err, err


def _call(main, argv):
    try:
        return main(argv)
    except SystemExit as e:  # argparse exits for option errors
        return e.code


@pytest.fixture(scope='module')
def digit(tmp_path_factory):
    path = tmp_path_factory.mktemp('img') / 'digit.png'
    Image.fromarray(np.zeros((28, 28), np.uint8)).save(path)
    return path


def test_export_options(capsys):
    pytest.importorskip('onnxruntime', reason='the export extra is not installed')
    from timm_minimal.tools import export
    for argv, needle in ((['--opset', '999'], '--opset: must be an integer of at least 18 and at most'),
                         (['--opset', '-1'], '--opset: must be an integer of at least 18'),
                         (['--atol', 'nan'], 'finite number'), (['--batch-size', '-3'], 'at least 1'),
                         (['--max-int8-drop', 'inf'], 'finite number')):
        _one_line(capsys, _call(export.main, ['vit_minimal_sym_6x4.mnist', '--out', 'x', *argv]), needle)


def test_attention_options_and_inputs(digit, tmp_path, capsys):
    _one_line(capsys, _call(attention.main, [str(digit), '--dpi', '0']), 'at least 1')
    bomb = tmp_path / 'bomb.png'
    Image.new('1', (30000, 30000)).save(bomb)  # 109 kB on disk, 900 million pixels
    _one_line(capsys, _call(attention.main, [str(bomb), '--out', str(tmp_path / 'a.png')]), 'too large to read safely')
    folder = tmp_path / 'ckpt'
    folder.mkdir()
    model = timm.create_model('vit_minimal_sym_6x4.mnist')
    save_file(model.state_dict(), str(folder / 'model.safetensors'))
    (folder / 'config.json').write_text(json.dumps(dict(
        architecture='resnet18', num_classes=10, model_args=dict(attn_type='sym'), pretrained_cfg={})))
    _one_line(capsys, _call(attention.main, [str(digit), '--model', f'local-dir:{folder}', '--out',
                                             str(tmp_path / 'b.png')]), 'cannot load local-dir:')


def test_evaluate_options_and_data(mnist_dir, tmp_path, capsys):
    for bad in ('0', '-5'):
        _one_line(capsys, _call(evaluate.main, ['vit_minimal_sym_6x4.mnist', '--dataset', 'mnist', '--data-dir',
                                                str(mnist_dir), '--batch-size', bad]), 'at least 1')
    folder = tmp_path / 'three'
    for split in ('train', 'test'):
        for c in ('a', 'b', 'c'):
            (folder / split / c).mkdir(parents=True)
            Image.fromarray(np.zeros((28, 28), np.uint8)).save(folder / split / c / '0.png')
    timm.create_model('vit_minimal_sym_6x4.mnist', num_classes=2)
    ckpt = tmp_path / 'two'
    ckpt.mkdir()
    model = timm.create_model('vit_minimal_sym_6x4.mnist', num_classes=2)
    save_file(model.state_dict(), str(ckpt / 'model.safetensors'))
    (ckpt / 'config.json').write_text(json.dumps(dict(architecture='vit_minimal_sym_6x4', num_classes=2,
                                                      pretrained_cfg=dict(model.pretrained_cfg))))
    _one_line(capsys, _call(evaluate.main, [f'local-dir:{ckpt}', '--dataset', str(folder)]),
              'has 3 classes and the model 2 outputs')


def test_benchmark_and_demo_options(capsys):
    _one_line(capsys, _call(benchmark_cli.main, ['--models', 'nonexistent*']), "No registered architecture matches")
    _one_line(capsys, _call(demo.main, ['--epochs', '0']), '--epochs', 'at least 1')
