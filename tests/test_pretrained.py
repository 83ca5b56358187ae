"""The checkpoints that ship inside the package: they load offline with pretrained=True, point at
their Hub repos, have a committed model card, and classify real MNIST digits."""
import json
import re
from pathlib import Path

import numpy as np
import pytest
import timm
import torch
from huggingface_hub import ModelCard

import timm_minimal  # noqa: F401
from timm_minimal.models.pretrained import tag_dataset
from timm_minimal.models.vit_minimal import HUB_ORG, WEIGHTS_DIR

torch.set_num_threads(1)
ROOT = Path(__file__).resolve().parent.parent
SHIPPED = sorted(p.name[:-len('.safetensors')] for p in WEIGHTS_DIR.glob('*.safetensors'))


def test_a_tag_has_weights_exactly_where_a_file_ships():
    """pretrained=True loads the file of a tag that has one and refuses, naming the tags with weights, every other."""
    from timm_minimal.models.vit_minimal import ARCHITECTURES, NoPretrainedWeights
    from timm_minimal.models.pretrained import TAGS
    listed = set(timm.list_pretrained('vit_minimal*'))
    for arch in ARCHITECTURES:
        for tag in TAGS:
            name = f'{arch}.{tag}'
            if name in SHIPPED:
                assert name in listed
                continue
            assert name not in listed
            if tag == 'mnist' and arch.endswith('_6x1'):  # one refusal per family is enough to build
                with pytest.raises(NoPretrainedWeights, match=f'No pretrained weights exist for {name}'):
                    timm.create_model(name, pretrained=True)


def test_a_recipe_tag_is_its_datasets_geometry_and_preprocessing_and_exists_only_with_weights():
    """``.mixup_cifar10``: CIFAR-10's inputs and classes, weights of another recipe; an architecture without such
    weights has no such tag (timm refuses the name), and the tools name every tag."""
    from timm_minimal.models.pretrained import RECIPE_TAGS, tag_dataset
    from timm_minimal.tools.common import create_named_model
    assert tag_dataset('mixup_cifar10') == 'cifar10' and tag_dataset('cifar10') == 'cifar10'
    assert tag_dataset('imagenet') is None and set(RECIPE_TAGS.values()) <= {'mnist', 'cifar10', 'in1k'}
    mixup = timm.create_model('vit_minimal_std_mlp_6x4.mixup_cifar10', pretrained=True)
    plain = timm.create_model('vit_minimal_std_mlp_6x4.cifar10')
    same = ('input_size', 'mean', 'std', 'crop_pct', 'interpolation', 'num_classes')
    assert {k: mixup.pretrained_cfg.get(k) for k in same} == {k: plain.pretrained_cfg.get(k) for k in same}
    assert mixup.pretrained_cfg['tag'] == 'mixup_cifar10' and mixup.num_classes == 10
    assert any((a != b).any() for a, b in zip(mixup.state_dict().values(), plain.state_dict().values()))
    with pytest.raises(RuntimeError, match=r'Invalid pretrained tag \(mixup_cifar10\) for vit_minimal_sym_6x4: its '
                                           r'tags are mnist, cifar10, in1k, kd2_cifar10; with weights: mnist, cifar10, '
                                           r'kd2_cifar10\.'):
        timm.create_model('vit_minimal_sym_6x4.mixup_cifar10')  # no sym_6x4 weights of that recipe
    with pytest.raises(ValueError, match=r'the tags are .mnist, .cifar10, .in1k, .mixup_cifar10'):
        create_named_model('vit_minimal_sym_6x4.cifar100', pretrained=False)
    with pytest.raises(ValueError, match=r'.mixup_cifar10 weights exist for .*vit_minimal_std_mlp_6x4.mixup_cifar10'):
        create_named_model('vit_minimal_sym_6x4.mixup_cifar10', pretrained=True)
    kd = timm.create_model('vit_minimal_sym_6x1.kd_cifar10', pretrained=True)  # mimetic start, distilled
    assert kd.pretrained_cfg['tag'] == 'kd_cifar10' and kd.num_classes == 10
    with pytest.raises(RuntimeError, match=r'Invalid pretrained tag \(kd_cifar10\)'):
        timm.create_model('vit_minimal_sym_6x4.kd_cifar10')
    kd2 = timm.create_model('vit_minimal_sym_6x4.kd2_cifar10', pretrained=True)  # the stronger teacher
    assert kd2.pretrained_cfg['tag'] == 'kd2_cifar10' and kd2.pretrained_cfg['num_classes'] == 10
    with pytest.raises(RuntimeError, match=r'Invalid pretrained tag \(kd2_cifar10\)'):
        timm.create_model('vit_minimal_sym_6x1.kd2_cifar10')


