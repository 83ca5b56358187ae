"""One training run on a multi-core CPU as data-parallel processes (timm_minimal.training.cpu.split): the split is
decided by a measurement kept per machine, never exceeds the cores a run may use (under reproduce --jobs too),
trains what one process trains, and a resumed run keeps its process count."""
import dataclasses
import functools
import json
import logging
import os
import platform
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import yaml

from timm_minimal.cli import UsageError
from timm_minimal.training.cpu import probes
from timm_minimal.training.cpu import split as cpu_split
from timm_minimal.training import train as train_mod
from timm_minimal.training.cli import Provenance
from timm_minimal.training.plan import PLANNED, resolve_plan

from trainer_runs import DDP_ARGS, metrics, run_inprocess, run_subprocess, weights

MEASURE_SPLIT = cpu_split.measure_split  # the real one, which ``counts_through_measure`` stands in for
pytestmark = pytest.mark.usefixtures('counts_through_measure')  # the tests below fake ``measure``


def test_the_budget_is_the_affinity_capped_by_omp_num_threads(monkeypatch):
    monkeypatch.setattr(cpu_split.os, 'sched_getaffinity', lambda pid: {0, 1, 2, 3}, raising=False)
    monkeypatch.delenv('OMP_NUM_THREADS', raising=False)
    assert cpu_split.core_budget() == 4
    for omp, budget in (('2', 2), ('1', 1), ('16', 4), ('', 4)):
        monkeypatch.setenv('OMP_NUM_THREADS', omp)
        assert cpu_split.core_budget() == budget
    for bad in ('x', '0', '9' * 400):  # read as the options are: one line naming the variable
        monkeypatch.setenv('OMP_NUM_THREADS', bad)
        with pytest.raises(UsageError, match='the environment variable OMP_NUM_THREADS must be an integer'):
            cpu_split.core_budget()


