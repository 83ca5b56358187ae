"""A tool writes to a fresh folder unless told otherwise: no default output of any tool is a file the repository
tracks, so a documented command run in a clone leaves ``git status`` clean. Regenerating a committed report is
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


def test_the_report_folders_are_ignored():
    ignored = (ROOT / '.gitignore').read_text().split()
    for folder in ('/runs/', '/reports/', '/export/', '/hub/'):
        assert folder in ignored
