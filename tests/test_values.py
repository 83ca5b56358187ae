"""Every value that enters is parsed once, by one mechanism: the command line of every tool, the environment, the
records a run leaves (metrics.jsonl, run.json) and the caches the project derives (decoded images, the CPU
decision). Each bad value ends in one line (exit 2) or, for a derived file, in a rebuild with a warning."""
import argparse
import importlib
import json

import numpy as np
import pytest
import torch

from timm_minimal.cli import INT_LIMIT, number
from timm_minimal.training.cpu import split as cpu_split
from timm_minimal.training.data.device_data import images_to_array, read_cache
from timm_minimal.training.run.folder import RunFolder
from timm_minimal.training.run.record import RunRecord
from timm_minimal_scripts import SCRIPTS

from trainer_runs import BASE, run_inprocess

HUGE = '9' * 400

# (module, the function that builds its parser, its arguments).
# Every parser of the package: the console scripts' (timm_minimal_scripts.SCRIPTS, the one list of them), then
# those of the modules that run with python -m
PARSERS = sorted({(s.parser, s.builder, ()) for s in SCRIPTS.values()}) + [
    ('timm_minimal.tools.paper.beyond', 'build_parser', ()),
    ('timm_minimal.tools.benchmark.training', 'build_parser', ()),
    ('timm_minimal.tools.benchmark.deployment', 'build_parser', ()),
    ('timm_minimal.tools.benchmark.cpu_modes', 'build_parser', ()),
]
PARSER_IDS = [f"{p[0].replace('timm_minimal.', '')}:{p[1]}" for p in PARSERS]


def _parser(module, builder, args):
    return getattr(importlib.import_module(module), builder)(*args)


def _numeric_options(parser):
    """The options of ``parser`` whose type is a number type (the ranged ones carry ``wanted``)."""
    return [a for a in parser._actions if a.option_strings and (a.type in (int, float) or hasattr(a.type, 'wanted'))]


@pytest.mark.parametrize('module, builder, args', PARSERS, ids=PARSER_IDS)
def test_every_numeric_option_is_a_ranged_type_that_refuses_huge_infinite_and_nan(module, builder, args):
    parser = _parser(module, builder, args)
    options = _numeric_options(parser)
    bare = [a.option_strings[0] for a in options if a.type in (int, float)]
    assert not bare, f'options with a bare int/float type (use timm_minimal.cli.number): {bare}'
    for action in options:
        for bad in (HUGE, '-' + HUGE, 'inf', '-inf', 'nan', '1e400'):
            with pytest.raises(argparse.ArgumentTypeError, match='must be'):
                action.type(bad)


def test_the_parser_list_covers_every_tool():
    """A tool with a parser that the walk above does not visit fails here (its module defines build_parser or
    _parser)."""
    import pkgutil
    import timm_minimal
    walked = {p[0] for p in PARSERS}
    found = set()
    for info in pkgutil.walk_packages(timm_minimal.__path__, 'timm_minimal.'):
        if info.name.endswith('__main__'):
            continue
        source = importlib.util.find_spec(info.name).origin
        text = open(source).read() if source and source.endswith('.py') else ''
        if 'OneLineParser(' in text and 'class OneLineParser' not in text:
            found.add(info.name)
    assert found <= walked, f'parsers not walked by this test: {sorted(found - walked)}'


@pytest.mark.parametrize('kind, text, value', [
    (int, '12', 12), (int, str(INT_LIMIT), INT_LIMIT), (int, 3.0, 3), (float, '1e308', 1e308), (float, 2, 2.0)])
def test_good_numbers_pass(kind, text, value):
    assert number(kind, 0)(text) == value


@pytest.mark.parametrize('kind, text, named', [
    (int, HUGE, '(at most 9,223,372,036,854,775,807)'), (int, str(INT_LIMIT + 1), 'at most'), (int, '1e3', 'got'),
    (int, 'nan', "got 'nan'"), (int, 2.5, 'got 2.5'), (int, True, 'got True'), (float, 'nan', '(NaN)'),
    (float, 'inf', '(infinite)'), (float, HUGE, '(402 characters) (infinite)')], ids=lambda v: str(v)[:20])
def test_bad_numbers_are_named(kind, text, named):
    with pytest.raises(argparse.ArgumentTypeError) as e:
        number(kind, 0)(text)
    assert named in str(e.value) and len(str(e.value)) < 200