def test_under_reproduce_jobs_processes_times_threads_never_exceed_the_cores(monkeypatch, tmp_path, quiet):
    """reproduce --jobs N gives each run cores / N threads; a run's split then has at most that many processes of
    budget / processes threads, so jobs x processes x threads <= cores; one core left measures nothing."""
    from timm_minimal.tools.paper import grid
    for cores in (2, 4, 8):
        monkeypatch.setattr(grid.os, 'sched_getaffinity', lambda pid, c=cores: set(range(c)), raising=False)
        monkeypatch.setattr(cpu_split.os, 'sched_getaffinity', lambda pid, c=cores: set(range(c)), raising=False)
        for jobs in (1, 2, cores):
            monkeypatch.delenv('OMP_NUM_THREADS', raising=False)  # as reproduce starts
            env = grid.thread_env(jobs) or {}
            monkeypatch.setenv('OMP_NUM_THREADS', env.get('OMP_NUM_THREADS', str(cores)))
            budget = cpu_split.core_budget()
            measured = []
            monkeypatch.setattr(cpu_split, 'measure', lambda m, b, n, t, **k: measured.append((n, t)) or float(n))
            decision = cpu_split.decide('vit_minimal_sym_6x4.cifar10', 256, tmp_path / f'{cores}-{jobs}', budget)
            processes = decision.processes
            assert jobs * processes * (budget // processes) <= cores
            assert all(jobs * n * t <= cores for n, t in measured)
            assert (measured == []) == (budget == 1)


@pytest.fixture
def quiet(monkeypatch):
    """A machine on which no other work keeps cores busy (what the decision checks before it keeps a measurement)."""
    monkeypatch.setattr(cpu_split, 'free_cores', lambda budget, seconds=0.3: budget)


def test_the_decision_is_measured_once_and_kept(monkeypatch, tmp_path, quiet):
    calls = []

    def fake(model, batch, processes, threads, seconds=0, **step):
        calls.append(processes)
        return {1: 800.0, 2: 1100.0}[processes]
    monkeypatch.setattr(cpu_split, 'measure', fake)
    assert cpu_split.decide('vit_minimal_sym_6x4.cifar10', 256, tmp_path, budget=2, say=lambda *a: None).processes == 2
    assert cpu_split.decide('vit_minimal_sym_6x4.cifar10', 256, tmp_path, budget=2, say=lambda *a: None).processes == 2
    assert calls == [1, 2]
    kept = json.loads((tmp_path / 'cpu_split.json').read_text())
    assert [v['rates'] for v in kept.values()] == [{'1 x 2': 800.0, '2 x 1': 1100.0}]
    monkeypatch.setattr(cpu_split, 'measure', lambda *a, **k: (_ for _ in ()).throw(RuntimeError('failed')))
    assert cpu_split.decide('vit_minimal_std_6x1.cifar10', 256, tmp_path, budget=2, say=lambda *a: None).processes == 1
    monkeypatch.setattr(cpu_split, 'measure', lambda m, b, n, t, **k: {1: 1000.0, 2: 1040.0}[n])  # within the margin
    assert cpu_split.decide('vit_minimal_qk_6x1.cifar10', 256, tmp_path, budget=2, say=lambda *a: None).processes == 1


def test_the_decision_measures_the_runs_own_step_and_keys_the_cache_by_it(monkeypatch, tmp_path, quiet):
    """bf16, compilation and the model keywords reach the probe, and each is its own entry of the cache."""
    steps = []
    monkeypatch.setattr(cpu_split, 'measure', lambda m, b, n, t, **step: steps.append((n, step)) or float(n))
    decide = functools.partial(cpu_split.decide, 'vit_minimal_std_mlp_6x1.cifar10', 256, tmp_path, budget=2,
                               say=lambda *a: None)
    for step in (dict(), dict(bf16=True), dict(compiled=True), dict(model_kwargs={'depth': 2}), dict(bf16=True)):
        decide(**step)
    assert len(steps) == 8  # four steps measured, 1 and 2 processes each; the last was kept
    assert steps[2] == (1, dict(model_kwargs={}, bf16=True, compiled=False, padded=True))
    assert len(json.loads((tmp_path / 'cpu_split.json').read_text())) == 4


def test_kernels_capped_below_the_cpu_are_named_measured_apart_and_get_no_native_bf16(monkeypatch, tmp_path, quiet):
    """A process whose kernels are capped (an AVX2 run on an AVX-512 CPU) is recorded and cached as its own CPU."""
    from timm_minimal import machine
    for name in machine.KERNEL_CAP_ENV:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(torch.cpu, '_is_amx_tile_supported', lambda: True)
    native, flags = machine.cpu_has_bf16(), machine.cpu_signature()['flags']
    assert native and 'capped' not in flags
    monkeypatch.setattr(cpu_split, 'measure', lambda m, b, n, t, **step: float(n))
    decide = functools.partial(cpu_split.decide, 'vit_minimal_sym_6x4.cifar10', 256, tmp_path, budget=2,
                               say=lambda *a: None)
    decide()
    for caps in ({'ATEN_CPU_CAPABILITY': 'avx2', 'MKL_ENABLE_INSTRUCTIONS': 'AVX2', 'ONEDNN_MAX_CPU_ISA': 'AVX2'},
                 {'ONEDNN_MAX_CPU_ISA': 'AVX512_CORE_VNNI'}):
        for name, value in caps.items():
            monkeypatch.setenv(name, value)
        capped = machine.cpu_signature()['flags']
        assert capped.startswith(flags + '; kernels capped by ') and all(f'{k}={v}' in capped for k, v in caps.items())
        assert not machine.cpu_has_bf16()
        decide()
    assert len(json.loads((tmp_path / 'cpu_split.json').read_text())) == 3  # one entry per kernel cap
    monkeypatch.setenv('ONEDNN_MAX_CPU_ISA', 'AVX512_CORE_AMX')
    monkeypatch.delenv('ATEN_CPU_CAPABILITY')
    assert machine.cpu_has_bf16()


def test_a_run_that_leaves_compilation_to_the_decision_measures_each_count_eager_then_each_compiled(
        monkeypatch, tmp_path, quiet):
    """Every process count eager, then every count compiled (the eager ranking does not hold compiled: on an AMX
    Xeon 2 x 1 bf16 measured 1.21x 1 x 2 eager, and 1 x 2 compiled 1.11-1.25x 2 x 1 compiled). Each departure from
    one eager process wins by the margin."""
    rates = {(1, False): 800.0, (2, False): 1000.0, (1, True): 1200.0, (2, True): 1340.0}
    measured = []
    monkeypatch.setattr(cpu_split, 'measure', lambda m, b, n, t, compiled, **step: measured.append((n, compiled))
                        or rates[n, compiled])
    decide = functools.partial(cpu_split.decide, 'vit_minimal_std_mlp_6x1.cifar10', 256, tmp_path, budget=2,
                               say=lambda *a: None)
    decision = decide(compiled=None)
    assert decision[:2] == (2, True) and measured == [(1, False), (2, False), (1, True), (2, True)]
    assert decision.rates == {'1 x 2': 800.0, '2 x 1': 1000.0, '1 x 2 compiled': 1200.0, '2 x 1 compiled': 1340.0}
    assert decide(compiled=False)[:2] == (2, False) and measured[-1] == (2, False)  # --no-compile: its own entry
    assert decide(compiled=None) == decision and len(measured) == 6  # kept, with its rates
    assert len(json.loads((tmp_path / 'cpu_split.json').read_text())) == 2
    rates[1, True] = 1500.0  # the one process compiled wins, where the split won eager
    assert decide(compiled=None, model_kwargs={'depth': 5})[:2] == (1, True)
    rates[1, False] = 980.0  # the eager counts within the margin of each other
    rates[1, True], rates[2, True] = 1000.0, 1020.0  # and a compilation within the margin of eager is not taken
    measured.clear()
    assert decide(compiled=None, model_kwargs={'depth': 2})[:2] == (1, False)
    assert measured == [(1, False), (2, False), (1, True), (2, True)]
    rates[2, True] = 1340.0  # the split compiled wins by its margins, where the eager split did not
    assert decide(compiled=None, model_kwargs={'depth': 4})[:2] == (2, True)
    measured.clear()
    assert decide(compiled=True, model_kwargs={'depth': 3})[:2] == (2, True)  # --compile: every count compiled
    assert measured == [(1, True), (2, True)]
    assert cpu_split.worker_command(['--model', 'm'], 2, True)[-6:] == ['--cpu-processes', '2', '--compile',
                                                                        '--pad-heads', '--mixed-precision', 'no']
    assert cpu_split.worker_command(['--model', 'm'], 2, False, False, True)[-4:] == [
        '--no-compile', '--no-pad-heads', '--mixed-precision', 'bf16']


def test_a_run_that_leaves_the_head_padding_to_the_decision_measures_it_in_turns_then_every_candidate_with_it(
        monkeypatch, tmp_path, quiet):
    """The padding is measured first, the two taking turns in one process of the widest split (one probe after the
    other, a drift of the machine chose the slower one on an AVX2 EPYC): where the padded heads train slower by the
    margin the decision takes the true width, within it the padding stays; every candidate is then measured with that
    padding; a model with no width to pad measures nothing more; --pad-heads/--no-pad-heads choose."""
    speedups, measured, turns = [0.9], [], []
    monkeypatch.setattr(cpu_split, 'measure_padding', lambda m, b, t, **step: turns.append((b, t)) or speedups[-1])
    monkeypatch.setattr(cpu_split, 'measure', lambda m, b, n, t, compiled, padded, **step:
                        measured.append((n, compiled, padded)) or {1: 845.0, 2: 1000.0}[n])
    said = []
    decide = functools.partial(cpu_split.decide, 'vit_minimal_sym_6x4.cifar10', 256, tmp_path, budget=2,
                               say=said.append, compiled=False)
    decision = decide(padded=None)
    assert decision[:3] == (2, False, False) and measured == [(1, False, False), (2, False, False)]
    assert turns == [(128, 1)] and decision.rates == {'1 x 2 unpadded': 845.0, '2 x 1 unpadded': 1000.0}
    assert 'heads padded: 0.90x the true width' in said[-1]
    assert json.loads((tmp_path / 'cpu_split.json').read_text()).popitem()[1]['padding_speedup'] == 0.9
    pads = cpu_split._pads
    monkeypatch.setattr(cpu_split, '_pads', lambda *a: pytest.fail('a kept decision built the model'))
    assert decide(padded=None) == decision and len(measured) == 2 and len(turns) == 1  # kept, without the model
    monkeypatch.setattr(cpu_split, '_pads', pads)
    assert decide(padded=True)[:3] == (2, False, True) and measured[-1] == (2, False, True)  # its own entry
    assert len(turns) == 1  # the padding given: not measured
    speedups.append(0.97)  # slower, but within the margin: the padding stays
    assert decide(padded=None, model_kwargs={'depth': 2})[:3] == (2, False, True)
    measured.clear()
    assert decide(padded=None, model_kwargs={'embed_dim': 64})[2] is True  # one head of 64 columns: nothing to pad
    assert all(padded for _, _, padded in measured) and len(turns) == 2


def test_a_run_that_leaves_the_precision_to_the_decision_measures_bf16_first_then_its_candidates_in_it(
        monkeypatch, tmp_path, quiet):
    """On a CPU with native bf16 where the run names no precision: bf16 against fp32 first, in turns in one process
    of the widest split; bf16 only where faster by the margin. In bf16 the attention leaves SDPA, so the padding
    is not measured; in fp32 it is, in turns (of the compiled step where one is measured). A measurement that fails
    (bf16 computing another loss) leaves fp32, said."""
    speedups, turns, measured, said = [1.8], [], [], []
    monkeypatch.setattr(cpu_split, 'measure_bf16', lambda m, b, t, **step: turns.append(('bf16', b, t, step))
                        or speedups[-1])
    monkeypatch.setattr(cpu_split, 'measure_padding', lambda m, b, t, **step: turns.append(
        ('padding', step['bf16'], step.get('compiled', False))) or 1.2)
    monkeypatch.setattr(cpu_split, 'measure', lambda m, b, n, t, compiled, padded, bf16, **step:
                        measured.append((n, compiled, padded, bf16)) or {1: 845.0, 2: 1000.0}[n] * (1 + compiled))
    decide = functools.partial(cpu_split.decide, 'vit_minimal_sym_6x4.cifar10', 256, tmp_path, budget=2,
                               say=said.append, bf16=None, compiled=None, padded=None)
    decision = decide()
    assert decision.bf16 and decision[:3] == (2, True, True)
    assert turns == [('bf16', 128, 1, dict(model_kwargs={}, padded=True))]  # no padding measured in bf16
    assert measured == [(1, False, True, True), (2, False, True, True), (1, True, True, True), (2, True, True, True)]
    assert decision.rates == {'1 x 2 bf16': 845.0, '2 x 1 bf16': 1000.0, '1 x 2 compiled bf16': 1690.0,
                              '2 x 1 compiled bf16': 2000.0}
    assert 'bf16: 1.80x fp32' in said[-1] and said[-1].endswith('-> 2 x 1 compiled bf16')
    entry = json.loads((tmp_path / 'cpu_split.json').read_text()).popitem()[1]
    assert entry['bf16'] is True and entry['bf16_speedup'] == 1.8 and entry['bf16_given'] is None
    assert decide() == decision and len(turns) == 1  # kept
    speedups.append(1.03)  # within the margin: fp32, the compiled step's padding in turns, every count with it
    decision = decide(model_kwargs={'depth': 2})
    assert not decision.bf16 and turns[-2][0] == 'bf16' and turns[-1] == ('padding', False, True)
    assert measured[-4:] == [(1, False, True, False), (2, False, True, False), (1, True, True, False),
                             (2, True, True, False)]
    assert 'compiled heads padded: 1.20x the true width' in said[-1]
    assert not decide(model_kwargs={'depth': 5}, compiled=False).bf16  # none compiled: the padding in turns
    assert turns[-1] == ('padding', False, False) and measured[-1] == (2, False, True, False)
    monkeypatch.setattr(cpu_split, 'measure_bf16', lambda *a, **k: (_ for _ in ()).throw(
        RuntimeError('the bf16 step computes a loss of nan where the fp32 step computes 2.303')))
    assert not decide(model_kwargs={'depth': 3}).bf16
    assert 'bf16 against fp32: left out (the bf16 step computes a loss of nan' in said[-1]
    turns.clear()
    assert decide(bf16=True, model_kwargs={'depth': 4}).bf16 and turns == []  # named: not measured


def test_bf16_measured_in_turns_is_a_ratio_of_the_real_step_after_its_loss_check(monkeypatch):
    """The real measurement, briefly; a bf16 step whose loss is not fp32's fails it, naming both."""
    speedup = cpu_split.bf16_speedup('vit_minimal_sym_6x4.mnist', 2, 1, rounds=2, block_seconds=0.0, warmup=1,
                                     model_kwargs={'depth': 1})
    assert 0.05 < speedup < 20.0
    net = torch.nn.Linear(1, 1)
    skewed = lambda forward, update=True, bf16=False: torch.tensor(4.6 if bf16 else 2.3)  # noqa: E731
    monkeypatch.setattr(cpu_split, '_training_step', lambda *a: (net, skewed))
    with pytest.raises(RuntimeError, match='the bf16 step computes a loss of 4.6 where the fp32 step computes 2.3'):
        cpu_split.bf16_speedup('vit_minimal_sym_6x4.mnist', 2, 1, rounds=1, block_seconds=0.0, warmup=1)


def test_the_padding_measured_in_turns_is_a_ratio_of_the_real_step():
    """The real measurement, briefly: a 1-block model on 2 images, two rounds of one step each."""
    speedup = cpu_split.padding_speedup('vit_minimal_sym_6x4.mnist', 2, 1, rounds=2, block_seconds=0.0, warmup=1,
                                        model_kwargs={'depth': 1})
    assert 0.2 < speedup < 5.0


def test_the_compiled_padding_in_turns_checks_each_paddings_compiled_step_first(monkeypatch):
    """Compiled, each padding's first compiled step is checked against the eager step's loss before the turns: here
    a stand-in compilation computes NaN on the true head width alone, and the measurement fails naming it; where it
    computes the eager loss in both, the turns give a ratio."""
    def padded(net):
        return any(getattr(m, 'head_pad', 0) for m in net.modules())
    monkeypatch.setattr(torch, 'compile', lambda net, **k: (lambda x: net(x) * (1.0 if padded(net) else float('nan'))))
    measure = functools.partial(cpu_split.padding_speedup, 'vit_minimal_sym_6x4.mnist', 2, 1, rounds=2,
                                block_seconds=0.0, warmup=1, model_kwargs={'depth': 1}, compiled=True)
    with pytest.raises(RuntimeError, match='the compiled step computes a loss of nan where the eager step computes'):
        measure()
    monkeypatch.setattr(torch, 'compile', lambda net, **k: net)
    assert 0.2 < measure() < 5.0


@pytest.mark.parametrize('ratios, rounds_run, side', [
    ([1.3] * 8, 5, True),  # five of eight above the margin: the median is above it whatever three more measure
    ([0.9] * 8, 5, False),
    ([1.3, 0.9, 1.3, 0.9, 1.3, 0.9, 1.3, 0.9], 8, True),  # four and four: every round runs
    ([0.9, 1.3, 1.3, 1.3, 1.3, 1.3, 0.9, 0.9], 6, True),  # five above after six rounds
    ([1.0] * 8, 5, False),  # between the margin and its inverse (the counts in turns): both settled after five
    ([1.0, 1.3] * 4, 8, True),  # above the inverse from the first, but four and four about the margin
])
def test_the_turns_end_once_more_than_half_of_the_rounds_lie_on_one_side_of_the_margin(ratios, rounds_run, side):
    """The decision compares the median with the margin (the counts in turns: with the margin and its inverse): once
    more than half of the rounds fall on one side of each, the rest cannot carry the median across, and are not
    measured; where they still could, every round runs."""
    blocks = []

    def timed(faster: bool, steps: int) -> float:  # the True side runs ratios[round] times as fast
        blocks.append(faster)
        r = max(0, (len(blocks) - 4) // 2) % len(ratios)  # two warm-up blocks and one calibration block first
        return steps / ratios[r] if faster else float(steps)
    median = cpu_split._speedup_in_turns(timed, 8, 1.0, 1, 1 / cpu_split.MARGIN, cpu_split.MARGIN)
    assert (len(blocks) - 3) // 2 == rounds_run and (median >= cpu_split.MARGIN) is side


def test_a_candidate_whose_probe_fails_is_left_out_and_the_compiled_step_takes_the_padding_measured_in_turns(
        monkeypatch, tmp_path, quiet):
    """A compiled step that computes another loss (torch 2.14's inductor computed NaN with AVX2 code) or aborts (its
    AVX-512 code on the unpadded 15-wide heads) fails its probe: that candidate is left out, naming why, and the
    others still decide. Where a compiled step is measured, its padding is measured in turns in one process of the
    widest split (on an AMX Xeon the eager step trained faster unpadded, the compiled one padded; compiled probes of
    the two, one after the other, ranked them one way and then the other), the eager step keeping its heads padded;
    each count compiled takes that padding, the other only where it fails; a padding whose measurement in turns
    fails leaves the heads padded."""
    rates = {(1, False, True): 900.0, (2, False, True): 1300.0, (1, True, False): 1100.0, (2, True, True): 1500.0}
    failures = {(1, True, True): 'the compiled step computes a loss of nan where the eager step computes 2.303',
                (2, True, False): 'ended by signal 6 (SIGABRT)'}
    measured, turns, speedups = [], [], [1.2]

    def fake(m, b, n, t, compiled, padded, **step):
        measured.append((n, compiled, padded))
        if (n, compiled, padded) in failures:
            raise RuntimeError(failures[n, compiled, padded])
        return rates[n, compiled, padded]
    monkeypatch.setattr(cpu_split, 'measure', fake)
    monkeypatch.setattr(cpu_split, 'measure_padding', lambda m, b, t, **step: turns.append((b, t, step['compiled']))
                        or speedups[-1])
    said = []
    decide = functools.partial(cpu_split.decide, 'vit_minimal_sym_6x4.cifar10', 256, tmp_path, budget=2,
                               say=said.append, padded=None)
    decision = decide(compiled=None)
    assert turns == [(128, 1, True)]  # the compiled step's padding alone
    assert measured == [(1, False, True), (2, False, True), (1, True, True), (1, True, False), (2, True, True)]
    assert decision[:3] == (2, True, True) and decision.rates['2 x 1 compiled'] == 1500.0
    assert 'compiled heads padded: 1.20x the true width' in said[-1]
    assert '1 x 2 compiled: left out (the compiled step computes a loss of nan' in said[-1]
    assert json.loads((tmp_path / 'cpu_split.json').read_text()).popitem()[1]['compiled_padding_speedup'] == 1.2
    speedups.append(0.9)  # the padded compiled step slower by the margin: the true width, padded where that fails
    measured.clear()
    decision = decide(compiled=True)
    assert turns[-1] == (128, 1, True) and measured == [(1, True, False), (2, True, False), (2, True, True)]
    assert decision[:3] == (2, True, True)
    assert decision.rates == {'1 x 2 compiled unpadded': 1100.0, '2 x 1 compiled': 1500.0}
    assert '2 x 1 compiled unpadded: left out (ended by signal 6 (SIGABRT))' in said[-1]
    monkeypatch.setattr(cpu_split, 'measure', lambda *a, **k: (_ for _ in ()).throw(RuntimeError('no')))
    said.clear()
    assert cpu_split.decide('vit_minimal_sym_6x1.cifar10', 256, tmp_path, budget=2, say=said.append)[:3] == (1, False,
                                                                                                            True)
    assert 'every measurement failed (the measurement' not in said[-1] and 'every measurement failed (no' in said[-1]
    monkeypatch.setattr(cpu_split, 'measure', lambda m, b, n, t, padded, **k: measured.append(padded) or float(n))
    monkeypatch.setattr(cpu_split, 'measure_padding', lambda *a, **k: (_ for _ in ()).throw(RuntimeError('aborted')))
    assert cpu_split.decide('vit_minimal_sym_6x4.mnist', 256, tmp_path, budget=2, say=said.append,
                            padded=None)[:3] == (2, False, True)
    assert measured[-2:] == [True, True] and 'heads padded against unpadded: left out (aborted)' in said[-1]
    assert cpu_split.decide('vit_minimal_sym_6x4.mnist', 256, tmp_path, budget=2, say=said.append, padded=None,
                            compiled=True)[:3] == (2, True, True)
    assert measured[-2:] == [True, True] and 'compiled heads padded against unpadded: left out (aborted)' in said[-1]


def test_a_compiled_probe_that_computes_another_loss_fails(monkeypatch):
    """The probe checks its first compiled step against the eager one: here a stand-in compilation computes NaN."""
    monkeypatch.setattr(torch, 'compile', lambda net, **k: (lambda x: net(x) * float('nan')))
    with pytest.raises(RuntimeError, match='the compiled step computes a loss of nan where the eager step computes'):
        cpu_split.bare_step_rate('vit_minimal_std_mlp_6x1.mnist', 8, 1, 0.05, warmup=1, model_kwargs={'depth': 1},
                                 compiled=True)
    monkeypatch.setattr(torch, 'compile', lambda net, **k: net)  # the same loss: it measures
    assert cpu_split.bare_step_rate('vit_minimal_std_mlp_6x1.mnist', 8, 1, 0.05, warmup=1, model_kwargs={'depth': 1},
                                    compiled=True) > 0


def test_a_failed_probe_is_named_by_its_cause_not_by_the_warnings_after_it():
    """A compiled probe's stderr goes on with inductor's warnings after its traceback; a probe ended by a signal
    leaves no traceback at all."""
    warning = ('[rank0]:W1127 02:57:08.463000 23645 site-packages/torch/utils/cpp_extension.py:183] [4/0] No CUDA '
               'runtime is found, using CUDA_HOME=/usr/local/cuda')
    traceback = 'Traceback (most recent call last):\n  File "<string>", line 1\nRuntimeError: gloo: connection reset\n'
    assert probes._why(1, traceback + warning + '\n') == 'RuntimeError: gloo: connection reset'
    compiler = 'torch._dynamo.exc.BackendCompilerFailed: backend=inductor raised: ...'
    assert probes._why(1, traceback.replace('RuntimeError: gloo: connection reset', compiler) + warning) == compiler
    assert probes._why(-9, warning) == 'ended by signal 9 (SIGKILL)'
    assert probes._why(3, 'one line\n\n') == 'one line' and probes._why(3, '') == 'exit status 3, no message'


def test_a_decision_taken_beside_other_work_is_not_kept(monkeypatch, tmp_path):
    measured, said = [], []
    monkeypatch.setattr(cpu_split, 'measure', lambda m, b, n, t, **step: measured.append(n) or float(n))
    monkeypatch.setattr(cpu_split, 'free_cores', lambda budget, seconds=0.3: 1)  # one of two cores busy
    for _ in range(2):
        assert cpu_split.decide('vit_minimal_sym_6x4.cifar10', 256, tmp_path, budget=2, say=said.append).processes == 2
    assert measured == [1, 2, 1, 2] and not (tmp_path / 'cpu_split.json').exists()
    assert any('not kept' in line for line in said)


def test_a_probe_runs_the_step_it_is_given():
    """The real probe, briefly: bf16 autocast and the model keywords (a 1-block model) in a bare step."""
    rate = cpu_split.bare_step_rate('vit_minimal_std_mlp_6x1.mnist', 8, 1, 0.05, warmup=1,
                                    model_kwargs={'depth': 1}, bf16=True)
    assert rate > 0


@pytest.mark.slow  # two interpreters importing torch and timm, then four measurements of a split: 15-20 s
def test_the_processes_of_a_split_are_measured_as_one_ddp_group(monkeypatch):
    """The real probe of a split: its processes join one gloo group through the store the caller serves (they would
    wait for a peer until the timeout otherwise) and stop at the same step; the rate is theirs summed. Three times in
    the same two processes, as a decision measures (and on torch 2.13 a probe process hung at random as it freed its
    model: 3 probes in 30 timed out in a loop); then one process against the split, taking turns in the same group."""
    monkeypatch.setattr(cpu_split, 'PROBE_TIMEOUT', 60.0)
    monkeypatch.setattr(cpu_split, 'measure_split', MEASURE_SPLIT)
    with probes.probe_pool(2):
        pids = probes.run_calls(['os.getpid()'] * 2, 60, 'the processes')
        for _ in range(3):
            rate = cpu_split.measure('vit_minimal_sym_6x1.mnist', 16, 2, 1, seconds=0.2, model_kwargs={'depth': 1})
            assert rate > 0
        speedup, alone = cpu_split.measure_split('vit_minimal_sym_6x1.mnist', 16, 2, model_kwargs={'depth': 1},
                                                 rounds=2, block_seconds=0.0, warmup=1)
        assert 0.05 < speedup < 20.0 and alone > 0
        assert probes.run_calls(['os.getpid()'] * 2, 60, 'the processes') == pids  # one import each for all


# How glibc's malloc serves a 16 MiB block in the process that runs it: ``mapped``, the blocks mapped afresh for it;
# ``kept``, the bytes its heap still holds once the block is freed
GLIBC_BLOCK = """
import ctypes
class Info(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in
                'arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks keepcost'.split()]
libc = ctypes.CDLL(None)
libc.mallinfo2.restype, libc.malloc.restype, libc.free.argtypes = Info, ctypes.c_void_p, [ctypes.c_void_p]
before = libc.mallinfo2(); block = libc.malloc(16 << 20); during = libc.mallinfo2(); libc.free(block)
block = dict(mapped=during.hblks - before.hblks, kept=libc.mallinfo2().arena - before.arena)
"""


def _block_in_fresh_process(first: str) -> dict:
    code = f'{first}\n{GLIBC_BLOCK}\nprint(block)'
    out = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True, check=True).stdout
    return eval(out)  # noqa: S307 (the dict the line above printed)


@pytest.fixture
def fresh_glibc_malloc():
    """Skips, naming why, unless a fresh process's malloc is glibc's as it starts: a freed 16 MiB block mapped
    afresh and given back."""
    if platform.system() != 'Linux' or platform.libc_ver()[0] != 'glibc':
        pytest.skip("the allocator's settings are glibc's (this C library is another)")
    if _block_in_fresh_process('') != dict(mapped=1, kept=0):
        pytest.skip("a fresh process's malloc already keeps a freed 16 MiB block (set by its environment)")


def test_the_trainer_keeps_what_a_step_frees(monkeypatch, fresh_glibc_malloc):
    """``keep_freed_memory``: a block of 16 MiB comes from the heap and stays there once freed, where a fresh
    process maps it afresh and gives it back; the trainer's process sets it before it builds anything."""
    machine = str(Path(cpu_split.__file__).parents[2] / 'machine.py')  # alone: the package imports torch (4 s)
    kept = _block_in_fresh_process(
        f'import importlib.util as u; spec = u.spec_from_file_location("m", {machine!r}); '
        'm = u.module_from_spec(spec); spec.loader.exec_module(m); assert m.keep_freed_memory()')
    assert kept['mapped'] == 0 and kept['kept'] >= 8 << 20

    class Told(Exception):
        pass

    def told():
        raise Told
    monkeypatch.setattr(train_mod, 'keep_freed_memory', told)
    with pytest.raises(Told):
        run_inprocess(DDP_ARGS + ['--data-dir', 'unused', '--output', 'unused'])


@pytest.mark.slow  # a probe process importing torch and timm: about 5 s
def test_every_probe_process_keeps_what_a_step_frees(fresh_glibc_malloc):
    """The decision's probe processes measure with the allocator the trainer has: before any step, a 16 MiB block
    there comes from the heap and stays there once freed."""
    with probes.probe_pool(1):
        [probe] = probes.run_calls([f'(exec({GLIBC_BLOCK!r}, g := {{}}), g["block"])[1]'], 60, 'the block')
    assert probe['mapped'] == 0 and probe['kept'] >= 8 << 20


@pytest.mark.slow  # a process started afresh after each of three failures, each importing torch and timm: 15-20 s
def test_a_probe_process_answers_call_after_call_and_says_why_one_failed():
    """The decision's probe processes (``probes``): each answers its calls in turn, whatever a library prints; a call
    that raises, ends its process or does not answer in time is one line naming why, and the next call is answered
    by a process started afresh. None outlives the block."""
    import psutil
    with probes.probe_pool(1):
        first = probes.run_calls(['os.getpid()'], 60, 'the pid')
        assert probes.run_calls(['print("a library speaking") or 3'], 60, 'a call') == [3]
        assert probes.run_calls(['os.getpid()'], 60, 'the pid') == first
        for call, why in (('1 / 0', 'ZeroDivisionError: division by zero'),
                          ('os.kill(os.getpid(), 9)', 'ended by signal 9 (SIGKILL)'),
                          ('time.sleep(30)', 'no answer in time')):
            with pytest.raises(RuntimeError, match=f'^the call failed: {re.escape(why)}$'):
                probes.run_calls([call], 2, 'the call')
            assert probes.run_calls(['2 + 2'], 60, 'the next') == [4]
        last = probes.run_calls(['os.getpid()'], 60, 'the pid')
    assert not psutil.pid_exists(last[0])


def test_the_store_a_split_meets_at_listens_on_the_loopback_address_alone():
    """The store of a split's probe and of its run (torch's own would listen on every interface)."""
    import psutil
    from datetime import timedelta
    with cpu_split._loopback_store(2, timedelta(seconds=10)) as port:
        listening = [c.laddr for c in psutil.Process().net_connections(kind='tcp')
                     if c.status == psutil.CONN_LISTEN and c.laddr.port == port]
    assert [addr.ip for addr in listening] == ['127.0.0.1']


def test_a_decision_kept_from_another_kind_of_probe_is_measured_again(monkeypatch, tmp_path, quiet):
    """The probe's kind is part of the cache key: a decision measured with independent processes (the probe before
    the DDP group) is not this probe's answer."""
    calls = []
    monkeypatch.setattr(cpu_split, 'measure', lambda m, b, n, t, **k: calls.append(n) or float(n))
    decide = functools.partial(cpu_split.decide, 'vit_minimal_sym_6x4.cifar10', 256, tmp_path, budget=2,
                               say=lambda *a: None)
    monkeypatch.setattr(cpu_split, 'PROBE', 'independent')
    decide()
    monkeypatch.setattr(cpu_split, 'PROBE', 'ddp')
    decide()
    decide()
    assert calls == [1, 2, 1, 2] and len(json.loads((tmp_path / 'cpu_split.json').read_text())) == 2


def _plan(argv, explicit=None, **kwargs):
    args, provenance = train_mod.parse_args(argv)
    if explicit is not None:
        provenance = dataclasses.replace(provenance, explicit=tuple(explicit))
    return resolve_plan(args, provenance, **kwargs)


@pytest.mark.parametrize('native', [True, False], ids=['native bf16', 'no native bf16'])
def test_short_runs_gpu_runs_and_launched_processes_stay_one_process(monkeypatch, native):
    """... and a long run measures its split, with bf16 or fp32 among what it measures on a CPU with native bf16."""
    from timm_minimal.training.cpu import policy as cpu_policy
    monkeypatch.delenv('ACCELERATE_MIXED_PRECISION', raising=False)
    monkeypatch.setattr(cpu_policy, 'cpu_has_bf16', lambda: native)
    expected_bf16 = None if native else False
    monkeypatch.setattr(cpu_split, 'core_budget', lambda: 2)
    monkeypatch.setattr(cpu_split, 'decide', lambda *a, **k: pytest.fail('measured a run that does not split'))
    plan = _plan(['--model', 'vit_minimal_sym_6x4', '--dataset', 'cifar10', '--epochs', '2', '--cpu'])
    assert plan.processes == 1 and not plan.starts_split  # 100,000 images: too short to repay a probe
    assert plan.saved_options()['cpu_processes'] == 1  # kept for a resume
    long_run = ['--model', 'vit_minimal_sym_6x4', '--dataset', 'cifar10', '--epochs', '100', '--cpu']
    monkeypatch.setenv('WORLD_SIZE', '2')
    assert not _plan(long_run).starts_split  # a process of a launched group
    monkeypatch.delenv('WORLD_SIZE')
    assert not _plan(long_run, split=False).starts_split  # train(args) from Python trains in its own process
    measured = []
    monkeypatch.setattr(cpu_split, 'decide', lambda model, batch, cache, before, **step: measured.append((model, step))
                        or cpu_split.Decision(2, True, False, {'1 x 2': 900.0, '2 x 1 compiled unpadded': 1200.0}))
    plan = _plan(long_run + ['--model-kwargs', 'depth=2'])
    assert plan.processes == 2 and plan.starts_split and plan.threads is None
    # the probe times the run's own step: the tagged model, its keywords, its precision and compilation
    # (compilation left to it: measured eager and compiled), and the split's choice is kept for a resume
    assert measured == [('vit_minimal_sym_6x4.cifar10', dict(model_kwargs={'depth': 2}, bf16=expected_bf16,
                                                             compiled=None, padded=None))]
    saved = plan.saved_options()
    assert plan.compile and saved['compile'] is True and saved['cpu_processes'] == 2
    assert not plan.pad_heads and saved['pad_heads'] is False  # the padding the decision chose, kept for a resume
    assert plan.cpu_rates == {'1 x 2': 900.0, '2 x 1 compiled unpadded': 1200.0}  # the run record keeps them
    assert measured[-1][1]['padded'] is None
    _plan(long_run + ['--pad-heads'])
    assert measured[-1][1]['padded'] is True
    assert _plan(long_run + ['--cpu-processes', '1']).processes == 1
    # the precision the decision chose is the run's, kept for a resume; one named is not measured
    monkeypatch.setattr(cpu_split, 'decide', lambda model, batch, cache, before, **step: measured.append((model, step))
                        or cpu_split.Decision(2, False, True, {'2 x 1 bf16': 1700.0}, bf16=True))
    plan = _plan(long_run)
    assert plan.precision == 'bf16' and plan.saved_options()['mixed_precision'] == 'bf16'
    for named in ('no', 'bf16'):
        assert _plan(long_run + ['--mixed-precision', named]) and measured[-1][1]['bf16'] is (named == 'bf16')


def test_the_decision_is_the_machines_wherever_cache_dir_decodes_the_data(monkeypatch, tmp_path, data, caplog):
    """The decision describes the CPU: kept in the machine's cache folder ($TIMM_MINIMAL_CACHE), so a run that decodes
    its data into a new --cache-dir does not measure the machine again, and says what it took and from where."""
    monkeypatch.delenv('OMP_NUM_THREADS', raising=False)
    monkeypatch.setenv('TIMM_MINIMAL_CACHE', str(tmp_path / 'machine'))
    monkeypatch.setattr(cpu_split, 'core_budget', lambda: 2)
    monkeypatch.setattr(cpu_split, 'free_cores', lambda budget, seconds=0.3: budget)
    measured = []
    monkeypatch.setattr(cpu_split, 'measure', lambda m, b, n, t, **step: measured.append(n) or float(n))
    monkeypatch.setattr(cpu_split, 'measure_padding', lambda m, b, t, **step: measured.append('padding') or 1.2)
    monkeypatch.setattr(cpu_split, 'measure_bf16', lambda m, b, t, **step: measured.append('bf16') or 0.9)
    long_run = ['--model', 'vit_minimal_sym_6x4', '--dataset', 'mnist', '--cpu', '--epochs', '100', *map(str, data)]
    caplog.set_level(logging.INFO, logger='timm_minimal')
    assert _plan(long_run + ['--cache-dir', str(tmp_path / 'a')]).processes == 2
    first = len(measured)
    assert first >= 2 and (tmp_path / 'machine' / 'cpu_split.json').is_file()
    assert _plan(long_run + ['--cache-dir', str(tmp_path / 'b')]).processes == 2
    assert len(measured) == first and not (tmp_path / 'a' / 'cpu_split.json').exists()
    said = caplog.messages
    assert [line for line in said if line.startswith('This CPU measured before how vit_minimal_sym_6x4.mnist at batch')
            and ': 2 x 1' in line and str(tmp_path / 'machine' / 'cpu_split.json') in line]


def test_the_plan_is_resolved_once_and_the_options_no_longer_hold_it(monkeypatch):
    """Every field the plan decides is gone from the options that the stages after it read, so a stage that reads
    one there fails at once; args.yaml records them as given, with the decided processes and threads."""
    monkeypatch.delenv('OMP_NUM_THREADS', raising=False)
    monkeypatch.setattr(cpu_split, 'core_budget', lambda: 2)
    monkeypatch.setattr(cpu_split, 'free_cores', lambda budget: 1)
    plan = _plan(['--model', 'vit_minimal_sym_6x4', '--dataset', 'mnist', '--cpu', '--epochs', '1'])
    assert plan.model == 'vit_minimal_sym_6x4.mnist' and plan.dataset_kind == 'mnist' and plan.device == 'cpu'
    assert plan.recipe == 'mnist_cpu' and plan.compile is False and plan.threads == 1
    for group in dataclasses.fields(plan.options):
        for name in PLANNED:
            with pytest.raises(AttributeError):
                getattr(getattr(plan.options, group.name), name)
    saved = plan.saved_options()
    assert saved['model'] == 'vit_minimal_sym_6x4' and saved['threads'] == 1 and 'resume' not in saved
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.threads = 2


def test_a_missing_dataset_is_named_before_the_split_is_measured(monkeypatch, tmp_path, capsys):
    """A long CPU run on a machine that has not measured its split yet measures it first (a minute or more): a dataset
    that is not there is named before that, in one line, and no run folder is left."""
    monkeypatch.delenv('OMP_NUM_THREADS', raising=False)
    monkeypatch.setattr(cpu_split, 'core_budget', lambda: 2)
    monkeypatch.setattr(cpu_split, 'free_cores', lambda budget: budget)

    def measured(*args, **kwargs):
        raise AssertionError('the split was measured before the data were looked for')
    monkeypatch.setattr(cpu_split, '_measure_candidates', measured)
    argv = ['--model', 'vit_minimal_std_6x1', '--dataset', 'mnist', '--cpu', '--data-dir', tmp_path / 'nothing',
            '--no-download', '--cache-dir', tmp_path / 'cache', '--output', tmp_path / 'run']
    assert run_inprocess(argv) == train_mod.EXIT_BAD_INPUT
    out, err = capsys.readouterr()
    assert 'MNIST not found' in err and err.strip().count('\n') == 0 and 'Measuring once' not in out
    assert not (tmp_path / 'run').exists()


def test_a_resumed_run_keeps_its_process_count(data, tmp_path):
    run = tmp_path / 'run'
    assert run_inprocess(DDP_ARGS + data + ['--epochs', '1', '--output', run]) == 0
    assert yaml.safe_load((run / 'args.yaml').read_text())['cpu_processes'] == 1
    saved = yaml.safe_load((run / 'args.yaml').read_text())
    (run / 'args.yaml').write_text(yaml.safe_dump(dict(saved, cpu_processes=2)))
    args, _ = train_mod.parse_args(['--resume', str(run), '--epochs', '2'])
    assert args.cpu_processes == 2


def test_more_processes_than_cores_are_refused_unless_a_resume_kept_them(monkeypatch, capsys):
    monkeypatch.setattr(cpu_split, 'core_budget', lambda: 2)
    args, _ = train_mod.parse_args(['--model', 'vit_minimal_sym_6x4', '--dataset', 'cifar10', '--cpu',
                                    '--cpu-processes', '3', '--batch-size', '255'])  # a batch the 3 divide
    with pytest.raises(UsageError, match='--cpu-processes 3 is more than the 2 core'):
        resolve_plan(args, Provenance(explicit=('cpu_processes',)))
    args.resume = 'run'  # the count came from the resumed run's args.yaml: said, and kept (the same training)
    assert resolve_plan(args, Provenance()).processes == 3
    assert 'they share them (slower, the same training)' in capsys.readouterr().out
    with pytest.raises(UsageError):  # asked for on this command line: refused
        resolve_plan(args, Provenance(explicit=('cpu_processes',)))


@pytest.mark.slow
def test_two_cpu_processes_train_what_one_process_trains(data, tmp_path):
    """timm-minimal-train --cpu-processes 2 (its own launch, two gloo processes of one thread) against one process:
    the same weights within the tolerance of the accelerate test, the count in run.json."""
    single, split = tmp_path / 'single', tmp_path / 'split'
    assert run_inprocess(DDP_ARGS + data + ['--output', single]) == 0
    proc = run_subprocess(DDP_ARGS + data + ['--output', split, '--cpu-processes', '2'], threads=2)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert 'Training as 2 processes x 1 thread(s)' in proc.stdout
    run = json.loads((split / 'run.json').read_text())
    assert run['launches'][-1]['num_processes'] == 2 and run['distributed']['per_process_batch_size'] == 16
    ws, wd = weights(single), weights(split)
    for k in ws:
        torch.testing.assert_close(wd[k], ws[k], rtol=1e-3, atol=1e-4)
    for a, b in zip(metrics(single), metrics(split)):
        assert abs(a['train_loss'] - b['train_loss']) < 1e-4 and abs(a['test_acc'] - b['test_acc']) < 0.5


def test_a_split_run_without_its_data_is_one_line_and_exit_2(tmp_path, capsys, monkeypatch):
    """The data are found in the launching process first, so a missing dataset is one line, not one per process."""
    monkeypatch.setattr(cpu_split, 'core_budget', lambda: 2)  # a machine with two cores, whatever runs the test
    rc = train_mod.main(['--model', 'vit_minimal_sym_6x4', '--dataset', 'cifar10', '--data-dir', str(tmp_path / 'no'),
                         '--no-download', '--output', str(tmp_path / 'run'), '--cpu-processes', '2'])
    err = capsys.readouterr().err
    assert rc == 2 and err.count('\n') == 1 and 'CIFAR-10 not found' in err and not (tmp_path / 'run').exists()


def _split_run(data, run, tmp):
    """A 2-process CPU run in a subprocess, once its workers train: the launcher and the pids of its family."""
    import psutil
    env = dict(os.environ, OMP_NUM_THREADS='2', TMPDIR=str(tmp))
    proc = subprocess.Popen([sys.executable, '-m', 'timm_minimal.training.train', *map(str, DDP_ARGS + data),
                             '--epochs', '100', '--output', str(run), '--cpu-processes', '2'], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 300
    while not (run / 'run.json').is_file() and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.5)  # the workers train once run.json is written
    assert proc.poll() is None, proc.stdout.read()[-3000:]
    family = [proc.pid] + [c.pid for c in psutil.Process(proc.pid).children(recursive=True)]
    assert len(family) >= 3  # the launcher and two workers
    return proc, family


def _all_ended(family, seconds=60):
    import psutil
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        alive = [p for p in family if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]
        if not alive:
            return []
        time.sleep(0.2)
    return [psutil.Process(p).cmdline() for p in alive]


def _lock_frees(folder, seconds=30):
    """Take and release ``folder``'s lock once it is free. A process whose main thread is already a zombie may still
    be ending its other threads (torch's, gloo's), and the OS frees its lock only after the last one: so a lock held
    past the end of every process counts, not one the last thread frees a moment later."""
    from timm_minimal.training.run.files import FolderBusy
    deadline = time.monotonic() + seconds
    while True:
        try:
            folder.lock()
            break
        except FolderBusy:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)
    folder.unlock()


