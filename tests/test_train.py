"""The training entry point (timm_minimal.training.train) on tiny subsets of the bundled MNIST sample: resume
after SIGKILL on both data paths, atomic checkpoints, divergence, two-process data parallelism, image
folders, precedence of recipe and command line, gradient accumulation, EMA, bf16.

Runs that must die (SIGKILL) or span two processes are subprocesses; the others run in this process.
Every run is forced onto the CPU (``--cpu``), so the suite behaves the same on a machine with a GPU.
"""
import argparse
import json
import math
import re
import socket
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
from PIL import Image
from safetensors.torch import load_file

from timm_minimal.models.weights_check import recorded_keywords
from timm_minimal.training import train as train_mod
from timm_minimal.training.cpu import policy as cpu_policy
from timm_minimal.training.cli import Provenance
from timm_minimal.training.plan import resolve_plan

torch.set_num_threads(1)

from trainer_runs import (
    BASE, DDP_ARGS, RESUME_ARGS, assert_same_run, metrics, reset_accelerate_state, run_inprocess, run_killed,
    run_subprocess, state, weights,
)


@pytest.fixture(scope='module')
def references(tmp_path_factory, data):
    """Uninterrupted runs of RESUME_ARGS, one per data path, made on first use."""
    made = {}

    def get(path='device'):
        if path not in made:
            out = tmp_path_factory.mktemp(f'ref-{path}') / 'run'
            assert run_inprocess(RESUME_ARGS + data + ['--data-path', path, '--output', out]) == 0
            made[path] = out
        return made[path]
    return get


@pytest.fixture(scope='module')
def reference(references):
    return references('device')


def test_run_folder_is_self_describing(reference):
    m = metrics(reference)
    assert [r['epoch'] for r in m] == [1, 2] and [r['update'] for r in m] == [12, 24]
    for r in m:
        for key in ('train_loss', 'train_acc', 'test_loss', 'test_acc', 'lr', 'throughput', 'epoch_time'):
            assert isinstance(r[key], float) and math.isfinite(r[key]), key
        assert (r['train_samples'], r['test_samples']) == (384, 200)
    run = json.loads((reference / 'run.json').read_text())
    assert run['status'] == 'finished' and run['model'] == 'vit_minimal_std_mlp_6x1.mnist'
    assert run['num_params'] == sum(v.numel() for v in weights(reference).values())
    assert run['recipe'] == 'mnist_cpu'  # BASE trains with --cpu: MNIST's CPU recipe
    assert run['recipe_values']['opt'] == 'adamw'
    assert run['dataset']['name'] == 'mnist' and run['dataset']['train_samples'] == 5000
    assert (run['dataset']['train_samples_used'], run['dataset']['eval_samples_used']) == (384, 200)
    assert set(run['versions']) >= {'torch', 'timm', 'accelerate', 'timm_minimal'}
    assert run['command'].startswith('timm-minimal-train ') and '--reprob' in run['command']
    assert run['final']['test_acc'] == m[-1]['test_acc'] and run['best']['epoch'] in (1, 2)
    args = yaml.safe_load((reference / 'args.yaml').read_text())
    assert args['lr'] == 5e-3 and args['reprob'] == 0.5 and args['model_kwargs'] == {'depth': 2}
    assert (reference / 'curves.png').stat().st_size > 10_000
    for name in ('last', 'best'):
        folder = reference / 'checkpoints' / name
        assert (folder / 'model.safetensors').is_file() and (folder / 'config.json').is_file()
        assert recorded_keywords(folder / 'model.safetensors') == dict(num_heads=1, pos_embed='sincos', global_pool='avg')
    cfg = json.loads((reference / 'checkpoints' / 'last' / 'config.json').read_text())
    assert cfg['architecture'] == 'vit_minimal_std_mlp_6x1' and cfg['num_classes'] == 10
    assert cfg['pretrained_cfg']['input_size'] == [1, 28, 28] and cfg['model_args'] == {'depth': 2, 'drop_path_rate': 0.1}
    training_state = torch.load(reference / 'checkpoints' / 'last' / 'training_state.pt', weights_only=True)
    assert {'optimizer', 'scheduler', 'rng', 'history', 'epoch', 'batch', 'update'} <= set(training_state)
    assert (training_state['epoch'], training_state['batch'], training_state['update']) == (2, 0, 24)


@pytest.mark.slow
@pytest.mark.parametrize('path', ['device', 'loader'])
def test_resume_after_sigkill_mid_epoch_ends_where_uninterrupted_run_ends(references, data, path, tmp_path):
    reference, out = references(path), tmp_path / 'run'
    # killed after update 18: epoch 2, batch 6 of 12; the last checkpoint is from update 16
    killed = run_killed(RESUME_ARGS + data + ['--data-path', path, '--output', out], at_update=18)
    assert killed.returncode == -9, killed.stderr
    assert (state(out)['epoch'], state(out)['batch'], state(out)['update']) == (1, 4, 16)
    assert len(metrics(out)) == 1
    assert run_inprocess(['--resume', out]) == 0
    assert_same_run(reference, out)
    run = json.loads((out / 'run.json').read_text())
    assert run['status'] == 'finished' and len(run['launches']) == 2
    assert run['launches'][1]['resumed_from'].endswith('last')
    assert [la['data_path']['path'] for la in run['launches']] == [path, path]


@pytest.mark.slow
def test_kill_while_writing_a_checkpoint_keeps_the_previous_one(reference, data, tmp_path):
    out = tmp_path / 'run'
    # checkpoints are written after updates 4, 8 and 12 (the end of epoch 1): die inside the third
    killed = run_killed(RESUME_ARGS + data + ['--output', out], in_save=3)
    assert killed.returncode == -9, killed.stderr
    assert state(out)['update'] == 8  # the previous checkpoint, complete
    assert (out / 'checkpoints' / '.last.tmp' / 'model.safetensors').is_file()  # the half-written one
    assert len(metrics(out)) == 0  # an epoch is logged once its checkpoint is written
    # resuming from update 8 replays the rest of epoch 1
    assert run_inprocess(['--resume', '--output', out, '--model', 'vit_minimal_std_mlp_6x1']) == 0
    assert not (out / 'checkpoints' / '.last.tmp').exists()
    assert_same_run(reference, out)
    # a finished run is extended by resuming it with more epochs
    assert run_inprocess(['--resume', out, '--epochs', '3']) == 0
    assert [m['epoch'] for m in metrics(out)] == [1, 2, 3] and metrics(out)[2]['update'] == 36
    assert json.loads((out / 'run.json').read_text())['epochs_completed'] == 3


