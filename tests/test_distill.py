"""Beyond the paper's recipe: timm's factory keywords, the mimetic initialisation of every attention variant, and
distillation in the trainer through timm's task API (``timm_minimal.training.distill``)."""
import json

import pytest
import torch
import torch.nn.functional as F
import timm
from timm.task import LogitDistillationTask, TokenDistillationTask

import timm_minimal  # noqa: F401
from timm_minimal.models.layers import ATTENTION_LAYERS, MimeticInit
from timm_minimal.training import train as train_mod
from timm_minimal.training.distill import build_distillation, build_teacher
from timm_minimal.training.options import DistillationOptions

from trainer_runs import BASE, assert_same_run, run_inprocess, run_killed, weights

torch.set_num_threads(1)

# a small student, a zoo teacher (MNIST geometry); 384 digits in batches of 32: 12 updates an epoch
KD_ARGS = BASE + ['--model', 'vit_minimal_sym_6x1', '--model-kwargs', 'depth=2', '--eval-subset', '200',
                  '--teacher', 'vit_minimal_std_mlp_6x1', '--checkpoint-interval', '4']



def test_timm_factory_keywords_device_and_dtype():
    model = timm.create_model('vit_minimal_std_mlp_6x4.cifar10', pretrained=True, device='cpu', dtype=torch.float64)
    assert {p.dtype for p in model.parameters()} == {torch.float64}
    assert model(torch.zeros(1, 3, 32, 32, dtype=torch.float64)).dtype == torch.float64
    # timm's own distillation task builds a vit_minimal teacher by name (it passes device and dtype)
    student = timm.create_model('vit_minimal_sym_6x4.cifar10')
    task = LogitDistillationTask(student, 'vit_minimal_std_mlp_6x4.cifar10', criterion=torch.nn.CrossEntropyLoss(),
                                 verbose=False)
    out = task(torch.randn(2, 3, 32, 32), torch.tensor([0, 1]))
    assert torch.isfinite(out['loss'])


def _products(attn):
    """(W_Q W_K^T, W_V W_O) of an attention layer at initialisation, in the x W convention (None where absent)."""
    if hasattr(attn, 'qkv'):
        w_q, w_k, w_v = attn.qkv.weight.chunk(3)
        return w_q.t() @ w_k, w_v.t() @ attn.proj.weight.t()
    if hasattr(attn, 'qv'):
        w_q, w_v = attn.qv.weight.chunk(2)
        return w_q.t() @ w_q, w_v.t() @ attn.proj.weight.t()
    if hasattr(attn, 'tril'):
        return attn.w_qk(), attn.v.weight.t() @ attn.proj.weight.t()
    vo = attn.v.weight.t() @ attn.proj.weight.t() if hasattr(attn, 'v') else None
    return attn.w_qk.weight.t(), vo


@pytest.mark.parametrize('attn_type, heads', [(name, 1) for name in ATTENTION_LAYERS] + [
    (name, 4) for name, layer in ATTENTION_LAYERS.items() if not layer.single_head_only])
def test_mimetic_initialisation_sets_the_products(attn_type, heads):
    cfg = MimeticInit()
    torch.manual_seed(0)
    plain = timm.create_model(f'vit_minimal_{attn_type}_6x{heads}')
    torch.manual_seed(0)
    mimetic = timm.create_model(plain.default_cfg['architecture'], weight_init='mimetic')
    for blk_plain, blk in zip(plain.blocks, mimetic.blocks):
        qk, vo = _products(blk.attn)
        qk_plain, _ = _products(blk_plain.attn)
        assert abs(qk.diagonal().mean() - cfg.qk_beta) < 0.15, 'W_Q W_K^T starts near qk_beta I'
        assert abs(qk_plain.diagonal().mean()) < 0.05, 'timm\'s initialisation has no identity in it'
        off = qk - torch.diag(qk.diagonal())
        assert off.abs().mean() < 0.2
        if attn_type in ('sym', 'chol'):  # W W^T: symmetric positive semi-definite
            assert torch.allclose(qk, qk.t(), atol=1e-5)
            assert torch.linalg.eigvalsh((qk + qk.t()) / 2).min() > -1e-4
        if vo is not None:
            assert abs(vo.diagonal().mean() + cfg.vo_beta) < 0.1, 'W_V W_O starts near -vo_beta I'
    assert torch.isfinite(mimetic(torch.randn(2, 1, 28, 28))).all()


