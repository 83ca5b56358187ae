"""The trainer's experiment trackers (``--log-with``) and its curve: points every ``--log-interval`` updates in
``steps.jsonl`` and the trackers, each epoch's numbers in ``train/``, ``test/`` and ``time/`` groups, the run's result as
TensorBoard's HParams metrics, its figures as images, and one tracker run across a resume with no step written twice.
W&B (offline) and MLflow are checked where installed."""
import importlib.util
import json

import pytest

from trainer_runs import DDP_ARGS, metrics, run_inprocess, run_killed

pytest.importorskip('tensorboard')

TB = ['--log-interval', '4', '--log-with', 'tensorboard']


def events(out, project='timm-minimal'):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    return EventAccumulator(str(out / 'trackers' / project), size_guidance={'images': 0, 'scalars': 0}).Reload()


def steps_of(ev, tag):
    return [e.step for e in ev.Scalars(tag)]


def hparams_metrics(ev):
    from tensorboard.plugins.hparams import plugin_data_pb2
    content = ev.PluginTagToContent('hparams')['_hparams_/experiment']
    data = plugin_data_pb2.HParamsPluginData.FromString(content)
    return [m.name.tag for m in data.experiment.metric_infos], [h.name for h in data.experiment.hparam_infos]


@pytest.fixture(scope='module')
def tb_run(tmp_path_factory, mnist_dir):
    out = tmp_path_factory.mktemp('tb') / 'run'
    assert run_inprocess(DDP_ARGS + ['--data-dir', mnist_dir] + TB + ['--output', out]) == 0
    return out


def test_the_curve_has_a_point_every_log_interval_updates_with_the_step_equal_to_the_update(tb_run):
    ev = events(tb_run)
    assert steps_of(ev, 'train/loss') == [4, 8, 12, 16, 20, 24]  # 12 updates an epoch, 2 epochs
    assert steps_of(ev, 'train/lr') == steps_of(ev, 'train/grad_norm') == [4, 8, 12, 16, 20, 24]
    lrs = [e.value for e in ev.Scalars('train/lr')]
    assert lrs[0] < lrs[1] and len(set(lrs)) == len(lrs)  # warm-up, then the schedule: every point its own rate
    rows = [json.loads(line) for line in (tb_run / 'steps.jsonl').read_text().splitlines()]
    assert [r['update'] for r in rows] == [4, 8, 12, 16, 20, 24] and rows[2]['epoch'] == 1.0
    assert [e.value for e in ev.Scalars('train/loss')] == pytest.approx([r['loss'] for r in rows], rel=1e-6)
    assert all(r['grad_norm'] > 0 for r in rows)


def test_each_epochs_numbers_go_in_groups_at_the_epochs_last_update(tb_run):
    ev, rows = events(tb_run), metrics(tb_run)
    scalars = set(ev.Tags()['scalars'])
    assert {'test/acc', 'test/loss', 'train/acc', 'train/epoch_loss', 'train/throughput', 'time/epoch',
            'time/elapsed'} <= scalars
    assert not [t for t in scalars if '/' not in t]  # no flat names
    for key, tag in (('test_acc', 'test/acc'), ('train_loss', 'train/epoch_loss'), ('epoch_time', 'time/epoch')):
        assert [(e.step, e.value) for e in ev.Scalars(tag)] == [
            (r['update'], pytest.approx(r[key], rel=1e-6)) for r in rows], key


def test_the_result_is_the_hparams_metric_and_the_figures_are_images(tb_run):
    ev = events(tb_run)
    run = json.loads((tb_run / 'run.json').read_text())
    assert run['trackers'] == {'project': 'timm-minimal'}
    names, params = hparams_metrics(ev)
    assert names == ['test/best_acc', 'test/final_acc'] and {'lr', 'epochs', 'model', 'run_name'} <= set(params)
    assert ev.Scalars('test/best_acc')[-1].value == pytest.approx(run['best']['test_acc'])
    assert ev.Scalars('test/final_acc')[-1].value == pytest.approx(run['final']['test_acc'])
    assert set(ev.Tags()['images']) == {'curves', 'confusion', 'attention'}
    assert [p.name for p in (tb_run / 'trackers' / 'timm-minimal').iterdir() if p.is_dir()] == []  # no sub-run


@pytest.mark.slow  # several seconds: the whole suite runs it
def test_a_resume_goes_on_in_the_same_tensorboard_run_writing_no_step_twice(mnist_dir, tmp_path):
    out = tmp_path / 'run'
    args = DDP_ARGS + ['--data-dir', mnist_dir, '--log-interval', '3', '--checkpoint-interval', '4',
                       '--log-with', 'tensorboard', '--output', out]
    killed = run_killed(args, at_update=9)  # points at 3, 6, 9 written; the checkpoint of update 8 resumes
    assert killed.returncode != 0
    assert [json.loads(line)['update'] for line in (out / 'steps.jsonl').read_text().splitlines()] == [3, 6, 9]
    assert run_inprocess(['--resume', out, '--epochs', '3']) == 0
    updates = [json.loads(line)['update'] for line in (out / 'steps.jsonl').read_text().splitlines()]
    assert updates == [3, 6, 9, 12, 15, 18, 21, 24, 27, 30, 33, 36]
    ev = events(out)
    for tag in ('train/loss', 'test/acc'):
        logged = steps_of(ev, tag)
        assert len(logged) == len(set(logged)), (tag, logged)
    assert steps_of(ev, 'test/acc') == [12, 24, 36]
    assert set(steps_of(ev, 'train/loss')) <= set(updates) and 36 in steps_of(ev, 'train/loss')