def test_diverging_run_stops_with_clear_message_and_keeps_last_good_checkpoint(data, tmp_path, capsys):
    out = tmp_path / 'run'
    rc = run_inprocess(DDP_ARGS + data + ['--output', out, '--opt', 'sgd', '--lr', '1e6', '--sched', 'none',
                                   '--checkpoint-interval', '1'])
    assert rc == train_mod.EXIT_DIVERGED
    err = capsys.readouterr().err
    assert 'Training diverged:' in err and 'not finite' in err and 'last good checkpoint is' in err and '--lr' in err
    assert '--no-compile' not in err  # only a compiled run is pointed at its compilation
    assert "--lr 1e+06 is above the recipe's 0.005: try the recipe's" in err and 'lr 1e+06)' in err  # the bad update's
    st = state(out)
    assert f"update {st['update'] + 1}," in err  # stopped at the first bad update, nothing saved after it
    assert all(torch.isfinite(v).all() for v in weights(out).values())
    run = json.loads((out / 'run.json').read_text())
    assert run['status'] == 'diverged' and 'diverged' in run['message']


@pytest.mark.parametrize('update, explicit, expected', [
    (1, ['lr', 'smoothing'], 'the loss itself was not finite. Check the options that scale it: --smoothing 0.1.'),
    (1, ['lr'], 'the loss itself was not finite. Check the data (non-finite pixels) and --mixed-precision no.'),
    (5, ['lr', 'smoothing'], "--lr 0.1 is above the recipe's 0.005: try the recipe's; check the options that scale the "
                             "loss: --smoothing 0.1; otherwise try a lower --lr"),
    (5, [], 'Try a lower --lr, --clip-grad 1.0'),
])
def test_a_divergence_names_the_option_most_likely_to_have_caused_it(update, explicit, expected):
    values = dict(lr=0.1, smoothing=0.1, distill_weight=None, distill_task_weight=None, distill_temperature=1.0)
    provenance = Provenance(explicit=tuple(explicit), recipe_values=dict(lr=0.005))
    from timm_minimal.training.engine import divergence_advice
    assert expected in divergence_advice(values, provenance, update, compiled=False)


def free_port():
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_two_processes_train_one_model(data, tmp_path):
    """accelerate launch with two CPU processes (gloo): same weights on both ranks, each rank half of every
    batch, metrics gathered over the whole test set and written once; the same model as one process."""
    single, ddp = tmp_path / 'single', tmp_path / 'ddp'
    assert run_inprocess(DDP_ARGS + data + ['--output', single]) == 0
    launcher = (sys.executable, '-m', 'accelerate.commands.launch', '--multi_gpu', '--num_processes', '2',
                '--num_machines', '1', '--mixed_precision', 'no', '--dynamo_backend', 'no',
                '--main_process_port', str(free_port()), '-m', 'timm_minimal.training.train')
    proc = run_subprocess(DDP_ARGS + data + ['--output', ddp, '--rank-report'], launcher=launcher)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    ranks = [json.loads((ddp / f'rank{r}.json').read_text()) for r in (0, 1)]
    assert [r['num_processes'] for r in ranks] == [2, 2]
    assert ranks[0]['weights_sha256'] == ranks[1]['weights_sha256']
    assert [r['per_process_batch_size'] for r in ranks] == [16, 16]
    assert [r['local_train_samples'] for r in ranks] == [384, 384]  # 2 epochs x 384 / 2 processes
    m = metrics(ddp)
    assert len(m) == 2 and [r['train_samples'] for r in m] == [384, 384] and [r['test_samples'] for r in m] == [250, 250]
    assert proc.stdout.count('epoch 1/2:') == 1  # logged once
    run = json.loads((ddp / 'run.json').read_text())
    # the record relaunches the run as it was launched: the launcher's line, not one process's
    assert run['command'].startswith(f'{Path(sys.executable).name} -m accelerate.commands.launch --multi_gpu '
                                     f'--num_processes 2 ')
    assert run['command'].endswith(f'-m timm_minimal.training.train ' + ' '.join(map(str, DDP_ARGS + data)) +
                                   f' --output {ddp} --rank-report')
    assert run['distributed'] == dict(num_processes=2, global_batch_size=32, per_process_batch_size=16,
                                      grad_accum_steps=1, effective_batch_size=32)
    # the global batch is split, not repeated: two processes train the model one process trains
    ws, wd = weights(single), weights(ddp)
    for k in ws:
        torch.testing.assert_close(wd[k], ws[k], rtol=1e-3, atol=1e-4)
    for a, b in zip(metrics(single), m):
        assert abs(a['train_loss'] - b['train_loss']) < 1e-4 and abs(a['test_acc'] - b['test_acc']) < 0.5


def test_gradient_accumulation_and_ema(data, tmp_path):
    """Batches of 16 accumulated twice train the model batches of 32 train; EMA weights are kept and evaluated."""
    full, accum = tmp_path / 'full', tmp_path / 'accum'
    assert run_inprocess(DDP_ARGS + data + ['--output', full, '--epochs', '1']) == 0
    args = [a if a != '32' else '16' for a in DDP_ARGS + data]
    assert run_inprocess(args + ['--output', accum, '--epochs', '1', '--grad-accum-steps', '2', '--model-ema',
                                 '--model-ema-decay', '0.9']) == 0
    assert metrics(accum)[0]['update'] == metrics(full)[0]['update'] == 12
    wf, wa = weights(full), weights(accum)
    for k in wf:
        torch.testing.assert_close(wa[k], wf[k], rtol=1e-3, atol=1e-4)
    assert 'ema_test_acc' in metrics(accum)[0]
    ema = load_file(str(accum / 'checkpoints' / 'last' / 'ema.safetensors'))
    assert ema.keys() == wa.keys() and any(not torch.equal(ema[k], wa[k]) for k in ema)


def test_bf16_autocast_on_cpu(data, tmp_path):
    out = tmp_path / 'run'
    assert run_inprocess(DDP_ARGS + data + ['--output', out, '--epochs', '1', '--mixed-precision', 'bf16']) == 0
    run = json.loads((out / 'run.json').read_text())
    assert run['launches'][0]['mixed_precision'] == 'bf16'
    assert math.isfinite(metrics(out)[0]['train_loss'])
    assert all(v.dtype == torch.float32 for v in weights(out).values())


def test_runs_of_two_precisions_train_one_after_the_other_in_one_process(data, tmp_path):
    """accelerate keeps one state per process and refused a second Accelerator of another precision: train.main in
    bf16, then in fp32, in one Python process (no reset between them), each trains in its own."""
    for precision in ('bf16', 'no'):
        out = tmp_path / precision
        assert train_mod.main([str(a) for a in DDP_ARGS + data + ['--epochs', '1', '--mixed-precision', precision,
                                                                  '--output', out]]) == 0
        assert json.loads((out / 'run.json').read_text())['launches'][0]['mixed_precision'] == precision