@pytest.mark.parametrize('old, new', [('cifar10_mixup', 'mixup_cifar10'), ('cifar10_kd', 'kd_cifar10'),
                                      ('cifar10_kd2', 'kd2_cifar10')])
def test_a_recipe_tags_earlier_spelling_is_refused_in_one_line_that_names_the_new_one(old, new, capsys):
    """The recipe tags take timm's order (the recipe first, the dataset last); the earlier spelling is refused by
    timm's factory and by the tools, each naming the tag it now is."""
    from timm_minimal.tools.evaluate import main as evaluate
    arch = next(n for n in SHIPPED if n.endswith('.' + new)).split('.')[0]
    with pytest.raises(ValueError, match=rf"^the tag \.{old} is now \.{new} \(timm's order"):
        timm.create_model(f'{arch}.{old}', pretrained=True)
    assert evaluate(['--model', f'{arch}.{old}', '--dataset', 'cifar10']) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f'.{old} is now .{new}' in err and 'Traceback' not in err


@pytest.mark.parametrize('name', [n for n in SHIPPED if n.split('.')[1] not in ('mnist', 'cifar10', 'in1k')])
def test_a_recipe_tag_checkpoint_loads_in_transformers_as_in_timm(name):
    """The config of a recipe tag is its dataset's (3x32x32, CIFAR-10's ten labels); the transformers model built
    from it gives timm's logits."""
    from timm_minimal.models.configuration_vit_minimal import VitMinimalConfig
    from timm_minimal.models.modeling_vit_minimal import VitMinimalForImageClassification
    config = VitMinimalConfig.from_timm(name)
    assert (config.in_chans, config.img_size, config.num_labels) == (3, 32, 10)
    assert config.id2label[0] == 'airplane'
    model = timm.create_model(name, pretrained=True).eval()
    hf = VitMinimalForImageClassification.from_timm(model).eval()
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        torch.testing.assert_close(hf(pixel_values=x).logits, model(x), rtol=0, atol=1e-5)


@pytest.mark.parametrize('name', SHIPPED)
def test_shipped_checkpoint_loads_offline_and_has_a_card(name):
    model = timm.create_model(name, pretrained=True).eval()
    cfg = model.pretrained_cfg
    assert Path(cfg['file']).is_file() and cfg['hf_hub_id'] == f'{HUB_ORG}/{name}'
    x = torch.randn(2, *cfg['input_size'])
    with torch.no_grad():
        assert torch.isfinite(model(x)).all()

    card = ModelCard.load(ROOT / 'model_cards' / f'{name}.md')
    result = card.data.to_dict()['model-index'][0]['results'][0]
    assert result['metrics'][0]['type'] == 'accuracy' and 0 < result['metrics'][0]['value'] <= 100
    assert f'hf-hub:{HUB_ORG}/{name}' in card.text
    assert f'model_cards/{name}.md' in (ROOT / 'README.md').read_text()