def _status(argv):
    """The trainer's exit status for ``argv``: returned, or raised by the parser."""
    try:
        return run_inprocess(argv)
    except SystemExit as e:
        return e.code


def _one_line(capsys, *words):
    err = capsys.readouterr().err
    assert 'Traceback' not in err and len(err.strip().splitlines()) == 1, err
    for w in words:
        assert w in err, err


@pytest.mark.parametrize('option, value, named', [
    ('--epochs', HUGE, 'argument --epochs'), ('--batch-size', HUGE, 'argument --batch-size'),
    ('--eval-subset', HUGE, 'argument --eval-subset'), ('--device-data-limit', '1e400', 'infinite'),
    ('--device-data-limit', '1e308', 'at most 1,048,576'), ('--model-kwargs', 'depth', 'takes key=value pairs'),
    ('--lr', 'nan', 'NaN'), ('--cpu-processes', '1000000', 'more than the'), ('--recount', '1000000000', 'at most 64'),
    ('--crop-pct', '1e-6', 'at least 0.1')], ids=lambda v: str(v)[:20])
def test_train_refuses_numbers_at_the_far_ends_in_one_line(option, value, named, data, tmp_path, capsys):
    argv = BASE + data + ['--model', 'vit_minimal_sym_6x1', '--output', tmp_path / 'run', option, value]
    assert _status(argv) == 2
    _one_line(capsys, named)
    assert not (tmp_path / 'run').exists()


@pytest.mark.parametrize('variable, value, named', [
    ('WORLD_SIZE', 'abc', 'WORLD_SIZE'), ('OMP_NUM_THREADS', HUGE, 'OMP_NUM_THREADS'),
    ('TIMM_MINIMAL_MAX_PARAMS', 'inf', 'TIMM_MINIMAL_MAX_PARAMS'), ('TIMM_MINIMAL_MAX_PARAMS', 'nan', 'positive whole'),
    ('TIMM_MINIMAL_MAX_ACTIVATIONS', '0', 'TIMM_MINIMAL_MAX_ACTIVATIONS')], ids=lambda v: str(v)[:20])