@pytest.mark.parametrize('model, kwargs, pays', [
    ('vit_minimal_std_mlp_6x1.cifar10', {}, True), ('vit_minimal_std_mlp_12x4', {}, True),
    ('vit_minimal_sym_6x4.cifar10', {}, True), ('vit_minimal_qkonly_6x1', {}, True),
    ('vit_minimal_std_mlp_6x1', {'use_mlp': False}, True), ('vit_minimal_sym_6x4', {'use_mlp': True}, True),
    ('resnet18', {}, False), (None, {}, False)])
def test_cpu_default_precision_follows_the_model_family(model, kwargs, pays, monkeypatch):
    """bf16 autocast by default on a CPU with native bf16 for the minimal transformers (their attention leaves SDPA
    there); other timm models, unmeasured, and every model without native bf16 train in fp32."""
    monkeypatch.delenv('ACCELERATE_MIXED_PRECISION', raising=False)
    for native in (True, False):
        monkeypatch.setattr(cpu_policy, 'cpu_has_bf16', lambda: native)
        assert cpu_policy.cpu_bf16_pays(model, kwargs) is (pays and native)
        for given in (None, 'no'):
            reset_accelerate_state()
            args = train_mod.build_parser().parse_args(['--cpu', '--dataset', 'cifar10'] +
                                                       (['--model', model] if model else ['--model', 'resnet18']) +
                                                       (['--mixed-precision', given] if given else []))
            args.model_kwargs = kwargs
            expected = 'bf16' if pays and native and given is None else 'no'
            plan = resolve_plan(args, split=False)
            assert plan.precision == expected and train_mod.make_accelerator(plan).mixed_precision == expected
    reset_accelerate_state()


@pytest.mark.parametrize('model, kwargs, device, epochs, given, expected', [
    ('vit_minimal_std_mlp_6x1.cifar10', {}, 'cpu', 20, None, True),  # 20 x 50,000 images: repays a compilation
    ('vit_minimal_std_mlp_6x1.cifar10', {}, 'cpu', 2, None, False),  # 100,000: too short
    ('vit_minimal_std_mlp_6x1.cifar10', {}, 'cpu', 20, False, False),
    ('vit_minimal_sym_6x4.cifar10', {}, 'cpu', 20, None, False),  # no MLP: compiling gains nothing on the CPU
    ('vit_minimal_sym_6x4.cifar10', {}, 'cpu', 2, True, True),
    ('vit_minimal_sym_6x4', {'use_mlp': True}, 'cpu', 20, None, True),
    ('resnet18', {}, 'cpu', 20, None, False), ('vit_minimal_sym_6x4.cifar10', {}, 'cuda', 1, None, True),
    ('vit_minimal_std_mlp_6x1', {}, 'mps', 20, None, False)])
def test_default_compile_follows_the_device_the_model_family_and_the_run_length(model, kwargs, device, epochs,
                                                                                 given, expected):
    assert cpu_policy.default_compile(given, model, kwargs, device, epochs * 50_000) is expected


def test_a_long_cpu_run_of_a_model_with_an_mlp_compiles_by_default(data, tmp_path, monkeypatch):
    """The trainer hands its run length to the default: the same run compiles once it is long enough (the bar is
    lowered here so that the run stays short; torch.compile is replaced by a recorder that returns the model)."""
    calls = []
    monkeypatch.setattr(torch, 'compile', lambda model, **kwargs: calls.append(kwargs) or model)
    for bar, compiles in ((385, False), (384, True)):  # 1 epoch of the 384 training images
        monkeypatch.setattr(cpu_policy, 'CPU_COMPILE_MIN_IMAGES', bar)
        out = tmp_path / f'run-{bar}'
        assert run_inprocess(DDP_ARGS + data + ['--epochs', '1', '--output', out]) == 0
        assert len(calls) == int(compiles)
        assert json.loads((out / 'run.json').read_text())['launches'][-1]['compiled'] is compiles


def make_image_folder(root: Path, classes=('cat', 'dog', 'owl'), eval_dir='val', n_train=8, n_eval=4):
    rng = np.random.default_rng(0)
    for split, n in (('train', n_train), (eval_dir, n_eval)):
        for c, cls in enumerate(classes):
            (root / split / cls).mkdir(parents=True)
            for i in range(n):
                arr = np.clip(rng.normal(60 + 60 * c, 20, (40, 36, 3)), 0, 255).astype(np.uint8)
                Image.fromarray(arr).save(root / split / cls / f'{i}.png')
    return root


@pytest.mark.parametrize('eval_dir', ['val', 'test'])
def test_any_image_folder_trains(tmp_path, eval_dir):
    folder = make_image_folder(tmp_path / 'pets', eval_dir=eval_dir)
    out = tmp_path / 'run'
    rc = run_inprocess(['--dataset', folder, '--model', 'vit_minimal_std_6x1.cifar10', '--model-kwargs', 'depth=1',
                        '--batch-size', '8', '--epochs', '1', '--no-progress', '--cpu', '--cache-dir', tmp_path / 'cache',
                        '--output', out])
    assert rc == 0
    run = json.loads((out / 'run.json').read_text())
    assert run['num_classes'] == 3 and run['dataset']['classes'] == ['cat', 'dog', 'owl']
    assert run['dataset']['eval_split'] == eval_dir and run['recipe'] == 'default'
    assert metrics(out)[0]['test_samples'] == 12
    assert weights(out)['head.weight'].shape == (3, 60)
    cfg = json.loads((out / 'checkpoints' / 'best' / 'config.json').read_text())
    assert cfg['num_classes'] == 3 and cfg['pretrained_cfg']['label_names'] == ['cat', 'dog', 'owl']


def test_fine_tune_from_checkpoint_with_another_number_of_classes(reference, tmp_path):
    """--pretrained-path loads our safetensors through timm (the classifier of another size is replaced)."""
    folder = make_image_folder(tmp_path / 'pets', n_train=4, n_eval=2)
    out = tmp_path / 'run'
    src = reference / 'checkpoints' / 'best' / 'model.safetensors'
    rc = run_inprocess(['--dataset', folder, '--model', 'vit_minimal_std_mlp_6x1.mnist', '--model-kwargs', 'depth=2',
                        '--pretrained-path', src, '--batch-size', '4', '--epochs', '1', '--lr', '0', '--sched', 'none',
                        '--no-aug', '--no-progress', '--cpu', '--cache-dir', tmp_path / 'cache', '--output', out])
    assert rc == 0
    w, w0 = weights(out), load_file(str(src))
    assert w['head.weight'].shape == (3, 60)
    assert torch.equal(w['blocks.0.attn.qkv.weight'], w0['blocks.0.attn.qkv.weight'])  # lr 0: kept as loaded
    cfg = json.loads((out / 'checkpoints' / 'last' / 'config.json').read_text())
    assert 'file' not in cfg['pretrained_cfg'] and cfg['num_classes'] == 3