@pytest.mark.parametrize('name', [n for n in SHIPPED if n.endswith('.mnist')])
def test_shipped_mnist_checkpoint_classifies_real_digits(name):
    """The 1,000 bundled test digits are part of the MNIST test split each card reports on."""
    from timm_minimal.tools.evaluate import evaluate_model
    result = evaluate_model(timm.create_model(name, pretrained=True), 'mnist-sample')
    card = ModelCard.load(ROOT / 'model_cards' / f'{name}.md')
    reported = card.data.to_dict()['model-index'][0]['results'][0]['metrics'][0]['value']
    p = reported / 100  # 1,000 of the 10,000 digits: four standard errors of a sample of that size
    assert result['samples'] == 1000
    assert abs(result['acc'] - reported) <= 400 * (p * (1 - p) / result['samples']) ** 0.5 + 0.1, (result, reported)


def test_evaluate_takes_the_training_split_as_timm_validate_does(capsys):
    """``--split train``: the training images through the evaluation preprocessing (how well a model fits them); a
    split the dataset lacks is refused in one line naming the ones it has."""
    from timm_minimal.tools import evaluate
    test = evaluate.evaluate_model(timm.create_model('vit_minimal_sym_6x4.mnist', pretrained=True), 'mnist-sample')
    assert evaluate.main(['--model', 'vit_minimal_sym_6x4.mnist', '--dataset', 'mnist-sample', '--split', 'train']) == 0
    train = re.search(r'on mnist-sample train \(20,000 images\): top-1 ([\d.]+)%', capsys.readouterr().out)
    assert (test['split'], test['samples']) == ('test', 1000)
    assert train and 90 < float(train.group(1)) != round(test['acc'], 2)
    assert evaluate.main(['--model', 'vit_minimal_sym_6x4.mnist', '--dataset', 'mnist-sample',
                          '--split', 'validation']) == 2
    err = capsys.readouterr().err.strip()
    assert err.endswith("mnist-sample has no split 'validation'; its splits are train and test") and '\n' not in err


def test_evaluate_scores_several_models_in_one_table_per_class_and_writes_json_and_the_confusion_figure(
        tmp_path, capsys):
    """``--model A B``: a row each (top-1 with its Wilson 95% interval, top-5, loss, parameters); ``--per-class`` a
    row per class; ``--json`` every number, each per-class count and the confusion matrix agreeing with the top-1;
    ``--confusion`` a PNG."""
    import json
    from PIL import Image
    from timm_minimal.tools import evaluate
    from timm_minimal.tools.eval_report import wilson_interval
    names = ['vit_minimal_sym_6x4.mnist', 'vit_minimal_std_6x1.mnist']
    assert evaluate.main(['--model', *names, '--dataset', 'mnist-sample', '--per-class', '--json', str(tmp_path / 'e.json'),
                          '--confusion', str(tmp_path / 'c.png')]) == 0
    out = capsys.readouterr().out.splitlines()
    report = json.loads((tmp_path / 'e.json').read_text())
    assert report['samples'] == 1000 and [m['model'] for m in report['models']] == names
    for m, line in zip(report['models'], out[2:4]):
        confusion = np.asarray(m['confusion'])
        assert confusion.sum() == 1000 and 100 * np.trace(confusion) / 1000 == pytest.approx(m['acc'])
        assert m['acc_interval'] == list(wilson_interval(int(np.trace(confusion)), 1000))
        assert m['acc_interval'][0] < m['acc'] < m['acc_interval'][1]
        assert [c['images'] for c in m['per_class']] == confusion.sum(1).tolist()
        assert m['params'] == sum(p.numel() for p in timm.create_model(m['model']).parameters())
        low, high = m['acc_interval']
        assert line.split() == [m['model'], f"{m['acc']:.2f}", f'{low:.2f}-{high:.2f}', f"{m['acc5']:.2f}",
                                f"{m['loss']:.4f}", f"{m['params']:,}"]
    assert out[4].split() == ['class', 'images', '#1', '#2'] and len(out) == 5 + 10 + 2 + 2
    assert out[5].split()[:2] == ['0', str(report['models'][0]['per_class'][0]['images'])]
    assert Image.open(tmp_path / 'c.png').size[0] > 800


