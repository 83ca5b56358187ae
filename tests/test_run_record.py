"""run.json as one typed record (``RunRecord``, ``Launch``): written and read in one module, so that every report
states the same device, precision and wall time of a run, a resumed one too."""
import json

import pytest
import torch
from huggingface_hub import ModelCard

from timm_minimal.tools.hub import publish

from timm_minimal.tools.paper import reproduce
from timm_minimal.training.run.folder import RunFolder
from timm_minimal.training.run.record import Launch, RunRecord
from timm_minimal.training.train import main as train_main


def _record(*launches):
    return RunRecord(command='timm-minimal-train --model m', model='vit_minimal_sym_6x4.mnist', launches=list(launches))


def test_the_record_round_trips_and_keeps_keys_it_does_not_know(tmp_path):
    data = dict(_record(Launch(command='c', started='t', mixed_precision='bf16')).to_dict(),
                from_a_newer_version={'a': 1})
    data['launches'][0]['also_newer'] = 2
    (tmp_path / 'run.json').write_text(json.dumps(data))
    record = RunRecord.load_from_json(tmp_path / 'run.json')
    assert record.last_launch.mixed_precision == 'bf16' and record.extra == {'from_a_newer_version': {'a': 1}}
    record.save_to_json(tmp_path / 'again.json')
    assert json.loads((tmp_path / 'again.json').read_text()) == data


@pytest.mark.parametrize('content, message', [('[1]', 'not a JSON object'), ('{', 'not valid JSON'),
                                              ('{"launches": 5}', '"launches" must be a list')])
def test_a_file_that_is_no_record_is_named(tmp_path, content, message):
    (tmp_path / 'run.json').write_text(content)
    with pytest.raises(ValueError, match=message) as e:
        RunRecord.load_from_json(tmp_path / 'run.json')
    assert str(tmp_path / 'run.json') in str(e.value)


def test_a_killed_launch_counts_to_its_last_saved_epoch():
    metrics = [dict(epoch=1, elapsed=40.0), dict(epoch=2, elapsed=75.0),  # the first launch, killed in epoch 3
               dict(epoch=3, elapsed=30.0)]  # the resumed one
    record = _record(Launch(command='c', started='t', first_epoch=1))
    record.add_launch(Launch(command='c --resume', started='t', first_epoch=3), metrics[:2])
    assert record.launches[0].wall_time == 75.0 and record.status == 'running'
    record.close('finished', 'now', 33.0, metrics, best=None)
    assert record.launches[-1].wall_time == 33.0 and record.wall_time == 105.0 == record.total_wall_time(metrics)
    assert record.final == metrics[-1] and record.epochs_completed == 3
    # a launch killed before its first epoch ended saved nothing: no time of its own to count
    record.add_launch(Launch(command='c', started='t', first_epoch=4), metrics)
    record.add_launch(Launch(command='c', started='t', first_epoch=4), metrics)
    assert record.launches[-2].wall_time is None


def test_the_launches_first_epochs_tell_whose_epoch_is_whose_where_the_clock_cannot():
    """A launch killed after its first epoch (40 s) and a resumed one that took longer to start (its first epoch
    ends at 55 s): the clock never goes back, the record still knows both launches."""
    metrics = [dict(epoch=1, elapsed=40.0), dict(epoch=2, elapsed=55.0)]
    record = _record(Launch(command='c', started='t', first_epoch=1), Launch(command='c', started='t', first_epoch=2))
    assert record.total_wall_time(metrics) == 95.0


def test_a_record_written_before_launches_kept_their_first_epoch_still_sums_its_launches():
    metrics = [dict(epoch=1, elapsed=40.0), dict(epoch=2, elapsed=75.0), dict(epoch=3, elapsed=30.0)]
    record = _record(Launch(command='c', started='t'), Launch(command='c', started='t', wall_time=33.0))
    assert record.total_wall_time(metrics) == 105.0 and record.total_wall_time() == 33.0


