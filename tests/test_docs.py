"""The README and the pages of docs/: their code runs as shown.

- Every Python block runs in a fresh interpreter in an empty folder, and prints no warning and no progress bar.
- Every shell command that calls a timm-minimal tool names only options that tool has (its --help lists them);
  the README's training command on the bundled sample runs as it is written. The other commands train for hours
  or on data a plain clone lacks; their options are what is checked here.
"""
import contextlib
import io
import re
import shlex
import subprocess
import sys
from importlib.metadata import entry_points
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / 'README.md'] + sorted((ROOT / 'docs').glob('*.md'))
FENCE = re.compile(r'^```(\w*)\n(.*?)^```', re.S | re.M)
TOOLS = {e.name: e for e in entry_points(group='console_scripts') if e.name.startswith('timm-minimal-')}


def blocks(language):
    return [(page, code) for page in PAGES for lang, code in FENCE.findall(page.read_text()) if lang == language]


def commands():
    """Each shell command of the pages: continuation lines joined, comments dropped, split on && and ;."""
    for page, code in blocks('bash'):
        for line in code.replace('\\\n', ' ').splitlines():
            line = line.split(' #')[0].strip()
            for part in re.split(r'&&|;', line):
                if part.strip() and not part.strip().startswith('#'):
                    yield page, shlex.split(part)


def tool_of(words):
    """The timm-minimal tool a command runs and its arguments, or None for pip, pytest and the like."""
    if words[0] in TOOLS:
        return words[0], words[1:]
    if '-m' in words and words[words.index('-m') + 1] == 'timm_minimal.training.train':
        return 'timm-minimal-train', words[words.index('-m') + 2:]
    return None


def help_text(tool, args):
    """The tool's --help; for timm-minimal-benchmark, that of its subcommand (``training``, ...)."""
    from timm_minimal.tools.benchmark.cli import SUBCOMMANDS
    part = args[:1] if tool == 'timm-minimal-benchmark' and args[:1] and args[0] in SUBCOMMANDS else []
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        try:
            status = TOOLS[tool].load()(part + ['--help'])
        except SystemExit as stop:
            status = stop.code
    assert status in (0, None) and 'usage:' in out.getvalue(), (tool, part, status)
    return out.getvalue() + ' '.join(part)


def test_the_readme_is_short():
    assert len((ROOT / 'README.md').read_text().splitlines()) <= 250


def test_the_readme_counts_the_checkpoints_that_ship():
    import timm
    import timm_minimal  # noqa: F401
    from timm_minimal.models.datasets import DATASETS
    from timm_minimal.models.pretrained import tag_dataset
    tags = [name.split('.')[-1] for name in timm.list_pretrained('vit_minimal_*')]
    paper = sum(tag in DATASETS for tag in tags)
    assert {tag_dataset(tag) for tag in tags if tag not in DATASETS} == {'cifar10'}
    text = ' '.join((ROOT / 'README.md').read_text().split())
    assert f"{len(tags)} trained checkpoints ship with the package: {paper} on the paper's recipe" in text
    assert f'and {len(tags) - paper} CIFAR-10 ones on recipes beyond it' in text


def test_the_pages_have_code_and_the_readme_links_every_page():
    readme = (ROOT / 'README.md').read_text()
    for page in PAGES[1:]:
        assert f'](docs/{page.name})' in readme, page.name
    assert len(blocks('python')) >= 6 and len(list(commands())) >= 20


@pytest.mark.slow
@pytest.mark.parametrize('page,code', blocks('python'), ids=lambda v: v.name if isinstance(v, Path) else '')
def test_python_blocks_run_quietly(tmp_path, page, code):
    result = subprocess.run([sys.executable, '-c', code], cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, f'{page.name}:\n{code}\n{result.stderr[-3000:]}'
    assert 'Warning' not in result.stderr and '%|' not in result.stderr, f'{page.name}: noise\n{result.stderr}'
    for expected in re.findall(r'^print\(.*# (\S+)$', code, re.M):  # a print with its output in the comment
        assert expected in result.stdout.split(), (page.name, expected, result.stdout)


def test_shell_commands_name_only_options_their_tool_has():
    helps = {}
    for page, words in commands():
        found = tool_of(words)
        if found is None:
            continue
        tool, args = found
        if '--' in args:  # reproduce hands what follows -- to the trainer
            args, passed = args[:args.index('--')], args[args.index('--') + 1:]
            _check_options(helps, page, 'timm-minimal-train', passed)
        _check_options(helps, page, tool, args)
    with pytest.raises(AssertionError, match='has no --no-such-option'):  # the check itself can fail
        _check_options(helps, PAGES[0], 'timm-minimal-train', ['--epochs', '2', '--no-such-option'])


def _check_options(helps, page, tool, args):
    from timm_minimal.tools.benchmark.cli import SUBCOMMANDS
    key = (tool, tuple(args[:1]) if args[:1] and args[0] in SUBCOMMANDS else ())
    if key not in helps:
        helps[key] = help_text(tool, args)
    for option in (a.split('=')[0] for a in args if a.startswith('--')):
        assert re.search(rf'(?<![\w-]){re.escape(option)}(?![\w-])', helps[key]), f'{page.name}: {tool} has no {option}'


@pytest.mark.slow
def test_the_readme_trains_on_the_bundled_sample_as_written(tmp_path):
    line = next(words for page, words in commands() if page.name == 'README.md' and 'mnist-sample' in words)
    result = subprocess.run(line, cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    run = next((tmp_path / 'runs').glob('mnist-sample-*'))
    assert len((run / 'metrics.jsonl').read_text().splitlines()) == int(line[line.index('--epochs') + 1])


def test_the_layout_names_every_module():
    """docs/layout.md names each module of the package in a row of its folder (its own path, or its file name in a
    row that names the folder)."""
    package = ROOT / 'timm_minimal'
    rows = [line for line in (ROOT / 'docs' / 'layout.md').read_text().splitlines() if line.startswith('|')]
    modules = [p.relative_to(package) for p in sorted(package.rglob('*.py')) if p.name != '__init__.py']
    assert len(modules) > 80

    def named(rel):
        folder = rel.parent.as_posix()
        return any((f'`{rel.name}`' in row or rel.as_posix() in row)
                   and (folder == '.' or f'{folder}/' in row or f'`{rel.parent.name}/' in row) for row in rows)
    assert [str(rel) for rel in modules if not named(rel)] == []
