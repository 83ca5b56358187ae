"""Publishing a training run: export folder, model card from the run's own numbers, upload to a
Hub-compatible server on 127.0.0.1 and reading it back with timm, transformers and ModelCard."""
import json
import shutil

import numpy as np
import pytest
import timm
import torch
from huggingface_hub import HfApi, ModelCard
from PIL import Image

import timm_minimal  # noqa: F401
from timm_minimal.models.pretrained import file_sha256
from timm_minimal.tools.hub import publish
from timm_minimal.tools.hub.cards import card_weights_sha256
from timm_minimal.training.train import main as train_main

torch.set_num_threads(1)



def _train(out, *args):
    rc = train_main(['--output', str(out), '--epochs', '1', '--seed', '0', '--no-progress', '--num-workers', '0',
                     '--cpu', *args])
    assert rc == 0
    return out


@pytest.fixture(scope='module')
def mnist_run(tmp_path_factory, mnist_dir):
    """A real (short) training run of vit_minimal_sym_6x1 on a subset of the bundled MNIST sample, in fp32 (the CPU
    default is bf16 where the CPU has native bf16)."""
    out = tmp_path_factory.mktemp('runs') / 'sym-mnist'
    return _train(out, '--model', 'vit_minimal_sym_6x1.mnist', '--dataset', 'mnist', '--data-dir', str(mnist_dir),
                  '--train-subset', '512', '--eval-subset', '256', '--batch-size', '64', '--mixed-precision', 'no')


def _metrics(run):
    return [json.loads(line) for line in (run / 'metrics.jsonl').read_text().splitlines()]


def test_export_folder_and_card_numbers_come_from_the_run(mnist_run, tmp_path):
    out = publish.export_run(mnist_run, tmp_path / 'repo', 'testuser/vit_minimal_sym_6x1.mnist',
                             card_copy=tmp_path / 'cards' / 'sym.md')
    names = {p.name for p in out.iterdir()}
    assert {'config.json', 'model.safetensors', 'preprocessor_config.json', 'README.md'} <= names
    assert any(n.startswith('modeling_') for n in names)  # code for trust_remote_code
    config = json.loads((out / 'config.json').read_text())
    assert config['model_type'] == 'vit_minimal' and config['architecture'] == 'vit_minimal_sym_6x1'
    assert config['id2label']['3'] == '3'

    last = _metrics(mnist_run)[-1]
    card = ModelCard.load(out / 'README.md')
    data = card.data.to_dict()
    assert data['library_name'] == 'transformers' and 'custom_code' in data['tags']  # the Hub's snippet: remote code
    assert data['license'] == 'apache-2.0' and (out / 'LICENSE').is_file()
    assert data['datasets'] == ['ylecun/mnist']
    result = data['model-index'][0]['results'][0]
    assert result['metrics'][0]['type'] == 'accuracy'
    assert result['metrics'][0]['value'] == round(last['test_acc'], 2)
    text = card.text
    assert f"{last['test_acc']:.2f}" in text and f"{last['train_loss']:.4f}" in text
    assert '70,930' in text  # parameters, counted from the model
    assert 'timm-minimal-train --output' in text  # the exact command of the run
    assert '97.80' in text  # the paper's Table 2 validation accuracy for 1-head symmetry
    assert 'hf-hub:testuser/vit_minimal_sym_6x1.mnist' in text
    assert "'testuser/vit_minimal_sym_6x1.mnist', trust_remote_code=True)" in text and 'pretrained_folder' not in text
    assert (tmp_path / 'cards' / 'sym.md').read_text() == (out / 'README.md').read_text()
    assert 'autocast' not in text  # an fp32 run's card states no precision
    # the weights the card measured, by the digest a user can check the repository's file against
    assert card_weights_sha256(text, 'the card') == file_sha256(out / 'model.safetensors')