@pytest.mark.parametrize('argv, message', [
    (['--dataset', 'svhn', '--model', 'vit_minimal_std_6x1'], "Unknown dataset 'svhn': use one of mnist, cifar10, imagenet"),
    (['--dataset', 'mnist', '--model', 'vit_minimal_foo_6x1', '--data-dir', '{mnist}'], "Unknown model 'vit_minimal_foo_6x1'"),
    (['--dataset', 'mnist', '--model', 'vit_minimal_std_6x1', '--data-dir', '{tmp}', '--no-download'], 'MNIST not found'),
    (['--dataset', '{tmp}', '--model', 'vit_minimal_std_6x1'], 'must contain train/ and one of val/'),
    (['--dataset', 'mnist'], '--model is required'),
    (['--model', 'vit_minimal_std_6x1'], '--dataset is required'),
    (['--dataset', 'mnist', '--model', 'vit_minimal_std_6x1', '--recipe', 'svhn'], "Unknown recipe 'svhn'"),
    (['--resume', '{tmp}/nothing'], 'Cannot resume'),
])
def test_bad_input_is_named(argv, message, mnist_dir, tmp_path, capsys):
    argv = [str(a).replace('{tmp}', str(tmp_path)).replace('{mnist}', str(mnist_dir)) for a in argv]
    assert run_inprocess(argv + ['--output', tmp_path / 'out']) == train_mod.EXIT_BAD_INPUT
    assert message in capsys.readouterr().err


@pytest.mark.parametrize('model, kwargs, message', [
    ('vit_minimal_std_6x1', ['num_classes=5'], '--model-kwargs num_classes=...: the class count comes from the dataset'),
    ('vit_minimal_std_6x1', ["device='meta'"], '--model-kwargs device=...: the trainer places the model'),
    ('vit_minimal_std_6x1', ['features_only=True'], '--model-kwargs features_only=...: the trainer trains a classifier'),
    ('vit_minimal_std_6x1', ['depth=2', 'foo=1'], '--model-kwargs foo: not a keyword of vit_minimal_std_6x1; it takes '
                                                  'img_size, patch_size, in_chans,'),
    ('vit_minimal_std_6x1', ['=3'], "--model-kwargs '': not a keyword"),
    ('resnet18', ['num_classes=3'], '--model-kwargs num_classes=...'),
])
def test_model_kwargs_the_trainer_sets_or_the_model_lacks_are_refused_before_anything_is_written(
        model, kwargs, message, data, tmp_path, capsys):
    """They reached timm.create_model: a traceback (num_classes twice, a model on the meta device, a feature
    extractor's list of maps at the first loss, the last after writing the run folder) or timm's bare TypeError."""
    argv = ['--dataset', 'mnist', *data, '--model', model, '--model-kwargs', *kwargs, '--output', tmp_path / 'run']
    assert run_inprocess(argv) == 2
    err = capsys.readouterr().err
    assert message in err and 'Traceback' not in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / 'run').exists()


def test_model_kwargs_take_timms_factory_keywords():
    """What timm.create_model itself takes passes (a pretrained cfg overlay starts from a file, as with timm's
    train.py), for a vit_minimal model as for any other."""
    from timm_minimal.training.cli import check_model_kwargs
    overlay = {'pretrained_cfg_overlay': {'file': 'weights.safetensors'}, 'checkpoint_path': 'x.pth', 'depth': 2}
    for model in ('vit_minimal_sym_6x4.mnist', 'resnet18'):
        assert check_model_kwargs(argparse.Namespace(model=model, model_kwargs=overlay)) is None
    with pytest.raises(train_mod.UsageError, match=r'--model-kwargs foo: .* drop_path_rate, weight_init, pretrained_cfg, '
                                         r'pretrained_cfg_overlay, checkpoint_path, cache_dir'):
        check_model_kwargs(argparse.Namespace(model='vit_minimal_sym_6x4.mnist', model_kwargs={**overlay, 'foo': 1}))


def test_existing_run_folder_needs_resume(reference, data, capsys):
    assert run_inprocess(RESUME_ARGS + data + ['--output', reference]) == train_mod.EXIT_BAD_INPUT
    assert 'already exists and is not empty; pass --resume' in capsys.readouterr().err


def test_resume_with_a_model_refuses_a_folder_that_holds_no_run(data, tmp_path, capsys):
    """--resume with --model starts the run where a killed start left nothing but its lock file, as before; a
    folder of other files with no args.yaml is not a run: refused, and nothing is written into it."""
    folder = tmp_path / 'papers'
    folder.mkdir()
    (folder / 'thesis.tex').write_text('keep')
    assert run_inprocess(RESUME_ARGS + data + ['--resume', folder]) == train_mod.EXIT_BAD_INPUT
    err = capsys.readouterr().err
    assert f'Cannot resume {folder}: it holds no args.yaml, so it is not the folder of a timm-minimal-train run' in err
    assert [p.name for p in folder.iterdir()] == ['thesis.tex'] and err.count('\n') == 1
    started = tmp_path / 'started'
    started.mkdir()
    (started / '.lock').write_text('')
    args, _ = train_mod.parse_args([str(a) for a in (*RESUME_ARGS, *data, '--resume', started)])
    assert (args.model, args.output) == ('vit_minimal_std_mlp_6x1', str(started))


def test_recipe_then_command_line(tmp_path):
    args, prov = train_mod.parse_args(['--model', 'm', '--dataset', 'mnist', '--recipe', 'mnist'])
    assert (args.lr, args.batch_size, args.hflip, args.recipe) == (5e-3, 1024, 0.0, 'mnist')
    args, _ = train_mod.parse_args(['--model', 'm', '--dataset', 'mnist', '--recipe', 'mnist', '--lr', '5e-4',
                                    '--hflip', '0.5'])
    assert (args.lr, args.hflip, args.batch_size) == (5e-4, 0.5, 1024)
    args, _ = train_mod.parse_args(['--model', 'm', '--dataset', 'mnist', '--cpu'])
    assert (args.recipe, args.batch_size, args.epochs, args.lr) == ('mnist_cpu', 256, 16, 5e-3)  # a CPU's own
    args, _ = train_mod.parse_args(['--model', 'm', '--dataset', 'mnist-sample', '--cpu'])
    assert args.recipe == 'mnist_sample'  # the bundled sample keeps its recipe on a CPU
    args, _ = train_mod.parse_args(['--model', 'm', '--dataset', 'cifar10', '--no-aug'])
    assert args.hflip == 0.5 and args.no_aug is True and args.data_path == 'auto'
    assert args.recipe == ('cifar10' if torch.cuda.is_available() else 'cifar10_cpu')  # a CPU's own CIFAR-10 recipe
    args, _ = train_mod.parse_args(['--model', 'm', '--dataset', 'cifar10', '--cpu'])
    assert (args.recipe, args.batch_size, args.epochs, args.train_sizes) == ('cifar10_cpu', 256, 44,
                                                                       ['24@0%', '32@50%'])
    args, _ = train_mod.parse_args(['--model', 'm', '--dataset', 'cifar10', '--cpu', '--train-sizes'])
    assert args.train_sizes == []  # no entries: the model's size throughout, whatever the recipe says
    args, _ = train_mod.parse_args(['--model', 'm', '--dataset', 'cifar10', '--cpu', '--recipe', 'cifar10'])
    assert (args.recipe, args.batch_size) == ('cifar10', 2048)
    custom = tmp_path / 'mine.yaml'
    custom.write_text('lr: 0.01\nepochs: 3\n')
    args, _ = train_mod.parse_args(['--model', 'm', '--dataset', 'mnist', '--recipe', str(custom)])
    assert (args.lr, args.epochs) == (0.01, 3)
    custom.write_text('learning_rate: 0.01\n')
    with pytest.raises(train_mod.UsageError, match=r"unknown keys \['learning_rate'\]"):
        train_mod.parse_args(['--model', 'm', '--dataset', 'mnist', '--recipe', str(custom)])
    for name in ('mnist', 'mnist_cpu', 'mnist_sample', 'cifar10', 'cifar10_cpu', 'imagenet', 'default'):  # option names only
        assert set(train_mod.load_recipe(name)) <= set(vars(train_mod.build_parser().parse_args([])))


