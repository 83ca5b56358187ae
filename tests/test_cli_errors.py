"""Misuse of every command line ends with one line that names the problem and exit status 2, never a traceback,
and a check that would run on nothing refuses to pass."""
import argparse
import json

import numpy as np
import pytest
import timm
import torch
from PIL import Image
from safetensors.torch import save_file

import timm_minimal  # noqa: F401
from timm_minimal.tools import demo, evaluate
from timm_minimal.tools.inside import attention
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
    from timm_minimal.tools.deploy import export
    for argv, needle in ((['--opset', '999'], 'opset: must be an integer of at least 18 and at most'),
                         (['--opset', '-1'], '--opset: must be an integer of at least 18'),
                         (['--atol', 'nan'], 'finite number'), (['--batch-size', '-3'], 'at least 1'),
                         (['--max-int8-drop', 'inf'], 'finite number')):
        _one_line(capsys, _call(export.main, ['vit_minimal_sym_6x4.mnist', '--out', 'x', *argv]), needle)


def test_attention_options_and_inputs(digit, tmp_path, capsys):
    _one_line(capsys, _call(attention.main, [str(digit), '--dpi', '0']), 'at least 1')
    bomb = tmp_path / 'bomb.png'
    Image.new('1', (30000, 30000)).save(bomb)  # 109 kB on disk, 900 million pixels
    _one_line(capsys, _call(attention.main, [str(bomb), '--out', str(tmp_path / 'a.png')]), 'too large to read safely')
    strip = tmp_path / 'strip.png'
    Image.new('L', (1_000_000, 1)).save(strip)  # a few kB, within 25 megapixels, 1,000,000 : 1
    _one_line(capsys, _call(attention.main, [str(strip), '--out', str(tmp_path / 'a.png')]), 'a side over 16,384 pixels')
    Image.new('L', (3000, 10)).save(strip)
    _one_line(capsys, _call(attention.main, [str(strip), '--out', str(tmp_path / 'a.png')]), 'in a ratio over 64:1')
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


def test_each_tool_names_only_its_own_options_when_data_are_missing(tmp_path, capsys, monkeypatch):
    """The remedy of a missing dataset names the option of the tool that was run, and no option it lacks; the export
    names it before it exports anything (a model's export takes seconds, an int8 one longer)."""
    from timm_minimal.training import train
    nothing = str(tmp_path / 'nothing')
    _one_line(capsys, _call(evaluate.main, ['vit_minimal_sym_6x4.mnist', '--dataset', 'mnist', '--data-dir', nothing,
                                            '--no-download']),
              'pass --data-dir pointing at them, or allow the download (drop --no-download)')
    _one_line(capsys, _call(train.main, ['--model', 'vit_minimal_sym_6x4', '--dataset', 'cifar10', '--data-dir',
                                         nothing, '--no-download', '--output', str(tmp_path / 'r'), '--epochs', '1']),
              'fix --data-dir, or allow the download (drop --no-download)')
    pytest.importorskip('onnxruntime', reason='the export extra is not installed')
    from timm_minimal.tools.deploy import export

    def no_export(*args, **kwargs):
        raise AssertionError('the export ran before the missing test data were named')
    monkeypatch.setattr(export, 'export_onnx', no_export)
    rc = _call(export.main, ['vit_minimal_sym_6x4.mnist', '--out', str(tmp_path / 'x'), '--int8', '--verify-data-dir',
                             nothing])
    err = capsys.readouterr().err
    assert rc == 2 and 'pass --verify-data-dir pointing at them.' in err and 'download' not in err, err
    assert not (tmp_path / 'x').exists() and not (tmp_path / 'r').exists()


def test_a_broken_checkpoint_is_named(tmp_path, capsys):
    """An invalid config.json is named by its path; a head of another class count than the config's is named with
    the two counts, not as missing keys."""
    ckpt = tmp_path / 'ckpt'
    ckpt.mkdir()
    model = timm.create_model('vit_minimal_sym_6x4.mnist', num_classes=5)
    save_file(model.state_dict(), str(ckpt / 'model.safetensors'))
    (ckpt / 'config.json').write_text('{"architecture": ')
    _one_line(capsys, _call(evaluate.main, [f'local-dir:{ckpt}', '--dataset', 'mnist']),
              f'{ckpt}/config.json is not valid JSON')
    (ckpt / 'config.json').write_text(json.dumps(dict(architecture='vit_minimal_sym_6x4', num_classes=10,
                                                      pretrained_cfg=dict(model.pretrained_cfg, num_classes=10))))
    _one_line(capsys, _call(evaluate.main, [f'local-dir:{ckpt}', '--dataset', 'mnist']),
              'says num_classes=10 but the weights file', 'has a 5-class head')
    assert timm.create_model(f'local-dir:{ckpt}', pretrained=True, num_classes=3).num_classes == 3  # a new head