def test_card_states_the_autocast_precision_its_test_accuracy_was_measured_in(mnist_run, tmp_path):
    """A run that trained (and so evaluated) in bf16 autocast says so next to its numbers: an fp32 evaluation of
    the same weights can differ by a few borderline predictions."""
    run = shutil.copytree(mnist_run, tmp_path / 'bf16-run')
    record = json.loads((run / 'run.json').read_text())
    assert record['launches'][-1]['mixed_precision'] == 'no'
    record['launches'][-1]['mixed_precision'] = 'bf16'
    (run / 'run.json').write_text(json.dumps(record))
    out = publish.export_run(run, tmp_path / 'repo', 'testuser/vit_minimal_sym_6x1.mnist')
    text = ModelCard.load(out / 'README.md').text
    assert 'at the end of\ntraining, in bf16 autocast as the run trained' in text


def test_push_and_read_back_with_timm_transformers_and_modelcard(mnist_run, tmp_path, hub_server):
    from transformers import AutoModelForImageClassification, pipeline

    repo = 'testuser/vit_minimal_sym_6x1.mnist'
    folder = publish.export_run(mnist_run, tmp_path / 'repo', repo)
    url = publish.push_folder(folder, repo)
    assert repo in url
    files = set(HfApi().list_repo_files(repo))
    assert {'config.json', 'model.safetensors', 'preprocessor_config.json', 'README.md'} <= files

    local = timm.create_model(f'local-dir:{mnist_run}/checkpoints/last', pretrained=True).eval()
    x = torch.randn(3, 1, 28, 28)
    with torch.no_grad():
        ref = local(x)
        from_timm = timm.create_model(f'hf-hub:{repo}', pretrained=True).eval()(x)
        hf = AutoModelForImageClassification.from_pretrained(repo).eval()
        from_hf = hf(pixel_values=x).logits
    torch.testing.assert_close(from_timm, ref, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(from_hf, ref, rtol=1e-5, atol=1e-5)

    card = ModelCard.load(repo)
    last = _metrics(mnist_run)[-1]
    assert card.data.to_dict()['model-index'][0]['results'][0]['metrics'][0]['value'] == round(last['test_acc'], 2)

    digit = Image.fromarray((np.random.default_rng(0).random((28, 28)) * 255).astype('uint8'))
    preds = pipeline('image-classification', model=repo)(digit)
    assert preds[0]['label'] in [str(i) for i in range(10)]


def test_push_private_to_a_revision(mnist_run, tmp_path, hub_server):
    repo = 'testorg/sym-private'
    folder = publish.export_run(mnist_run, tmp_path / 'repo', repo)
    publish.push_folder(folder, repo, private=True, revision='v1', commit_message='first weights')
    api = HfApi()
    assert api.model_info(repo).private
    assert 'model.safetensors' in api.list_repo_files(repo, revision='v1')
    assert 'model.safetensors' not in api.list_repo_files(repo)  # main holds only the initial commit
    model = timm.create_model(f'hf-hub:{repo}@v1', pretrained=True)
    assert model.pretrained_cfg['architecture'] == 'vit_minimal_sym_6x1'


def test_cli_exports_and_pushes(mnist_run, tmp_path, hub_server, capsys):
    rc = publish.main([str(mnist_run), '--repo-id', 'testuser/cli-push', '--out', str(tmp_path / 'repo'), '--push'])
    assert rc == 0
    assert 'pushed testuser/cli-push' in capsys.readouterr().out
    assert 'README.md' in HfApi().list_repo_files('testuser/cli-push')


def test_unfinished_or_empty_runs_are_refused(mnist_run, tmp_path):
    run = tmp_path / 'copy'
    shutil.copytree(mnist_run, run)
    info = json.loads((run / 'run.json').read_text())
    info['status'] = 'running'
    (run / 'run.json').write_text(json.dumps(info))
    with pytest.raises(publish.PublishError, match="status 'running'.*--resume"):
        publish.export_run(run, tmp_path / 'out', 'x/y')
    (run / 'metrics.jsonl').write_text('')
    with pytest.raises(publish.PublishError, match='no finished epoch'):
        publish.export_run(run, tmp_path / 'out', 'x/y')
    with pytest.raises(publish.PublishError, match='run.json is missing'):
        publish.export_run(tmp_path, tmp_path / 'out', 'x/y')
    assert not (tmp_path / 'out').exists()
    assert publish.main([str(tmp_path), '--repo-id', 'x/y']) == 2


def test_names_from_the_run_or_the_command_line_are_checked_before_anything_is_written(mnist_run, tmp_path):
    run = tmp_path / 'copy'
    shutil.copytree(mnist_run, run)
    with pytest.raises(publish.PublishError, match="--repo-id '../../etc/x' is not a Hub repository id"):
        publish.export_run(run, tmp_path / 'out', '../../etc/x')
    info = json.loads((run / 'run.json').read_text())
    info['model'] = info['architecture'] = '../../../outside'
    (run / 'run.json').write_text(json.dumps(info))
    with pytest.raises(publish.PublishError, match="architecture '../../../outside' is not a registered"):
        publish.export_run(run, tmp_path / 'out', 'x/y', ship_weights=tmp_path)
    assert not (tmp_path / 'out').exists() and not list(tmp_path.parent.glob('*.safetensors'))


def test_in1k_recipe_on_a_tiny_image_folder(tmp_path):
    """The ImageNet path (in1k geometry, image-folder data) trains and publishes; the card names the data."""
    rng = np.random.default_rng(0)
    for split in ('train', 'val'):
        for cls in ('cat', 'dog'):
            d = tmp_path / 'tiny' / split / cls
            d.mkdir(parents=True)
            for i in range(4):
                Image.fromarray((rng.random((40, 48, 3)) * 255).astype('uint8')).save(d / f'{i}.jpg')
    run = _train(tmp_path / 'run', '--model', 'vit_minimal_sym_6x1.in1k', '--dataset', str(tmp_path / 'tiny'),
                 '--recipe', 'imagenet', '--batch-size', '4', '--model-kwargs', 'depth=1', '--warmup-epochs', '0',
                 '--cache-dir', str(tmp_path / 'cache'))
    out = publish.export_run(run, tmp_path / 'repo', 'testuser/tiny-in1k')
    config = json.loads((out / 'config.json').read_text())
    assert config['pretrained_cfg']['input_size'] == [3, 224, 224]
    assert sorted(config['id2label'].values()) == ['cat', 'dog']
    card = ModelCard.load(out / 'README.md')
    assert 'trained on tiny' in card.text
    assert 'datasets' not in card.data.to_dict()  # an image folder, not a Hub dataset
    with pytest.raises(publish.PublishError, match='model overrides'):
        publish.export_run(run, tmp_path / 'repo2', 'testuser/tiny-in1k', ship_weights=tmp_path)


def test_shipping_weights_writes_the_named_folder_never_the_installed_package(mnist_run, tmp_path):
    from timm_minimal.models.vit_minimal import WEIGHTS_DIR
    before = {p.name: p.stat().st_mtime_ns for p in WEIGHTS_DIR.iterdir()}
    with pytest.raises(publish.PublishError, match='--ship-weights .*no such folder'):
        publish.export_run(mnist_run, tmp_path / 'out', 'x/y', ship_weights=tmp_path / 'missing')
    assert not (tmp_path / 'out').exists()
    weights = tmp_path / 'weights'
    weights.mkdir()
    publish.export_run(mnist_run, tmp_path / 'out', 'x/y', ship_weights=weights)
    assert [p.name for p in weights.iterdir()] == ['vit_minimal_sym_6x1.mnist.safetensors']
    assert {p.name: p.stat().st_mtime_ns for p in WEIGHTS_DIR.iterdir()} == before


def test_a_recipe_tag_names_the_card_and_the_shipped_file_and_must_be_of_the_runs_dataset(mnist_run, tmp_path,
                                                                                          monkeypatch):
    """--tag: the tag a run's weights ship under where it is not the run's own (``.mixup_cifar10``); only a tag of the
    run's dataset."""
    from timm_minimal.models import pretrained
    with pytest.raises(publish.PublishError, match="--tag mixup_cifar10: a run on .* ships under its dataset's tags"):
        publish.export_run(mnist_run, tmp_path / 'no', 'x/y', tag='mixup_cifar10')
    assert not (tmp_path / 'no').exists()
    monkeypatch.setitem(pretrained.RECIPE_TAGS, 'mnist_longer', 'mnist')  # an MNIST recipe tag, for this run
    weights = tmp_path / 'weights'
    weights.mkdir()
    out = publish.export_run(mnist_run, tmp_path / 'out', f'{pretrained.HUB_ORG}/vit_minimal_sym_6x1.mnist_longer',
                             ship_weights=weights, tag='mnist_longer')
    assert [p.name for p in weights.iterdir()] == ['vit_minimal_sym_6x1.mnist_longer.safetensors']
    assert "timm.create_model('vit_minimal_sym_6x1.mnist_longer', pretrained=True)" in (out / 'README.md').read_text()


def test_a_run_from_another_starting_point_ships_as_the_registered_architecture(mnist_dir, tmp_path):
    """``weight_init`` sets only where training starts (``.kd_cifar10`` starts from the mimetic initialisation): such
    a run ships under the architecture's tag, where a keyword that changes the architecture is refused."""
    run = _train(tmp_path / 'run', '--model', 'vit_minimal_sym_6x1.mnist', '--dataset', 'mnist', '--data-dir',
                 str(mnist_dir), '--train-subset', '128', '--eval-subset', '64', '--batch-size', '64',
                 '--model-kwargs', 'weight_init=mimetic')
    weights = tmp_path / 'weights'
    weights.mkdir()
    publish.export_run(run, tmp_path / 'out', 'x/y', ship_weights=weights)
    assert [p.name for p in weights.iterdir()] == ['vit_minimal_sym_6x1.mnist.safetensors']


def test_a_garbage_metrics_line_is_named(mnist_run, tmp_path, capsys):
    run = tmp_path / 'copy'
    shutil.copytree(mnist_run, run)
    with open(run / 'metrics.jsonl', 'a') as f:
        f.write('{"epoch": 2, "test_acc": \n')
    assert publish.main([str(run), '--repo-id', 'x/y', '--out', str(tmp_path / 'out')]) == 2
    err = capsys.readouterr().err
    assert 'metrics.jsonl line 2 is not a JSON record' in err and err.count('\n') == 1
    assert not (tmp_path / 'out').exists()


def test_a_full_disk_leaves_nothing_and_a_retry_works(mnist_run, tmp_path, small_disk, capsys):
    disk = small_disk(160)  # room for the config and the code, not for the weights
    out = disk / 'repo'
    assert publish.main([str(mnist_run), '--repo-id', 'x/y', '--out', str(out)]) == 1  # a failed write, as the trainer's
    err = capsys.readouterr().err
    assert 'no space left on the device' in err and err.count('\n') == 1 and 'Traceback' not in err
    assert list(disk.iterdir()) == []
    bigger = small_disk(4096)
    assert publish.main([str(mnist_run), '--repo-id', 'x/y', '--out', str(bigger / 'repo')]) == 0
    assert (bigger / 'repo' / 'model.safetensors').is_file()


def test_a_card_copy_to_a_folder_is_refused_before_anything_is_written(mnist_run, tmp_path, capsys):
    (tmp_path / 'cards').mkdir()
    rc = publish.main([str(mnist_run), '--repo-id', 'x/y', '--out', str(tmp_path / 'repo'),
                       '--card-copy', str(tmp_path / 'cards')])
    err = capsys.readouterr().err
    assert rc == 2 and err.count('\n') == 1 and '--card-copy' in err and 'is a folder' in err
    assert not (tmp_path / 'repo').exists() and list((tmp_path / 'cards').iterdir()) == []


def test_a_card_copy_under_a_file_is_refused_before_anything_is_written(mnist_run, tmp_path, capsys):
    (tmp_path / 'notes').write_text('mine')
    rc = publish.main([str(mnist_run), '--repo-id', 'me/x', '--output', str(tmp_path / 'hub'),
                       '--card-copy', str(tmp_path / 'notes' / 'card.md')])
    err = capsys.readouterr().err
    assert rc == 2 and f'{tmp_path / "notes"} is a file, not a folder' in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / 'hub').exists() and (tmp_path / 'notes').read_text() == 'mine'


