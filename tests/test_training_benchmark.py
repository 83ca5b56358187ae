"""The training benchmark: the bare step runs and reports sane numbers, the trainer's metrics are read as
documented (median of epochs 2..n, first epoch reaching the target), the report holds the ratio, and bad
command lines exit 2 with one clear line. The trainer itself is replaced by a fake that writes metrics.jsonl."""
import json
import statistics
import math

import pytest
import torch

from timm_minimal.tools import benchmark as B
from timm_minimal.tools.benchmark.cli import subcommand
from timm_minimal.tools.benchmark import training as T
from timm_minimal.machine import cpu_signature


def _fake_runner(rows, calls=None):
    """A trainer runner that records its arguments and writes ``rows`` to ``<output>/metrics.jsonl``."""
    def runner(args, output):
        assert args[args.index('--output') + 1] == str(output)
        if calls is not None:
            calls.append(list(args))
        output.mkdir(parents=True)
        (output / 'metrics.jsonl').write_text(''.join(json.dumps(r) + '\n' for r in rows))
    return runner


def _failing_runner(args, output):
    raise T.TrainerError('the trainer failed (exit status 2): python -m timm_minimal.training.train ...\n    boom')


THROUGHPUT_ROWS = [dict(epoch=1, throughput=50.0, train_time=9.0, test_acc=10.0, elapsed=20.0),
                   dict(epoch=2, throughput=900.0, train_time=1.0, test_acc=20.0, elapsed=22.0),
                   dict(epoch=3, throughput=1000.0, train_time=1.0, test_acc=30.0, elapsed=24.0),
                   dict(epoch=4, throughput=1200.0, train_time=1.0, test_acc=40.0, elapsed=26.0)]
TARGET_ROWS = [dict(epoch=1, test_acc=90.0, elapsed=30.5), dict(epoch=2, test_acc=98.3, elapsed=35.0),
               dict(epoch=3, test_acc=98.1, elapsed=39.5), dict(epoch=4, test_acc=98.5, elapsed=44.0)]


def test_bare_step_throughput_cpu():
    threads, grad = torch.get_num_threads(), torch.is_grad_enabled()
    rng = torch.get_rng_state()
    rates = T.bare_step_throughput('vit_minimal_sym_6x4.mnist', 16, torch.device('cpu'), compile=False,
                                   amp_dtype=None, steps=3, warmup=2, repeats=2)
    assert len(rates) == 2 and all(math.isfinite(r) and r > 0 for r in rates)
    # leaves the global state as it was
    assert torch.equal(torch.get_rng_state(), rng)
    assert torch.get_num_threads() == threads and torch.is_grad_enabled() == grad
    with pytest.raises(ValueError):
        T.bare_step_throughput('vit_minimal_sym_6x4.mnist', 0, torch.device('cpu'), False, None, 3, 2, 2)


def test_trainer_throughput_median_of_epochs_after_the_first(tmp_path):
    calls = []
    out = tmp_path / 'run'
    result = T.trainer_throughput('vit_minimal_sym_6x4', 'mnist', 64, 'data', out, epochs=4,
                                  runner=_fake_runner(THROUGHPUT_ROWS, calls), device_type='cpu', compile=False,
                                  mixed_precision='no', train_subset=512, extra_args=['--data-path', 'loader'])
    assert result.median == 1000.0  # median of 900, 1000, 1200: the compiling first epoch left out
    assert result.per_epoch == [50.0, 900.0, 1000.0, 1200.0] and result.elapsed == 26.0
    args = calls[0]
    for flag, value in (('--model', 'vit_minimal_sym_6x4'), ('--dataset', 'mnist'), ('--epochs', '4'),
                        ('--batch-size', '64'), ('--train-subset', '512'), ('--mixed-precision', 'no')):
        assert args[args.index(flag) + 1] == value
    assert '--cpu' in args and '--no-compile' in args and '--no-progress' in args
    assert args[-2:] == ['--data-path', 'loader']  # extra trainer arguments last, so they win
    assert str(out) in args and result.command[result.command.index('--output') + 1] == 'run'  # no machine's path