@pytest.fixture
def fresh_accelerate_state():
    """Each run builds its Accelerator from its own precision, and leaves none behind for the tests after it."""
    from trainer_runs import reset_accelerate_state
    yield reset_accelerate_state
    reset_accelerate_state()


def _train(reset, *args):
    reset()
    assert train_main(['--epochs', '1', '--seed', '0', '--no-progress', '--num-workers', '0', '--cpu',
                       '--log-interval', '0', *args]) == 0


def test_a_run_resumed_at_another_precision_is_reported_alike_by_the_card_and_the_report(mnist_dir, tmp_path,
                                                                                         fresh_accelerate_state):
    """The card and the reproduce report both state the launch that ran the last epoch, and the same wall time."""
    runs = tmp_path / 'runs'
    run = runs / 'vit_minimal_sym_6x1.mnist'
    _train(fresh_accelerate_state, '--model', 'vit_minimal_sym_6x1.mnist', '--dataset', 'mnist', '--data-dir', str(mnist_dir),
           '--output', str(run), '--train-subset', '128', '--eval-subset', '64', '--batch-size', '64',
           '--model-kwargs', 'depth=1', '--mixed-precision', 'no')
    _train(fresh_accelerate_state, '--resume', str(run), '--epochs', '2', '--mixed-precision', 'bf16')
    record = RunFolder(run).read_record()
    assert [la.mixed_precision for la in record.launches] == ['no', 'bf16']
    assert [la.first_epoch for la in record.launches] == [1, 2]
    if not torch.cuda.is_available():  # each launch names the CPU it trained on: its model name and SIMD flags
        from timm_minimal.machine import cpu_signature
        cpu = cpu_signature()
        assert all(la.device_name.startswith(cpu['cpu']) and la.cpu_flags == cpu['flags'] for la in record.launches)

    rows = reproduce.collect(reproduce.select_rows([2], ['mnist'], ['vit_minimal_sym_6x1.mnist']), runs)
    assert rows[0]['mixed_precision'] == 'bf16' and rows[0]['epochs'] == 2
    wall = record.total_wall_time(RunFolder(run).read_metrics())
    assert rows[0]['wall_time_s'] == pytest.approx(wall) and wall == pytest.approx(record.wall_time)
    assert wall > record.launches[-1].wall_time  # both launches count

    card = ModelCard.load(publish.export_run(run, tmp_path / 'repo', 'me/vit_minimal_sym_6x1.mnist') / 'README.md')
    assert 'in bf16 autocast as the run trained' in card.text
    assert f'{wall:.0f} s of wall time over 2 launches' in card.text
    assert 'Mixed precision: bf16.' in reproduce.precision_text(rows)


@pytest.mark.slow  # several seconds: the whole suite runs it
def test_a_launch_set_up_for_several_processes_that_started_one_says_so_and_records_its_line(mnist_dir, tmp_path):
    """accelerate launch --cpu --num_processes 2 without --multi_cpu starts one process: the run says which flag was
    missing, in one line, and run.json keeps the launcher's line."""
    import sys
    from trainer_runs import DDP_ARGS, run_subprocess
    launcher = (sys.executable, '-m', 'accelerate.commands.launch', '--cpu', '--num_processes', '2',
                '--mixed_precision', 'no', '--dynamo_backend', 'no', '-m', 'timm_minimal.training.train')
    out = tmp_path / 'run'
    proc = run_subprocess(DDP_ARGS + ['--data-dir', mnist_dir, '--epochs', '1', '--output', out], launcher=launcher)
    assert proc.returncode == 0, proc.stderr[-3000:]
    said = [line for line in (proc.stdout + proc.stderr).splitlines() if 'MASTER_ADDR' in line]
    assert len(said) == 1 and 'add --multi_cpu to accelerate launch' in said[0]
    run = json.loads((out / 'run.json').read_text())
    assert run['command'].startswith(f'{sys.executable.rsplit("/", 1)[-1]} -m accelerate.commands.launch --cpu '
                                     f'--num_processes 2 ') and run['distributed']['num_processes'] == 1