def test_a_push_to_a_hub_that_does_not_answer_is_one_line(mnist_run, tmp_path, monkeypatch, capsys):
    """The Hub server is started, the client pointed at it, then the server stopped: its port refuses."""
    from hub_server import HubServer, configure_client
    with HubServer(tmp_path / 'gone') as server:
        configure_client(server, tmp_path / 'hf-home', monkeypatch)
    rc = publish.main([str(mnist_run), '--repo-id', 'testuser/gone', '--out', str(tmp_path / 'repo'), '--push'])
    err = capsys.readouterr().err
    assert rc == 1 and err.count('\n') == 1 and 'Traceback' not in err, err
    assert 'the push of' in err and server.url in err and (tmp_path / 'repo' / 'README.md').is_file()


def test_every_file_of_the_repository_folder_has_the_usual_permissions(mnist_run, tmp_path):
    import os
    publish.export_run(mnist_run, tmp_path / 'repo', 'x/y')
    mask = os.umask(0o022)
    os.umask(mask)
    modes = {p.name: p.stat().st_mode & 0o777 for p in (tmp_path / 'repo').iterdir()}
    assert modes and all(m == 0o666 & ~mask for m in modes.values()), modes
    assert (tmp_path / 'repo').stat().st_mode & 0o777 == 0o777 & ~mask