def test_the_cpu_cifar10_recipe_starts_a_minimal_transformer_mimetic_and_leaves_other_models_their_own(tmp_path):
    from typing import get_args
    from timm_minimal.models.model_args import WeightInitType
    from timm_minimal.training.cli import WEIGHT_INITS
    assert set(WEIGHT_INITS) - {'default'} == set(get_args(WeightInitType)) - {'', 'skip'}  # the models' starts
    cpu = ['--dataset', 'cifar10', '--cpu']
    assert train_mod.parse_args(['--model', 'vit_minimal_sym_6x4'] + cpu)[0].weight_init == 'mimetic'
    assert train_mod.parse_args(['--model', 'resnet18'] + cpu)[0].weight_init == 'default'  # the recipe's is ours
    assert train_mod.parse_args(['--model', 'vit_minimal_sym_6x4', '--recipe', 'cifar10'] + cpu)[0].weight_init == 'default'
    with pytest.raises(train_mod.UsageError, match='--weight-init mimetic sets the starting point of the vit_minimal'):
        train_mod.parse_args(['--model', 'resnet18', '--weight-init', 'mimetic'] + cpu)
    # a run started before the option existed resumes as it started: what its args.yaml lacks is the built-in
    # default, not the recipe's value of today
    run = tmp_path / 'run'
    run.mkdir()
    (run / 'args.yaml').write_text(yaml.safe_dump(dict(model='vit_minimal_sym_6x4.cifar10', dataset='cifar10',
                                                       cpu=True, recipe='cifar10_cpu', lr=1e-3)))
    args, _ = train_mod.parse_args(['--resume', str(run)])
    assert (args.weight_init, args.lr, args.recipe) == ('default', 1e-3, 'cifar10_cpu')


def test_weight_init_builds_the_model_from_that_start_and_records_it_and_model_kwargs_win(data, tmp_path):
    import timm
    argv = [str(a) for a in DDP_ARGS + data] + ['--weight-init', 'mimetic']

    def built(*extra):
        args, provenance = train_mod.parse_args(argv + list(extra) + ['--output', str(tmp_path / 'built')])
        plan = resolve_plan(args, provenance, split=False)
        return (plan.model, *train_mod.build_model(plan.model, plan.options.model, 10, plan.options.run.seed))

    name, model, kwargs = built()
    assert kwargs == {'depth': 1, 'weight_init': 'mimetic'}
    torch.manual_seed(0)
    reference = timm.create_model(name, num_classes=10, depth=1, weight_init='mimetic')
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), reference.state_dict().values()))
    assert built('--model-kwargs', 'depth=1', "weight_init=''")[2] == {'depth': 1, 'weight_init': ''}  # it wins
    run = tmp_path / 'run'
    assert run_inprocess(argv + ['--train-subset', '32', '--epochs', '1', '--eval-subset', '32', '--output', run]) == 0
    assert json.loads((run / 'run.json').read_text())['model_kwargs'] == {'depth': 1, 'weight_init': 'mimetic'}
    assert yaml.safe_load((run / 'args.yaml').read_text())['weight_init'] == 'mimetic'


@pytest.mark.parametrize('option, value, allowed', [
    ('--epochs', '0', 'an integer of at least 1'), ('--epochs', '-2', 'an integer of at least 1'),
    ('--batch-size', '0', 'an integer of at least 1'), ('--num-workers', '-1', 'an integer of at least 0'),
    ('--eval-subset', '0', 'an integer of at least 1'), ('--train-subset', '-1', 'an integer of at least 1'),
    ('--clip-grad', '-1', 'a finite number above 0'), ('--seed', '18446744073709551616', 'an integer of at least 0'),
    ('--smoothing', '1.5', 'below 1'), ('--device-data-limit', 'nan', 'a finite number above 0'),
    ('--lr', 'inf', 'a finite number of at least 0'), ('--hflip', '2', 'at most 1'), ('--drop-path', '1', 'below 1'),
    ('--rotate', '200', 'at most 180'), ('--opt-betas', '1.5', 'below 1'),
    ('--distill-temperature', '1e-30', 'a finite number of at least 0.1'),
    ('--train-sizes', '24', 'SIZE@EPOCH or SIZE@P%'),
])
def test_bad_numbers_are_named(option, value, allowed, data, tmp_path, capsys):
    """Every number is checked at the door: one line naming the option and its range, exit 2, nothing written."""
    argv = DDP_ARGS + data + [option, value, '--output', tmp_path / 'run']
    with pytest.raises(SystemExit) as e:
        run_inprocess(argv)
    err = capsys.readouterr().err
    assert e.value.code == train_mod.EXIT_BAD_INPUT and err.count('\n') == 1, err
    assert f'argument {option}: ' in err and allowed in err, err
    assert not (tmp_path / 'run').exists()


