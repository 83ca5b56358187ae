"""Progressive resizing (``--train-sizes``, ``timm_minimal.training.sizes``): the schedule, what an epoch at a smaller
size does to the batches and the model, what it leaves the model, and the errors at the door."""
import argparse

import pytest
import timm
import torch
import torch.nn as nn

import timm_minimal  # noqa: F401  (registers the models)
from timm_minimal.cli import UsageError
from timm_minimal.training import train as train_mod
from timm_minimal.training.options import train_size
from timm_minimal.training.sizes import TrainSizes, size_schedule, train_sizes

from trainer_runs import DDP_ARGS, metrics, run_inprocess

torch.set_num_threads(1)


@pytest.mark.parametrize('text, canonical', [('24@1', '24@1'), (' 32 @ 15 ', '32@15'), ('4096@1', '4096@1'),
                                             ('24@0%', '24@0%'), ('32@50.0%', '32@50%'), ('28@99.5 %', '28@99.5%')])
def test_an_entry_is_a_size_at_an_epoch_or_at_a_share_of_the_run(text, canonical):
    assert train_size(text) == canonical


@pytest.mark.parametrize('text', ['24', '24@0', '0@1', '4097@1', '24@1.5', '@3', '24@', 'x@1', '-24@1', '24@1@2',
                                  '24@100%', '24@-5%', '24%@1'])
def test_a_bad_entry_names_the_forms_it_takes(text):
    with pytest.raises(argparse.ArgumentTypeError, match=r'must be SIZE@EPOCH or SIZE@P% \(a size of 1 to 4,096 '
                                                         r'pixels; an epoch from 1, or 0 <= P < 100\), got'):
        train_size(text)


def test_the_schedule_is_ordered_by_epoch_and_a_share_of_the_run_follows_its_length():
    assert size_schedule(['32@15', '24@1', '28@8'], 36) == ((1, 24), (8, 28), (15, 32))
    assert size_schedule(None, 36) == ()
    assert size_schedule(['24@0%', '32@50%'], 36) == ((1, 24), (19, 32))
    assert size_schedule(['24@0%', '32@50%'], 20) == ((1, 24), (11, 32))
    # a run too short for both: the later entry wins its shared epoch
    assert size_schedule(['24@0%', '32@50%'], 1) == ((1, 32),)
    assert size_schedule(['24@0%', '28@2', '32@60%'], 2) == ((1, 24), (2, 32))
    with pytest.raises(UsageError, match='names @3 twice'):
        size_schedule(['24@3', '28@3'], 36)
    with pytest.raises(UsageError, match='--train-sizes 21@3: the run has 2 epochs'):
        size_schedule(['21@3'], 2)


def _model(**kwargs):
    return timm.create_model('vit_minimal_sym_6x4', num_classes=10, depth=1, **kwargs)


def test_each_epoch_takes_its_size_and_the_epochs_before_the_first_entry_the_models_own():
    sizes = TrainSizes(['14@3', '21@5', '28@6'], _model(), (28, 28), epochs=7)
    assert [sizes.size(e) for e in range(7)] == [(28, 28)] * 2 + [(14, 14)] * 2 + [(21, 21)] + [(28, 28)] * 2
    assert sizes.describe() == (', training at 28 x 28 in epochs 1-2, 14 x 14 in epochs 3-4, 21 x 21 in epoch 5, '
                                '28 x 28 from epoch 6')
    assert TrainSizes(['21@1', '28@2'], _model(), (28, 28), 3).describe() == \
        ', training at 21 x 21 in epoch 1, 28 x 28 from epoch 2'


