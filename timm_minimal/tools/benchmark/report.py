"""The markdown report (``BENCHMARKS.md``): one function per section, in the order of the report.

``render_report`` writes the report and its plots from the results of ``run_benchmark`` or from the saved
JSON, without measuring; ``summary_lines`` gives the headline ratios for the console.
"""
import glob
import math
import os
import random
import statistics
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from ...models.paper import PAPER_EPOCHS, VARIANTS
from ...models.vit_minimal import ARCHITECTURES
from ..common import markdown_table
from .accuracy import load_reproduce_results
from .measure import TIMM_REF, geometry, median, parse_name, ratios
from .plots import plot_accuracy, plot_scaling, plot_speedups

ATTN_DESCRIPTION = {attn: v['short'] for attn, v in VARIANTS.items()}


# -- formatting ------------------------------------------------------------------------------------

def _fmt_int(v: float) -> str:
    return f'{int(round(v)):,}'


def _fmt(v: Optional[float], digits: int = 2) -> str:
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return 'n/a'
    return f'{v:.{digits}f}'


def _fmt_tp(v: float) -> str:
    return f'{v:,.0f}' if v >= 100 else f'{v:,.1f}'


def _table(header: Sequence[str], rows: Sequence[Sequence[str]], align: Optional[str] = None) -> str:
    """The report's tables: a label column, then numbers aligned right, unless ``align`` says otherwise."""
    return markdown_table(header, rows, align or 'l' + 'r' * (len(header) - 1))


def median_ci(values: Sequence[float], level: float = 0.95, resamples: int = 2000, seed: int = 0
              ) -> Tuple[float, float, float]:
    """The median and a bootstrap confidence interval of the median (percentile method, seeded)."""
    values = list(values)
    if len(values) < 2:
        m = median(values)
        return m, m, m
    rng = random.Random(seed)
    meds = sorted(statistics.median(rng.choices(values, k=len(values))) for _ in range(resamples))
    lo = meds[int((1 - level) / 2 * resamples)]
    hi = meds[min(resamples - 1, int((1 + level) / 2 * resamples))]
    return median(values), lo, hi


def _ratio_cell(vals: Sequence[float]) -> str:
    m, lo, hi = median_ci(vals)
    return f'{m:.2f} ({lo:.2f}-{hi:.2f})'


def _label(row: Dict[str, Any]) -> str:
    if row['name'] == TIMM_REF:
        return f'timm VisionTransformer ({row["depth"]}x{row["heads"]}, ref.)'
    return row['name'].replace('vit_minimal_', '')


def _paired(row: Dict[str, Any], ref: Dict[str, Any], mode: str) -> List[float]:
    """The measurements of ``ref`` taken in the same block and rounds as those of ``row``."""
    blocks = ref.get(f'{mode}_blocks')
    if blocks is not None and row.get('block') is not None:
        return blocks[row['block']]
    return ref[mode]


def _order(row: Dict[str, Any]) -> Tuple[int, int]:
    return (ARCHITECTURES.index(row['name']) if row['name'] in ARCHITECTURES else len(ARCHITECTURES), row['depth'])


def _name_cell(row: Dict[str, Any]) -> str:
    return _label(row) if row['name'] == TIMM_REF else f'`{_label(row)}`'


