"""The trainer against faults and misuse: two runs on one folder, a full disk, checkpoints that must not be
resumed (non-finite, foreign, of another architecture), and recipes or args.yaml that are not what they claim."""
import json
import subprocess
import sys

import pytest
import torch
import yaml
from safetensors.torch import load_file, save_file

from trainer_runs import DDP_ARGS, ROOT, metrics, run_inprocess, run_subprocess
from timm_minimal.training import train as train_mod
from timm_minimal.training.run.files import FolderLock

torch.set_num_threads(1)


@pytest.fixture(scope='module')
def data(mnist_dir):
    return ['--data-dir', mnist_dir]


@pytest.fixture(scope='module')
def one_epoch(tmp_path_factory, data):
    run = tmp_path_factory.mktemp('one') / 'run'
    assert run_inprocess(DDP_ARGS + data + ['--epochs', '1', '--output', run]) == 0
    return run


def _copy(run, tmp_path):
    import shutil
    out = tmp_path / 'copy'
    shutil.copytree(run, out)
    return out


@pytest.mark.slow
def test_a_second_trainer_on_the_same_folder_is_refused(data, tmp_path, capsys):
    run = tmp_path / 'run'
    holder = FolderLock(run, '.lock').acquire()  # another process's lock, as the OS sees it
    try:
        child = run_subprocess(DDP_ARGS + data + ['--epochs', '1', '--output', run])
        assert child.returncode == train_mod.EXIT_BAD_INPUT, child.stderr
        assert 'another process' in child.stderr and 'one training run at a time' in child.stderr
        assert 'Traceback' not in child.stderr
        assert sorted(p.name for p in run.iterdir()) == ['.lock']
    finally:
        holder.release()
    # the lock of a process that is gone does not block: the same folder starts (it holds only the lock file)
    assert run_inprocess(DDP_ARGS + data + ['--epochs', '1', '--output', run]) == 0
    assert len(metrics(run)) == 1