@pytest.mark.parametrize('line, message', [
    ('clip_grad: -1', 'clip_grad must be a finite number above 0, got -1'),
    ('smoothing: 1.5', 'smoothing must be a finite number of at least 0 and below 1'),
    ('seed: 18446744073709551616', 'seed must be an integer of at least 0'),
    ('epochs: 2.5', 'epochs must be an integer'), ('lr: .nan', 'lr must be a finite number of at least 0'),
    ('scale: [0.5]', 'scale takes 2 values'), ('hflip: yes', 'hflip must be a finite number'),
    ('weight_init: jax', 'weight_init must be one of default, mimetic, got'),
    ('clip_mode: agc', 'clip_mode must be one of norm, value, got'),
    ('train_sizes: [24]', 'train_sizes must be SIZE@EPOCH or SIZE@P%'), ('train_sizes: [0@1]', "got '0@1'"),
])
def test_recipes_and_args_yaml_pass_the_same_checks(line, message, data, tmp_path, capsys):
    recipe = tmp_path / 'r.yaml'
    recipe.write_text(line + '\n')
    assert run_inprocess(DDP_ARGS + data + ['--recipe', recipe, '--output', tmp_path / 'a']) == train_mod.EXIT_BAD_INPUT
    assert message in capsys.readouterr().err
    run = tmp_path / 'run'
    assert run_inprocess(DDP_ARGS + data + ['--epochs', '1', '--output', run]) == 0
    import yaml
    saved = yaml.safe_load((run / 'args.yaml').read_text())
    saved.update(yaml.safe_load(line))
    (run / 'args.yaml').write_text(yaml.safe_dump(saved))
    assert run_inprocess(['--resume', run, '--epochs', '2']) == train_mod.EXIT_BAD_INPUT
    assert message in capsys.readouterr().err and len(metrics(run)) == 1


def test_os_errors_the_user_can_cause_are_one_line(data, tmp_path, capsys, monkeypatch):
    """An --output that is a file, and a folder the run cannot write (a read-only file system: the OS error is
    raised where the run folder is prepared), end in one line naming the path and the cause."""
    (tmp_path / 'afile').write_text('x')
    assert run_inprocess(DDP_ARGS + data + ['--output', tmp_path / 'afile']) == train_mod.EXIT_BAD_INPUT
    err = capsys.readouterr().err
    assert err.count('\n') == 1 and f'--output {tmp_path / "afile"} is a file' in err
    import errno
    from timm_minimal.training.run.folder import RunFolder

    def read_only(self):
        raise OSError(errno.EROFS, 'Read-only file system', str(self.path))
    monkeypatch.setattr(RunFolder, 'prepare', read_only)
    assert run_inprocess(DDP_ARGS + data + ['--output', tmp_path / 'ro']) == train_mod.EXIT_WRITE_FAILED
    err = capsys.readouterr().err
    assert err.count('\n') == 1 and 'Traceback' not in err and f'{tmp_path / "ro"}: the file system is read-only' in err


def test_a_failed_start_leaves_no_folder_and_a_killed_start_is_named(mnist_dir, tmp_path, capsys):
    out = tmp_path / 'new' / 'run'
    argv = ['--model', 'vit_minimal_std_6x1', '--dataset', 'mnist', '--data-dir', tmp_path / 'nothing', '--no-download',
            '--output', out]
    assert run_inprocess(argv) == train_mod.EXIT_BAD_INPUT
    assert 'MNIST not found' in capsys.readouterr().err and list(tmp_path.iterdir()) == []
    out.mkdir(parents=True)
    (out / '.lock').write_text('123\n')  # a start killed before it wrote its options
    assert run_inprocess(['--resume', out]) == train_mod.EXIT_BAD_INPUT
    assert 'stopped before it wrote its options' in capsys.readouterr().err


def test_unreadable_files_are_named(reference, data, tmp_path, capsys):
    bad = tmp_path / 'truncated.safetensors'
    bad.write_bytes((reference / 'checkpoints' / 'last' / 'model.safetensors').read_bytes()[:100])
    rc = run_inprocess(DDP_ARGS + data + ['--pretrained-path', bad, '--output', tmp_path / 'a'])
    assert rc == train_mod.EXIT_BAD_INPUT and 'Cannot build' in capsys.readouterr().err
    run = tmp_path / 'b'
    assert run_inprocess(DDP_ARGS + data + ['--epochs', '1', '--output', run]) == 0
    (run / 'checkpoints' / 'last' / 'training_state.pt').write_bytes(b'not a checkpoint')
    assert run_inprocess(['--resume', run, '--epochs', '2']) == train_mod.EXIT_BAD_INPUT
    assert 'its checkpoint files cannot be read' in capsys.readouterr().err


def test_resume_takes_a_new_learning_rate_and_refuses_another_optimizer(data, tmp_path, capsys):
    run = tmp_path / 'run'
    assert run_inprocess(DDP_ARGS + data + ['--epochs', '1', '--sched', 'none', '--lr', '1e-3', '--output', run]) == 0
    assert metrics(run)[0]['lr'] == 1e-3
    assert run_inprocess(['--resume', run, '--epochs', '2', '--lr', '2e-4']) == 0
    assert metrics(run)[1]['lr'] == 2e-4
    assert run_inprocess(['--resume', run, '--epochs', '3', '--opt', 'sgd']) == train_mod.EXIT_BAD_INPUT
    err = capsys.readouterr().err
    assert '--opt cannot change when resuming' in err and 'adamw' in err and '--pretrained-path' in err


@pytest.mark.parametrize('name, fused', [('adamw', True), ('adam', True), ('sgd', None)])
def test_adam_and_adamw_are_the_fused_kernel_on_the_cpu(name, fused):
    from timm_minimal.training.options import OptimisationOptions
    opt = OptimisationOptions(opt=name, lr=1e-3, weight_decay=0.05, opt_betas=[] if name == 'sgd' else [0.9, 0.95],
                              sched='none', warmup_epochs=0, warmup_lr=0.0, min_lr=0.0, clip_grad=None, model_ema=False)
    optimizer, _ = train_mod.build_optimization(opt, 1, torch.nn.Linear(4, 2), 1, torch.device('cpu'))
    assert optimizer.defaults.get('fused') is fused


def test_the_decisions_probe_steps_adamw_as_the_trainer_does(monkeypatch):
    from timm_minimal.training.cpu.split import _training_step
    built, adamw = [], torch.optim.AdamW
    monkeypatch.setattr(torch.optim, 'AdamW', lambda *a, **k: built.append(adamw(*a, **k)) or built[-1])
    net, step = _training_step('vit_minimal_sym_6x4.mnist', 2, 1, None, False)
    assert torch.isfinite(step(net)) and [o.defaults['fused'] for o in built] == [True]


def test_one_class_folder_is_refused(tmp_path, capsys):
    folder = make_image_folder(tmp_path / 'one', classes=('cat',))
    rc = run_inprocess(['--dataset', folder, '--model', 'vit_minimal_std_6x1.cifar10', '--cpu', '--epochs', '1',
                        '--batch-size', '4', '--output', tmp_path / 'run'])
    assert rc == train_mod.EXIT_BAD_INPUT and 'a classifier needs at least two classes' in capsys.readouterr().err


def test_warmup_is_capped_at_a_quarter_of_the_run(data, tmp_path, capsys):
    rc = run_inprocess(DDP_ARGS + data + ['--epochs', '1', '--warmup-epochs', '2', '--output', tmp_path / 'run'])
    assert rc == 0
    assert '--warmup-epochs 2 is more than 25% of the run\'s 1 epochs: warming up for 0.25 epochs' in capsys.readouterr().out
    assert metrics(tmp_path / 'run')[0]['lr'] < 1e-3  # past the warm-up, decaying


