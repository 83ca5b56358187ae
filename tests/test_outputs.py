"""A tool writes to a fresh folder unless told otherwise: no default output of any tool is a file the repository
tracks, and the defaults and the documented outputs lie in ignored folders (``runs/``, ``data/``, ...), so a
documented command run in a clone leaves ``git status`` clean, untracked files included. Regenerating a committed report is
done by naming it."""
import subprocess
from pathlib import Path

import pytest

from test_values import PARSER_IDS, PARSERS, _parser

ROOT = Path(__file__).resolve().parents[1]
OUTPUT_DESTS = ('output', 'json', 'plot', 'plots_dir', 'out_md', 'out_json')


def _tracked():
    r = subprocess.run(['git', 'ls-files'], cwd=ROOT, capture_output=True, text=True)
    if r.returncode != 0 or not r.stdout:
        pytest.skip(f'not a git checkout ({r.stderr.strip() or "no files listed"}): nothing to compare with')
    files = {Path(line) for line in r.stdout.splitlines()}
    return files, {parent for f in files for parent in f.parents}


@pytest.mark.parametrize('module, builder, args', PARSERS, ids=PARSER_IDS)
def test_no_default_output_is_a_tracked_file(module, builder, args):
    files, folders = _tracked()
    for action in _parser(module, builder, args)._actions:
        if action.dest not in OUTPUT_DESTS or not isinstance(action.default, str) or not action.default:
            continue
        path = Path(action.default)
        assert path not in files, f'{module}: --{action.dest} writes the tracked {path} by default'
        assert path not in folders or path == Path('.'), f'{module}: --{action.dest} writes into the tracked {path}/'
        ignored = {line.strip('/') for line in (ROOT / '.gitignore').read_text().split() if line.startswith('/')}
        assert path.parts[0] in ignored, f'{module}: --{action.dest} writes {path} by default, outside the ignored folders'


def test_the_report_folders_are_ignored():
    ignored = (ROOT / '.gitignore').read_text().split()
    for folder in ('/runs/', '/data/', '/reports/', '/export/', '/hub/'):
        assert folder in ignored


# The documented commands that finish in a minute on a CPU from a clone alone (a trainer's at one epoch); the others
# train for hours, serve, upload or read data a clone lacks, and their outputs are checked above, through their
# parsers' defaults.
QUICK_PAGES_COMMANDS = ('--dataset mnist-sample', 'timm-minimal-attention', 'timm-minimal-export --model '
                        'vit_minimal_sym_6x4.mnist ')


@pytest.mark.slow
def test_the_quick_documented_commands_leave_a_clean_clone_clean(tmp_path):
    from test_docs import commands
    files, _ = _tracked()
    clone = tmp_path / 'clone'
    subprocess.run(['git', 'clone', '-q', str(ROOT), str(clone)], check=True)
    ran = []
    for page, words in commands():
        line = ' '.join(words) + ' '
        if not words[0].startswith('timm-minimal-') or not any(key in line for key in QUICK_PAGES_COMMANDS):
            continue
        if words[0] == 'timm-minimal-train' and '--epochs' not in words:
            words = [*words, '--epochs', '1']  # where a run writes does not depend on its budget (10 epochs: 2 min)
        r = subprocess.run(words, cwd=clone, capture_output=True, text=True, timeout=600)
        assert r.returncode == 0, f'{page.name}: {line}\n{r.stderr[-2000:]}'
        ran.append(line)
    status = subprocess.run(['git', 'status', '--porcelain'], cwd=clone, capture_output=True, text=True,
                            check=True).stdout
    assert len(ran) >= 5, ran
    assert status == '', f'documented commands left files that git shows: {status}'
