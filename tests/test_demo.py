"""timm-minimal-demo and the bundled sample it trains on: ``--dataset mnist-sample`` is a dataset of the trainer,
and the demo's training is a run of the trainer (its run folder), beside the zoo table and the attention picture."""
import json
import os
import subprocess
import sys

import pytest
import timm
import torch

from timm_minimal.models.datasets import DATASETS, SAMPLES, dataset_for_kind
from timm_minimal.training.data.loading import load_dataset

torch.set_num_threads(1)


def test_the_sample_is_a_dataset_with_the_tag_of_the_dataset_it_samples():
    data = load_dataset('mnist-sample')
    info = SAMPLES['mnist-sample']
    assert (len(data.train), len(data.eval)) == (info.train_samples, info.test_samples) == (20_000, 1_000)
    assert data.kind == 'mnist-sample' and data.default_tag == 'mnist' and data.classes == list('0123456789')
    assert dataset_for_kind('mnist-sample').geometry() == DATASETS['mnist'].geometry()
    assert dataset_for_kind('mnist-sample').recipe == 'mnist_sample'
    image, label = data.eval[0]
    assert image.size == (28, 28) and label == 7  # the first test digit of MNIST


def test_train_on_the_sample_without_any_data_folder(tmp_path):
    """A plain clone trains: no --data-dir, nothing downloaded, and the run records the sample."""
    from timm_minimal.training import train
    out = tmp_path / 'run'
    assert train.main(['--model', 'vit_minimal_sym_6x4', '--dataset', 'mnist-sample', '--train-subset', '256',
                       '--epochs', '1', '--batch-size', '64', '--no-progress', '--cpu', '--output', str(out)]) == 0
    run = json.loads((out / 'run.json').read_text())
    assert run['model'] == 'vit_minimal_sym_6x4.mnist' and run['dataset']['name'] == 'mnist-sample'
    assert (run['dataset']['kind'], run['dataset']['eval_samples'], run['recipe']) == ('mnist-sample', 1000, 'mnist_sample')
    assert not (tmp_path / 'data').exists() and not list(tmp_path.glob('**/MNIST'))


@pytest.mark.slow
def test_demo_runs_the_zoo_the_trainer_and_the_picture(tmp_path):
    out = tmp_path / 'demo-run'
    result = subprocess.run([sys.executable, '-m', 'timm_minimal.tools.demo', '--epochs', '1', '--output', str(out)],
                            capture_output=True, text=True, timeout=600, cwd=tmp_path,
                            env={**os.environ, 'OMP_NUM_THREADS': '1'})
    assert result.returncode == 0, result.stderr[-3000:]
    text = result.stdout
    assert text.startswith('timm-minimal-demo: about ') and ' s on this machine (1 thread(s), ' in text.splitlines()[0]
    for name in timm.list_pretrained('vit_minimal*.mnist'):  # the zoo table: every shipped MNIST checkpoint
        assert f'| {name} | ' in text
    assert '| vit_minimal_std_mlp_6x1.mnist | 279,106 | 100% | ' in text
    assert 'bundled test digits (95% interval) |' in text and "The paper's point, on these digits: " in text
    metrics = [json.loads(line) for line in (out / 'metrics.jsonl').read_text().splitlines()]
    assert [m['epoch'] for m in metrics] == [1] and metrics[0]['test_samples'] == 1000
    assert f"test accuracy {metrics[0]['test_acc']:.1f}% on the 1,000 bundled test digits after 1 epochs" in text
    run = json.loads((out / 'run.json').read_text())
    assert run['status'] == 'finished' and run['dataset']['name'] == 'mnist-sample'
    picture = out / 'attention.png'
    assert picture.read_bytes()[:8] == b'\x89PNG\r\n\x1a\n' and f'{picture}' in text
    assert 'epoch 1/1' not in text  # the trainer's log stays out of the demo's output


def test_the_interval_of_an_accuracy():
    from timm_minimal.tools.demo import wilson_interval
    lo, hi = wilson_interval(98.8, 1000)
    assert (round(lo, 2), round(hi, 2)) == (97.91, 99.31)  # Wilson's 95% interval of 988 of 1,000
    lo, hi = wilson_interval(100.0, 1000)
    assert hi == pytest.approx(100.0) and 99.5 < lo < 99.7


def test_demo_misuse_is_one_line(capsys):
    import pytest
    from timm_minimal.tools import demo
    with pytest.raises(SystemExit) as stop:
        demo.main(['--model', 'vit_minimal_foo_6x1'])
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "unknown architecture 'vit_minimal_foo_6x1'" in err
    assert 'vit_minimal_sym_6x4' in err