def test_the_earlier_option_spellings_still_work_for_one_release(capsys):
    """--model, --output and --mixed-precision everywhere; the earlier spellings set the same options, unlisted."""
    from timm_minimal.tools.deploy import export
    from timm_minimal.tools.hub import publish
    from timm_minimal.tools.benchmark import cli as benchmark_cli
    for argv in (['vit_minimal_sym_6x4.mnist', '--out', 'x'], ['--model', 'vit_minimal_sym_6x4.mnist', '--output', 'x'],
                 ['--output', 'x', 'vit_minimal_sym_6x4.mnist']):
        args = export.build_parser().parse_args(argv)
        assert (args.model, args.output) == ('vit_minimal_sym_6x4.mnist', 'x') and not hasattr(args, '_renamed_out')
    assert str(publish.build_parser().parse_args(['run', '--repo-id', 'a/b', '--out', 'hub']).output) == 'hub'
    help_text = export.build_parser().format_help()
    assert '--output' in help_text and '--out ' not in help_text and '_renamed' not in help_text
    for argv, needle in ((['m', '--model', 'n', '--output', 'x'], '--model is given twice'),
                         (['--output', 'x'], 'required: --model'), (['m'], 'required: --output')):
        with pytest.raises(SystemExit) as e:
            export.build_parser().parse_args(argv)
        assert e.value.code == 2 and needle in capsys.readouterr().err
    bench = benchmark_cli.build_parser()
    for argv, mode in (([], 'no'), (['--mixed-precision', 'fp16'], 'fp16'), (['--amp'], 'bf16'),
                       (['--amp', '--amp-dtype', 'float16'], 'fp16')):
        assert benchmark_cli._mixed_precision(bench.parse_args(argv)) == mode
    assert '--amp' not in bench.format_help()
    from timm_minimal.tools.benchmark import cpu_modes, deployment, training as training_benchmark
    from timm_minimal.tools.paper import reproduce
    for parser, old_words in ((cpu_modes.build_parser(), ('--out-md', '--out-json')),
                              (deployment.build_parser(), ('--out-md', '--out-json')),
                              (training_benchmark.build_parser(), ('--out-md', '--out-json')),
                              (reproduce.build_parser(), ('--results', '--json'))):
        args = parser.parse_args([old_words[0], 'r.md', old_words[1], 'r.json'])
        assert (args.output, args.json) == ('r.md', 'r.json'), parser.prog
        assert old_words[0] not in parser.format_help(), parser.prog


def _parsers():
    """Every tool's parser, by its module and builder (the one list of them: test_values.PARSERS)."""
    from test_values import PARSER_IDS, PARSERS, _parser
    return {name: _parser(*parser) for name, parser in zip(PARSER_IDS, PARSERS)}


def test_every_tool_states_the_default_of_every_option_in_its_help():
    """One help formatter for all: an option with a default says it once (a flag that is off, and an option without
    a default, say nothing)."""
    for name, parser in _parsers().items():
        formatter = parser._get_formatter()
        for action in parser._actions:
            if not action.option_strings or action.help == argparse.SUPPRESS or action.default in (None, False) \
                    or action.default == argparse.SUPPRESS or isinstance(action, argparse._HelpAction):
                continue
            assert 'default' in formatter._get_help_string(action).lower(), (name, action.option_strings)
            text = formatter._expand_help(action).lower()
            assert text.count('(default') <= 1, (name, action.option_strings, 'the default is stated twice')
        assert parser.format_help() and '(default: None)' not in parser.format_help()  # renders, says no None


def test_evaluate_downloads_a_missing_dataset_by_default_as_the_trainer_does():
    from timm_minimal.tools.cli import build_parser
    from timm_minimal.training.cli import build_parser as train_parser
    parse = build_parser().parse_args
    assert parse(['--model', 'm']).download and not parse(['--model', 'm', '--no-download']).download
    assert parse(['--model', 'm', '--download']).download  # the earlier flag, now the default
    assert parse(['--model', 'm']).data_dir is None and train_parser().parse_args([]).data_dir is None
    assert '--download ' not in build_parser().format_help()
