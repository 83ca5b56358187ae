"""What a user loads is what its card measured: each card records the SHA-256 of its weights, the package's index
repeats it, ``timm-minimal-publish --zoo`` refuses other weights (and every other flaw it can see) before it writes
anything, ``timm.create_model`` refuses a changed shipped file, and ``pretrained_folder`` checks its cached folder on
every call."""
import shutil

import pytest
import timm
import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file
from timm.models import get_pretrained_cfg

import timm_minimal
from timm_minimal.models import pretrained
from timm_minimal.models.pretrained import WEIGHTS_DIR, WEIGHTS_INDEX, file_sha256, shipped_digests
from timm_minimal.tools.hub.cards import card_weights_sha256, weights_index
from timm_minimal.tools.hub.zoo import pretrained_folder, shipped_names

from test_zoo import CARDS, _zoo

NAME = 'vit_minimal_sym_6x4.mnist'


def test_each_card_records_the_sha256_of_the_weights_that_ship_and_the_index_repeats_it():
    names = shipped_names()
    assert len(shipped_digests()) == len(names) == 37
    for name in names:
        file = WEIGHTS_DIR / f'{name}.safetensors'
        recorded = card_weights_sha256((CARDS / f'{name}.md').read_text(encoding='utf-8'), name)
        assert recorded == shipped_digests()[file.name] == file_sha256(file), name
    assert WEIGHTS_INDEX.read_text() == weights_index(CARDS)  # python scripts/refresh_cards.py writes it


def _changed_weights(tmp_path, name=NAME, value=0.5):
    """A copy of a shipped weights file with one tensor changed, its metadata kept."""
    source = WEIGHTS_DIR / f'{name}.safetensors'
    with safe_open(str(source), 'pt') as f:
        metadata = f.metadata()
    tensors = load_file(str(source))
    tensors['head.bias'] = torch.full_like(tensors['head.bias'], value)
    out = tmp_path / 'changed' / source.name
    out.parent.mkdir(exist_ok=True)
    save_file(tensors, str(out), metadata=metadata)
    return out


def _ship(monkeypatch, file):
    """As if the package's weights file of NAME were ``file`` (timm's pretrained cfgs are copies: each call's is)."""
    def patched(name, *args, **kwargs):
        cfg = get_pretrained_cfg(name, *args, **kwargs)
        if name == NAME:
            cfg.file = str(file)
        return cfg
    monkeypatch.setattr(timm.models, 'get_pretrained_cfg', patched)


def test_publish_refuses_weights_its_card_did_not_measure_before_writing(tmp_path, capsys, monkeypatch):
    changed = _changed_weights(tmp_path)
    _ship(monkeypatch, changed)
    assert _zoo(tmp_path, '--only', 'vit_minimal_sym_6x*.mnist') == 2
    err = capsys.readouterr().err.strip()
    assert f'{changed}: its SHA-256 is {file_sha256(changed)[:16]}..., but its card' in err, err
    assert 'these are not the weights the card describes; nothing was written' in err and len(err.splitlines()) == 1
    assert not (tmp_path / 'zoo').exists()


def _cards(tmp_path, **texts):
    """A cards folder with the sym_6x4 cards, some replaced by ``texts`` (bytes or str)."""
    cards = tmp_path / 'cards'
    cards.mkdir(exist_ok=True)
    for name in (NAME, 'vit_minimal_sym_6x4.cifar10', 'vit_minimal_sym_6x4.kd2_cifar10'):
        text = texts.get(name, (CARDS / f'{name}.md').read_text(encoding='utf-8'))
        (cards / f'{name}.md').write_bytes(text if isinstance(text, bytes) else text.encode())
    return cards


def _card():
    return (CARDS / f'{NAME}.md').read_text(encoding='utf-8')


@pytest.mark.parametrize('text, says', [
    (_card().replace('MNIST', 'MNIST \u00e9').encode('latin-1'), 'not a model card in UTF-8'),
    (_card().replace('library_name: transformers', 'library_name: [transformers'), 'with a readable front matter'),
    (_card().replace('library_name: transformers\n', ''), 'its front matter gives no library_name: transformers'),
    (_card().replace('SHA-256 `', 'SHA256 `'), 'records no SHA-256 of the weights it measured'),
], ids=['latin-1', 'broken yaml', 'no library', 'no digest'])
def test_publish_refuses_a_flawed_card_before_writing(tmp_path, capsys, text, says):
    cards = _cards(tmp_path, **{NAME: text})
    assert _zoo(tmp_path, '--cards', str(cards), '--only', 'vit_minimal_sym_6x4.*') == 2
    err = capsys.readouterr().err.strip()
    assert says in err and NAME in err and err.endswith('nothing was written') and len(err.splitlines()) == 1, err
    assert not (tmp_path / 'zoo').exists()


