"""What the trainer's tests share: tiny run options, running the trainer in this process, in a subprocess or
killed at a chosen point, and reading what a run left (metrics, weights, state). The fixtures are in conftest.py."""
import json
import os
import subprocess
import sys
from pathlib import Path

import torch
from safetensors.torch import load_file

from timm_minimal.training import train as train_mod

ROOT = Path(__file__).resolve().parents[1]

# Tiny runs: 384 training digits in batches of 32 (12 updates per epoch), 2 epochs, on the CPU.
BASE = ['--dataset', 'mnist', '--train-subset', '384', '--batch-size', '32', '--epochs', '2', '--no-progress',
        '--log-interval', '0', '--cpu', '--threads', '1']
# with randomness in the training step too (random erasing, stochastic depth), checkpoints every 4 updates
RESUME_ARGS = BASE + ['--model', 'vit_minimal_std_mlp_6x1', '--model-kwargs', 'depth=2', '--eval-subset', '200',
                      '--reprob', '0.5', '--drop-path', '0.1', '--checkpoint-interval', '4', '--translate', '0.1',
                      '--rotate', '10']
# deterministic training step, an evaluation set that does not divide into the batches; fp32 wherever the CPU's
# default would be bf16, so one process and two (launched with --mixed_precision no) compute the same thing
DDP_ARGS = BASE + ['--model', 'vit_minimal_std_mlp_6x1', '--model-kwargs', 'depth=1', '--eval-subset', '250',
                   '--mixed-precision', 'no']

# a run killed at an update: the test's hook, passed to train.main as a callback
KILLER = """
import os, signal, sys
from timm_minimal.training import train

class Kill(train.TrainHooks):
    def after_update(self, update):
        if update == {at_update}:
            os.kill(os.getpid(), signal.SIGKILL)
    def writing_checkpoint(self, count):
        if count == {in_save}:
            os.kill(os.getpid(), signal.SIGKILL)

sys.exit(train.main(sys.argv[1:], hooks=Kill()))
"""


def reset_accelerate_state():
    """Forget accelerate's process-wide state, so the next Accelerator is built from its own arguments."""
    from accelerate.state import AcceleratorState, GradientState
    AcceleratorState._reset_state(reset_partial_state=True)
    GradientState._reset_state()


def run_inprocess(argv):
    """timm_minimal.training.train.main in this process, with fresh accelerate state."""
    reset_accelerate_state()
    return train_mod.main([str(a) for a in argv])


def run_subprocess(argv, launcher=(sys.executable, '-m', 'timm_minimal.training.train'), threads=1):
    """The trainer in a subprocess of ``threads`` threads (OMP_NUM_THREADS: also the cores a CPU split may use)."""
    env = dict(os.environ, OMP_NUM_THREADS=str(threads),
               PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get('PYTHONPATH', ''))
    return subprocess.run([*launcher, *map(str, argv)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)


def run_killed(argv, at_update=None, in_save=None):
    """A run in a subprocess that SIGKILLs itself after optimizer update ``at_update`` or inside checkpoint ``in_save``."""
    code = KILLER.format(at_update=at_update, in_save=in_save)
    return run_subprocess(argv, launcher=(sys.executable, '-c', code))


def metrics(run: Path):
    return [json.loads(line) for line in (run / 'metrics.jsonl').read_text().splitlines()]


def weights(run: Path, name='last'):
    return load_file(str(run / 'checkpoints' / name / 'model.safetensors'))


def state(run: Path):
    return json.loads((run / 'checkpoints' / 'last' / 'state.json').read_text())


COMPARED = ('epoch', 'update', 'train_loss', 'train_acc', 'test_loss', 'test_acc', 'lr', 'train_samples')


def assert_same_run(a: Path, b: Path):
    wa, wb = weights(a), weights(b)
    assert wa.keys() == wb.keys()
    for k in wa:
        assert torch.equal(wa[k], wb[k]), f'{k} differs'
    ma, mb = metrics(a), metrics(b)
    assert [{k: m[k] for k in COMPARED} for m in ma] == [{k: m[k] for k in COMPARED} for m in mb]