def test_trainer_throughput_errors(tmp_path):
    with pytest.raises(ValueError, match='at least 3 epochs'):
        T.trainer_throughput('m', 'mnist', 64, 'data', tmp_path / 'a', epochs=2, runner=_fake_runner([]))
    with pytest.raises(T.TrainerError, match='holds 2 epochs'):
        T.trainer_throughput('m', 'mnist', 64, 'data', tmp_path / 'b', runner=_fake_runner(THROUGHPUT_ROWS[:2]))
    with pytest.raises(T.TrainerError, match="no 'throughput' field"):
        T.trainer_throughput('m', 'mnist', 64, 'data', tmp_path / 'c', runner=_fake_runner([dict(epoch=1)] * 3))
    with pytest.raises(T.TrainerError, match='wrote no'):
        T.trainer_throughput('m', 'mnist', 64, 'data', tmp_path / 'd', runner=lambda args, output: None)


def test_time_to_target(tmp_path):
    calls = []
    t, = T.time_to_target('vit_minimal_sym_6x4', 'mnist', 'data', tmp_path / 'a', [98.24], device_type='cuda',
                          runner=_fake_runner(TARGET_ROWS, calls))
    assert (t.reached_epoch, t.elapsed) == (2, 35.0)  # the first epoch at or above the target
    assert (t.best_acc, t.best_epoch, t.final_acc, t.epochs, t.total_elapsed) == (98.5, 4, 98.5, 4, 44.0)
    assert calls[0] == ['--model', 'vit_minimal_sym_6x4', '--dataset', 'mnist', '--data-dir', 'data',
                        '--output', str(tmp_path / 'a'), '--no-progress']  # the default recipe
    exact, missed = T.time_to_target('m', 'mnist', 'data', tmp_path / 'b', [98.3, 99.0], device_type='cpu',
                                     runner=_fake_runner(TARGET_ROWS, calls))
    assert len(calls) == 2  # two targets, one run
    assert (exact.target, exact.reached_epoch) == (98.3, 2)
    assert missed.target == 99.0 and missed.reached_epoch is None and missed.elapsed is None
    assert (missed.best_acc, missed.best_epoch, missed.total_elapsed) == (98.5, 4, 44.0)
    assert calls[-1][-1] == '--cpu'
    with pytest.raises(T.TrainerError, match="no 'elapsed' field"):
        T.time_to_target('m', 'mnist', 'data', tmp_path / 'd', [90.0], runner=_fake_runner([dict(epoch=1, test_acc=95)]))


def test_tables():
    rows = [dict(model='vit_minimal_sym_6x4', dataset='mnist', batch_size=1024, device='cuda', trainer=45000.0,
                 bare=60000.0),
            dict(model='vit_minimal_sym_6x4', dataset='cifar10', batch_size=256, device='cuda', trainer=1234.0,
                 bare=4000.0)]
    text = T.throughput_table(rows)
    assert '| model | dataset | batch | device | trainer img/s | bare step img/s | trainer / bare |' in text
    assert '| vit_minimal_sym_6x4 | mnist | 1024 | cuda | 45,000 | 60,000 | 0.75 |' in text
    assert '| 1,234 | 4,000 | 0.31 |' in text
    reached = dict(model='m', dataset='mnist', target=98.24, reached_epoch=7, elapsed=61.25, best_acc=98.6,
                   best_epoch=9, final_acc=98.5, epochs=20, total_elapsed=150.0)
    missed = dict(reached, dataset='cifar10', target=70.0, reached_epoch=None, elapsed=None, best_acc=65.432,
                  best_epoch=18, final_acc=65.0)
    text = T.time_to_target_table([reached, missed])
    assert '| m | mnist | 98.24% | 7 of 20 | 61.2 | 98.50% |' in text
    assert 'not reached (best 65.43% at epoch 18)' in text and '150.0 (whole run, 20 epochs)' in text