def test_the_environment_is_read_through_the_same_types(variable, value, named, data, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv(variable, value)
    extra = ['--cpu-processes', '1'] if variable == 'OMP_NUM_THREADS' else []  # where the core budget is read
    argv = BASE + data + ['--model', 'vit_minimal_sym_6x1', '--output', tmp_path / 'run'] + extra
    assert _status(argv) == 2
    _one_line(capsys, named)


def _run_folder(tmp_path, row_changes=None, record_changes=None):
    folder = RunFolder(tmp_path / 'run')
    folder.path.mkdir()
    row = dict(epoch=1, update=3, train_loss=1.0, train_acc=60.0, test_loss=1.1, test_acc=61.0, lr=1e-3,
               throughput=100.0, epoch_time=1.0, train_time=0.9, eval_time=0.1, elapsed=2.0, train_samples=96,
               test_samples=50)
    row.update(row_changes or {})
    folder.metrics_file.write_text(json.dumps(row) + '\n')
    record = dict(RunRecord(command='x', model='vit_minimal_sym_6x1.mnist', status='finished').to_dict())
    record.update(record_changes or {})
    folder.run_file.write_text(json.dumps(record))
    return folder


@pytest.mark.parametrize('changes, named', [
    (dict(test_acc='61'), 'test_acc must be a finite number'), (dict(test_acc=float('nan')), 'test_acc'),
    (dict(test_acc=1e308), 'from 0 to 100'), (dict(epoch=1.5), 'epoch must be an integer'),
    (dict(epoch_time=None), 'epoch_time')])
def test_a_metrics_row_is_read_through_its_type(changes, named, tmp_path):
    folder = _run_folder(tmp_path, row_changes=changes)
    with pytest.raises(ValueError, match=named) as e:
        folder.read_metrics()
    assert 'metrics.jsonl line 1' in str(e.value)


@pytest.mark.parametrize('changes, named', [
    (dict(args=[]), '"args" must be dict'), (dict(dataset='mnist'), '"dataset" must be dict'),
    (dict(launches=[dict(num_processes='2')]), '"num_processes" must be int'),
    (dict(wall_time=float('inf')), '"wall_time"')])
def test_a_run_record_is_read_through_its_type(changes, named, tmp_path):
    folder = _run_folder(tmp_path, record_changes=changes)
    with pytest.raises(ValueError, match=named):
        folder.read_record()


@pytest.mark.parametrize('changes', [dict(test_acc='61'), dict(test_acc=1e308)])
def test_publish_refuses_a_run_with_a_bad_number_in_one_line(changes, tmp_path, capsys):
    from timm_minimal.tools.hub import publish
    folder = _run_folder(tmp_path, row_changes=changes)
    assert publish.main([str(folder.path), '--repo-id', 'me/model', '--output', str(tmp_path / 'out')]) == 2
    _one_line(capsys, 'metrics.jsonl line 1')
    assert not (tmp_path / 'out').exists()


class _Folder(torch.utils.data.Dataset):
    classes = ['a', 'b', 'c']

    def __init__(self, n=6):
        from PIL import Image
        self.items = [(Image.new('L', (8, 8), 40 * i), i % 3) for i in range(n)]

    def __len__(self):
        return len(self.items)

    def __getitem__(self, i):
        return self.items[i]


def _transform(img):
    return torch.from_numpy(np.array(img, dtype=np.uint8))[None]


@pytest.mark.parametrize('spoil', ['truncated', 'pickled', 'shape', 'labels', 'not_a_zip'])
def test_a_bad_decoded_image_cache_is_rebuilt_with_a_warning(spoil, tmp_path, caplog):
    ds, cache = _Folder(), tmp_path / 'cache.npz'
    images, labels = images_to_array(ds, _transform, (1, 8, 8), 'L', cache)
    if spoil == 'truncated':
        cache.write_bytes(cache.read_bytes()[:100])
    elif spoil == 'pickled':
        np.savez(cache, images=np.array([object()] * 6, dtype=object), labels=labels)
    elif spoil == 'shape':
        np.savez(cache, images=images[:, :, :4], labels=labels)
    elif spoil == 'labels':
        np.savez(cache, images=images, labels=labels + 7)
    else:
        cache.write_text('not a zip')
    assert read_cache(cache, 6, (1, 8, 8), ds.classes) is None
    again, again_labels = images_to_array(ds, _transform, (1, 8, 8), 'L', cache)
    assert np.array_equal(again, images) and np.array_equal(again_labels, labels)
    assert 'not usable' in caplog.text
    assert read_cache(cache, 6, (1, 8, 8), ds.classes) is not None  # rebuilt


@pytest.mark.parametrize('content', ['"a string"', '[1, 2]', '{"k": {"rates": {}}}', '{"k": {"processes": "2"}}',
                                     '{"k": {"processes": 0}}', 'not json'])
def test_a_bad_cpu_decision_cache_is_measured_again(content, tmp_path):
    path = tmp_path / 'cpu_split.json'
    path.write_text(content)
    said = []
    assert cpu_split.read_cache(path, said.append) == {}
    assert said and 'measuring again' in said[0]


def test_a_forged_process_count_is_not_taken(tmp_path, monkeypatch, counts_through_measure):
    """A cached count that is not a candidate of this machine (3 on 2 cores, a million) is measured again."""
    measured = []
    monkeypatch.setattr(cpu_split, 'measure', lambda model, batch, n, threads, **step: measured.append(n) or float(n))
    monkeypatch.setattr(cpu_split, 'free_cores', lambda budget, seconds=0.3: budget)  # a quiet machine: kept
    first = cpu_split.decide('vit_minimal_sym_6x4.mnist', 256, tmp_path, budget=2, say=lambda *_: None)
    path = tmp_path / 'cpu_split.json'
    known = json.loads(path.read_text())
    for count in (3, 1_000_000):
        known[next(iter(known))]['processes'] = count
        path.write_text(json.dumps(known))
        measured.clear()
        assert cpu_split.decide('vit_minimal_sym_6x4.mnist', 256, tmp_path, budget=2, say=lambda *_: None) == first
        assert measured == [1, 2]


def test_a_split_too_large_to_decode_is_refused_before_decoding():
    from timm_minimal.training.data.loading import DatasetError, check_decode_size

    class Huge(_Folder):
        def __len__(self):
            return 10_000

        def __getitem__(self, i):
            raise AssertionError('decoded')
    with pytest.raises(DatasetError, match='would take'):
        images_to_array(Huge(), _transform, (3, 4004, 4004), 'RGB')
    with pytest.raises(DatasetError, match='crop_pct must be a number from 0.1'):
        check_decode_size((1, 28, 28), 1e-6)
    with pytest.raises(DatasetError, match='megapixels|a side over'):
        check_decode_size((3, 16000, 16000), 0.5)


def test_an_image_folder_applies_the_image_limits(tmp_path):
    from PIL import Image
    from timm_minimal.training.data.image_folder import DatasetError, FolderDataset
    Image.new('L', (70_000, 1)).save(tmp_path / 'wide.png')
    with pytest.raises(DatasetError, match='a side over|ratio over'):
        FolderDataset([(str(tmp_path / 'wide.png'), 0)], ['a'], 'L')[0]




def test_depth_is_bounded_before_anything_is_built(tmp_path, monkeypatch):
    """200,000 blocks of width 4 are 2% of the parameter limit yet minutes and gigabytes to build: refused at once
    through timm, a transformers config and a local-dir config.json; the limit is raised by its variable."""
    import time
    import timm
    from timm_minimal import VitMinimalConfig
    t0 = time.perf_counter()
    with pytest.raises(ValueError, match='depth 200,000 is over the limit of 1,024 blocks'):
        timm.create_model('vit_minimal_std_6x1', depth=200_000, embed_dim=4)
    with pytest.raises(ValueError, match='TIMM_MINIMAL_MAX_DEPTH'):
        VitMinimalConfig(depth=200_000, embed_dim=4)
    (tmp_path / 'config.json').write_text(json.dumps(dict(architecture='vit_minimal_std_6x1', num_classes=10,
                                                          model_args=dict(depth=200_000, embed_dim=4),
                                                          pretrained_cfg=dict(num_classes=10))))
    with pytest.raises(ValueError, match='over the limit'):
        timm.create_model(f'local-dir:{tmp_path}')
    assert time.perf_counter() - t0 < 60  # refused at once, not built (minutes), even on a loaded machine
    monkeypatch.setenv('TIMM_MINIMAL_MAX_DEPTH', '2000')
    assert len(timm.create_model('vit_minimal_std_6x1', depth=1100, embed_dim=4).blocks) == 1100


@pytest.mark.parametrize('dynamic', [False, True])
def test_a_config_input_size_beyond_the_limits_is_refused_when_the_model_is_built(dynamic, tmp_path):
    """A checkpoint's config.json that asks for 4004 x 4004 inputs (what every tool resizes each image to, and what a
    dynamic_img_size model then attends over: a terabyte attention matrix) is refused when the model is built."""
    import timm
    from timm.models import save_for_hf
    save_for_hf(timm.create_model('vit_minimal_sym_6x4.cifar10'), tmp_path / 'ck')
    cfg = json.loads((tmp_path / 'ck' / 'config.json').read_text())
    cfg['pretrained_cfg']['input_size'] = [3, 4004, 4004]
    cfg['model_args'] = {'dynamic_img_size': True} if dynamic else {}
    (tmp_path / 'ck' / 'config.json').write_text(json.dumps(cfg))
    with pytest.raises(ValueError, match="config gives the input size 3x4004x4004: .*attention matrix"):
        timm.create_model(f'local-dir:{tmp_path / "ck"}', pretrained=True)


def test_evaluate_refuses_a_config_size_the_model_does_not_take():
    import timm
    from timm_minimal.tools.evaluate import check_config_size
    model = timm.create_model('vit_minimal_sym_6x4.cifar10')
    check_config_size(model, (3, 32, 32))
    with pytest.raises(ValueError, match='gives the input size 3x64x64, but the model takes 32x32'):
        check_config_size(model, (3, 64, 64))
    check_config_size(timm.create_model('vit_minimal_sym_6x4.cifar10', dynamic_img_size=True), (3, 64, 64))


def test_evaluate_takes_the_dataset_from_the_tag_as_export_does(monkeypatch, capsys):
    from timm_minimal.tools import evaluate
    seen = []

    def fake(models, dataset, *a, **k):
        seen.append(dataset)
        return {name: dict(dataset=dataset, split='test', samples=1, acc=100.0, acc5=None, loss=0.0,
                           class_names=['a'], confusion=[[1]]) for name in models}
    monkeypatch.setattr(evaluate, 'evaluate_models', fake)
    assert evaluate.main(['--model', 'vit_minimal_sym_6x4.cifar10']) == 0
    assert evaluate.main(['--model', 'vit_minimal_sym_6x4.cifar10', '--dataset', 'path/to/folder']) == 0
    assert seen == ['cifar10', 'path/to/folder']