def test_after_a_failed_push_the_same_command_pushes_the_written_folder(mnist_run, tmp_path, hub_server, monkeypatch,
                                                                         capsys):
    """The push fails (the Hub does not answer): the folder stays written and the message says the same command
    tries again; it does, pushing the folder as it is instead of refusing a folder that is not empty."""
    out, repo = tmp_path / 'repo', 'testuser/retry'
    argv = [str(mnist_run), '--repo-id', repo, '--output', str(out), '--push']
    real_push = publish.push_folder
    monkeypatch.setattr(publish, 'push_folder', lambda *a, **k: (_ for _ in ()).throw(ConnectionError('no answer')))
    assert publish.main(argv) == 1
    err = capsys.readouterr().err
    assert 'the folder is written, and the same command tries the push again' in err
    monkeypatch.setattr(publish, 'push_folder', real_push)
    assert publish.main(argv) == 0
    assert 'pushing it as it is' in capsys.readouterr().out
    assert 'model.safetensors' in set(HfApi().list_repo_files(repo))
    (out / 'model.safetensors').write_bytes(b'not the run\'s weights')  # another folder: refused, not overwritten
    assert publish.main(argv) == 2


@pytest.mark.parametrize('edit, says', [
    (lambda record: '[' * 100_000 + ']' * 100_000, 'is not valid JSON (RecursionError'),
    (lambda record: json.dumps(dict(record, format='timm-minimal-output/1')),
     "is a record of another format ('timm-minimal-output/1'), not a run record (timm-minimal-run/1)"),
    (lambda record: json.dumps(dict(record, command=record['command'] + " --note 'open")),
     "the run's command is not a shell line (No closing quotation)"),
], ids=['nested', 'another format', 'an open quote'])
def test_a_run_record_that_is_not_one_is_refused_in_one_line(mnist_run, tmp_path, capsys, edit, says):
    run = tmp_path / 'run'
    shutil.copytree(mnist_run, run)
    (run / 'run.json').write_text(edit(json.loads((run / 'run.json').read_text())))
    assert publish.main([str(run), '--repo-id', 'x/y', '--out', str(tmp_path / 'out')]) == 2
    err = capsys.readouterr().err.strip()
    assert f'{run} cannot be read: ' in err and says in err and len(err.splitlines()) == 1, err
    assert not (tmp_path / 'out').exists()