def _minimal(models: Sequence[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """Our models with SDPA on, in registry order."""
    return sorted([r for r in models if r['fused'] and r['name'] != TIMM_REF], key=_order)


def _has_memory(rows: Sequence[Dict[str, Any]]) -> bool:
    return any('mem_train' in r for r in rows)


class _Plots:
    """Where the plots go and how the report links them (relative to the report)."""

    def __init__(self, folder: str, output: str) -> None:
        os.makedirs(folder, exist_ok=True)
        self.folder = folder
        out_dir = os.path.dirname(os.path.abspath(output))
        self.link = os.path.relpath(os.path.abspath(folder), out_dir).replace(os.sep, '/')

    def add(self, fname: str, alt: str, draw: Callable[..., str], *args: Any) -> str:
        """Draw ``draw(*args, path)`` into ``fname``; returns the markdown image line."""
        draw(*args, os.path.join(self.folder, fname))
        return f'![{alt}]({self.link}/{fname})\n'


# -- the report ------------------------------------------------------------------------------------

def render_report(results: Dict[str, Any], output: str, plots_dir: Optional[str] = None,
                  results_path: Optional[str] = None) -> str:
    """Write the markdown report (and the PNG plots into ``plots_dir``); returns the markdown."""
    plots = _Plots(plots_dir, output) if plots_dir else None
    md: List[str] = []
    md += _intro_section(results)
    md += _setup_section(results)
    md += _per_model_section(results)
    md += _baseline_section(results, plots)
    md += _timm_section(results)
    md += _sdpa_section(results)
    md += _scaling_section(results, plots)
    md += _accuracy_section(results, results_path, plots)
    md += _training_sections(output)
    md += _deployment_sections(output)
    md.append(_method_section(results['config'], results['env']))
    text = '\n'.join(md)
    os.makedirs(os.path.dirname(os.path.abspath(output)), exist_ok=True)
    with open(output, 'w') as f:
        f.write(text)
    return text


def _intro_section(results: Dict[str, Any]) -> List[str]:
    """The title and what the numbers are."""
    cfg = results['config']
    md: List[str] = []
    md.append('# Benchmarks\n')
    md.append('What the minimal variants of *Reducing the Transformer Architecture to a Minimum* buy in compute, '
              'measured by `timm_minimal.tools.benchmark` (`python scripts/benchmark.py` or `timm-minimal-benchmark`). '
              'Every number below comes from the one run described in *Setup*; *Method* says how each is measured.'
              + (' **Quick smoke-test run: the numbers are not meaningful.**' if cfg.get('quick') else '') + '\n')
    md.append('Ratios are medians over repeats of a ratio taken *within* each repeat, followed by a 95% bootstrap '
              'confidence interval of that median in parentheses: on a loaded machine single timings scatter '
              'widely, and the interval says how far a median can be trusted.\n')
    return md


def _setup_section(results: Dict[str, Any]) -> List[str]:
    """The machine, versions and settings of the run."""
    env, cfg = results['env'], results['config']
    geo = geometry(cfg['dataset'])
    md: List[str] = []
    md.append('## Setup\n')
    if 'busy_cores_at_start' in env:  # measured at the start of the run
        busy = env['busy_cores_at_start']
        shared = f' (other work kept {busy} of them busy at the start)' if busy else ' (no other work at the start)'
    else:  # a run from before that was measured: the small machines it ran on were shared
        shared = ' (shared with other jobs while measuring)' if (env.get('cpu_count') or 99) <= 4 else ''
    setup = [
        ('device', env['device'] + (f' ({env["gpu"]})' if env.get('gpu') else '')),
        ('CPU', f'{env["cpu"]}, {env["cpu_count"]} cores{shared}'),
        *([('CPU flags', env['cpu_flags'] or 'none of avx, amx, fma, sse4')] if 'cpu_flags' in env else []),
        ('torch threads', f'{env["threads"]} (`torch.set_num_threads`)'),
        ('clock', _clock_text(env, results)),
        ('torch / timm / Python', f'{env["torch"]} / {env["timm"]} / {env["python"]}'),
        ('dtype', env['dtype']),
        ('geometry', f'`.{cfg["dataset"]}`: {geo["in_chans"]}x{geo["img_size"]}x{geo["img_size"]} images, '
                     f'{geo["patch_size"]}x{geo["patch_size"]} patches, {geo["tokens"]} tokens; width 60, MLP 256'),
        ('batch size', f'{cfg["batch_size"]} (ours against timm also 1; scaling: '
                       f'{cfg["scaling_tokens_per_batch"]} tokens per batch)'),
        ('repeats', f'{cfg["repeats"]} timed repeats of about {cfg["target_time"]} s per model after '
                    f'{cfg["warmup"]} warm-up step(s) and a calibration step; ours against timm: '
                    f'{cfg["timm_pairs"]} repeats; scaling: {cfg["scaling_repeats"]}'),
        ('date', env['date']),
        ('wall time of the run', f'{env.get("wall_time_s", float("nan")):.0f} s'),
    ]
    if cfg.get('command'):
        setup.append(('command', f'`{cfg["command"]}`'))
    md.append(_table(['', ''], [[a, b] for a, b in setup], 'll') + '\n')
    return md


def _drift_note(results: Dict[str, Any]) -> str:
    """How far the baseline's absolute throughput moved between two sections of the same run."""
    by_key = {r['key']: r for r in results.get('models', [])}
    for e in results.get('timm', []):
        base = by_key.get(e['ours'])
        if base is not None and 'infer' in e and e['batch_size'] == base.get('batch_size'):
            return (f' (in this run the baseline\'s inference measured {_fmt_tp(median(base["infer"]))} img/s here '
                    f'and {_fmt_tp(median(e["infer"]["ours"]))} img/s in the comparison with timm below)')
    return ''


def _clock_text(env: Dict[str, Any], results: Dict[str, Any]) -> str:
    if env.get('clock') != 'cpu':
        return 'wall time (`time.perf_counter`)'
    shares = [median(r['infer_wall']) / median(r['infer']) for r in results.get('models', []) if r.get('infer_wall')]
    shares += [median(r['train_wall']) / median(r['train']) for r in results.get('models', []) if r.get('train_wall')]
    text = ('process CPU time (`time.process_time`): throughput per second of CPU time the benchmark got, which '
            'leaves out the time the scheduler gave to other jobs on the shared cores (see *Method*)')
    if shares:
        text += (f'; wall-clock throughput was {median(shares):.0%} of it (median over models), so the machine '
                 f'gave this run about {median(shares):.0%} of a core')
    return text


def _per_model_section(results: Dict[str, Any]) -> List[str]:
    """Size, FLOPs, throughput and memory of every model with SDPA on."""
    cfg, models = results['config'], results.get('models', [])
    has_mem = _has_memory(models)
    refs = [r for r in models if r['fused'] and r['name'] == TIMM_REF]
    md: List[str] = []
    md.append('## Per model\n')
    md.append(f'Batch {cfg["batch_size"]}, SDPA on. Throughput: images/s, median over repeats. FLOPs: one forward '
              'of one image, matrix products only. "infer GFLOP/s" is FLOPs x inference throughput: how busy the '
              'model keeps the CPU. Memory: peak working memory of one step in MiB, above the weights '
              '(see *Method*). Absolute throughputs come from different blocks and drift with the load on the '
              'machine' + _drift_note(results) + '; compare models through the ratios of the next table, which '
              'pair measurements taken together.\n')
    header = ['model', 'attention', 'MLP', 'params', 'fwd MFLOPs/img', 'infer img/s', 'train img/s', 'infer GFLOP/s']
    if has_mem:
        header += ['infer mem MiB', 'train mem MiB']
    rows = []
    for r in _minimal(models) + refs:
        fl = r['flops'] / 1e6
        row = [_name_cell(r), ATTN_DESCRIPTION[r['attn']] if r['name'] != TIMM_REF else 'timm `Attention`',
               'yes' if r['mlp'] else 'no', _fmt_int(r['params']), _fmt(fl, 2),
               _fmt_tp(median(r['infer'])), _fmt_tp(median(r['train'])), _fmt(fl * median(r['infer']) / 1e3, 2)]
        if has_mem:
            row += [_fmt(r.get('mem_infer'), 1), _fmt(r.get('mem_train'), 1)]
        rows.append(row)
    md.append(_table(header, rows, 'lll' + 'r' * (len(header) - 3)) + '\n')
    return md


def _baseline_section(results: Dict[str, Any], plots: Optional[_Plots]) -> List[str]:
    """Every minimal variant against the paper's baseline of its depth: sizes, FLOPs and speed-ups."""
    models = results.get('models', [])
    by_key = {r['key']: r for r in models}
    has_mem = _has_memory(models)
    md: List[str] = []
    speedups = []
    rows = []
    for r in _minimal(models):
        b = by_key.get(r['baseline'])
        if b is None or r['key'] == b['key']:
            continue
        inf = ratios(r['infer'], _paired(r, b, 'infer'))
        tr = ratios(r['train'], _paired(r, b, 'train'))
        speedups.append(dict(label=_label(r), flops=r['flops'] / b['flops'], params=r['params'] / b['params'],
                             infer=median(inf), train=median(tr)))
        row = [f'`{_label(r)}`', _fmt(r['params'] / b['params'], 3), _fmt(r['flops'] / b['flops'], 3),
               _fmt(b['flops'] / r['flops'], 2), _ratio_cell(inf), _ratio_cell(tr)]
        if has_mem:
            row.append(_fmt(r['mem_train'] / b['mem_train'], 2) if b.get('mem_train') else 'n/a')
        rows.append(row)
    if not rows:
        return md
    md.append('## Minimal variants against the paper\'s baseline\n')
    md.append('Each variant against `std_mlp` (unchanged attention with MLP, 1 head) of the same depth and '
              'geometry, from the same repeats. Parameters and FLOPs: variant / baseline. "FLOP-predicted" is '
              'baseline FLOPs / variant FLOPs, the speed-up if time followed FLOPs; the measured speed-ups are '
              'throughput ratios (> 1: faster than the baseline).\n')
    header = ['model', 'params ×', 'FLOPs ×', 'FLOP-predicted speed-up', 'infer speed-up', 'train speed-up']
    if has_mem:
        header.append('train mem ×')
    md.append(_table(header, rows) + '\n')
    if plots:
        md.append(plots.add('speedup_vs_flops.png', 'speed-up against FLOP reduction', plot_speedups, speedups))
    return md


def _timm_section(results: Dict[str, Any]) -> List[str]:
    """Implementation overhead: our baseline against timm's VisionTransformer computing the same function."""
    if not results.get('timm'):
        return []
    geo = geometry(results['config']['dataset'])
    md: List[str] = []
    md.append('## Implementation overhead: ours against timm\'s VisionTransformer\n')
    t0 = results['timm'][0]
    md.append(
        f'`vit_minimal_std_mlp_{t0["depth"]}x1` against `timm.models.vision_transformer.VisionTransformer(img_size='
        f'{geo["img_size"]}, patch_size={geo["patch_size"]}, in_chans={geo["in_chans"]}, num_classes={geo["num_classes"]}, '
        f'embed_dim=60, depth={t0["depth"]}, num_heads=1, mlp_ratio=256/60, class_token=False, '
        'global_pool=\'avg\', final_norm=False, fc_norm=False)`: the same patch embedding, pre-norm blocks with '
        'a fused `qkv` and `proj`, MLP 60-256-60 with GELU, average pooling, no final norm, linear head. '
        'What differs: timm has no fixed sin-cos position embedding, so its learned `pos_embed` is filled with '
        f'our sin-cos table and frozen. Both then add the same constant and train the same '
        f'{_fmt_int(t0["params_ours"])} parameters (timm holds {_fmt_int(t0["params_ref_total"])} including the '
        f'frozen {_fmt_int(t0["params_ref_total"] - t0["params_ref"])}-entry table), and with our weights loaded '
        f'into timm\'s model the logits agree to {t0["max_abs_diff"]:.1e}: the same function. The code paths '
        'differ: timm splits heads with `reshape(B, N, 3, H, D).permute(2, 0, 3, 1, 4).unbind(0)` and calls '
        'identity `q_norm`/`k_norm`/`LayerScale`/`DropPath`/patch-drop/pre-norm modules; ours splits with '
        '`chunk` and checks the input shape.\n')
    md.append('The three models (ours, timm, a second copy of ours) are measured in turn within each repeat. '
              '"ours / timm" is the overhead measurement (target: ≥ 0.95, at most 5% slower); "ours / ours" '
              'compares two identical models and shows how large a ratio the noise alone produces.\n')
    rows = []
    for e in results['timm']:
        for mode in ('infer', 'train'):
            if mode not in e:
                continue
            depths = {x['depth'] for x in results['timm']}
            rows.append([(f'depth {e["depth"]}, ' if len(depths) > 1 else '')
                         + f'{"inference" if mode == "infer" else "training"}, batch {e["batch_size"]}',
                         _fmt_tp(median(e[mode]['ours'])), _fmt_tp(median(e[mode]['ref'])),
                         _ratio_cell(ratios(e[mode]['ours'], e[mode]['ref'])),
                         _ratio_cell(ratios(e[mode]['ours'], e[mode]['copy'])) if 'copy' in e[mode] else 'n/a'])
    md.append(_table(['measurement (SDPA on)', 'ours img/s', 'timm img/s', 'ours / timm', 'ours / ours (noise)'],
                     rows) + '\n')
    md.extend(_ops_table(e) for e in results['timm'] if 'ops' in e)
    return md


def _ops_table(entry: Dict[str, Any], top: int = 12) -> str:
    """The ops of ten inference forwards of ours and of timm (``--timm-ops``): the ``top`` ops by self time of
    either, each with its calls and self time in both, and the ops that only one of the two calls."""
    ours, ref = entry['ops']['ours'], entry['ops']['ref']
    ranked = sorted(set(ours) | set(ref), key=lambda op: -max(ours.get(op, {}).get('self_ms', 0),
                                                                ref.get(op, {}).get('self_ms', 0)))
    only = sorted(op for op in set(ours) ^ set(ref))

    def cells(side: Dict[str, Dict[str, float]], op: str) -> List[str]:
        return [_fmt_int(side[op]['calls']), f"{side[op]['self_ms']:.1f}"] if op in side else ['-', '-']
    rows = [[f'`{op}`', *cells(ours, op), *cells(ref, op)] for op in ranked[:top]]
    return (f'Ops of ten inference forwards at batch {entry["batch_size"]} (`torch.profiler`, after one unprofiled '
            f'forward), the {top} with the most self time in either model; ops only one model calls: '
            + (', '.join(f'`{op}`' for op in only) or 'none') + '.\n\n'
            + _table(['op', 'ours calls', 'ours self ms', 'timm calls', 'timm self ms'], rows) + '\n')


def _sdpa_section(results: Dict[str, Any]) -> List[str]:
    """Fused SDPA on against the explicit softmax in the same model."""
    models = results.get('models', [])
    off = sorted([r for r in models if not r['fused']], key=_order)
    if not off:
        return []
    geo = geometry(results['config']['dataset'])
    by_key = {r['key']: r for r in models}
    has_mem = _has_memory(models)
    md: List[str] = []
    md.append('## Fused SDPA on against off\n')
    md.append(f'`F.scaled_dot_product_attention` (on) against the explicit `softmax(q k^T) v` (off) in the same '
              f'model, from the same repeats, at {geo["tokens"]} tokens; > 1: SDPA is faster or, for memory, '
              'needs more. The token sweep below shows the same comparison as sequences grow.\n')
    header = ['model', 'infer on / off', 'train on / off']
    if has_mem:
        header.append('train mem on / off')
    rows = []
    for r in off:
        on = by_key[r['key'].replace('[sdpa off]', '')]
        row = [_name_cell(on), _ratio_cell(ratios(_paired(r, on, 'infer'), r['infer'])),
               _ratio_cell(ratios(_paired(r, on, 'train'), r['train']))]
        if has_mem:
            row.append(_fmt(on['mem_train'] / r['mem_train'], 2) if r.get('mem_train') else 'n/a')
        rows.append(row)
    md.append(_table(header, rows) + '\n')
    return md


def _scaling_section(results: Dict[str, Any], plots: Optional[_Plots]) -> List[str]:
    """Throughput and memory as the token count and the depth grow."""
    sc, cfg = results.get('scaling'), results['config']
    if not (sc and (sc.get('tokens') or sc.get('depth'))):
        return []
    geo = geometry(cfg['dataset'])
    md: List[str] = []
    md.append('## Scaling with tokens and depth\n')
    scaling_depth = parse_name(cfg['scaling_models'][0])['depth']
    md.append(f'Both sweeps keep {sc["tokens_per_batch"]:,} tokens per batch (batch = '
              f'{sc["tokens_per_batch"]:,} / tokens), so the linear layers do the same work per step at every '
              'point and what grows is attention (tokens) or the number of blocks (depth). Tokens: the image side '
              f'grows at fixed {geo["patch_size"]}x{geo["patch_size"]} patches, depth {scaling_depth}. Depth: at '
              f'{geo["tokens"]} tokens. "attn share" is the fraction of forward FLOPs in the two attention '
              'products q k^T and a v (4 T^2 N per block). Memory per image is the step\'s peak working memory '
              'divided by the batch.\n')
    for axis in ('tokens', 'depth'):
        pts = sc.get(axis) or []
        if not pts:
            continue
        md.append(f'### {"Token count" if axis == "tokens" else "Depth"}\n')
        md.append(_scaling_table(axis, pts) + '\n')
        if plots:
            md.append(plots.add(f'scaling_{axis}.png', f'scaling with {axis}', plot_scaling, pts, axis))
    return md


def _scaling_table(axis: str, pts: Sequence[Dict[str, Any]]) -> str:
    header = ['model', 'SDPA', axis, 'batch', 'params', 'fwd MFLOPs/img', 'attn share', 'infer img/s',
              'train img/s']
    with_mem = any('mem_train' in p for p in pts)
    if with_mem:
        header += ['infer mem MiB', 'train mem MiB', 'train MiB/img']
    rows = []
    for p in sorted(pts, key=lambda p: (p['name'], not p['fused'], p['value'])):
        attn = 4 * p['tokens'] ** 2 * 60 * p['depth'] / p['flops']
        row = [f'`{_label(p)}`', 'on' if p['fused'] else 'off', str(p['value']), str(p['batch_size']),
               _fmt_int(p['params']), _fmt(p['flops'] / 1e6, 1), f'{attn:.0%}', _fmt_tp(median(p['infer'])),
               _fmt_tp(median(p['train']))]
        if with_mem:
            row += [_fmt(p.get('mem_infer'), 1), _fmt(p.get('mem_train'), 1),
                    _fmt(p['mem_train'] / p['batch_size'], 2) if 'mem_train' in p else 'n/a']
        rows.append(row)
    return _table(header, rows, 'll' + 'r' * (len(header) - 2))


def _accuracy_section(results: Dict[str, Any], results_path: Optional[str], plots: Optional[_Plots]) -> List[str]:
    """The paper's Table 2 and this project's reproduction, when its results exist."""
    cfg = results['config']
    md: List[str] = []
    md.append('## Accuracy against parameters\n')
    repro = load_reproduce_results(results_path) if results_path else None
    if repro:
        md.append(f'The paper\'s Table 2 (MNIST, 6 layers, {PAPER_EPOCHS} epochs) and this project\'s reproduction '
                  f'(`{results_path}`, {len(repro)} runs).\n')
        acc = [r['val_acc'] for r in repro]
        paper_acc = [r.get('paper_val_acc') for r in repro]
        rows = [[f'`{str(r.get("model", "?")).replace("vit_minimal_", "")}`', str(r.get('dataset', '')),
                 str(r.get('epochs', '')), _fmt_int(r['params']),
                 _fmt_int(r['paper_params']) if r.get('paper_params') else '', _fmt(a, 2),
                 _fmt(float(pa), 2) if pa is not None else '']
                for r, a, pa in zip(repro, acc, paper_acc)]
        md.append(_table(['model', 'dataset', 'epochs', 'params', 'paper params', 'val acc %', 'paper val acc %'],
                         rows, 'lll' + 'r' * 4) + '\n')
    else:
        md.append(f'No reproduction results (`{results_path}`) existed when this report was written: the plot '
                  f'shows the paper\'s Table 2 points only (MNIST, 6 layers, {PAPER_EPOCHS} epochs). Rebuild the report and '
                  'plots without measuring again with `timm-minimal-benchmark --from-json '
                  f'{cfg.get("json_path") or "benchmarks/results.json"}` once they exist.\n')
    if plots:
        md.append(plots.add('accuracy_vs_params.png', 'accuracy against parameters', plot_accuracy, repro))
    return md


def _included_reports(output: str, pattern: str, heading: str) -> List[str]:
    """Reports another benchmark wrote beside the results (``benchmarks/<pattern>``), one subsection each,
    under a section of their own with ``heading`` (title line and introduction)."""
    folder = os.path.join(os.path.dirname(os.path.abspath(output)), 'benchmarks')
    files = sorted(glob.glob(os.path.join(folder, pattern)))
    if not files:
        return []
    md = [heading]
    for path in files:
        with open(path) as f:
            lines = f.read().strip().splitlines()
        md.append('\n'.join('#' + line if line.startswith('#') else line for line in lines) + '\n')
    return md


def _training_sections(output: str) -> List[str]:
    """The training benchmark's reports (``benchmarks/training*.md``, by ``timm-minimal-benchmark training``)."""
    return _included_reports(output, 'training*.md', (
        '## Training speed: the trainer against the bare step\n\n'
        'Written by `timm-minimal-benchmark training` (`timm_minimal/tools/benchmark/training.py`), one report per '
        'device; the raw numbers are in the JSON file of the same name.\n'))


def _deployment_sections(output: str) -> List[str]:
    """The deployment benchmark's reports (``benchmarks/deployment*.md``, by ``timm-minimal-benchmark deployment``)."""
    return _included_reports(output, 'deployment*.md', (
        '## Deployment: onnxruntime fp32 and int8 against torch eager\n\n'
        'Written by `timm-minimal-benchmark deployment` (`timm_minimal/tools/benchmark/deployment.py`), one report '
        'per device; the raw numbers are in the JSON file of the same name.\n'))


def _method_section(cfg: Dict[str, Any], env: Dict[str, Any]) -> str:
    """How each number is measured."""
    clock, memory = _clock_method(env), _memory_method(cfg)
    return f"""## Method

- **Throughput**: images per second over back-to-back steps, their number calibrated per model after warm-up so
  that one timed repeat lasts about the target time (at least one step). Inference: `model.eval()` under
  `torch.inference_mode()`. Training: `zero_grad(set_to_none=True)`, forward, cross-entropy, backward and an
  AdamW step (lr 1e-3, weight decay 1e-4). Random inputs and labels.
{clock}- **Interleaving**: the models are measured in blocks: the baseline of the block's depth plus up to
  {cfg.get('block_size', 3)} other models (a model with SDPA on and off always in the same block). A block's
  models are measured in turn, {cfg['repeats']} rounds, the order rotated each round. Each ratio divides two
  measurements of the same round, a few seconds apart at most, so a background load that slows a round slows
  both sides; the median over rounds is reported. The baseline's own throughput is the median over all its
  rounds. The comparison with timm alternates its three models the same way; the scaling sweeps measure all
  points of a sweep in turn in every round.
- **Intervals**: 95% percentile-bootstrap intervals of the median ratio (2,000 resamples of the rounds, seeded).
- **FLOPs**: `torch.utils.flop_counter.FlopCounterMode` over one forward of one image. It counts matrix products
  (linear layers, the patch-embedding convolution, the `bmm` of the explicit attention and the fused SDPA kernels,
  the CPU kernel `_scaled_dot_product_flash_attention_for_cpu` included) as 2 x multiply-accumulates; softmax,
  LayerNorm, GELU and additions are not counted. SDPA on and off count the same.
{memory}
"""


def _clock_method(env: Dict[str, Any]) -> str:
    """The *Method* paragraph on the clock the throughputs divide by."""
    if env.get('clock') == 'cpu':
        return """- **Clock**: the throughputs divide images by the CPU time of the benchmark process (`time.process_time`,
  which counts every thread of the process; torch runs one thread here), not by wall time. On a machine shared
  with other jobs the wall time of a step also holds the time the scheduler gave to those jobs, which comes
  and goes with their load; CPU time leaves it out and is close to what the wall time would be on an idle
  core. It does not remove every effect of a loaded machine (shared caches, memory bandwidth, a busy
  hyper-thread sibling), hence the interleaving, the repeats and the intervals. The wall-clock throughputs are
  kept in the JSON (`*_wall`); `--clock wall` reports them instead; runs with more than one thread or on CUDA
  use wall time.
"""
    return """- **Clock**: wall time (`time.perf_counter`); on CUDA synchronised before and after the timed steps.
"""


def _memory_method(cfg: Dict[str, Any]) -> str:
    """The *Method* paragraph on the memory measurement of the run's method."""
    rss = cfg.get('memory_method') == 'rss'
    return (
        """- **Memory** (`--memory-method rss`, CPU): peak RSS is a per-process high-water mark, so every model is
  measured in a fresh process, forked from a server that has imported torch and timm once. The child builds the
  model, its optimizer and the input batch and runs one unmeasured step of each kind (lazy initialisation; the
  AdamW state exists afterwards). Then, for inference and for training, it frees what it can (`gc.collect`,
  `malloc_trim`), resets the kernel's peak-RSS counter (`/proc/self/clear_refs`), notes the RSS, runs the measured
  step(s) and reads the peak (`VmHWM`). Peak minus RSS before is the step's working memory, library workspaces
  and allocator slack included; weights, gradients (freed by `zero_grad` and reused) and the AdamW state are
  outside it. Allocator behaviour makes it coarse (a few MiB).""" if rss else
        """- **Memory** (default `--memory-method tensors`): the peak of memory allocated through torch's allocator during
  the measured step, above what was live before it. The step runs after the throughput measurement and one more
  unmeasured step, so gradients and the AdamW state already exist. On CPU the profiler records every allocation
  and free with its size (`torch.profiler.profile(profile_memory=True)`) and the running sum's maximum is the
  peak; on CUDA it is `torch.cuda.max_memory_allocated` minus `torch.cuda.memory_allocated` before the step.
  `zero_grad(set_to_none=True)` frees the old gradients before the backward pass makes new ones, so gradients
  cancel out: what is counted is activations, saved tensors and temporaries inside ops. Not counted: the
  weights, gradients and AdamW state (4 x parameters x 4 bytes: 4.3 MiB for the MNIST baseline) and memory that BLAS
  or oneDNN allocate outside torch. It reproduces to about 1% and does not depend on the allocator, so models
  compare fairly; the process RSS is higher (`--memory-method rss` measures that, one fresh process per
  model).""")


# -- the console -----------------------------------------------------------------------------------

def summary_lines(results: Dict[str, Any]) -> List[str]:
    """The headline ratios in a few lines."""
    lines = []
    by_key = {r['key']: r for r in results.get('models', [])}
    for e in results.get('timm', []):
        for mode in ('infer', 'train'):
            if mode in e:
                rr = ratios(e[mode]['ours'], e[mode]['ref'])
                lines.append(f'ours/timm {mode} (batch {e["batch_size"]}): {_ratio_cell(rr)}'
                             + (f', ours/ours (noise) {_ratio_cell(ratios(e[mode]["ours"], e[mode]["copy"]))}'
                                if 'copy' in e[mode] else ''))
    for r in results.get('models', []):
        b = by_key.get(r.get('baseline') or '')
        if r['fused'] and r['name'] != TIMM_REF and b is not None and b['key'] != r['key']:
            lines.append(f'{_label(r)}: params x{r["params"] / b["params"]:.3f}, FLOPs x{r["flops"] / b["flops"]:.3f}, '
                         f'infer speed-up {_ratio_cell(ratios(r["infer"], _paired(r, b, "infer")))}, '
                         f'train speed-up {_ratio_cell(ratios(r["train"], _paired(r, b, "train")))}')
    return lines