@pytest.mark.slow
@pytest.mark.parametrize('sig, status', [(signal.SIGINT, 130), (signal.SIGTERM, 128 + signal.SIGTERM),
                                         (signal.SIGHUP, 128 + signal.SIGHUP), (signal.SIGKILL, -signal.SIGKILL)])
def test_a_signal_to_the_launcher_ends_every_process_of_the_run_and_frees_its_lock(sig, status, data, tmp_path):
    """Ctrl-C, kill, a closed terminal (SIGHUP) or SIGKILL to timm-minimal-train during a 2-process CPU run: both
    workers end with it (after SIGKILL through the kernel's parent-death signal), the run's lock is free, and nothing
    is left in the temp folder; while it trained, every socket of the run listened on the loopback address alone (the
    rendezvous store included)."""
    import psutil
    from timm_minimal.training.run.folder import RunFolder
    run, tmp = tmp_path / 'run', tmp_path / 'tmp'
    tmp.mkdir()
    proc, family = _split_run(data, run, tmp)
    listening = [c.laddr for pid in family for c in psutil.Process(pid).net_connections(kind='tcp')
                 if c.status == psutil.CONN_LISTEN]
    assert listening and all(addr.ip == '127.0.0.1' for addr in listening), listening  # the store, gloo: loopback
    proc.send_signal(sig)
    assert proc.wait(timeout=60) == status
    assert _all_ended(family) == []
    _lock_frees(RunFolder(run))
    assert not [p for p in tmp.iterdir() if p.name.startswith(('torchelastic_', 'timm-minimal-split-'))]