def test_mimetic_changes_only_the_starting_point():
    model = timm.create_model('vit_minimal_sym_6x4.cifar10', pretrained=True)
    mimetic = timm.create_model('vit_minimal_sym_6x4.cifar10', pretrained=True, weight_init='mimetic')
    x = torch.randn(4, 3, 32, 32)
    assert torch.equal(model.eval()(x), mimetic.eval()(x))
    with pytest.raises(ValueError, match="weight_init 'jax'"):
        timm.create_model('vit_minimal_sym_6x4', weight_init='jax')


def _options(distill_type, temperature=1.0, weight=None, task_weight=None):
    return DistillationOptions(teacher='vit_minimal_std_mlp_6x1.mnist', teacher_labels_by_order=False,
                               distill_type=distill_type, distill_temperature=temperature, distill_weight=weight,
                               distill_task_weight=task_weight)


def _task(distill_type, weight=None, task_weight=None, temperature=2.0, **student_kwargs):
    torch.manual_seed(0)
    student = timm.create_model('vit_minimal_sym_6x1.mnist', depth=1, **student_kwargs)
    teacher = build_teacher('vit_minimal_std_mlp_6x1.mnist', 10, (1, 28, 28), torch.device('cpu'))
    task = build_distillation(student, teacher, torch.nn.CrossEntropyLoss(), _options(distill_type, temperature, weight,
                                                                                      task_weight),
                              (0.1307,), (0.3081,), torch.device('cpu'))
    return student, teacher, task


def test_the_soft_loss_is_timms_and_the_teacher_learns_nothing():
    student, teacher, task = _task('soft', weight=0.7, task_weight=0.3)
    assert isinstance(task, LogitDistillationTask)
    before = {k: v.clone() for k, v in teacher.state_dict().items()}
    x, y = torch.randn(8, 1, 28, 28), torch.randint(0, 10, (8,))
    out = task(x, y)
    s, t = student(x), teacher(x)
    kd = F.kl_div(F.log_softmax(s / 2, -1), F.log_softmax(t / 2, -1), reduction='batchmean', log_target=True) * 4
    assert torch.allclose(out['loss'], 0.3 * F.cross_entropy(s, y) + 0.7 * kd, atol=1e-6)
    out['loss'].backward()
    assert all(p.grad is None and not p.requires_grad for p in teacher.parameters())
    assert any(p.grad is not None for p in student.parameters())
    assert not teacher.training
    assert all(torch.equal(before[k], v) for k, v in teacher.state_dict().items())


@pytest.mark.parametrize('distill_type', ['soft', 'hard'])
def test_every_tensor_of_the_task_sits_on_the_training_device(distill_type):
    """The teacher's normalisation buffers follow the run's device, as the student's do: left on the CPU, a GPU run
    failed at its first step (``torch.equal`` across devices). ``meta`` stands for any device but the CPU."""
    device = torch.device('meta')
    student = timm.create_model('vit_minimal_sym_6x1.mnist', depth=1, device=device)
    teacher = build_teacher('vit_minimal_std_mlp_6x1.mnist', 10, (1, 28, 28), device)
    task = build_distillation(student, teacher, torch.nn.CrossEntropyLoss(), _options(distill_type), (0.1307,),
                              (0.3081,), device)
    tensors = [*task.buffers(), *task.parameters()]
    assert len(tensors) > 4 and {t.device for t in tensors} == {device}


def test_the_hard_loss_takes_the_teachers_top_class():
    student, teacher, task = _task('hard')
    x, y = torch.randn(8, 1, 28, 28), torch.randint(0, 10, (8,))
    out = task(x, y)
    s, t = student(x), teacher(x)
    assert torch.allclose(out['loss'], F.cross_entropy(s, y) + F.cross_entropy(s, t.argmax(-1)), atol=1e-6)


@pytest.mark.parametrize('distill_type', ['token', 'hard-token'])
def test_the_token_losses_are_timms_on_the_distillation_head(distill_type):
    """timm's TokenDistillationTask: the task loss on the student's head, the teacher's on its distillation token's
    head; the output is the first head's, and the student in evaluation predicts the mean of the two."""
    student, teacher, task = _task(distill_type, distill_token=True)
    assert isinstance(task, TokenDistillationTask) and student.distilled_training
    x, y = torch.randn(8, 1, 28, 28), torch.randint(0, 10, (8,))
    out = task(x, y)
    s, s_dist = student(x)
    t = teacher(x)
    if distill_type == 'token':
        kd = F.kl_div(F.log_softmax(s_dist / 2, -1), F.log_softmax(t / 2, -1), reduction='batchmean',
                      log_target=True) * 4
    else:
        kd = F.cross_entropy(s_dist, t.argmax(-1))
    assert not torch.allclose(s, s_dist)
    assert torch.allclose(out['loss'], F.cross_entropy(s, y) + kd, atol=1e-6) and torch.equal(out['output'], s)
    out['loss'].backward()
    assert student.dist_token.grad.abs().sum() > 0 and student.head_dist.weight.grad.abs().sum() > 0
    assert all(p.grad is None for p in teacher.parameters())
    student.eval()
    assert torch.allclose(student(x), (s + s_dist) / 2, atol=1e-6)