@pytest.mark.slow
def test_two_trainers_started_at_once_one_runs(data, tmp_path):
    run = tmp_path / 'run'
    env_args = DDP_ARGS + data + ['--epochs', '1', '--output', run]
    cmd = [sys.executable, '-m', 'timm_minimal.training.train', *map(str, env_args)]
    import os
    env = dict(os.environ, OMP_NUM_THREADS='1')
    procs = [subprocess.Popen(cmd + ['--seed', str(seed)], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for seed in (1, 2)]
    outs = [p.communicate(timeout=600) for p in procs]
    codes = sorted(p.returncode for p in procs)
    assert codes == [0, train_mod.EXIT_BAD_INPUT], outs
    assert len(metrics(run)) == 1
    seeds = {json.loads((run / 'run.json').read_text())['args']['seed']}
    winner = [s for s, p in zip((1, 2), procs) if p.returncode == 0]
    assert seeds == set(winner)


def test_a_full_disk_is_named_and_the_run_can_resume(one_epoch, data, small_disk, capsys):
    disk = small_disk(1024)
    run = disk / 'run'
    rc = run_inprocess(DDP_ARGS + data + ['--epochs', '3', '--output', run])
    err = capsys.readouterr().err
    assert rc == train_mod.EXIT_WRITE_FAILED, err
    assert 'no space left on the device' in err and 'Traceback' not in err and err.strip().count('\n') == 0
    assert not list((run / 'checkpoints').glob('.*tmp*'))
    assert json.loads((run / 'run.json').read_text())['status'] == 'failed'


@pytest.mark.slow
def test_a_full_disk_ends_both_processes_of_a_cpu_split_with_one_line(data, small_disk):
    """The main process cannot write its first checkpoint: both processes stop at that step (no one waits in a
    barrier while the other trains on), with the main process's one line and exit status 1."""
    import time
    run = small_disk(1024) / 'run'
    t0 = time.perf_counter()
    proc = run_subprocess(DDP_ARGS + data + ['--epochs', '3', '--output', run, '--cpu-processes', '2'], threads=2)
    assert time.perf_counter() - t0 < 240, 'the run hung'
    assert proc.returncode == train_mod.EXIT_WRITE_FAILED, proc.stdout[-2000:] + proc.stderr[-2000:]
    lines = [line for line in proc.stderr.splitlines() if line.startswith('timm-minimal-train:')]
    assert len(lines) == 1 and 'no space left on the device' in lines[0], proc.stderr[-2000:]
    assert json.loads((run / 'run.json').read_text())['status'] == 'failed'


def test_a_non_finite_checkpoint_is_never_resumed(one_epoch, tmp_path, capsys):
    run = _copy(one_epoch, tmp_path)
    path = run / 'checkpoints' / 'last' / 'model.safetensors'
    w = load_file(str(path))
    key = next(k for k, v in w.items() if v.is_floating_point())
    w[key] = torch.full_like(w[key], float('nan'))
    save_file(w, str(path))
    assert run_inprocess(['--resume', run, '--epochs', '2']) == train_mod.EXIT_BAD_INPUT
    err = capsys.readouterr().err
    assert 'weights are not finite' in err and key in err and 'last good' not in err
    assert len(metrics(run)) == 1


def test_a_run_packed_without_its_training_state_is_not_started_over(one_epoch, tmp_path, capsys):
    """--resume on a run whose checkpoint lost its training state (a published run folder) refuses in one line and
    leaves every file as it was."""
    run = _copy(one_epoch, tmp_path)
    (run / 'checkpoints' / 'last' / 'training_state.pt').unlink()
    before = {p: p.read_bytes() for p in run.rglob('*') if p.is_file()}
    assert run_inprocess(['--resume', run]) == train_mod.EXIT_BAD_INPUT
    err = capsys.readouterr().err
    assert '(1 epoch(s) in metrics.jsonl) with no checkpoint to resume' in err and err.count('\n') == 1, err
    assert {p: p.read_bytes() for p in run.rglob('*') if p.is_file()} == before
    (run / 'metrics.jsonl').write_text('')  # the weights alone still hold the run
    assert run_inprocess(['--resume', run]) == train_mod.EXIT_BAD_INPUT
    assert '(0 epoch(s) in metrics.jsonl)' in capsys.readouterr().err


@pytest.mark.slow
def test_a_start_killed_before_its_first_checkpoint_starts_over(one_epoch, tmp_path, capsys):
    killed = tmp_path / 'killed'  # its options alone: no epoch, no weights
    killed.mkdir()
    (killed / 'args.yaml').write_bytes((one_epoch / 'args.yaml').read_bytes())
    assert run_inprocess(['--resume', killed]) == 0
    assert 'starting the run from the beginning' in capsys.readouterr().out and len(metrics(killed)) == 1


def test_a_foreign_training_state_is_named(one_epoch, tmp_path, capsys):
    run = _copy(one_epoch, tmp_path)
    torch.save({'epoch': 1}, run / 'checkpoints' / 'last' / 'training_state.pt')
    assert run_inprocess(['--resume', run, '--epochs', '2']) == train_mod.EXIT_BAD_INPUT
    assert 'not a timm-minimal training state (missing optimizer' in capsys.readouterr().err


def test_args_yaml_naming_another_architecture_is_named(one_epoch, tmp_path, capsys):
    run = _copy(one_epoch, tmp_path)
    saved = yaml.safe_load((run / 'args.yaml').read_text())
    saved['model'] = 'vit_minimal_sym_6x4'
    (run / 'args.yaml').write_text(yaml.safe_dump(saved))
    assert run_inprocess(['--resume', run, '--epochs', '2']) == train_mod.EXIT_BAD_INPUT
    err = capsys.readouterr().err
    assert "asks for a model its checkpoint" in err and "(architecture 'vit_minimal_sym_6x4', not" in err
    assert 'Traceback' not in err and err.count('\n') == 1


@pytest.mark.parametrize('edit, says', [
    (lambda saved: dict(saved, model_kwargs={'depth': 1, 'num_heads': 3}),
     "asks for model_kwargs={'depth': 1, 'num_heads': 3}, but the run began with {'depth': 1} (run.json): args.yaml was "
     "changed since"),
    (lambda saved: dict(saved, seed=saved['seed'] + 1), 'asks for seed='),
    (lambda saved: None, 'args.yaml is empty: a resumed run takes its options from it'),
], ids=['heads', 'seed', 'emptied'])
def test_args_yaml_edited_to_another_model_or_data_is_refused_on_resume(one_epoch, tmp_path, capsys, edit, says):
    """args.yaml is compared with the run's own record: a 4-head run edited to 3 heads trained 3 heads on the 4-head
    weights and exited 0, where the same change on the command line was refused."""
    run = _copy(one_epoch, tmp_path)
    edited = edit(yaml.safe_load((run / 'args.yaml').read_text()))
    (run / 'args.yaml').write_text(yaml.safe_dump(edited) if edited else '')
    before = (run / 'run.json').read_text()
    assert run_inprocess(['--resume', run, '--epochs', '2']) == train_mod.EXIT_BAD_INPUT
    err = capsys.readouterr().err.strip()
    assert says in err and len(err.splitlines()) == 1 and 'Traceback' not in err, err
    assert len(metrics(run)) == 1 and (run / 'run.json').read_text() == before


def test_a_resume_without_its_run_record_is_refused_not_rebuilt(one_epoch, tmp_path, capsys):
    run = _copy(one_epoch, tmp_path)
    (run / 'run.json').unlink()
    assert run_inprocess(['--resume', run, '--epochs', '2']) == train_mod.EXIT_BAD_INPUT
    err = capsys.readouterr().err.strip()
    assert 'its run.json, the record of its earlier launches, is missing; put it back' in err, err
    assert not (run / 'run.json').exists() and len(metrics(run)) == 1


@pytest.mark.parametrize('text, message', [
    ('lr: [1, 2\nepochs: 3\n', 'is not valid YAML (line'),
    ('lr: !!python/object/apply:os.system ["echo hacked"]\n', 'is not valid YAML'),
    ('lr: "fast"\n', "lr must be a finite number of at least 0, got 'fast' (as --lr takes)"),
    ('epochs: 2.5\n', 'epochs must be an integer'),
    ('- lr\n', 'must be a mapping'),
])
def test_bad_recipes_are_one_line(text, message, tmp_path, capsys):
    recipe = tmp_path / 'mine.yaml'
    recipe.write_text(text)
    rc = train_mod.main(['--model', 'vit_minimal_std_6x1', '--dataset', 'mnist', '--recipe', str(recipe),
                         '--output', str(tmp_path / 'run')])
    err = capsys.readouterr().err
    assert rc == train_mod.EXIT_BAD_INPUT and message in err and err.count('\n') == 1, err


def test_bad_args_yaml_is_one_line(one_epoch, tmp_path, capsys):
    run = _copy(one_epoch, tmp_path)
    (run / 'args.yaml').write_text('!!python/object/new:os.system [echo hacked]\n')
    assert run_inprocess(['--resume', run, '--epochs', '2']) == train_mod.EXIT_BAD_INPUT
    assert 'args.yaml is not valid YAML' in capsys.readouterr().err