@pytest.mark.slow
@pytest.mark.parametrize('rank', ['0', '1'])
def test_a_worker_that_dies_ends_the_run_with_one_line_and_the_resume_command(data, tmp_path, rank):
    """The launcher names the killed process, whichever it is (the main one included, whose status it would
    otherwise pass on); the survivor says in one line that it lost it, with no traceback of gloo's."""
    import psutil
    run, tmp = tmp_path / 'run', tmp_path / 'tmp'
    tmp.mkdir()
    proc, family = _split_run(data, run, tmp)
    worker = next(p for p in family[1:] if psutil.Process(p).environ().get('RANK') == rank)
    os.kill(worker, signal.SIGKILL)
    assert proc.wait(timeout=120) == 1
    out = proc.stdout.read()
    lines = out.strip().splitlines()
    assert lines[-1] == (f'timm-minimal-train: error: process {rank} of the 2 of this run was ended by signal 9 '
                         f'(SIGKILL); the others were stopped. Resume it from its last checkpoint: timm-minimal-train '
                         f'--resume {run}')
    assert 'Traceback' not in out and '[rank' not in out
    assert _all_ended(family) == []


def test_a_one_process_run_takes_the_cores_other_work_leaves_free(monkeypatch, capsys):
    """Beside another job two threads fight it (several times slower than one): the run measures the cores' busy
    share at its start and trains on what is free, keeps the count in args (args.yaml, a resume), and takes
    --threads or OMP_NUM_THREADS as given."""
    import psutil
    monkeypatch.setattr(cpu_split.os, 'sched_getaffinity', lambda pid: {0, 1}, raising=False)
    monkeypatch.setattr(psutil, 'cpu_percent', lambda interval, percpu: [97.0, 12.0])
    assert cpu_split.free_cores(2) == 1
    monkeypatch.setattr(psutil, 'cpu_percent', lambda interval, percpu: [3.0, 8.0])
    assert cpu_split.free_cores(2) == 2
    monkeypatch.setattr(psutil, 'cpu_percent', lambda interval, percpu: [100.0, 100.0])
    assert cpu_split.free_cores(2) == 1  # never none
    monkeypatch.delenv('OMP_NUM_THREADS', raising=False)
    monkeypatch.setattr(cpu_split, 'free_cores', lambda budget: 1)
    before = torch.get_num_threads()
    try:
        sample = ['--model', 'vit_minimal_sym_6x4', '--dataset', 'mnist-sample', '--cpu']
        assert _plan(sample).threads == 1
        assert 'Other work keeps 1 of the 2 cores busy: training on 1 thread(s)' in capsys.readouterr().out
        assert _plan(sample + ['--threads', '2']).threads == 2
        monkeypatch.setenv('OMP_NUM_THREADS', '2')
        assert _plan(sample).threads == 2
    finally:
        torch.set_num_threads(before)