def test_a_distilled_run_records_its_teacher(data, tmp_path):
    out = tmp_path / 'run'
    assert run_inprocess(KD_ARGS + data + ['--epochs', '1', '--output', out]) == 0
    run = json.loads((out / 'run.json').read_text())
    teacher = run['teacher']
    assert teacher['name'] == 'vit_minimal_std_mlp_6x1.mnist' and teacher['distill_type'] == 'soft'
    assert 90 < teacher['test_acc'] <= 100  # measured on the run's 200 evaluation digits
    assert run['args']['teacher'] == 'vit_minimal_std_mlp_6x1'
    from timm_minimal.tools.hub.publish import export_run
    card = (export_run(out, tmp_path / 'hub', 'me/vit_minimal_sym_6x1.mnist') / 'README.md').read_text()
    assert f"Distilled from `vit_minimal_std_mlp_6x1.mnist` (279,106 parameters, {teacher['test_acc']:.2f}%" in card
    assert 'soft, KL divergence at temperature 1, loss weights task 1 / distillation 1' in card


@pytest.mark.slow
@pytest.mark.skipif(not torch.cuda.is_available(), reason='needs a CUDA GPU: a distilled run on the GPU')
def test_a_distilled_run_trains_on_a_gpu(data, tmp_path):
    """The whole step on the GPU, teacher included (its normalisation buffers had stayed on the CPU)."""
    out = tmp_path / 'run'
    args = [a for a in KD_ARGS if a != '--cpu'] + data + ['--epochs', '1', '--output', out, '--no-compile']
    assert run_inprocess(args) == 0
    run = json.loads((out / 'run.json').read_text())
    assert run['launches'][-1]['device'] == 'cuda' and run['teacher']['name'] == 'vit_minimal_std_mlp_6x1.mnist'


@pytest.mark.slow  # a killed subprocess and two runs: 10 s; the quick suite keeps the distilled run's record
@pytest.mark.parametrize('distill_type', ['soft', 'hard-token'])
def test_resume_with_a_teacher_is_bit_exact(distill_type, data, tmp_path):
    reference, out = tmp_path / 'reference', tmp_path / 'run'
    args = KD_ARGS + data + ['--distill-type', distill_type]
    assert run_inprocess(args + ['--output', reference]) == 0
    killed = run_killed(args + ['--output', out], at_update=18)
    assert killed.returncode == -9, killed.stderr
    assert run_inprocess(['--resume', out]) == 0
    assert_same_run(reference, out)
    assert weights(out).keys() == weights(reference).keys()


@pytest.mark.parametrize('extra, message', [
    (['--teacher', 'vit_minimal_std_mlp_6x4.cifar10'], 'takes inputs of 3x32x32, the student 1x28x28'),
    (['--teacher', 'vit_minimal_std_mlp_6x1.in1k'], 'cannot build it with pretrained weights'),
    (['--teacher', 'vit_minimal_std_mlp_6x1', '--distill-type', 'token', '--model-kwargs', 'distill_token=False'],
     'needs a student with a distillation token'),
    (['--teacher', 'no_such_model'], "Unknown model 'no_such_model'"),
    (['--teacher', 'vit_minimal_std_mlp_6x1', '--distill-weight', '0', '--distill-task-weight', '0'],
     'the distillation loss weight is 0: the teacher would not enter the loss'),
    (['--teacher', 'vit_minimal_std_mlp_6x1', '--distill-task-weight', '1'],
     'timm takes 1 - --distill-task-weight 1 where --distill-weight is not given'),
])
def test_a_teacher_that_does_not_fit_is_refused_in_one_line(extra, message, data, tmp_path, capsys):
    argv = BASE + data + ['--model', 'vit_minimal_sym_6x1', '--output', tmp_path / 'run'] + extra
    assert run_inprocess(argv) == 2
    err = capsys.readouterr().err
    assert message in err and 'Traceback' not in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / 'run').exists()


