"""The zoo on the Hub: ``timm-minimal-publish --zoo`` writes one complete repository folder per shipped checkpoint
and pushes them; the snippet the Hub shows for the card runs where this package cannot be imported; transformers
loads a shipped checkpoint offline by its name."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import timm
import torch
from huggingface_hub import HfApi, ModelCard
from PIL import Image

import timm_minimal
from timm_minimal.models.pretrained import HUB_ORG
from timm_minimal.tools.hub import publish
from timm_minimal.tools.hub.cards import CARD_LIBRARY, CARD_TAGS, card_usage, refreshed_card
from timm_minimal.tools.hub.zoo import hub_snippets, pretrained_folder, shipped_names

ROOT = Path(__file__).resolve().parents[1]
CARDS = ROOT / 'model_cards'
SAMPLE = ('vit_minimal_sym_6x4.mnist', 'vit_minimal_sym_6x4.kd2_cifar10')  # one and three channels, two tags
REPO_FILES = {'model.safetensors', 'config.json', 'preprocessor_config.json', 'README.md', 'LICENSE',
              'modeling_vit_minimal.py', 'configuration_vit_minimal.py', 'image_processing_vit_minimal.py'}


def _zoo(tmp_path, *argv, cwd=ROOT):
    """``timm-minimal-publish --zoo`` in-process, from the checkout (its model_cards/)."""
    here = os.getcwd()
    os.chdir(cwd)
    try:
        return publish.main(['--zoo', '--output', str(tmp_path / 'zoo'), *argv])
    finally:
        os.chdir(here)


def _image(name):
    return Image.open(timm_minimal.example_image('mnist_test0_digit7.png' if name.endswith('.mnist')
                                                 else 'cifar10_test_horse_0000.png'))


def test_every_shipped_checkpoint_has_weights_a_card_and_its_hub_id():
    names = shipped_names()
    assert len(names) == 37
    assert {p.name[:-3] for p in CARDS.glob('vit_minimal_*.md')} == set(names)
    for name in names:
        assert timm.models.get_pretrained_cfg(name).hf_hub_id == f'{HUB_ORG}/{name}'


def test_the_zoo_writes_a_complete_repository_folder_per_checkpoint(tmp_path, capsys):
    assert _zoo(tmp_path, '--only', 'vit_minimal_sym_6x4.*') == 0
    out = capsys.readouterr().out
    written = sorted(p.name for p in (tmp_path / 'zoo').iterdir())
    assert written == ['vit_minimal_sym_6x4.cifar10', 'vit_minimal_sym_6x4.kd2_cifar10', 'vit_minimal_sym_6x4.mnist']
    assert out.count('wrote ') == 3 and '3 repository folders' in out
    for name in written:
        folder = tmp_path / 'zoo' / name
        assert REPO_FILES <= {p.name for p in folder.iterdir()}
        assert (folder / 'README.md').read_text() == (CARDS / f'{name}.md').read_text()
        assert (folder / 'LICENSE').read_text() == (ROOT / 'LICENSE').read_text()
        config = json.loads((folder / 'config.json').read_text())
        assert config['architecture'] == name.split('.')[0] and 'AutoModelForImageClassification' in config['auto_map']
        x = torch.randn(2, *timm.create_model(name).pretrained_cfg['input_size'])
        with torch.no_grad():
            ref = timm.create_model(name, pretrained=True).eval()(x)
            got = timm.create_model(f'local-dir:{folder}', pretrained=True).eval()(x)
        assert torch.equal(ref, got)
    before = {p.name: p.read_bytes() for p in (tmp_path / 'zoo' / written[0]).iterdir()}
    assert _zoo(tmp_path, '--only', 'vit_minimal_sym_6x4.*') == 0  # a rerun replaces its own folders, the same bytes
    assert {p.name: p.read_bytes() for p in (tmp_path / 'zoo' / written[0]).iterdir()} == before


@pytest.mark.slow  # several seconds: the whole suite runs it
def test_the_whole_zoo_is_37_repository_folders_offline(tmp_path, monkeypatch):
    monkeypatch.setenv('HF_HUB_OFFLINE', '1')
    assert _zoo(tmp_path) == 0
    assert sorted(p.name for p in (tmp_path / 'zoo').iterdir()) == shipped_names()


def test_a_checkpoint_without_a_card_or_weights_is_refused_by_name_before_anything_is_written(tmp_path, capsys):
    cards = tmp_path / 'cards'
    cards.mkdir()
    for name in SAMPLE:
        (cards / f'{name}.md').write_text((CARDS / f'{name}.md').read_text())
    (cards / 'vit_minimal_chol_6x1.mnist.md').write_text('---\nlicense: apache-2.0\n---\n# no weights\n')
    assert _zoo(tmp_path, '--cards', str(cards), '--only', 'vit_minimal_sym_6x4.*', 'vit_minimal_chol_*') == 2
    err = capsys.readouterr().err
    assert 'no card in' in err and 'vit_minimal_sym_6x4.cifar10' in err  # the one card left out
    assert 'no weights in the package for vit_minimal_chol_6x1.mnist' in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / 'zoo').exists()


@pytest.mark.parametrize('argv, says', [
    (['--only', 'vit_minimal_nope*'], '--only vit_minimal_nope*: matches no checkpoint'),
    (['runs/x'], '--zoo publishes the checkpoints that ship with the package; it takes no run folder (runs/x)'),
    (['--repo-id', 'a/b'], '--repo-id goes with a run folder'),
    (['--checkpoint', 'best', '--note', 'x'], '--checkpoint, --note go with a run folder'),
])
def test_zoo_misuse_is_one_line_and_exit_2(tmp_path, capsys, argv, says):
    assert _zoo(tmp_path, *argv) == 2
    err = capsys.readouterr().err.strip()
    assert says in err and len(err.splitlines()) == 1 and not (tmp_path / 'zoo').exists()


def test_zoo_needs_an_output_and_a_run_needs_a_repo_id(capsys):
    assert publish.main(['--zoo']) == 2
    assert '--zoo needs --output DIR' in capsys.readouterr().err
    assert publish.main(['runs/x']) == 2
    assert '--repo-id is required with a run folder' in capsys.readouterr().err
    assert publish.main([]) == 2
    assert 'or pass --zoo' in capsys.readouterr().err


def test_a_folder_the_zoo_did_not_write_is_left_as_it_was(tmp_path, capsys):
    mine = tmp_path / 'zoo' / 'vit_minimal_sym_6x4.mnist'
    mine.mkdir(parents=True)
    (mine / 'notes.txt').write_text('mine')
    assert _zoo(tmp_path, '--only', 'vit_minimal_sym_6x4.mnist') == 2
    assert 'holds files this tool did not write (notes.txt)' in capsys.readouterr().err
    assert [p.name for p in mine.iterdir()] == ['notes.txt']


def test_push_then_load_in_timm_and_transformers_then_push_again_uploads_nothing(tmp_path, hub_server, capsys):
    from transformers import AutoModelForImageClassification
    assert _zoo(tmp_path, '--only', SAMPLE[0], '--push', '--namespace', 'testorg') == 0  # a run cut short
    assert _zoo(tmp_path, '--only', *SAMPLE, '--push', '--namespace', 'testorg') == 0  # resumes
    out = capsys.readouterr().out
    assert out.count(f'pushed testorg/{SAMPLE[0]}') == 1 and f'unchanged testorg/{SAMPLE[0]}' in out
    assert f'pushed testorg/{SAMPLE[1]} (all files)' in out and '1 created, 0 updated, 1 unchanged' in out
    for name in SAMPLE:
        repo = f'testorg/{name}'
        x = torch.randn(2, *timm.create_model(name).pretrained_cfg['input_size'])
        with torch.no_grad():
            ref = timm.create_model(name, pretrained=True).eval()(x)
            via_timm = timm.create_model(f'hf-hub:{repo}', pretrained=True).eval()(x)
            via_hf = AutoModelForImageClassification.from_pretrained(repo).eval()(pixel_values=x).logits
        torch.testing.assert_close(via_timm, ref, rtol=0, atol=0)
        torch.testing.assert_close(via_hf, ref, rtol=1e-6, atol=1e-6)
        card = ModelCard.load(repo)
        assert card.data.library_name == CARD_LIBRARY and 'custom_code' in card.data.tags
    commits = sum(' /api/models/testorg/' in r and '/commit/' in r for r in hub_server.requests)
    assert _zoo(tmp_path, '--only', *SAMPLE, '--push', '--namespace', 'testorg') == 0
    out = capsys.readouterr().out
    assert 'pushed' not in out and '0 created, 0 updated, 2 unchanged' in out
    assert sum(' /api/models/testorg/' in r and '/commit/' in r for r in hub_server.requests) == commits


# Runs the Hub's snippets of a repository where timm_minimal cannot be imported, on one local image, and saves what
# they give: the pipeline's labels, the processor's pixels and the model's logits.
_WITHOUT_PACKAGE = '''
import sys
sys.modules['timm_minimal'] = None  # as if the package were not installed: every import of it fails
sys.modules['timm_minimal_scripts'] = None
try:
    import timm_minimal
except ImportError:
    pass
else:
    raise SystemExit('timm_minimal is importable')
import timm, torch
from PIL import Image
image_path, out_path, repo = sys.argv[1:4]
try:
    timm.create_model('hf_hub:' + repo, pretrained=True)
except RuntimeError as e:
    timm_error = str(e)
else:
    timm_error = None
'''


@pytest.mark.slow  # several seconds: the whole suite runs it
def test_the_hubs_snippet_runs_without_the_package_and_gives_its_logits(tmp_path, hub_server):
    assert _zoo(tmp_path, '--only', *SAMPLE, '--push', '--namespace', 'testorg') == 0
    api = HfApi()
    for name in SAMPLE:
        repo = f'testorg/{name}'
        info = api.model_info(repo)
        config = json.loads(Path(api.hf_hub_download(repo, 'config.json')).read_text())
        pipe, auto = hub_snippets(repo, info.library_name, info.tags, info.pipeline_tag,
                                  [s.rfilename for s in info.siblings], config)
        assert 'trust_remote_code=True' in pipe and 'trust_remote_code=True' in auto
        image = tmp_path / f'{name}.png'
        _image(name).save(image)
        script = _WITHOUT_PACKAGE + '\n'.join([
            pipe.replace('"https://huggingface.co/datasets/huggingface/documentation-images/resolve/main/hub/'
                         'parrots.png"', 'image_path').replace('\npipe(image_path)', '\npredictions = pipe(image_path)'),
            auto,
            "inputs = processor(Image.open(image_path), return_tensors='pt')",
            'with torch.no_grad():\n    logits = model(**inputs).logits',
            'torch.save(dict(predictions=predictions, pixel_values=inputs["pixel_values"], logits=logits, '
            'timm_error=timm_error), out_path)',
        ])
        (tmp_path / 'snippet.py').write_text(script)
        proc = subprocess.run([sys.executable, str(tmp_path / 'snippet.py'), str(image), str(tmp_path / 'out.pt'), repo],
                              cwd=tmp_path, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr[-3000:]
        got = torch.load(tmp_path / 'out.pt')
        assert 'Unknown model' in got['timm_error']  # why the card names transformers as its library

        model = timm.create_model(name, pretrained=True).eval()
        transform = timm.data.create_transform(**timm.data.resolve_data_config({}, model=model))
        pixels = transform(_image(name)).unsqueeze(0)
        torch.testing.assert_close(got['pixel_values'], pixels, rtol=0, atol=1e-6)
        with torch.no_grad():
            torch.testing.assert_close(got['logits'], model(pixels), rtol=1e-5, atol=1e-5)
        labels = model.pretrained_cfg['label_names']
        assert got['predictions'][0]['label'] == labels[int(model(pixels).argmax())]


def test_transformers_loads_a_shipped_checkpoint_offline_by_its_name(monkeypatch):
    from transformers import AutoImageProcessor, AutoModelForImageClassification, pipeline
    monkeypatch.setenv('HF_HUB_OFFLINE', '1')
    name = SAMPLE[1]
    folder = timm_minimal.pretrained_folder(name)
    assert pretrained_folder(name) == folder and not [p for p in folder.iterdir() if p.name.startswith('.')]
    model = AutoModelForImageClassification.from_pretrained(folder).eval()
    processor = AutoImageProcessor.from_pretrained(folder)
    ref = timm.create_model(name, pretrained=True).eval()
    inputs = processor(_image(name), return_tensors='pt')
    with torch.no_grad():
        torch.testing.assert_close(model(**inputs).logits, ref(inputs['pixel_values']), rtol=1e-6, atol=1e-6)
    assert pipeline('image-classification', model=str(folder))(_image(name))[0]['label'] == 'horse'
    with pytest.raises(ValueError, match="no shipped checkpoint is named 'vit_minimal_sym_6x4.in1k'"):
        pretrained_folder('vit_minimal_sym_6x4.in1k')


@pytest.mark.parametrize('name', shipped_names())
def test_each_shipped_card_has_the_templates_library_tags_and_usage(name):
    text = (CARDS / f'{name}.md').read_text()
    assert refreshed_card(text, f'{HUB_ORG}/{name}', name) == text  # python scripts/refresh_cards.py updates them
    card = ModelCard(text)
    assert card.data.library_name == CARD_LIBRARY and set(CARD_TAGS) <= set(card.data.tags)
    assert card_usage(f'{HUB_ORG}/{name}', name) in text and 'revision=' in text and 'import timm_minimal' in text


def test_the_readmes_which_model_table_is_read_from_the_cards():
    """Per dataset the most accurate checkpoint, the smallest within a point of it and the paper's flagship, and the
    architectures without weights (``python scripts/refresh_cards.py`` rewrites it)."""
    from timm_minimal.tools.hub.cards import readme_with_which_model, which_model
    readme = (ROOT / 'README.md').read_text()
    assert readme_with_which_model(readme, CARDS) == readme
    table = which_model(CARDS)
    assert '| MNIST | [`vit_minimal_std_mlp_6x4.mnist`]' in table  # 99.52%, the most accurate card
    assert '[`vit_minimal_sym_6x4.mnist`](model_cards/vit_minimal_sym_6x4.mnist.md): 99.21%, 70,930 parameters |' in table
    assert '14 of the 28 architectures ship without weights' in table and '`vit_minimal_chol_6x1`' in table
    # the zoo's table, every number from a card (the paper's column from its tables): no hand-typed row
    from timm_minimal.tools.hub.cards import zoo_table
    rows = zoo_table(CARDS).splitlines()[2:]
    assert len(rows) == len(list(CARDS.glob('vit_minimal_*.md'))) == 37
    assert '(model_cards/vit_minimal_sym_6x4.mnist.md) | MNIST | 70,930 | 200 | H100 | 99.21 | 98.24 |' in rows[-1]
    assert rows[0].endswith('| CIFAR-10 | 70,510 | 300 | H100 | 65.82 | - |')


@pytest.mark.slow
def test_the_whole_zoo_pushes_and_a_second_push_uploads_nothing(tmp_path, hub_server, capsys):
    """What the organisation's token holder runs, against the test server: every shipped checkpoint into its own
    repository, each loadable in timm; then the same command again, which commits nothing."""
    import time
    start = time.perf_counter()
    assert _zoo(tmp_path, '--push', '--namespace', 'testorg') == 0
    first = time.perf_counter() - start
    out = capsys.readouterr().out
    names = shipped_names()
    assert f'{len(names)} created, 0 updated, 0 unchanged' in out
    for name in names:
        assert 'model.safetensors' in HfApi().list_repo_files(f'testorg/{name}')
    for name in names[::15]:
        x = torch.randn(1, *timm.create_model(name).pretrained_cfg['input_size'])
        with torch.no_grad():
            assert torch.equal(timm.create_model(f'hf-hub:testorg/{name}', pretrained=True).eval()(x),
                               timm.create_model(name, pretrained=True).eval()(x))
    commits = sum('/commit/' in r for r in hub_server.requests)
    start = time.perf_counter()
    assert _zoo(tmp_path, '--push', '--namespace', 'testorg') == 0
    second = time.perf_counter() - start
    assert f'0 created, 0 updated, {len(names)} unchanged' in capsys.readouterr().out
    assert sum('/commit/' in r for r in hub_server.requests) == commits == len(names)
    print(f'\nthe zoo: {len(names)} repositories pushed in {first:.1f} s (written and checked first); '
          f'the second run pushed nothing in {second:.1f} s')