def test_a_splits_processes_count_elapsed_time_from_their_launcher(monkeypatch):
    """The split's processes get what the launcher measured and when it started: ``elapsed`` in metrics.jsonl and
    the time to a target then include the measurement and the launcher's start-up."""
    from timm_minimal.training.cpu import policy as cpu_policy
    from timm_minimal.training.run import clock as recording
    monkeypatch.setattr(cpu_split, 'decide', lambda *a, **k: cpu_split.Decision(2, False, rates={'2 x 1': 900.0}))
    monkeypatch.setattr(cpu_split, 'core_budget', lambda: 2)
    plan = _plan(['--model', 'vit_minimal_sym_6x4', '--dataset', 'mnist-sample', '--epochs', '30', '--cpu'])
    assert plan.starts_split
    seen = {}
    monkeypatch.setattr(cpu_split, 'run_split_processes',
                        lambda argv, n, env, compiled, padded, main_fds, bf16: seen.update(env) or (0, 0))
    assert cpu_policy.run_split(plan, ['--model', 'vit_minimal_sym_6x4']) == 0
    started = float(seen[recording.LAUNCHED_AT_ENV])
    assert time.time() - 600 < started <= recording.launched_at() + 1e-3
    assert json.loads(seen[cpu_policy.SPLIT_RATES_ENV]) == {'2 x 1': 900.0}
    monkeypatch.setenv(recording.LAUNCHED_AT_ENV, str(time.time() - 100))
    assert 100 <= recording.launch_elapsed() < 110
    monkeypatch.setenv(recording.LAUNCHED_AT_ENV, 'soon')  # a record read back is checked, not trusted
    with pytest.raises(UsageError, match=recording.LAUNCHED_AT_ENV):
        recording.launch_elapsed()
    monkeypatch.setenv('WORLD_SIZE', '2')
    for bad in ('{not json', '[1, 2]', '{"2 x 1": "fast"}'):
        monkeypatch.setenv(cpu_policy.SPLIT_RATES_ENV, bad)
        assert resolve_plan(train_mod.parse_args(['--model', 'vit_minimal_sym_6x4', '--dataset', 'mnist-sample',
                                                  '--cpu'])[0]).cpu_rates is None