def test_a_run_distilled_through_a_token_records_it_and_predicts_with_both_heads(data, tmp_path):
    """``--distill-type hard-token`` builds the vit_minimal student with its distillation token; the run folder
    rebuilds that student, whose evaluation predicts the mean of its two heads."""
    out = tmp_path / 'run'
    argv = KD_ARGS + data + ['--epochs', '1', '--output', out, '--distill-type', 'hard-token']
    assert run_inprocess(argv) == 0
    run = json.loads((out / 'run.json').read_text())
    assert run['teacher']['distill_type'] == 'hard-token' and run['model_kwargs']['distill_token'] is True
    from timm_minimal.tools.hub.publish import export_run
    hub = export_run(out, tmp_path / 'hub', 'me/vit_minimal_sym_6x1.mnist')
    assert ("hard, cross-entropy with the teacher's top class, on the head of a distillation token (timm's "
            "TokenDistillationTask; the model predicts the mean of its two heads)") in (hub / 'README.md').read_text()
    published = timm.create_model(f'local-dir:{hub}', pretrained=True).eval()
    student = timm.create_model('vit_minimal_sym_6x1', depth=2, distill_token=True).eval()
    student.load_state_dict(weights(out))
    x = torch.randn(4, 1, 28, 28)
    tokens = student.forward_features(x)
    head, head_dist = student.head(student.pool(tokens)), student.head_dist(tokens[:, 0])
    assert torch.equal(published(x), student(x)) and torch.allclose(student(x), (head + head_dist) / 2, atol=1e-6)


def test_a_teacher_with_other_classes_is_refused(data, tmp_path, capsys):
    from timm.models import save_for_hf
    five = timm.create_model('vit_minimal_std_mlp_6x1.mnist', num_classes=5)
    save_for_hf(five, tmp_path / 'five')
    argv = BASE + data + ['--model', 'vit_minimal_sym_6x1', '--output', tmp_path / 'run',
                          '--teacher', f'local-dir:{tmp_path / "five"}']
    assert run_inprocess(argv) == 2
    err = capsys.readouterr().err
    assert 'predicts 5 classes, the student 10' in err and 'Traceback' not in err


@pytest.mark.slow
@pytest.mark.parametrize('distill_type', ['soft', 'hard-token'])
def test_a_distilled_run_trains_as_two_cpu_processes(distill_type, data, tmp_path):
    """The CPU split with a teacher: each process holds the teacher outside DDP, the run ends and records it (with
    a distillation token: timm's task reaches the student inside DDP)."""
    from trainer_runs import run_subprocess
    out = tmp_path / 'run'
    proc = run_subprocess(KD_ARGS + data + ['--epochs', '1', '--output', out, '--cpu-processes', '2',
                                            '--distill-type', distill_type], threads=2)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    run = json.loads((out / 'run.json').read_text())
    assert run['teacher']['name'] == 'vit_minimal_std_mlp_6x1.mnist' and run['launches'][-1]['num_processes'] == 2


def _teacher_with_labels(tmp_path, labels):
    """An MNIST zoo teacher saved with other label names (as a model trained on differently named folders has)."""
    from timm.models import save_for_hf
    model = timm.create_model('vit_minimal_std_mlp_6x1.mnist', pretrained=True)
    model.pretrained_cfg = dict(model.pretrained_cfg, label_names=list(labels))
    save_for_hf(model, tmp_path / 'teacher')
    return f'local-dir:{tmp_path / "teacher"}'


def test_a_teacher_whose_labels_are_not_the_datas_in_order_is_refused_by_name(data, tmp_path, capsys):
    """The class count is not enough: a teacher of the same classes in another order gives every image another
    class's targets (a CIFAR-10 image folder sorted otherwise scored 12%). --teacher-labels-by-order takes them in
    order, and the run's record and card say so."""
    teacher = _teacher_with_labels(tmp_path, '9876543210')
    argv = BASE + data + ['--model', 'vit_minimal_sym_6x1', '--model-kwargs', 'depth=1', '--eval-subset', '64',
                          '--teacher', teacher, '--epochs', '1']
    assert run_inprocess(argv + ['--output', tmp_path / 'refused']) == 2
    err = capsys.readouterr().err
    assert 'predicts 9, 8, 7, 6, 5, 4, 3, 2, 1, 0 in that order, the data\'s classes are 0, 1, 2' in err
    assert '--teacher-labels-by-order' in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / 'refused').exists()
    out = tmp_path / 'run'
    assert run_inprocess(argv + ['--output', out, '--teacher-labels-by-order']) == 0
    assert json.loads((out / 'run.json').read_text())['teacher']['labels_by_order'] is True
    from timm_minimal.tools.hub.publish import export_run
    card = (export_run(out, tmp_path / 'hub', 'me/vit_minimal_sym_6x1.mnist') / 'README.md').read_text()
    assert "The teacher's classes were taken as the data's in their order, not matched by name" in card