def test_models_that_see_the_images_alike_share_one_prepared_split(monkeypatch):
    """The split is read and prepared once for the models of one preprocessing, and each gets what it would alone;
    a model of another preprocessing gets its own."""
    from timm_minimal.tools import evaluate
    prepared = []
    load = evaluate.load_eval_split
    monkeypatch.setattr(evaluate, 'load_eval_split', lambda cfg, *a, **k: prepared.append(cfg) or load(cfg, *a, **k))
    names = ['vit_minimal_sym_6x4.mnist', 'vit_minimal_std_6x1.mnist']
    models = {n: timm.create_model(n, pretrained=True) for n in names}
    together = evaluate.evaluate_models(models, 'mnist-sample', batch_size=300)
    assert len(prepared) == 1 and list(together) == names
    for name in names:
        assert evaluate.evaluate_model(models[name], 'mnist-sample', batch_size=300) == together[name]
    prepared.clear()
    other = timm.create_model('vit_minimal_sym_6x4.mnist', pretrained=True, pretrained_cfg_overlay=dict(crop_pct=0.9))
    assert set(evaluate.evaluate_models(dict(models, other=other), 'mnist-sample', batch_size=300)) == {*names, 'other'}
    assert [cfg['crop_pct'] for cfg in prepared] == [1.0, 0.9]


def test_evaluate_refuses_models_of_other_datasets_and_a_folder_for_a_file(tmp_path, capsys):
    from timm_minimal.tools import evaluate
    assert evaluate.main(['--model', 'vit_minimal_sym_6x4.mnist', 'vit_minimal_sym_6x4.cifar10']) == 2
    assert capsys.readouterr().err.strip().endswith("the models' tags name cifar10, mnist; give mnist, cifar10, "
                                                    "imagenet or an image folder.")
    assert evaluate.main(['--model', 'vit_minimal_sym_6x4.mnist', '--json', str(tmp_path)]) == 2
    assert f'--json {tmp_path} is a folder' in capsys.readouterr().err


def test_an_empty_split_is_refused_not_scored():
    """A prepared split without images is refused (``EvalSplit``), so evaluate_split never gives 0% of nothing."""
    import numpy as np
    from timm_minimal.tools import evaluate
    from timm_minimal.training.data.loading import DatasetError
    model = timm.create_model('vit_minimal_sym_6x4.mnist', pretrained=True).eval()
    with pytest.raises(DatasetError, match='the test split of MNIST holds no images'):
        empty = evaluate.EvalSplit('MNIST', 'test', np.zeros((0, 1, 28, 28), np.uint8), np.zeros(0, np.int64))
        evaluate.evaluate_split({'model': model}, empty, model.pretrained_cfg, model.num_classes)


def test_evaluate_predicts_alike_at_every_batch_size_and_takes_timms_default():
    """The batch is a matter of speed alone (scripts/eval_batch.py): the same predictions at the default, timm's
    validate.py's 256, as at 1,000 and at 7 (a last batch of 6)."""
    from timm_minimal.tools import evaluate
    from timm_minimal.tools.cli import build_parser
    model = timm.create_model('vit_minimal_sym_6x4.mnist', pretrained=True)
    results = [evaluate.evaluate_model(model, 'mnist-sample', batch_size=b) for b in (256, 1000, 7)]
    assert build_parser().parse_args(['--model', 'vit_minimal_sym_6x4.mnist']).batch_size == 256
    assert [r['samples'] for r in results] == [1000] * 3 and len({r['acc'] for r in results}) == 1
    assert results[1]['loss'] == pytest.approx(results[0]['loss'], rel=1e-5) == results[2]['loss']


DATA = ROOT.parent / 'shared' / 'data'  # the real datasets, where they are (CI has them)
DATASET_DIRS = {'mnist': DATA / 'MNIST' / 'raw', 'cifar10': DATA / 'CIFAR10'}