@pytest.mark.skipif(not sys.platform.startswith('linux'), reason="the parent-death signal is Linux's")
def test_a_probe_or_worker_ends_when_the_process_that_started_it_is_killed(tmp_path):
    """The CPU decision's probes and a split run's processes are started with ``die_with_parent``: SIGKILL to their
    parent (no handler runs) ends them too, where a probe kept running after its launcher was ended."""
    import psutil
    code = ('import functools, os, subprocess, sys, time\n'
            'from timm_minimal.training.cpu.split import die_with_parent\n'
            'child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"],\n'
            '                         preexec_fn=functools.partial(die_with_parent, os.getpid()))\n'
            'print(child.pid, flush=True)\n'
            'time.sleep(120)\n')
    parent = subprocess.Popen([sys.executable, '-c', code], stdout=subprocess.PIPE, text=True)
    child = int(parent.stdout.readline())
    assert psutil.pid_exists(child)
    parent.kill()
    parent.wait(timeout=30)
    assert _all_ended([child], seconds=30) == []


def test_a_batch_the_processes_do_not_divide_is_refused_once_before_any_process_starts(monkeypatch):
    """--cpu-processes 2 with a batch of 33 is one line from the launcher (the split's processes each refused it);
    left to decide, a batch the cores do not divide trains as one process without measuring a split."""
    monkeypatch.setattr(cpu_split, 'core_budget', lambda: 2)
    monkeypatch.setattr(cpu_split, 'decide', lambda *a, **k: pytest.fail('measured a split the batch cannot take'))
    sample = ['--model', 'vit_minimal_sym_6x4', '--dataset', 'mnist-sample', '--cpu', '--batch-size', '33']
    with pytest.raises(UsageError, match='--batch-size 33 must be a multiple of --cpu-processes 2: each process '
                                         'trains an equal share of every batch.'):
        _plan(sample + ['--cpu-processes', '2'])
    assert _plan(sample + ['--epochs', '1000']).processes == 1  # 20 million images: long enough to measure