def test_run_and_report(tmp_path, capsys, monkeypatch):
    data = tmp_path / 'data'
    data.mkdir()
    runner = _fake_runner(THROUGHPUT_ROWS + [dict(epoch=5, throughput=1100.0, test_acc=98.0, elapsed=28.0)])
    monkeypatch.setattr(T, 'run_trainer_subprocess', runner)
    out_json, out_md = tmp_path / 'out' / 'training.json', tmp_path / 'out' / 'training.md'
    code = T.main(['--quick', '--device', 'cpu', '--datasets', 'mnist', '--batch-sizes', '8', '--steps', '1',
                   '--repeats', '2', '--warmup', '1', '--data-dir', str(data), '--time-to-target',
                   '--targets', 'mnist=97.5', 'mnist=99', '--keep-runs', str(tmp_path / 'runs'),
                   '--json', str(out_json), '--output', str(out_md)])
    assert code == 0
    results = json.loads(out_json.read_text())
    row = results['throughput'][0]
    assert row['trainer'] == 1050.0 and len(row['bare_repeats']) == 2  # median of epochs 2..5
    assert row['ratio'] == pytest.approx(1050.0 / statistics.median(row['bare_repeats']))  # trainer / median bare
    assert [(r['target'], r['reached_epoch']) for r in results['time_to_target']] == [(97.5, 5), (99.0, None)]
    assert results['settings']['targets'] == {'mnist': [97.5, 99.0], 'cifar10': [60.0, 70.0]}  # given, default
    md = out_md.read_text()
    assert md.startswith('## Trainer against the bare training step')
    assert f"torch {torch.__version__}" in md and 'python ' in md and 'date: ' in md
    flags = cpu_signature()['flags']
    assert results['environment']['flags'] == flags  # a CPU figure comes with the CPU's SIMD flags
    assert f"- CPU flags: {flags or 'none of avx, amx, fma, sse4'}" in md
    assert f"| {row['ratio']:.2f} |" in md
    printed = capsys.readouterr().out
    assert printed.rstrip().endswith(md.rstrip().splitlines()[-1])  # the tables come last
    assert (tmp_path / 'runs' / 'throughput-mnist-vit_minimal_sym_6x4-b8' / 'metrics.jsonl').is_file()