def card_accuracy(name):
    card = ModelCard.load(ROOT / 'model_cards' / f'{name}.md')
    return card.data.to_dict()['model-index'][0]['results'][0]['metrics'][0]['value']


@pytest.mark.parametrize('name', SHIPPED)
def test_readme_table_gives_the_card_accuracy(name):
    rows = [line for line in (ROOT / 'README.md').read_text().splitlines() if line.startswith(f'| [`{name}`]')]
    assert len(rows) == 1, f'README has {len(rows)} checkpoint rows for {name}'
    assert f'| {card_accuracy(name):.2f} |' in rows[0], rows[0]


@pytest.mark.parametrize('name', SHIPPED)
def test_the_export_table_gives_the_card_accuracy(name):
    """docs/export.md's torch column is the card's accuracy: fp32 on a CPU there, bf16 autocast for the cards of
    GPU-trained checkpoints, which moved up to 0.16 points."""
    rows = [line for line in (ROOT / 'docs' / 'export.md').read_text().splitlines() if line.startswith(f'| `{name}`')]
    assert len(rows) == 1, f'docs/export.md has {len(rows)} rows for {name}'
    assert abs(float(rows[0].split('|')[4]) - card_accuracy(name)) <= 0.2, rows[0]


@pytest.fixture
def all_cores():
    """Every core this process may use, for the suite's heaviest forwards, whatever thread count the test modules
    set (tests/test_train.py takes one)."""
    from timm_minimal.machine import torch_threads, usable_cores
    with torch_threads(usable_cores()):
        yield


@pytest.fixture(scope='module')
def full_splits():
    """The full test splits as the package's evaluation prepares them (``load_eval_split``), each read once for all
    the checkpoints whose preprocessing and classes it serves."""
    from timm_minimal.tools.evaluate import load_eval_split, model_label_names
    splits = {}

    def split(dataset, model, cfg):
        key = (dataset, model.num_classes, tuple(model_label_names(model) or ()), json.dumps(cfg, sort_keys=True))
        if key not in splits:
            splits[key] = load_eval_split(cfg, model.num_classes, dataset, str(DATA),
                                          label_names=model_label_names(model))
        return splits[key]
    return split


@pytest.mark.slow
@pytest.mark.parametrize('name', SHIPPED)
def test_card_accuracy_is_confirmed_on_the_full_test_split(name, full_splits, all_cores):
    """The package's own evaluation (timm_minimal.tools.evaluate) over all 10,000 test images gives the card's number
    (``evaluate_model`` is ``evaluate_split`` over ``load_eval_split``)."""
    from timm.data import resolve_data_config
    from timm_minimal.tools.evaluate import evaluate_split
    dataset = tag_dataset(name.split('.')[-1])  # a recipe tag's images are its dataset's
    if not DATASET_DIRS[dataset].is_dir():
        pytest.skip(f'{dataset} is not in ../shared/data: the full test split is needed')
    model = timm.create_model(name, pretrained=True).eval()
    cfg = resolve_data_config({}, model=model)
    res = evaluate_split({'model': model}, full_splits(dataset, model, cfg), cfg, model.num_classes)['model']
    assert res['samples'] == 10000
    # the card's number was measured by the trainer on its device: fp32 on a CPU gives the same predictions as
    # this fp32 evaluation; bf16 autocast (on a GPU, or on a CPU where the card says so) flips a few borderline
    # ones (0.16 pp at most so far)
    text = ModelCard.load(ROOT / 'model_cards' / f'{name}.md').text
    autocast = 'GPU' in text or 'autocast as the run trained' in text
    assert abs(res['acc'] - card_accuracy(name)) <= (0.2 if autocast else 0.005), (res['acc'], card_accuracy(name))


def test_the_imagenet_normalisation_is_timms():
    """models/datasets.py writes ImageNet's mean and std out (the parsers read the dataset facts without timm)."""
    from timm.data import IMAGENET_DEFAULT_MEAN, IMAGENET_DEFAULT_STD
    from timm_minimal.models.datasets import DATASETS
    assert (DATASETS['in1k'].mean, DATASETS['in1k'].std) == (IMAGENET_DEFAULT_MEAN, IMAGENET_DEFAULT_STD)