def test_a_resumed_run_keeps_its_teacher_and_an_empty_teacher_is_refused(data, tmp_path, capsys):
    """run.json and the card state one teacher for the whole run: a resume with another teacher, or another
    distillation, is refused, as is ``--teacher ''``, which trained without one."""
    out = tmp_path / 'run'
    argv = BASE + data + ['--model', 'vit_minimal_sym_6x1', '--model-kwargs', 'depth=1', '--eval-subset', '64',
                          '--teacher', 'vit_minimal_std_mlp_6x1', '--epochs', '1', '--output', out]
    assert run_inprocess(argv) == 0
    capsys.readouterr()
    for extra, says in ((['--teacher', 'vit_minimal_std_6x1'], '--teacher cannot change when resuming (the run used '
                                                                'vit_minimal_std_mlp_6x1, the command line asks for '
                                                                'vit_minimal_std_6x1)'),
                        (['--distill-temperature', '4'], '--distill-temperature cannot change when resuming')):
        assert run_inprocess(['--resume', out, '--epochs', '2'] + extra) == 2
        err = capsys.readouterr().err
        assert says in err and len(err.strip().splitlines()) == 1, err
    for argv in (['--resume', out, '--epochs', '2', '--teacher', ''],
                 BASE + data + ['--model', 'vit_minimal_sym_6x1', '--teacher', ' ', '--output', tmp_path / 'none']):
        with pytest.raises(SystemExit) as refused:  # the parser's one line
            run_inprocess(argv)
        assert refused.value.code == 2 and 'argument --teacher: needs a model name' in capsys.readouterr().err
    assert not (tmp_path / 'none').exists()
    assert json.loads((out / 'run.json').read_text())['teacher']['name'] == 'vit_minimal_std_mlp_6x1.mnist'


def test_a_teacher_over_the_parameter_limit_is_refused_before_it_is_built(data, tmp_path, capsys, monkeypatch):
    """A config.json may name any timm architecture at any size: the teacher's parameters are counted on the meta
    device first (a forged 8e9-parameter teacher was built whole)."""
    import json as js
    folder = tmp_path / 'big'
    folder.mkdir()
    (folder / 'config.json').write_text(js.dumps({'architecture': 'vit_base_patch16_224', 'num_classes': 10,
                                                  'model_args': {'embed_dim': 8192, 'depth': 12, 'num_heads': 16,
                                                                 'img_size': 28, 'patch_size': 7, 'in_chans': 1},
                                                  'pretrained_cfg': {'input_size': [1, 28, 28]}}))
    argv = BASE + data + ['--model', 'vit_minimal_sym_6x1', '--teacher', f'local-dir:{folder}', '--output',
                          tmp_path / 'run']
    assert run_inprocess(argv) == 2
    err = capsys.readouterr().err
    assert 'parameters, over the limit of 1,000,000,000' in err and len(err.strip().splitlines()) == 1
    monkeypatch.setenv('TIMM_MINIMAL_MAX_PARAMS', '200000')  # the student (70,930) fits, its teacher (279,106) not
    assert run_inprocess(BASE + data + ['--model', 'vit_minimal_sym_6x1', '--teacher', 'vit_minimal_std_mlp_6x1',
                                        '--output', tmp_path / 'small']) == 2
    err = capsys.readouterr().err
    assert err.startswith('timm-minimal-train: error: --teacher vit_minimal_std_mlp_6x1') and 'over the limit' in err


def test_a_loss_weight_that_diverges_in_the_first_update_is_named_not_the_lr(data, tmp_path, capsys):
    rc = run_inprocess(KD_ARGS + data + ['--epochs', '1', '--distill-weight', '1e30', '--output', tmp_path / 'run'])
    assert rc == train_mod.EXIT_DIVERGED
    err = capsys.readouterr().err
    assert '(update 1,' in err and 'before the learning rate had moved a weight' in err
    assert 'Check the options that scale it: --distill-weight 1e+30.' in err and 'lower --lr' not in err
