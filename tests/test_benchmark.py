"""The benchmark suite: the timm reference computes what our baseline computes, FLOPs are counted as
the paper's architecture implies, and ``--quick`` produces a sane report (a smoke test, not a speed test)."""
import json
import math
import re

import pytest
import torch

import timm_minimal
from timm_minimal.tools import benchmark as B

torch.set_num_threads(1)


def _analytic_flops(depth=6, tokens=16, width=60, hidden=256, mlp=True, patch_dim=49, classes=10):
    """2 x MACs of the matrix products of std attention (+ MLP) at the paper's geometry."""
    per_layer = 2 * tokens * 4 * width * width + 2 * 2 * tokens * tokens * width
    if mlp:
        per_layer += 2 * tokens * 2 * width * hidden
    return depth * per_layer + 2 * tokens * patch_dim * width + 2 * width * classes


def test_parse_name_and_baseline():
    assert B.parse_name('vit_minimal_qkonly_mlp_12x1') == dict(attn='qkonly', mlp=True, depth=12, heads=1)
    assert B.parse_name('vit_minimal_sym_6x4') == dict(attn='sym', mlp=False, depth=6, heads=4)
    assert B.baseline_of('vit_minimal_sym_12x4') == 'vit_minimal_std_mlp_12x1'
    assert B.select_models(['vit_minimal_*_6x*']) == [n for n in timm_minimal.ARCHITECTURES if '_6x' in n]
    with pytest.raises(ValueError):
        B.select_models(['resnet*'])


@pytest.mark.parametrize('fused', [True, False])
def test_timm_reference_is_the_same_function(fused):
    ours = B.build_model('vit_minimal_std_mlp_6x1', fused=fused).eval()
    ref = B.build_timm_reference(depth=6, num_heads=1, fused=fused).eval()
    assert B.count_params(ref) == B.count_params(ours)  # trainable
    assert B.count_params(ref, trainable_only=False) == B.count_params(ours) + 16 * 60  # + the frozen sin-cos table
    missing, unexpected = ref.load_state_dict(ours.state_dict(), strict=False)
    assert missing == ['pos_embed'] and unexpected == []
    x = torch.randn(3, 1, 28, 28)
    with torch.no_grad():
        torch.testing.assert_close(ref(x), ours(x), rtol=1e-5, atol=1e-5)


def test_clock_choice():
    cpu = torch.device('cpu')
    torch.set_num_threads(1)  # conftest puts the suite's count back after the test
    assert B.BenchmarkConfig().resolved_clock(cpu) == 'cpu'
    assert B.BenchmarkConfig(clock='wall').resolved_clock(cpu) == 'wall'
    torch.set_num_threads(2)
    assert B.BenchmarkConfig().resolved_clock(cpu) == 'wall'  # a process's CPU time over two threads is no latency
    with pytest.raises(ValueError, match='one thread'):
        B.BenchmarkConfig(clock='cpu').resolved_clock(cpu)
    assert B.BenchmarkConfig().resolved_clock(torch.device('cuda')) == 'wall'
    with pytest.raises(ValueError):
        B.BenchmarkConfig(clock='cpu').resolved_clock(torch.device('cuda'))


def test_flops_match_the_architecture():
    model = B.build_model('vit_minimal_std_mlp_6x1')
    assert B.count_flops(model, (1, 28, 28)) == _analytic_flops()  # the true head width, not the padded one
    assert {m.head_pad for m in model.modules() if hasattr(m, 'head_pad')} == {4}  # and the padding is back
    # SDPA and the explicit softmax path count the same
    assert B.count_flops(B.set_fused_attn(model, False), (1, 28, 28)) == _analytic_flops()
    no_mlp = B.build_model('vit_minimal_std_6x1')
    assert B.count_flops(no_mlp, (1, 28, 28)) == _analytic_flops(mlp=False)
    fwd_bwd = B.count_flops(model, (1, 28, 28), backward=True)
    assert 2.5 * _analytic_flops() < fwd_bwd < 3.5 * _analytic_flops()


def test_scaling_geometry():
    geo = B.geometry('mnist', 256)
    assert geo['img_size'] == 112 and geo['tokens'] == 256
    model = B.build_model('vit_minimal_sym_6x1', img_size=112, depth=3)
    assert len(model.blocks) == 3 and model(torch.randn(1, 1, 112, 112)).shape == (1, 10)
    with pytest.raises(ValueError):
        B.geometry('mnist', 20)


def test_accuracy_results_reader(tmp_path):
    """The benchmark reads reproduce's rows as reproduce's own report does: typed, in percent, a bad row refused."""
    from timm_minimal.cli import UsageError
    assert B.load_reproduce_results(str(tmp_path / 'missing.json')) is None
    path = tmp_path / 'reproduce_paper.json'
    row = dict(model='vit_minimal_sym_6x1', architecture='vit_minimal_sym_6x1', dataset='mnist', depth=6,
               params=70930, epochs=5, val_acc=97.0, train_acc=98.0, paper_params=69910, paper_val_acc=97.80)
    untrained = dict(row, model='vit_minimal_std_mlp_6x1', val_acc=None)
    path.write_text(json.dumps([row, untrained, row]))  # a row of both tables, once
    loaded = B.load_reproduce_results(str(path))
    assert len(loaded) == 1 and loaded[0]['val_acc'] == 97.0
    for bad in (dict(row, val_acc='97'), dict(row, val_acc=float('nan')), {'rows': [row]}):
        path.write_text(json.dumps(bad if isinstance(bad, dict) and 'rows' in bad else [bad]))
        with pytest.raises(UsageError, match='--results: '):
            B.load_reproduce_results(str(path))