@pytest.mark.slow
def test_the_eval_batch_script_sets_each_batch_size_against_the_first(capsys):
    """scripts/eval_batch.py, the measurement behind the evaluation's default batch: one row per thread count and
    batch, its speed against the first batch of the same thread count, and the same top-1 in every row."""
    import importlib.util
    if not DATASET_DIRS['mnist'].is_dir():
        pytest.skip('mnist is not in ../shared/data: the script evaluates the full test split')
    spec = importlib.util.spec_from_file_location('eval_batch', ROOT / 'scripts' / 'eval_batch.py')
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    assert script.main(['--data-dir', str(DATA), '--models', 'vit_minimal_sym_6x4.mnist', '--batch-sizes', '1000',
                        '256', '--threads', '1', '--repeats', '1']) == 0
    torch.set_num_threads(1)
    out = capsys.readouterr().out
    rows = re.findall(r'^\| 1 \| (\d+) \| [\d.]+ \| [\d,]+ \| ([\d.]+)x \| ([\d.]+) \|$', out, re.M)
    assert [r[0] for r in rows] == ['1000', '256'] and rows[0][1] == '1.00' and rows[0][2] == rows[1][2], out
    assert 'CPU flags: ' in out and '(10,000 test images)' in out
    assert script.main(['--data-dir', str(DATA), '--models', 'vit_minimal_sym_6x4']) == 2
    assert 'name a shipped checkpoint with its tag' in capsys.readouterr().err


def test_a_distillation_head_the_checkpoint_never_trained_is_said():
    """A shipped checkpoint built with distill_token=True predicts the mean of its trained head and a new one: below
    its card's accuracy until both are trained. timm loads it; the package says so."""
    with pytest.warns(UserWarning, match=r'no distillation token or head .* until they are trained the model predicts '
                                         r'the mean of the checkpoint\'s head and an untrained one'):
        timm.create_model('vit_minimal_sym_6x4.mnist', pretrained=True, distill_token=True)


def test_evaluate_writes_nothing_onto_its_inputs_one_path_twice_or_an_existing_file(tmp_path, capsys):
    """--json onto the evaluated checkpoint's config.json, --confusion onto its weights, one path for both, and a file
    that exists (unless --overwrite) are refused before any model runs, the files as they were."""
    from timm_minimal import VitMinimalForImageClassification
    from timm_minimal.tools import evaluate
    folder = tmp_path / 'ckpt'
    VitMinimalForImageClassification.from_timm('vit_minimal_sym_6x4.mnist', pretrained=True).save_pretrained(folder)
    before = {p.name: p.read_bytes() for p in folder.iterdir()}
    mine = tmp_path / 'mine.json'
    mine.write_text('my notes')
    model = ['--model', f'local-dir:{folder}', '--dataset', 'mnist-sample']
    for argv, says in (
            (['--json', str(folder / 'config.json')], f'--json {folder / "config.json"} lies in {folder}, which this '
                                                      f'evaluation reads'),
            (['--confusion', str(folder / 'model.safetensors')], 'which this evaluation reads (a model or the dataset)'),
            (['--json', str(tmp_path / 'x'), '--confusion', str(tmp_path / 'x')], '--confusion and --json both name'),
            (['--json', str(mine)], f'--json {mine} exists; pass --overwrite to replace it')):
        assert evaluate.main(model + argv) == 2
        err = capsys.readouterr().err.strip()
        assert says in err and len(err.splitlines()) == 1, err
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == before and mine.read_text() == 'my notes'
    assert not (tmp_path / 'x').exists()
    assert evaluate.main(model + ['--json', str(mine), '--overwrite']) == 0
    assert json.loads(mine.read_text())['samples'] == 1000