def test_publish_refuses_non_finite_weights_before_writing(tmp_path, capsys, monkeypatch):
    changed = _changed_weights(tmp_path, value=float('nan'))
    _ship(monkeypatch, changed)
    digest = file_sha256(changed)
    cards = _cards(tmp_path, **{NAME: _card().replace(file_sha256(WEIGHTS_DIR / changed.name), digest)})
    monkeypatch.setattr(pretrained, 'shipped_digests', lambda index=None: {changed.name: digest})
    assert _zoo(tmp_path, '--cards', str(cards), '--only', NAME) == 2
    err = capsys.readouterr().err.strip()
    assert 'non-finite values (NaN or inf) in head.bias' in err and err.endswith('nothing was written'), err


@pytest.mark.parametrize('make, argv, says', [
    (lambda out: out.write_text('a file'), [], 'exists and is not a folder; nothing was written'),
    (lambda out: (out / 'vit_minimal_sym_6x4.mnist').mkdir(parents=True)
     or (out / 'vit_minimal_sym_6x4.mnist' / 'notes.txt').write_text('mine'), [],
     'holds files this tool did not write (notes.txt)'),
    (lambda out: None, ['--namespace', 'bad//ns'], "--namespace 'bad//ns' makes no Hub repository id"),
], ids=['a file', 'a folder of the user', 'a bad namespace'])
def test_publish_refuses_the_output_and_namespace_up_front(tmp_path, capsys, make, argv, says):
    """A refusal on the last checkpoint leaves the first unwritten too."""
    make(tmp_path / 'zoo')
    before = sorted(p.name for p in (tmp_path / 'zoo').iterdir()) if (tmp_path / 'zoo').is_dir() else None
    assert _zoo(tmp_path, '--only', 'vit_minimal_sym_6x4.*', *argv) == 2
    err = capsys.readouterr().err.strip()
    assert says in err and len(err.splitlines()) == 1, err
    after = sorted(p.name for p in (tmp_path / 'zoo').iterdir()) if (tmp_path / 'zoo').is_dir() else None
    assert after == before


def test_timm_refuses_a_shipped_file_that_is_not_the_one_its_card_measured(monkeypatch):
    digests = dict(shipped_digests(), **{f'{NAME}.safetensors': '0' * 64})
    monkeypatch.setattr(pretrained, 'shipped_digests', lambda index=None: digests)
    with pytest.raises(ValueError, match=f'{NAME}.safetensors has the SHA-256 .*, but its model card measured 0000'):
        timm.create_model(NAME, pretrained=True)


def test_pretrained_folder_checks_its_weights_on_every_call(tmp_path, monkeypatch):
    monkeypatch.setenv('TIMM_MINIMAL_CACHE', str(tmp_path / 'cache'))
    folder = pretrained_folder(NAME)
    weights = folder / 'model.safetensors'
    assert file_sha256(weights) == shipped_digests()[f'{NAME}.safetensors']
    weights.unlink()  # a file gone: written again
    assert pretrained_folder(NAME) == folder and file_sha256(weights) == shipped_digests()[f'{NAME}.safetensors']
    for swap in (lambda: shutil.copyfile(WEIGHTS_DIR / 'vit_minimal_sym_6x1.mnist.safetensors', weights),  # same shapes
                 lambda: weights.write_bytes(weights.read_bytes()[:1000])):  # truncated
        swap()
        changed = weights.read_bytes()
        with pytest.raises(ValueError, match=r'the cached folder .* does not hold the shipped weights \(SHA-256 .*\) '
                                             r'complete, and files were changed or added there after it was written '
                                             r'\(model.safetensors\); remove the folder'):
            pretrained_folder(NAME)
        assert weights.read_bytes() == changed  # left as it was
    shutil.rmtree(folder)
    assert timm_minimal.pretrained_folder(NAME) == folder and weights.is_file()


def test_a_rerun_into_a_relative_output_replaces_what_the_zoo_wrote(tmp_path, monkeypatch, capsys):
    """The up-front check finds the zoo's own record of a folder named relatively (it is kept under the resolved
    path): a second run replaces the folder, as the first run's record allows."""
    from timm_minimal.tools.hub import publish
    monkeypatch.chdir(tmp_path)
    argv = ['--zoo', '--output', 'rel', '--only', NAME, '--cards', str(CARDS)]
    assert publish.main(argv) == 0 and publish.main(argv) == 0, capsys.readouterr().err
    assert (tmp_path / 'rel' / NAME / 'model.safetensors').is_file()