def test_the_benchmark_runs_on_its_threads_and_leaves_the_count_it_found(monkeypatch):
    """--threads N is the count the measurements run on, and the process has its own count back after the run."""
    import types
    from timm_minimal.machine import torch_threads
    from timm_minimal.tools.benchmark import suite
    seen = []
    monkeypatch.setattr(suite, 'MemoryServer', lambda: types.SimpleNamespace(close=lambda: None))
    monkeypatch.setattr(suite, '_run', lambda config, server: seen.append(torch.get_num_threads()) or {})
    with torch_threads(2):
        suite.run_benchmark(B.BenchmarkConfig(threads=1))
        assert seen == [1] and torch.get_num_threads() == 2


@pytest.fixture(scope='module')
def quick_run(tmp_path_factory):
    out = tmp_path_factory.mktemp('bench')
    results_json = out / 'reproduce_paper.json'
    results_json.write_text(json.dumps([dict(model='vit_minimal_sym_6x1', architecture='vit_minimal_sym_6x1',
                                             dataset='mnist', depth=6, params=70930, epochs=1, val_acc=91.5,
                                             train_acc=92.0, paper_val_acc=None)]))
    argv = ['--quick', '--output', str(out / 'BENCHMARKS.md'), '--results', str(results_json), '--threads', '1',
            '--device', 'cpu']  # the CPU clock and memory methods, on a machine with a GPU too
    results = B.run(argv)
    return out, results


def _table_rows(md, heading):
    """Header and data rows (lists of cells) of the first table after ``heading``."""
    section = md.split(heading, 1)[1]
    lines = []
    for line in section[section.index('\n|') + 1:].splitlines():
        if not line.startswith('|'):
            break
        lines.append([c.strip() for c in line.strip().strip('|').split('|')])
    return lines[0], lines[2:]


def _number(cell):
    return float(re.sub(r'[,%`]', '', cell.split(' ')[0]))


@pytest.mark.slow
def test_quick_report_files(quick_run):
    out, results = quick_run
    md = (out / 'BENCHMARKS.md').read_text()
    for png in ('speedup_vs_flops.png', 'scaling_tokens.png', 'scaling_depth.png', 'accuracy_vs_params.png'):
        assert (out / 'benchmarks' / png).stat().st_size > 1000, png
    saved = json.loads((out / 'benchmarks' / 'results.json').read_text())
    assert saved['env']['torch'] == torch.__version__ and saved['env']['clock'] == 'cpu'
    assert all(len(r['infer_wall']) == len(r['infer']) for r in saved['models'])
    for heading in ('## Setup', '## Per model', '## Minimal variants against the paper\'s baseline',
                    '## Implementation overhead', '## Fused SDPA on against off', '## Scaling', '## Accuracy', '## Method'):
        assert heading in md, heading
    assert torch.__version__ in md and 'torch threads' in md and '| batch size | 8' in md
    if saved['env']['device'] == 'cpu':  # every CPU figure with the CPU's flags
        from timm_minimal.machine import cpu_signature
        assert f"| CPU flags | {cpu_signature()['flags']} |" in md
        assert 'at the start) |' in md  # the busy share of the cores measured as the run began, not guessed
    assert 'Quick smoke-test run' in md


@pytest.mark.slow  # the --quick benchmark of the module fixture runs for the slow tests only
def test_quick_per_model_table_is_sane(quick_run):
    out, _ = quick_run
    md = (out / 'BENCHMARKS.md').read_text()
    header, rows = _table_rows(md, '## Per model')
    assert header[:8] == ['model', 'attention', 'MLP', 'params', 'fwd MFLOPs/img', 'infer img/s', 'train img/s',
                          'infer GFLOP/s']
    assert header[8:] == ['infer mem MiB', 'train mem MiB']
    names = [r[0] for r in rows]
    assert names == ['`std_mlp_6x1`', '`sym_6x1`']
    params = {r[0]: _number(r[3]) for r in rows}
    assert params['`std_mlp_6x1`'] == 279106 and params['`sym_6x1`'] == 70930
    for row in rows:
        for cell in row[3:]:
            v = _number(cell)
            assert math.isfinite(v) and v > 0, (row, cell)