def test_help_shows_the_defaults_that_apply(capsys):
    with pytest.raises(SystemExit) as e:
        train_mod.main(['--dataset', 'mnist', '--help'])
    out = capsys.readouterr().out
    recipe, batch = ('mnist', 1024) if torch.cuda.is_available() else ('mnist_cpu', 256)  # the recipe a run takes here
    assert e.value.code == 0 and f'(default: {batch})' in out and '(default: 0.005)' in out
    assert f'Defaults shown are those of the {recipe} recipe' in out
    with pytest.raises(SystemExit):
        train_mod.main(['--help'])
    out = capsys.readouterr().out  # without a dataset: the default recipe's, what an image folder trains with
    assert '(default: 128)' in out and '(default: 0.005)' in out and 'those of the default recipe' in out
    # the training keys have one home, the recipes: the parser's defaults are the default recipe's
    from timm_minimal.training.cli import build_parser, load_recipe
    defaults = vars(build_parser().parse_args([]))
    assert all(defaults[k] == v for k, v in load_recipe('default').items())


def test_a_failing_compilation_falls_back_to_eager(data, tmp_path, capsys, monkeypatch):
    """torch.compile that breaks at the first step: a warning, then the run trains the plain model to the end."""
    def broken_compile(model, **kwargs):
        class Broken(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self._orig_mod = model

            def forward(self, x):
                raise RuntimeError('backend compiler failed')
        return Broken()
    monkeypatch.setattr(torch, 'compile', broken_compile)
    assert run_inprocess(DDP_ARGS + data + ['--epochs', '1', '--compile', '--output', tmp_path / 'run']) == 0
    err = capsys.readouterr().err
    assert 'WARNING: torch.compile failed (RuntimeError: backend compiler failed); training without compilation' in err
    assert metrics(tmp_path / 'run')[0]['update'] == 12
    launch = json.loads((tmp_path / 'run' / 'run.json').read_text())['launches'][-1]
    assert launch['compiled'] is False and launch['compile_mode'] is None  # run.json says what ran


@pytest.mark.slow
def test_elapsed_leaves_out_what_the_shell_ran_before_python(data, tmp_path):
    """A shell line that runs something and then execs the trainer: the process is the shell's, created before the
    wait, yet ``elapsed`` counts from the trainer's interpreter."""
    out = tmp_path / 'run'
    argv = ' '.join(map(str, [sys.executable, '-m', 'timm_minimal.training.train', '--model', 'vit_minimal_sym_6x1',
                                  '--model-kwargs', 'depth=1', '--output', out] + BASE + data + ['--epochs', '1']))
    start = time.perf_counter()
    r = run_subprocess([f'sleep 6 && exec {argv}'], launcher=('bash', '-c'))
    wall = time.perf_counter() - start
    assert r.returncode == 0, r.stderr[-2000:]
    elapsed = json.loads((out / 'metrics.jsonl').read_text().splitlines()[-1])['elapsed']
    assert 0 < elapsed < wall - 5, (elapsed, wall)


def test_a_run_in_this_process_leaves_the_thread_count_it_found(tmp_path, data):
    """The trainer runs on the threads its plan says (--threads 1, which the run records) and sets torch's count back
    to what the process had: a library call leaves no global state behind."""
    from timm_minimal.machine import torch_threads
    out = tmp_path / 'run'
    with torch_threads(2):
        assert run_inprocess(BASE + data + ['--model', 'vit_minimal_sym_6x4', '--model-kwargs', 'depth=1',
                                            '--epochs', '1', '--eval-subset', '64', '--output', out]) == 0
        assert torch.get_num_threads() == 2
    assert json.loads((out / 'run.json').read_text())['launches'][0]['torch_threads'] == 1


def test_fp16_on_a_cpu_is_refused_where_it_trained_in_fp32(data, tmp_path, capsys):
    assert run_inprocess(DDP_ARGS + data + ['--mixed-precision', 'fp16', '--output', tmp_path / 'run']) == 2
    err = capsys.readouterr().err
    assert '--mixed-precision fp16 does not run on a CPU' in err and err.count('\n') == 1, err
    assert not (tmp_path / 'run').exists()


def test_a_launchers_environment_that_cannot_start_is_one_line(data, tmp_path, capsys):
    """WORLD_SIZE=1000000 without the rest of a launcher's variables ended in accelerate's traceback."""
    import os
    from unittest import mock
    with mock.patch.dict(os.environ, WORLD_SIZE='1000000'):  # accelerate adds RANK, MASTER_PORT, ...: all undone
        assert run_inprocess(DDP_ARGS + data + ['--output', tmp_path / 'run']) == 2
    err = capsys.readouterr().err
    assert 'accelerate cannot start this process (WORLD_SIZE=1000000' in err and err.count('\n') == 1, err
    assert not (tmp_path / 'run').exists()


def test_a_finished_run_says_where_it_went_and_what_to_run_next(data, tmp_path, capsys):
    out = tmp_path / 'run'
    assert run_inprocess(DDP_ARGS + data + ['--output', out]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    final = json.loads((out / 'run.json').read_text())['final']
    assert lines[-4].startswith(f'Finished vit_minimal_std_mlp_6x1.mnist in {out}: test accuracy '
                                f'{final["test_acc"]:.2f}% at epoch 2')
    assert lines[-3] == (f'  evaluate: timm-minimal-evaluate --model local-dir:{out / "checkpoints" / "last"} '
                         f'--dataset mnist --data-dir {data[1]}')
    assert lines[-2].startswith('  export:   timm-minimal-export --model local-dir:')
    assert lines[-1] == f'  publish:  timm-minimal-publish {out} --repo-id <user>/run'


def test_pretrained_weights_say_what_they_bring_and_a_head_of_other_classes_starts_anew(tmp_path, capsys):
    """--pretrained onto another dataset of the same class count kept the old head silently (its first train loss was
    above a fresh head's); the run says what it loaded, and the head starts anew where its classes are others'."""
    import timm
    folder = make_image_folder(tmp_path / 'pets', classes=[f'kind{i}' for i in range(10)], n_train=2, n_eval=1)
    common = ['--dataset', folder, '--model', 'vit_minimal_sym_6x4.cifar10', '--batch-size', '8', '--epochs', '1',
              '--no-progress', '--cpu', '--cache-dir', tmp_path / 'cache', '--pretrained']
    assert run_inprocess(common + ['--output', tmp_path / 'other']) == 0
    out = capsys.readouterr().out
    assert ("Loaded the weights of vit_minimal_sym_6x4.cifar10; its head predicts airplane, automobile, bird, cat, "
            "deer, ..., not the data's kind0, kind1, kind2, kind3, kind4, ...: the run trains a new 10-class head.") in out
    zoo = timm.create_model('vit_minimal_sym_6x4.cifar10', pretrained=True)
    blocks = {k: v for k, v in weights(tmp_path / 'other').items() if k.startswith('blocks.')}
    assert blocks and all(v.shape == zoo.state_dict()[k].shape for k, v in blocks.items())
    cifar = make_image_folder(tmp_path / 'cifar', classes=list(zoo.pretrained_cfg['label_names']), n_train=2,
                              n_eval=1)
    assert run_inprocess(common[:1] + [cifar] + common[2:] + ['--output', tmp_path / 'same']) == 0
    assert ('Loaded the weights of vit_minimal_sym_6x4.cifar10, its head included (10 classes: airplane, '
            'automobile, bird, cat, deer, ...).') in capsys.readouterr().out
    kinds = [f'kind{i}' for i in range(10)]
    for classes, kept in ((kinds, False), (list(zoo.pretrained_cfg['label_names']), True)):
        model = timm.create_model('vit_minimal_sym_6x4.cifar10', pretrained=True)
        train_mod._pretrained_head(model, 'x', classes)
        assert torch.equal(model.head.weight, zoo.head.weight) is kept
    three = timm.create_model('vit_minimal_sym_6x4.cifar10', pretrained=True, num_classes=3)  # timm's new head
    assert train_mod._pretrained_head(three, 'x', ['cat', 'dog', 'owl']) == (
        'Loaded the weights of x; its 10-class head is replaced by a new 3-class one.')


def test_a_tracker_whose_package_is_missing_is_refused_by_the_extra_that_installs_it(data, tmp_path, capsys):
    import importlib.util
    if importlib.util.find_spec('mlflow') is not None:
        pytest.skip('mlflow is installed here: nothing is missing')
    assert run_inprocess(DDP_ARGS + data + ['--log-with', 'tensorboard', 'mlflow', '--output', tmp_path / 'run']) == 2
    assert ('error: --log-with mlflow needs mlflow, which is not installed: pip install -e ".[mlflow]" in the '
            "project's folder (or: pip install mlflow)") in capsys.readouterr().err
    assert not (tmp_path / 'run').exists()


def test_the_trainer_logs_to_the_package_logger_and_q_keeps_only_warnings(data, tmp_path, capsys):
    """The run's lines are records of the ``timm_minimal`` logger (a caller redirects or silences them as any log);
    the console shows them as before, and ``-q`` leaves warnings and errors alone."""
    import logging
    said = []

    class Keep(logging.Handler):
        def emit(self, record):
            said.append(record.getMessage())
    keep = Keep()
    logging.getLogger('timm_minimal').addHandler(keep)
    try:
        assert run_inprocess(DDP_ARGS + data + ['--epochs', '1', '--output', tmp_path / 'a']) == 0
        out = capsys.readouterr().out
        assert any(line.startswith('epoch 1/1: train loss') for line in said)
        assert [line for line in said if line.startswith('epoch 1/1')] == \
            [line for line in out.splitlines() if line.startswith('epoch 1/1')]
        said.clear()
        assert run_inprocess(DDP_ARGS + data + ['--epochs', '1', '--output', tmp_path / 'b', '-q']) == 0
        assert said == [] and capsys.readouterr().out == ''
        assert (tmp_path / 'b' / 'checkpoints' / 'last' / 'model.safetensors').is_file()
    finally:
        logging.getLogger('timm_minimal').removeHandler(keep)


@pytest.mark.parametrize('machine, cpu_flag, recipe, epochs', [('mps', False, 'mnist', 40), ('mps', True, 'mnist_cpu', 16),
                                                               ('cpu', False, 'mnist_cpu', 16)])
def test_the_device_is_decided_once_and_the_help_shows_the_recipe_a_run_would_use(monkeypatch, capsys, machine,
                                                                                 cpu_flag, recipe, epochs):
    """One rule decides the device (an Apple GPU here: torch's availability checks patched), and the recipe follows
    it: the console script's help and the module's both show that recipe's defaults, and the run plans it."""
    import timm_minimal_scripts
    monkeypatch.setattr(torch.cuda, 'is_available', lambda: False)
    if hasattr(torch, 'xpu'):
        monkeypatch.setattr(torch.xpu, 'is_available', lambda: False)
    monkeypatch.setattr(torch.backends.mps, 'is_available', lambda: machine == 'mps')
    argv = ['--dataset', 'mnist', '--model', 'vit_minimal_sym_6x4'] + (['--cpu'] if cpu_flag else [])
    for show_help in (lambda: timm_minimal_scripts.run('timm-minimal-train', argv + ['--help']),
                      lambda: train_mod.parse_args(argv + ['--help'])):
        with pytest.raises(SystemExit) as e:
            show_help()
        out = capsys.readouterr().out
        assert e.value.code == 0 and f'Defaults shown are those of the {recipe} recipe (--dataset mnist).' in out
        assert re.search(rf'--epochs EPOCHS\s+\(default: {epochs}\)', out), out
    args, provenance = train_mod.parse_args(argv)
    plan = resolve_plan(args, provenance, split=False)
    assert (plan.recipe, plan.device, args.epochs) == (recipe, 'cpu' if cpu_flag else machine, epochs)


def test_a_resume_restores_the_random_states_the_batches_draw_from(reference, data, tmp_path):
    """Stopped after its first epoch and resumed, a run with random erasing ends bit for bit where the uninterrupted
    one ends: erasing draws its noise when a batch is made, before the step's own seeding, from the generator states
    the checkpoint saved (without their restore, blocks.0.attn.proj.bias differs)."""
    from timm_minimal.training.engine import TrainHooks

    class StopAfterTheFirstEpoch(TrainHooks):
        def after_epoch(self, row):
            raise KeyboardInterrupt
    out = tmp_path / 'run'
    reset_accelerate_state()
    argv = [str(a) for a in RESUME_ARGS + data + ['--data-path', 'device', '--output', out]]
    assert train_mod.main(argv, hooks=StopAfterTheFirstEpoch()) == 130
    assert state(out)['epoch'] == 1
    assert run_inprocess(['--resume', out]) == 0
    assert_same_run(reference, out)


@pytest.mark.slow  # several seconds: the whole suite runs it
def test_another_timm_model_trains_and_its_checkpoint_records_no_vit_minimal_keywords(data, tmp_path):
    """The trainer takes any timm model: its checkpoint holds the weights without the keywords record of a
    vit_minimal model (the record's writer asked every model for them, and a ResNet stopped the run)."""
    out = tmp_path / 'run'
    assert run_inprocess(BASE + data + ['--model', 'resnet10t', '--epochs', '1', '--train-subset', '64',
                                        '--eval-subset', '32', '--output', out]) == 0
    assert recorded_keywords(out / 'checkpoints' / 'last' / 'model.safetensors') == {}
