"""How long a CPU training run takes to start with a new data cache (``--cache-dir``), on a machine that has not
measured its CPU decision yet and on one that has: the seconds from the process start to the run's first line (the
decision taken, the processes started) and to its first logged batch, and the ratio of the two cases, from one run
of this script. Each start is stopped at its first logged batch.

    python scripts/start_time.py --data-dir ../shared/data [--pairs 2] [--output benchmarks/start_time_avx2.md]

Each pair: a new machine cache ($TIMM_MINIMAL_CACHE) and a new --cache-dir (nothing measured, nothing decoded), then
the same machine cache with another new --cache-dir (the decision kept, the data decoded anew).
"""
import argparse
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List

import torch

from timm_minimal.machine import cpu_signature

COMMAND = ['timm-minimal-train', '--model', 'vit_minimal_sym_6x4.cifar10', '--dataset', 'cifar10', '--no-progress',
           '--log-interval', '10']


def one_start(data_dir: str, machine_cache: Path, work: Path, limit: float) -> Dict[str, float]:
    """Seconds from the start to the run's first line (``... parameters; ...``) and to its first logged batch."""
    env = dict(os.environ, TIMM_MINIMAL_CACHE=str(machine_cache))
    out = {}
    t0 = time.perf_counter()
    proc = subprocess.Popen(COMMAND + ['--data-dir', data_dir, '--cache-dir', str(work / 'data-cache'),
                                       '--output', str(work / 'run')], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    try:
        for line in proc.stdout:
            now = time.perf_counter() - t0
            if ' -> ' in line or 'measured before how' in line:  # the decision measured, or the one kept
                out.setdefault('decision', line.strip().replace(str(machine_cache), '<machine cache>')[:240])
            if ' parameters; ' in line:
                out.setdefault('run_start_s', now)
            if ' batch ' in line and 'epoch 1 ' in line:
                out['first_batches_s'] = now
                break
            if now > limit:
                break
    finally:
        proc.terminate()
        proc.wait()
    if 'first_batches_s' not in out:
        sys.exit(f'the run logged no batch within {limit:.0f} s')
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--data-dir', required=True)
    parser.add_argument('--pairs', type=int, default=1)
    parser.add_argument('--limit', type=float, default=600.0, help='seconds one start may take')
    parser.add_argument('--output', type=Path)
    args = parser.parse_args()
    times: Dict[str, List[Dict[str, float]]] = {'new machine': [], 'machine measured before': []}
    t_all = time.perf_counter()
    for _ in range(args.pairs):
        with tempfile.TemporaryDirectory() as tmp:
            machine = Path(tmp) / 'machine-cache'
            for case in times:
                work = Path(tempfile.mkdtemp(dir=tmp))
                times[case].append(one_start(args.data_dir, machine, work, args.limit))
    sig = cpu_signature()
    rows = ['| case | to the run\'s first line (s) | to its first logged batch (s) |', '| :--- | ---: | ---: |']
    med = {}
    for case, runs in times.items():
        med[case] = {k: statistics.median(r[k] for r in runs) for k in ('run_start_s', 'first_batches_s')}
        rows.append(f'| {case} | {med[case]["run_start_s"]:.1f} | {med[case]["first_batches_s"]:.1f} |')
    ratio = med['new machine']['run_start_s'] / med['machine measured before']['run_start_s']
    text = '\n'.join([
        '# Start of a CPU training run with a new data cache', '',
        f'Command: `{" ".join(COMMAND)} --data-dir <data> --cache-dir <new> --output <new>`, stopped at its first '
        f'logged batch; {args.pairs} pair(s), medians. CPU: {sig.get("cpu", platform.processor())}, flags '
        f'{sig.get("flags", "")}, {sig.get("cores", os.cpu_count())} cores; torch {torch.__version__}, Python '
        f'{platform.python_version()}; {time.strftime("%Y-%m-%d")}; this script: '
        f'{time.perf_counter() - t_all:.0f} s.', '', *rows, '',
        f'The run starts {ratio:.2f}x sooner where the machine measured its decision before.', '',
        'The decisions: ' + '; '.join(f'{case}: {r.get("decision", "none said")}' for case, runs in times.items()
                                      for r in runs[:1]), ''])
    print(text)
    if args.output:
        args.output.write_text(text)


if __name__ == '__main__':
    main()