def _record(tmp_path, content):
    path = tmp_path / 'cpu_split.json'
    path.write_text(content)
    return path


@pytest.mark.parametrize('content, says', [
    ('[' * 100_000 + ']' * 100_000, 'RecursionError'),
    (json.dumps({'k': dict(processes=2, rates={f'c{i}': 1.0 for i in range(100_000)})}), 'is over 1,048,576 bytes'),
    (json.dumps({'k': dict(processes=2, rates={f'c{i}': 1.0 for i in range(40)})}), 'not at most 16 labelled numbers'),
    ('{"k": {"processes": "2"}}', 'no whole "processes"'),
], ids=['nested', 'huge', 'many rates', 'a string'])
def test_a_record_that_is_not_one_is_set_aside_once_and_measured_again(tmp_path, caplog, content, says):
    path = _record(tmp_path, content)
    assert cpu_split.read_cache(path) == {}
    assert [r.levelname for r in caplog.records] == ['WARNING'] and says in caplog.text
    assert not path.exists() and (tmp_path / 'cpu_split.json.invalid').read_text() == content
    assert cpu_split.read_cache(path) == {} and len(caplog.records) == 1  # said once: the file is aside


def test_a_read_only_cache_is_said_and_the_run_goes_on(monkeypatch, tmp_path, quiet, caplog):
    monkeypatch.setattr(cpu_split, 'measure', lambda m, b, n, t, **k: float(n))
    monkeypatch.setattr(cpu_split, 'measure_padding', lambda m, b, t, **step: 1.0)
    monkeypatch.setattr('timm_minimal.training.cpu.split.write_json_atomic',
                        lambda *a, **k: (_ for _ in ()).throw(PermissionError(13, 'Permission denied')))
    assert cpu_split.decide('vit_minimal_sym_6x4.cifar10', 256, tmp_path, budget=2, say=lambda *a: None).processes == 2
    warned = [r.getMessage() for r in caplog.records if r.levelname == 'WARNING']
    assert len(warned) == 1 and 'cannot be kept in' in warned[0] and 'Permission denied' in warned[0], warned


def test_the_decision_speaks_through_the_log_so_q_silences_it(monkeypatch, tmp_path, quiet, capsys, caplog):
    """-q sets the package's log to warnings: the decision's lines are info, the log's, not prints."""
    monkeypatch.setattr(cpu_split, 'measure', lambda m, b, n, t, **k: float(n))
    monkeypatch.setattr(cpu_split, 'measure_padding', lambda m, b, t, **step: 1.0)
    caplog.set_level(logging.WARNING, logger='timm_minimal')
    cpu_split.decide('vit_minimal_sym_6x4.cifar10', 256, tmp_path, budget=2)
    assert capsys.readouterr().out == '' and not caplog.records
    caplog.set_level(logging.INFO, logger='timm_minimal')
    cpu_split.decide('vit_minimal_sym_6x4.mnist', 256, tmp_path, budget=2)
    assert any(m.startswith('Measuring once on this CPU') for m in caplog.messages)


def test_an_empty_cache_variable_means_the_default_folder(monkeypatch):
    from pathlib import Path
    from timm_minimal.machine import default_cache_dir
    monkeypatch.setenv('TIMM_MINIMAL_CACHE', '')
    assert default_cache_dir() == Path.home() / '.cache' / 'timm_minimal'