@pytest.mark.slow  # several seconds: the whole suite runs it
def test_the_project_follows_the_option_then_wandb_project(mnist_dir, tmp_path, monkeypatch):
    monkeypatch.setenv('WANDB_PROJECT', 'from-env')
    out = tmp_path / 'run'
    assert run_inprocess(DDP_ARGS + ['--data-dir', mnist_dir, '--epochs', '1', '--log-with', 'tensorboard',
                                     '--output', out]) == 0
    assert json.loads((out / 'run.json').read_text())['trackers'] == {'project': 'from-env'}
    assert steps_of(events(out, 'from-env'), 'test/acc') == [12]
    out = tmp_path / 'named'
    assert run_inprocess(DDP_ARGS + ['--data-dir', mnist_dir, '--epochs', '1', '--log-with', 'tensorboard',
                                     '--tracker-project', 'mine', '--output', out]) == 0
    assert (out / 'trackers' / 'mine').is_dir()


@pytest.mark.skipif(importlib.util.find_spec('mlflow') is None, reason='mlflow is not installed')
def test_mlflow_keeps_its_store_in_the_run_folder_and_one_run_across_a_resume(mnist_dir, tmp_path, monkeypatch):
    import mlflow
    monkeypatch.delenv('MLFLOW_TRACKING_URI', raising=False)
    monkeypatch.chdir(tmp_path)
    out = tmp_path / 'run'
    args = DDP_ARGS + ['--data-dir', mnist_dir, '--epochs', '1', '--log-interval', '4', '--log-with', 'mlflow',
                       '--output', out]
    assert run_inprocess(args) == 0
    assert run_inprocess(['--resume', out, '--epochs', '2']) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ['run']  # no mlflow.db, no mlruns beside it
    assert (out / 'trackers' / 'mlflow.db').is_file()
    run_id = json.loads((out / 'run.json').read_text())['trackers']['mlflow']
    client = mlflow.MlflowClient(f'sqlite:///{out / "trackers" / "mlflow.db"}')
    runs = client.search_runs([client.get_experiment_by_name('timm-minimal').experiment_id])
    assert [r.info.run_id for r in runs] == [run_id]
    assert [m.step for m in client.get_metric_history(run_id, 'test/acc')] == [12, 24]
    assert [m.step for m in client.get_metric_history(run_id, 'train/loss')] == [4, 8, 12, 16, 20, 24]
    assert {'curves.png', 'confusion.png', 'attention.png'} <= {a.path for a in client.list_artifacts(run_id)}


@pytest.mark.skipif(importlib.util.find_spec('wandb') is None, reason='wandb is not installed')
def test_wandb_offline_keeps_one_run_across_a_resume(mnist_dir, tmp_path, monkeypatch):
    monkeypatch.setenv('WANDB_MODE', 'offline')
    monkeypatch.setenv('WANDB_SILENT', 'true')
    out = tmp_path / 'run'
    args = DDP_ARGS + ['--data-dir', mnist_dir, '--epochs', '1', '--log-interval', '4', '--log-with', 'wandb',
                       '--output', out]
    assert run_inprocess(args) == 0
    assert run_inprocess(['--resume', out, '--epochs', '2']) == 0
    run_id = json.loads((out / 'run.json').read_text())['trackers']['wandb']
    runs = sorted((out / 'trackers' / 'wandb').glob('offline-run-*'))
    assert runs and all(r.name.endswith(f'-{run_id}') for r in runs)  # each launch writes into the one run id


def test_evaluate_logs_each_models_numbers_and_confusion_matrix_as_one_tracker_run(mnist_dir, tmp_path):
    from timm_minimal.tools import evaluate
    assert evaluate.main(['--model', 'vit_minimal_sym_6x4.mnist', '--dataset', 'mnist', '--data-dir', str(mnist_dir),
                          '--log-with', 'tensorboard', '--log-dir', str(tmp_path)]) == 0
    (folder,) = tmp_path.glob('evaluate-*')
    ev = events(folder)
    assert ev.Scalars('vit_minimal_sym_6x4.mnist/acc')[0].value > 90
    assert set(ev.Tags()['images']) == {'vit_minimal_sym_6x4.mnist/confusion'}
    assert hparams_metrics(ev)[0] == ['vit_minimal_sym_6x4.mnist/acc']


def test_evaluate_refuses_an_unknown_tracker_before_it_evaluates(mnist_dir, capsys):
    from timm_minimal.tools import evaluate
    assert evaluate.main(['--model', 'vit_minimal_sym_6x4.mnist', '--dataset', 'mnist', '--data-dir', str(mnist_dir),
                          '--log-with', 'nonsense']) == 2
    assert "--log-with: unknown tracker 'nonsense'" in capsys.readouterr().err
