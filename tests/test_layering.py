"""The package's layers, models <- plots <- training <- tools: no import runs back up, and models/ imports nothing of
the package outside itself (remote code copies that folder alone)."""
import ast
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / 'timm_minimal'
# what each layer may not import: its name inside the package
FORBIDDEN = {'models': ('training', 'tools', 'cli', 'examples', 'transformers_registration'),
             'plots': ('training', 'tools', 'cli', 'examples', 'transformers_registration'),
             'training': ('tools',)}


def imported_modules(path: Path):
    """Each import of a module as a dotted name inside the package (``training.data``), with its line."""
    package = path.relative_to(PACKAGE.parent).with_suffix('').parts[:-1]  # ('timm_minimal', 'training')
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[:len(package) - node.level + 1]
                names = [(base + tuple((node.module or '').split('.')) if node.module else base)]
                if not node.module:  # from . import x: x may be a module
                    names = [base + (alias.name,) for alias in node.names]
            else:
                names = [tuple((node.module or '').split('.'))]
        elif isinstance(node, ast.Import):
            names = [tuple(alias.name.split('.')) for alias in node.names]
        else:
            continue
        for name in names:
            if name and name[0] == 'timm_minimal':
                yield '.'.join(name[1:]), node.lineno


def violations(layer: str):
    for path in sorted((PACKAGE / layer).rglob('*.py')):
        for module, line in imported_modules(path):
            if module.split('.')[0] in FORBIDDEN[layer] or (layer == 'models' and not module.startswith('models')):
                yield f'{path.relative_to(PACKAGE.parent)}:{line} imports timm_minimal.{module}'


@pytest.mark.parametrize('layer', sorted(FORBIDDEN))
def test_no_import_runs_back_up(layer):
    assert list(violations(layer)) == []


def test_the_check_sees_an_import_that_runs_back_up(tmp_path, monkeypatch):
    fake = tmp_path / 'timm_minimal'
    (fake / 'training').mkdir(parents=True)
    (fake / 'models').mkdir()
    (fake / 'training' / 'bad.py').write_text('from ..tools.app import build_app\nfrom . import data\n')
    (fake / 'models' / 'bad.py').write_text('import timm_minimal.training.train\nfrom ..cli import command\n'
                                            'from .layers import Block\n')
    monkeypatch.setattr(__import__(__name__), 'PACKAGE', fake)
    assert list(violations('training')) == ['timm_minimal/training/bad.py:1 imports timm_minimal.tools.app']
    assert list(violations('models')) == ['timm_minimal/models/bad.py:1 imports timm_minimal.training.train',
                                          'timm_minimal/models/bad.py:2 imports timm_minimal.cli']


def test_the_machine_facts_import_nothing_of_the_package():
    """machine.py is read by the trainer and by tools that start without it (the zoo's cache folder)."""
    assert list(imported_modules(PACKAGE / 'machine.py')) == []


# the run folder's on-disk format: what a tool that reads or writes run folders may enter of training/
RUN_FOLDER_FORMAT = {'training', 'training.run', 'training.run.checkpoint', 'training.run.files',
                     'training.run.folder', 'training.run.record'}


@pytest.mark.slow
def test_publishing_the_zoo_enters_only_the_run_folder_format_of_training(tmp_path):
    """``timm-minimal-publish --zoo`` finds its cache folder in machine.py: no parser, option or data module of the
    trainer is imported on the way."""
    script = ('import sys\nfrom timm_minimal.tools.hub import publish\n'
              f"rc = publish.main(['--zoo', '--output', {str(tmp_path / 'zoo')!r}, '--only', "
              f"'vit_minimal_sym_6x4.mnist', '--cards', {str(PACKAGE.parent / 'model_cards')!r}])\n"
              "print(rc, *sorted(m[13:] for m in sys.modules if m.startswith('timm_minimal.training')))\n")
    out = subprocess.run([sys.executable, '-c', script], capture_output=True, text=True, check=True).stdout
    rc, *modules = out.splitlines()[-1].split()
    assert rc == '0' and (tmp_path / 'zoo' / 'vit_minimal_sym_6x4.mnist' / 'model.safetensors').is_file()
    assert 'training.run.record' in modules and set(modules) <= RUN_FOLDER_FORMAT, modules