def test_an_epoch_at_a_smaller_size_resizes_the_batches_and_the_model_reads_them_for_that_epoch_only():
    model = _model()
    own = dict(model.init_kwargs)
    sizes = TrainSizes(['21@1', '28@2'], model, (28, 28), epochs=2)
    x, y = torch.rand(4, 1, 28, 28), torch.arange(4)
    seen = []
    for xb, yb in sizes.batches(0, [(x, y), (x, y)]):
        seen.append(tuple(xb.shape))
        assert model.dynamic_img_size and model(xb).shape == (4, 10)  # 3 x 3 tokens, the position embedding resampled
        assert model.init_kwargs == own  # the model's keywords: what a checkpoint or an export made now reads
        assert torch.equal(yb, y)
    assert seen == [(4, 1, 21, 21)] * 2
    assert not model.dynamic_img_size and model.init_kwargs == own
    with pytest.raises(ValueError):  # the model's own size only, again
        model(torch.rand(1, 1, 21, 21))
    assert [tuple(b.shape) for b, _ in sizes.batches(1, [(x, y)])] == [(4, 1, 28, 28)]
    # a loop that leaves early (an error, a checkpoint's kill) leaves the model as it was
    batches = sizes.batches(0, [(x, y), (x, y)])
    next(batches)
    assert model.dynamic_img_size
    batches.close()
    assert not model.dynamic_img_size and model.init_kwargs == own


def test_a_resized_batch_is_the_antialiased_bilinear_resize_of_the_augmented_one():
    x = torch.rand(2, 3, 32, 32)
    (xb, _), = TrainSizes(['24@1', '32@2'], nn.Conv2d(3, 4, 3), (32, 32), 2).batches(0, [(x, None)])
    assert torch.allclose(xb, torch.nn.functional.interpolate(x, size=(24, 24), mode='bilinear', antialias=True))


@pytest.mark.parametrize('entries, model, epochs, message', [
    (['20@1', '28@2'], 'minimal', 2, "sizes must be multiples of the model's patch size 7 x 7"),
    (['20@0%', '28@50%'], 'minimal', 4, "--train-sizes 20@0%: sizes must be multiples"),  # named as written
    (['21@1'], 'minimal', 2, "must end at the size the model is evaluated at, 28 x 28: its last entry trains at 21 x "
                             "21 \\(add 28@EPOCH for the last epochs\\)"),
    (['16@1', '28@2'], 'timm_vit', 2, 'needs a model that trains at other input sizes: a vit_minimal model or a '
                              'convolutional network, not VisionTransformer'),
])
def test_a_schedule_the_model_or_the_run_cannot_follow_is_refused(entries, model, epochs, message):
    net = _model() if model == 'minimal' else timm.create_model(
        'vit_tiny_patch16_224', img_size=28, patch_size=4, in_chans=1, depth=1, num_classes=10)
    with pytest.raises(UsageError, match=message):
        TrainSizes(entries, net, (28, 28), epochs)


def test_a_teacher_is_refused_and_no_schedule_is_no_resizing():
    assert train_sizes(None, _model(), (28, 28), 2, None) is None
    assert train_sizes([], _model(), (28, 28), 2, 'vit_minimal_sym_6x4.mnist') is None  # --train-sizes, no entries
    with pytest.raises(UsageError, match=r'cannot train with a teacher \(vit_minimal_sym_6x4.mnist\)'):
        train_sizes(['21@1', '28@2'], _model(), (28, 28), 2, 'vit_minimal_sym_6x4.mnist')


def test_a_run_trains_its_early_epochs_small_and_keeps_its_schedule_for_a_resume(data, tmp_path, capsys):
    run = tmp_path / 'run'
    argv = DDP_ARGS + data + ['--model', 'vit_minimal_sym_6x4', '--model-kwargs', 'depth=1']
    assert run_inprocess(argv + ['--train-sizes', '21@1', '28@2', '--output', run]) == 0
    assert 'training at 21 x 21 in epoch 1, 28 x 28 from epoch 2.' in capsys.readouterr().out
    assert run_inprocess(argv + ['--output', tmp_path / 'plain']) == 0
    small, plain = metrics(run), metrics(tmp_path / 'plain')
    assert len(small) == 2 and small[0]['train_loss'] != plain[0]['train_loss']
    args = (run / 'args.yaml').read_text()
    assert "train_sizes:\n- 21@1\n- 28@2" in args
    # a resume reads the schedule back from args.yaml and checks it as a recipe's
    (run / 'args.yaml').write_text(args.replace('- 21@1', '- 21@0'))
    assert run_inprocess(['--resume', run, '--epochs', '3']) == train_mod.EXIT_BAD_INPUT
    assert 'train_sizes must be SIZE@EPOCH' in capsys.readouterr().err