def test_trainer_failure_is_one_clear_error(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(T, 'run_trainer_subprocess', _failing_runner)
    assert T.main(['--quick', '--device', 'cpu', '--datasets', 'mnist', '--data-dir', str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert 'the trainer failed (exit status 2)' in err and 'boom' in err and 'Traceback' not in err


@pytest.mark.parametrize('argv, message', [
    (['--batch-sizes', '0'], "must be an integer of at least 1, got '0'"),
    (['--batch-sizes', '9' * 400], 'at most 9,223,372,036,854,775,807'), (['--targets', 'mnist=nan'], '(NaN)'),
    (['--models', 'resnet18'], "unknown model 'resnet18'"),
    (['--models', 'vit_minimal_sym_6x4.mnist'], 'without a tag'),
    (['--epochs', '2'], '--epochs must be at least 3'),
    (['--datasets', 'imagenet'], "invalid choice: 'imagenet'"),
    (['--targets', 'svhn=90'], '--targets'),
    (['--targets', 'mnist=high'], 'expected DATASET=ACCURACY'),
])
def test_bad_command_line_exits_2(argv, message, tmp_path, capsys):
    assert _status(T.main, argv + ['--data-dir', str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert message in err and 'Traceback' not in err and len(err.strip().splitlines()) == 1


def test_missing_data_dir_exits_2(tmp_path, capsys):
    assert T.main(['--data-dir', str(tmp_path / 'nowhere')]) == 2
    assert 'nowhere' in capsys.readouterr().err


def test_benchmark_subcommands_take_their_words(tmp_path, capsys):
    assert subcommand(['--quick']) == ('suite', ['--quick'], None)
    assert subcommand(['training', '--quick', '--', '--lr', '1']) == ('training', ['--quick', '--', '--lr', '1'], None)
    assert subcommand(['--quick', '--', '--training'])[0] == 'suite'  # a trainer argument
    assert subcommand(['deployment', '--quick']) == ('deployment', ['--quick'], None)
    assert subcommand(['--cpu-modes', '--jobs', '2']) == ('cpu-modes', ['--jobs', '2'], '--cpu-modes')  # renamed
    assert _status(B.main, ['training', '--batch-sizes', '0']) == 2
    assert 'must be an integer of at least 1' in capsys.readouterr().err


def _status(main, argv):
    """The exit status of ``main(argv)``: what it returns, or argparse's exit for a bad command line."""
    try:
        return main(argv)
    except SystemExit as e:
        return e.code


def test_repeated_trainer_runs_of_a_mode_report_their_medians():
    """--trainer-repeats N: each mode's throughput and first-epoch extra time are the medians over its N runs, and it
    counts as compiled only where every run compiled (a fallback to eager shows)."""
    from timm_minimal.tools.benchmark.cpu_modes import _merge_trainer_runs, _trainer_label
    runs = [dict(rates=[50.0, 100.0, 110.0], median=105.0, train_time=[9.0, 2.0, 2.0], first_epoch_extra_s=7.0,
                 mixed_precision='no', compiled=True),
            dict(rates=[40.0, 80.0, 90.0], median=85.0, train_time=[11.0, 2.5, 2.5], first_epoch_extra_s=8.5,
                 mixed_precision='no', compiled=False),
            dict(rates=[60.0, 95.0, 99.0], median=97.0, train_time=[8.0, 2.1, 2.1], first_epoch_extra_s=5.9,
                 mixed_precision='no', compiled=True)]
    merged = _merge_trainer_runs(runs)
    assert (merged['median'], merged['first_epoch_extra_s'], merged['compiled']) == (97.0, 7.0, False)
    assert merged['runs'] == runs
    assert _trainer_label('--compile', merged) == ('timm-minimal-train, --compile (no, eager; first epoch +7 s; '
                                                   'median of 3 runs: 105, 85, 97)')
    assert 'median of' not in _trainer_label('defaults', _merge_trainer_runs(runs[:1]))
    assert _merge_trainer_runs(runs[:1])['compiled'] is True


@pytest.mark.slow
def test_cpu_modes_side_by_side_smoke(tmp_path, capsys, mnist_dir):
    """Every mode, the concurrent processes and the trainer with its defaults are measured in one run, each ratio
    against the first mode of that run (the step with unpadded heads)."""
    from timm_minimal.tools.benchmark import cli
    md, js = tmp_path / 'modes.md', tmp_path / 'modes.json'
    rc = cli.main(['cpu-modes', '--models', 'vit_minimal_sym_6x4.mnist', '--batch-size', '4', '--modes',
                   'eager-unpadded', 'eager', 'bf16', '--jobs', '2', '--steps', '1', '--warmup', '1', '--repeats', '1',
                   '--trainer-data-dir', str(mnist_dir), '--trainer-subset', '64', '--trainer-repeats', '1',
                   '--output', str(md), '--json', str(js)])
    assert rc == 0
    results = json.loads(js.read_text())
    r = results['models']['vit_minimal_sym_6x4.mnist']
    assert list(r['modes']) == ['eager-unpadded', 'eager', 'bf16'] and set(r['jobs']) == {'eager', 'bf16'}
    assert all(len(per) == 2 and all(v[0] > 0 for v in per) for per in r['jobs'].values())
    assert list(r['trainer']) == ['defaults', '--compile']
    for name, trainer in r['trainer'].items():  # one run of each (their median: the test below)
        assert len(trainer['runs']) == 1 and trainer['median'] == trainer['runs'][0]['median'] > 0
        assert all(len(run['rates']) == len(run['train_time']) == 3 for run in trainer['runs'])
        assert trainer['compiled'] is (name == '--compile')
        assert trainer['mixed_precision'] in ('no', 'bf16')
    text = md.read_text()
    assert '| `vit_minimal_sym_6x4.mnist` | 4 | eager-unpadded | 1 x' in text and '| 1.00 |' in text
    assert 'eager, 2 processes at once' in text and 'bf16, 2 processes at once' in text
    assert f"timm-minimal-train, defaults ({r['trainer']['defaults']['mixed_precision']}, eager; first epoch" in text
    assert 'timm-minimal-train, --compile (' in text
    assert cli.main(['cpu-modes', '--models', 'vit_minimal_nope.mnist']) == 2
    assert "unknown model 'vit_minimal_nope.mnist'" in capsys.readouterr().err
    assert cli.main(['cpu-modes', '--models', 'vit_minimal_sym_6x4', '--trainer-data-dir', str(mnist_dir)]) == 2
    assert 'has none of mnist, cifar10' in capsys.readouterr().err


def test_the_commands_of_the_committed_reports_name_modules_that_exist():
    """Every ``python -m MODULE`` in BENCHMARKS.md and benchmarks/*.md runs a module of this package, and every
    ``timm-minimal-benchmark WORD`` names the suite's option or one of its subcommands."""
    import importlib.util
    import re
    from pathlib import Path
    from timm_minimal.tools.benchmark.cli import SUBCOMMANDS
    root = Path(__file__).resolve().parents[1]
    texts = [root / 'BENCHMARKS.md', *sorted((root / 'benchmarks').glob('*.md'))]
    modules = {m for path in texts for m in re.findall(r'python -m (timm_minimal[\w.]*)', path.read_text())}
    for module in modules:
        assert importlib.util.find_spec(module) is not None, module
    words = {w for path in texts for w in re.findall(r'timm-minimal-benchmark ([\w-]+)', path.read_text())}
    named = {w for w in words if not w.startswith('-')}  # the rest are the suite's own options
    assert {'training', 'deployment', 'cpu-modes'} <= named <= set(SUBCOMMANDS), words


def test_the_time_to_target_table_sets_the_trainer_against_its_cpu_decision():
    from timm_minimal.tools.benchmark.training import time_to_target_table
    row = dict(model='vit_minimal_sym_6x4', dataset='cifar10', target=70.0, reached_epoch=30, epochs=36, elapsed=1500.0,
               best_acc=71.0, best_epoch=36, final_acc=71.0, total_elapsed=1800.0, trainer_rate=1900.0,
               cpu_rates={'1 x 2': 1500.0, '2 x 1': 2000.0})
    table = time_to_target_table([row, dict(row, cpu_rates=None)])
    assert '| 1,900 / 2,000 (2 x 1) = 0.95 |' in table and '| no decision measured |' in table


def test_cpu_modes_rounds_alternate_the_modes_and_report_the_median_of_the_rounds_ratios(monkeypatch):
    """--rounds N: the modes in turn N times, the order reversed every other round, each ratio the median of the
    rounds' ratios with their range (a drifting machine's speed lands on both sides of every ratio)."""
    from timm_minimal.tools.benchmark import cpu_modes
    calls, speed = [], iter([100, 200, 50, 40, 200, 400])
    monkeypatch.setattr(cpu_modes, 'measure_mode', lambda model, mode, *a: calls.append(mode) or [float(next(speed))])
    results = cpu_modes.run(['vit_minimal_sym_6x4.mnist'], 4, ['eager-unpadded', 'eager'], 1, 1, 1, 1, rounds=3)
    assert calls == ['eager-unpadded', 'eager', 'eager', 'eager-unpadded', 'eager-unpadded', 'eager']
    r = results['models']['vit_minimal_sym_6x4.mnist']
    assert r['round_ratios']['eager'] == [2.0, 1.25, 2.0] and r['modes']['eager'] == [200.0, 50.0, 400.0]
    text = cpu_modes.render(dict(results, command='timm-minimal-benchmark cpu-modes --rounds 3'))
    assert '| eager | 1 x' in text and '| 2.00 (1.25-2.00) |' in text and '3 rounds of the modes in turn' in text
