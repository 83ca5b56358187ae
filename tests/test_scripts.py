"""The console scripts answer --help before they import torch (timm_minimal_scripts): a help that costs seconds
of imports is the first thing a new user meets. Their timing: scripts/help_time.py."""
import os
import subprocess
import sys

import pytest
from importlib.metadata import distribution

import timm_minimal_scripts
from timm_minimal_scripts import SCRIPTS, asks_for_help

HEAVY = ('torch', 'timm', 'transformers', 'gradio', 'onnx', 'onnxruntime', 'matplotlib', 'numpy', 'PIL')

EVERY_HELP = f'''
import sys
import timm_minimal_scripts as scripts
for name in {list(SCRIPTS)!r}:
    try:
        scripts.run(name, ['--help'])
    except SystemExit as e:
        assert e.code == 0, (name, e.code)
    else:
        raise AssertionError(name + ' ran instead of printing its help')
print('HEAVY', [m for m in {HEAVY!r} if m in sys.modules])
import timm_minimal
print('LOADS', timm_minimal.VisionTransformerMinimal.__name__)
import timm
print('REGISTERED', timm.is_model('vit_minimal_sym_6x4'))
'''


def test_every_script_prints_its_help_without_torch_and_the_package_still_loads():
    """In the quick suite: a parser module that imports torch broke this rule twice while the test was slow."""
    r = subprocess.run([sys.executable, '-c', EVERY_HELP], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    for name in SCRIPTS:
        assert f'usage: {name}' in r.stdout, name
    assert 'HEAVY []' in r.stdout, r.stdout.splitlines()[-3:]
    assert 'LOADS VisionTransformerMinimal' in r.stdout and 'REGISTERED True' in r.stdout


def test_the_installed_scripts_are_these():
    """The installed console scripts (pyproject.toml's [project.scripts]) are the launcher's, one per tool."""
    scripts = {e.name: e.value for e in distribution('timm-minimal').entry_points if e.group == 'console_scripts'}
    assert set(scripts) == set(SCRIPTS)
    for name, target in scripts.items():
        module, function = target.split(':')
        assert module == 'timm_minimal_scripts', name
        assert getattr(timm_minimal_scripts, function).__name__ == name.replace('timm-minimal-', ''), name


def test_help_is_asked_for_only_before_the_double_dash():
    assert asks_for_help(['--model', 'x', '-h']) and asks_for_help(['--help'])
    assert not asks_for_help(['--', '--help']) and not asks_for_help(['--model', 'x'])


def test_a_command_that_is_not_help_runs_the_tool(capsys):
    assert timm_minimal_scripts.run('timm-minimal-evaluate', ['--model', 'vit_minimal_nope']) == 2
    assert 'cannot load vit_minimal_nope' in capsys.readouterr().err


@pytest.mark.parametrize('words', [['training', '--help'], ['deployment', '-h'], ['cpu-modes', '--help'],
                                   ['--training', '--help']])
def test_a_benchmark_subcommand_prints_its_own_help(words, capsys):
    """timm-minimal-benchmark's subcommands: one parser names them, each module parses its own words and prints its
    own help (the earlier --training flag still names its subcommand, with a note)."""
    try:
        status = timm_minimal_scripts.run('timm-minimal-benchmark', words)
    except SystemExit as e:  # argparse's help exits; a module that returns its parser's status returns it
        status = e.code
    assert status == 0
    name = words[0].lstrip('-')
    captured = capsys.readouterr()
    assert f'usage: timm-minimal-benchmark {name}' in captured.out
    assert ('is now the subcommand' in captured.err) == words[0].startswith('--')


def test_the_benchmark_parser_lists_its_subcommands_and_they_fail_through_the_layer(capsys):
    from timm_minimal.tools.benchmark import cli
    with pytest.raises(SystemExit):
        cli.build_parser().parse_args(['--help'])
    out = capsys.readouterr().out
    assert all(name in out for name in cli.SUBCOMMANDS)
    assert cli.subcommand(['--models', 'x']) == ('suite', ['--models', 'x'], None)
    assert cli.subcommand(['suite', '--models', 'x']) == ('suite', ['--models', 'x'], None)
    assert cli.hands_over(['suite', '--help']) and not cli.hands_over(['--models', 'x', '--help'])
    assert cli.main(['cpu-modes', '--models', 'vit_minimal_nope.cifar10']) == 2
    err = capsys.readouterr().err
    assert err.count('\n') == 1 and "timm-minimal-benchmark cpu-modes: error: unknown model 'vit_minimal_nope" in err




@pytest.mark.slow  # several seconds: the whole suite runs it
def test_timm_script_runs_a_checkouts_script_with_the_installed_timm_and_the_models(tmp_path):
    """A pytorch-image-models checkout (its own ``timm/`` beside ``validate.py``, here of an older version) on the
    path and as the working folder: the script still imports the installed timm, finds the vit_minimal models
    registered, and gets its own arguments, --help included; a script that is not there is one line, exit 2."""
    import timm
    (tmp_path / 'timm').mkdir()
    (tmp_path / 'timm' / '__init__.py').write_text("__version__ = '1.0.29.dev0'\n")
    (tmp_path / 'validate.py').write_text(
        'import sys, timm\nprint("TIMM", timm.__version__, timm.is_model("vit_minimal_sym_6x4"), sys.argv[1:])\n')
    launch = ('import sys, timm_minimal_scripts; sys.argv[0] = "timm-minimal-timm-script"; '
              'sys.exit(timm_minimal_scripts.timm_script())')
    env = dict(os.environ, PYTHONPATH=str(tmp_path))
    r = subprocess.run([sys.executable, '-c', launch, 'validate.py', '--model', 'x', '--help'], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert f"TIMM {timm.__version__} True ['--model', 'x', '--help']" in r.stdout
    r = subprocess.run([sys.executable, '-c', launch, 'nope.py'], cwd=tmp_path, env=env, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 2 and r.stderr.strip().splitlines() == [
        "timm-minimal-timm-script: error: nope.py: no such Python script; name one of timm's scripts, e.g. "
        "path/to/pytorch-image-models/validate.py, then its arguments."]