@pytest.mark.slow  # the --quick benchmark of the module fixture runs for the slow tests only
def test_quick_ratio_tables_are_sane(quick_run):
    out, results = quick_run
    md = (out / 'BENCHMARKS.md').read_text()
    header, rows = _table_rows(md, '## Minimal variants against the paper\'s baseline')
    assert header[:6] == ['model', 'params ×', 'FLOPs ×', 'FLOP-predicted speed-up', 'infer speed-up', 'train speed-up']
    assert [r[0] for r in rows] == ['`sym_6x1`']
    assert _number(rows[0][1]) == pytest.approx(70930 / 279106, abs=1e-3)
    for cell in rows[0][1:]:
        assert 0 < _number(cell) < 100
    header, rows = _table_rows(md, '## Implementation overhead')
    assert header == ['measurement (SDPA on)', 'ours img/s', 'timm img/s', 'ours / timm', 'ours / ours (noise)']
    assert [r[0] for r in rows] == ['inference, batch 8', 'training, batch 8']
    for row in rows:
        assert all(_number(c) > 0 for c in row[1:])
    assert all(e['max_abs_diff'] < 1e-4 for e in results['timm'])
    header, rows = _table_rows(md, '## Fused SDPA on against off')
    assert [r[0] for r in rows] == ['`std_mlp_6x1`', '`sym_6x1`']
    assert all(_number(c) > 0 for r in rows for c in r[1:])


@pytest.mark.slow  # the --quick benchmark of the module fixture runs for the slow tests only
def test_quick_scaling_and_accuracy(quick_run):
    out, results = quick_run
    sc = results['scaling']
    assert {p['value'] for p in sc['tokens']} == {16, 64} and {p['value'] for p in sc['depth']} == {2, 4}
    for p in sc['tokens'] + sc['depth']:
        assert all(v > 0 for v in p['infer'] + p['train']) and p['mem_train'] > 0
    tokens = {(p['name'], p['value'], p['fused']): p for p in sc['tokens']}
    assert tokens[('vit_minimal_sym_6x1', 64, True)]['flops'] > tokens[('vit_minimal_sym_6x1', 16, True)]['flops']
    md = (out / 'BENCHMARKS.md').read_text()
    assert 'this project\'s reproduction' in md and '91.50' in md


@pytest.mark.slow  # the --quick benchmark of the module fixture runs for the slow tests only
def test_report_rebuilds_from_json(quick_run, tmp_path):
    out, _ = quick_run
    assert B.main(['--from-json', str(out / 'benchmarks' / 'results.json'), '--output', str(tmp_path / 'B.md'),
                   '--results', str(tmp_path / 'none.json')]) == 0  # the exit status of the console script
    md = (tmp_path / 'B.md').read_text()
    assert '## Per model' in md and 'paper\'s Table 2 points only' in md
    assert (tmp_path / 'benchmarks' / 'accuracy_vs_params.png').exists()


@pytest.mark.slow
def test_rss_memory_in_fresh_processes():
    specs = [B.ModelSpec('sym', 'vit_minimal_sym_6x1'), B.ModelSpec('std', 'vit_minimal_std_mlp_6x1')]
    mem = B.measure_memory(specs, torch.device('cpu'), 32, 1, 1, method='rss')
    for res in mem.values():
        assert math.isfinite(res['train']) and res['train'] > 0
    if mem['std']['train_peak_reset']:  # the kernel let the peak-RSS counter be reset: exact per step
        assert mem['sym']['train'] < mem['std']['train']


@pytest.mark.slow
def test_tensor_memory_is_deterministic_and_ordered():
    specs = [B.ModelSpec('sym', 'vit_minimal_sym_6x1'), B.ModelSpec('std', 'vit_minimal_std_mlp_6x1'),
             B.ModelSpec('ref', B.TIMM_REF, depth=6, heads=1)]
    first = B.measure_memory(specs, torch.device('cpu'), 16, 1, 1)
    again = B.measure_memory(specs, torch.device('cpu'), 16, 1, 1)
    for key in first:
        assert first[key]['train'] == pytest.approx(again[key]['train'], rel=0.15)
    assert 0 < first['sym']['train'] < first['std']['train']
    assert first['std']['train'] == pytest.approx(first['ref']['train'], rel=0.1)  # the same function


def test_the_ops_of_ours_and_timms_forward_are_profiled_side_by_side():
    """--timm-ops: the profiler's calls and self time of each op of both forwards, and the ops only one calls."""
    from timm_minimal.tools.benchmark import report, suite
    config = B.BenchmarkConfig.quick_config(timm_ops=True)
    entry = suite._timm_entry(config, 6, 4, ('infer',), torch.device('cpu'), 'wall')
    ours, ref = entry['ops']['ours'], entry['ops']['ref']
    assert ours['aten::addmm']['calls'] == ref['aten::addmm']['calls'] == 10 * (6 * 4 + 1)  # qkv, proj, fc1, fc2, head
    assert all(v['self_ms'] >= 0 for v in ours.values())
    table = report._ops_table(entry)
    assert '| `aten::addmm` | 250 |' in table and 'ops only one model calls:' in table
    from timm_minimal.tools.benchmark import cli
    parse = cli.build_parser().parse_args
    assert cli.config_from_args(parse(['--timm-ops'])).timm_ops and not cli.config_from_args(parse([])).timm_ops
